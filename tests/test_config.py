"""``[tool.ddpify]`` in pyproject.toml: where it is found, what it sets, how the command line wins, and bad files.

The converter and the verification run are replaced through their seams
(``ddpify.cli.backend``) by fakes that record what they were asked, so that
each test sees the options a configuration led to. Every test runs in its own
folder, with no pyproject.toml above it but the ones it writes.
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest

from ddpify import cli
from ddpify.cli import backend
from ddpify.cli import run as run_module
from ddpify.cli.config import KEYS, VERIFY_KEYS
from ddpify.cli.exits import ExitCode
from ddpify.cli.request import Request
from ddpify.result import Conversion, Options, Status
from ddpify.verify import CHECK_NAMES, Check, RankReport, VerifyReport

ROOT = Path(__file__).resolve().parents[1]
# A training step (a backward pass), so that a folder search takes the file for a training script.
SOURCE = b"import torch\n\nmodel = Net()\nmodel(x).sum().backward()\n"
CONVERTED = b"import torch\n\nmodel = DDP(Net())\nmodel(x).sum().backward()\n"


@pytest.fixture(autouse=True)
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")
    return tmp_path


@pytest.fixture
def options(monkeypatch) -> list[Options]:
    """The options of every conversion, in order."""
    seen: list[Options] = []

    def convert(source: bytes, *, path: str, options: Options, modules: object = ()) -> Conversion:
        seen.append(options)
        return Conversion(source, source.replace(b"model = Net()", b"model = DDP(Net())"), Status.CONVERTED)

    monkeypatch.setattr(backend, "convert", convert)
    return seen


@pytest.fixture
def requests(monkeypatch) -> list[Request]:
    """The requests the command line and the configuration made, none carried out."""
    seen: list[Request] = []

    def run(request: Request) -> ExitCode:
        seen.append(request)
        return ExitCode.OK

    monkeypatch.setattr(run_module, "run", run)
    return seen


@pytest.fixture
def verified(monkeypatch) -> list[dict[str, object]]:
    calls: list[dict[str, object]] = []

    def verify(script: Path, **settings: object) -> VerifyReport:
        calls.append(settings)
        return VerifyReport(
            script=str(script),
            nproc=2,
            command=("torchrun",),
            max_steps=None,
            returncode=0,
            timed_out=False,
            duration_s=1.0,
            ranks=tuple(RankReport(rank, "ok", 4, "c0", f"{rank}b", (), True, None) for rank in (0, 1)),
            checks=tuple(Check(name, True, "holds") for name in CHECK_NAMES),
            output="",
        )

    monkeypatch.setattr(backend, "verify", verify)
    return calls


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def script(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(SOURCE)
    return path


# -- where it is found ------------------------------------------------------------------------------


def test_the_nearest_pyproject_with_the_table_is_read_walking_up_from_the_input(workdir, options, capsys):
    write(workdir / "pyproject.toml", "[project]\nname = 'demo'\n\n[tool.ddpify]\nsync-bn = true\n")
    write(workdir / "src" / "pyproject.toml", "[tool.black]\nline-length = 100\n")  # no table: passed over
    script(workdir / "src" / "jobs" / "train.py")

    assert cli.main(["src/jobs/train.py", "--diff"]) == 0

    assert options == [Options(sync_batchnorm=True)]
    assert "config: [tool.ddpify] of pyproject.toml" in capsys.readouterr().err.splitlines()


def test_without_a_table_nothing_is_configured_and_nothing_is_said(workdir, options, capsys):
    write(workdir / "pyproject.toml", "[project]\nname = 'demo'\n")
    script(workdir / "train.py")

    assert cli.main(["train.py", "--diff"]) == 0

    assert options == [Options()]
    assert "config" not in capsys.readouterr().err


def test_stdin_starts_the_search_in_the_current_folder(workdir, options, monkeypatch, capsysbinary):
    write(workdir / "pyproject.toml", "[tool.ddpify]\nkeep-global-batch = true\noutput = 'out'\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(SOURCE)))

    assert cli.main(["-"]) == 0

    assert options == [Options(keep_global_batch=True)]
    assert capsysbinary.readouterr().out == CONVERTED  # stdin goes to stdout, whatever output says
    assert not (workdir / "out").exists()


def test_config_names_the_file_and_no_config_reads_none(workdir, options, capsys):
    write(workdir / "pyproject.toml", "[tool.ddpify]\nsync-bn = true\n")
    write(workdir / "ci" / "ddpify.toml", "[tool.ddpify]\nshard-eval = true\n")
    script(workdir / "train.py")

    assert cli.main(["train.py", "--diff", "--config", "ci/ddpify.toml"]) == 0
    assert cli.main(["train.py", "--diff", "--no-config"]) == 0

    assert options == [Options(shard_eval=True), Options()]
    assert "config: [tool.ddpify] of ci/ddpify.toml" in capsys.readouterr().err


def test_a_config_file_without_the_table_is_refused(workdir, options, capsys):
    write(workdir / "other.toml", "[tool.black]\n")
    script(workdir / "train.py")

    assert cli.main(["train.py", "--config", "other.toml"]) == 2
    assert capsys.readouterr().err == "error: other.toml: no [tool.ddpify] table\n"
    assert cli.main(["train.py", "--config", "missing.toml"]) == 2
    assert options == []


# -- what it sets, and the command line winning ------------------------------------------------------


def test_every_conversion_switch_and_the_command_line_that_turns_it_back(workdir, options):
    keys = ("keep-global-batch", "sync-bn", "find-unused-parameters", "shard-eval", "strict", "spawn")
    write(workdir / "pyproject.toml", "[tool.ddpify]\n" + "".join(f"{key} = true\n" for key in keys))
    script(workdir / "train.py")
    everything = Options(
        keep_global_batch=True,
        sync_batchnorm=True,
        find_unused_parameters=True,
        shard_eval=True,
        strict=True,
        spawn=True,
    )

    assert cli.main(["train.py", "--diff"]) == 0
    assert cli.main(["train.py", "--diff", *(f"--no-{key}" for key in keys)]) == 0
    assert cli.main(["train.py", "--diff", "--no-sync-bn"]) == 0

    assert options == [everything, Options(), Options(**{**vars(everything), "sync_batchnorm": False})]


def test_a_flag_turns_on_what_the_file_turns_off(workdir, options):
    write(workdir / "pyproject.toml", "[tool.ddpify]\nkeep-global-batch = false\n")
    script(workdir / "train.py")

    assert cli.main(["train.py", "--diff", "--keep-global-batch"]) == 0

    assert options == [Options(keep_global_batch=True)]


def test_output_is_a_folder_beside_the_file_and_the_command_line_places_outputs_otherwise(workdir, options, capsys):
    write(workdir / "pyproject.toml", "[tool.ddpify]\noutput = 'build/ddp'\n")
    script(workdir / "jobs" / "train.py")

    assert cli.main(["jobs/train.py"]) == 0
    assert (workdir / "build" / "ddp" / "train.py").read_bytes() == CONVERTED
    assert cli.main(["jobs/train.py", "--check"]) == 0  # --check needs no -o: the file says where
    assert cli.main(["jobs/train.py", "-o", "mine.py"]) == 0
    assert cli.main(["jobs/train.py", "--suffix", "_dist"]) == 0
    capsys.readouterr()
    assert cli.main(["jobs/train.py", "-o", "-"]) == 0

    assert capsys.readouterr().out == CONVERTED.decode()
    assert (workdir / "mine.py").read_bytes() == CONVERTED
    assert (workdir / "jobs" / "train_dist.py").read_bytes() == CONVERTED


def test_output_is_resolved_against_the_folder_of_the_file(workdir, options, monkeypatch):
    write(workdir / "pyproject.toml", "[tool.ddpify]\noutput = 'out/'\n")
    script(workdir / "jobs" / "train.py")
    monkeypatch.chdir(workdir / "jobs")

    assert cli.main(["train.py"]) == 0

    assert (workdir / "out" / "train.py").read_bytes() == CONVERTED
    assert not (workdir / "jobs" / "out").exists()


def test_suffix_names_the_outputs_of_a_folder(workdir, options):
    write(workdir / "pyproject.toml", "[tool.ddpify]\nsuffix = '_dist'\n")
    script(workdir / "src" / "a.py")
    script(workdir / "src" / "b.py")

    assert cli.main(["src", "-j", "1"]) == 0

    assert sorted(p.name for p in (workdir / "src").iterdir()) == ["a.py", "a_dist.py", "b.py", "b_dist.py"]


def test_extend_exclude_adds_globs_to_the_folders_a_search_skips(workdir, options):
    write(workdir / "pyproject.toml", "[tool.ddpify]\nextend-exclude = ['src/legacy/', '*_old.py']\n")
    for name in ("train.py", "train_old.py", "legacy/a.py", "more/legacy/b.py", "build/c.py"):
        script(workdir / "src" / name)

    assert cli.main(["src", "-j", "1"]) == 0

    written = sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*_ddp.py"))
    # src/legacy is skipped by its path, *_old.py by its name; build/ stays skipped by default.
    assert written == ["src/more/legacy/b_ddp.py", "src/train_ddp.py"]


def test_exclude_replaces_the_default_folders(workdir, options):
    write(workdir / "pyproject.toml", "[tool.ddpify]\nexclude = ['scratch']\n")
    for name in ("train.py", "build/gen.py", "scratch/try.py"):
        script(workdir / "src" / name)

    assert cli.main(["src", "-j", "1"]) == 0

    written = sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*_ddp.py"))
    assert written == ["src/build/gen_ddp.py", "src/train_ddp.py"]


def test_excludes_do_not_apply_to_files_named_on_the_command_line(workdir, options):
    write(workdir / "pyproject.toml", "[tool.ddpify]\nextend-exclude = ['*_old.py']\n")
    script(workdir / "train_old.py")

    assert cli.main(["train_old.py", "--suffix", "_ddp"]) == 0

    assert (workdir / "train_old_ddp.py").is_file()


def test_jobs_and_the_command_line_jobs(workdir, requests):
    write(workdir / "pyproject.toml", "[tool.ddpify]\njobs = 3\n")
    script(workdir / "train.py")

    assert cli.main(["train.py"]) == 0
    assert cli.main(["train.py", "-j", "1"]) == 0

    assert [request.jobs for request in requests] == [3, 1]
    assert requests[0].config == "pyproject.toml"


def test_verify_settings_serve_a_verification_and_only_one(workdir, requests):
    write(workdir / "pyproject.toml", "[tool.ddpify.verify]\nnproc = 3\ntimeout = 90\nmax-steps = 5\n")
    script(workdir / "train.py")

    assert cli.main(["train.py", "-o", "out.py"]) == 0
    assert cli.main(["train.py", "-o", "out.py", "--verify"]) == 0
    assert cli.main(["train.py", "-o", "out.py", "--verify", "--nproc", "2", "--max-steps", "9"]) == 0

    settings = [(request.nproc, request.timeout, request.max_steps) for request in requests]
    assert settings == [(None, None, None), (3, 90, 5), (2, 90, 9)]


def test_the_verify_subcommand_reads_the_verify_settings(workdir, verified, capsys):
    write(workdir / "pyproject.toml", "[tool.ddpify.verify]\nnproc = 4\ntimeout = 12.5\n")
    script(workdir / "train_ddp.py")

    assert cli.main(["verify", "train_ddp.py", "--max-steps", "3"]) == 0
    assert cli.main(["verify", "train_ddp.py", "--no-config"]) == 0

    assert [(call["nproc"], call["timeout"], call["max_steps"]) for call in verified] == [
        (4, 12.5, 3),
        (2, 300.0, None),
    ]
    assert "config: [tool.ddpify] of pyproject.toml" in capsys.readouterr().err


# -- bad configuration: exit 2, file:line and the key, nothing read or written -------------------------


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            "[tool.ddpify]\nsync-bn = true\nsync_bn = true\n",
            "pyproject.toml:3: [tool.ddpify] unknown key 'sync_bn'; did you mean 'sync-bn'?",
        ),
        (
            "[tool.ddpify]\nfrobnicate = 1\n",
            "pyproject.toml:2: [tool.ddpify] unknown key 'frobnicate'; known keys: keep-global-batch, sync-bn, "
            "find-unused-parameters, shard-eval, strict, spawn, output, suffix, exclude, extend-exclude, jobs, verify",
        ),
        (
            "[tool.ddpify]\nsync-bn = 'yes'\n",
            "pyproject.toml:2: [tool.ddpify] sync-bn must be true or false, not 'yes'",
        ),
        ("[tool.ddpify]\n\njobs = 0\n", "pyproject.toml:3: [tool.ddpify] jobs must be an integer of at least 1, not 0"),
        (
            "[tool.ddpify]\njobs = true\n",
            "pyproject.toml:2: [tool.ddpify] jobs must be an integer of at least 1, not true",
        ),
        (
            "[tool.ddpify]\nexclude = 'build'\n",
            "pyproject.toml:2: [tool.ddpify] exclude must be a list of glob strings, not 'build'",
        ),
        (
            "[tool.ddpify]\nsuffix = '.py'\n",
            "pyproject.toml:2: [tool.ddpify] suffix must be a part of a file name, such as \"_ddp\", not '.py'",
        ),
        (
            "[tool.ddpify]\noutput = 'out'\nsuffix = '_x'\n",
            "pyproject.toml:3: [tool.ddpify] sets both output and suffix; keep one: output names a folder for the "
            "outputs, suffix writes each next to its input",
        ),
        (
            "[tool.ddpify]\njobs = 2\n\n[tool.ddpify.verify]\nnproc = 1\n",
            "pyproject.toml:5: [tool.ddpify.verify] nproc must be an integer of at least 2, not 1",
        ),
        (
            "[tool.ddpify.verify]\ntimeout = 'long'\n",
            "pyproject.toml:2: [tool.ddpify.verify] timeout must be a number of seconds above 0, not 'long'",
        ),
        (
            "[tool.ddpify.verify]\nmax_steps = 3\n",
            "pyproject.toml:2: [tool.ddpify.verify] unknown key 'max_steps'; did you mean 'max-steps'?",
        ),
        ("[tool.ddpify]\nverify = 2\n", "pyproject.toml:2: [tool.ddpify] verify must be a table"),
        ("[tool]\nddpify = 3\n", "pyproject.toml:2: [tool.ddpify] must be a table"),
        ("[tool]\nddpify.jobs = -1\n", "pyproject.toml:2: [tool.ddpify] jobs must be an integer of at least 1, not -1"),
        ("[tool.ddpify]\nsync-bn = \n", "pyproject.toml:2: not valid TOML: Invalid value"),
        ("[tool.ddpify]\nsync-bn = true\nsync-bn = false\n", "pyproject.toml:3: not valid TOML: "),
        ("[tool.ddpify\n", "pyproject.toml:1: not valid TOML: "),
    ],
    ids=lambda value: re.sub(r"\W+", "-", value)[:40],
)
def test_bad_configuration_exits_2_naming_the_line_and_the_key(workdir, options, capsys, toml, message):
    write(workdir / "pyproject.toml", toml)
    script(workdir / "train.py")

    code = cli.main(["train.py", "-o", "train_ddp.py"])

    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"error: {message}"), err
    assert err.count("\n") == 1
    assert options == []  # nothing converted, so nothing read past the configuration
    assert sorted(p.name for p in workdir.iterdir()) == ["pyproject.toml", "train.py"]


def test_a_pyproject_that_is_not_toml_stops_the_search(workdir, options, capsys):
    write(workdir / "pyproject.toml", "this is not toml\n")
    script(workdir / "train.py")

    assert cli.main(["train.py", "--diff"]) == 2
    assert capsys.readouterr().err.startswith("error: pyproject.toml:1: not valid TOML")
    assert cli.main(["train.py", "--diff", "--no-config"]) == 0


# -- documentation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [*KEYS, *(f"verify.{key}" for key in VERIFY_KEYS)])
def test_readme_documents_every_key(key):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Configuration\n", 1)[1].split("\n## ", 1)[0]
    name = key.removeprefix("verify.")
    assert f"`{name}`" in section, key
    if key.startswith("verify."):
        assert "[tool.ddpify.verify]" in section


@pytest.mark.parametrize("where", ["../elsewhere/", "ABSOLUTE", "link/"], ids=["above", "absolute", "symlink-out"])
def test_an_output_outside_the_project_is_refused_unless_the_command_line_places_the_outputs(
    where, workdir, options, capsys
):
    project = workdir / "project"
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    (project / "link").parent.mkdir()
    (project / "link").symlink_to(elsewhere)
    output = str(elsewhere) + "/" if where == "ABSOLUTE" else where
    write(project / "pyproject.toml", f"[tool.ddpify]\nsync-bn = true\noutput = {output!r}\n")
    script(project / "train.py")

    assert cli.main(["project/train.py"]) == 2

    err = capsys.readouterr().err
    assert err.startswith(f"error: project/pyproject.toml:3: [tool.ddpify] output {output!r} leads outside the project")
    assert err.rstrip().endswith(
        "a configuration file may only write inside its project: change it, or give -o on the command line"
    )
    assert list(elsewhere.iterdir()) == []
    assert options == []
    assert cli.main(["project/train.py", "-o", "mine.py"]) == 0
    assert (workdir / "mine.py").read_bytes() == CONVERTED
    assert list(elsewhere.iterdir()) == []

"""``ddpify --verify`` for real, and the CI recipes of docs/ci.md run through ``main()``.

One torchrun run (it costs seconds): a bundled example converted and verified
end to end.  The recipes are taken from the files users copy, so that a hook
or a documented command line that no longer works fails here: the hook's
``entry`` from ``.pre-commit-hooks.yaml``, its ``args`` and the workflow's
commands from the YAML blocks of ``docs/ci.md``.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
import yaml  # a dependency of libcst

from ddpify import __version__, cli
from ddpify.cli import backend
from ddpify.verify import CHECK_NAMES, Check, VerifyReport

ROOT = Path(__file__).parents[1]
EXAMPLES = ROOT / "examples"
HOOKS = ROOT / ".pre-commit-hooks.yaml"
CI_DOC = ROOT / "docs" / "ci.md"


def yaml_blocks(markdown: Path) -> list[object]:
    """Every ```yaml block of a Markdown file, loaded."""
    return [yaml.safe_load(block) for block in re.findall(r"^```yaml\n(.*?)^```$", markdown.read_text(), re.M | re.S)]


def hook(hook_id: str) -> dict[str, object]:
    (found,) = (entry for entry in yaml.safe_load(HOOKS.read_text()) if entry["id"] == hook_id)
    return found


def documented_hook_args(hook_id: str) -> list[str]:
    """The ``args`` docs/ci.md's .pre-commit-config.yaml gives the hook."""
    (config,) = (block for block in yaml_blocks(CI_DOC) if isinstance(block, dict) and "repos" in block)
    (repo,) = config["repos"]
    assert repo["rev"] == f"v{__version__}"
    (found,) = (entry for entry in repo["hooks"] if entry["id"] == hook_id)
    args = found["args"]
    assert all(isinstance(arg, str) for arg in args), "pre-commit passes strings only: quote numbers"
    return args


def documented_commands() -> list[list[str]]:
    """The ``ddpify`` command lines of docs/ci.md's GitHub Actions job, without the program name."""
    (workflow,) = (block for block in yaml_blocks(CI_DOC) if isinstance(block, dict) and "jobs" in block)
    (job,) = workflow["jobs"].values()
    runs = [shlex.split(step["run"]) for step in job["steps"] if "run" in step]
    return [argv[1:] for argv in runs if argv[0] == "ddpify"]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's repository: train.py (a bundled example) and the train_ddp.py ddpify made of it."""
    shutil.copy(EXAMPLES / "regression.py", tmp_path / "train.py")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train.py", "-o", "train_ddp.py", "-q"]) == 0
    return tmp_path


@pytest.mark.torchrun
def test_verify_converts_an_example_and_proves_it_trains_data_parallel(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    shutil.copy(EXAMPLES / "regression.py", tmp_path / "regression.py")
    monkeypatch.chdir(tmp_path)

    code = cli.main(["regression.py", "-o", "regression_ddp.py", "--verify", "--max-steps", "5"])

    captured = capsys.readouterr()
    assert code == 0, f"{captured.out}\n{captured.err}"
    table = captured.out.splitlines()
    assert table[0].split()[:3] == ["rank", "status", "steps"]
    assert [row.split()[:3] for row in table[1:3]] == [["0", "max-steps", "5"], ["1", "max-steps", "5"]]
    assert table[-1] == f"ok: all {len(CHECK_NAMES)} checks passed ({', '.join(CHECK_NAMES)})"
    assert (
        captured.err.splitlines()[-1] == f"regression_ddp.py trains in data-parallel: {len(CHECK_NAMES)} checks passed"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["regression.py", "regression_ddp.py"]


def test_pre_commit_check_hook_passes_on_a_current_output_and_fails_on_a_stale_one(project, capsys):
    manifest = hook("ddpify-check")
    assert (manifest["language"], manifest["pass_filenames"], manifest["require_serial"]) == ("python", False, True)
    program, *mode = shlex.split(manifest["entry"])
    argv = [*mode, *documented_hook_args("ddpify-check")]
    assert program == "ddpify"

    assert cli.main(argv) == 0
    assert capsys.readouterr() == ("", "train_ddp.py is up to date\n")

    with (project / "train.py").open("a") as script:
        script.write("print('done')\n")

    assert cli.main(argv) == 1
    assert capsys.readouterr() == ("", "would rewrite train_ddp.py\n")


def test_documented_ci_commands_check_then_verify_with_the_script_arguments(project, monkeypatch, capsys):
    # The verification run itself is replaced: what is checked is that the
    # documented command lines parse and reach verify() with what they say.
    calls = []

    def fake_verify(script, **settings):
        calls.append((script, settings))
        checks = tuple(Check(name, True, "holds") for name in CHECK_NAMES)
        return VerifyReport(str(script), 2, ("torchrun",), settings["max_steps"], 0, False, 1.0, (), checks, "")

    monkeypatch.setattr(backend, "verify", fake_verify)
    check, verify = documented_commands()
    hook_verify = [*shlex.split(hook("ddpify-verify")["entry"])[1:], *documented_hook_args("ddpify-verify")]

    assert [cli.main(argv) for argv in (check, verify, hook_verify)] == [0, 0, 0]

    assert [(script, settings["max_steps"], settings["script_args"]) for script, settings in calls] == [
        (Path("train_ddp.py"), 20, ("--epochs", "1")),
        (Path("train_ddp.py"), 20, ("--epochs", "1")),
    ]


# ----------------------------------------------------------------------------
# `ddpify verify SCRIPT`: the verification of any script, without converting it


def report_of(script: Path, failed: tuple[str, ...] = ()) -> VerifyReport:
    checks = tuple(Check(name, name not in failed, "broken" if name in failed else "holds") for name in CHECK_NAMES)
    return VerifyReport(str(script), 2, ("torchrun",), None, 0, False, 1.0, (), checks, "")


@pytest.fixture
def seams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, dict[str, object]]]:
    """Replaces the verification run by a fake that records its calls; converting fails the test."""
    calls: list[tuple[Path, dict[str, object]]] = []

    def fake_verify(script: Path, **settings: object) -> VerifyReport:
        calls.append((script, settings))
        return report_of(script, tuple(settings.pop("fail", ())))  # type: ignore[arg-type]

    monkeypatch.setattr(backend, "verify", fake_verify)
    monkeypatch.setattr(backend, "convert", lambda *a, **k: pytest.fail("ddpify verify converted the script"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train_ddp.py").write_text("import torch\n")
    return calls


def test_verify_subcommand_passes_its_settings_and_the_script_arguments(seams, capsys):
    code = cli.main(
        ["verify", "train_ddp.py", "--nproc", "3", "--timeout", "20", "--max-steps", "4", "--", "--epochs", "1"]
    )

    captured = capsys.readouterr()
    assert code == 0, captured.err
    ((script, settings),) = seams
    assert script == Path("train_ddp.py")
    assert settings == {
        "nproc": 3,
        "script_args": ("--epochs", "1"),
        "timeout": 20.0,
        "max_steps": 4,
        "workdir": Path.cwd(),
        "env": None,
    }
    assert captured.out.splitlines()[-1] == f"ok: all {len(CHECK_NAMES)} checks passed ({', '.join(CHECK_NAMES)})"
    assert captured.err.splitlines() == [
        "verifying train_ddp.py under torchrun with 3 processes",
        f"train_ddp.py trains in data-parallel: {len(CHECK_NAMES)} checks passed",
    ]


def test_verify_subcommand_exits_4_when_a_check_fails(seams, monkeypatch, capsys):
    failed = CHECK_NAMES[1]
    monkeypatch.setattr(backend, "verify", lambda script, **settings: report_of(script, (failed,)))

    code = cli.main(["verify", "train_ddp.py", "--format", "json"])

    captured = capsys.readouterr()
    assert code == 4
    assert captured.err.splitlines()[-1] == (
        f"error: train_ddp.py does not train in data-parallel (1 check failed: {failed})"
    )
    assert '"ok": false' in captured.out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["verify"], "error: Missing argument 'SCRIPT'; see 'ddpify verify --help'"),
        (["verify", "missing.py"], "error: missing.py: No such file or directory"),
        (["verify", "."], "error: .: not a file; ddpify verify runs one script"),
        (["verify", "train_ddp.py", "--nproc", "1"], None),
        (["verify", "train.ipynb"], None),
    ],
    ids=["no-script", "missing", "folder", "nproc-1", "notebook"],
)
def test_verify_subcommand_bad_usage(argv, message, seams, capsys):
    (Path.cwd() / "train.ipynb").write_text("{}")

    code = cli.main(argv)

    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ")
    if message is not None:
        assert err == [message]
    assert seams == []


def test_verify_subcommand_help(capsys):
    assert cli.main(["verify", "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage: ddpify verify [OPTIONS] {SCRIPT} [-- SCRIPT_ARGS]..." in out
    assert "--max-steps" in out


def test_a_file_named_verify_is_a_script_to_convert(tmp_path, monkeypatch, capsys):
    from ddpify import Conversion, Status

    monkeypatch.chdir(tmp_path)
    (tmp_path / "verify").write_bytes(b"import torch\n")
    (tmp_path / "verify.py").write_bytes(b"import torch\n")
    converted: list[str] = []

    def fake_convert(source: bytes, *, path: str, options: object, modules: object = ()) -> Conversion:
        converted.append(path)
        return Conversion(source=source, code=source + b"# converted\n", status=Status.CONVERTED)

    monkeypatch.setattr(backend, "convert", fake_convert)

    assert cli.main(["verify", "-o", "out.py", "-q"]) == 0
    assert cli.main(["verify.py", "-o", "out2.py", "-q"]) == 0
    assert converted == ["verify", "verify.py"]
    assert (tmp_path / "out.py").read_bytes() == b"import torch\n# converted\n"


@pytest.mark.torchrun
def test_verify_subcommand_fails_an_unconverted_single_gpu_script(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    shutil.copy(EXAMPLES / "regression.py", tmp_path / "regression.py")
    monkeypatch.chdir(tmp_path)

    code = cli.main(["verify", "regression.py", "--max-steps", "3"])

    captured = capsys.readouterr()
    assert code == 4, f"{captured.out}\n{captured.err}"
    assert captured.err.splitlines()[-1].startswith("error: regression.py does not train in data-parallel (")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["regression.py"]

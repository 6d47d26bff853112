"""The command-line shell: files, streams and exit codes.

The converter is replaced through its seam, ``ddpify.cli.backend.convert``, by a fake
that returns a chosen ``Conversion``, and the verification run through
``ddpify.cli.backend.verify`` by a fake that returns a chosen ``VerifyReport``; both
are tested for real elsewhere (one real ``--verify`` run is in
``test_cli_verify.py``).  Every test runs in its own empty folder, so
"nothing left behind" means the folder holds exactly the files the test put
there.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ddpify import __version__, cli
from ddpify.cli import backend, diff
from ddpify.diagnostics import Change, Diagnostic, Severity
from ddpify.result import Conversion, Options, Status
from ddpify.verify import CHECK_NAMES, Check, RankReport, VerifyReport

SOURCE = b"import torch\n\nmodel = Net()\ntrain(model)\n"
CONVERTED = b"import torch\n\nmodel = DDP(Net())\ntrain(model)\n"
BUG_REPORT = "please report a bug at https://github.com/ddpify/ddpify/issues with the input attached"


def to_ddp(source: bytes) -> bytes:
    return source.replace(b"model = Net()", b"model = DDP(Net())")


@dataclass
class FakeConverter:
    """Stands in for ``ddpify.core.convert``; records every call."""

    status: Status = Status.CONVERTED
    diagnostics: tuple[tuple[int, int, str, Severity, str], ...] = ()
    changes: tuple[Change, ...] = ()
    raises: Exception | None = None
    calls: list[tuple[bytes, str, Options]] = field(default_factory=list)

    def __call__(self, source: bytes, *, path: str, options: Options, modules: object = ()) -> Conversion:
        self.calls.append((source, path, options))
        if self.raises is not None:
            raise self.raises
        return Conversion(
            source=source,
            code=to_ddp(source) if self.status is Status.CONVERTED else source,
            status=self.status,
            diagnostics=tuple(Diagnostic(*spec, path=path) for spec in self.diagnostics),
            changes=self.changes,
        )


def verify_report(*failed: str, output: str = "") -> VerifyReport:
    """A two-rank report in which the checks named in ``failed`` fail."""
    return VerifyReport(
        script="/work/train_ddp.py",
        nproc=2,
        command=("torchrun", "train_ddp.py"),
        max_steps=None,
        returncode=1 if failed else 0,
        timed_out=False,
        duration_s=1.5,
        ranks=tuple(
            RankReport(rank, "ok", 4, "c0ffee00", f"{rank}bad1dea", ("model.pt",) if rank == 0 else (), True, None)
            for rank in (0, 1)
        ),
        checks=tuple(
            Check(name, name not in failed, f"{name} broke" if name in failed else f"{name} holds")
            for name in CHECK_NAMES
        ),
        output=output,
    )


@dataclass
class FakeVerifier:
    """Stands in for ``ddpify.verify.verify``; records every call and the script as it was then."""

    report: VerifyReport = field(default_factory=verify_report)
    calls: list[dict[str, object]] = field(default_factory=list)
    scripts: list[bytes] = field(default_factory=list)

    def __call__(self, script: Path, **settings: object) -> VerifyReport:
        self.calls.append({"script": script, **settings})
        self.scripts.append(script.read_bytes())
        return self.report


@pytest.fixture(autouse=True)
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)
    return tmp_path


@pytest.fixture
def converter(monkeypatch) -> FakeConverter:
    fake = FakeConverter()
    monkeypatch.setattr(backend, "convert", fake)
    return fake


@pytest.fixture
def verifier(monkeypatch) -> FakeVerifier:
    fake = FakeVerifier()
    monkeypatch.setattr(backend, "verify", fake)
    return fake


@pytest.fixture
def script(workdir):
    path = workdir / "train.py"
    path.write_bytes(SOURCE)
    return path


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files(folder) -> list[str]:
    """Every entry in ``folder``, hidden ones (temporary files) included."""
    return sorted(os.listdir(folder))


def stderr_lines(captured) -> list[str]:
    return captured.err.splitlines()


WARNING = (3, 9, "DDP201", Severity.WARNING, "custom sampler: check that each rank sees different data")
ERROR = (3, 1, "DDP301", Severity.ERROR, "model is created inside the training loop")
CHANGES = (Change(3, "wrap the model in DistributedDataParallel"), Change(4, "train on the local device"))


# ----------------------------------------------------------------------------
# Exit code 0


def test_converted_to_output_file(converter, script, workdir, capsys):
    converter.diagnostics = (WARNING,)
    converter.changes = CHANGES
    before = sha256(script)

    assert cli.main(["train.py", "-o", "train_ddp.py"]) == 0

    captured = capsys.readouterr()
    assert captured.out == ""
    assert stderr_lines(captured) == [
        "train.py:3:9: DDP201 custom sampler: check that each rank sees different data",
        "train.py:3: wrap the model in DistributedDataParallel",
        "train.py:4: train on the local device",
        "converted train.py -> train_ddp.py (2 changes, 1 warning)",
        "run it: torchrun --standalone --nproc_per_node=gpu train_ddp.py",
        "on several nodes: torchrun --nnodes=NUM_NODES --nproc_per_node=gpu --rdzv-backend=c10d "
        "--rdzv-endpoint=HEAD_NODE:29500 --rdzv-id=JOB_ID train_ddp.py",
    ]
    assert (workdir / "train_ddp.py").read_bytes() == CONVERTED
    assert sha256(script) == before
    assert files(workdir) == ["train.py", "train_ddp.py"]


def test_converted_to_stdout(converter, script, workdir, capsysbinary):
    converter.changes = CHANGES[:1]

    assert cli.main(["train.py"]) == 0

    captured = capsysbinary.readouterr()
    assert captured.out == CONVERTED
    assert captured.err.decode().splitlines() == [
        "train.py:3: wrap the model in DistributedDataParallel",
        "converted train.py -> <stdout> (1 change)",
    ]
    assert files(workdir) == ["train.py"]


def test_passes_path_as_given_and_options(converter, script, capsys):
    cli.main(["./train.py", "--keep-global-batch", "-q"])
    cli.main(["train.py", "-q"])
    cli.main(["train.py", "--find-unused-parameters", "--sync-bn", "-q"])
    cli.main(["train.py", "--shard-eval", "-q"])

    assert converter.calls == [
        (SOURCE, "./train.py", Options(keep_global_batch=True)),
        (SOURCE, "train.py", Options(keep_global_batch=False)),
        (SOURCE, "train.py", Options(find_unused_parameters=True, sync_batchnorm=True)),
        (SOURCE, "train.py", Options(shard_eval=True)),
    ]


def test_unchanged_goes_to_stdout_unchanged(converter, script, capsysbinary):
    converter.status = Status.UNCHANGED

    assert cli.main(["train.py"]) == 0

    captured = capsysbinary.readouterr()
    assert captured.out == SOURCE
    assert captured.err == b"train.py: nothing to do\n"


def test_unchanged_with_output_writes_the_script_as_is(converter, script, workdir, capsys):
    # So that `torchrun train_ddp.py` works and `--check` agrees.
    converter.status = Status.UNCHANGED

    assert cli.main(["train.py", "-o", "train_ddp.py"]) == 0

    assert stderr_lines(capsys.readouterr()) == ["train.py: nothing to do"]
    assert (workdir / "train_ddp.py").read_bytes() == SOURCE
    assert cli.main(["train.py", "-o", "train_ddp.py", "--check"]) == 0


def test_quiet_prints_nothing_on_success(converter, script, capsys):
    converter.diagnostics = (WARNING,)
    converter.changes = CHANGES

    assert cli.main(["train.py", "-o", "train_ddp.py", "-q"]) == 0

    assert capsys.readouterr() == ("", "")


def test_stdin_to_stdout(converter, monkeypatch, workdir, capsysbinary):
    converter.diagnostics = (WARNING,)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(SOURCE)))

    assert cli.main(["-"]) == 0

    captured = capsysbinary.readouterr()
    assert captured.out == CONVERTED
    assert captured.err.decode().splitlines() == [
        "<stdin>:3:9: DDP201 custom sampler: check that each rank sees different data",
        "converted <stdin> -> <stdout> (0 changes, 1 warning)",
    ]
    assert converter.calls[0][:2] == (SOURCE, "<stdin>")
    assert files(workdir) == []


def test_in_place_rewrites_the_input_and_keeps_its_mode(converter, script, workdir, capsys):
    script.chmod(0o750)

    assert cli.main(["train.py", "--in-place"]) == 0

    assert stderr_lines(capsys.readouterr()) == ["converted train.py in place (0 changes)"]
    assert script.read_bytes() == CONVERTED
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    assert files(workdir) == ["train.py"]


def test_in_place_with_output_naming_the_input(converter, script, capsys):
    assert cli.main(["train.py", "-o", "./train.py", "--in-place", "-q"]) == 0
    assert script.read_bytes() == CONVERTED


# ----------------------------------------------------------------------------
# --check


def test_check_current(converter, script, workdir, capsys):
    (workdir / "train_ddp.py").write_bytes(CONVERTED)

    assert cli.main(["train.py", "-o", "train_ddp.py", "--check"]) == 0

    assert capsys.readouterr() == ("", "train_ddp.py is up to date\n")


def test_check_stale(converter, script, workdir, capsys):
    stale = workdir / "train_ddp.py"
    stale.write_bytes(SOURCE)
    before = sha256(stale), sha256(script)

    assert cli.main(["train.py", "-o", "train_ddp.py", "--check"]) == 1

    assert capsys.readouterr() == ("", "would rewrite train_ddp.py\n")
    assert (sha256(stale), sha256(script)) == before
    assert files(workdir) == ["train.py", "train_ddp.py"]


def test_check_missing(converter, script, workdir, capsys):
    before = sha256(script)

    assert cli.main(["train.py", "-o", "train_ddp.py", "--check", "--quiet"]) == 1

    assert capsys.readouterr() == ("", "would write train_ddp.py (it is missing)\n")
    assert sha256(script) == before
    assert files(workdir) == ["train.py"]


def test_check_with_diff_prints_the_diff_then_fails(converter, script, workdir, capsys):
    assert cli.main(["train.py", "-o", "train_ddp.py", "--check", "--diff"]) == 1

    captured = capsys.readouterr()
    assert "+model = DDP(Net())\n" in captured.out
    assert captured.err == "would write train_ddp.py (it is missing)\n"
    assert files(workdir) == ["train.py"]


# ----------------------------------------------------------------------------
# Exit code 2: bad usage, unreadable input, unwritable output


def test_missing_input(converter, workdir, capsys):
    assert cli.main(["missing.py", "-o", "out.py"]) == 2

    assert capsys.readouterr() == ("", "error: missing.py: No such file or directory\n")
    assert converter.calls == []
    assert files(workdir) == []


def test_input_folder_without_python_files(converter, workdir, capsys):
    # A folder is a valid input (see test_cli_many.py); one with no script is not.
    (workdir / "scripts").mkdir()
    (workdir / "scripts" / "notes.txt").write_text("not a script\n")

    assert cli.main(["scripts", "-o", "out.py"]) == 2

    assert capsys.readouterr() == ("", "error: scripts: no Python files\n")
    assert converter.calls == []
    assert files(workdir) == ["scripts"]


def test_output_folder_missing(converter, script, workdir, capsys):
    before = sha256(script)

    assert cli.main(["train.py", "-o", "nowhere/train_ddp.py"]) == 2

    assert capsys.readouterr() == ("", "error: cannot write nowhere/train_ddp.py: No such file or directory\n")
    assert sha256(script) == before
    assert files(workdir) == ["train.py"]


def test_output_is_a_directory(converter, script, workdir, capsys):
    (workdir / "out").mkdir()

    assert cli.main(["train.py", "-o", "out", "-q"]) == 2

    assert capsys.readouterr() == ("", "error: out: Is a directory; out/ (ending with a slash) writes into it\n")
    assert files(workdir) == ["out", "train.py"]
    assert files(workdir / "out") == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs POSIX permissions and a non-root user")
def test_output_folder_not_writable(converter, script, workdir, capsys):
    locked = workdir / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert cli.main(["train.py", "-o", "locked/train_ddp.py"]) == 2
    finally:
        locked.chmod(0o700)

    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: cannot write locked/train_ddp.py: Permission denied")
    assert err.endswith("; nothing written\n")
    assert files(locked) == []


@pytest.mark.parametrize("output", ["train.py", "./train.py", "link.py"])
def test_output_equal_to_input_is_refused(converter, script, workdir, capsys, output):
    (workdir / "link.py").symlink_to("train.py")
    before = sha256(script)

    assert cli.main(["train.py", "-o", output]) == 2

    assert capsys.readouterr() == ("", f"error: {output} is the input file; pass --in-place to rewrite it\n")
    assert sha256(script) == before
    assert converter.calls == []
    assert files(workdir) == ["link.py", "train.py"]


def test_invalid_input(converter, script, workdir, capsys):
    converter.status = Status.INVALID
    converter.diagnostics = ((2, 5, "DDP001", Severity.ERROR, "invalid syntax"),)
    before = sha256(script)

    assert cli.main(["train.py", "-o", "train_ddp.py"]) == 2

    assert capsys.readouterr() == ("", "train.py:2:5: DDP001 invalid syntax\n")
    assert sha256(script) == before
    assert files(workdir) == ["train.py"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["train.py", "--frobnicate"],
            "error: No such option: --frobnicate (Possible options: --format, --strict); see 'ddpify --help'",
        ),
        ([], "error: Missing argument 'SRC'; see 'ddpify --help'"),
        (["train.py", "-o"], "error: Option '-o' requires an argument; see 'ddpify --help'"),
        (["train.py", "--check"], "error: --check needs -o OUT"),
        (
            ["train.py", "--in-place", "-o", "other.py"],
            "error: --in-place rewrites SRC; it cannot be combined with -o OUT",
        ),
        (["-", "--in-place"], "error: --in-place needs a file, not stdin"),
        (["train.py", "--verify"], "error: --verify needs -o OUT: the script it runs"),
        (
            ["train.py", "-o", "train_ddp.py", "--diff", "--verify"],
            "error: --diff writes nothing for --verify to run; drop --diff or add --check",
        ),
        (["train.py", "-o", "train_ddp.py", "--nproc", "4"], "error: --nproc needs --verify"),
        (["train.py", "-o", "train_ddp.py", "--max-steps", "5"], "error: --max-steps needs --verify"),
        (["train.py", "-o", "train_ddp.py", "--timeout", "60"], "error: --timeout needs --verify"),
        (["train.py", "-o", "train_ddp.py", "--format", "json"], "error: --format needs --verify"),
        # Several SRC are several inputs (see test_cli_many.py): a forgotten -o meets a missing file.
        (["train.py", "train_ddp.py"], "error: train_ddp.py: No such file or directory"),
        (
            ["train.py", "-o", "train_ddp.py", "--", "--epochs", "1"],
            "error: unexpected argument '--epochs'; arguments for the script go after -- and need --verify, --sbatch or --k8s",
        ),
    ],
)
def test_bad_usage(converter, verifier, script, workdir, capsys, argv, message):
    assert cli.main(argv) == 2

    assert capsys.readouterr() == ("", message + "\n")
    assert converter.calls == []
    assert verifier.calls == []
    assert files(workdir) == ["train.py"]


@pytest.mark.parametrize(
    ("option", "value"),
    [("--nproc", "1"), ("--max-steps", "0"), ("--timeout", "0"), ("--timeout", "soon"), ("--format", "xml")],
)
def test_bad_verify_setting(converter, verifier, script, workdir, capsys, option, value):
    # The wording is click's; what matters is that nothing runs and nothing is written.
    assert cli.main(["train.py", "-o", "train_ddp.py", "--verify", option, value]) == 2

    err = capsys.readouterr().err
    assert err.startswith(f"error: Invalid value for '{option}': ")
    assert err.endswith("; see 'ddpify --help'\n")
    assert converter.calls == verifier.calls == []
    assert files(workdir) == ["train.py"]


def test_verify_without_torch_says_how_to_install_it(converter, verifier, script, workdir, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # what find_spec reports when torch is not installed

    assert cli.main(["train.py", "-o", "train_ddp.py", "--verify"]) == 2

    assert capsys.readouterr() == (
        "",
        f"error: --verify needs torch in {sys.executable}: pip install 'ddpify[run]'\n",
    )
    assert converter.calls == verifier.calls == []
    assert files(workdir) == ["train.py"]


# ----------------------------------------------------------------------------
# Exit code 3: refused


def test_refused(converter, script, workdir, capsys):
    converter.status = Status.REFUSED
    converter.diagnostics = (ERROR, WARNING)
    before = sha256(script)

    assert cli.main(["train.py", "-o", "train_ddp.py"]) == 3

    assert capsys.readouterr() == (
        "",
        "train.py:3:1: DDP301 model is created inside the training loop\n"
        "train.py:3:9: DDP201 custom sampler: check that each rank sees different data\n"
        "train.py: not converted (1 error, 1 warning); nothing written\n",
    )
    assert sha256(script) == before
    assert files(workdir) == ["train.py"]


def test_refused_quiet_prints_only_errors(converter, script, workdir, capsys):
    converter.status = Status.REFUSED
    converter.diagnostics = (ERROR, WARNING)

    assert cli.main(["train.py", "-q"]) == 3

    assert capsys.readouterr() == ("", "train.py:3:1: DDP301 model is created inside the training loop\n")


# ----------------------------------------------------------------------------
# Exit code 123: internal error


def test_internal_error_status(converter, script, workdir, capsys):
    converter.status = Status.INTERNAL_ERROR
    converter.diagnostics = ((1, 1, "DDP000", Severity.ERROR, "the converted script does not compile"),)
    before = sha256(script)

    assert cli.main(["train.py", "-o", "train_ddp.py"]) == 123

    assert capsys.readouterr() == (
        "",
        f"error: internal error while converting train.py: the converted script does not compile; {BUG_REPORT}\n",
    )
    assert sha256(script) == before
    assert files(workdir) == ["train.py"]


def test_unexpected_exception_in_converter(converter, script, workdir, capsys):
    converter.raises = RuntimeError("boom")
    before = sha256(script)

    assert cli.main(["train.py", "-o", "train_ddp.py"]) == 123

    assert capsys.readouterr() == (
        "",
        f"error: internal error while converting train.py: RuntimeError: boom; {BUG_REPORT}\n",
    )
    assert sha256(script) == before
    assert files(workdir) == ["train.py"]


def test_crash_while_writing_leaves_no_temporary_file(converter, script, workdir, monkeypatch, capsys):
    existing = workdir / "train_ddp.py"
    existing.write_bytes(b"old\n")

    def crash(src, dst):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(os, "replace", crash)

    assert cli.main(["train.py", "-o", "train_ddp.py", "-q"]) == 123

    assert capsys.readouterr().err == (
        f"error: internal error while converting train.py: RuntimeError: disk on fire; {BUG_REPORT}\n"
    )
    assert existing.read_bytes() == b"old\n"
    assert files(workdir) == ["train.py", "train_ddp.py"]


def test_failed_write_is_a_usage_error_and_leaves_no_temporary_file(converter, script, workdir, monkeypatch, capsys):
    # What an unwritable target looks like, also where the tests run as root.
    existing = workdir / "train_ddp.py"
    existing.write_bytes(b"old\n")

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)

    assert cli.main(["train.py", "-o", "train_ddp.py"]) == 2

    assert capsys.readouterr() == ("", "error: cannot write train_ddp.py: Permission denied; nothing written\n")
    assert existing.read_bytes() == b"old\n"
    assert files(workdir) == ["train.py", "train_ddp.py"]


# ----------------------------------------------------------------------------
# Writing files


def test_overwrite_keeps_the_existing_mode(converter, script, workdir):
    existing = workdir / "train_ddp.py"
    existing.write_bytes(b"old\n")
    existing.chmod(0o755)

    assert cli.main(["train.py", "-o", "train_ddp.py", "-q"]) == 0

    assert existing.read_bytes() == CONVERTED
    assert stat.S_IMODE(existing.stat().st_mode) == 0o755
    assert files(workdir) == ["train.py", "train_ddp.py"]


def test_new_file_gets_the_usual_mode(converter, script, workdir):
    umask = os.umask(0o027)
    try:
        assert cli.main(["train.py", "-o", "train_ddp.py", "-q"]) == 0
    finally:
        os.umask(umask)

    assert stat.S_IMODE((workdir / "train_ddp.py").stat().st_mode) == 0o640


def test_output_symlink_is_followed(converter, script, workdir):
    (workdir / "real.py").write_bytes(b"old\n")
    (workdir / "link.py").symlink_to("real.py")

    assert cli.main(["train.py", "-o", "link.py", "-q"]) == 0

    assert (workdir / "link.py").is_symlink()
    assert (workdir / "real.py").read_bytes() == CONVERTED


BOM_CRLF = b"\xef\xbb\xbf# caf\xc3\xa9\r\nimport torch\r\n\r\nmodel = Net()\r\ntrain(model)"


def test_bytes_round_trip_to_file(converter, workdir):
    (workdir / "train.py").write_bytes(BOM_CRLF)

    assert cli.main(["train.py", "-o", "train_ddp.py", "-q"]) == 0

    assert (workdir / "train_ddp.py").read_bytes() == to_ddp(BOM_CRLF)
    assert converter.calls[0][0] == BOM_CRLF


def test_bytes_round_trip_to_stdout(converter, workdir, capsysbinary):
    (workdir / "train.py").write_bytes(BOM_CRLF)

    assert cli.main(["train.py", "-q"]) == 0

    assert capsysbinary.readouterr() == (to_ddp(BOM_CRLF), b"")


# ----------------------------------------------------------------------------
# --diff

EXPECTED_DIFF = (
    "--- train.py\n"
    "+++ train_ddp.py\n"
    "@@ -1,4 +1,4 @@\n"
    " import torch\n"
    " \n"
    "-model = Net()\n"
    "+model = DDP(Net())\n"
    " train(model)\n"
)


def test_diff_writes_nothing(converter, script, workdir, capsys):
    converter.changes = CHANGES[:1]

    assert cli.main(["train.py", "-o", "train_ddp.py", "--diff"]) == 0

    captured = capsys.readouterr()
    assert captured.out == EXPECTED_DIFF
    assert "\x1b" not in captured.out
    assert stderr_lines(captured) == [
        "train.py:3: wrap the model in DistributedDataParallel",
        "would convert train.py -> train_ddp.py (1 change)",
    ]
    assert files(workdir) == ["train.py"]


def test_diff_without_output_names_the_input_twice(converter, script, capsys):
    assert cli.main(["train.py", "--diff", "-q"]) == 0

    assert capsys.readouterr().out.splitlines()[:2] == ["--- train.py", "+++ train.py"]


def test_diff_of_unchanged_script_is_empty(converter, script, capsys):
    converter.status = Status.UNCHANGED

    assert cli.main(["train.py", "--diff"]) == 0

    assert capsys.readouterr() == ("", "train.py: nothing to do\n")


def test_diff_is_coloured_on_a_terminal(converter, script, monkeypatch, capsys):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)

    assert cli.main(["train.py", "-o", "train_ddp.py", "--diff", "-q"]) == 0

    out = capsys.readouterr().out
    assert "\x1b[1m--- train.py\x1b[0m\n" in out
    assert "\x1b[36m@@ -1,4 +1,4 @@\x1b[0m\n" in out
    assert "\x1b[31m-model = Net()\x1b[0m\n" in out
    assert "\x1b[32m+model = DDP(Net())\x1b[0m\n" in out
    assert " import torch\n" in out


@pytest.mark.parametrize("how", ["NO_COLOR", "--no-color"])
def test_diff_colour_can_be_turned_off(converter, script, monkeypatch, capsys, how):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    argv = ["train.py", "-o", "train_ddp.py", "--diff", "-q"]
    if how == "NO_COLOR":
        monkeypatch.setenv("NO_COLOR", "1")
    else:
        argv.append(how)

    assert cli.main(argv) == 0

    assert capsys.readouterr().out == EXPECTED_DIFF


def test_diff_marks_a_missing_final_newline():
    lines = list(diff.unified_diff("a\nb", "a\nc", from_name="x", to_name="y"))

    assert lines == [
        "--- x\n",
        "+++ y\n",
        "@@ -1,2 +1,2 @@\n",
        " a\n",
        "-b\n",
        "\\ No newline at end of file\n",
        "+c\n",
        "\\ No newline at end of file\n",
    ]


def test_diff_keeps_crlf_and_drops_the_bom(converter, workdir, capsysbinary):
    (workdir / "train.py").write_bytes(BOM_CRLF)

    assert cli.main(["train.py", "--diff", "-q"]) == 0

    out = capsysbinary.readouterr().out
    assert not out.startswith(b"\xef\xbb\xbf")
    assert b"-model = Net()\r\n+model = DDP(Net())\r\n" in out
    assert b" # caf\xc3\xa9\r\n" in out


# ----------------------------------------------------------------------------
# --verify (exit code 4 when the script does not train in data-parallel)


def test_verify_writes_then_runs_the_output(converter, verifier, script, workdir, capsys):
    assert cli.main(["train.py", "-o", "train_ddp.py", "--verify"]) == 0

    captured = capsys.readouterr()
    assert captured.out == verifier.report.format_table() + "\n"
    assert stderr_lines(captured) == [
        "converted train.py -> train_ddp.py (0 changes)",
        "verifying train_ddp.py under torchrun with 2 processes",
        f"train_ddp.py trains in data-parallel: {len(CHECK_NAMES)} checks passed",
    ]
    assert verifier.calls == [
        {
            "script": Path("train_ddp.py"),
            "nproc": 2,
            "script_args": (),
            "timeout": 300.0,
            "max_steps": None,
            "workdir": workdir,
            "env": None,
        }
    ]
    assert verifier.scripts == [CONVERTED]  # written before it was run
    assert files(workdir) == ["train.py", "train_ddp.py"]


def test_verify_forwards_its_settings_and_the_script_arguments_exactly(converter, verifier, script, capsys):
    argv = ["train.py", "-o", "train_ddp.py", "--verify", "--nproc", "3", "--timeout", "60", "--max-steps", "5"]
    # After --, arguments that look like ddpify's own options belong to the script.
    script_args = ["--epochs", "1", "--lr", "0.1", "-o", "x.pt", "--check", "--", "-q"]

    assert cli.main([*argv, "--", *script_args]) == 0

    (call,) = verifier.calls
    assert {key: call[key] for key in ("nproc", "timeout", "max_steps", "script_args")} == {
        "nproc": 3,
        "timeout": 60.0,
        "max_steps": 5,
        "script_args": tuple(script_args),
    }


def test_verify_failure_exits_4_and_names_the_failed_checks(converter, verifier, script, workdir, capsys):
    verifier.report = verify_report("in-sync", "sharded-data", output="Epoch 1 loss 0.5\n")

    assert cli.main(["train.py", "-o", "train_ddp.py", "--verify", "-q"]) == 4

    captured = capsys.readouterr()
    assert captured.out == verifier.report.format_table() + "\n"
    assert captured.out.splitlines()[-2:] == [
        "FAILED in-sync: in-sync broke",
        "FAILED sharded-data: sharded-data broke",
    ]
    # The script ran to its end: its output would not say why, so it is not shown.
    assert captured.err == (
        "error: train_ddp.py does not train in data-parallel (2 checks failed: in-sync, sharded-data)\n"
    )
    assert (workdir / "train_ddp.py").read_bytes() == CONVERTED  # the conversion itself stands


def test_verify_of_a_script_that_did_not_run_shows_torchrun_output(converter, verifier, script, capsys):
    verifier.report = verify_report("launched", "steps", output="Traceback ...\nValueError: bad lr\n\n")

    assert cli.main(["train.py", "-o", "train_ddp.py", "--verify"]) == 4

    assert stderr_lines(capsys.readouterr())[-4:] == [
        "--- torchrun output ---",
        "Traceback ...",
        "ValueError: bad lr",
        "error: train_ddp.py does not train in data-parallel (2 checks failed: launched, steps)",
    ]


@pytest.mark.parametrize("failed", [(), ("launched", "clean-exit")])
def test_verify_json_report(converter, verifier, script, capsys, failed):
    verifier.report = verify_report(*failed, output="Traceback ...\n")

    assert cli.main(["train.py", "-o", "train_ddp.py", "--verify", "--format", "json", "-q"]) == (4 if failed else 0)

    captured = capsys.readouterr()
    assert json.loads(captured.out) == verifier.report.to_json()
    assert captured.out.endswith("}\n")
    assert "torchrun output" not in captured.err  # the JSON report carries the output itself


def test_check_verify_runs_the_committed_output_without_writing(converter, verifier, script, workdir, capsys):
    committed = workdir / "train_ddp.py"
    committed.write_bytes(CONVERTED)
    os.utime(committed, ns=(0, 0))

    assert cli.main(["train.py", "-o", "train_ddp.py", "--check", "--verify", "--max-steps", "20"]) == 0

    assert stderr_lines(capsys.readouterr()) == [
        "train_ddp.py is up to date",
        "verifying train_ddp.py under torchrun with 2 processes",
        f"train_ddp.py trains in data-parallel: {len(CHECK_NAMES)} checks passed",
    ]
    assert verifier.scripts == [CONVERTED]
    assert verifier.calls[0]["max_steps"] == 20
    assert committed.stat().st_mtime_ns == 0  # not rewritten
    assert files(workdir) == ["train.py", "train_ddp.py"]


def test_check_verify_of_a_stale_output_does_not_run_it(converter, verifier, script, workdir, capsys):
    (workdir / "train_ddp.py").write_bytes(SOURCE)

    assert cli.main(["train.py", "-o", "train_ddp.py", "--check", "--verify"]) == 1

    assert capsys.readouterr() == ("", "would rewrite train_ddp.py\n")
    assert verifier.calls == []


def test_verify_of_a_refused_conversion_does_not_run(converter, verifier, script, workdir, capsys):
    converter.status = Status.REFUSED
    converter.diagnostics = (ERROR,)

    assert cli.main(["train.py", "-o", "train_ddp.py", "--verify", "-q"]) == 3

    assert verifier.calls == []
    assert files(workdir) == ["train.py"]


def test_verify_of_an_already_distributed_script_runs_it_as_written(converter, verifier, script, workdir, capsys):
    converter.status = Status.UNCHANGED

    assert cli.main(["train.py", "-o", "train_ddp.py", "--verify", "-q"]) == 0

    assert verifier.scripts == [SOURCE]


# ----------------------------------------------------------------------------
# --version, --help, start-up cost and the entry points


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr() == (f"ddpify {__version__}\n", "")


def test_help(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Usage: ddpify [OPTIONS]")
    options = ("--output", "--in-place", "--diff", "--check", "--keep-global-batch", "--no-color", "--quiet")
    verify_options = ("--verify", "--nproc", "--timeout", "--max-steps", "--format")
    for option in (*options, *verify_options):
        assert option in out
    assert "SCRIPT_ARGS" in out.splitlines()[0]


def test_main_reads_sys_argv_by_default(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["ddpify", "--version"])
    assert cli.main() == 0
    assert capsys.readouterr().out.startswith("ddpify ")


@pytest.mark.parametrize("option", ["--version", "--help"])
def test_version_and_help_do_not_import_the_converter_or_the_verifier(option):
    probe = (
        "import sys, ddpify.cli\n"
        f"code = ddpify.cli.main([{option!r}])\n"
        "heavy = sorted(m for m in ('libcst', 'ddpify.core', 'rich', 'ddpify.verify', 'torch') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_python_dash_m_exit_status(workdir):
    def ddpify(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ddpify", *argv], capture_output=True, text=True, check=False)

    version = ddpify("--version")
    missing = ddpify("missing.py")

    assert (version.returncode, version.stdout) == (0, f"ddpify {__version__}\n")
    assert (missing.returncode, missing.stderr) == (2, "error: missing.py: No such file or directory\n")


def wait_for_sigterm_handler(pid: int, timeout: float = 60) -> None:
    """Until the process catches SIGTERM (ddpify's handlers are in place), as Linux's /proc shows."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
        if caught & (1 << (signal.SIGTERM - 1)):
            return
        time.sleep(0.02)
    raise AssertionError("ddpify never installed its signal handlers")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads signal dispositions from Linux's /proc")
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_reading_stdin_ends_with_one_line(signum, code, tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-m", "ddpify", "-"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,  # held open: ddpify waits for the script
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_sigterm_handler(child.pid)
        child.send_signal(signum)
        out, err = child.communicate(timeout=30)
    finally:
        child.kill()

    assert (child.returncode, out, err) == (code, b"", b"interrupted\n")

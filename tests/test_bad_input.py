"""Bad and unusual input through the real command line, in-process.

Every case runs ``ddpify.cli.main`` with the real converter in its own empty
folder and checks what a user sees and what is left on disk: the exit code,
the one-line message on stderr (exact where the shell writes it; for a
diagnostic of the converter its stable ``path:line:col: CODE`` prefix and a
key word, since the wording comes from CPython or libcst and changes between
versions), the input's sha256, and the folder's files (no output, no temporary
file, after a failure; exactly one output after a success).

Converter bugs found here are kept as regression tests at the end of the file.

The base input is a small but real single-GPU training script: a model, an
optimizer over its parameters, a shuffled DataLoader and an epoch loop.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import shlex
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddpify import Status, convert
from ddpify.cli import main

TRAIN = b"""\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=8, shuffle=True)
model = nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(2):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: list[str]


@pytest.fixture(autouse=True)
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    def run(*argv: str) -> Run:
        code = main(list(argv))
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err.splitlines())

    return run


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden temporary files included) with its sha256."""
    return {str(p.relative_to(folder)): sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_compiles(code: bytes) -> None:
    compile(code, "out.py", "exec", dont_inherit=True)


# ----------------------------------------------------------------------------
# Turned away: exit 2, one line on stderr, nothing written


@dataclass(frozen=True)
class BadInput:
    id: str
    name: str  # SRC as given on the command line
    content: bytes | None  # None: SRC is not a file we write
    # The stderr line: exact when ddpify's shell writes it; for the converter's
    # diagnostics its ``path:line:col: CODE `` prefix (a regex) and, where the
    # cause is worth pinning, a word the message must contain.
    message: str
    exact: bool = True
    contains: str = ""


BAD_INPUTS = [
    BadInput("missing-file", "missing.py", None, "error: missing.py: No such file or directory"),
    BadInput("nul-byte", "binary.py", b"import torch\x00\n" + TRAIN, r"binary\.py:1:1: DDP00[23] ", exact=False),
    BadInput("random-bytes", "noise.py", random.Random(0).randbytes(512), r"noise\.py:1:1: DDP00[23] ", exact=False),
    BadInput(
        "elf-header",
        "a.out.py",
        bytes.fromhex("7f454c4602010100") + bytes(range(256)),
        r"a\.out\.py:1:1: DDP00[23] ",
        exact=False,
    ),
    BadInput(
        "latin-1-without-cookie",
        "latin.py",
        b'label = "caf\xe9"\n' + TRAIN,
        r"latin\.py:1:1: DDP003 ",
        exact=False,
        contains="encoding",
    ),
    BadInput(
        "unknown-coding-cookie",
        "cookie.py",
        b"# -*- coding: uft-8 -*-\n" + TRAIN,
        r"cookie\.py:1:1: DDP00[23] ",  # CPython's offset here is -1
        exact=False,
        contains="uft-8",
    ),
    BadInput(
        "syntax-error",
        "broken.py",
        TRAIN + b"\ndef report(:\n    pass\n",
        r"broken\.py:19:12: DDP002 ",  # where CPython puts it: the `:` after `report(`
        exact=False,
    ),
    BadInput(
        "python2-print",
        "py2.py",
        TRAIN.replace(b"optimizer.step()", b'optimizer.step()\n    print "epoch", epoch'),
        r"py2\.py:18:5: DDP002 ",
        exact=False,
        contains="print",
    ),
    BadInput(
        "cr-only-line-endings",
        "mac.py",
        TRAIN.replace(b"\n", b"\r"),
        r"mac\.py:1:1: DDP004 ",
        exact=False,
        contains="line endings",
    ),
    BadInput(
        "whitespace-only-trailing-lines",
        "trailing.py",
        TRAIN + b"    \n\t\n  ",
        r"trailing\.py:1:1: DDP004 ",
        exact=False,
        contains="whitespace",
    ),
]


@pytest.mark.parametrize("in_place", [False, True], ids=["-o", "--in-place"])
@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c.id for c in BAD_INPUTS])
def test_bad_input_is_turned_away(case: BadInput, in_place: bool, cli, workdir: Path) -> None:
    src = workdir / case.name
    if case.content is not None:
        src.write_bytes(case.content)
    before = snapshot(workdir)

    run = cli(case.name, "--in-place") if in_place else cli(case.name, "-o", "out.py")

    assert run.code == 2, run.err
    assert len(run.err) == 1, run.err
    if case.exact:
        assert run.err == [case.message]
    else:
        assert re.match(case.message, run.err[0]), run.err
        assert case.contains in run.err[0]
    assert run.out == ""
    assert snapshot(workdir) == before  # input unchanged; no output, no temporary file


def test_python2_except_clause(cli, workdir: Path) -> None:
    if sys.version_info >= (3, 14):
        pytest.skip("Python 3.14 (PEP 758) reads `except ValueError, e:` as catching either name: valid Python 3")
    source = TRAIN + b"\ntry:\n    import cPickle\nexcept ImportError, e:\n    pass\n"
    (workdir / "py2.py").write_bytes(source)
    before = snapshot(workdir)

    run = cli("py2.py", "-o", "out.py")

    assert run.code == 2
    assert run.err == ["py2.py:21:8: DDP002 invalid Python 3: multiple exception types must be parenthesized"]
    assert snapshot(workdir) == before


def test_syntax_error_points_at_the_error(cli, workdir: Path) -> None:
    """Where CPython puts it (libcst alone said 4:1 here)."""
    (workdir / "broken.py").write_bytes(b"import torch\n\ndef f(:\n    pass\n")

    run = cli("broken.py", "-o", "out.py")

    assert run.code == 2
    assert run.err[0].startswith("broken.py:3:7: DDP002 ")


def test_directory_as_src(cli, workdir: Path) -> None:
    # A folder is an input (its *.py files); one without any is an error.
    (workdir / "data").mkdir()

    run = cli("data", "-o", "out.py")

    assert run.code == 2
    assert run.err == ["error: data: no Python files"]
    assert snapshot(workdir) == {}
    assert [p.name for p in workdir.iterdir()] == ["data"]


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0,
    reason="running as root, which can read a file with mode 000, so the file is not unreadable",
)
def test_unreadable_file(cli, workdir: Path) -> None:
    src = workdir / "train.py"
    src.write_bytes(TRAIN)
    src.chmod(0)
    try:
        run = cli("train.py", "-o", "out.py")
    finally:
        src.chmod(0o644)

    assert run.code == 2
    assert run.err == ["error: train.py: Permission denied; nothing written"]
    assert snapshot(workdir) == {"train.py": hashlib.sha256(TRAIN).hexdigest()}


def test_output_folder_missing(cli, workdir: Path) -> None:
    (workdir / "train.py").write_bytes(TRAIN)
    before = snapshot(workdir)

    run = cli("train.py", "-o", "nowhere/train_ddp.py", "-q")

    assert run.code == 2
    assert run.err == ["error: cannot write nowhere/train_ddp.py: No such file or directory"]
    assert snapshot(workdir) == before
    assert not (workdir / "nowhere").exists()


@pytest.mark.parametrize("output", ["train.py", "./train.py"])
def test_output_is_the_input_without_in_place(output: str, cli, workdir: Path) -> None:
    (workdir / "train.py").write_bytes(TRAIN)
    before = snapshot(workdir)

    run = cli("train.py", "-o", output)

    assert run.code == 2
    assert run.err == [f"error: {output} is the input file; pass --in-place to rewrite it"]
    assert snapshot(workdir) == before


# ----------------------------------------------------------------------------
# Accepted: exit 0


def convert_ok(cli, workdir: Path, name: str, source: bytes) -> tuple[Run, bytes]:
    """Convert ``name`` to ``out.py``; the input is untouched and ``out.py`` is the only new file."""
    (workdir / name).write_bytes(source)
    run = cli(name, "-o", "out.py")
    assert run.code == 0, run.err
    assert run.out == ""
    assert sorted(snapshot(workdir)) == sorted([name, "out.py"])
    assert sha256(workdir / name) == hashlib.sha256(source).hexdigest()
    return run, (workdir / "out.py").read_bytes()


def test_base_script_converts(cli, workdir: Path) -> None:
    run, out = convert_ok(cli, workdir, "train.py", TRAIN)

    assert run.err[-3].startswith("converted train.py -> out.py (")  # then the two launch commands
    assert b"DistributedSampler(data" in out and b"DDP(model)" in out
    assert_compiles(out)


def test_latin_1_coding_cookie(cli, workdir: Path) -> None:
    header = b"# -*- coding: latin-1 -*-\n# Donn\xe9es synth\xe9tiques\n"
    label = b'label = "caf\xe9"\n'
    run, out = convert_ok(cli, workdir, "latin.py", header + label + TRAIN)

    assert run.err[-3].startswith("converted latin.py -> out.py (")  # then the two launch commands
    assert out.startswith(header)  # the cookie line first, the latin-1 bytes unchanged
    assert label in out
    assert b"\xc3\xa9" not in out  # not re-encoded as UTF-8
    assert b"DDP(model)" in out
    assert_compiles(out)


def test_empty_file(cli, workdir: Path) -> None:
    run, out = convert_ok(cli, workdir, "empty.py", b"")

    assert run.err == [
        "empty.py:1:1: DDP011 no training step (`.backward()`) found: nothing to do",
        "empty.py: nothing to do",
    ]
    assert out == b""


def test_already_distributed_script(cli, workdir: Path) -> None:
    _, converted = convert_ok(cli, workdir, "train.py", TRAIN)
    (workdir / "out.py").rename(workdir / "train_ddp.py")
    (workdir / "train.py").unlink()

    run, out = convert_ok(cli, workdir, "train_ddp.py", converted)

    assert len(run.err) == 2, run.err
    assert re.match(r"train_ddp\.py:\d+:\d+: DDP010 already distributed \(uses torch\.distributed", run.err[0])
    assert run.err[1] == "train_ddp.py: nothing to do"
    assert out == converted


@pytest.mark.parametrize(
    "source",
    [
        b"import os\n\nprint(os.getcwd())\n",
        b"import torch\n\nmodel = torch.nn.Linear(4, 1)\nprint(model(torch.zeros(1, 4)))\n",
    ],
    ids=["no-torch", "torch-without-training"],
)
def test_script_without_training_code(source: bytes, cli, workdir: Path) -> None:
    run, out = convert_ok(cli, workdir, "script.py", source)

    assert run.err == [
        "script.py:1:1: DDP011 no training step (`.backward()`) found: nothing to do",
        "script.py: nothing to do",
    ]
    assert out == source


def test_utf8_bom_is_kept(cli, workdir: Path) -> None:
    bom = b"\xef\xbb\xbf"
    _, out = convert_ok(cli, workdir, "bom.py", bom + b"# caf\xc3\xa9\n" + TRAIN)

    assert out.startswith(bom + b"# caf\xc3\xa9\n")
    assert out.count(bom) == 1
    assert b"DDP(model)" in out
    assert_compiles(out)


def assert_crlf_everywhere(out: bytes) -> None:
    assert out.count(b"\n") == out.count(b"\r\n") == out.count(b"\r")
    assert out.endswith(b"\r\n")


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"], ids=["crlf", "bom+crlf"])
def test_crlf_on_every_line(bom: bytes, cli, workdir: Path) -> None:
    _, out = convert_ok(cli, workdir, "windows.py", bom + TRAIN.replace(b"\n", b"\r\n"))

    assert out.startswith(bom + b"import ")
    assert out.count(b"\xef\xbb\xbf") == (1 if bom else 0)
    # Lines that ddpify inserted end with CRLF like the others.
    inserted = set(out.splitlines(keepends=True)) - set(TRAIN.replace(b"\n", b"\r\n").splitlines(keepends=True))
    assert b"import torch.distributed as dist\r\n" in inserted
    assert any(b"set_epoch(epoch)" in line for line in inserted)
    assert_crlf_everywhere(out)
    assert_compiles(out)


def test_no_final_newline(cli, workdir: Path) -> None:
    source = TRAIN.rstrip(b"\n")
    _, out = convert_ok(cli, workdir, "train.py", source)

    assert out.endswith(b"        optimizer.step()")
    assert_compiles(out)


def test_one_trailing_whitespace_line_without_newline(cli, workdir: Path) -> None:
    """A single whitespace-only last line round-trips in libcst, so it converts and is kept."""
    _, out = convert_ok(cli, workdir, "train.py", TRAIN + b"   ")

    assert out.endswith(b"        optimizer.step()\n   ")
    assert_compiles(out)


def test_quiet_conversion_prints_nothing(cli, workdir: Path) -> None:
    (workdir / "train.py").write_bytes(TRAIN)

    run = cli("train.py", "-o", "out.py", "-q")

    assert run.code == 0
    assert run.err == []


def test_str_source_with_a_lone_surrogate_is_invalid_input() -> None:
    """A str that no encoding can write (libcst raised UnicodeEncodeError: an internal error)."""
    conversion = convert("x = '\udc80'\n", path="s.py")

    assert conversion.status is Status.INVALID


# ----------------------------------------------------------------------------
# Bugs found by these tests, kept as regression tests


def test_quiet_conversion_prints_nothing_for_a_syntax_warning(workdir: Path) -> None:
    source = TRAIN + b"\nif epoch is 1:\n    pass\n"
    (workdir / "train.py").write_bytes(source)

    done = subprocess.run(
        [sys.executable, "-m", "ddpify", "train.py", "-o", "out.py", "-q"],
        capture_output=True,
        env={**os.environ, "PYTHONWARNINGS": ""},
        timeout=120,
    )

    assert done.returncode == 0
    assert done.stderr.decode() == ""


@pytest.mark.parametrize(
    "head",
    [b"from __future__ import annotations\n", b'"""Train."""\n\nfrom __future__ import annotations\n\n'],
    ids=["future-first", "docstring-then-future"],
)
def test_future_import_stays_first(head: bytes, cli, workdir: Path) -> None:
    _, out = convert_ok(cli, workdir, "train.py", head + TRAIN)

    assert out.startswith(head)
    assert_compiles(out)


# ----------------------------------------------------------------------------
# Hostile targets, closed streams, sizes: what README's "Bad input and file
# safety" table promises.  Cases that could hang or exhaust memory when handled
# wrongly run in a subprocess under a timeout.


def ddpify_process(
    *argv: str, cwd: Path, timeout: float = 60, shell_redirect: str = ""
) -> subprocess.CompletedProcess[bytes]:
    """``python -m ddpify ARGV`` in ``cwd``; ``shell_redirect`` is appended to the command line run by bash.

    The command runs in a session of its own, killed whole when it outlives ``timeout``.
    """
    command = " ".join(map(shlex.quote, [sys.executable, "-m", "ddpify", *argv]))
    with subprocess.Popen(
        ["bash", "-c", f"{command} {shell_redirect}"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    ) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            raise
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


def converted_train(cli, workdir: Path) -> bytes:
    (workdir / "reference").mkdir()
    (workdir / "reference" / "train.py").write_bytes(TRAIN)
    assert cli("reference/train.py", "-o", "reference/out.py", "-q").code == 0
    return (workdir / "reference" / "out.py").read_bytes()


def test_output_to_a_fifo_is_refused_without_reading_or_replacing_it(workdir: Path) -> None:
    (workdir / "train.py").write_bytes(TRAIN)
    os.mkfifo(workdir / "out.py")

    done = ddpify_process("train.py", "-o", "out.py", cwd=workdir)

    assert done.returncode == 2
    assert done.stderr.decode().splitlines() == ["error: out.py: not a regular file (a FIFO); give a file or -o -"]
    assert stat.S_ISFIFO(os.lstat(workdir / "out.py").st_mode)
    assert sorted(p.name for p in workdir.iterdir()) == ["out.py", "train.py"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mknod of a device needs root")
def test_output_to_a_character_device_is_refused_and_the_device_kept(cli, workdir: Path) -> None:
    (workdir / "train.py").write_bytes(TRAIN)
    null = os.stat("/dev/null")
    os.mknod(workdir / "out.py", stat.S_IFCHR | 0o666, null.st_rdev)

    run = cli("train.py", "-o", "out.py")

    assert run.code == 2
    assert run.err == ["error: out.py: not a regular file (a character device); give a file or -o -"]
    assert stat.S_ISCHR(os.lstat(workdir / "out.py").st_mode)


@pytest.mark.parametrize("target", ["/dev/full", "/dev/stdout"])
def test_output_to_a_device_is_refused_at_once(target: str, workdir: Path) -> None:
    # /dev/full reads zeros forever; /dev/stdout piped into `wc -c` waits for input that never comes.
    (workdir / "train.py").write_bytes(TRAIN)

    done = ddpify_process("train.py", "-o", target, cwd=workdir, timeout=30, shell_redirect="| wc -c")

    assert done.stdout.strip() == b"0"
    assert b"not a regular file" in done.stderr
    assert sorted(p.name for p in workdir.iterdir()) == ["train.py"]


def test_output_dash_writes_the_code_on_stdout(capsysbinary, workdir: Path) -> None:
    (workdir / "train.py").write_bytes(TRAIN)
    assert main(["train.py", "-o", "out.py", "-q"]) == 0
    expected = (workdir / "out.py").read_bytes()
    capsysbinary.readouterr()

    assert main(["train.py", "-o", "-", "-q"]) == 0

    assert capsysbinary.readouterr().out == expected
    assert not (workdir / "-").exists()


@pytest.mark.parametrize("option", ["--check", "--in-place", "--verify"])
def test_output_dash_with_an_option_that_needs_a_file(option: str, cli, workdir: Path) -> None:
    (workdir / "train.py").write_bytes(TRAIN)

    run = cli("train.py", "-o", "-", option)

    assert run.code == 2
    assert len(run.err) == 1 and run.err[0].startswith("error: ")
    assert sorted(p.name for p in workdir.iterdir()) == ["train.py"]


def test_output_with_a_trailing_slash_is_a_folder_that_is_created(cli, workdir: Path) -> None:
    expected = converted_train(cli, workdir)
    (workdir / "train.py").write_bytes(TRAIN)

    run = cli("train.py", "-o", "newdir/", "-q")

    assert run.code == 0, run.err
    assert (workdir / "newdir" / "train.py").read_bytes() == expected
    assert sorted(p.name for p in (workdir / "newdir").iterdir()) == ["train.py"]


def test_several_inputs_into_a_new_folder_with_a_trailing_slash(cli, workdir: Path) -> None:
    (workdir / "src").mkdir()
    (workdir / "src" / "a.py").write_bytes(TRAIN)
    (workdir / "src" / "b.py").write_bytes(TRAIN)

    run = cli("src", "-o", "out/", "-q", "-j", "1")

    assert run.code == 0, run.err
    assert sorted(p.name for p in (workdir / "out").iterdir()) == ["a.py", "b.py"]


def test_input_above_the_size_limit_is_refused_before_it_is_converted(cli, workdir: Path, monkeypatch) -> None:
    from ddpify.cli import backend

    big = TRAIN + b"# padding\n" * (1024 * 1024 // 10)
    (workdir / "big.py").write_bytes(big)
    monkeypatch.setattr(backend, "convert", lambda *a, **k: pytest.fail("converted a file above the limit"))

    run = cli("big.py", "-o", "out.py")

    assert run.code == 2
    assert run.err == [
        f"error: big.py: {len(big)} bytes, more than the limit of 1048576; raise it with --max-size BYTES"
    ]
    assert sorted(p.name for p in workdir.iterdir()) == ["big.py"]


def test_max_size_lowers_and_raises_the_limit(cli, workdir: Path) -> None:
    (workdir / "train.py").write_bytes(TRAIN)

    small = cli("train.py", "-o", "out.py", "--max-size", "100")
    large = cli("train.py", "-o", "out.py", "--max-size", str(2 * len(TRAIN)), "-q")

    assert small.code == 2
    assert small.err == [
        f"error: train.py: {len(TRAIN)} bytes, more than the limit of 100; raise it with --max-size BYTES"
    ]
    assert large.code == 0, large.err
    assert (workdir / "out.py").exists()


def test_stdin_above_the_size_limit_is_refused(workdir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ddpify", "-", "--max-size", "100"],
        input=TRAIN * 4,
        cwd=workdir,
        capture_output=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert done.stderr.decode().splitlines() == [
        "error: <stdin>: more than the limit of 100 bytes; raise it with --max-size BYTES"
    ]
    assert done.stdout == b""


def test_every_target_is_checked_before_anything_is_written(cli, workdir: Path) -> None:
    (workdir / "train.py").write_bytes(TRAIN)

    run = cli("train.py", "-o", "y.py", "--sbatch", "nodir/job.sh")

    assert run.code == 2
    assert run.err == ["error: cannot write nodir/job.sh: No such file or directory"]
    assert sorted(p.name for p in workdir.iterdir()) == ["train.py"]


def test_fifo_in_a_scanned_folder_is_skipped(workdir: Path) -> None:
    (workdir / "src").mkdir()
    (workdir / "src" / "a.py").write_bytes(TRAIN)
    os.mkfifo(workdir / "src" / "b.py")

    done = ddpify_process("src", "-j", "1", cwd=workdir, timeout=60)

    assert done.returncode == 0, done.stderr.decode()
    lines = done.stderr.decode().splitlines()
    assert "src/b.py: skipped, not a regular file (a FIFO)" in lines
    assert lines[-1] == "1 file: 1 converted"
    assert (workdir / "src" / "a_ddp.py").exists()


@pytest.mark.parametrize("suffix", [".py", "_ddp.py", " ", "_a b", "x/y", "x\\y", "\t"])
def test_odd_suffix_is_refused(suffix: str, cli, workdir: Path) -> None:
    (workdir / "train.py").write_bytes(TRAIN)

    run = cli("train.py", "--suffix", suffix)

    assert run.code == 2
    assert run.err == [f"error: --suffix {suffix!r}: give a part of a file name, such as _ddp"]
    assert sorted(p.name for p in workdir.iterdir()) == ["train.py"]


# Closed or broken standard streams are the environment's fault: exit 2 and a message.


def test_closed_stdin(workdir: Path) -> None:
    done = ddpify_process("-", cwd=workdir, shell_redirect="<&-")

    assert done.returncode == 2
    assert done.stderr.decode().splitlines() == ["error: <stdin>: stdin is closed"]


@pytest.mark.parametrize("redirect", [">&-", "> /dev/full"], ids=["closed", "full"])
def test_unwritable_stdout(redirect: str, workdir: Path) -> None:
    (workdir / "train.py").write_bytes(TRAIN)

    done = ddpify_process("train.py", "-q", cwd=workdir, shell_redirect=redirect)

    assert done.returncode == 2
    message = "stdout is closed" if redirect == ">&-" else "No space left on device"
    assert done.stderr.decode().splitlines() == [f"error: cannot write to stdout: {message}"]
    assert sorted(p.name for p in workdir.iterdir()) == ["train.py"]


def test_closed_stderr_never_sends_the_report_into_the_output(cli, workdir: Path) -> None:
    expected = converted_train(cli, workdir)
    (workdir / "train.py").write_bytes(TRAIN)

    done = ddpify_process("train.py", cwd=workdir, shell_redirect="> out.py 2>&-")

    assert done.returncode == 0
    assert (workdir / "out.py").read_bytes() == expected


NONBLOCKING_RUN = """\
import os, sys
from ddpify import Conversion, Status
from ddpify.cli import backend, main

def big(source, *, path, options, modules=()):
    return Conversion(source=source, code=source + b"# " + b"x" * 500_000 + b"\\n", status=Status.CONVERTED)

backend.convert = big
os.set_blocking(1, False)
sys.exit(main(["train.py", "-q"]))
"""


def test_nonblocking_stdout_gets_the_whole_output(workdir: Path) -> None:
    (workdir / "train.py").write_bytes(TRAIN)
    child = subprocess.Popen([sys.executable, "-c", NONBLOCKING_RUN], cwd=workdir, stdout=subprocess.PIPE)
    assert child.stdout is not None
    time.sleep(1.0)  # let the pipe fill up while nobody reads
    out = child.stdout.read()
    code = child.wait(timeout=60)

    assert code == 0
    assert len(out) == len(TRAIN) + 2 + 500_000 + 1


# Writing over existing files


def test_in_place_writes_through_hard_links(cli, workdir: Path) -> None:
    expected = converted_train(cli, workdir)
    (workdir / "train.py").write_bytes(TRAIN)
    os.link(workdir / "train.py", workdir / "linked.py")

    run = cli("train.py", "--in-place")

    assert run.code == 0, run.err
    assert (workdir / "linked.py").read_bytes() == expected
    assert os.path.samefile(workdir / "train.py", workdir / "linked.py")
    assert "train.py: written through its 2 hard links" in run.err


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another user needs root")
def test_replaced_output_keeps_its_owner_and_group(cli, workdir: Path) -> None:
    (workdir / "train.py").write_bytes(TRAIN)
    (workdir / "out.py").write_bytes(b"old\n")
    os.chown(workdir / "out.py", 1234, 2345)

    run = cli("train.py", "-o", "out.py", "-q")

    assert run.code == 0, run.err
    info = os.stat(workdir / "out.py")
    assert (info.st_uid, info.st_gid) == (1234, 2345)
    assert b"DDP(" in (workdir / "out.py").read_bytes()


def test_size_limit_applies_to_each_of_several_files(cli, workdir: Path) -> None:
    (workdir / "src").mkdir()
    (workdir / "src" / "small.py").write_bytes(TRAIN)
    (workdir / "src" / "large.py").write_bytes(TRAIN + b"# padding\n" * 100)
    limit = len(TRAIN) + 10

    run = cli("src", "-j", "2", "--max-size", str(limit))

    assert run.code == 2
    assert (
        f"error: src/large.py: {len(TRAIN) + 1000} bytes, more than the limit of {limit}; raise it with --max-size BYTES"
        in run.err
    )
    assert run.err[-1] == "2 files: 1 converted, 1 failed"
    assert sorted(p.name for p in (workdir / "src").iterdir()) == ["large.py", "small.py", "small_ddp.py"]


# ----------------------------------------------------------------------------
# A program's project is read to find other scripts that import its modules: files there that are
# no scripts at all (a symlink loop, a FIFO, a device, a link to nowhere) are never waited on,
# never read without limit, and never stop the run.

ODD_FILES = ["symlink-loop", "fifo", "dev-zero", "dangling-symlink"]


def make_odd(path: Path, kind: str) -> None:
    if kind == "symlink-loop":
        path.symlink_to(path.name)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.symlink_to("missing.py")


@pytest.fixture
def program_with_a_module(workdir: Path) -> Path:
    """``train.py`` (the base script) importing ``helpers.py``, in a project with a ``tools`` folder."""
    (workdir / "pyproject.toml").write_text("")
    (workdir / "helpers.py").write_text("SEED = 0\n")
    (workdir / "train.py").write_bytes(b"import helpers\n" + TRAIN)
    (workdir / "tools").mkdir()
    return workdir


@pytest.mark.parametrize("kind", ODD_FILES)
def test_odd_files_in_the_project_are_not_read_for_a_program(kind: str, program_with_a_module: Path) -> None:
    make_odd(program_with_a_module / "tools" / "odd.py", kind)

    done = ddpify_process("train.py", "-o", "train_ddp.py", cwd=program_with_a_module, timeout=60)

    assert done.returncode == 0, done.stderr.decode()
    assert b"DDP" not in done.stderr.replace(b"DDP(", b"")
    assert b"dist.init_process_group" in (program_with_a_module / "train_ddp.py").read_bytes()


@pytest.mark.parametrize(
    ("kind", "line", "code"),
    [
        ("symlink-loop", "error: ./tools/odd.py: Too many levels of symbolic links", 2),
        ("fifo", "./tools/odd.py: skipped, not a regular file (a FIFO)", 0),
        ("dev-zero", "./tools/odd.py: skipped, not a regular file (a character device)", 0),
        ("dangling-symlink", "error: ./tools/odd.py: No such file or directory", 2),
    ],
    ids=ODD_FILES,
)
def test_odd_files_in_a_searched_folder_are_reported_and_the_rest_converted(
    kind: str, line: str, code: int, program_with_a_module: Path
) -> None:
    make_odd(program_with_a_module / "tools" / "odd.py", kind)

    done = ddpify_process(".", "-j", "1", cwd=program_with_a_module, timeout=60)

    lines = done.stderr.decode().splitlines()
    assert done.returncode == code, lines
    assert line in lines
    total = "3 files: 1 converted, 1 unchanged, 1 failed" if code else "2 files: 1 converted, 1 unchanged"
    assert lines[-1] == total
    assert (program_with_a_module / "train_ddp.py").exists()


def test_a_package_whose_init_is_a_fifo_is_not_read(program_with_a_module: Path) -> None:
    (program_with_a_module / "helpers.py").unlink()
    (program_with_a_module / "helpers").mkdir()
    os.mkfifo(program_with_a_module / "helpers" / "__init__.py")

    done = ddpify_process("train.py", "-o", "train_ddp.py", cwd=program_with_a_module, timeout=60)

    # Not a module Python could import either: the package has no __init__ file to read.
    assert done.returncode == 0, done.stderr.decode()
    assert not (program_with_a_module / "helpers" / "__init__.py").is_file()


def test_a_file_name_with_a_line_break_keeps_each_finding_on_one_line(tmp_path: Path, run_ddpify) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    name = "my\ntrain.py"
    (tmp_path / name).write_bytes(b"import torch\n\nx = 1 +\n")  # invalid: one DDP002 finding

    done = run_ddpify(tmp_path, name, "--diff")

    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0].startswith("my\\ntrain.py:3:"), lines
    assert " DDP002 " in lines[0]
    assert not any(line.startswith("train.py") for line in lines), lines


def test_an_input_that_cannot_be_opened_says_nothing_was_written(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # What an unreadable input looks like, also where the tests run as root.
    (workdir / "train.py").write_bytes(TRAIN)
    original = os.open

    def refuse(path: object, *args: object, **kwargs: object) -> int:
        if os.fspath(path) == "train.py":  # type: ignore[arg-type]
            raise PermissionError(13, "Permission denied")
        return original(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refuse)

    assert main(["train.py", "-o", "out.py"]) == 2

    assert capsys.readouterr().err.splitlines() == ["error: train.py: Permission denied; nothing written"]
    assert not (workdir / "out.py").exists()

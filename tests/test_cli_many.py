"""The command line with several inputs, ``--spawn``, the launch commands, ``--sbatch`` and ``--k8s``.

Where only the plumbing is tested (which files are found, where outputs go,
what is printed and the exit code), the converter is replaced through its seam
``ddpify.cli.backend.convert`` by a fake whose outcome is chosen by a marker in the
source.  The real converter runs on tiny training scripts where its results
matter (``-j 1`` against ``-j 2``, real refusals, the report after a real
conversion); it takes about a second a file, so those tests convert few files.
Every test runs in its own empty folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ddpify import cli
from ddpify.cli import backend, program, workers
from ddpify.cli.exits import Outcome
from ddpify.cli.report import summary_line
from ddpify.diagnostics import Diagnostic, Severity
from ddpify.result import Conversion, Options, Status

TRAIN = b"""\
import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4, shuffle=True)

for epoch in range(2):
    for x, y in loader:
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""

# Batches sliced by hand: every rank would see the same samples (DDP201).
# A random value decides each step's path: left whole on every rank, the ranks would still part ways.
RANDOM_PATH = b"""\
import torch

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for step in range(10):
    x = torch.randn(4, 2)
    if torch.rand(1).item() < 0.5:
        x = x * 2
    loss = model(x).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""

NOT_PYTHON = b"def train(:\n"

# What the fake converter does with a source is chosen by a marker in it.
CONVERTS = b"model = Net()\n"
UNCHANGED = b"# already distributed\n"
WARNS = b"# warns\nmodel = Net()\n"
REFUSED = b"# refused\n"
INVALID = b"# invalid\n"
BROKEN = b"# internal error\n"
RAISES = b"# raises\n"


def to_ddp(source: bytes) -> bytes:
    return source.replace(b"model = Net()", b"model = DDP(Net())")


@dataclass
class FakeConverter:
    """Stands in for ``ddpify.core.convert``: the outcome follows the source's marker; records every call."""

    calls: list[tuple[str, Options]] = field(default_factory=list)

    def __call__(self, source: bytes, *, path: str, options: Options, modules: object = ()) -> Conversion:
        self.calls.append((path, options))
        if source.startswith(RAISES):
            raise RuntimeError("boom")
        status, diagnostics = Status.CONVERTED, ()
        if source.startswith(UNCHANGED):
            status = Status.UNCHANGED
        elif source.startswith(REFUSED):
            status = Status.REFUSED
            diagnostics = (Diagnostic(1, 1, "DDP201", Severity.ERROR, "hand-made batches", path=path),)
        elif source.startswith(INVALID):
            status = Status.INVALID
            diagnostics = (Diagnostic(1, 1, "DDP002", Severity.ERROR, "syntax error", path=path),)
        elif source.startswith(BROKEN):
            status = Status.INTERNAL_ERROR
            diagnostics = (Diagnostic(1, 1, "DDP900", Severity.ERROR, "output does not compile", path=path),)
        elif source.startswith(WARNS):
            diagnostics = (Diagnostic(1, 1, "DDP204", Severity.WARNING, "a loader to look at", path=path),)
        code = to_ddp(source) if status is Status.CONVERTED else source
        return Conversion(source=source, code=code, status=status, diagnostics=diagnostics)

    @property
    def paths(self) -> list[str]:
        return [path for path, _ in self.calls]


@pytest.fixture(autouse=True)
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)
    # git must not find a repository above the test's folder.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    return tmp_path


@pytest.fixture
def converter(monkeypatch) -> FakeConverter:
    fake = FakeConverter()
    monkeypatch.setattr(backend, "convert", fake)
    # The fake lives in this process: convert one file after another, as -j 1 does.
    monkeypatch.setattr(workers, "cpu_count", lambda: 1)
    # Its sources train only by their marker: the first pass must not turn them away.
    monkeypatch.setattr(program.Sketch, "may_train", lambda self: True)
    return fake


def make(root: Path, files: dict[str, bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (hidden ones and temporary files included) and its bytes."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(root).parts
    }


def err_lines(capsys) -> list[str]:
    return capsys.readouterr().err.splitlines()


# ----------------------------------------------------------------------------
# Which files a folder gives

SEARCHED = {
    "proj/train.py": CONVERTS,
    "proj/models/net.py": CONVERTS,
    "proj/train_ddp.py": CONVERTS,  # an earlier output
    "proj/README.md": b"# not a script\n",
    "proj/data/make_data.py": CONVERTS,  # ignored by .gitignore
    "proj/data/keep.txt": b"",
    **{
        f"proj/{folder}/skipped.py": CONVERTS
        for folder in (".git", ".hg", ".venv", "venv", "__pycache__", "build", "dist", ".tox", ".eggs", "node_modules")
    },
    "proj/lib/python3.11/site-packages/torch_thing.py": CONVERTS,
    "proj/.gitignore": b"data/\n*.log\n",
}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_folder_search_skips_excluded_folders_gitignored_files_and_outputs(converter, workdir, capsys):
    make(workdir, {name: content for name, content in SEARCHED.items() if not name.startswith("proj/.git/")})
    subprocess.run(["git", "init", "-q", "proj"], check=True)

    assert cli.main(["proj", "-q"]) == 0

    assert converter.paths == ["proj/train.py", "proj/models/net.py"]
    assert (workdir / "proj/models/net_ddp.py").read_bytes() == to_ddp(CONVERTS)


def test_folder_outside_a_git_work_tree_uses_the_default_excludes_only(converter, workdir, capsys):
    make(workdir, SEARCHED)

    assert cli.main(["proj", "--diff", "-q"]) == 0

    assert converter.paths == ["proj/train.py", "proj/data/make_data.py", "proj/models/net.py"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_without_git_the_gitignore_is_not_read(converter, workdir, monkeypatch, capsys):
    make(workdir, {name: content for name, content in SEARCHED.items() if not name.startswith("proj/.git/")})
    subprocess.run(["git", "init", "-q", "proj"], check=True)
    monkeypatch.setenv("PATH", str(workdir / "no-such-bin"))

    assert cli.main(["proj", "--diff", "-q"]) == 0

    assert converter.paths == ["proj/train.py", "proj/data/make_data.py", "proj/models/net.py"]


def test_named_files_are_taken_in_order_once_and_outputs_are_skipped(converter, workdir, capsys):
    make(workdir, {"b.py": CONVERTS, "a.py": CONVERTS, "a_ddp.py": CONVERTS, "pkg/c.py": CONVERTS})

    assert cli.main(["b.py", "a_ddp.py", "a.py", "./b.py", "pkg", "pkg/c.py", "--diff"]) == 0

    assert converter.paths == ["b.py", "a.py", "pkg/c.py"]
    assert err_lines(capsys)[0] == "a_ddp.py: skipped, the name of an output (*_ddp.py)"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["empty"], "error: empty: no Python files"),
        (["train.py", "empty", "-o", "out"], "error: empty: no Python files"),
        (["only_outputs"], "error: only_outputs: no Python files"),
        (["train.py", "missing.py"], "error: missing.py: No such file or directory"),
        (
            ["train.py", "-", "-o", "out"],
            "error: '-' reads one script from stdin; it cannot be combined with other inputs",
        ),
        (["train.py", "empty", "-o", "nowhere"], "error: empty: no Python files"),
        (
            ["train.py", "only_outputs/x.py", "-o", "nowhere"],
            "error: nowhere: no such folder; with several inputs, -o names an existing folder for the outputs "
            "(or, ending with a slash, one to create)",
        ),
        (
            ["train.py", "only_outputs/x.py", "-o", "train.py"],
            "error: train.py: not a folder; with several inputs, -o names an existing folder for the outputs "
            "(or, ending with a slash, one to create)",
        ),
        (
            ["train.py", "only_outputs/x.py", "--in-place", "-o", "out"],
            "error: --in-place rewrites each SRC; it cannot be combined with -o OUT",
        ),
        (
            ["train.py", "only_outputs/x.py", "--suffix", "_dist", "-o", "out"],
            "error: --suffix names outputs next to their inputs; it cannot be combined with -o OUT or --in-place",
        ),
        (["train.py", "--suffix", "a/b"], "error: --suffix 'a/b': give a part of a file name, such as _ddp"),
        (["train.py", "--suffix", ""], "error: --suffix '': give a part of a file name, such as _ddp"),
        (["-", "--suffix", "_dist"], "error: --suffix needs a file, not stdin"),
        (["train.py", "out", "--verify"], "error: --verify runs one script; give a single SRC"),
    ],
)
def test_inputs_that_cannot_be_used(converter, workdir, capsys, argv, message):
    make(workdir, {"train.py": CONVERTS, "only_outputs/x_ddp.py": CONVERTS, "only_outputs/x.py": CONVERTS})
    (workdir / "empty").mkdir()
    (workdir / "empty" / "notes.txt").write_bytes(b"")
    (workdir / "out").mkdir()
    if argv[0] == "only_outputs":
        (workdir / "only_outputs" / "x.py").unlink()
    before = tree(workdir)

    assert cli.main(argv) == 2

    assert capsys.readouterr() == ("", message + "\n")
    assert converter.calls == []
    assert tree(workdir) == before


def test_jobs_must_be_positive(converter, workdir, capsys):
    make(workdir, {"a.py": CONVERTS, "b.py": CONVERTS})

    assert cli.main(["a.py", "b.py", "-j", "0"]) == 2

    assert capsys.readouterr().err.startswith("error: Invalid value for '-j' / '--jobs': ")
    assert converter.calls == []


# ----------------------------------------------------------------------------
# Where the outputs go


def test_without_output_each_output_goes_next_to_its_input_with_the_suffix(converter, workdir, capsys):
    make(workdir, {"proj/train.py": CONVERTS, "proj/sub/eval.py": CONVERTS, "proj/utils.py": UNCHANGED})

    assert cli.main(["proj"]) == 0

    captured = capsys.readouterr()
    assert captured.out == ""  # stdout is for a single file only
    assert captured.err.splitlines() == [
        "converted proj/train.py -> proj/train_ddp.py (0 changes)",
        "proj/utils.py: nothing to do",
        "converted proj/sub/eval.py -> proj/sub/eval_ddp.py (0 changes)",
        "3 files: 2 converted, 1 unchanged",
    ]
    # A script that needs no change gets no copy next to itself.
    assert tree(workdir) == {
        "proj/sub/eval.py": CONVERTS,
        "proj/sub/eval_ddp.py": to_ddp(CONVERTS),
        "proj/train.py": CONVERTS,
        "proj/train_ddp.py": to_ddp(CONVERTS),
        "proj/utils.py": UNCHANGED,
    }

    # Run again: the outputs are not inputs, and nothing changes.
    converter.calls.clear()
    assert cli.main(["proj", "-q"]) == 0
    assert converter.paths == ["proj/train.py", "proj/utils.py", "proj/sub/eval.py"]
    assert len(tree(workdir)) == 5


def test_suffix_can_be_chosen_and_sends_a_single_file_next_to_it(converter, workdir, capsys):
    make(workdir, {"train.py": CONVERTS, "eval.py": CONVERTS, "eval_dist.py": b"old\n"})

    assert cli.main(["train.py", "--suffix", "_dist"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[:2] == [
        "converted train.py -> train_dist.py (0 changes)",
        "run it: torchrun --standalone --nproc_per_node=gpu train_dist.py",
    ]

    assert cli.main([".", "--suffix", "_dist", "-q"]) == 0
    assert tree(workdir) == {
        "eval.py": CONVERTS,
        "eval_dist.py": to_ddp(CONVERTS),
        "train.py": CONVERTS,
        "train_dist.py": to_ddp(CONVERTS),
    }


def test_output_folder_receives_the_paths_relative_to_the_common_base(converter, workdir, capsys):
    make(
        workdir,
        {"proj/train.py": CONVERTS, "proj/sub/eval.py": WARNS, "proj/utils.py": UNCHANGED, "other/gan.py": CONVERTS},
    )
    (workdir / "out").mkdir()
    (workdir / "out2").mkdir()

    assert cli.main(["proj", "-o", "out", "-q"]) == 0
    assert cli.main(["proj/sub/eval.py", "other", "-o", "out2"]) == 0

    assert err_lines(capsys) == [
        "proj/sub/eval.py:1:1: DDP204 a loader to look at",
        "converted proj/sub/eval.py -> out2/proj/sub/eval.py (0 changes, 1 warning)",
        "converted other/gan.py -> out2/other/gan.py (0 changes)",
        "2 files: 2 converted (1 warning)",
    ]
    outputs = {name: content for name, content in tree(workdir).items() if name.startswith("out")}
    # The output folder mirrors the inputs, helpers that need no change included,
    # so that the converted scripts still import them.
    assert outputs == {
        "out/sub/eval.py": to_ddp(WARNS),
        "out/train.py": to_ddp(CONVERTS),
        "out/utils.py": UNCHANGED,
        "out2/other/gan.py": to_ddp(CONVERTS),
        "out2/proj/sub/eval.py": to_ddp(WARNS),
    }


def test_output_folder_inside_the_input_folder_is_not_searched(converter, workdir, capsys):
    make(workdir, {"proj/train.py": CONVERTS})
    (workdir / "proj" / "converted").mkdir()

    assert cli.main(["proj", "-o", "proj/converted", "-q"]) == 0
    assert cli.main(["proj", "-o", "proj/converted", "-q"]) == 0

    assert converter.paths == ["proj/train.py", "proj/train.py"]
    assert tree(workdir) == {"proj/converted/train.py": to_ddp(CONVERTS), "proj/train.py": CONVERTS}


def test_output_folder_that_is_the_input_folder_is_refused(converter, workdir, capsys):
    make(workdir, {"proj/train.py": CONVERTS, "proj/eval.py": CONVERTS})

    assert cli.main(["proj", "-o", "proj"]) == 2

    assert capsys.readouterr() == (
        "",
        "error: proj/eval.py is the input file; pass --in-place to rewrite the inputs\n",
    )
    assert converter.calls == []
    assert tree(workdir) == {"proj/eval.py": CONVERTS, "proj/train.py": CONVERTS}


def test_in_place_rewrites_each_input_and_keeps_its_mode(converter, workdir, capsys):
    make(workdir, {"proj/train.py": CONVERTS, "proj/utils.py": UNCHANGED})
    (workdir / "proj" / "train.py").chmod(0o750)

    assert cli.main(["proj", "--in-place"]) == 0

    assert err_lines(capsys) == [
        "converted proj/train.py in place (0 changes)",
        "proj/utils.py: nothing to do",
        "2 files: 1 converted, 1 unchanged",
    ]
    assert tree(workdir) == {"proj/train.py": to_ddp(CONVERTS), "proj/utils.py": UNCHANGED}
    assert stat.S_IMODE((workdir / "proj" / "train.py").stat().st_mode) == 0o750


def test_diff_shows_each_file_in_input_order_and_writes_nothing(converter, workdir, capsys):
    make(workdir, {"b.py": CONVERTS, "a.py": CONVERTS, "c.py": UNCHANGED})
    before = tree(workdir)

    assert cli.main(["b.py", "a.py", "c.py", "--diff"]) == 0

    captured = capsys.readouterr()
    headers = [line for line in captured.out.splitlines() if line.startswith(("---", "+++"))]
    assert headers == ["--- b.py", "+++ b_ddp.py", "--- a.py", "+++ a_ddp.py"]
    assert captured.err.splitlines() == [
        "would convert b.py -> b_ddp.py (0 changes)",
        "would convert a.py -> a_ddp.py (0 changes)",
        "c.py: nothing to do",
        "3 files: 2 would be converted, 1 unchanged",
    ]
    assert tree(workdir) == before


# ----------------------------------------------------------------------------
# --check over several files


@pytest.fixture
def checked(workdir) -> dict[str, bytes]:
    files = {
        "proj/current.py": CONVERTS,
        "proj/current_ddp.py": to_ddp(CONVERTS),
        "proj/stale.py": CONVERTS,
        "proj/stale_ddp.py": b"old\n",
        "proj/missing.py": CONVERTS,
        "proj/helper.py": UNCHANGED,
    }
    make(workdir, files)
    return files


def test_check_lists_every_missing_or_stale_output_and_exits_1(converter, workdir, checked, capsys):
    assert cli.main(["proj", "--check"]) == 1

    assert err_lines(capsys) == [
        "proj/current_ddp.py is up to date",
        "proj/helper.py: nothing to do",
        "would write proj/missing_ddp.py (it is missing)",
        "would rewrite proj/stale_ddp.py",
        "4 files: 1 unchanged, 1 up to date, 2 would be rewritten",
    ]
    assert tree(workdir) == checked


def test_check_quiet_prints_only_what_would_be_rewritten(converter, workdir, checked, capsys):
    assert cli.main(["proj", "--check", "-q"]) == 1

    assert capsys.readouterr() == (
        "",
        "would write proj/missing_ddp.py (it is missing)\nwould rewrite proj/stale_ddp.py\n",
    )


def test_check_passes_once_the_outputs_are_written(converter, workdir, checked, capsys):
    assert cli.main(["proj", "-q"]) == 0
    assert cli.main(["proj", "--check"]) == 0

    assert err_lines(capsys)[-1] == "4 files: 1 unchanged, 3 up to date"


def test_check_against_an_output_folder(converter, workdir, capsys):
    make(workdir, {"proj/a.py": CONVERTS, "proj/b.py": CONVERTS, "out/a.py": to_ddp(CONVERTS)})

    assert cli.main(["proj", "-o", "out", "--check", "--diff"]) == 1

    captured = capsys.readouterr()
    assert "+++ out/b.py" in captured.out
    assert captured.err.splitlines() == [
        "out/a.py is up to date",
        "would write out/b.py (it is missing)",
        "2 files: 1 up to date, 1 would be rewritten",
    ]
    assert not (workdir / "out" / "b.py").exists()


# ----------------------------------------------------------------------------
# Exit codes, summary and progress


@pytest.mark.parametrize(
    ("sources", "code"),
    [
        ([CONVERTS, UNCHANGED], 0),
        ([CONVERTS, INVALID], 2),
        ([INVALID, REFUSED, CONVERTS], 3),
        ([REFUSED, INVALID, BROKEN], 123),
        ([RAISES, CONVERTS], 123),
    ],
)
def test_exit_code_is_the_highest_under_123_3_2_1_0(converter, workdir, capsys, sources, code):
    make(workdir, {f"proj/s{index}.py": source for index, source in enumerate(sources)})

    assert cli.main(["proj", "-q"]) == code

    # Each file is handled whatever became of the others.
    assert converter.paths == [f"proj/s{index}.py" for index in range(len(sources))]
    for index, source in enumerate(sources):
        written = (workdir / f"proj/s{index}_ddp.py").exists()
        assert written == (source == CONVERTS)


def test_check_exit_code_ranks_a_refusal_above_a_stale_output(converter, workdir, capsys):
    make(workdir, {"a.py": CONVERTS, "b.py": REFUSED})

    assert cli.main(["a.py", "b.py", "--check", "-q"]) == 3

    assert capsys.readouterr().err.splitlines() == [
        "would write a_ddp.py (it is missing)",
        "b.py:1:1: DDP201 hand-made batches",
    ]


def test_a_file_that_breaks_the_converter_is_reported_and_the_others_still_written(converter, workdir, capsys):
    make(workdir, {"a.py": RAISES, "b.py": BROKEN, "c.py": CONVERTS})

    assert cli.main(["a.py", "b.py", "c.py"]) == 123

    report = "please report a bug at https://github.com/ddpify/ddpify/issues with the input attached"
    assert err_lines(capsys) == [
        f"error: internal error while converting a.py: RuntimeError: boom; {report}",
        f"error: internal error while converting b.py: output does not compile; {report}",
        "converted c.py -> c_ddp.py (0 changes)",
        "3 files: 1 converted, 2 internal errors",
    ]
    assert sorted(tree(workdir)) == ["a.py", "b.py", "c.py", "c_ddp.py"]


def test_unreadable_file_is_counted_as_failed(converter, workdir, capsys):
    make(workdir, {"proj/b.py": CONVERTS})
    (workdir / "proj" / "a.py").symlink_to("nowhere.py")

    assert cli.main(["proj"]) == 2

    assert err_lines(capsys) == [
        "error: proj/a.py: No such file or directory",
        "converted proj/b.py -> proj/b_ddp.py (0 changes)",
        "2 files: 1 converted, 1 failed",
    ]


def test_summary_line_wording():
    outcomes = Counter({Outcome.CONVERTED: 9, Outcome.UNCHANGED: 2, Outcome.REFUSED: 1})

    assert summary_line(outcomes, warnings=1) == "12 files: 9 converted, 2 unchanged, 1 refused (1 warning)"
    assert summary_line(Counter({Outcome.CONVERTED: 1}), warnings=0) == "1 file: 1 converted"
    assert summary_line(Counter({Outcome.STALE: 2, Outcome.INVALID: 1}), warnings=3) == (
        "3 files: 2 would be rewritten, 1 invalid (3 warnings)"
    )


def test_summary_counts_refusals_and_warnings(converter, workdir, capsys):
    make(workdir, {"proj/a.py": WARNS, "proj/b.py": UNCHANGED, "proj/c.py": REFUSED})

    assert cli.main(["proj"]) == 3

    assert err_lines(capsys) == [
        "proj/a.py:1:1: DDP204 a loader to look at",
        "converted proj/a.py -> proj/a_ddp.py (0 changes, 1 warning)",
        "proj/b.py: nothing to do",
        "proj/c.py:1:1: DDP201 hand-made batches",
        "proj/c.py: not converted (1 error); nothing written",
        "3 files: 1 converted, 1 unchanged, 1 refused (1 warning)",
    ]


def test_quiet_prints_no_summary(converter, workdir, capsys):
    make(workdir, {"proj/a.py": WARNS, "proj/b.py": CONVERTS})

    assert cli.main(["proj", "-q"]) == 0

    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(("tty", "quiet", "shown"), [(True, False, True), (False, False, False), (True, True, False)])
def test_progress_only_on_a_terminal_and_not_quiet(converter, workdir, monkeypatch, capsys, tty, quiet, shown):
    make(workdir, {"proj/a.py": CONVERTS, "proj/b.py": CONVERTS})
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty)

    assert cli.main(["proj", *(["-q"] if quiet else [])]) == 0

    err = capsys.readouterr().err
    assert ("\r[1/2]" in err and "\r[2/2]" in err) == shown
    if shown:  # cleared before each message, so that lines start clean
        lines = [line.rsplit("\r", 1)[-1] for line in err.split("\n")[:-1]]
        assert lines == [
            "converted proj/a.py -> proj/a_ddp.py (0 changes)",
            "converted proj/b.py -> proj/b_ddp.py (0 changes)",
            "2 files: 2 converted",
        ]
    else:
        assert "\r" not in err


# ----------------------------------------------------------------------------
# The real converter


def test_jobs_1_and_jobs_2_give_the_same_outputs_and_report(workdir, capsys):
    make(workdir, {"proj/train.py": TRAIN, "proj/sub/train2.py": TRAIN.replace(b"lr=0.1", b"lr=0.2")})
    (workdir / "serial").mkdir()
    (workdir / "parallel").mkdir()

    assert cli.main(["proj", "-o", "serial", "-j", "1"]) == 0
    serial = capsys.readouterr().err
    assert cli.main(["proj", "-o", "parallel", "-j", "2"]) == 0
    parallel = capsys.readouterr().err

    assert parallel == serial.replace("serial/", "parallel/")
    assert tree(workdir / "parallel") == tree(workdir / "serial")
    assert sorted(tree(workdir / "serial")) == ["sub/train2.py", "train.py"]
    assert b"DistributedSampler" in (workdir / "serial" / "train.py").read_bytes()
    assert serial.splitlines()[-1] == "2 files: 2 converted"


def test_parallel_run_reports_an_unreadable_file_in_its_place(workdir, capsys):
    make(workdir, {"proj/b_train.py": TRAIN})
    (workdir / "proj" / "a_gone.py").symlink_to("nowhere.py")

    assert cli.main(["proj", "-j", "2"]) == 2

    err = err_lines(capsys)
    assert err[0] == "error: proj/a_gone.py: No such file or directory"
    assert err[-2:] == [
        "converted proj/b_train.py -> proj/b_train_ddp.py (5 changes)",
        "2 files: 1 converted, 1 failed",
    ]


def test_real_refusal_and_invalid_input_beside_a_conversion(workdir, capsys):
    make(workdir, {"a_train.py": TRAIN, "b_random.py": RANDOM_PATH, "c_broken.py": NOT_PYTHON})

    assert cli.main(["a_train.py", "b_random.py", "-j", "1", "-q"]) == 3
    capsys.readouterr()
    assert cli.main(["a_train.py", "c_broken.py", "-j", "1"]) == 2

    err = err_lines(capsys)
    assert any(line.startswith("c_broken.py:1:") for line in err)
    assert err[-1] == "2 files: 1 converted, 1 invalid"
    assert sorted(tree(workdir)) == ["a_train.py", "a_train_ddp.py", "b_random.py", "c_broken.py"]


def test_report_ends_with_the_commands_that_launch_the_output(workdir, capsys):
    (workdir / "train.py").write_bytes(TRAIN)

    assert cli.main(["train.py", "-o", "train_ddp.py"]) == 0

    assert err_lines(capsys)[-2:] == [
        "run it: torchrun --standalone --nproc_per_node=gpu train_ddp.py",
        "on several nodes: torchrun --nnodes=NUM_NODES --nproc_per_node=gpu --rdzv-backend=c10d "
        "--rdzv-endpoint=HEAD_NODE:29500 --rdzv-id=JOB_ID train_ddp.py",
    ]


def test_spawn_reaches_the_converter_and_the_report(converter, workdir, capsys):
    make(workdir, {"my train.py": CONVERTS, "proj/a.py": CONVERTS})

    assert cli.main(["my train.py", "-o", "my train_ddp.py", "--spawn"]) == 0
    assert cli.main(["proj", "--spawn", "-q"]) == 0
    assert cli.main(["proj", "-q"]) == 0

    # each writes one file next to its input: terminal output in other modules stays as it is
    assert [options for _, options in converter.calls] == [
        Options(spawn=True, module_output=False),
        Options(spawn=True, module_output=False),
        Options(spawn=False, module_output=False),
    ]
    assert err_lines(capsys)[-3:] == [
        "run it: torchrun --standalone --nproc_per_node=gpu 'my train_ddp.py'",
        "on several nodes: torchrun --nnodes=NUM_NODES --nproc_per_node=gpu --rdzv-backend=c10d "
        "--rdzv-endpoint=HEAD_NODE:29500 --rdzv-id=JOB_ID 'my train_ddp.py'",
        "or without torchrun: python 'my train_ddp.py'",
    ]


def test_spawn_is_in_the_help(capsys):
    assert cli.main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "--spawn / --no-spawn Let `python OUT` start one process per GPU itself (for machines without torchrun)" in out
    )
    for option in ("--jobs", "--suffix", "--sbatch", "--nodes", "--gpus-per-node"):
        assert option in out


@pytest.mark.parametrize(
    "argv",
    [
        ["train.py", "-o", "train_ddp.py", "-q"],
        ["train.py", "-o", "train_ddp.py", "--diff"],
        ["train.py", "-o", "./train.py", "--in-place"],
        ["train.py", "--in-place"],
        ["train.py"],
        ["proj"],
        ["proj", "-o", "out"],
    ],
)
def test_no_launch_commands_without_a_new_script_of_its_own(converter, workdir, capsys, argv):
    make(workdir, {"train.py": CONVERTS, "proj/a.py": CONVERTS})
    (workdir / "out").mkdir()

    assert cli.main(argv) == 0

    assert "torchrun" not in capsys.readouterr().err


def test_no_launch_commands_for_a_script_that_needed_no_change(converter, workdir, capsys):
    (workdir / "train.py").write_bytes(UNCHANGED)

    assert cli.main(["train.py", "-o", "train_ddp.py"]) == 0

    assert capsys.readouterr() == ("", "train.py: nothing to do\n")


# ----------------------------------------------------------------------------
# --sbatch


def test_sbatch_writes_an_executable_batch_script_with_the_script_arguments(converter, workdir, capsys):
    (workdir / "train.py").write_bytes(CONVERTS)
    # After --, words that look like ddpify's options or inputs belong to the script.
    script_args = ["--epochs", "3", "-o", "run dir", "train.py"]

    argv = ["train.py", "-o", "train_ddp.py", "--sbatch", "job.sh", "--nodes", "2", "--gpus-per-node", "4"]
    assert cli.main([*argv, "--", *script_args]) == 0

    assert converter.paths == ["train.py"]
    err = err_lines(capsys)
    assert err[1] == "wrote job.sh (2 nodes x 4 GPUs); submit it from this folder: sbatch job.sh"
    assert err[2].startswith("run it: torchrun ")
    job = workdir / "job.sh"
    assert stat.S_IMODE(job.stat().st_mode) == 0o755
    text = job.read_text()
    assert text.startswith("#!/bin/bash\n")
    assert "#SBATCH --nodes=2\n" in text
    assert "#SBATCH --gpus-per-node=4\n" in text
    assert "srun torchrun" in text
    assert "train_ddp.py --epochs 3 -o 'run dir' train.py\n" in text
    assert subprocess.run(["bash", "-n", str(job)], check=False).returncode == 0
    assert sorted(tree(workdir)) == ["job.sh", "train.py", "train_ddp.py"]


def test_sbatch_defaults_to_one_node_of_8_gpus_and_replaces_an_old_file(converter, workdir, capsys):
    (workdir / "train.py").write_bytes(CONVERTS)
    (workdir / "job.sh").write_text("old\n")
    (workdir / "job.sh").chmod(0o600)

    assert cli.main(["train.py", "-o", "train_ddp.py", "--sbatch", "job.sh", "-q"]) == 0

    assert capsys.readouterr() == ("", "")
    text = (workdir / "job.sh").read_text()
    assert "#SBATCH --nodes=1\n" in text
    assert "#SBATCH --gpus-per-node=8\n" in text
    assert stat.S_IMODE((workdir / "job.sh").stat().st_mode) == 0o755


def test_sbatch_is_not_written_for_a_refused_script(converter, workdir, capsys):
    (workdir / "train.py").write_bytes(REFUSED)

    assert cli.main(["train.py", "-o", "train_ddp.py", "--sbatch", "job.sh", "-q"]) == 3

    assert sorted(tree(workdir)) == ["train.py"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train.py", "--sbatch", "job.sh"], "--sbatch needs -o OUT: the script it starts"),
        (["train.py", "proj", "--sbatch", "job.sh"], "--sbatch starts one script; give a single SRC"),
        (["proj", "-o", "out", "--sbatch", "job.sh"], "--sbatch starts one script; give a single SRC"),
        (
            ["train.py", "-o", "train_ddp.py", "--check", "--sbatch", "job.sh"],
            "--sbatch writes a file; it cannot be combined with --check or --diff",
        ),
        (
            ["train.py", "-o", "train_ddp.py", "--sbatch", "train.py"],
            "--sbatch train.py names a training script; give the batch script a name of its own",
        ),
        (["train.py", "-o", "train_ddp.py", "--nodes", "2"], "--nodes needs --sbatch or --k8s"),
        (["train.py", "-o", "train_ddp.py", "--gpus-per-node", "2"], "--gpus-per-node needs --sbatch or --k8s"),
        (
            ["train.py", "-o", "train_ddp.py", "--", "--epochs", "1"],
            "unexpected argument '--epochs'; arguments for the script go after -- and need --verify, --sbatch or --k8s",
        ),
        (["train.py", "--k8s", "job.yaml"], "--k8s needs -o OUT: the script it starts"),
        (["proj", "-o", "out", "--k8s", "job.yaml"], "--k8s starts one script; give a single SRC"),
        (
            ["train.py", "-o", "train_ddp.py", "--diff", "--k8s", "job.yaml"],
            "--k8s writes a file; it cannot be combined with --check or --diff",
        ),
        (
            ["train.py", "-o", "train_ddp.py", "--k8s", "train_ddp.py"],
            "--k8s train_ddp.py names a training script; give the manifest a name of its own",
        ),
        (
            ["train.py", "-o", "train_ddp.py", "--k8s", "job", "--sbatch", "job"],
            "--sbatch and --k8s both name job; give each file a name of its own",
        ),
        (
            ["train.py", "-o", "train_ddp.py", "--k8s", "nowhere/job.yaml"],
            "cannot write nowhere/job.yaml: No such file or directory",
        ),
        (
            ["train.py", "-o", "train_ddp.py", "--k8s", "out"],
            "out: Is a directory; out/ (ending with a slash) writes into it",
        ),
    ],
)
def test_sbatch_bad_usage(converter, workdir, capsys, argv, message):
    make(workdir, {"train.py": CONVERTS, "proj/a.py": CONVERTS})
    (workdir / "out").mkdir()
    before = tree(workdir)

    assert cli.main(argv) == 2

    assert capsys.readouterr() == ("", f"error: {message}\n")
    assert converter.calls == []
    assert tree(workdir) == before


def test_k8s_writes_a_pytorchjob_manifest_that_runs_the_output_with_its_arguments(converter, workdir, capsys):
    yaml = pytest.importorskip("yaml")
    (workdir / "train.py").write_bytes(CONVERTS)
    script_args = ["--epochs", "3", "--name", "run 1", "yes"]

    argv = ["train.py", "-o", "train_ddp.py", "--k8s", "job.yaml", "--nodes", "2", "--gpus-per-node", "4"]
    assert cli.main([*argv, "--", *script_args]) == 0

    err = err_lines(capsys)
    assert err[1] == (
        "wrote job.yaml (2 nodes x 4 GPUs), a Kubeflow PyTorchJob: fill in IMAGE and NAMESPACE, "
        "then: kubectl apply -f job.yaml"
    )
    job = yaml.safe_load((workdir / "job.yaml").read_text())
    assert (job["apiVersion"], job["kind"], job["spec"]["nprocPerNode"]) == ("kubeflow.org/v1", "PyTorchJob", "4")
    for role, count in (("Master", 1), ("Worker", 1)):
        replica = job["spec"]["pytorchReplicaSpecs"][role]
        (container,) = replica["template"]["spec"]["containers"]
        assert replica["replicas"] == count
        assert container["command"] == ["torchrun", "train_ddp.py", *script_args]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": 4}
    assert not os.access(workdir / "job.yaml", os.X_OK)
    assert sorted(tree(workdir)) == ["job.yaml", "train.py", "train_ddp.py"]


def test_k8s_and_sbatch_together_and_neither_for_a_refused_script(converter, workdir, capsys):
    (workdir / "train.py").write_bytes(CONVERTS)
    (workdir / "refused.py").write_bytes(REFUSED)
    both = ["--k8s", "job.yaml", "--sbatch", "job.sh", "-q"]

    assert cli.main(["refused.py", "-o", "refused_ddp.py", *both]) == 3
    assert sorted(tree(workdir)) == ["refused.py", "train.py"]
    assert cli.main(["train.py", "-o", "train_ddp.py", *both]) == 0
    assert sorted(tree(workdir)) == ["job.sh", "job.yaml", "refused.py", "train.py", "train_ddp.py"]
    assert "--nproc_per_node 8" in (workdir / "job.sh").read_text()
    assert 'nprocPerNode: "8"' in (workdir / "job.yaml").read_text()


def test_an_option_value_of_double_dash_is_not_the_separator(converter, workdir, capsys):
    (workdir / "train.py").write_bytes(CONVERTS)

    assert cli.main(["train.py", "-o", "--", "-q"]) == 0

    assert (workdir / "--").read_bytes() == to_ddp(CONVERTS)
    assert capsys.readouterr() == ("", "")


# ----------------------------------------------------------------------------
# Interrupted: Ctrl-C (SIGINT to the whole process group, as a terminal sends
# it, once or twice) and SIGTERM to the main process stop the workers at once,
# leave no half-written file and end with one line and 128 + the signal.

MANY = 200


def start_many(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    for index in range(MANY):
        (src / f"script_{index:03d}.py").write_bytes(TRAIN)
    child = subprocess.Popen(
        [sys.executable, "-m", "ddpify", "src", "-o", "out", "-j", "2"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, as a shell job has
    )
    deadline = time.monotonic() + 120
    while not any(not p.name.startswith(".") for p in out.iterdir()):
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "no output written within two minutes"
        time.sleep(0.05)
    return child, out


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize(
    ("signals", "to_group", "code"),
    [([signal.SIGINT], True, 130), ([signal.SIGINT, signal.SIGINT], True, 130), ([signal.SIGTERM], False, 143)],
    ids=["ctrl-c", "ctrl-c-twice", "sigterm"],
)
def test_interrupted_run_stops_workers_and_leaves_whole_files(
    signals: list[signal.Signals], to_group: bool, code: int, tmp_path: Path
) -> None:
    from ddpify import convert

    expected = convert(TRAIN, path="script.py").code
    child, out = start_many(tmp_path)
    try:
        started = time.monotonic()
        for signum in signals:
            if to_group:
                os.killpg(child.pid, signum)
            else:
                os.kill(child.pid, signum)
            time.sleep(0.1)
        _, err = child.communicate(timeout=30)
        took = time.monotonic() - started
        deadline = time.monotonic() + 5
        while group_alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        workers_left = group_alive(child.pid)
    finally:
        if group_alive(child.pid):
            os.killpg(child.pid, signal.SIGKILL)

    lines = err.decode().splitlines()
    assert child.returncode == code, lines
    assert took < 5, f"took {took:.1f} s to stop"
    assert not workers_left, "worker processes still running"
    assert "Traceback" not in err.decode()
    written = sorted(p.name for p in out.iterdir())
    assert 0 < len(written) < MANY
    assert lines[-1] == f"interrupted: {len(written)} of {MANY} files written"
    assert all(not name.startswith(".") for name in written), written  # no temporary file left
    assert all((out / name).read_bytes() == expected for name in written)

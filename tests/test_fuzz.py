"""Reliability of ``convert()`` on inputs nobody wrote for it.

Bounded, derandomized shares of the two benchmark campaigns, so that CI sees
the same inputs on every run:

* ``benchmarks/fuzz.py``: hypothesmith programs (alone, or inside a small
  training script) and mutated training scripts (statements shuffled, dropped,
  duplicated, swapped); every one must pass :func:`fuzz.check` -- no exception,
  no internal error, a converted output compiles and is a fixed point, any
  other outcome returns the input byte for byte;
* ``benchmarks/stdlib_sweep.py``: fixed samples of the standard library,
  which holds no training code and must come back unchanged, byte for byte:
  as it is, and with ``import torch`` appended so that every file goes through
  libcst and the analysis.

The long runs are ``python benchmarks/fuzz.py --examples 3000`` and
``python benchmarks/stdlib_sweep.py --jobs 2 [--torch]``.  Converter bugs they
found are pinned at the end of this file, as ``xfail(strict=True)`` until fixed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import example, given, settings

from ddpify import Status, convert

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"ddpify_benchmark_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fuzz = load("fuzz")
stdlib_sweep = load("stdlib_sweep")

CI = settings(derandomize=True, **fuzz.SETTINGS)


@settings(CI, max_examples=150)
@given(fuzz.generated_programs("grammar"))
def test_programs_from_the_grammar(source: str | bytes) -> None:
    fuzz.check(source)


# from_node is about ten times slower to draw from: fewer examples.
@settings(CI, max_examples=40)
@given(fuzz.generated_programs("node"))
def test_programs_from_libcst_nodes(source: str | bytes) -> None:
    fuzz.check(source)


@settings(CI, max_examples=60)
@given(fuzz.mutants())
@example(
    mutant=(
        "tests/fixtures/process_group/fire_without_component/input.py",
        b'import fire, torch, torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\ndef train(epochs=2, lr=0.1):\n    data = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)\n    model = nn.Linear(4, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=lr)\n    data = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)\n    for _ in range(epochs):\n        for x, y in data:\n            opt.zero_grad()\n            nn.functional.mse_loss(model(x), y).backward()\n            opt.step()\n\n\ndef evaluate(path="m.pt"):\n    print(path)\n\n\nif __name__ == "__main__":\n    fire.Fire()\n',
    ),
).via("a second loader of one `for _ in` epoch loop: its name was chosen twice")
def test_mutated_training_scripts(mutant: tuple[str, bytes]) -> None:
    name, code = mutant
    fuzz.check(code, path=name)


def test_mutation_seeds_are_single_gpu_training_scripts() -> None:
    seeds = fuzz.seed_sources()
    names = [name for name, _ in seeds]
    assert len(seeds) >= 20
    assert not [n for n in names if n.endswith("_ddp.py")]
    assert any(n.startswith("examples/") for n in names) and any(n.startswith("tests/fixtures/") for n in names)
    for name, source in seeds:
        assert fuzz.compiles(source), name
        assert fuzz.statement_lists(fuzz.cst.parse_module(source)), name


def test_check_catches_a_converter_that_changes_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fuzz oracle itself: an unchanged status with other bytes is a failure."""
    from ddpify.result import Conversion

    monkeypatch.setattr(fuzz, "convert", lambda source, path: Conversion(source, source + b" ", Status.UNCHANGED))
    with pytest.raises(fuzz.FuzzFailure, match="differs from the source"):
        fuzz.check(b"x = 1\n")


@pytest.mark.parametrize(
    ("size", "seed", "torch"),
    [(150, 0, False), (30, 1, True)],
    ids=["150-files", "30-small-files-with-import-torch"],
)
def test_stdlib_sample_comes_back_byte_for_byte(size: int, seed: int, torch: bool) -> None:
    """With ``import torch`` appended, a file is parsed and analysed rather than only compiled.

    That costs about 20 times more, so that sample is smaller and drawn from files under 30 kB.
    """
    files = stdlib_sweep.python_files(stdlib_sweep.stdlib_root())
    if torch:
        files = [f for f in files if f.stat().st_size < 30_000]
    files = stdlib_sweep.sample(files, size, seed=seed)
    assert len(files) == size

    outcomes = stdlib_sweep.sweep(files, torch=torch)

    problems = [o for o in outcomes if o.status == "internal-error" or o.broken is not None]
    assert problems == []
    counts = stdlib_sweep.summary(outcomes)
    assert counts["unchanged"] + counts["invalid"] == size


def test_stdlib_files_skip_site_packages() -> None:
    files = stdlib_sweep.python_files(stdlib_sweep.stdlib_root())
    assert len(files) > 500
    assert not [f for f in files if "site-packages" in f.parts or "dist-packages" in f.parts]


@pytest.mark.parametrize(
    "source",
    [
        b"x = " + b" + ".join([b"1"] * 1000) + b"\n",
        b"x = " + b" ".join([b'"a"'] * 1000) + b"\n",
        b"if a:\n    pass\n" + b"elif a:\n    pass\n" * 1000,
        b"x = a" + b".b" * 1000 + b"\n",
    ],
    ids=["plus-chain", "string-concatenation", "elif-chain", "attribute-chain"],
)
def test_deeply_nested_valid_python_is_not_an_internal_error(source: bytes) -> None:
    compile(source, "deep.py", "exec")
    conversion = convert(source, path="deep.py")
    assert conversion.status is not Status.INTERNAL_ERROR, conversion.diagnostics


def test_import_after_the_training_loop_is_not_an_internal_error() -> None:
    """Found by the mutation fuzzer: the output was not a fixed point (exit 123); now refused (DDP104)."""
    setup = fuzz.TRAINING_SETUP.replace("import torch\n", "", 1)
    source = (setup + "\n" + fuzz.TRAINING_LOOP + "import torch\n").encode()
    compile(source, "late_import.py", "exec")

    conversion = convert(source, path="late_import.py")

    assert conversion.status is not Status.INTERNAL_ERROR, conversion.diagnostics


def test_form_feed_in_indentation_is_not_an_internal_error() -> None:
    source = (fuzz.TRAINING_SETUP + "\nif True:\n\x0c    pass\n\n" + fuzz.TRAINING_LOOP).encode()
    compile(source, "form_feed.py", "exec")

    conversion = convert(source, path="form_feed.py")

    assert conversion.status is not Status.INTERNAL_ERROR, conversion.diagnostics


def test_import_after_the_main_guard_is_not_an_internal_error() -> None:
    source = b"""\
from torch.utils.data import DataLoader, TensorDataset

def main(device):
    model = torch.nn.Linear(4, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    for epoch in range(2):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()

if __name__ == "__main__":
    main("cpu")
import torch
"""
    compile(source, "late_import.py", "exec")

    conversion = convert(source, path="late_import.py")

    assert conversion.status is not Status.INTERNAL_ERROR, conversion.diagnostics

"""Fuzz ``convert()``: generated programs and mutated training scripts.

Two kinds of input, each run through :func:`check`:

* ``generated`` -- programs from hypothesmith (``from_grammar() | from_node()``),
  alone, or placed at module level of a small training script so that the
  analysis and the rewrite passes see them too; given as ``str`` or as UTF-8
  ``bytes``;
* ``mutants`` -- the bundled single-GPU training scripts (``examples/*.py``
  without ``*_ddp.py``, ``tests/fixtures/*/*/input.py``) with statements
  shuffled, dropped, duplicated or swapped, at top level and inside function,
  class and loop bodies (one to three edits on libcst statement lists, so
  comments travel with their statement); a mutant is kept only if it still
  compiles.

:func:`check` asserts what ``convert()`` promises for any input: it does not
raise, the status is never ``internal-error``, the code has the source's type;
a converted output compiles and converting it again changes nothing; any
other outcome returns the source byte for byte.

    python benchmarks/fuzz.py --examples 3000            # each kind, random seeds
    python benchmarks/fuzz.py --examples 500 --kind mutants --seed 1
    python benchmarks/fuzz.py --examples 500 --kind generated --generator grammar

``tests/test_fuzz.py`` runs a bounded, derandomized share of both in CI.
Exit code 1 when hypothesis found a failing input (it prints the shrunk one).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import hypothesmith
import libcst as cst
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from ddpify import Conversion, Status, convert

ROOT = Path(__file__).resolve().parent.parent

# Module level of a small single-GPU training script; a generated program goes
# between the setup and the epoch loop.
TRAINING_SETUP = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=8, shuffle=True)
model = nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
"""
TRAINING_LOOP = """\
for epoch in range(2):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""

SETTINGS = {
    "deadline": None,
    "database": None,
    "suppress_health_check": list(HealthCheck),
}


class FuzzFailure(AssertionError):
    """``convert()`` broke one of its promises for an input."""


def check(source: str | bytes, path: str = "<fuzz>") -> Conversion:
    """Convert ``source`` and assert every promise ``convert()`` makes; return the conversion."""
    try:
        conversion = convert(source, path=path)
    except BaseException as exc:
        raise FuzzFailure(f"convert() raised {exc!r}") from exc
    if conversion.status is Status.INTERNAL_ERROR:
        raise FuzzFailure("internal error: " + "; ".join(d.format() for d in conversion.diagnostics))
    if type(conversion.code) is not type(source):
        raise FuzzFailure(f"code is {type(conversion.code).__name__} for a {type(source).__name__} source")
    if conversion.status is not Status.CONVERTED:
        if conversion.code != source:
            raise FuzzFailure(f"status {conversion.status.value} but the code differs from the source")
        return conversion
    try:
        compile(conversion.code, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        raise FuzzFailure(f"the converted output does not compile: {exc}") from exc
    again = convert(conversion.code, path=path)
    if again.status is not Status.UNCHANGED or again.code != conversion.code:
        raise FuzzFailure(f"converting the output again gives {again.status.value}, not unchanged")
    return conversion


def compiles(source: str | bytes) -> bool:
    try:
        compile(source, "<fuzz>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


# ----------------------------------------------------------------------------
# Generated programs


GENERATORS = ("grammar", "node")


@functools.cache
def hypothesmith_programs(generator: str = "both") -> st.SearchStrategy[str]:
    """hypothesmith's programs: from its grammar, from libcst nodes, or both.

    Built once: hypothesmith compiles its grammar each time a strategy is made.
    ``from_node`` is about ten times slower to draw from than ``from_grammar``.
    """
    if generator == "grammar":
        return hypothesmith.from_grammar()
    if generator == "node":
        return hypothesmith.from_node()
    return hypothesmith_programs("grammar") | hypothesmith_programs("node")


def generated_programs(generator: str = "both") -> st.SearchStrategy[str | bytes]:
    """A hypothesmith program, alone or inside a training script, as str or UTF-8 bytes."""
    return _placed(hypothesmith_programs(generator))


@st.composite
def _placed(draw: st.DrawFn, programs: st.SearchStrategy[str]) -> str | bytes:
    program = draw(programs)
    if draw(st.booleans()):
        embedded = TRAINING_SETUP + "\n" + program.rstrip(" \t\f\\") + "\n\n" + TRAINING_LOOP
        if compiles(embedded):
            program = embedded
    if draw(st.booleans()):
        return program.encode("utf-8", "surrogatepass")
    return program


# ----------------------------------------------------------------------------
# Mutated training scripts


def seed_paths() -> list[Path]:
    examples = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.endswith("_ddp.py"))
    return examples + sorted((ROOT / "tests" / "fixtures").glob("*/*/input.py"))


@functools.cache
def seed_sources() -> tuple[tuple[str, bytes], ...]:
    """(name, code) of every seed, smallest first: hypothesis starts from, and shrinks towards, the first."""
    sources = ((str(p.relative_to(ROOT)), p.read_bytes()) for p in seed_paths())
    return tuple(sorted(sources, key=lambda seed: (len(seed[1]), seed[0])))


class _Bodies(cst.CSTVisitor):
    """Every statement list of a module, in source order: the module's and each indented block's."""

    def __init__(self) -> None:
        self.found: list[cst.Module | cst.IndentedBlock] = []

    def visit_Module(self, node: cst.Module) -> None:
        self.found.append(node)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self.found.append(node)


def statement_lists(module: cst.Module) -> list[cst.Module | cst.IndentedBlock]:
    visitor = _Bodies()
    module.visit(visitor)
    return visitor.found


MUTATIONS = ("shuffle", "drop", "duplicate", "swap")


@st.composite
def mutated_statements(draw: st.DrawFn, body: tuple[cst.BaseStatement, ...]) -> list[cst.BaseStatement]:
    kind = draw(st.sampled_from(MUTATIONS))
    statements = list(body)
    if kind == "shuffle":
        return draw(st.permutations(statements))
    index = draw(st.integers(0, len(statements) - 1))
    if kind == "drop":
        del statements[index]
    elif kind == "duplicate":
        statements.insert(draw(st.integers(0, len(statements))), statements[index])
    else:
        other = draw(st.integers(0, len(statements) - 1))
        statements[index], statements[other] = statements[other], statements[index]
    return statements


@st.composite
def mutants(draw: st.DrawFn) -> tuple[str, bytes]:
    """A training script with one to three statement-list edits that still compiles: (seed name, code)."""
    name, source = draw(st.sampled_from(seed_sources()))
    module = cst.parse_module(source)
    for _ in range(draw(st.integers(1, 3))):
        bodies = statement_lists(module)
        target = draw(st.sampled_from(bodies))
        statements = draw(mutated_statements(tuple(target.body)))
        if not statements and isinstance(target, cst.IndentedBlock):
            continue  # an indented block needs a statement
        module = module.deep_replace(target, target.with_changes(body=statements))
    code = module.bytes
    assume(code != source and compiles(code))
    return name, code


# ----------------------------------------------------------------------------
# The campaign


def campaign(
    kind: str, examples: int, *, derandomize: bool, random_seed: int | None, generator: str = "both"
) -> tuple[Counter[str], float]:
    """Run ``examples`` inputs of one kind through :func:`check`; return status counts and seconds."""
    counts: Counter[str] = Counter()
    start = time.perf_counter()

    def record(source: str | bytes, path: str) -> None:
        counts[check(source, path).status.value] += 1
        done = sum(counts.values())
        if done % 250 == 0:
            print(f"  {kind}: {done} inputs, {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)

    if kind == "generated":
        test: Callable[[], None] = given(generated_programs(generator))(lambda source: record(source, "<fuzz>"))
    else:
        test = given(mutants())(lambda mutant: record(mutant[1], mutant[0]))
    test = settings(max_examples=examples, derandomize=derandomize, **SETTINGS)(test)
    if random_seed is not None and not derandomize:
        test = hypothesis_seed(random_seed)(test)
    test()
    return counts, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000, metavar="N", help="examples of each kind (default 1000)")
    parser.add_argument("--kind", choices=("generated", "mutants", "both"), default="both")
    parser.add_argument(
        "--generator", choices=(*GENERATORS, "both"), default="both", help="hypothesmith's generator for 'generated'"
    )
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random)")
    parser.add_argument("--derandomize", action="store_true", help="the fixed sequence CI uses")
    args = parser.parse_args(argv)

    kinds = ("generated", "mutants") if args.kind == "both" else (args.kind,)
    failed = False
    for kind in kinds:
        try:
            counts, elapsed = campaign(
                kind, args.examples, derandomize=args.derandomize, random_seed=args.seed, generator=args.generator
            )
        except Exception as exc:
            print(f"{kind}: FAILED: {exc!r}", flush=True)
            for note in getattr(exc, "__notes__", ()):  # hypothesis's falsifying example
                print(note, flush=True)
            failed = True
            continue
        total = sum(counts.values())
        statuses = ", ".join(f"{status} {count}" for status, count in sorted(counts.items()))
        print(f"{kind}: {total} inputs checked in {elapsed:.1f} s ({total / elapsed:.1f}/s): {statuses}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

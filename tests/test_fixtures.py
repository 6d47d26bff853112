"""Golden fixtures: ``tests/fixtures/<concern>/<case>/``.

Each case holds ``input.py`` and ``diagnostics.txt`` (the status, then every
diagnostic and change as the CLI prints them); ``expected.py`` exists when the
script is rewritten and is compared byte for byte. A case without
``expected.py`` asserts that the input comes back unchanged. An optional
``options.json`` holds the :class:`~ddpify.Options` the case converts with.

Regenerate after an intended change with ``DDPIFY_REGENERATE=1 pytest
tests/test_fixtures.py`` and review the result with ``git diff``.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from ddpify import Conversion, Options, Status, convert

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted(p.parent for p in FIXTURES.glob("*/*/input.py"))
REGENERATE = os.environ.get("DDPIFY_REGENERATE") == "1"


def options(case: Path) -> Options:
    path = case / "options.json"
    return Options(**json.loads(path.read_text())) if path.exists() else Options()


def report(conversion: Conversion) -> str:
    lines = [f"status: {conversion.status.value}"]
    lines += [f"{d.severity.value}: {d.format()}" for d in conversion.diagnostics]
    lines += [f"change: {c.line}: {c.summary}" for c in conversion.changes]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.name}" for c in CASES])
def test_fixture(case: Path) -> None:
    source = (case / "input.py").read_bytes()
    conversion = convert(source, path="input.py", options=options(case))
    expected_path = case / "expected.py"
    diagnostics_path = case / "diagnostics.txt"
    if REGENERATE:
        diagnostics_path.write_text(report(conversion))
        if conversion.changed:
            expected_path.write_bytes(conversion.code)
        elif expected_path.exists():
            expected_path.unlink()
    assert conversion.status is not Status.INTERNAL_ERROR, report(conversion)
    assert report(conversion) == diagnostics_path.read_text()
    if expected_path.exists():
        expected = expected_path.read_bytes()
        assert conversion.code == expected
        ast.parse(expected)
        again = convert(expected, path="expected.py", options=options(case))
        assert again.status is Status.UNCHANGED and again.code == expected, "the output must be a fixed point"
    else:
        assert conversion.code == source


def test_no_golden_output_imports_a_name_twice_in_its_imports_at_the_top() -> None:
    """A helper that asks for ``torch`` beside a script that imports it gets the script's import, not a second."""
    twice = []
    for case in CASES:
        expected = case / "expected.py"
        if not expected.exists():
            continue
        seen: set[str] = set()
        for stmt in ast.parse(expected.read_bytes()).body:
            if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                if seen and not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
                    break  # the imports at the top end at the first other statement
                continue
            if ast.dump(stmt) in seen:
                twice.append(f"{case.parent.name}/{case.name}:{stmt.lineno}")
            seen.add(ast.dump(stmt))
    assert twice == []


def test_every_concern_has_a_rewrite_and_a_no_change_case() -> None:
    for concern in sorted({case.parent for case in CASES}):
        kinds = {(case / "expected.py").exists() for case in CASES if case.parent == concern}
        assert kinds == {True, False}, f"{concern.name} needs both a changed and an unchanged case"


class _Group:
    """What the generated helpers ask of ``torch.distributed``, for one rank of a group."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size

    def get_rank(self) -> int:
        return self.rank

    def get_world_size(self) -> int:
        return self.world_size


@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
@pytest.mark.parametrize(("size", "batch_size"), [(64, 4), (70, 4), (9, 4), (101, 1)])
def test_each_rank_carries_its_state_through_a_contiguous_run_of_whole_batches(
    world_size: int, size: int, batch_size: int
) -> None:
    """The sampler a loader with a carried hidden state gets: equal runs of the single-process batches, in order."""
    module = ast.parse((FIXTURES / "data/carried_hidden_state/expected.py").read_text())
    helper = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "contiguous_batches")
    runs = []
    for rank in range(world_size):
        namespace: dict[str, object] = {"dist": _Group(rank, world_size)}
        exec(compile(ast.Module([helper], []), "expected.py", "exec"), namespace)
        runs.append(list(namespace["contiguous_batches"](size, batch_size)))  # type: ignore[operator]
    whole = size // batch_size // world_size * batch_size  # samples per rank
    assert [len(run) for run in runs] == [whole] * world_size
    assert [i for run in runs for i in run] == list(range(whole * world_size))  # in order, one after another
    assert all(run[0] % batch_size == 0 for run in runs if run)  # each begins a batch of the single process

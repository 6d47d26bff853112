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


def test_every_concern_has_a_rewrite_and_a_no_change_case() -> None:
    for concern in sorted({case.parent for case in CASES}):
        kinds = {(case / "expected.py").exists() for case in CASES if case.parent == concern}
        assert kinds == {True, False}, f"{concern.name} needs both a changed and an unchanged case"

"""Typed twins: each script against itself with its assignments annotated.

Python runs ``x: T = value`` as it runs ``x = value`` (inside a function the
annotation is not even evaluated), so ddpify must convert both the same way:
the same outcome, the same diagnostics and the same changes, line for line.
Typed training scripts are common in code ddpify has never seen; this sweep
finds where a concern reads only plain assignments.

For every input (default: the inputs of the golden fixtures, the trial
scripts and the bundled examples), the twin writes every one-target
assignment of a name or of ``obj.attr`` as ``target: "T" = value`` (names a
``global`` or ``nonlocal`` statement declares are left alone: Python refuses
to annotate them). A fixture's ``options.json`` applies to both. The sweep
prints each script whose two conversions differ, with the first differences,
and the count; it exits 1 when any differs.

    .venv/bin/python benchmarks/annotated_twins.py [FILE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, compare, converted, options_for, sweep, walk

from ddpify import convert
from ddpify.result import Conversion


class _Annotate(cst.CSTTransformer):
    def __init__(self, declared: set[str]) -> None:
        self.declared = declared

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        if len(updated.body) != 1 or not isinstance(small := updated.body[0], cst.Assign) or len(small.targets) != 1:
            return updated
        target = small.targets[0].target
        plain = isinstance(target, cst.Name) and target.value not in self.declared
        field = isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name)
        if not (plain or field):
            return updated
        annotation = cst.Annotation(cst.SimpleString('"T"'))
        return updated.with_changes(body=[cst.AnnAssign(target=target, annotation=annotation, value=small.value)])


def twin(source: str) -> str | None:
    """The source with its assignments annotated; None where it cannot be made."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    declared = {
        name.name.value for node in walk(module) if isinstance(node, (cst.Global, cst.Nonlocal)) for name in node.names
    }
    annotated = module.visit(_Annotate(declared)).code
    try:
        compile(annotated, "<twin>", "exec")
    except SyntaxError:
        return None
    return annotated


def _said(conversion: Conversion) -> Said:
    diagnostics = sorted(d.format().split(": ", 1)[-1] for d in conversion.diagnostics)
    changes = sorted(f"{c.line}: {c.summary}" for c in conversion.changes)
    return conversion.status.name, diagnostics, changes


def differences(path: Path) -> list[str] | None:
    """How the conversions of ``path`` and of its twin differ (empty: they do not); None where the twin
    cannot be made."""
    source = path.read_text()
    annotated = twin(source)
    if annotated is None:
        return None
    options = options_for(path)
    plain = _said(converted(source, options))
    typed = _said(convert(annotated, path="train.py", options=options))
    return compare(plain, typed, "typed")


def main(argv: list[str]) -> int:
    return sweep("annotated twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

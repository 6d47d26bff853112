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

import json
import sys
from pathlib import Path

import libcst as cst

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddpify import convert  # noqa: E402
from ddpify.result import Conversion, Options  # noqa: E402


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
        name.name.value for node in _walk(module) if isinstance(node, (cst.Global, cst.Nonlocal)) for name in node.names
    }
    annotated = module.visit(_Annotate(declared)).code
    try:
        compile(annotated, "<twin>", "exec")
    except SyntaxError:
        return None
    return annotated


def _walk(node: cst.CSTNode):  # type: ignore[no-untyped-def]
    yield node
    for child in node.children:
        yield from _walk(child)


def _said(conversion: Conversion) -> tuple[str, list[str], list[str]]:
    diagnostics = sorted(d.format().split(": ", 1)[-1] for d in conversion.diagnostics)
    changes = sorted(f"{c.line}: {c.summary}" for c in conversion.changes)
    return conversion.status.name, diagnostics, changes


def scripts() -> list[Path]:
    """The default inputs: every golden fixture's input, trial script and bundled example."""
    return [
        *sorted((ROOT / "tests" / "fixtures").glob("*/*/input.py")),
        *sorted((ROOT / "tests" / "trial").glob("*.py")),
        *sorted((ROOT / "examples").glob("*.py")),
    ]


def differences(path: Path) -> list[str] | None:
    """How the conversions of ``path`` and of its twin differ (empty: they do not); None where the twin
    cannot be made."""
    source = path.read_text()
    annotated = twin(source)
    if annotated is None:
        return None
    options_file = path.parent / "options.json"
    options = Options(**json.loads(options_file.read_text())) if options_file.exists() else Options()
    plain, typed = (_said(convert(text, path="script.py", options=options)) for text in (source, annotated))
    if "INTERNAL_ERROR" in (plain[0], typed[0]):
        return [f"{plain[0]} -> {typed[0]}: an internal error is never alike"]
    if plain == typed:
        return []
    found = [f"{plain[0]} -> {typed[0]}"]
    for kind, a, b in (("diagnostic", plain[1], typed[1]), ("change", plain[2], typed[2])):
        for line in sorted(set(a) ^ set(b))[:3]:
            found.append(f"{kind} {'only plain' if line in a else 'only typed'}: {line[:160]}")
    return found


def main(argv: list[str]) -> int:
    compared = differ = 0
    for path in [Path(a) for a in argv] or scripts():
        found = differences(path)
        if found is None:
            continue
        compared += 1
        if not found:
            continue
        differ += 1
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {found[0]}")
        for line in found[1:]:
            print(f"  {line}")
    print(f"annotated twins: {differ} of {compared} scripts convert differently")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

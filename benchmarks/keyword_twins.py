"""Keyword twins: each script against itself calling its own functions with keyword arguments.

``train(model, loader, optimizer, epoch)`` and ``train(model=model,
loader=loader, optimizer=optimizer, epoch=epoch)`` run the same call. ddpify must
convert both alike: the same outcome, the same diagnostic codes and the same
changes (line numbers aside).

The twin passes by keyword every positional argument of each call to a
function the script defines at module level (by its plain name), where the
function takes no ``*args`` and each parameter so filled may be given by keyword.

    .venv/bin/python benchmarks/keyword_twins.py [FILE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, codes, compare_twin, kind, sweep

from ddpify.result import Conversion


class _Keywords(cst.CSTTransformer):
    def __init__(self, functions: dict[str, cst.FunctionDef]) -> None:
        self.functions = functions
        self.made = 0

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if not isinstance(updated.func, cst.Name) or updated.func.value not in self.functions:
            return updated
        function = self.functions[updated.func.value]
        params = function.params
        if params.posonly_params or isinstance(params.star_arg, cst.Param):
            return updated
        names = [p.name.value for p in params.params]
        positional = [a for a in updated.args if a.keyword is None]
        if not positional or any(a.star for a in updated.args) or len(positional) > len(names):
            return updated
        self.made += 1
        equal = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
        args = [
            a.with_changes(keyword=cst.Name(names[i]), equal=equal) if a.keyword is None else a
            for i, a in enumerate(updated.args)
        ]
        return updated.with_changes(args=args)


def twin(source: str) -> str | None:
    """The source calling its own functions with keywords; None where no call changes."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    functions = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
    keywords = _Keywords(functions)
    code = module.visit(keywords).code
    if not keywords.made:
        return None
    try:
        compile(code, "<twin>", "exec")
    except SyntaxError:
        return None
    return code


def _said(conversion: Conversion) -> Said:
    changes = sorted(kind(c.summary) for c in conversion.changes)
    return conversion.status.name, codes(d.format() for d in conversion.diagnostics), changes


def differences(path: Path) -> list[str] | None:
    """How the conversions of ``path`` and of its keyword twin differ (empty: they do not); None where the
    twin cannot be made."""
    return compare_twin(path, twin(path.read_text()), _said, "keywords")


def main(argv: list[str]) -> int:
    return sweep("keyword twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

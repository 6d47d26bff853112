"""Method twins: each script against itself with its functions made methods of a class.

Larger training programs keep their state on an object: ``self.model``,
``self.loader``, ``self.optimizer`` in a Trainer's methods instead of a
function's parameters. Python runs both alike, and so must ddpify convert
both alike: the same outcome, the same diagnostic codes and the same changes
(line numbers aside, ``self.`` read as nothing).

The twin turns each top-level function ``f(a, b=1)`` that only direct calls
use into ``class F_q9`` whose ``__init__(self, a, b=1)`` keeps each parameter
on ``self`` and whose ``run(self)`` holds the body with each parameter read
as ``self.a``; each call ``f(x, b=2)`` becomes ``F_q9(x, b=2).run()``. Only
functions with plain parameters, no decorator, no ``global``, ``nonlocal`` or
``yield``, none named ``main``, and whose parameters no nested function or
class rebinds are turned.

    .venv/bin/python benchmarks/method_twins.py [FILE ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, codes, compare, converted, kind, options_for, sweep

from ddpify import convert
from ddpify.result import Conversion

SUFFIX = "_q9"


def _walk(node: cst.CSTNode, parent: cst.CSTNode | None = None):  # type: ignore[no-untyped-def]
    yield node, parent
    for child in node.children:
        yield from _walk(child, node)


def _class_name(function: str) -> str:
    return "".join(part.capitalize() for part in function.split("_")) + SUFFIX


def _turnable(function: cst.FunctionDef) -> bool:
    params = function.params
    if (
        function.decorators
        or function.name.value == "main"
        or not params.params
        or params.posonly_params
        or params.kwonly_params
        or isinstance(params.star_arg, (cst.Param, cst.ParamStar))
        or params.star_kwarg is not None
        or function.asynchronous is not None
    ):
        return False
    names = {p.name.value for p in params.params}
    for node, _ in _walk(function.body):
        if isinstance(node, (cst.Global, cst.Nonlocal, cst.Yield)):
            return False
        if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            inner = {n.value for n, _ in _walk(node) if isinstance(n, cst.Name)}
            if isinstance(node, (cst.FunctionDef, cst.Lambda)):
                inner_params = {p.name.value for p in node.params.params}
                if inner_params & names:
                    return False
            if isinstance(node, cst.ClassDef) and inner & names:
                return False
    return True


class _ToSelf(cst.CSTTransformer):
    """Reads and writes of the parameters become ``self.<name>`` (attributes and keywords left alone)."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:  # type: ignore[override]
        if updated.value in self.names:
            return cst.Attribute(value=cst.Name("self"), attr=cst.Name(updated.value))
        return updated


class _Calls(cst.CSTTransformer):
    def __init__(self, turned: dict[str, str]) -> None:
        self.turned = turned

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = updated.func
        if isinstance(func, cst.Name) and func.value in self.turned:
            made = updated.with_changes(func=cst.Name(self.turned[func.value]))
            return cst.Call(func=cst.Attribute(value=made, attr=cst.Name("run")))
        return updated


def _as_class(function: cst.FunctionDef) -> cst.ClassDef:
    names = [p.name.value for p in function.params.params]
    keep = "\n".join(f"        self.{n} = {n}" for n in names)
    init = cst.parse_statement(f"def __init__(self):\n{keep}\n")
    assert isinstance(init, cst.FunctionDef)
    self_param = cst.Param(cst.Name("self"))
    init = init.with_changes(params=function.params.with_changes(params=[self_param, *function.params.params]))
    body = function.body.visit(_ToSelf(set(names)))
    run = function.with_changes(
        name=cst.Name("run"), params=cst.Parameters(params=[self_param]), body=body, leading_lines=[]
    )
    header = cst.parse_statement(f"class {_class_name(function.name.value)}:\n    pass\n")
    assert isinstance(header, cst.ClassDef)
    blank = cst.EmptyLine()
    return header.with_changes(
        body=cst.IndentedBlock(body=[init, run.with_changes(leading_lines=[blank])]),
        leading_lines=function.leading_lines,
    )


def twin(source: str) -> str | None:
    """The script with its functions turned into classes; None where none can be."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    functions = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef) and _turnable(s)}
    # only functions that are called by name and never read otherwise (passed on, decorated with, ...)
    for node, parent in _walk(module):
        if isinstance(node, cst.Name) and node.value in functions:
            if (isinstance(parent, cst.Attribute) and parent.attr is node) or (
                isinstance(parent, cst.Arg) and parent.keyword is node
            ):
                continue  # ``model.train()``, ``f(train=...)``: another name
            called = isinstance(parent, cst.Call) and parent.func is node
            defined = isinstance(parent, cst.FunctionDef) and parent.name is node
            if not (called or defined):
                functions.pop(node.value)
    every = {n.value for n, _ in _walk(module) if isinstance(n, cst.Name)}
    turned = {name: _class_name(name) for name in functions if _class_name(name) not in every}
    if not turned:
        return None
    try:
        body = [_as_class(s) if isinstance(s, cst.FunctionDef) and s.name.value in turned else s for s in module.body]
        code = module.with_changes(body=body).visit(_Calls(turned)).code
        compile(code, "<twin>", "exec")
    except (SyntaxError, cst.CSTValidationError, TypeError):
        return None  # a parameter where only a plain name may stand (``except E as model``)
    return code


_SELF = re.compile(r"\bself\.")
_RESULT = re.compile(r"`\w+_result\d*`")  # a name made from the function's: ``run`` now


def _said(conversion: Conversion) -> Said:
    """Outcome, diagnostic codes and the kinds of change, ``self.`` read as nothing."""
    changes = sorted({kind(_RESULT.sub("`_result`", _SELF.sub("", c.summary))) for c in conversion.changes})
    return conversion.status.name, codes(d.format() for d in conversion.diagnostics), changes


def differences(path: Path) -> list[str] | None:
    """How the conversions of ``path`` and of its twin differ (empty: they do not); None where the twin
    cannot be made."""
    source = path.read_text()
    made = twin(source)
    if made is None:
        return None
    options = options_for(path)
    plain = _said(converted(source, options))
    other = _said(convert(made, path="train.py", options=options))
    return compare(plain, other, "methods")


def main(argv: list[str]) -> int:
    return sweep("method twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

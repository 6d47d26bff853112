"""Keyword-dict twins: each script against itself passing DataLoader and optimizer keywords through a dict.

``DataLoader(ds, batch_size=64, shuffle=True)`` and ``kwargs = {"batch_size":
64, "shuffle": True}`` then ``DataLoader(ds, **kwargs)`` make the same loader;
real scripts build such dicts (``train_kwargs``, ``optim_cfg``). ddpify must
convert both alike: the same outcome, the same diagnostic codes and the same
changes (line numbers aside; a change that quotes the call is read without it).

Two twins per script: the keywords of each ``DataLoader(...)`` or
``torch.optim`` optimizer call that is the whole value of an assignment or
the whole of an expression statement move into a dict made in the statement
before, as a literal (``{"batch_size": 64}``) or a call (``dict(batch_size=64)``).
``dataset``, ``sampler`` and ``batch_sampler`` stay keywords: ddpify refuses
a sampler or a dataset it would have to edit inside a dict (DDP202, DDP206).

    .venv/bin/python benchmarks/kwargs_twins.py [FILE ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, codes, compare_twins, kind, sweep, walk

from ddpify.result import Conversion

KINDS = ("literal", "call")
CALLS = frozenset({"DataLoader", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta"})
# kept as keywords: a sampler or a dataset given through a dict is refused (DDP202, DDP206), by design
KEPT = frozenset({"dataset", "sampler", "batch_sampler"})


def _called(call: cst.Call) -> str:
    func = call.func
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""


class _Dicts(cst.CSTTransformer):
    def __init__(self, how: str, taken: set[str]) -> None:
        self.how = how
        self.taken = taken
        self.made = 0

    def _call(self, small: cst.BaseSmallStatement) -> cst.Call | None:
        value = small.value if isinstance(small, (cst.Assign, cst.Expr)) else None
        if not isinstance(value, cst.Call) or _called(value) not in CALLS:
            return None
        keywords = [a for a in value.args if a.keyword is not None and a.keyword.value not in KEPT]
        if not keywords or any(a.star for a in value.args):
            return None
        return value

    def _dict(self, keywords: list[cst.Arg]) -> cst.BaseExpression:
        if self.how == "call":
            args = [cst.Arg(a.value, keyword=a.keyword) for a in keywords]
            return cst.parse_expression("dict()").with_changes(args=args)
        elements = [cst.DictElement(cst.SimpleString(f'"{a.keyword.value}"'), a.value) for a in keywords]  # type: ignore[union-attr]
        return cst.Dict(elements)

    def _block(self, body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        new: list[cst.BaseStatement] = []
        for stmt in body:
            if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
                call = self._call(stmt.body[0])
                if call is not None:
                    self.made += 1
                    name = f"kwargs{self.made}_q9"
                    while name in self.taken:
                        name += "x"
                    keywords = [a for a in call.args if a.keyword is not None and a.keyword.value not in KEPT]
                    positional = [
                        a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in call.args if a not in keywords
                    ]
                    args = [*positional, cst.Arg(cst.Name(name), star="**")]
                    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                    args = [a.with_changes(comma=comma) for a in args[:-1]] + [args[-1]]
                    made = cst.SimpleStatementLine(
                        [cst.Assign([cst.AssignTarget(cst.Name(name))], self._dict(keywords))],
                        leading_lines=stmt.leading_lines,
                    )
                    small = stmt.body[0].with_changes(value=call.with_changes(args=args))
                    new += [made, stmt.with_changes(body=[small], leading_lines=[])]
                    continue
            new.append(stmt)
        return new

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        return updated.with_changes(body=self._block(list(updated.body)))

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return updated.with_changes(body=self._block(list(updated.body)))


def twin(source: str, how: str) -> str | None:
    """The source with those keywords passed through dicts made ``how``; None where no call has any."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    dicts = _Dicts(how, {n.value for n in walk(module) if isinstance(n, cst.Name)})
    code = module.visit(dicts).code
    if not dicts.made:
        return None
    try:
        compile(code, "<twin>", "exec")
    except SyntaxError:
        return None
    return code


_CALL = re.compile(r"`[^`]*\(.*?\)`")  # a call quoted as written


def _said(conversion: Conversion) -> Said:
    changes = sorted(kind(_CALL.sub("`call`", c.summary)) for c in conversion.changes)
    diagnostics = codes(d.format() for d in conversion.diagnostics)
    return conversion.status.name, diagnostics, changes


def differences(path: Path) -> list[str] | None:
    """How the conversions of ``path`` and of its keyword-dict twins differ (empty: they do not); None
    where no twin can be made."""
    source = path.read_text()
    return compare_twins(path, {how: code for how in KINDS if (code := twin(source, how)) is not None}, _said)


def main(argv: list[str]) -> int:
    return sweep("keyword-dict twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

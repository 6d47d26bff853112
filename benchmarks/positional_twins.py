"""Positional twins: each script against itself with DataLoader and optimizer arguments passed by position.

``DataLoader(ds, batch_size=64, shuffle=True)`` and ``DataLoader(ds, 64, True)``
are one call; so are ``SGD(params, lr=0.1)`` and ``SGD(params, 0.1)``. ddpify
must convert both alike: the same outcome, the same diagnostics and the same
changes (line numbers aside; a change that quotes the call quotes it as written).

The twin passes by position each keyword argument of a ``DataLoader(...)``
call among ``dataset, batch_size, shuffle`` and each ``lr`` of a
``torch.optim`` optimizer, where every parameter before it is given by position
or keyword (and none by ``*`` or ``**``).

    .venv/bin/python benchmarks/positional_twins.py [FILE ...]
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, compare, converted, options_for, sweep

from ddpify import convert
from ddpify.result import Conversion

ORDERS = {
    "DataLoader": ("dataset", "batch_size", "shuffle"),
    **dict.fromkeys(("SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta"), ("params", "lr")),
}


class _Positional(cst.CSTTransformer):
    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        func = updated.func
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        order = ORDERS.get(name)
        if order is None or any(a.star for a in updated.args):
            return updated
        positional = [a for a in updated.args if a.keyword is None]
        keywords = {a.keyword.value: a for a in updated.args if a.keyword is not None}
        moved: list[cst.Arg] = []
        for param in order[len(positional) :]:
            if param not in keywords:
                break
            moved.append(keywords.pop(param).with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT))
        if not moved:
            return updated
        rest = [a for a in updated.args if a.keyword is not None and a.keyword.value in keywords]
        args = [*positional, *moved, *rest]
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        args = [a.with_changes(comma=comma) for a in args[:-1]] + [
            args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        ]
        return updated.with_changes(args=args)


def twin(source: str) -> str | None:
    """The source with those arguments passed by position; None where none is."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    code = module.visit(_Positional()).code
    if code == source:
        return None
    try:
        compile(code, "<twin>", "exec")
    except SyntaxError:
        return None
    return code


_NUMBERS = re.compile(r"\b\d+\b")
_CALL = re.compile(r"`[^`]*\(.*?\)`")  # a call quoted as written


def _said(conversion: Conversion) -> Said:
    codes = sorted(_CALL.sub("`call`", d.format().split(": ", 1)[-1]) for d in conversion.diagnostics)
    changes = sorted(Counter(_CALL.sub("`call`", _NUMBERS.sub("N", c.summary)) for c in conversion.changes).elements())
    return conversion.status.name, codes, changes


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
    return compare(plain, other, "positions")


def main(argv: list[str]) -> int:
    return sweep("positional twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

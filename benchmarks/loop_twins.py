"""Loop twins: each script against itself with its loops over a name drawn through ``enumerate`` or ``tqdm``.

``for x, y in loader:``, ``for i_q9, (x, y) in enumerate(loader):`` and
``for x, y in tqdm(loader):`` draw the same batches. ddpify must convert them
alike: the same outcome, the same diagnostic codes and the same changes (line
numbers aside; the progress bar's own change, shown on rank 0, left out).

Two twins per script: every ``for`` loop whose iterable is a plain name or
attribute (``loader``, ``self.loader``) goes through ``enumerate(...)`` with a
new index name, or through ``tqdm(...)`` (``from tqdm import tqdm`` added).

    .venv/bin/python benchmarks/loop_twins.py [FILE ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, codes, compare_twins, sweep

from ddpify.result import Conversion

KINDS = ("enumerate", "tqdm")


class _Wrap(cst.CSTTransformer):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.count = 0

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        if not isinstance(updated.iter, (cst.Name, cst.Attribute)):
            return updated
        self.count += 1
        call = cst.Call(func=cst.Name(self.kind), args=[cst.Arg(updated.iter)])
        if self.kind == "tqdm":
            return updated.with_changes(iter=call)
        target = updated.target
        if isinstance(target, cst.Tuple) and not target.lpar:
            target = target.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        index = cst.Name(f"i{self.count}_q9")
        pair = cst.Tuple([cst.Element(index), cst.Element(target)], lpar=[], rpar=[])
        return updated.with_changes(target=pair, iter=call)


def twin(source: str, kind: str) -> str | None:
    """The source with its loops drawn through ``kind``; None where no loop is."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    wrap = _Wrap(kind)
    new = module.visit(wrap)
    if not wrap.count or (kind == "tqdm" and "tqdm" in source):
        return None
    if kind == "tqdm":
        line = cst.parse_statement("from tqdm import tqdm\n")
        body = list(new.body)
        first = next(
            (
                i
                for i, s in enumerate(body)
                if isinstance(s, cst.SimpleStatementLine)
                and isinstance(s.body[0], (cst.Import, cst.ImportFrom))
                and not (
                    isinstance(s.body[0], cst.ImportFrom) and getattr(s.body[0].module, "value", "") == "__future__"
                )
            ),
            0,
        )
        new = new.with_changes(body=[*body[:first], line, *body[first:]])
    code = new.code
    try:
        compile(code, "<twin>", "exec")
    except SyntaxError:
        return None
    return code


_NUMBERS = re.compile(r"\b\d+\b")
_PROGRESS_BAR = "progress bar shown on global rank 0 only"


def _said(conversion: Conversion) -> Said:
    changes = sorted(_NUMBERS.sub("N", c.summary) for c in conversion.changes if c.summary != _PROGRESS_BAR)
    return conversion.status.name, codes(d.format() for d in conversion.diagnostics), changes


def differences(path: Path) -> list[str] | None:
    """How the conversions of ``path`` and of its loop twins differ (empty: they do not); None where no
    twin can be made."""
    source = path.read_text()
    return compare_twins(path, {kind: code for kind in KINDS if (code := twin(source, kind)) is not None}, _said)


def main(argv: list[str]) -> int:
    return sweep("loop twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Renamed twins: each script against itself with its own names renamed.

Names such as ``model`` or ``train_loader`` must mean nothing to ddpify: a
script whose variables, functions and classes are all called otherwise must
convert the same way, with the same outcome, the same diagnostics and the same
changes (the names they quote renamed alike).

The twin renames ``name`` to ``name_q9`` for every name the script binds at
module level or in a function (assignments, loops, ``with ... as``, imports of
its own names excluded, definitions of functions and classes), except names
that something could reach otherwise than by the name itself: a parameter or
keyword argument, an attribute, a name bound in a class body (methods,
fields), a name written in a string (``getattr``), a name starting with ``_``. Every other
occurrence of a renamed name is renamed alike, so the twin runs as the script
does.

    .venv/bin/python benchmarks/renamed_twins.py [FILE ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, compare, converted, options_for, sweep

from ddpify import convert
from ddpify.result import Conversion

SUFFIX = "_q9"


def _walk(node: cst.CSTNode, parent: cst.CSTNode | None = None):  # type: ignore[no-untyped-def]
    yield node, parent
    for child in node.children:
        yield from _walk(child, node)


def _bound_names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in _bound_names(e.value)]
    if isinstance(target, cst.StarredElement):
        return _bound_names(target.value)
    return []


def renaming(module: cst.Module) -> dict[str, str]:
    """The names to rename, each to its new name."""
    bound: set[str] = set()
    kept: set[str] = set()
    in_class: set[cst.CSTNode] = set()
    for node, parent in _walk(module):
        if isinstance(node, cst.ClassDef):
            kept.add(node.name.value)  # a class's name can be its pickled or registered identity
            in_class.update(s for s in node.body.body)
        if isinstance(node, cst.Attribute):
            kept.add(node.attr.value)
        elif isinstance(node, cst.Arg) and node.keyword is not None:
            kept.add(node.keyword.value)
        elif isinstance(node, cst.Param):
            kept.add(node.name.value)
        elif isinstance(node, (cst.Import, cst.ImportFrom)) and not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                kept.update(n.value for n in _walk_names(alias))
        elif isinstance(node, (cst.SimpleString, cst.FormattedStringText)):
            kept.update(re.findall(r"[A-Za-z_]\w*", node.value))
        elif isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor)):
            bound.update(_bound_names(node.target))
        elif isinstance(node, cst.AsName) and isinstance(parent, cst.WithItem):
            bound.update(_bound_names(node.name))
        elif isinstance(node, cst.FunctionDef):
            bound.add(node.name.value)
    for statement in in_class:  # methods and fields are reached as attributes
        for node, _ in _walk(statement):
            if isinstance(node, cst.FunctionDef):
                kept.add(node.name.value)
                break
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    kept.update(n for t in small.targets for n in _bound_names(t.target))
                elif isinstance(small, cst.AnnAssign):
                    kept.update(_bound_names(small.target))
    every = {n.value for n, _ in _walk(module) if isinstance(n, cst.Name)}
    chosen = sorted(n for n in bound - kept if not n.startswith("_") and n + SUFFIX not in every)
    return {n: n + SUFFIX for n in chosen}


def _walk_names(alias: cst.ImportAlias) -> list[cst.Name]:
    found = [n for n, _ in _walk(alias.name) if isinstance(n, cst.Name)]
    if alias.asname is not None:
        found += [n for n, _ in _walk(alias.asname) if isinstance(n, cst.Name)]
    return found


class _Rename(cst.CSTTransformer):
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)  # the object is renamed, the attribute is not

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        new = self.names.get(updated.value)
        return updated.with_changes(value=new) if new else updated


def twin(source: str) -> tuple[str, dict[str, str]] | None:
    """The source with its own names renamed, and the renaming; None where it cannot be made."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    names = renaming(module)
    if not names:
        return None
    renamed = module.visit(_Rename(names)).code
    try:
        compile(renamed, "<twin>", "exec")
    except SyntaxError:
        return None
    return renamed, names


# The suffix wherever the twin's messages quote a renamed name, or a name ddpify made from one
_RENAMED = re.compile(re.escape(SUFFIX) + r"(?![0-9A-Za-z])")


def _said(conversion: Conversion) -> Said:
    """Outcome, diagnostics and changes, with the twin's names back as they were."""

    def plain(text: str) -> str:
        return _RENAMED.sub("", text)

    diagnostics = sorted(plain(d.format().split(": ", 1)[-1]) for d in conversion.diagnostics)
    changes = sorted(plain(f"{c.line}: {c.summary}") for c in conversion.changes)
    return conversion.status.name, diagnostics, changes


def differences(path: Path) -> list[str] | None:
    """How the conversions of ``path`` and of its twin differ (empty: they do not); None where the twin
    cannot be made."""
    source = path.read_text()
    made = twin(source)
    if made is None:
        return None
    renamed, _names = made
    options = options_for(path)
    plain = _said(converted(source, options))
    other = _said(convert(renamed, path="train.py", options=options))
    return compare(plain, other, "renamed")


def main(argv: list[str]) -> int:
    return sweep("renamed twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

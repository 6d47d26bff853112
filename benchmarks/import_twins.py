"""Import twins: each script against itself with its imports written another way.

``from torch.utils.data import DataLoader`` then ``DataLoader(ds)`` runs the
same call as ``import torch.utils.data`` then ``torch.utils.data.DataLoader(ds)``,
and as ``import torch as th`` then ``th.utils.data.DataLoader(ds)``. Real
scripts write all three. ddpify must convert them alike: the same outcome, the
same diagnostic codes and the same changes (line numbers aside, names read
without the twin's suffix or module path).

Two twins per script:

* *qualified*: each name a ``from M import name [as other]`` binds (``M``
  absolute, not ``__future__``) is read as ``M.name``; the statement becomes
  ``import M``;
* *aliased*: each ``import M as N``, ``import M`` (``M`` without a dot) and
  ``from M import name [as N]`` binds its name with a suffix (``N_q9``), and
  every read of it follows.

Only names whose every read is a plain name (no string annotation) change.

    .venv/bin/python benchmarks/import_twins.py [FILE ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import libcst as cst
from libcst.metadata import ImportAssignment, MetadataWrapper, ScopeProvider

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, codes, compare_twins, kind, sweep, walk

from ddpify.result import Conversion

KINDS = ("qualified", "aliased")
SUFFIX = "_q9"


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


class _Plan:
    """Which import aliases change and what each read of their names becomes."""

    def __init__(self, module: cst.Module, twin: str) -> None:
        self.reads: dict[cst.Name, cst.BaseExpression] = {}
        self.aliases: dict[cst.ImportAlias, cst.ImportAlias] = {}
        self.qualified: dict[cst.ImportFrom, set[cst.ImportAlias]] = {}
        self.extra: list[tuple[cst.ImportFrom, cst.Import]] = []  # ``import M`` after what stays imported from M
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        scopes = {s for s in wrapper.resolve(ScopeProvider).values() if s is not None}
        every = {n.value for n in walk(module) if isinstance(n, cst.Name)}
        bound_otherwise = {a.name for s in scopes for a in s.assignments if not isinstance(a, ImportAssignment)}
        for scope in scopes:
            for assignment in scope.assignments:
                if not isinstance(assignment, ImportAssignment):
                    continue
                self._plan(assignment, twin, every, bound_otherwise)

    def _plan(self, assignment: ImportAssignment, twin: str, every: set[str], bound_otherwise: set[str]) -> None:
        statement, name = assignment.node, assignment.name
        alias = (
            next((a for a in statement.names if _bound(a) == name), None)
            if not isinstance(statement.names, cst.ImportStar)
            else None
        )
        if alias is None or alias in self.aliases or any(alias in q for q in self.qualified.values()):
            return
        accesses = [a.node for a in assignment.references]
        if not accesses or not all(isinstance(n, cst.Name) for n in accesses):
            return
        if isinstance(statement, cst.ImportFrom):
            if statement.relative or statement.module is None:
                return
            module_name = _dotted(statement.module)
            if module_name == "__future__":
                return
            if twin == "qualified":
                root = module_name.split(".")[0]
                if root in bound_otherwise:
                    return
                path = cst.parse_expression(f"{module_name}.{_dotted(alias.name)}")
                self.qualified.setdefault(statement, set()).add(alias)
                for node in accesses:
                    self.reads[node] = path  # type: ignore[index]
                return
        elif twin == "qualified" or (alias.asname is None and "." in _dotted(alias.name)):
            return
        new = name + SUFFIX
        if new in every:
            return
        self.aliases[alias] = alias.with_changes(asname=cst.AsName(cst.Name(new)))
        for node in accesses:
            self.reads[node] = cst.Name(new)  # type: ignore[index]


def _bound(alias: cst.ImportAlias) -> str:
    if alias.asname is not None:
        return alias.asname.name.value  # type: ignore[union-attr]
    return _dotted(alias.name).split(".")[0]


class _Rewrite(cst.CSTTransformer):
    def __init__(self, plan: _Plan) -> None:
        self.plan = plan

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self.plan.reads.get(original, updated)

    def leave_ImportAlias(self, original: cst.ImportAlias, updated: cst.ImportAlias) -> cst.ImportAlias:
        return self.plan.aliases.get(original, updated)

    def leave_ImportFrom(
        self, original: cst.ImportFrom, updated: cst.ImportFrom
    ) -> cst.ImportFrom | cst.Import | cst.RemovalSentinel:
        moved = self.plan.qualified.get(original)
        if not moved:
            return updated
        module = cst.Import(names=[cst.ImportAlias(name=original.module)])  # type: ignore[arg-type]
        assert not isinstance(original.names, cst.ImportStar)
        left = [a for a, b in zip(original.names, updated.names, strict=True) if a not in moved]
        if not left:
            return module
        self.plan.extra.append((original, module))
        return updated.with_changes(names=[*left[:-1], left[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)])

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        added = [m for o, m in self.plan.extra if o in original.body]
        return updated.with_changes(body=[*updated.body, *added]) if added else updated


def twin(source: str, how: str) -> str | None:
    """The source with its imports written ``how``; None where none changes."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    plan = _Plan(module, how)
    if not plan.aliases and not plan.qualified:
        return None
    code = module.visit(_Rewrite(plan)).code
    try:
        compile(code, "<twin>", "exec")
    except SyntaxError:
        return None
    return code


_SUFFIXED = re.compile(re.escape(SUFFIX) + r"(?![0-9A-Za-z])")
_MODULE_PATH = re.compile(r"\b(?:torch|tqdm)(?:\.[a-z_]\w*)*\.(?=[A-Z])")  # a qualified class quoted


def _said(conversion: Conversion) -> Said:
    changes = sorted(kind(_MODULE_PATH.sub("", _SUFFIXED.sub("", c.summary))) for c in conversion.changes)
    return conversion.status.name, codes(d.format() for d in conversion.diagnostics), changes


def differences(path: Path) -> list[str] | None:
    """How the conversions of ``path`` and of its import twins differ (empty: they do not); None where no
    twin can be made."""
    source = path.read_text()
    return compare_twins(path, {how: code for how in KINDS if (code := twin(source, how)) is not None}, _said)


def main(argv: list[str]) -> int:
    return sweep("import twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

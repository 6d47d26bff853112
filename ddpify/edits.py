"""The edit plan the passes fill in, and the one transformer that applies it.

Passes never mutate the tree: each records *what* should change at which node
of the analysed tree (replace an expression, insert statements before or after
a statement, run a statement on rank 0 only). ``apply()`` then makes all of
those changes in a single bottom-up traversal, keyed by node identity, so that
edits from different passes compose without any pass re-discovering nodes in a
tree another pass already changed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from ddpify.diagnostics import Change, Diagnostic, Severity
from ddpify.flow import Index


@dataclass(frozen=True)
class Import:
    module: str
    obj: str | None = None
    asname: str | None = None


@dataclass
class EditPlan:
    index: Index
    path: str
    rank_zero: cst.BaseExpression  # the test that is true on global rank 0 only
    replacements: dict[cst.CSTNode, list[Callable[[cst.CSTNode], cst.CSTNode]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    before: dict[cst.BaseStatement, list[cst.BaseStatement]] = field(default_factory=lambda: defaultdict(list))
    after: dict[cst.BaseStatement, list[cst.BaseStatement]] = field(default_factory=lambda: defaultdict(list))
    rank_zero_only: list[cst.BaseStatement] = field(default_factory=list)
    removed: set[cst.BaseStatement] = field(default_factory=set)
    inlined: set[cst.If] = field(default_factory=set)  # an ``if`` replaced by its own body
    imports: list[Import] = field(default_factory=list)
    setup_helpers: dict[str, cst.FunctionDef] = field(default_factory=dict)  # emitted after the setup function
    setup_definition: cst.FunctionDef | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)

    def replace(self, node: cst.CSTNode, rewrite: Callable[[cst.CSTNode], cst.CSTNode]) -> None:
        self.replacements[node].append(rewrite)

    def insert_before(self, anchor: cst.BaseStatement, *stmts: cst.BaseStatement) -> None:
        self.before[anchor].extend(stmts)

    def insert_after(self, anchor: cst.BaseStatement, *stmts: cst.BaseStatement) -> None:
        self.after[anchor].extend(stmts)

    def remove(self, stmt: cst.BaseStatement) -> None:
        self.removed.add(stmt)

    def inline(self, stmt: cst.If) -> None:
        """Run the body of ``stmt`` unconditionally (its test and any ``else`` are dropped)."""
        self.inlined.add(stmt)

    def on_rank_zero(self, stmt: cst.BaseStatement) -> None:
        if stmt not in self.rank_zero_only:
            self.rank_zero_only.append(stmt)

    def has_setup_helper(self, name: str) -> bool:
        return name in self.setup_helpers

    def add_setup_helper(self, name: str, definition: cst.FunctionDef) -> None:
        self.setup_helpers[name] = definition.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])

    def need_import(self, module: str, obj: str | None = None, asname: str | None = None) -> None:
        item = Import(module, obj, asname)
        if item not in self.imports:
            self.imports.append(item)

    def change(self, node: cst.CSTNode, summary: str) -> None:
        self.changes.append(Change(self.index.position(node)[0], summary))

    def report(self, node: cst.CSTNode, code: str, severity: Severity, message: str) -> None:
        line, column = self.index.position(node)
        self.diagnostics.append(Diagnostic(line, column, code, severity, message, self.path))


def apply(plan: EditPlan) -> cst.Module:
    if plan.setup_helpers and plan.setup_definition is not None:
        for stmts in plan.before.values():
            if plan.setup_definition in stmts:
                at = stmts.index(plan.setup_definition) + 1
                stmts[at:at] = plan.setup_helpers.values()
    merged_ifs = _ifs_run_on_rank_zero(plan)
    module = plan.index.module.visit(_Applier(plan, merged_ifs))
    if plan.imports:
        context = CodemodContext()
        for item in plan.imports:
            AddImportsVisitor.add_needed_import(context, item.module, item.obj, item.asname)
        module = AddImportsVisitor(context).transform_module(module)
    return module


def _ifs_run_on_rank_zero(plan: EditPlan) -> set[cst.If]:
    """``if step % 10 == 0: print(...)`` becomes ``if step % 10 == 0 and <rank 0>:``, not a nested ``if``."""
    guarded = set(plan.rank_zero_only)
    merged: set[cst.If] = {
        s for s in guarded if isinstance(s, cst.If) and s.orelse is None and isinstance(s.body, cst.SimpleStatementSuite)
    }
    for stmt in guarded - merged:
        block = plan.index.parent(stmt)
        owner = plan.index.parent(block)
        if (
            isinstance(owner, cst.If)
            and owner.orelse is None
            and owner.body is block
            and owner is not plan.index.main_guard
            and all(s in guarded and not plan.before.get(s) and not plan.after.get(s) for s in block.body)
        ):
            merged.add(owner)
    return merged


class _Applier(cst.CSTTransformer):
    def __init__(self, plan: EditPlan, merged_ifs: set[cst.If]) -> None:
        super().__init__()
        self.plan = plan
        self.merged_ifs = merged_ifs
        self.guarded = {
            s for s in plan.rank_zero_only
            if s not in merged_ifs and plan.index.parent(plan.index.parent(s)) not in merged_ifs
        }

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:
        for rewrite in self.plan.replacements.get(original_node, ()):
            updated_node = rewrite(updated_node)
        if original_node in self.merged_ifs:
            updated_node = updated_node.with_changes(test=_and(updated_node.test, self.plan.rank_zero))
        if isinstance(updated_node, (cst.IndentedBlock, cst.Module)) and isinstance(
            original_node, (cst.IndentedBlock, cst.Module)
        ):
            updated_node = updated_node.with_changes(body=self._body(original_node.body, updated_node.body))
        return updated_node

    def _body(self, originals, updated) -> list[cst.BaseStatement]:
        body: list[cst.BaseStatement] = []
        group: list[cst.BaseStatement] = []
        carried: list[cst.EmptyLine] = []  # blank lines and comments above a removed statement

        def flush() -> None:
            if group:
                body.append(_if_rank_zero(group, self.plan.rank_zero))
                group.clear()

        for original, new in zip(originals, updated):
            before = self.plan.before.get(original, [])
            after = self.plan.after.get(original, [])
            if carried and not (original in self.plan.removed):
                new = new.with_changes(leading_lines=[*carried, *new.leading_lines])
                carried = []
            if original in self.plan.removed:
                flush()
                body.extend(before)
                body.extend(after)
                carried = [*carried, *new.leading_lines]
            elif original in self.plan.inlined:
                flush()
                body.extend(before)
                inner = list(new.body.body)
                if isinstance(new.body, cst.SimpleStatementSuite):
                    inner = [cst.SimpleStatementLine([s.with_changes(semicolon=cst.MaybeSentinel.DEFAULT) for s in inner])]
                inner[0] = inner[0].with_changes(leading_lines=[*new.leading_lines, *inner[0].leading_lines])
                body.extend(inner)
                body.extend(after)
            elif original in self.guarded:
                if before:
                    flush()
                    body.extend(before)
                group.append(new)
                if after:
                    flush()
                    body.extend(after)
            else:
                flush()
                body.extend(before)
                body.append(new)
                body.extend(after)
        flush()
        if not body and isinstance(originals, (list, tuple)) and originals:
            body.append(cst.SimpleStatementLine(body=[cst.Pass()]))
        return body


def _if_rank_zero(stmts: list[cst.BaseStatement], test: cst.BaseExpression) -> cst.If:
    first = stmts[0]
    leading = first.leading_lines
    stmts = [first.with_changes(leading_lines=()), *stmts[1:]]
    return cst.If(test=test, body=cst.IndentedBlock(body=stmts), leading_lines=leading)


def _and(left: cst.BaseExpression, right: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(left, cst.BooleanOperation) and isinstance(left.operator, cst.Or) or isinstance(
        left, (cst.Lambda, cst.IfExp, cst.NamedExpr)
    ):
        left = left.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.BooleanOperation(left=left, operator=cst.And(), right=right)


def with_comma(args: tuple[cst.Arg, ...]) -> list[cst.Arg]:
    """The arguments of a call, ready for one more to be appended."""
    if not args:
        return []
    *rest, last = args
    if isinstance(last.comma, cst.Comma):
        return [*rest, last]
    return [*rest, last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))]


def fresh(base: str, used: set[str]) -> str:
    """``base``, or ``base2``, ``base3``... whichever the script does not use yet."""
    name, counter = base, 1
    while name in used:
        counter += 1
        name = f"{base}{counter}"
    return name

"""The edit plan the passes fill in, and the one transformer that applies it.

Passes never mutate the tree: each records *what* should change at which node
of the analysed tree (replace an expression, insert statements before or after
a statement, run a statement on rank 0 only). ``apply()`` then makes all of
those changes in a single bottom-up traversal, keyed by node identity, so that
edits from different passes compose without any pass re-discovering nodes in a
tree another pass already changed.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, cast

import libcst as cst

from ddpify.diagnostics import Change, Code, Diagnostic
from ddpify.engine.index import Index
from ddpify.engine.program import Names
from ddpify.engine.syntax import dotted, imported_names

# The two kinds of statement a block holds; both have leading blank lines and comments.
Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement
_Node = TypeVar("_Node", bound=cst.CSTNode)


@dataclass(frozen=True)
class Import:
    module: str
    obj: str | None = None
    asname: str | None = None


@dataclass
class EditPlan:
    """Every edit the concerns ask for, keyed by nodes of the analysed tree; applied at once by :func:`apply`."""

    index: Index
    path: str
    names: Names
    replacements: dict[cst.CSTNode, list[Callable[[cst.CSTNode], cst.CSTNode]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # statements to insert before each anchor, in the order asked for; a builder among them makes its statement
    # once the nodes inside the anchor are edited (see insert_before_built)
    before: dict[cst.BaseStatement, list[Statement | Callable[[], Statement]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    after: dict[cst.BaseStatement, list[Statement]] = field(default_factory=lambda: defaultdict(list))
    rank_zero_only: list[cst.BaseStatement] = field(default_factory=list)
    removed: set[cst.BaseStatement] = field(default_factory=set)
    inlined: set[cst.If] = field(default_factory=set)  # an ``if`` replaced by its own body
    decided_on_rank_zero: set[cst.BaseExpression] = field(default_factory=set)  # tests every rank takes from rank 0
    imports: list[Import] = field(default_factory=list)
    # functions and classes the generated code calls, emitted after the setup function
    setup_helpers: dict[str, cst.FunctionDef | cst.ClassDef] = field(default_factory=dict)
    # the same helpers as modules other scripts may import need them: working without a process group
    helpers_without_group: dict[str, cst.FunctionDef | cst.ClassDef] = field(default_factory=dict)
    setup_definition: cst.FunctionDef | None = None
    findings: list[tuple[cst.CSTNode, Code, str]] = field(default_factory=list)
    changed: list[tuple[cst.CSTNode, str]] = field(default_factory=list)
    # Modules that other programs import too: their code must also run where no process group exists.
    shared: set[cst.Module] = field(default_factory=set)
    rank_zero: cst.BaseExpression = field(init=False)  # the test that is true on global rank 0 only
    helpers_placed: bool = False
    # New imports of the entry script go above this statement (where the process group is set up)
    imports_before: cst.BaseStatement | None = None
    # the entry script binds ``torch`` only below where the process group is set up: import it at the top too
    torch_first: bool = False

    def __post_init__(self) -> None:
        self.rank_zero = self.rank_zero_test(self.index.module)

    def rank_zero_test(self, module: cst.Module) -> cst.BaseExpression:
        """``dist.get_rank() == 0``; in a shared module, also true where no process group exists."""
        dist = self.names.dist
        if module in self.shared:
            return cst.parse_expression(f"not {dist}.is_initialized() or {dist}.get_rank() == 0")
        return cst.parse_expression(f"{dist}.get_rank() == 0")

    def without_group(self, anchor: cst.CSTNode) -> bool:
        """Whether code inserted at ``anchor`` must also run where no process group exists: it is in a
        module other scripts may import."""
        return self.index.module_of(anchor) in self.shared

    def rank(self, anchor: cst.CSTNode) -> str:
        """This process's global rank, as code inserted at ``anchor`` reads it (0 without a group)."""
        dist = self.names.dist
        if self.without_group(anchor):
            return f"({dist}.get_rank() if {dist}.is_initialized() else 0)"
        return f"{dist}.get_rank()"

    def world_size(self, anchor: cst.CSTNode) -> str:
        """The number of processes, as code inserted at ``anchor`` reads it (1 without a group)."""
        dist = self.names.dist
        if self.without_group(anchor):
            return f"({dist}.get_world_size() if {dist}.is_initialized() else 1)"
        return f"{dist}.get_world_size()"

    def with_group(self, anchor: cst.CSTNode, test: str) -> str:
        """``test``, for a condition inserted at ``anchor`` that runs a collective: in a module other
        scripts may import, only where a process group exists."""
        if self.without_group(anchor):
            return f"{self.names.dist}.is_initialized() and {test}"
        return test

    def where_distributed(self, anchor: cst.CSTNode, stmt: Statement) -> Statement:
        """``stmt``, to be inserted next to ``anchor``; in a shared module, run only where a process
        group exists (``if dist.is_initialized():``), so that other scripts can still call that code."""
        if not self.without_group(anchor):
            return stmt
        test = cst.parse_expression(f"{self.names.dist}.is_initialized()")
        return cst.If(test=test, body=cst.IndentedBlock(body=[stmt]))

    def replace(self, node: cst.CSTNode, rewrite: Callable[[cst.CSTNode], cst.CSTNode]) -> None:
        self.replacements[node].append(rewrite)

    def insert_before(self, anchor: cst.BaseStatement, *stmts: Statement) -> None:
        self.before[anchor].extend(stmts)

    def insert_before_built(self, anchor: cst.BaseStatement, build: Callable[[], Statement]) -> None:
        """Insert before ``anchor`` the statement ``build()`` makes once the nodes inside ``anchor`` are
        edited: a statement that moves an expression out of ``anchor`` keeps the other edits inside it. It
        comes where it was asked for among the statements inserted there."""
        self.before[anchor].append(build)

    def insert_after(self, anchor: cst.BaseStatement, *stmts: Statement) -> None:
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

    def add_setup_helper(
        self,
        name: str,
        definition: cst.FunctionDef | cst.ClassDef,
        without_group: cst.FunctionDef | cst.ClassDef | None = None,
    ) -> None:
        """Define ``name`` where generated code calls it; ``without_group`` is its form for a module that
        other scripts may import (one that also works without a process group)."""
        blank = [cst.EmptyLine(), cst.EmptyLine()]
        self.setup_helpers[name] = definition.with_changes(leading_lines=blank)
        if without_group is not None:
            self.helpers_without_group[name] = without_group.with_changes(leading_lines=blank)

    def need_import(self, module: str, obj: str | None = None, asname: str | None = None) -> None:
        item = Import(module, obj, asname)
        if item not in self.imports:
            self.imports.append(item)

    def change(self, node: cst.CSTNode, summary: str) -> None:
        self.index.want_position(node)
        self.changed.append((node, summary))

    def report(self, node: cst.CSTNode, code: Code, message: str) -> None:
        self.index.want_position(node)
        self.findings.append((node, code, message))

    def diagnostics(self) -> list[Diagnostic]:
        """What the rewrites reported, at its place in the input."""
        index = self.index
        return [code.at(*index.position(node), message, index.path_of(node)) for node, code, message in self.findings]

    def changes(self) -> list[Change]:
        """Every change, at the line of the input it was made for."""
        index = self.index
        return [Change(index.position(node)[0], summary, index.path_of(node)) for node, summary in self.changed]


def apply(plan: EditPlan) -> cst.Module:
    """The script with every edit of ``plan`` made (a program of one module)."""
    _place_setup_helpers(plan)
    _place_imports(plan, plan.index.module, plan.imports)
    everything: set[cst.CSTNode] = set(plan.rank_zero_only)
    return _apply(plan, plan.index.module, list(_edited_nodes(plan)), everything)


def apply_program(plan: EditPlan) -> dict[cst.Module, cst.Module]:
    """Every module of the program that ``plan`` edits, with its edits made.

    Each module gets only the new imports its new code uses: the generated names
    are fresh in the whole program, so a name the module did not mention before
    and mentions now is one the edits brought.
    """
    index = plan.index
    by_module = _edited_by_module(plan)
    everywhere = by_module.pop(None, [])  # nodes the index does not number
    rank_zero: set[cst.CSTNode] = set(plan.rank_zero_only)
    result: dict[cst.Module, cst.Module] = {}
    for module in index.modules:
        if module not in by_module:
            continue
        draft = _apply(plan, module, [*by_module[module], *everywhere], rank_zero)
        before, after = module.code, draft.code
        used = [n for n in plan.setup_helpers if _mentions(after, n) > _mentions(before, n)]
        # the helpers' own code counts too: it calls dist, DistributedSampler, ...
        after += "".join(module.code_for_node(plan.setup_helpers[n]) for n in used)
        bound = index.bound[module]
        needed = [
            item
            for item in _candidate_imports(plan)
            if _local_name(item) not in bound and _mentions(after, item) > _mentions(before, item)
        ]
        if module is index.module and plan.torch_first and Import("torch") not in needed:
            needed.append(Import("torch"))
        if used and module is index.module:
            _place_setup_helpers(plan, used)
        elif used:
            _place_helpers(plan, module, [plan.helpers_without_group.get(n, plan.setup_helpers[n]) for n in used])
        if needed:
            _place_imports(plan, module, needed)
        if used or needed:  # the helpers and imports are placed at the module's own top-level statements
            placed = [stmt for stmt in module.body if stmt in plan.replacements or stmt in plan.before]
            draft = _apply(plan, module, [*by_module[module], *everywhere, *placed], rank_zero)
        result[module] = draft
    return result


def _candidate_imports(plan: EditPlan) -> list[Import]:
    """The imports generated code may need: those the concerns asked for, and the modules every
    concern may write (``os.devnull``, ``dist``, ``torch``), which the entry script may already have."""
    names = plan.names
    candidates = list(plan.imports)
    for item in (
        Import("os", None, None if names.os == "os" else names.os),
        Import("torch.distributed", None, names.dist),
        Import("torch"),
    ):
        if all(_local_name(c) != _local_name(item) for c in candidates):
            candidates.append(item)
    return candidates


def _local_name(item: Import) -> str:
    return item.asname or item.obj or item.module.split(".")[0]


def _qualified(item: Import) -> str:
    """What ``item`` binds its local name to, as :func:`~ddpify.engine.syntax.imported_names` says it."""
    if item.obj is not None:
        return f"{item.module}.{item.obj}"
    return item.module if item.asname else item.module.split(".")[0]


def _mentions(code: str, item: Import | str) -> int:
    name = item if isinstance(item, str) else _local_name(item)
    return len(re.findall(rf"\b{re.escape(name)}\b", code))


def _place_helpers(plan: EditPlan, module: cst.Module, used: list[cst.FunctionDef | cst.ClassDef]) -> None:
    """Define in ``module`` the helpers that its new code calls, below its imports (in the entry
    script they follow the setup function)."""
    body = list(module.body)
    imports = [i for i, stmt in enumerate(body) if _import_module(stmt) is not None]
    leading = imports and all(_import_module(s) is not None or _is_docstring(s) for s in body[: imports[-1] + 1])
    first = imports[-1] + 1 if leading else int(_is_docstring(body[0]))
    if first < len(body):  # before the first statement after the imports; new imports go above
        plan.before[body[first]][0:0] = used
    else:
        plan.after[body[-1]].extend(used)


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, cst.SimpleString)
    )


def _place_setup_helpers(plan: EditPlan, names: Sequence[str] | None = None) -> None:
    """Put the helpers (all, or those ``names``) right after the setup function."""
    helpers = [d for n, d in plan.setup_helpers.items() if names is None or n in names]
    if helpers and plan.setup_definition is not None and not plan.helpers_placed:
        plan.helpers_placed = True
        for stmts in plan.before.values():
            if plan.setup_definition in stmts:
                at = stmts.index(plan.setup_definition) + 1
                stmts[at:at] = helpers


def _apply(plan: EditPlan, module: cst.Module, edited: list[cst.CSTNode], rank_zero: set[cst.CSTNode]) -> cst.Module:
    """``module`` with its ``edited`` nodes' edits made (``rank_zero``: every statement of the program
    that runs on rank 0 only)."""
    plan.rank_zero = plan.rank_zero_test(module)
    here = [node for node in edited if node in rank_zero]
    merged_ifs = _ifs_run_on_rank_zero(plan, here, rank_zero)
    return module.visit(_Applier(plan, merged_ifs, edited, here, rank_zero))


def _edited_by_module(plan: EditPlan) -> dict[cst.Module | None, list[cst.CSTNode]]:
    """The edited nodes of each module (None: nodes the index does not number), found once: each
    module's rewrite looks only at its own, not at every edit of the program."""
    index = plan.index
    found: dict[cst.Module | None, list[cst.CSTNode]] = {}
    for node in _edited_nodes(plan):
        module = index.module_of(node) if node in index.order else None
        found.setdefault(module, []).append(node)
    return found


def _edited_nodes(plan: EditPlan) -> Iterator[cst.CSTNode]:
    yield from plan.replacements
    yield from plan.before
    yield from plan.after
    yield from plan.removed
    yield from plan.inlined
    yield from plan.rank_zero_only


def _place_imports(plan: EditPlan, module: cst.Module, new: Sequence[Import]) -> None:
    """Put each new import where a person would: ``import os`` among the standard-library
    imports, the torch imports among the script's torch imports, each in sorted position.

    (libcst's ``AddImportsVisitor`` appends everything after the last import, which puts
    ``import os`` below third-party imports, and costs a second pass with metadata.)
    """
    # ``from __future__`` imports must stay first: they are never a neighbour to sort against.
    body: list[cst.BaseStatement] = list(module.body)
    if module is plan.index.module and plan.imports_before in body:
        body = body[: body.index(plan.imports_before)]
    if module is plan.index.module and plan.index.main_guard in body:
        # an import below the main guard runs after the program it would serve
        body = body[: body.index(plan.index.main_guard)]
    imports = [stmt for stmt in body if _import_module(stmt) not in (None, "__future__")]
    # What an import above already binds is not imported twice (a helper asks for ``torch`` whatever the script has)
    bound = {
        pair
        for stmt in imports
        for pair in imported_names(cast(cst.Import | cst.ImportFrom, cast(cst.SimpleStatementLine, stmt).body[0]))
    }
    new = [item for item in new if (_local_name(item), _qualified(item)) not in bound]
    # The program's own modules are the last group: torch imports never go among them.
    local = {name.split(".")[0] for name in plan.index.module_names if name != "__main__"}
    own = [s for s in imports if (_import_module(s) or "").split(".")[0] in local]
    imports = [s for s in imports if s not in own]
    third_party = sorted((i for i in new if not _is_stdlib(i.module)), key=_sort_key)
    if own and third_party and all(_is_stdlib(_import_module(s)) for s in imports):  # a group before the own
        _insert_first(plan, own[0], [_import_statement(i) for i in third_party], separate=True)
        new = [i for i in new if _is_stdlib(i.module)]
    if not imports and new:  # a group of their own after the docstring and ``from __future__`` imports
        start = int(module.get_docstring(clean=False) is not None)
        while _import_module(module.body[start]) == "__future__":
            start += 1
        lines = [_import_statement(item) for item in sorted(new, key=_sort_key)]
        _insert_first(plan, module.body[start], lines, separate=True)
        return
    for stdlib in (True, False):
        items = sorted((i for i in new if _is_stdlib(i.module) == stdlib), key=_sort_key)
        if not items:
            continue
        group = [s for s in imports if _is_stdlib(_import_module(s)) == stdlib]
        if stdlib and not group:  # no standard-library imports yet: a group of their own, first
            _insert_first(plan, imports[0], [_import_statement(i) for i in items], separate=True)
            continue
        group = group or imports
        leading: list[Statement] = []
        for item in items:
            before = [s for s in group if _statement_key(s) <= _sort_key(item)]
            if before:
                plan.after[before[-1]].append(_import_statement(item))
            else:
                leading.append(_import_statement(item))
        if leading:
            _insert_first(plan, group[0], leading, separate=False)


def _insert_first(plan: EditPlan, anchor: cst.BaseStatement, lines: Sequence[Statement], *, separate: bool) -> None:
    """Insert ``lines`` before ``anchor``; they take over its leading blank lines and comments."""
    if plan.before.get(anchor) and not separate:
        # a group of its own (the standard library's) went before ``anchor`` already: these lines join the
        # anchor's group, after that one and the blank line that separates them
        plan.before[anchor].append(lines[0].with_changes(leading_lines=[cst.EmptyLine()]))
        plan.before[anchor].extend(lines[1:])
        plan.replace(anchor, lambda n: n.with_changes(leading_lines=[]))
        return
    lines = [lines[0].with_changes(leading_lines=statement(anchor).leading_lines), *lines[1:]]
    # a group of its own ends with a blank line; two above a definition (PEP 8)
    rest = [cst.EmptyLine()] * (2 if isinstance(anchor, cst.FunctionDef | cst.ClassDef) else 1) if separate else []
    plan.replace(anchor, lambda n: n.with_changes(leading_lines=rest))
    plan.before[anchor][0:0] = lines


def _is_stdlib(module: str | None) -> bool:
    return module is not None and module.split(".", maxsplit=1)[0] in sys.stdlib_module_names


def _import_module(stmt: cst.BaseStatement) -> str | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Import):
            return small.names[0].evaluated_name
        if isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
            return dotted(small.module)
    return None


def _sort_key(item: Import) -> tuple[bool, str]:
    return (item.obj is not None, item.module)


def _statement_key(stmt: cst.BaseStatement) -> tuple[bool, str]:
    """Sort key of an import statement (the import groups hold nothing else)."""
    from_import = isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.ImportFrom)
    return (from_import, _import_module(stmt) or "")


def _import_statement(item: Import) -> Statement:
    alias = f" as {item.asname}" if item.asname else ""
    code = f"from {item.module} import {item.obj}{alias}" if item.obj else f"import {item.module}{alias}"
    return cst.parse_statement(code + "\n")


def _ifs_run_on_rank_zero(plan: EditPlan, here: list[cst.CSTNode], guarded: set[cst.CSTNode]) -> set[cst.If]:
    """``if step % 10 == 0: print(...)`` becomes ``if step % 10 == 0 and <rank 0>:``, not a nested ``if``
    (of the statements ``here``, in one module, that run on rank 0 only, of all those ``guarded``)."""
    merged: set[cst.If] = set()
    for stmt in here:
        block = plan.index.parent(stmt)
        owner = plan.index.parent(block)
        if (
            isinstance(block, cst.IndentedBlock)
            and isinstance(owner, cst.If)
            and owner.orelse is None
            and owner.body is block
            and owner is not plan.index.main_guard
            and all(s in guarded and not plan.before.get(s) and not plan.after.get(s) for s in block.body)
        ):
            merged.add(owner)
    return merged


class _Applier(cst.CSTTransformer):
    def __init__(
        self,
        plan: EditPlan,
        merged_ifs: set[cst.If],
        edited: list[cst.CSTNode],
        here: list[cst.CSTNode],
        everything: set[cst.CSTNode],
    ) -> None:
        super().__init__()
        self.plan = plan
        self.merged_ifs = merged_ifs
        self.guarded = {
            s
            for s in here
            if s not in merged_ifs
            and plan.index.parent(plan.index.parent(s)) not in merged_ifs
            and not any(a in everything for a in plan.index.ancestors(s))  # already inside a rank-0 block
        }
        # Only the paths from the root to an edited node are rebuilt; every other subtree is kept as it is.
        self.on_path: set[cst.CSTNode] = set()
        for node in (*edited, *merged_ifs):
            if node not in self.on_path:
                self.on_path.add(node)
                self.on_path.update(plan.index.ancestors(node))

    def on_visit(self, node: cst.CSTNode) -> bool:
        return node in self.on_path

    def on_leave(self, original_node: _Node, updated_node: _Node) -> _Node:
        node: cst.CSTNode = updated_node
        for rewrite in self.plan.replacements.get(original_node, ()):
            node = rewrite(node)
        if original_node in self.merged_ifs and isinstance(node, cst.If):
            node = node.with_changes(test=_and(node.test, self.plan.rank_zero))
        if isinstance(node, (cst.IndentedBlock, cst.Module)) and isinstance(
            original_node, (cst.IndentedBlock, cst.Module)
        ):
            node = node.with_changes(body=self._body(original_node.body, node.body))
        return cast(_Node, node)  # a replacement may change the kind of node: libcst accepts any node here

    def _body(self, originals: Sequence[cst.BaseStatement], updated: Sequence[cst.BaseStatement]) -> list[Statement]:
        """A block's statements with the edits for each of them: inserted, removed, inlined, run on rank 0."""
        body: list[Statement] = []
        group: list[Statement] = []
        carried: list[cst.EmptyLine] = []  # blank lines and comments above a removed statement

        def flush() -> None:
            if group:
                body.append(_if_rank_zero(group, self.plan.rank_zero))
                group.clear()

        for original, changed in zip(originals, updated):
            new = statement(changed)
            before = [entry() if callable(entry) else entry for entry in self.plan.before.get(original, [])]
            after = self.plan.after.get(original, [])
            if carried and original not in self.plan.removed:
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
                inner = [statement(s) for s in cast(cst.If, new).body.body]
                inner[0] = inner[0].with_changes(leading_lines=[*new.leading_lines, *inner[0].leading_lines])
                body.extend(inner)
                body.extend(after)
            elif original in self.guarded:
                if before or _starts_cell(new):
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


def _starts_cell(stmt: Statement) -> bool:
    """Whether a ``# %%`` line (a notebook's cell, or a script's in the percent format) opens ``stmt``:
    one ``if`` on rank 0 never spans two cells."""
    return any(line.comment is not None and line.comment.value.startswith("# %%") for line in stmt.leading_lines)


def _if_rank_zero(stmts: list[Statement], test: cst.BaseExpression) -> cst.If:
    first = stmts[0]
    body = [first.with_changes(leading_lines=()), *stmts[1:]]
    return cst.If(test=test, body=cst.IndentedBlock(body=body), leading_lines=first.leading_lines)


def statement(node: cst.CSTNode) -> Statement:
    """``node``, known to be a statement line or a compound statement (the two kinds that have leading lines)."""
    if not isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        raise TypeError(f"expected a statement, got {type(node).__name__}")
    return node


def _and(left: cst.BaseExpression, right: cst.BaseExpression) -> cst.BaseExpression:
    """``left and right``, each side in parentheses where ``and`` would otherwise split it
    (``not dist.is_initialized() or dist.get_rank() == 0`` on the right, too)."""
    return cst.BooleanOperation(left=_and_operand(left), operator=cst.And(), right=_and_operand(right))


def _and_operand(expr: cst.BaseExpression) -> cst.BaseExpression:
    if expr.lpar:
        return expr
    if (isinstance(expr, cst.BooleanOperation) and isinstance(expr.operator, cst.Or)) or isinstance(
        expr, (cst.Lambda, cst.IfExp, cst.NamedExpr)
    ):
        return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return expr


def with_comma(args: Sequence[cst.Arg]) -> list[cst.Arg]:
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


def insert_arg(call: cst.Call, arg: cst.Arg, position: int) -> cst.Call:
    """Insert ``arg`` before ``call.args[position]`` (or last), in the layout of the arguments around it."""
    args = list(call.args)
    if not args:
        return call.with_changes(args=[arg])
    if position < len(args):
        return call.with_changes(
            args=[
                *args[:position],
                arg.with_changes(
                    comma=args[position - 1].comma
                    if position > 0 and isinstance(args[position - 1].comma, cst.Comma)
                    else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                ),
                *args[position:],
            ]
        )
    last = args[-1]
    if isinstance(last.comma, cst.Comma):  # a trailing comma: the call is laid out one argument per line
        comma = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else last.comma
        args.append(arg.with_changes(comma=last.comma))
        args[-2] = last.with_changes(comma=comma)
    else:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(arg)
    return call.with_changes(args=args)


def without_keyword(call: cst.Call, keyword: str, value: str) -> cst.Call:
    """``call`` without its argument ``keyword=<value>`` (``shuffle=True``, ``sampler=None``), the arguments
    around it laid out as before."""
    args = list(call.args)
    found = next(
        (
            i
            for i, a in enumerate(args)
            if a.keyword is not None
            and a.keyword.value == keyword
            and isinstance(a.value, cst.Name)
            and a.value.value == value
        ),
        None,
    )
    if found is None:
        return call
    removed = args.pop(found)
    if found == len(args) and args:  # it was the last: the one before takes its comma (or none)
        args[-1] = args[-1].with_changes(comma=removed.comma)
    return call.with_changes(args=args)

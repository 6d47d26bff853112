"""Building the index: one visit of the tree, then the flows between places.

:func:`build_index` records the tree's links and source order, definitions,
bound names, imports, calls, loops and statements (:class:`_Collector`), then
how values move between places (:func:`_collect_flows`): assignments, calls
into the script's own functions and constructors, and returns.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify.engine.index import Flow, Index, Ref, Scope, constant_key, keyed, position_key
from ddpify.engine.reach import Reach, Skipped
from ddpify.engine.syntax import COMPOUND_KINDS, NODE_KINDS, assigned, imported_names, parameter_names, relative_base


@dataclass(frozen=True)
class Source:
    """One module of a program: its tree, its file and the dotted name it is imported by."""

    module: cst.Module
    path: str
    name: str = "__main__"
    package: str = ""  # the package its relative imports start from


def build_index(
    module: cst.Module, others: Sequence[Source] = (), path: str = "<string>", reach: Reach | None = None
) -> Index:
    """The index of a script (``module``) and of the modules of the program it imports (``others``).

    With ``reach``, only what runs is indexed: modules that never run are left out, and the
    definitions (and imported modules' main blocks) that never run are kept as single nodes,
    their insides unread, so that no finder sees them and no edit can land in them.
    """
    try:
        return _build(module, others, path, reach)
    except _Misaligned:  # the two parsers disagree about a statement: index everything
        return _build(module, others, path, None)


def _build(module: cst.Module, others: Sequence[Source], path: str, reach: Reach | None) -> Index:
    sources = [Source(module, path), *others]
    if reach is not None:
        sources = [s for s in sources if s.module is module or reach.runs(s.name)]
    index = Index(module=module)
    for source in sources:
        index.modules.append(source.module)
        index.module_names[source.name] = source.module
        index.paths[source.module] = source.path
        index.imports[source.module] = defaultdict(set)
    imported: list[tuple[cst.ImportFrom, str]] = []
    for source in sources:
        skipped = reach.skipped.get(source.name, ()) if reach is not None else ()
        walk_tree(source.module, _Collector(index, source, imported, skipped))
    if reach is not None:
        index.identifiers |= reach.identifiers
    _collect_star_imports(index, imported)

    def flows() -> None:
        returns = _collect_flows(index)
        _collect_imported_values(index, imported)
        _collect_registry_calls(index, returns)
        _collect_item_flows(index)
        _collect_loader_fields(index)

    index._collect_flows = flows
    return index


def _collect_item_flows(index: Index) -> None:
    """Items go where their holder goes: ``loaders = make_loaders()`` (``loaders[0]`` is the training
    loader), then ``Trainer(loaders)``, whose ``__init__`` reads ``loaders[0]``; a dict of loaders too.
    After every other flow, until nothing new comes."""
    items: dict[Ref, set[str]] = defaultdict(set)  # holder -> the item suffixes seen (``[0]``, ``["train"]``)
    for flow in index.flows:
        for ref in (flow.src, flow.dst):
            if "[" in ref.path:
                holder, bracket, rest = ref.path.partition("[")
                items[Ref(ref.scope, holder)].add(bracket + rest)
    known = set(index.flows)
    todo = [flow for flow in index.flows if flow.src in items]
    while todo:
        flow = todo.pop()
        for suffix in sorted(items[flow.src]):
            new = Flow(
                Ref(flow.src.scope, flow.src.path + suffix), Ref(flow.dst.scope, flow.dst.path + suffix), flow.stmt
            )
            if new in known or "[" in flow.dst.path:
                continue
            known.add(new)
            index.add_flow(new)
            if suffix not in items[flow.dst]:
                items[flow.dst].add(suffix)
                todo.extend(f for f in index.flows_from(flow.dst))
    # ``self.train_loader = loaders[0]``: an item read at its position from a holder known to hold items
    # (positions are followed only there, never on a model: ``model[0]`` is a layer)
    for node in index.nodes_of(cst.Assign):
        assert isinstance(node, cst.Assign)
        scope = index.scope_of(node)
        for target in node.targets:
            pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = [(target.target, node.value)]
            unpacked, values = target.target, node.value
            if (
                isinstance(unpacked, (cst.Tuple, cst.List))
                and isinstance(values, (cst.Tuple, cst.List))
                and len(unpacked.elements) == len(values.elements)
            ):
                pairs = [(t.value, v.value) for t, v in zip(unpacked.elements, values.elements)]
            for dst_expr, value in pairs:
                if not isinstance(value, cst.Subscript) or (key := position_key(value)) is None:
                    continue
                held_by = index.ref_of(value.value, scope)
                dst = index.ref_of(dst_expr, scope)
                if held_by is not None and dst is not None and f"[{key}]" in items.get(held_by, set()):
                    index.add_flow(Flow(keyed(held_by, key), dst, index.statement_of(node)))


def _collect_loader_fields(index: Index) -> None:
    """``trainloader = dataset.trainloader``, where ``dataset`` is an object of a class of the program (built
    here, or returned by a factory, a registry's pick included) whose ``__init__`` keeps a DataLoader in
    ``self.trainloader``: the field reaches the name. Only fields that hold a DataLoader are followed this
    way, so that what is known of models stays as it was."""
    fields: set[Ref] = set()
    for call in index.calls:
        if not index.builds_loader(call):
            continue
        holder = index.parent(call)
        if isinstance(holder, cst.Assign) and len(holder.targets) == 1:
            origin = index.ref_of(holder.targets[0].target, index.scope_of(call))
            if origin is not None:
                fields |= {ref for ref in index.downstream(origin) if ref.path.startswith("self.")}
    if not fields:
        return
    for node in index.nodes_of(cst.Assign):
        assert isinstance(node, cst.Assign)
        scope = index.scope_of(node)
        for target in node.targets:
            unpacked, values = target.target, node.value
            pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = [(unpacked, values)]
            if isinstance(unpacked, (cst.Tuple, cst.List)) and isinstance(values, (cst.Tuple, cst.List)):
                pairs = [(t.value, v.value) for t, v in zip(unpacked.elements, values.elements)]
            for dst_expr, value in pairs:
                if not (isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name)):
                    continue
                dst = index.ref_of(dst_expr, scope)
                if dst is None or index.ref_of(value, scope) is not None:
                    continue  # ``self.x``: a field of this object, known already
                for cls in _object_classes(index, value.value, scope):
                    init = index.method(cls, "__init__")
                    field = Ref(index.attribute_class(init), f"self.{value.attr.value}") if init else None
                    if field in fields:
                        index.add_flow(Flow(field, dst, index.statement_of(node)))


def _object_classes(index: Index, name: cst.Name, scope: Scope) -> list[cst.ClassDef]:
    """The program's classes of the object ``name`` holds where every assignment in its scope builds one:
    ``Data(...)``, or a function of the program returning ``Data(...)`` or ``FACTORY[key](...)``."""
    ref = index.ref_of(name, scope)
    values = [value for _, value in index.values_assigned(ref)] if ref is not None and ref.scope is scope else []
    found: list[cst.ClassDef] = []
    for value in values:
        made: list[cst.ClassDef] = []
        if isinstance(value, cst.Call) and (own := index.local_class(value.func)) is not None:
            made = [own]
        elif isinstance(value, cst.Call) and (callee := index.resolve_callee(value, scope)) is not None:
            for returned in index.returned_values(callee[0]):
                if isinstance(returned, cst.Call) and (own := index.local_class(returned.func)) is not None:
                    made.append(own)
                elif isinstance(returned, cst.Call) and isinstance(returned.func, cst.Subscript):
                    made += index.registry_classes(returned.func)
        if not made:
            return []
        found += [cls for cls in made if cls not in found]
    return found


def _collect_star_imports(index: Index, imported: list[tuple[cst.ImportFrom, str]]) -> None:
    """``from common import *`` of a module of the program: the importer refers to what ``common`` binds,
    its own imports (``torch``, ``nn``) included. Followed until nothing new comes (chains of star imports)."""
    stars = [
        (index.module_of(node), base)
        for node, base in imported
        if isinstance(node.names, cst.ImportStar) and base in index.module_names
    ]
    changed = True
    while changed:
        changed = False
        for importer, base in stars:
            source = index.module_names[base]
            names = index.imports[importer]
            offered = {name: set(fulls) for name, fulls in index.imports[source].items()}
            defined = {name for (scope, name) in (*index.classes, *index.functions) if scope is source}
            for name in (index.bound[source] | defined) - set(offered):
                offered[name] = {f"{base}.{name}"}
            for name, fulls in sorted(offered.items()):
                if (
                    name.startswith("_")
                    or name in index.bound[importer] - set(names)
                    or fulls <= names.get(name, set())
                ):
                    continue
                names[name] |= fulls
                changed = True


def walk_tree(root: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """``root.visit(visitor)`` for a visitor that only reads: the same ``on_visit`` and
    ``on_leave`` calls, in the same order, without libcst's rebuilding (and validating) of
    every node on the way back up, which costs about three quarters of its walk; and
    without the layout nodes (:data:`UNINDEXED`), which hold no code. Visitors that watch
    attributes (``visit_<Node>_<field>``) are not supported."""
    stack: list[tuple[cst.CSTNode, bool]] = [(root, False)]
    pop, push = stack.pop, stack.append
    while stack:
        node, leaving = pop()
        if leaving:
            visitor.on_leave(node)
            continue
        push((node, True))
        if not visitor.on_visit(node):
            continue
        children: list[cst.CSTNode] = []
        for name in _visited_fields(node):
            value = getattr(node, name)
            kind = type(value)
            if kind in NODE_KINDS:
                if kind not in UNINDEXED:
                    children.append(value)
            elif kind is tuple or kind is list:
                children += [child for child in value if type(child) not in UNINDEXED]
        stack.extend((child, False) for child in reversed(children))


# Whitespace and line ends: half the nodes of a module, and no code in them. The index leaves them
# out (a comment at the end of a line with them); blank and comment lines (``EmptyLine``) stay.
UNINDEXED = frozenset({cst.SimpleWhitespace, cst.ParenthesizedWhitespace, cst.TrailingWhitespace, cst.Newline})


# Each node kind's fields that libcst visits, in its order, and its other fields.
_VISITED: dict[type[cst.CSTNode], tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _visited_fields(node: cst.CSTNode) -> tuple[str, ...]:
    """The fields of ``node`` that libcst visits, in its order: learnt from the first node of
    each kind (its ``_visit_and_replace_children`` names them in the same order for every
    node of the kind), and from the node itself where a field that the first one left out
    holds nodes here (an f-string's format spec is visited only when there is one)."""
    known = _VISITED.get(type(node))
    if known is not None:
        visited, others = known
        if not any(_holds_nodes(getattr(node, name)) for name in others):
            return visited
    recorder = _FieldOrder(node)
    node._visit_and_replace_children(recorder)
    visited = tuple(recorder.fields)
    if known is None:  # a field that holds text or a number holds no node in any node of the kind
        fields = (f.name for f in dataclasses.fields(node) if f.name not in visited)
        others = tuple(name for name in fields if not isinstance(getattr(node, name), (str, int, float, bytes)))
        _VISITED[type(node)] = (visited, others)
    return visited


def _holds_nodes(value: object) -> bool:
    return type(value) in NODE_KINDS or (
        isinstance(value, (tuple, list)) and any(type(item) in NODE_KINDS for item in value)
    )


class _FieldOrder(cst.CSTVisitor):
    """Notes the fields that libcst visits on one node, in order, without going below them."""

    def __init__(self, node: cst.CSTNode) -> None:
        super().__init__()
        self.node = node
        self.fields: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return False

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        if node is self.node:
            self.fields.append(attribute)


class _Misaligned(Exception):
    """CPython's tree and libcst's number a module's compound statements differently."""


class _Collector(cst.CSTVisitor):
    """Fills an :class:`Index`: the tree's links, definitions, bound names, imports, calls, loops, statements."""

    def __init__(
        self,
        index: Index,
        source: Source,
        imported: list[tuple[cst.ImportFrom, str]],
        skipped: Sequence[Skipped] = (),
    ) -> None:
        super().__init__()
        self.index = index
        self.source = source
        self.imports = index.imports[source.module]
        self.imported = imported  # ``from <module> import ...`` statements, with the module's full name
        self.scopes: list[Scope] = [source.module]
        self.class_stack: list[cst.ClassDef] = []
        self.path: list[cst.CSTNode] = []
        self.counter = len(index.order)  # source order runs on from one module to the next
        self.functions: list[Scope] = [source.module]
        self.skips = {s.first: s for s in skipped}
        self.compound = 0  # compound statements seen, numbered as :mod:`ddpify.engine.reach` numbers them
        self.unread: set[cst.CSTNode] = set()

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.path:
            parent = self.path[-1]
            self.index.parents[node] = parent
            self.index.children.setdefault(parent, []).append(node)
        self.path.append(node)
        kind = type(node)
        found = self.index.kinds.get(kind)
        if found is None:
            self.index.kinds[kind] = [node]
        else:
            found.append(node)
        self.index.order[node] = self.counter
        self.index.function_of[node] = self.functions[-1]
        self.counter += 1
        if type(node) in COMPOUND_KINDS:
            skip = self.skips.get(self.compound)
            self.compound += 1
            if skip is not None:
                _check_aligned(cast(cst.BaseCompoundStatement, node), skip)
                self.compound = skip.last + 1
                self.unread.add(node)
                return False
        if kind is cst.FunctionDef:
            self.functions.append(cast(cst.FunctionDef, node))
        visit = _hooks(kind)[0]
        if visit is not None:
            visit(self, node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if original_node in self.unread:
            self.index.last[original_node] = self.counter - 1
            self.path.pop()
            return
        leave = _hooks(type(original_node))[1]
        if leave is not None:
            leave(self, original_node)
        self.index.last[original_node] = self.counter - 1
        if type(original_node) is cst.FunctionDef:
            self.functions.pop()
        self.path.pop()

    def visit_Import(self, node: cst.Import) -> None:
        for local, full in imported_names(node):
            self._import(node, local, full)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        package = self.source.package
        for local, full in imported_names(node, package):
            self._import(node, local, full)
        base = relative_base(node, package)
        if base is not None:
            self.imported.append((node, base))

    def _import(self, node: cst.Import | cst.ImportFrom, local: str, full: str) -> None:
        sites = self.index.import_sites.setdefault((self.source.module, local), [])
        sites.append((node, full))
        self.imports[local].add(full)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if len(self.scopes) == 1:
            self.index.classes[(self.source.module, node.name.value)] = node
        self.class_stack.append(node)
        self.scopes.append(node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.class_stack.pop()
        self.scopes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        owner = self.scopes[-1]
        self.index.functions[(owner, node.name.value)] = node
        if isinstance(owner, cst.ClassDef):
            self.index.class_of[node] = owner
            self.index.bound[owner]
        else:
            self.index.bound[owner].add(node.name.value)
        self.index.bound[node].update(parameter_names(node))
        p = node.params
        for star in (p.star_arg, p.star_kwarg):
            if isinstance(star, cst.Param):
                self.index.bound[node].add(star.name.value)
        self.index.bound[node].update(param.name.value for param in p.kwonly_params)
        self.scopes.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.pop()

    def _bind(self, target: cst.BaseExpression) -> None:
        scope = self.scopes[-1]
        if isinstance(scope, cst.ClassDef):
            return
        for name in assigned(target):
            if isinstance(name, cst.Name):
                self.index.bound[scope].add(name.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._bind(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target)
        self.index.loops.append(node)

    def visit_While(self, node: cst.While) -> None:
        self.index.loops.append(node)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self.index.comprehensions.append(node)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind(node.asname.name)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        name = node.evaluated_alias or node.evaluated_name.split(".")[0]
        self.index.bound[self.scopes[-1]].add(name)

    def visit_Call(self, node: cst.Call) -> None:
        self.index.calls.append(node)

    def visit_Name(self, node: cst.Name) -> None:
        self.index.identifiers.add(node.value)
        self.index.names.setdefault(node.value, []).append(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.index.attributes.setdefault(node.attr.value, []).append(node)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.index.statements.append(node)

    def visit_If(self, node: cst.If) -> None:
        if (
            len(self.scopes) == 1
            and self.source.module is self.index.module
            and self.index.parent(node) is self.index.module
            and m.matches(
                node.test,
                m.Comparison(
                    left=m.Name("__name__"),
                    comparisons=[m.ComparisonTarget(operator=m.Equal(), comparator=m.SimpleString())],
                ),
            )
        ):
            self.index.main_guard = node


_Hook = Callable[["_Collector", cst.CSTNode], None]
_HOOKS: dict[type[cst.CSTNode], tuple[_Hook | None, _Hook | None]] = {}


def _hooks(kind: type[cst.CSTNode]) -> tuple[_Hook | None, _Hook | None]:
    """The collector's own ``visit_<Kind>`` and ``leave_<Kind>`` (None where it has none), looked up once
    per kind rather than by name at every node as libcst's visitor does. None of them stops the walk."""
    found = _HOOKS.get(kind)
    if found is None:
        name = kind.__name__
        own = vars(_Collector)  # libcst's visitor base class has a do-nothing method for every kind
        found = _HOOKS[kind] = (own.get(f"visit_{name}"), own.get(f"leave_{name}"))
    return found


def _check_aligned(node: cst.BaseCompoundStatement, skip: Skipped) -> None:
    kinds = {"def": cst.FunctionDef, "class": cst.ClassDef, "if": cst.If}
    if not isinstance(node, kinds[skip.kind]) or getattr(getattr(node, "name", None), "value", "") != skip.name:
        raise _Misaligned


def _collect_flows(index: Index) -> dict[cst.FunctionDef, list[cst.Return]]:
    """Record how values move between places (see :class:`Flow`)."""
    returns: dict[cst.FunctionDef, list[cst.Return]] = defaultdict(list)
    for node in index.nodes_of(cst.Return):
        if isinstance(node, cst.Return) and node.value is not None:
            scope = index.scope_of(node)
            if isinstance(scope, cst.FunctionDef):
                returns[scope].append(node)

    def assign(target: cst.BaseExpression, value: cst.BaseExpression, scope: Scope, stmt: cst.CSTNode) -> None:
        if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)):
            if len(target.elements) == len(value.elements):
                for t, v in zip(target.elements, value.elements):
                    assign(t.value, v.value, scope, stmt)
            return
        if isinstance(value, cst.IfExp):  # ``loader = train_loader if training else val_loader``: as an ``if``
            # (not ``net.module if hasattr(net, "module") else net``: one value, unwrapped or not)
            if index.root_ref(value.body, scope) != index.root_ref(value.orelse, scope):
                assign(target, value.body, scope, stmt)
                assign(target, value.orelse, scope, stmt)
            return
        dst = index.ref_of(target, scope) if not isinstance(target, (cst.Tuple, cst.List)) else None
        src = index.carried_ref(value, scope)
        if dst is not None and src is not None:
            index.add_flow(Flow(src, dst, stmt))
        if isinstance(target, (cst.Tuple, cst.List)) and src is not None:  # ``train, val = loaders``
            for slot, element in enumerate(target.elements):
                if isinstance(element, cst.Element) and (item := index.ref_of(element.value, scope)) is not None:
                    index.add_flow(Flow(keyed(src, str(slot)), item, stmt))
            return
        if dst is not None and isinstance(value, cst.Dict):  # loaders = {"train": train_loader, ...}
            for key, entry in _string_entries(index, value, scope):
                index.add_flow(Flow(entry, keyed(dst, key), stmt))
            return
        if dst is not None and isinstance(value, (cst.Tuple, cst.List)):  # loaders = (train_loader, val_loader)
            for slot, element in enumerate(value.elements):
                if isinstance(element, cst.Element) and (src := index.carried_ref(element.value, scope)) is not None:
                    index.add_flow(Flow(src, keyed(dst, str(slot)), stmt))
            return
        if isinstance(value, cst.Call):  # values returned by the script's own functions and methods
            callee = index.runs(value, scope)
            if callee is None or callee[0].name.value == "__init__":
                return
            for ret in returns.get(callee[0], ()):
                for part, returned in _unpack_return(index, target, ret, callee[0]):
                    receiver = index.ref_of(part, scope)
                    if receiver is not None:
                        index.add_flow(Flow(returned, receiver, stmt))
                        _nested_items(index, ret, part, callee[0], receiver, stmt)
                if (receiver := index.ref_of(target, scope)) is not None:
                    _tuple_items(index, ret, callee[0], receiver, stmt)
                if isinstance(ret.value, cst.Dict) and (receiver := index.ref_of(target, scope)) is not None:
                    for key, entry in _string_entries(index, ret.value, callee[0]):
                        index.add_flow(Flow(entry, keyed(receiver, key), stmt))

    for node in index.nodes_of(cst.Assign, cst.AnnAssign):
        if isinstance(node, cst.Assign):
            scope = index.scope_of(node)
            stmt = index.statement_of(node)
            for target in node.targets:
                assign(target.target, node.value, scope, stmt)
        elif isinstance(node, cst.AnnAssign) and node.value is not None:
            assign(node.target, node.value, index.scope_of(node), index.statement_of(node))
    for item in index.nodes_of(cst.WithItem):  # ``with tqdm(loader) as bar:``: the bar iterates the loader
        if isinstance(item, cst.WithItem) and item.asname is not None:
            scope = index.scope_of(item)
            dst = index.ref_of(cast(cst.BaseExpression, item.asname.name), scope)
            src = index.carried_ref(item.item, scope) if isinstance(item.item, cst.Call) else None
            if dst is not None and src is not None:
                index.add_flow(Flow(src, dst, index.statement_of(item)))

    for call in index.calls:
        scope = index.scope_of(call)
        callee = index.runs(call, scope)
        if callee is not None:
            _argument_flows(index, call, *callee, returns)
        else:  # an object of one class or another, a name for one function or another: each it may run
            for method in index.instance_methods(call, scope):
                _argument_flows(index, call, *method, returns)
    return returns


def _collect_registry_calls(index: Index, returns: dict[cst.FunctionDef, list[cst.Return]]) -> None:
    """``TRAINERS[cfg.trainer](model, loader)``: the arguments reach ``__init__`` of every class the registry
    holds. After the other flows, which find the registry (imported from another module, say)."""
    for call in index.calls:
        if isinstance(call.func, cst.Subscript):
            for cls in index.registry_classes(call.func):
                init = index.method(cls, "__init__")
                if init is not None:
                    _argument_flows(index, call, init, 1, returns)
            for function in index.registry_functions(call.func):  # ``OPTIMIZERS[name](model.parameters())``
                _argument_flows(index, call, function, 0, returns)
        elif isinstance(call.func, cst.Name) and index.runs(call, index.scope_of(call)) is None:
            # ``trainer = TRAINERS[cfg.name]``, then ``trainer(cfg, model, loader)``
            for cls in index.registry_classes_named(call.func):
                init = index.method(cls, "__init__")
                if init is not None:
                    _argument_flows(index, call, init, 1, returns)


def _argument_flows(
    index: Index,
    call: cst.Call,
    function: cst.FunctionDef,
    skipped: int,
    returns: dict[cst.FunctionDef, list[cst.Return]],
) -> None:
    """The arguments of ``call`` reach the parameters of ``function`` (its first ``skipped`` filled implicitly)."""
    scope = index.scope_of(call)
    params = parameter_names(function)[skipped:]
    keyword_params = set(parameter_names(function)) | {p.name.value for p in function.params.kwonly_params}
    stmt = index.statement_of(call)
    position = 0
    for arg in call.args:
        if arg.star == "**":  # ``train_one_epoch(**train_args)`` after ``train_args = dict(model=model, ...)``
            for key, entry in _keyword_entries(index, arg.value, scope):
                if key in keyword_params:
                    index.add_flow(Flow(entry, Ref(function, key), stmt))
            continue
        if arg.star:
            break
        if arg.keyword is None:
            name = params[position] if position < len(params) else None
            position += 1
        else:
            name = arg.keyword.value if arg.keyword.value in keyword_params else None
        if name is None:
            continue
        src = index.carried_ref(arg.value, scope)
        if src is not None:
            index.add_flow(Flow(src, Ref(function, name), stmt))
        elif isinstance(arg.value, cst.IfExp):  # ``evaluate(model if single else models[0])``: either one
            for branch in (arg.value.body, arg.value.orelse):
                if (src := index.carried_ref(branch, scope)) is not None:
                    index.add_flow(Flow(src, Ref(function, name), stmt))
        elif isinstance(arg.value, cst.Dict):  # ``Solver({"train": tr_loader, "cv": cv_loader})``
            for key, entry in _string_entries(index, arg.value, scope):
                index.add_flow(Flow(entry, keyed(Ref(function, name), key), stmt))
        elif isinstance(arg.value, cst.Call):  # ``Trainer(data.loader(), ...)``: what the inner call returns
            inner = index.runs(arg.value, scope)
            if inner is not None and inner[0].name.value != "__init__":
                for ret in returns.get(inner[0], ()):
                    returned = _return_ref(index, cast(cst.BaseExpression, ret.value), inner[0], None)
                    index.add_flow(Flow(returned, Ref(function, name), stmt))
                    _tuple_items(index, ret, inner[0], Ref(function, name), stmt)


def _collect_imported_values(index: Index, imported: list[tuple[cst.ImportFrom, str]]) -> None:
    """``from config import BATCH``: the value bound at the top of one module of the program reaches the importer."""
    for node, base in imported:
        module = index.module_names.get(base)
        if module is None or isinstance(node.names, cst.ImportStar):
            continue
        scope = index.scope_of(node)
        stmt = index.statement_of(node)
        for alias in node.names:
            name = alias.evaluated_name
            if name in index.bound[module] and (module, name) not in index.functions:
                local = alias.evaluated_alias or name
                index.add_flow(Flow(Ref(module, name), Ref(scope, local), stmt))


def _keyword_entries(index: Index, value: cst.BaseExpression, scope: Scope) -> Iterator[tuple[str, Ref]]:
    """The entries that ``**value`` hands on as keyword arguments, with the places their values come from:
    a dict display or ``dict(key=value, ...)``, written there or bound once to the name ``value``."""
    if isinstance(value, cst.Name):
        ref = index.ref_of(value, scope)
        assigned = [v for _, v in index.values_assigned(ref)] if ref is not None else []
        if len(assigned) != 1:
            return
        value = assigned[0]
    if isinstance(value, cst.Dict):
        yield from _string_entries(index, value, scope)
    elif (
        isinstance(value, cst.Call)
        and m.matches(value.func, m.Name("dict"))
        and all(a.keyword is not None for a in value.args)
    ):
        for arg in value.args:
            if arg.keyword is not None and (src := index.carried_ref(arg.value, scope)) is not None:
                yield arg.keyword.value, src


def _string_entries(index: Index, value: cst.Dict, scope: Scope) -> Iterator[tuple[str, Ref]]:
    """The entries of a dict display under constant string keys, with the places their values come from."""
    for element in value.elements:
        if isinstance(element, cst.DictElement) and (key := constant_key(element.key)) is not None:
            src = index.carried_ref(element.value, scope)
            if src is not None:
                yield key, src


def _return_ref(index: Index, expr: cst.BaseExpression, function: cst.FunctionDef, slot: int | None) -> Ref:
    """The place a returned value is known by: the name it had, or the function's return slot."""
    ref = index.carried_ref(expr, function)
    if ref is not None:
        return ref
    return Ref(function, "<return>" if slot is None else f"<return {slot}>")


def _tuple_items(index: Index, ret: cst.Return, function: cst.FunctionDef, receiver: Ref, stmt: cst.CSTNode) -> None:
    """``loaders = make_loaders()`` where it returns ``(train, valid)``: each item reaches ``loaders[i]``."""
    if isinstance(ret.value, cst.Tuple):
        for slot, element in enumerate(ret.value.elements):
            if isinstance(element, cst.Element):
                returned = _return_ref(index, element.value, function, slot)
                index.add_flow(Flow(returned, keyed(receiver, str(slot)), stmt))


def _nested_items(
    index: Index, ret: cst.Return, part: cst.BaseExpression, function: cst.FunctionDef, receiver: Ref, stmt: cst.CSTNode
) -> None:
    """``loaders, weights = load()`` where it returns ``(train, valid), weights``: each item of the inner
    tuple reaches ``loaders[i]`` (and each entry of an inner dict display, ``loaders["train"]``)."""
    target = index.parent(index.parent(part))
    if not (isinstance(target, (cst.Tuple, cst.List)) and isinstance(ret.value, cst.Tuple)):
        return
    position = next((i for i, e in enumerate(target.elements) if e.value is part), None)
    if position is None or len(target.elements) != len(ret.value.elements):
        return
    inner = ret.value.elements[position].value
    if isinstance(inner, cst.Dict):  # ``return {"net": model}, optimizer``
        for key, entry in _string_entries(index, inner, function):
            index.add_flow(Flow(entry, keyed(receiver, key), stmt))
    if isinstance(inner, (cst.Tuple, cst.List)):
        for slot, element in enumerate(inner.elements):
            if isinstance(element, cst.Element):
                returned = _return_ref(index, element.value, function, None)
                index.add_flow(Flow(returned, keyed(receiver, str(slot)), stmt))


def _unpack_return(
    index: Index, target: cst.BaseExpression, ret: cst.Return, function: cst.FunctionDef
) -> Iterator[tuple[cst.BaseExpression, Ref]]:
    if isinstance(target, (cst.Tuple, cst.List)):
        if isinstance(ret.value, cst.Tuple) and len(target.elements) == len(ret.value.elements):
            for slot, (t, v) in enumerate(zip(target.elements, ret.value.elements)):
                yield t.value, _return_ref(index, v.value, function, slot)
    elif ret.value is not None:
        yield target, _return_ref(index, ret.value, function, None)

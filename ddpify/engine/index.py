"""The script as an index of definitions and a graph of how values flow between names.

One pass over the CST collects what the rewrite passes need: where functions,
classes and the main guard are, what each name refers to, and how values flow
between names (assignments, calls into the script's own functions and
constructors, returns, ``self.attr`` fields). On top of that flow the script's
training objects are found *by what they are*, never by what they are called:

* a **model** is whatever an optimizer's ``.parameters()`` come from;
* a **training loader** is a ``torch.utils.data.DataLoader`` whose batches are
  drawn inside a loop (or a function called from a loop) that runs
  ``.backward()``;
* an **epoch loop** is the ``for`` loop around that iteration.

Values are tracked as :class:`Ref` -- a name in a function (or the module), or
``self.attr`` in a class -- which is precise enough for the three shapes
training scripts have (a ``main()`` behind a main guard, module-level code, and
a ``Trainer`` class) without a full type inference.
"""

from __future__ import annotations

import builtins
from bisect import bisect_left, bisect_right
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.engine import annotated, one_line
from ddpify.engine.classes import ProgramClasses
from ddpify.engine.positions import locate
from ddpify.engine.syntax import STATEMENT_KINDS, dotted, parameter_names, single_target

# libcst's node classes and the engine's own forms of them (an annotated assignment's target, a one-line body)
_FORMS: dict[type[cst.CSTNode], tuple[type[cst.CSTNode], ...]] = {
    cst.AssignTarget: (cst.AssignTarget, annotated.AssignTarget),
    cst.IndentedBlock: (cst.IndentedBlock, one_line.IndentedBlock),
}

Scope = cst.Module | cst.FunctionDef | cst.ClassDef


@dataclass(frozen=True)
class Ref:
    """A place that holds a value: ``name`` in a function or module, or ``self.x`` in a class."""

    scope: Scope
    path: str

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        owner = getattr(getattr(self.scope, "name", None), "value", "<module>")
        return f"Ref({owner}:{self.path})"


@dataclass(frozen=True)
class Flow:
    """The value at ``src`` reaches ``dst`` at statement ``stmt``."""

    src: Ref
    dst: Ref
    stmt: cst.CSTNode


@dataclass
class Index(ProgramClasses):
    """Everything the passes look up about the script (built once, then only read)."""

    module: cst.Module  # the entry script; the program's other modules follow it in ``modules``
    modules: list[cst.Module] = field(default_factory=list)
    module_names: dict[str, cst.Module] = field(default_factory=dict)  # dotted name -> module
    paths: dict[cst.Module, str] = field(default_factory=dict)
    functions: dict[tuple[Scope, str], cst.FunctionDef] = field(default_factory=dict)
    classes: dict[tuple[cst.Module, str], cst.ClassDef] = field(default_factory=dict)
    class_of: dict[cst.FunctionDef, cst.ClassDef] = field(default_factory=dict)
    bound: dict[Scope, set[str]] = field(default_factory=lambda: defaultdict(set))
    flows: list[Flow] = field(default_factory=list)
    calls: list[cst.Call] = field(default_factory=list)
    loops: list[cst.For | cst.While] = field(default_factory=list)
    comprehensions: list[cst.CompFor] = field(default_factory=list)
    statements: list[cst.SimpleStatementLine] = field(default_factory=list)
    identifiers: set[str] = field(default_factory=set)
    # every Name node by its text, every Attribute node by its attribute name, each in source order
    names: dict[str, list[cst.Name]] = field(default_factory=dict)
    attributes: dict[str, list[cst.Attribute]] = field(default_factory=dict)
    main_guard: cst.If | None = None
    children: dict[cst.CSTNode, list[cst.CSTNode]] = field(default_factory=dict)
    parents: dict[cst.CSTNode, cst.CSTNode] = field(default_factory=dict)
    # every node by its class, in source order (see nodes_of())
    kinds: dict[type[cst.CSTNode], list[cst.CSTNode]] = field(default_factory=dict)
    # each module's imports: local name -> the modules or objects it refers to
    imports: dict[cst.Module, dict[str, set[str]]] = field(default_factory=dict)
    # each import statement binding a local name, with what it binds there, in source order (``from
    # methods.rot import Model`` in one branch, ``from methods.clu import Model`` in another)
    import_sites: dict[tuple[cst.Module, str], list[tuple[cst.CSTNode, str]]] = field(default_factory=dict)
    # Source order: each node's number in a pre-order walk, and the last number inside it.
    order: dict[cst.CSTNode, int] = field(default_factory=dict)
    last: dict[cst.CSTNode, int] = field(default_factory=dict)
    function_of: dict[cst.CSTNode, Scope] = field(default_factory=dict)  # see scope_of()
    _bound_by_module: dict[cst.Module, set[str]] | None = None
    _module_starts: list[int] = field(default_factory=list)  # each module's first number, as in ``modules``
    _positions: dict[cst.CSTNode, tuple[int, int]] = field(default_factory=dict)
    _wanted: dict[cst.Module, set[cst.CSTNode]] = field(default_factory=dict)  # by module: see position()
    _flows_from: dict[Ref, list[Flow]] = field(default_factory=lambda: defaultdict(list))
    _flows_into: dict[Ref, list[Flow]] = field(default_factory=lambda: defaultdict(list))
    # What records the flows, run on the first question about them: "already distributed" needs none.
    _collect_flows: Callable[[], None] | None = None
    _callers: dict[cst.FunctionDef, list[cst.Call]] | None = None
    _following: set[cst.CSTNode] = field(default_factory=set)  # calls whose built classes are being found
    _cut: int = 0  # how often a bound cut such a search short (its partial answers are not kept)
    _classes_known: dict[cst.CSTNode, list[cst.ClassDef]] = field(default_factory=dict)
    _methods_known: dict[cst.Call, list[tuple[cst.FunctionDef, int]]] = field(default_factory=dict)
    _unpacked_known: dict[Ref, list[tuple[cst.Assign, cst.BaseExpression]]] = field(default_factory=dict)
    _trains: dict[cst.CSTNode, bool] = field(default_factory=dict)
    _trains_cycles: int = 0  # how often a search met a function it was already in (see _trains_within())
    _qualified: dict[cst.CSTNode, frozenset[str]] = field(default_factory=dict)  # see qualified_names()
    _bases: dict[cst.ClassDef, list[cst.ClassDef]] = field(default_factory=dict)
    _derived: dict[cst.ClassDef, list[cst.ClassDef]] | None = None
    _subclasses: dict[cst.ClassDef, list[cst.ClassDef]] = field(default_factory=dict)
    _field_owners: dict[cst.ClassDef, cst.ClassDef] | None = None
    _assignments: dict[Ref, list[cst.Assign]] | None = None
    _candidate_orders: dict[int, list[int]] = field(default_factory=dict)  # see _orders_of()
    _upstream: dict[Ref, list[Ref]] = field(default_factory=dict)  # see upstream()
    _defined: dict[cst.Module, set[str]] = field(default_factory=dict)  # see _defined_in()

    # -- metadata --------------------------------------------------------
    def parent(self, node: cst.CSTNode | None) -> cst.CSTNode | None:
        """The node ``node`` is a child of (None for the module, or for None)."""
        return self.parents.get(node) if node is not None else None

    def stored(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` is written, not read: a target of an assignment (in a tuple too) or of a ``for``."""
        child, parent = node, self.parent(node)
        while isinstance(parent, cst.Tuple | cst.List | cst.Element | cst.StarredElement):
            child, parent = parent, self.parent(parent)
        if isinstance(parent, cst.AssignTarget | cst.AugAssign | cst.AnnAssign):
            return parent.target is child
        if isinstance(parent, cst.For):
            return parent.target is child
        return isinstance(parent, cst.AsName)

    def names_a_variable(self, name: cst.Name) -> bool:
        """Whether ``name`` names a variable: neither the attribute after a dot (``torch.utils.data``'s
        ``data``) nor a call's keyword (``shuffle=``)."""
        parent = self.parents.get(name)
        if isinstance(parent, cst.Attribute) and parent.attr is name:
            return False
        return not (isinstance(parent, cst.Arg) and parent.keyword is name)

    def want_position(self, node: cst.CSTNode) -> None:
        """``node``'s position will be asked for: find it together with the others of its module."""
        if node not in self._positions:
            self._wanted.setdefault(self.module_of(node), set()).add(node)

    def position(self, node: cst.CSTNode) -> tuple[int, int]:
        """Line and column (both 1-based) where ``node`` starts in the input.

        Finding positions prints the module once, so every position announced with
        :meth:`want_position` is found in the same pass; comparisons of source order use
        :meth:`after` instead.
        """
        if node not in self._positions:
            module = self.module_of(node)
            wanted = self._wanted.pop(module, set()) | {node}
            self._positions.update(locate(module, wanted))
        return self._positions[node]

    # -- modules ---------------------------------------------------------
    def module_of(self, node: cst.CSTNode) -> cst.Module:
        """The module of the program that holds ``node``."""
        if len(self.modules) <= 1:
            return self.module
        at = self.order[node]
        # The modules are numbered one after the other, in the order of ``modules``.
        starts = self._module_starts
        if len(starts) != len(self.modules):
            starts = self._module_starts = [self.order[module] for module in self.modules]
        slot = bisect_right(starts, at) - 1
        if slot >= 0 and at <= self.last[self.modules[slot]]:
            return self.modules[slot]
        raise ValueError("the node is not in any module of the program")

    def path_of(self, node: cst.CSTNode) -> str:
        """The file ``node`` comes from, as the user named it."""
        return self.paths.get(self.module_of(node), "<string>")

    def after(self, node: cst.CSTNode, other: cst.CSTNode) -> bool:
        """Whether ``node`` comes after the whole of ``other`` in the source."""
        return self.order[node] > self.last[other]

    def starts_after(self, node: cst.CSTNode, other: cst.CSTNode) -> bool:
        """Whether ``node`` starts further right or lower than ``other`` starts.

        Source order decides (no positions are computed), except that a node at the very
        start of ``other`` (``model`` in the statement ``model.to(device)``) starts with it.
        """
        if self.order[node] <= self.order[other]:
            return False
        if self.order[node] > self.last[other]:
            return True
        current = node
        while current is not other:
            parent = self.parents.get(current)
            if parent is None:
                return True
            for sibling in self.children.get(parent, ()):
                if sibling is current:
                    break
                if not isinstance(sibling, _LAYOUT):
                    return True
            current = parent
        return False

    def qualified_names(self, node: cst.CSTNode) -> frozenset[str]:
        """What a name or attribute chain refers to through the script's imports: ``DataLoader`` ->
        ``torch.utils.data.DataLoader`` after ``from torch.utils.data import DataLoader``; ``print`` ->
        ``builtins.print``. Empty for anything else. (Remembered per node: the imports are all
        known once the index is built, and most calls are asked about by several concerns.)"""
        known = self._qualified.get(node)
        if known is None:
            known = self._qualified[node] = self._qualify(node)
        return known

    def _qualify(self, node: cst.CSTNode) -> frozenset[str]:
        text = dotted(node)
        if not text:
            return _NONE
        root, _, rest = text.partition(".")
        module = self.module_of(node)
        imports = self.imports[module]
        if root in imports:
            fulls = imports[root]
            if len(fulls) > 1:
                fulls = self._import_binding(node, module, root) or fulls
            fulls = {self._reexported(full) for full in fulls}
            return frozenset(f"{full}.{rest}" if rest else full for full in fulls)
        if hasattr(builtins, root) and root not in self._bound_in(module):
            return frozenset({f"builtins.{text}"})
        return _NONE

    def _reexported(self, full: str, depth: int = 0) -> str:
        """``prep.DataLoader`` where the program's module ``prep`` only imports it (``from torch.utils.data
        import DataLoader``): the name it imported, ``torch.utils.data.DataLoader``."""
        owner, _, name = full.rpartition(".")
        module = self.module_names.get(owner)
        if module is None or depth > 8 or name in self._defined_in(module):
            return full
        imported = self.imports[module].get(name, set())
        return self._reexported(next(iter(imported)), depth + 1) if len(imported) == 1 else full

    def _defined_in(self, module: cst.Module) -> set[str]:
        """The names ``module`` binds at its top level other than by an import (found once per module)."""
        found = self._defined.get(module)
        if found is None:
            imported = self.imports.get(module, {})
            found = {name for name in self.bound[module] if name not in imported}
            # ``class DataLoader(DataLoader):`` over the imported one: the module's own class
            found |= {
                node.name.value for node in _top_level(module) if isinstance(node, cst.ClassDef | cst.FunctionDef)
            }
            self._defined[module] = found
        return found

    def _import_binding(self, node: cst.CSTNode, module: cst.Module, name: str) -> set[str]:
        """What ``name`` refers to at ``node`` where several imports bind it: the last import before
        ``node`` in a block around it (the branch's own ``from methods.clu import Model``); empty where
        that is not one import."""
        binding = [
            full
            for site, full in self.import_sites.get((module, name), ())
            if self.after(node, site) and self.inside(node, self.parent(self.parent(site)) or module)
        ]
        return {binding[-1]} if binding else set()

    def _bound_in(self, module: cst.Module) -> set[str]:
        """Every name ``module`` binds anywhere (computed for every module on first use): another
        module's ``from io import open`` does not hide the built-in ``open`` here."""
        by_module = self._bound_by_module
        if by_module is None:
            by_module = self._bound_by_module = {}
            for scope, names in self.bound.items():
                by_module.setdefault(self.module_of(scope), set()).update(names)
        return by_module.get(module, set())

    def is_call_to(self, node: cst.CSTNode, names: frozenset[str]) -> bool:
        return isinstance(node, cst.Call) and bool(self.qualified_names(node.func) & names)

    # -- structure -------------------------------------------------------
    def walk(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """``node`` and everything below it, in source order.

        Uses the children recorded once from the parent links: libcst's own
        ``node.children`` re-visits the node on every call.
        """
        stack = [node]
        children = self.children
        while stack:
            current = stack.pop()
            yield current
            below = children.get(current)
            if below:
                stack.extend(reversed(below))

    def nodes_of(self, *kinds: type[cst.CSTNode]) -> list[cst.CSTNode]:
        """Every node of the program of these classes (libcst's concrete node classes, and the engine's
        classes that read as them), in source order: what a walk of the whole program testing each node
        would find, without the walk."""
        held = [found for kind in kinds for below in _FORMS.get(kind, (kind,)) if (found := self.kinds.get(below))]
        if len(held) == 1:
            return list(held[0])
        return sorted((node for found in held for node in found), key=self.order.__getitem__)

    def walk_program(self) -> Iterator[cst.CSTNode]:
        """Every node of every module of the program, module by module, each in source order."""
        for module in self.modules or [self.module]:
            yield from self.walk(module)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        parent = self.parent(node)
        while parent is not None:
            yield parent
            parent = self.parent(parent)

    def scope_of(self, node: cst.CSTNode) -> Scope:
        """The function whose body holds ``node`` (lambdas and comprehensions included), or the module."""
        return self.function_of.get(node, self.module)

    def statement_of(self, node: cst.CSTNode) -> cst.BaseStatement:
        """The innermost statement (simple line or compound) that contains ``node``."""
        current: cst.CSTNode | None = node
        while type(current) not in STATEMENT_KINDS:
            if current is None:
                raise ValueError("the node is not inside a statement of the indexed module")
            current = self.parent(current)
        return cast(cst.BaseStatement, current)

    def enclosing_loops(self, node: cst.CSTNode) -> Iterator[cst.For | cst.While]:
        """Loops around ``node`` inside its own function, innermost first."""
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                return
            if isinstance(ancestor, (cst.For, cst.While)):
                yield ancestor

    # -- values ----------------------------------------------------------
    def ref_of(self, expr: cst.BaseExpression, scope: Scope) -> Ref | None:
        """The place ``expr`` reads, when it is a plain name or ``self.field``."""
        if isinstance(expr, cst.Name):
            if expr.value in _CONSTANTS:  # ``self.model = None``: a value, not a place every None shares
                return None
            current: Scope = scope
            while not isinstance(current, cst.Module):
                if expr.value in self.bound[current]:
                    return Ref(current, expr.value)
                current = self.scope_of(current)
            return Ref(self.module_of(current), expr.value)
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
            owner = self.method_scope(scope)
            if owner is not None and expr.value.value == self.self_name(owner):
                return Ref(self.attribute_class(owner), f"self.{expr.attr.value}")
        if isinstance(expr, cst.Subscript) and (key := string_key(expr)) is not None:
            holder = self.ref_of(expr.value, scope)
            return keyed(holder, key) if holder is not None and "[" not in holder.path else None
        return None

    def root_ref(self, expr: cst.BaseExpression, scope: Scope) -> Ref | None:
        """The place at the root of an attribute chain: ``model`` for ``model.fc``."""
        while True:
            ref = self.ref_of(expr, scope)
            if ref is not None:
                return ref
            if not isinstance(expr, cst.Attribute):
                return None
            expr = expr.value

    def carried_ref(self, expr: cst.BaseExpression, scope: Scope) -> Ref | None:
        """The place whose value ``expr`` evaluates to: ``model``, ``model.to(device)``, ``iter(loader)``."""
        while True:
            ref = self.ref_of(expr, scope)
            if ref is not None:
                return ref
            if (
                isinstance(expr, cst.Call)
                and isinstance(expr.func, cst.Attribute)
                and expr.func.attr.value in torch_api.MODULE_CHAINING_METHODS
            ):
                expr = expr.func.value
            elif isinstance(expr, cst.Call) and (
                (m.matches(expr.func, m.Name("iter")) and len(expr.args) == 1)
                or (self.is_call_to(expr, torch_api.DATA_PARALLEL | torch_api.PROGRESS_BARS) and expr.args)
            ):
                expr = expr.args[0].value
            else:
                return None

    def _orders_of(self, candidates: list[cst.Name] | list[cst.Attribute]) -> list[int]:
        """The source order of each of ``candidates`` (a list of names or attributes of one spelling, kept
        in source order as the walk found them), computed once per list."""
        orders = self._candidate_orders.get(id(candidates))
        if orders is None or len(orders) != len(candidates):
            orders = [self.order[c] for c in candidates]
            if any(a > b for a, b in pairwise(orders)):
                candidates.sort(key=self.order.__getitem__)
                orders.sort()
            self._candidate_orders[id(candidates)] = orders
        return orders

    def mentions(self, node: cst.CSTNode, ref: Ref) -> list[cst.BaseExpression]:
        """Every expression inside ``node`` that reads ``ref``."""
        found: list[cst.BaseExpression] = []
        holder, bracket, _ = ref.path.partition("[")
        if bracket:  # ``kwargs["net"]``: a subscript of a read of the holder
            for read in self.mentions(node, Ref(ref.scope, holder)):
                parent = self.parent(read)
                if (
                    isinstance(parent, cst.Subscript)
                    and parent.value is read
                    and self.ref_of(parent, self.scope_of(parent)) == ref
                ):
                    found.append(parent)
            return found
        # A name reads a place of the same name; an attribute can only read ``self.<attr>``.
        candidates: list[cst.Name] | list[cst.Attribute]
        if ref.path.startswith("self."):
            candidates = self.attributes.get(ref.path[5:], [])
        else:
            candidates = self.names.get(ref.path, [])
        first, last = self.order[node], self.last[node]
        orders = self._orders_of(candidates)
        for expr in candidates[bisect_left(orders, first) : bisect_right(orders, last)]:
            if isinstance(expr, cst.Name) and not self.names_a_variable(expr):
                continue  # ``unwrap(model=model)``: the keyword is no read of ``model``
            if self.ref_of(expr, self.scope_of(expr)) == ref:
                parent = self.parent(expr)
                # ``self.model`` is one read, not also a read of ``self``.
                if not (
                    isinstance(expr, cst.Name)
                    and isinstance(parent, cst.Attribute)
                    and parent.value is expr
                    and self.ref_of(parent, self.scope_of(parent)) is not None
                ):
                    found.append(expr)
        return found

    def resolve_callee(self, call: cst.Call, scope: Scope) -> tuple[cst.FunctionDef, int] | None:
        """The script's own function a call runs, and how many leading parameters it fills implicitly: a
        function, a method of ``self`` or of ``super()``, an imported function, or a method of an instance of
        the program's own class (``Runner(args).run()``, ``runner.run()`` after ``runner = Runner(args)``)."""
        func = call.func
        if isinstance(func, cst.Name):
            # ``trainer(net, data)`` after ``trainer = Trainer(2)``: the object's ``__call__``
            return self._named_callee(func, scope) or self.instance_method(call, scope)
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            owner = self.method_scope(scope)
            if owner is not None and func.value.value == self.self_name(owner):
                method = self.method(self.class_of[owner], func.attr.value, dispatch=True)
                return (method, bound_slots(method)) if method is not None else None
            return self._imported_callee(func) or self._class_callee(func) or self.instance_method(call, scope)
        if (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Call)
            and m.matches(func.value.func, m.Name("super"))
            and len(func.value.args) in (0, 2)
        ):
            owner = self.method_scope(scope)
            if owner is None:
                return None
            # ``super().__init__(...)``, or ``super(Trainer, self).__init__(...)``: the method of a base class
            cls = self.class_of[owner] if not func.value.args else self.local_class(func.value.args[0].value)
            if cls is None:
                return None
            bases = self.bases(cls)
            method = next((f for b in bases if (f := self.method(b, func.attr.value)) is not None), None)
            return (method, bound_slots(method)) if method is not None else None
        if isinstance(func, cst.Call):  # ``engine_for(task)(model, loader)``: the constructor of the class returned
            classes = self.classes_returned(func)
            init = self.method(classes[0], "__init__") if len(classes) == 1 else None
            if init is not None:
                return init, 1
        # ``Runner(args).run()``: a method of an instance of the program's own class
        return self.instance_method(call, scope)

    def _class_callee(self, func: cst.Attribute) -> tuple[cst.FunctionDef, int] | None:
        """``Learner.from_config(cfg)``: a ``@classmethod`` (its ``cls`` filled) or ``@staticmethod`` of the
        program's class that the call names through the class itself."""
        cls = self.local_class(func.value)
        method = self.method(cls, func.attr.value) if cls is not None else None
        if method is None:
            return None
        if decorated(method, "classmethod"):
            return method, 1
        return (method, 0) if decorated(method, "staticmethod") else None

    def function_named(self, expr: cst.BaseExpression, scope: Scope) -> cst.FunctionDef | None:
        """The program's own function that ``expr`` names where it is written (``step``, ``utils.step``,
        one imported from another module): a function handed on as a value."""
        if isinstance(expr, cst.Name):
            found = self._named_callee(expr, scope)
        elif isinstance(expr, cst.Attribute):
            found = self._imported_callee(expr)
        else:
            return None
        return found[0] if found is not None and found[1] == 0 else None

    def _named_callee(self, func: cst.Name, scope: Scope, depth: int = 0) -> tuple[cst.FunctionDef, int] | None:
        """What a call of the name ``func`` in ``scope`` runs: a function, a class's ``__init__``, an
        imported one; or, for ``Exp = Exp_Main`` then ``Exp(args)`` (a name assigned once, from another
        name), what that name runs."""
        current: Scope = scope
        while True:
            found = self.functions.get((current, func.value))
            if found is not None:
                return found, 0
            if isinstance(current, cst.Module):
                break
            current = self.scope_of(current)
        cls = self.classes.get((self.module_of(current), func.value))
        if cls is not None:
            init = self.method(cls, "__init__")  # its own, or a base class's
            return (init, 1) if init is not None else None
        imported = self._imported_callee(func)
        if imported is not None or depth > 2:
            return imported
        alias = self.alias_of(func, scope)
        return self._named_callee(alias, self.scope_of(alias), depth + 1) if alias is not None else None

    def alias_of(self, name: cst.Name, scope: Scope | None = None) -> cst.Name | None:
        """``ExpMain`` for ``Exp`` after ``Exp = ExpMain``: the name that ``name`` was assigned from, where
        it is assigned once (in ``scope``, or where it is read, or an enclosing scope)."""
        current: Scope = self.scope_of(name) if scope is None else scope
        while name.value not in self.bound[current]:
            if isinstance(current, cst.Module):
                return None
            current = self.scope_of(current)
        assigned = [value for _, value in self.values_assigned(Ref(current, name.value))]
        if len(assigned) != 1 or not isinstance(alias := assigned[0], cst.Name) or alias.value == name.value:
            return None
        return alias

    def parameter_of(self, arg: cst.Arg) -> Ref | None:
        """The parameter of the script's own function that ``arg`` fills in its call."""
        call = self.parent(arg)
        if not isinstance(call, cst.Call) or arg.star:
            return None
        resolved = self.resolve_callee(call, self.scope_of(call))
        if resolved is None:
            return None
        function, implicit = resolved
        if arg.keyword is not None:
            name = arg.keyword.value if any(p.name.value == arg.keyword.value for p in function.params.params) else ""
        else:
            names = parameter_names(function)
            position = implicit + list(call.args).index(arg)
            name = names[position] if position < len(names) else ""
        return Ref(function, name) if name else None

    def returned_values(self, function: cst.FunctionDef) -> list[cst.BaseExpression]:
        """What the ``return`` statements of ``function`` itself give (not those of functions inside it)."""
        return [
            node.value
            for node in self.walk(function.body)
            if isinstance(node, cst.Return) and node.value is not None and self.scope_of(node) is function
        ]

    def holders(self, expr: cst.BaseExpression, depth: int = 0) -> list[Ref]:
        """The places that keep what ``expr`` evaluates to: the target of the assignment it is the value
        of, or, where a function of the program returns it (``def make_optimizer(...): return SGD(...)``),
        the places that keep each call of that function, followed to any depth."""
        parent = self.parent(expr)
        target = single_target(parent) if getattr(parent, "value", None) is expr else None
        if target is not None:
            ref = self.ref_of(target, self.scope_of(expr))
            return [ref] if ref is not None else []
        function = self.scope_of(expr)
        if not isinstance(parent, cst.Return) or not isinstance(function, cst.FunctionDef) or depth > 3:
            return []
        return [ref for call in self.callers(function) for ref in self.holders(call, depth + 1)]

    def is_generator(self, function: cst.FunctionDef) -> bool:
        """Whether ``function`` itself yields (a ``yield`` of a function inside it does not count)."""
        return any(isinstance(node, cst.Yield) and self.scope_of(node) is function for node in self.walk(function.body))

    def runs(self, call: cst.Call, scope: Scope) -> tuple[cst.FunctionDef, int] | None:
        """What :meth:`resolve_callee` resolves, or else the method of the program's own class that a call
        on one of its objects runs (:meth:`instance_method`: ``trainer.step(x)``)."""
        return self.resolve_callee(call, scope) or self.instance_method(call, scope)

    def instance_method(self, call: cst.Call, scope: Scope) -> tuple[cst.FunctionDef, int] | None:
        """``Solver(model).train(loader)``, or ``solver.train(loader)`` after ``solver = Solver(model)`` (or
        ``solver = make_solver(model)``, a helper returning one) in the same function: the method of the
        program's own class that the call runs (its ``self`` filled)."""
        methods = self.instance_methods(call, scope)
        return methods[0] if len(methods) == 1 else None

    def instance_methods(self, call: cst.Call, scope: Scope) -> list[tuple[cst.FunctionDef, int]]:
        """What :meth:`instance_method` resolves, for each class the object may be an instance of
        (``model = rot.Model(...)`` in one branch, ``model = clu.Model(...)`` in another), in source order."""
        known = self._methods_known.get(call)
        if known is not None:
            return known
        cut = self._cut
        found = self._instance_methods(call, scope)
        if self._cut == cut:  # complete (see :meth:`classes_built`)
            self._methods_known[call] = found
        return found

    def _instance_methods(self, call: cst.Call, scope: Scope) -> list[tuple[cst.FunctionDef, int]]:
        func = call.func
        if isinstance(func, cst.Subscript):  # ``trainers[args.dataset](args, net)``: each function the dict holds
            return [(function, 0) for function in self.registry_functions(func)]
        if not isinstance(func, (cst.Attribute, cst.Name)):
            return []
        if len(self._following) > 1:  # asked while following another helper: one level of objects is enough
            self._cut += 1
            return []
        if isinstance(func, cst.Name) and (chosen := self._functions_chosen(func, scope)):
            return chosen
        # ``stopper(loss, model)`` after ``stopper = EarlyStopping()``: the object's ``__call__``
        receiver, name = (func.value, func.attr.value) if isinstance(func, cst.Attribute) else (func, "__call__")
        built: list[cst.BaseExpression] = []
        if isinstance(receiver, cst.Call):
            built.append(receiver)
        elif (ref := self.carried_ref(receiver, scope)) is not None and (
            # ``learner.fit(loader)`` of a global object; ``self.trainer.fit(net)`` after ``self.trainer = Trainer()``
            ref.scope is scope or isinstance(ref.scope, (cst.Module, cst.ClassDef))
        ):
            built += [value for _, value in (*self.values_assigned(ref), *self.unpacked_values(ref))]
        elif isinstance(receiver, cst.Attribute) and receiver.attr.value == "dataset":
            built += self._loaders_data_sets(receiver.value, scope)  # ``loader.dataset.mine(model)``
        classes: list[cst.ClassDef] = []
        for value in built:
            classes += [cls for cls in self.classes_built(value) if cls not in classes]
        found: list[tuple[cst.FunctionDef, int]] = []
        for cls in classes:
            if name == "__call__" and self.derives_from(cls, torch_api.NN_MODULE):
                return []  # a module's call runs its forward through hooks: a model, not a helper object
            method = self.method(cls, name, dispatch=True)
            if method is None:
                return []
            if (method, bound_slots(method)) not in found:
                found.append((method, bound_slots(method)))
        return found

    def _loaders_data_sets(self, loader: cst.BaseExpression, scope: Scope) -> list[cst.BaseExpression]:
        """The data sets handed to the DataLoaders that ``loader`` holds (their first argument, or
        ``dataset=``): what ``loader.dataset`` is."""
        ref = self.carried_ref(loader, scope)
        if ref is None or not (ref.scope is scope or isinstance(ref.scope, (cst.Module, cst.ClassDef))):
            return []
        found: list[cst.BaseExpression] = []
        values = [value for _, value in self.values_assigned(ref)]
        for value in list(values):  # ``loader = make_loader()``: the loaders the helper returns
            callee = self.resolve_callee(value, self.scope_of(value)) if isinstance(value, cst.Call) else None
            if callee is not None:
                values += self.returned_values(callee[0])
        for value in values:
            if isinstance(value, cst.Call) and self.builds_loader(value):
                given = next((a for a in value.args if a.keyword is not None and a.keyword.value == "dataset"), None)
                given = given or next((a for a in value.args if a.keyword is None and not a.star), None)
                if given is not None:
                    found.append(given.value)
        return found

    def classes_built(self, value: cst.BaseExpression, depth: int = 0) -> list[cst.ClassDef]:
        """The program's own classes whose instance ``value`` is: ``Solver(...)``, the call of a helper of
        the program that returns one (``make_trainer(model)``), or a name of the helper bound to one
        (``trainer = Solver(...); return model, trainer``)."""
        known = self._classes_known.get(value)
        if known is not None:
            return known
        cut = self._cut
        found = self._classes_built(value, depth)
        if self._cut == cut:  # complete: no bound cut it short, so it holds whoever asks
            self._classes_known[value] = found
        return found

    def _classes_built(self, value: cst.BaseExpression, depth: int) -> list[cst.ClassDef]:
        if isinstance(value, cst.Name):
            if depth > 3:
                self._cut += 1
                return []
            ref = self.ref_of(value, self.scope_of(value))
            held = [v for _, v in (*self.values_assigned(ref), *self.unpacked_values(ref, depth))] if ref else []
            return [c for each in held for c in self.classes_built(each, depth + 1)]
        if isinstance(value, cst.IfExp):  # ``Trainer(loader) if linear else WideTrainer(loader)``
            both = self.classes_built(value.body, depth + 1)
            return both + [c for c in self.classes_built(value.orelse, depth + 1) if c not in both]
        if not isinstance(value, cst.Call):
            return []
        classes = self.local_classes(value.func) or self._classes_chosen(value.func)
        if classes:
            return classes
        func = value.func
        if isinstance(func, cst.Name) and (made := self._made_by_its_classmethod(func)) is not None:
            return [made]  # ``return cls(**init)`` in ``@classmethod def from_config(cls, cfg)``
        if isinstance(func, cst.Call) and depth <= 3:  # ``get_trainer(name)(loader, model)``
            return self.classes_returned(func)
        if isinstance(func, cst.Attribute) and func.attr.value in torch_api.MODULE_CHAINING_METHODS:
            return self.classes_built(func.value, depth + 1)  # ``Classifier(16).to(device)``
        # (resolving the call may ask about this very value, or about others through their helpers: the
        # helpers being followed at once are few, or chains of method calls would grow without bound)
        if depth > 3 or value in self._following or len(self._following) > 3:
            self._cut += 1
            return []
        self._following.add(value)
        try:
            callee = self.resolve_callee(value, self.scope_of(value))
            if callee is None:
                return []
            return [c for each in self.returned_values(callee[0]) for c in self.classes_built(each, depth + 1)]
        finally:
            self._following.discard(value)

    def registry_classes_named(self, func: cst.Name) -> list[cst.ClassDef]:
        """The classes a name given an entry of a registry may hold (``trainer = TRAINERS[cfg.name]``); [] where
        no value it is given is a registry's entry."""
        ref = self.ref_of(func, self.scope_of(func))
        values = [value for _, value in self.values_assigned(ref)] if ref is not None else []
        if not any(isinstance(value, cst.Subscript) for value in values):
            return []
        return self._classes_chosen(func)

    def _classes_chosen(self, func: cst.BaseExpression) -> list[cst.ClassDef]:
        """``Agent = SmallAgent if args.small else SharedAgent`` (or one class in each branch of an ``if``),
        then ``Agent(lr)``: each class of the program the name may hold, in source order; [] unless every
        value it is given is one."""
        ref = self.ref_of(func, self.scope_of(func)) if isinstance(func, cst.Name) else None
        pending = [value for _, value in self.values_assigned(ref)] if ref is not None else []
        found: list[cst.ClassDef] = []
        while pending:
            each = pending.pop(0)
            if isinstance(each, cst.IfExp):
                pending += [each.body, each.orelse]
                continue
            if isinstance(each, cst.Subscript):  # ``trainer = TRAINERS[args.code]``, then ``trainer(args, model)``
                held = self.registry_classes(each)
                if not held:
                    return []
                found += [cls for cls in held if cls not in found]
                continue
            cls = self.local_class(each)
            if cls is None:
                return []
            if cls not in found:
                found.append(cls)
        return found

    def _made_by_its_classmethod(self, func: cst.Name) -> cst.ClassDef | None:
        """The class of the ``@classmethod`` whose first parameter (``cls``) ``func`` calls."""
        method = self.method_scope(self.scope_of(func))
        if (
            method is None
            or not method.params.params
            or method.params.params[0].name.value != func.value
            or not decorated(method, "classmethod")
        ):
            return None
        return self.class_of.get(method)

    def classes_returned(self, call: cst.Call) -> list[cst.ClassDef]:
        """The program's classes that a call of a factory returns, where each of its ``return``s gives one
        (``if name == "plain": return plain.Trainer`` ... ``return smooth.Trainer``), in source order; [] where
        one gives anything else."""
        callee = self.resolve_callee(call, self.scope_of(call))
        returned = self.returned_values(callee[0]) if callee is not None else []
        found: list[cst.ClassDef] = []
        for value in returned:
            classes = self.local_classes(value) if isinstance(value, (cst.Name, cst.Attribute)) else []
            ref = self.ref_of(value, self.scope_of(value)) if not classes and isinstance(value, cst.Name) else None
            if ref is not None and isinstance(ref.scope, cst.FunctionDef):
                # ``Trainer = plain.Trainer`` in one branch, ``Trainer = smooth.Trainer`` in another
                held = [v for _, v in self.values_assigned(ref)]
                named = [self.local_classes(v) if isinstance(v, (cst.Name, cst.Attribute)) else [] for v in held]
                classes = [c for each in named for c in each] if held and all(named) else []
            if not classes:
                return []
            found += [c for c in classes if c not in found]
        return found

    def _imported_callee(self, func: cst.BaseExpression) -> tuple[cst.FunctionDef, int] | None:
        """A function or constructor of another module of the program: ``get_loader`` or ``utils.get_loader``."""
        if len(self.modules) <= 1:
            return None
        for full in sorted(self.qualified_names(func)):
            definition = self.local_definition(full)
            if isinstance(definition, cst.FunctionDef):
                return definition, 0
            if isinstance(definition, cst.ClassDef):
                init = self.method(definition, "__init__")
                return (init, 1) if init is not None else None
        return None

    def functions_chosen(self, call: cst.Call) -> list[cst.FunctionDef]:
        """The program's functions a call of a name may run, where the name is given one or another of them
        (see :meth:`_functions_chosen`), or a dict of them is indexed by (``trainers[args.dataset](args, net)``)."""
        if isinstance(call.func, cst.Subscript):
            return self.registry_functions(call.func)
        if not isinstance(call.func, cst.Name):
            return []
        return [function for function, _ in self._functions_chosen(call.func, self.scope_of(call))]

    def _functions_chosen(self, func: cst.Name, scope: Scope, depth: int = 0) -> list[tuple[cst.FunctionDef, int]]:
        """``train = train_smoothed if args.smooth else train_plain`` (or one function in each branch of an
        ``if``; or another name for such a name), then ``train(model, loader)``: each function of the program
        the name may hold, in source order; [] unless every value it is given is one."""
        ref = self.carried_ref(func, scope)
        if ref is None or not (ref.scope is scope or isinstance(ref.scope, cst.Module)) or depth > 2:
            return []
        leaves: list[cst.BaseExpression] = []
        for _, value in self.values_assigned(ref):
            pending = [value]
            while pending:
                each = pending.pop(0)
                if isinstance(each, cst.IfExp):
                    pending += [each.body, each.orelse]
                else:
                    leaves.append(each)
        found: list[tuple[cst.FunctionDef, int]] = []
        looked_up = False
        for leaf in leaves:
            held = self._looked_up_in_a_module(leaf)
            if held:  # ``objective = getattr(objectives, args.obj)``: any function of that module of the program
                found += [(function, 0) for function in held if (function, 0) not in found]
                looked_up = True
                continue
            function = self.function_named(leaf, self.scope_of(leaf))
            if function is None and isinstance(leaf, cst.Name):  # ``fit_fn = fit`` after ``fit = a if c else b``
                chosen = self._functions_chosen(leaf, self.scope_of(leaf), depth + 1)
                found += [each for each in chosen if each not in found]
                if chosen:
                    continue
            if function is None or self.method_scope(function) is not None:
                return []
            if (function, 0) not in found:
                found.append((function, 0))
        return found if len(found) > 1 or looked_up else []

    def _looked_up_in_a_module(self, value: cst.BaseExpression) -> list[cst.FunctionDef]:
        """The functions of a module of the program that ``getattr(module, name)`` may give: the one ``name``
        spells, or, for a name computed at run time, every function the module defines, in source order."""
        if not (
            isinstance(value, cst.Call)
            and self.is_call_to(value, frozenset({"builtins.getattr"}))
            and len(value.args) in (2, 3)
            and not any(a.star or a.keyword for a in value.args)
        ):
            return []
        held = value.args[0].value
        modules = [self.module_names[q] for q in sorted(self.qualified_names(held)) if q in self.module_names]
        if len(modules) != 1 or self.function_named(held, self.scope_of(held)) is not None:
            return []
        functions = sorted(
            (f for (scope, name), f in self.functions.items() if scope is modules[0] and not name.startswith("_")),
            key=self.order.__getitem__,
        )
        name = value.args[1].value
        if isinstance(name, cst.SimpleString):
            return [f for f in functions if f.name.value == name.evaluated_value]
        # not the module's own helpers, which its functions call by name (``compute_split(x, k)``)
        called = {
            node.func.value
            for node in self.walk(modules[0])
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Name)
        }
        return [f for f in functions if f.name.value not in called]

    def callers(self, function: cst.FunctionDef) -> list[cst.Call]:
        """The calls that run ``function`` (resolved once for every call, on first use)."""
        if self._callers is None:
            self._callers = defaultdict(list)
            for call in self.calls:
                callee = self.resolve_callee(call, self.scope_of(call))
                if callee is not None:
                    self._callers[callee[0]].append(call)
                else:  # each method an object of one class or another runs, each function a name may hold
                    for method, _ in self.instance_methods(call, self.scope_of(call)):
                        self._callers[method].append(call)
                    for held in self.registry_functions(call.func):  # ``OPTIMIZERS[name](params)``
                        self._callers[held].append(call)
        return self._callers.get(function, [])

    def add_flow(self, flow: Flow) -> None:
        self.flows.append(flow)
        self._flows_from[flow.src].append(flow)
        self._flows_into[flow.dst].append(flow)

    def flows_from(self, ref: Ref) -> list[Flow]:
        self._flows_known()
        return self._flows_from.get(ref, [])

    def flows_into(self, ref: Ref) -> list[Flow]:
        self._flows_known()
        return self._flows_into.get(ref, [])

    def _flows_known(self) -> None:
        collect = self._collect_flows
        if collect is not None:
            self._collect_flows = None
            collect()

    def lineage(self, ref: Ref) -> set[Ref]:
        """Every place the value at ``ref`` came from or goes to."""
        return self._reach(ref, upstream=True)

    def upstream(self, ref: Ref) -> list[Ref]:
        """Every place the value at ``ref`` comes from, nearest first (found once per place)."""
        found = self._upstream.get(ref)
        if found is None:
            found = self._upstream[ref] = []
            seen = {ref}
            queue = deque([ref])
            while queue:
                for flow in self.flows_into(queue.popleft()):
                    if flow.src not in seen:
                        seen.add(flow.src)
                        queue.append(flow.src)
                        found.append(flow.src)
        return found

    def downstream(self, ref: Ref) -> set[Ref]:
        """Every place the value at ``ref`` goes to."""
        return self._reach(ref, upstream=False)

    def _reach(self, ref: Ref, *, upstream: bool) -> set[Ref]:
        seen = {ref}
        queue = deque([ref])
        while queue:
            current = queue.popleft()
            reached = [flow.dst for flow in self.flows_from(current)]
            if upstream:
                reached += [flow.src for flow in self.flows_into(current)]
            for other in reached:
                if other not in seen:
                    seen.add(other)
                    queue.append(other)
        return seen

    def trains(self, node: cst.CSTNode) -> bool:
        """Whether running ``node`` runs a backward pass, directly or through the script's own functions."""
        return self._trains_within(node, frozenset())

    def in_a_training_loop(self, node: cst.CSTNode) -> bool:
        """Whether a loop around ``node`` (in its function) runs a backward pass."""
        return any(self.trains(loop.body) for loop in self.enclosing_loops(node))

    def _trains_within(self, node: cst.CSTNode, seen: frozenset[cst.FunctionDef]) -> bool:
        known = self._trains.get(node)
        if known is not None:
            return known
        found = False
        cycles = self._trains_cycles
        for inner in self.walk(node):
            if type(inner) is not cst.Call:
                continue
            if isinstance(inner.func, cst.Attribute) and inner.func.attr.value == "backward":
                found = True
                break
            scope = self.scope_of(inner)
            callee = self.runs(inner, scope)  # ``trainer.step()`` too
            # ``model.run()`` on an object of one trainer class or another: any of their methods
            callees = [callee] if callee is not None else self.instance_methods(inner, scope)
            for function, _ in callees:
                if function in seen:
                    self._trains_cycles += 1
                elif self._trains_within(function.body, seen | {function}):
                    found = True
                    break
            if found:
                break
        if found or not seen or self._trains_cycles == cycles:  # an answer cut short by a cycle is not remembered
            self._trains[node] = found
        return found

    def inside(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        """Whether ``container`` is a proper ancestor of ``node``."""
        at, first, end = self.order.get(node), self.order.get(container), self.last.get(container)
        if at is not None and first is not None and end is not None:
            return first < at <= end  # numbered in preorder: a subtree is one run of numbers
        return any(ancestor is container for ancestor in self.ancestors(node))

    def assignments_to(self, ref: Ref) -> Iterator[cst.Assign]:
        """The plain assignments ``ref = ...`` (alone on their line or not), in source order."""
        if self._assignments is None:
            self._assignments = defaultdict(list)
            for stmt in self.statements:
                for small in stmt.body:  # statements are simple lines
                    if isinstance(small, cst.Assign):
                        scope = self.scope_of(small)
                        targets = {r for t in small.targets if (r := self.ref_of(t.target, scope)) is not None}
                        for target in targets:
                            self._assignments[target].append(small)
        yield from self._assignments.get(ref, ())

    def values_assigned(self, ref: Ref) -> Iterator[tuple[cst.Assign | cst.AnnAssign, cst.BaseExpression]]:
        """Each value ``ref = value`` binds, with its statement, in source order: for questions that only read
        what a name holds. (``ref: T = value`` is among them: the analysed tree holds it as a plain assignment,
        :mod:`ddpify.engine.annotated`.)"""
        for node in self.assignments_to(ref):
            yield node, node.value

    def unpacked_values(self, ref: Ref, depth: int = 0) -> list[tuple[cst.Assign, cst.BaseExpression]]:
        """``a, b = make_pair(...)`` (or ``= x, y``): for ``ref`` one of the plain names of such a flat tuple
        target, the item at its position of each tuple the value gives (a literal, or what a function of the
        program returns); nothing where that is not all seen."""
        known = self._unpacked_known.get(ref)
        if known is not None:
            return known
        cut = self._cut
        found = self._unpacked_values(ref, depth)
        if self._cut == cut:  # complete: no bound cut it short (see :meth:`classes_built`)
            self._unpacked_known[ref] = found
        return found

    def _unpacked_values(self, ref: Ref, depth: int) -> list[tuple[cst.Assign, cst.BaseExpression]]:
        found: list[tuple[cst.Assign, cst.BaseExpression]] = []
        scope = ref.scope
        if ref.path.startswith("self.") or isinstance(scope, cst.ClassDef):
            return []
        for read in self.mentions(scope, ref):
            element = self.parent(read)
            tuple_ = self.parent(element) if isinstance(element, cst.Element) else None
            if not isinstance(tuple_, cst.Tuple):
                continue
            target = self.parent(tuple_)
            assign = self.parent(target) if isinstance(target, cst.AssignTarget) else None
            if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
                continue
            position = list(tuple_.elements).index(cast(cst.Element, element))
            if any(isinstance(e, cst.StarredElement) for e in tuple_.elements):
                return []
            values = [assign.value]
            if isinstance(assign.value, cst.Call) and self.local_class(assign.value.func) is None:
                if depth > 4 or assign.value in self._following or len(self._following) > 3:
                    self._cut += 1
                    return []  # (resolving it may ask about this name: see :meth:`classes_built`)
                self._following.add(assign.value)
                try:
                    callee = self.resolve_callee(assign.value, self.scope_of(assign.value))
                finally:
                    self._following.discard(assign.value)
                if callee is None or self.is_generator(callee[0]):
                    return []
                values = self.returned_values(callee[0])
            for value in values:
                if not isinstance(value, (cst.Tuple, cst.List)) or len(value.elements) != len(tuple_.elements):
                    return []
                item = value.elements[position]
                if isinstance(item, cst.StarredElement):
                    return []
                found.append((assign, item.value))
        return found

    def spelled(self, ref: Ref, scope: Scope) -> str:
        """How code in ``scope`` writes ``ref``: ``model``, or ``self.model`` with the method's own ``self``."""
        if ref.path.startswith("self."):
            return f"{self.self_name(self.method_scope(scope))}{ref.path[4:]}"
        return ref.path


def string_key(subscript: cst.Subscript) -> str | None:
    """``"train"`` for ``loaders["train"]``: a single key written as a plain string."""
    if len(subscript.slice) != 1:
        return None
    index = subscript.slice[0].slice
    return constant_key(index.value) if isinstance(index, cst.Index) else None


def position_key(subscript: cst.Subscript) -> str | None:
    """``"0"`` for ``loaders[0]``: one item of a tuple or list, at a position written as a number."""
    if len(subscript.slice) != 1:
        return None
    index = subscript.slice[0].slice
    if isinstance(index, cst.Index) and isinstance(index.value, cst.Integer):
        return index.value.value
    return None


def constant_key(expr: cst.BaseExpression | None) -> str | None:
    """The text of a dict key written as a plain string that could be a name (``"train"``)."""
    if not isinstance(expr, cst.SimpleString):
        return None
    value = expr.evaluated_value
    return value if isinstance(value, str) and value.isidentifier() else None


def keyed(holder: Ref, key: str) -> Ref:
    """The place ``holder[key]``: a dict entry under a constant key, or an item of a tuple at a constant
    position (``holder[0]``), is followed like a name."""
    return Ref(holder.scope, f"{holder.path}[{key}]" if key.isdigit() else f'{holder.path}["{key}"]')


_NONE: frozenset[str] = frozenset()
_CONSTANTS = frozenset({"None", "True", "False"})

# Nodes that hold no code: what precedes a node's first token without moving where it starts.
_LAYOUT = (
    cst.EmptyLine,
    cst.SimpleWhitespace,
    cst.ParenthesizedWhitespace,
    cst.TrailingWhitespace,
    cst.Newline,
    cst.Comment,
)


def _top_level(module: cst.Module) -> Iterator[cst.BaseStatement]:
    """The statements a module runs at its top level, inside ``if``/``try``/``with`` blocks too."""
    stack: list[cst.BaseStatement] = list(reversed(module.body))
    while stack:
        stmt = stack.pop()
        yield stmt
        blocks: list[cst.BaseSuite] = []
        if isinstance(stmt, cst.If):
            blocks = [stmt.body]
            orelse = stmt.orelse
            while orelse is not None:
                blocks.append(orelse.body)
                orelse = orelse.orelse if isinstance(orelse, cst.If) else None
        elif isinstance(stmt, cst.Try):
            blocks = [stmt.body, *(h.body for h in stmt.handlers)]
            blocks += [b.body for b in (stmt.orelse, stmt.finalbody) if b is not None]
        elif isinstance(stmt, cst.With):
            blocks = [stmt.body]
        for block in reversed(blocks):
            if isinstance(block, cst.IndentedBlock):
                stack.extend(reversed(block.body))


def bound_slots(method: cst.FunctionDef) -> int:
    """How many leading parameters of ``method`` a call through an object fills: none for a
    ``@staticmethod`` (``model.train_step(model, optimizer)`` hands ``model`` to the first), else one."""
    return 0 if decorated(method, "staticmethod") else 1


def decorated(function: cst.FunctionDef, name: str) -> bool:
    """Whether ``function`` carries the plain decorator ``@name`` (``@classmethod``, ``@staticmethod``)."""
    return any(m.matches(d.decorator, m.Name(name)) for d in function.decorators)

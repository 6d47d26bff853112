"""The program's classes and definitions, as the index finds them: bases, methods, subclasses.

:class:`~ddpify.engine.index.Index` derives from :class:`ProgramClasses`; the lookups here need
only the definitions the index collected (``functions``, ``classes``, ``class_of``) and its
name resolution (``qualified_names``, ``module_of``), declared below for type checking.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.engine.syntax import dotted, straight_line, walk

if TYPE_CHECKING:
    from ddpify.engine.index import Ref, Scope


class ProgramClasses:
    """Lookups of the program's own functions and classes (a part of the index)."""

    module: cst.Module
    modules: list[cst.Module]
    module_names: dict[str, cst.Module]
    functions: dict[tuple[Scope, str], cst.FunctionDef]
    classes: dict[tuple[cst.Module, str], cst.ClassDef]
    class_of: dict[cst.FunctionDef, cst.ClassDef]
    imports: dict[cst.Module, dict[str, set[str]]]
    _bases: dict[cst.ClassDef, list[cst.ClassDef]]
    _derived: dict[cst.ClassDef, list[cst.ClassDef]] | None  # see subclasses()
    _subclasses: dict[cst.ClassDef, list[cst.ClassDef]]
    _field_owners: dict[cst.ClassDef, cst.ClassDef] | None  # see attribute_class()
    order: dict[cst.CSTNode, int]
    bound: dict[Scope, set[str]]

    if TYPE_CHECKING:

        def module_of(self, node: cst.CSTNode) -> cst.Module: ...
        def qualified_names(self, node: cst.CSTNode) -> frozenset[str]: ...
        def scope_of(self, node: cst.CSTNode) -> Scope: ...
        def lineage(self, ref: Ref) -> set[Ref]: ...
        def assignments_to(self, ref: Ref) -> Iterator[cst.Assign]: ...
        def values_assigned(self, ref: Ref) -> Iterator[tuple[cst.Assign | cst.AnnAssign, cst.BaseExpression]]: ...
        def alias_of(self, name: cst.Name, scope: Scope | None = None) -> cst.Name | None: ...

        def root_ref(self, expr: cst.BaseExpression, scope: Scope) -> Ref | None: ...
        def function_named(self, expr: cst.BaseExpression, scope: Scope) -> cst.FunctionDef | None: ...

    def local_definition(self, qualified: str, depth: int = 0) -> cst.FunctionDef | cst.ClassDef | None:
        """The function or class of the program that a qualified name (``models.resnet.ResNet``)
        refers to, followed through re-exports (``from .resnet import ResNet`` in a package)."""
        owner, _, name = qualified.rpartition(".")
        module = self.module_names.get(owner)
        if module is None or depth > 8:
            return None
        found = self.functions.get((module, name)) or self.classes.get((module, name))
        if found is not None:
            return found
        return next(
            (d for full in self.imports[module].get(name, ()) if (d := self.local_definition(full, depth + 1))),
            None,
        )

    def local_class(self, expr: cst.BaseExpression, depth: int = 0) -> cst.ClassDef | None:
        """The program's own class that ``expr`` names (``Net``, ``models.Net``) where it is written:
        defined in that module, imported from another module of the program, or bound to another
        name once (``Exp = ExpMain``)."""
        if isinstance(expr, cst.Name):
            found = self.classes.get((self.module_of(expr), expr.value))
            if found is None and depth < 3 and (alias := self.alias_of(expr)) is not None:
                return self.local_class(alias, depth + 1)
            if found is not None or len(self.modules) <= 1:
                return found
        elif not isinstance(expr, cst.Attribute) or len(self.modules) <= 1:
            return None
        for full in sorted(self.qualified_names(expr)):
            definition = self.local_definition(full)
            if isinstance(definition, cst.ClassDef):
                return definition
        return None

    def local_classes(self, expr: cst.BaseExpression) -> list[cst.ClassDef]:
        """Every class of the program that ``expr`` may name where it is written: :meth:`local_class`, and
        where imports in different branches bind the name (``from bin.train_asr import Solver`` in one,
        ``from bin.test_asr import Solver`` in another), the class of each."""
        first = self.local_class(expr)
        if first is None or not isinstance(expr, (cst.Name, cst.Attribute)) or len(self.modules) <= 1:
            return [first] if first is not None else []
        found = [first]
        for full in sorted(self.qualified_names(expr)):
            definition = self.local_definition(full)
            if isinstance(definition, cst.ClassDef) and definition not in found:
                found.append(definition)
        return found

    def method_class(self, scope: Scope) -> cst.ClassDef | None:
        return self.class_of.get(scope) if isinstance(scope, cst.FunctionDef) else None

    def bases(self, cls: cst.ClassDef) -> list[cst.ClassDef]:
        """The program's own classes that ``cls`` derives from directly."""
        found = self._bases.get(cls)
        if found is None:
            found = [b for arg in cls.bases if arg.keyword is None and (b := self.local_class(arg.value)) is not None]
            self._bases[cls] = found = [b for b in found if b is not cls]
        return found

    def ancestry(self, cls: cst.ClassDef) -> Iterator[cst.ClassDef]:
        """``cls``, then the program's classes it derives from, nearest first (each once)."""
        seen: set[cst.ClassDef] = set()
        frontier = [cls]
        while frontier:
            current = frontier.pop(0)
            if current in seen:
                continue
            seen.add(current)
            yield current
            frontier += self.bases(current)

    def builds_loader(self, call: cst.Call) -> bool:
        """Whether ``call`` builds a DataLoader: torch's, or the program's own subclass of it that hands
        every argument on to DataLoader's ``__init__`` and changes nothing else but attributes such as
        its ``collate_fn`` (``super().__init__(*args, **kwargs)``; no other method): a ``sampler=``
        given to it reaches the DataLoader, which iterates as torch's does."""
        if self.qualified_names(call.func) & (torch_api.DATALOADER | torch_api.GRAPH_LOADERS):
            return True
        cls = self.local_class(call.func)
        return cls is not None and self.derives_from(cls, torch_api.DATALOADER) and self.loader_as_built(cls)

    def loader_as_built(self, cls: cst.ClassDef) -> bool:
        """Whether the program's DataLoader subclass ``cls`` (and each of its own bases) only hands its
        arguments on to DataLoader (:meth:`builds_loader`)."""
        return all(_hands_on_to_its_base(c) for c in self.ancestry(cls))

    def method(self, cls: cst.ClassDef, name: str, *, dispatch: bool = False) -> cst.FunctionDef | None:
        """The method ``name`` that instances of ``cls`` run: its own or a base class's.

        With ``dispatch`` (a call through ``self``), a method that only raises
        ``NotImplementedError`` (or does nothing), or that the class does not define
        at all (a template method of a base class calling what its subclasses
        supply), and that is defined in exactly one subclass of the program, is that
        subclass's: the one the program runs.
        """
        found = next((f for c in self.ancestry(cls) if (f := self.functions.get((c, name))) is not None), None)
        if dispatch and (found is None or _is_abstract(found)):
            overrides = [f for sub in self.subclasses(cls) if (f := self.functions.get((sub, name))) is not None]
            if len(overrides) == 1:
                return overrides[0]
        return found

    def subclasses(self, cls: cst.ClassDef) -> list[cst.ClassDef]:
        """Every class of the program that derives from ``cls``, at any depth."""
        found = self._subclasses.get(cls)
        if found is not None:
            return found
        if self._derived is None:  # each class's direct subclasses, found once from every class's bases
            self._derived = {}
            for other in self.classes.values():
                for base in self.bases(other):
                    self._derived.setdefault(base, []).append(other)
        found = []
        frontier = [cls]
        while frontier:
            for other in self._derived.get(frontier.pop(), ()):
                if other not in found:
                    found.append(other)
                    frontier.append(other)
        self._subclasses[cls] = found
        return found

    def derives_from(self, cls: cst.ClassDef, qualified: frozenset[str]) -> bool:
        """Whether ``cls``, or a class of the program it derives from, names one of ``qualified`` as a base
        (``torch.utils.data.DataLoader`` for a ``BaseDataLoader(DataLoader)`` and its subclasses)."""
        seen: set[cst.ClassDef] = set()
        frontier = [cls]
        while frontier:
            current = frontier.pop()
            if current in seen:
                continue
            seen.add(current)
            if any(self.qualified_names(base.value) & qualified for base in current.bases):
                return True
            frontier += self.bases(current)
        return False

    def constructed_classes(self, ref: Ref) -> Iterator[cst.ClassDef]:
        """The program's own classes whose instances the value at ``ref`` may be: ``Solver`` for
        ``solver`` after ``solver = Solver(...)``, followed through every place the value passes."""
        for place in self.lineage(ref):
            for _, value in self.values_assigned(place):
                if not isinstance(value, cst.Call):
                    continue
                built = self.classes_built(value)
                if built:
                    yield from built
                else:
                    yield from self.registry_classes(value.func)

    def classes_built(self, value: cst.BaseExpression, depth: int = 0) -> list[cst.ClassDef]:
        """The program's own classes whose instance ``value`` is: ``Solver(...)`` (the index also follows
        the helpers that return one)."""
        cls = self.local_class(value.func) if isinstance(value, cst.Call) else None
        return [cls] if cls is not None else []

    def registry_classes(self, expr: cst.BaseExpression) -> list[cst.ClassDef]:
        """The program's own classes a registry holds, for ``TRAINERS[cfg.name]``: every value of the dict (or
        list) that ``TRAINERS`` is assigned, where each names a class of the program; [] otherwise."""
        found: list[cst.ClassDef] = []
        for item in self._registry_items(expr):
            cls = self.local_class(item)
            if cls is None:
                return []
            if cls not in found:
                found.append(cls)
        return found

    def registry_functions(self, expr: cst.BaseExpression) -> list[cst.FunctionDef]:
        """The program's own functions a registry holds, for ``OPTIMIZERS[name](params)`` after ``OPTIMIZERS =
        {"adam": build_adam, "sgd": build_sgd}``: each, where every value names one; [] otherwise."""
        found: list[cst.FunctionDef] = []
        for item in self._registry_items(expr):
            function = self.function_named(item, self.scope_of(item))
            if function is None:
                return []
            if function not in found:
                found.append(function)
        return found

    def _registry_items(self, expr: cst.BaseExpression) -> list[cst.BaseExpression]:
        """The values of the dict (or list) that the registry ``TRAINERS`` of ``TRAINERS[key]`` is assigned,
        in source order; [] where it is anything else, or holds more than it shows (``**others``)."""
        if not isinstance(expr, cst.Subscript):
            return []
        ref = self.root_ref(expr.value, self.scope_of(expr)) if isinstance(expr.value, cst.Name) else None
        if isinstance(expr.value, cst.Attribute):  # ``register.MODELS[name]``: a dict of another module
            from ddpify.engine.index import Ref  # here: the index module imports this one

            for qualified in sorted(self.qualified_names(expr.value)):
                owner, _, registry = qualified.rpartition(".")
                module = self.module_names.get(owner)
                if module is not None and registry in self.bound[module]:
                    ref = Ref(module, registry)
        if ref is None:
            return []
        items: list[cst.BaseExpression] = []
        for place in sorted(self.lineage(ref), key=lambda p: (self.order.get(p.scope, -1), p.path)):
            for _, value in self.values_assigned(place):
                if isinstance(value, cst.Dict):
                    held = [e.value for e in value.elements if isinstance(e, cst.DictElement)]
                elif isinstance(value, (cst.List, cst.Tuple)):
                    held = [e.value for e in value.elements if isinstance(e, cst.Element)]
                else:
                    return []
                if len(held) != len(value.elements):
                    return []  # ``**others`` or ``*others``: more than it shows
                items += held
        return items

    def attribute_class(self, method: cst.FunctionDef) -> cst.ClassDef:
        """The class whose ``self.x`` fields ``method`` reads: one class for each family of the program's
        classes joined by inheritance, so that a base class and its subclasses share their fields, and so
        do the mixins one class derives from (``class Trainer(ModelPart, DataPart)``: ``self.model``,
        built in ``ModelPart``, is the one that ``DataPart`` reads)."""
        cls = self.class_of[method]
        if self._field_owners is None:
            self._field_owners = self._families()
        return self._field_owners.get(cls) or self._topmost(cls)

    def _topmost(self, cls: cst.ClassDef) -> cst.ClassDef:
        """The class at the top of ``cls``'s chain of first bases."""
        seen = {cls}
        while (bases := self.bases(cls)) and bases[0] not in seen:
            cls = bases[0]
            seen.add(cls)
        return cls

    def _families(self) -> dict[cst.ClassDef, cst.ClassDef]:
        """Each class of a family of more than one chain of first bases, with the class that holds the
        family's fields: the top of its first member's chain (in source order)."""
        classes = sorted(set(self.class_of.values()), key=self.order.__getitem__)
        parent: dict[cst.ClassDef, cst.ClassDef] = {}

        def root(cls: cst.ClassDef) -> cst.ClassDef:
            while parent.get(cls, cls) is not cls:
                cls = parent[cls]
            return cls

        for cls in classes:
            for base in self.bases(cls)[1:]:  # the first base is the chain itself
                a, b = root(self._topmost(cls)), root(self._topmost(base))
                if a is not b:
                    first, second = sorted((a, b), key=self.order.__getitem__)
                    parent[second] = first
        return {cls: root(self._topmost(cls)) for cls in classes if parent}

    def self_name(self, scope: Scope | None) -> str | None:
        """The name of ``self`` in a method (its first parameter)."""
        if not isinstance(scope, cst.FunctionDef) or self.method_class(scope) is None or not scope.params.params:
            return None
        if any(m.matches(d.decorator, m.Name("staticmethod") | m.Name("classmethod")) for d in scope.decorators):
            return None
        return scope.params.params[0].name.value

    def method_scope(self, scope: Scope) -> cst.FunctionDef | None:
        """The method whose ``self`` is visible in ``scope`` (closures inside methods see it too)."""
        current = scope
        while isinstance(current, cst.FunctionDef):
            if current in self.class_of:
                return current
            current = self.scope_of(current)
        return None

    def scopes_reading(self, ref: Ref) -> list[Scope]:
        """The function bodies in which ``ref`` can be read: its scope, or every method of its class."""
        if isinstance(ref.scope, cst.ClassDef):
            return [f for f, cls in self.class_of.items() if self.attribute_class(f) is ref.scope]
        return [ref.scope]


def _is_abstract(function: cst.FunctionDef) -> bool:
    """A method that only raises ``NotImplementedError``, or does nothing (``pass``, ``...``, a docstring)."""
    for stmt in function.body.body:
        small = stmt.body if isinstance(stmt, cst.SimpleStatementLine) else [stmt]
        for part in small:
            if isinstance(part, cst.Pass) or (
                isinstance(part, cst.Expr) and isinstance(part.value, (cst.SimpleString, cst.Ellipsis))
            ):
                continue
            if isinstance(part, cst.Raise) and "NotImplementedError" in dotted(
                part.exc.func if isinstance(part.exc, cst.Call) else part.exc or cst.Name("_")
            ):
                continue
            return False
    return True


def _hands_on_to_its_base(cls: cst.ClassDef) -> bool:
    """A class body of a docstring and at most an ``__init__(self, *args, **kwargs)`` that calls its
    base's ``__init__`` with ``*args, **kwargs`` and reads them nowhere else, nor sets a sampler."""
    body = [s for s in cls.body.body if not m.matches(s, m.SimpleStatementLine([m.Expr(m.SimpleString())]))]
    if not body:
        return True
    init = body[0]
    if len(body) > 1 or not isinstance(init, cst.FunctionDef) or init.name.value != "__init__" or init.decorators:
        return False
    p = init.params
    star, double = p.star_arg, p.star_kwarg
    if len(p.params) != 1 or p.posonly_params or p.kwonly_params or not isinstance(star, cst.Param) or not double:
        return False
    passed = [m.Arg(m.Name(star.name.value), star="*"), m.Arg(m.Name(double.name.value), star="**")]
    init_of = m.Attribute(attr=m.Name("__init__"))
    super_init = m.Attribute(m.Call(m.Name("super")), attr=m.Name("__init__"))
    base_init = m.Call(super_init, args=passed) | m.Call(init_of, args=[m.Arg(m.Name(p.params[0].name.value)), *passed])
    handing = [s for s in straight_line(init.body) if m.matches(s, m.SimpleStatementLine([m.Expr(base_init)]))]
    handed = {n for statement in handing for n in walk(statement)}
    for node in walk(init.body):
        if node in handed:
            continue
        if isinstance(node, cst.Name) and node.value in (star.name.value, double.name.value):
            return False
        if isinstance(node, cst.Attribute) and node.attr.value in ("sampler", "batch_sampler", "__iter__"):
            return False
    return bool(handing)

"""What a value in the script can hold, where the script spells it out: the entries of a ``**kwargs`` dict."""

from __future__ import annotations

from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.engine.index import Index, Ref, Scope
from ddpify.engine.syntax import argument

Entries = dict[str, tuple[cst.BaseExpression, ...]]  # each key -> the values it may be given


def dict_keys(index: Index, expr: cst.BaseExpression, scope: Scope) -> frozenset[str] | None:
    """The keys a ``**kwargs`` dict can hold, from its literal definitions and updates; None if unknown."""
    entries = dict_entries(index, expr, scope)
    return None if entries is None else frozenset(entries)


def spread_values(index: Index, call: cst.Call, name: str) -> tuple[cst.BaseExpression, ...] | None:
    """The values ``call``'s ``**kwargs`` may pass for the parameter ``name`` (empty: none; None: unknown)."""
    values: list[cst.BaseExpression] = []
    for arg in call.args:
        if arg.star == "**":
            entries = dict_entries(index, arg.value, index.scope_of(call))
            if entries is None:
                return None
            values += entries.get(name, ())
    return tuple(values)


def loader_argument(index: Index, call: cst.Call, name: str) -> cst.BaseExpression | None:
    """What a DataLoader is given for its parameter ``name`` as the script writes it: by keyword, by
    position, or the one value a ``**kwargs`` dict of the script's passes (``{"shuffle": True, ...}``);
    None where it is not given or cannot be known. For reading, not for editing: a value from a dict
    is not an argument of ``call``."""
    arg = argument(call, name, torch_api.DATALOADER_POSITIONS.get(name))
    if arg is not None:
        return arg.value
    spread = spread_values(index, call, name)
    return spread[0] if spread is not None and len(spread) == 1 else None


def loader_batch_size(index: Index, call: cst.Call) -> cst.BaseExpression | None:
    """A DataLoader's batch size as the script writes it (see :func:`loader_argument`)."""
    return loader_argument(index, call, "batch_size")


def dict_entries(index: Index, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> Entries | None:
    """What a ``**kwargs`` dict can hold, from its literal definitions and updates; None if unknown."""
    if depth > 3:
        return None
    found: dict[str, list[cst.BaseExpression]] = {}

    def add(more: Entries | None) -> bool:
        if more is None:
            return False
        for key, values in more.items():
            found.setdefault(key, []).extend(v for v in values if v not in found.get(key, ()))
        return True

    if isinstance(expr, cst.Dict):
        for element in expr.elements:
            if isinstance(element, cst.DictElement) and (key := _string(element.key)) is not None:
                add({key: (element.value,)})
            elif not (
                isinstance(element, cst.StarredDictElement)
                and add(dict_entries(index, element.value, scope, depth + 1))
            ):
                return None
        return _frozen(found)
    if isinstance(expr, cst.IfExp):
        body = dict_entries(index, expr.body, scope, depth + 1)
        if not add(body) or not add(dict_entries(index, expr.orelse, scope, depth + 1)):
            return None
        return _frozen(found)
    if isinstance(expr, cst.Call) and m.matches(expr.func, m.Name("dict")):
        if any(a.keyword is None for a in expr.args):
            return None
        add({a.keyword.value: (a.value,) for a in expr.args if a.keyword is not None})
        return _frozen(found)
    ref = index.ref_of(expr, scope)
    if ref is None:
        return None
    assigned = False
    if isinstance(ref.scope, cst.FunctionDef) and ref.path in _parameters(ref.scope):
        if not add(_passed(index, ref.scope, ref.path, depth)):
            return None
        assigned = True
    elif any(
        flow.stmt not in {index.statement_of(a) for a, _ in index.values_assigned(ref)}
        for flow in index.flows_into(ref)
    ):
        return None  # (``self.options = options`` is followed below; anything else that flows in is not)
    for assign, value in index.values_assigned(ref):
        if not add(dict_entries(index, value, index.scope_of(assign), depth + 1)):
            return None
        assigned = True
    for read in index.mentions(ref.scope if not isinstance(ref.scope, cst.ClassDef) else index.module, ref):
        parent = index.parent(read)
        if isinstance(parent, cst.Attribute) and parent.value is read:
            call = index.parent(parent)
            if parent.attr.value == "update" and isinstance(call, cst.Call) and len(call.args) == 1:
                if not add(dict_entries(index, call.args[0].value, index.scope_of(call), depth + 1)):
                    return None
            elif parent.attr.value not in {"get", "copy", "items", "keys", "values"}:
                return None
        elif isinstance(parent, cst.Subscript):
            subscript = parent.slice[0].slice if parent.slice else None
            if isinstance(index.parent(parent), cst.AssignTarget):
                key = _string(subscript.value) if isinstance(subscript, cst.Index) else None
                statement = index.parent(index.parent(parent))
                if key is None or not isinstance(statement, cst.Assign):
                    return None
                add({key: (statement.value,)})
    return _frozen(found) if assigned else None


def _parameters(function: cst.FunctionDef) -> dict[str, cst.Param]:
    p = function.params
    return {param.name.value: param for param in (*p.posonly_params, *p.params, *p.kwonly_params)}


def passed_values(index: Index, ref: Ref) -> list[cst.BaseExpression] | None:
    """Where ``ref`` is a parameter of the program's function, what every call of it passes for it (its
    default where a call passes nothing); None where it is not a parameter, a call passes arguments
    through ``*``/``**``, or nothing the program shows calls the function."""
    function = ref.scope
    if not isinstance(function, cst.FunctionDef) or ref.path not in _parameters(function):
        return None
    callers = index.callers(function)
    if not callers or any(a.star for call in callers for a in call.args):
        return None
    found: list[cst.BaseExpression] = []
    for call in callers:
        arg = next((a for a in call.args if index.parameter_of(a) == ref), None)
        if arg is None and function in index.registry_functions(call.func):  # ``OPTIMIZERS[name](params, ...)``
            arg = _argument_for(call, function, ref.path)
        elif arg is None and function.name.value == "__call__" and index.method_class(function) is not None:
            arg = _argument_for(call, function, ref.path, implicit=1)  # ``stopper(loss, model, path)``: self
        value = arg.value if arg is not None else _parameters(function)[ref.path].default
        if value is None:
            return None
        found.append(value)
    return found


def _argument_for(call: cst.Call, function: cst.FunctionDef, name: str, implicit: int = 0) -> cst.Arg | None:
    """The argument of ``call`` that fills the parameter ``name`` of ``function``, which it runs with its
    first ``implicit`` parameters filled implicitly (``self``): by keyword, or by position."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    names = [p.name.value for p in (*function.params.posonly_params, *function.params.params)][implicit:]
    positional = [a for a in call.args if a.keyword is None and not a.star]
    position = names.index(name) if name in names else len(positional)
    return positional[position] if position < len(positional) else None


def _passed(index: Index, function: cst.FunctionDef, name: str, depth: int) -> Entries | None:
    """What the parameter ``name`` of ``function`` may be given: the dicts every call of it passes (or its
    default) to a loader factory handed ``train_kwargs`` (see :func:`passed_values`)."""
    values = passed_values(index, Ref(function, name))
    if values is None:
        return None
    found: dict[str, list[cst.BaseExpression]] = {}
    for value in values:
        entries = dict_entries(index, value, index.scope_of(value), depth + 1)
        if entries is None:
            return None
        for key, each in entries.items():
            found.setdefault(key, []).extend(v for v in each if v not in found.get(key, ()))
    return _frozen(found)


def _frozen(found: dict[str, list[cst.BaseExpression]]) -> Entries:
    return {key: tuple(values) for key, values in found.items()}


def _string(expr: cst.BaseExpression) -> str | None:
    """The text of a plain string literal, or None."""
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def built_by(
    index: Index, value: cst.BaseExpression, depth: int = 0, trail: list[cst.BaseExpression] | None = None
) -> list[cst.BaseExpression] | None:
    """What ``value`` may be built by, followed back through the program: the values a name is assigned,
    what every call of a function passes for its parameter (a loader factory handed the sampler), and
    what a function of the program returns (a sampler factory); None where that cannot be seen.

    ``trail`` gets every expression passed on the way (``make_sampler(train_idx)`` in the caller), whose
    arguments may draw too."""
    if trail is not None:
        trail.append(value)
    if depth > 4:
        return None
    if isinstance(value, (cst.Name, cst.Attribute)):
        ref = index.ref_of(value, index.scope_of(value))
        if ref is None:
            return [value]
        unpacked = index.unpacked_values(ref, depth)
        if trail is not None:  # ``a, b = make_pair(x)``: what the call reads may draw too
            trail.extend(assign.value for assign, _ in unpacked if assign.value not in trail)
        assigned: list[tuple[cst.Assign | cst.AnnAssign, cst.BaseExpression]] = [
            *index.values_assigned(ref),
            *unpacked,
        ]
        passed = passed_values(index, ref) if not assigned else None
        if (not assigned and passed is None) or written_otherwise(index, ref, [a for a, _ in assigned]):
            return None
        held = [v for _, v in assigned] + list(passed or ())
    elif isinstance(value, cst.Call) and index.local_class(value.func) is None:
        callee = index.resolve_callee(value, index.scope_of(value))
        if callee is None:
            return [value]
        if index.is_generator(callee[0]):
            return None
        held = index.returned_values(callee[0])
        if not held:
            return None
    else:
        return [value]
    found: list[cst.BaseExpression] = []
    for each in held:
        inner = built_by(index, each, depth + 1, trail)
        if inner is None:
            return None
        found += inner
    return found


def written_otherwise(index: Index, ref: Ref, assigns: list[cst.Assign | cst.AnnAssign]) -> bool:
    """Whether ``ref`` is also written by anything but ``assigns`` (a loop, an unpacking, ``+=``, ``:=``)."""
    for scope in index.scopes_reading(ref):
        for read in index.mentions(scope, ref):
            parent = index.parent(read)
            if isinstance(parent, cst.AssignTarget) and index.parent(parent) in assigns:
                continue
            unpacking = next((a for a in index.ancestors(read) if isinstance(a, cst.AssignTarget)), None)
            if (
                unpacking is not None
                and isinstance(unpacking.target, cst.Tuple)
                and index.parent(unpacking) in assigns
                and all(isinstance(p, (cst.Tuple, cst.Element)) for p in _between(index, read, unpacking))
            ):
                continue  # ``a, b = make_pair()``, followed by ``Index.unpacked_values``
            if isinstance(parent, cst.AnnAssign) and parent.target is read and parent in assigns:
                continue
            if binds(index, read):
                return True
    return False


def binds(index: Index, mention: cst.BaseExpression) -> bool:
    """Whether ``mention`` is bound where it stands: the target of an assignment (also inside a tuple or
    list target), of ``+=``, of a ``for``, of ``:=``, or an ``as`` name."""
    for node in (mention, *index.ancestors(mention)):
        owner = index.parent(node)
        if (
            (isinstance(owner, cst.AssignTarget) and owner.target is node)
            or (isinstance(owner, (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor)) and owner.target is node)
            or (isinstance(owner, cst.NamedExpr) and owner.target is node)
            or (isinstance(owner, cst.AsName) and owner.name is node)
        ):
            return True
        if not isinstance(owner, (cst.Tuple, cst.List, cst.Element, cst.StarredElement)):
            return False
    return False


def _between(index: Index, node: cst.CSTNode, ancestor: cst.CSTNode) -> list[cst.CSTNode]:
    """The nodes from ``node``'s parent up to, not including, ``ancestor``."""
    found: list[cst.CSTNode] = []
    current = index.parent(node)
    while current is not None and current is not ancestor:
        found.append(current)
        current = index.parent(current)
    return found


def never_runs(index: Index, node: cst.CSTNode) -> bool:
    """Whether ``node`` sits in a branch that no call of its function takes: ``FileHandler(name)`` in
    ``StreamHandler() if not file else FileHandler(name)`` of ``def get_logger(name, file=False)`` where
    every call leaves ``file`` False. The test must be the parameter itself, or ``not`` it, and every
    call must give it a constant."""
    child: cst.CSTNode = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
        if isinstance(ancestor, (cst.IfExp, cst.If)) and child is not ancestor.test:
            held = _constant_test(index, ancestor.test)
            if held is not None and held != (child is ancestor.body):
                return True
        child = ancestor
    return False


def _constant_test(index: Index, test: cst.BaseExpression) -> bool | None:
    """The value ``test`` (``flag`` or ``not flag``, a parameter) has on every call of its function, where
    every call gives the parameter the same constant (or leaves its default); None otherwise."""
    negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
    name = cast(cst.UnaryOperation, test).expression if negated else test
    if not isinstance(name, cst.Name):
        return None
    function = index.scope_of(test)
    if not isinstance(function, cst.FunctionDef):
        return None
    values = passed_values(index, Ref(function, name.value))
    if not values:
        return None
    truths = {_truth(v) for v in values}
    if len(truths) != 1 or None in truths:
        return None
    truth = truths.pop()
    return (not truth) if negated else truth


def _truth(value: cst.BaseExpression) -> bool | None:
    if isinstance(value, cst.Name) and value.value in ("True", "False", "None"):
        return value.value == "True"
    if isinstance(value, cst.Integer):
        return value.evaluated_value != 0
    return None


_GPU_COUNT = frozenset({"torch.cuda.device_count"})


def gpu_count(index: Index, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """``torch.cuda.device_count()``, ``max(1, torch.cuda.device_count())``, or a name that holds one."""
    if isinstance(expr, cst.Call):
        if index.is_call_to(expr, _GPU_COUNT):
            return True
        if m.matches(expr.func, m.Name("max")) and len(expr.args) == 2:
            return any(gpu_count(index, a.value, depth) for a in expr.args) and any(
                isinstance(a.value, cst.Integer) and a.value.value == "1" for a in expr.args
            )
        return False
    ref = index.carried_ref(expr, index.scope_of(expr)) if depth < 3 else None
    values = [value for _, value in index.values_assigned(ref)] if ref is not None else []
    if ref is None and depth < 3:
        values = attribute_values(index, expr)  # ``args.n_gpu = torch.cuda.device_count()`` in ``main()``
    return bool(values) and all(gpu_count(index, value, depth + 1) for value in values)


def attribute_values(index: Index, expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """What the program assigns to the attribute that ``expr`` reads (``args.n_gpu``, ``self.options.gpus``),
    where no place of the index holds it: every ``<object>.n_gpu = ...`` of the program, in any function and on
    any object (an options object handed from function to function, and kept as a field on the way); []
    for anything but such an attribute."""
    if not isinstance(expr, cst.Attribute) or index.ref_of(expr, index.scope_of(expr)) is not None:
        return []
    values: list[cst.BaseExpression] = []
    for node in index.attributes.get(expr.attr.value, ()):
        target = index.parent(node)
        assign = index.parent(target)
        if (
            isinstance(target, cst.AssignTarget)
            and isinstance(assign, cst.Assign)
            and index.ref_of(node, index.scope_of(node)) is None
        ):
            values.append(assign.value)
    return values

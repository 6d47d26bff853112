"""The model concern's finder: the models the optimizers train, and the statement after which each is ready.

A model is ready once it is built, on its device and set up (weights initialised, a checkpoint
loaded, parameters frozen); ``nn.DataParallel(model)`` is where it is ready too. The checks of
what the script does with the model after that point live beside this module: reads through
the wrapper (:mod:`.reads`), freezing (:mod:`.freezing`) and the training step (:mod:`.forward`).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, TypeVar, cast

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.concerns import batch_negatives, model_collections
from ddpify.concerns.model.codes import (
    BUFFER_UPDATED_FROM_THE_BATCH,
    MODEL_NOT_PLACED,
    NO_OPTIMIZER,
    OUTPUT_HIDDEN_IN_AN_OBJECT,
    OWN_DATA_PARALLEL,
    PARTS_RUN_DIRECTLY,
    PENALTY_ONLY_STEP,
    SAVED_WITH_ITS_WRAPPER,
    SECOND_BACKWARD,
    STORED_BEFORE_WRAP,
    TWO_METHODS_ONE_BACKWARD,
    UNFROZEN_AFTER_WRAP,
    UNTRACEABLE_OPTIMIZER,
    UNUSED_AND_USED_OUTSIDE,
    WRAPPED_INSIDE_A_MODULE,
)
from ddpify.concerns.model.facts import Facts, Model
from ddpify.concerns.model.forward import ForwardChecks, backwards_reached
from ddpify.concerns.model.freezing import Freezing
from ddpify.concerns.model.optimizers import TrainedModels
from ddpify.concerns.model.outputs import OutputUse
from ddpify.concerns.model.reads import DEEPCOPY, WrapperReads
from ddpify.concerns.model.redrawn import Redrawn
from ddpify.diagnostics import Code
from ddpify.engine.called import enclosing_function
from ddpify.engine.index import Flow, Index, Ref, Scope
from ddpify.engine.program import Program, is_backward, without_grad
from ddpify.engine.syntax import argument, parameter_names, single_target
from ddpify.engine.values import gpu_count, passed_values

# (statement, the place it assigns, whether it is ``.cuda()``): a move of the model to its device
_Move = tuple[cst.SimpleStatementLine, Ref, bool]
_Candidate = TypeVar("_Candidate", bound=tuple[Any, ...])  # (statement, ...)


def find(program: Program) -> Facts:
    finder = _Finder(program)
    reported = len(program.findings)
    models = _outermost(program.index, tuple(finder.models()))
    backward = program.first_backward()
    if not models and len(program.findings) == reported and backward is not None:
        program.report(
            backward,
            NO_OPTIMIZER,
            "the script trains, but builds no torch.optim optimizer over a model's parameters in this file: "
            "cannot find the model to wrap in DistributedDataParallel",
        )
    for refusal in (_wrapped_inside_a_module, _output_hidden, _two_passes):
        models = _refused(program, models, refusal)
    for model in models:
        _report_buffers_updated(program, model)
    if models:
        batch_negatives.report(program)
        _report_saved_holders(program, models)
    index = program.index
    data_parallel = tuple(c for c in index.calls if index.is_call_to(c, torch_api.DATA_PARALLEL))
    return Facts(
        models, tuple(finder.trained.optimizers()), data_parallel, _data_parallel_tests(index), tuple(finder.summed)
    )


_Refusal = tuple[cst.CSTNode, Code, str]  # where, the code, the message


def _refused(
    program: Program, models: tuple[Model, ...], refusal: Callable[[Index, Model], _Refusal | None]
) -> tuple[Model, ...]:
    """The models that ``refusal`` finds nothing against; each other one is reported with what it found."""
    kept: list[Model] = []
    for model in models:
        found = refusal(program.index, model)
        if found is None:
            kept.append(model)
        else:
            program.report(*found)
    return tuple(kept)


def _wrapped_inside_a_module(index: Index, model: Model) -> _Refusal | None:
    """A wrap that would go into a method of an nn.Module of the program (``net = Linear(...)``,
    ``self.add_module("net", net)`` and an optimizer over ``net`` in a module's ``__init__``: the module keeps the
    plain part, and its owner moves it after the wrap)."""
    function = index.scope_of(model.insert_after)
    cls = index.method_class(function) if isinstance(function, cst.FunctionDef) else None
    if not (isinstance(function, cst.FunctionDef) and cls is not None and index.derives_from(cls, torch_api.NN_MODULE)):
        return None
    if isinstance(model.ref.scope, cst.FunctionDef) and "." not in model.ref.path:
        why = "the wrapper would be held by a local name, not by the module that the training step runs"
    elif _moved_once_built(index, cls):
        why = "its owner moves the module to its device after the wrapper is made"
    else:
        return None  # (a trainer module that runs its parts in its own methods, never moved)
    where = f"`{cls.name.value}.{function.name.value}`, a method of an nn.Module"
    return (
        model.insert_after,
        WRAPPED_INSIDE_A_MODULE,
        f"`{model.expression}` is trained by its own optimizer inside {where}: {why}",
    )


def _output_hidden(index: Index, model: Model) -> _Refusal | None:
    """A model that needs ``find_unused_parameters`` whose forward returns what DDP cannot search for the output
    tensors (``return Output(loss, states)`` of a plain class)."""
    hidden = _plain_object_returned(index, model) if model.unused is not None else None
    if hidden is None:
        return None
    return (
        hidden,
        OUTPUT_HIDDEN_IN_AN_OBJECT,
        f"`{model.expression}` needs find_unused_parameters=True ({model.unused}), and its forward returns "
        f"`{index.module_of(hidden).code_for_node(hidden.func)}(...)`, an object of a plain class: DDP finds no "
        "output tensor in it, takes every parameter for unused and raises when their gradients come",
    )


def _two_passes(index: Index, model: Model) -> _Refusal | None:
    """A model that needs ``find_unused_parameters`` run twice before one backward pass (DDP321): ``out =
    model(x)`` then ``again = model(x2, saved=out.states)``, the second pass skipping a part the first ran."""
    twice = _two_passes_before_a_backward(index, model) if model.unused is not None else None
    if twice is None:
        return None
    first, second = twice
    return (
        second,
        TWO_METHODS_ONE_BACKWARD,
        f"`{model.expression}` runs through DistributedDataParallel twice (lines {index.position(first)[0]} and "
        f"{index.position(second)[0]}) before one backward pass, while {model.unused}: DDP finds the unused "
        "parameters from the last pass's output alone and raises when the first pass's parameters get their "
        "gradients too; compute the losses in one forward (a method that returns both), then convert",
    )


def _two_passes_before_a_backward(index: Index, model: Model) -> tuple[cst.Call, cst.Call] | None:
    """Two calls of the model, with gradients on, in one training loop before one backward pass of that loop
    and with none between them (never on the two sides of one ``if``)."""
    lineage = own_lineage(index, model.ref)
    passes: dict[cst.For | cst.While, list[cst.Call]] = {}
    for call in index.calls:
        if not isinstance(call.func, cst.Name | cst.Attribute) or without_grad(index, call):
            continue
        scope = index.scope_of(call)
        if index.ref_of(call.func, scope) not in lineage:
            continue
        loop = next(index.enclosing_loops(call), None)
        if loop is not None and index.trains(loop.body):
            passes.setdefault(loop, []).append(call)
    for loop, calls in passes.items():
        if len(calls) < 2:
            continue
        scope = index.scope_of(calls[0])
        backwards = [
            n
            for n in index.walk(loop.body)
            if isinstance(n, cst.Call) and is_backward(n) and index.scope_of(n) is scope
        ]
        ordered = sorted(calls, key=lambda c: index.order[index.statement_of(c)])
        for first, second in itertools.pairwise(ordered):
            if _on_other_sides(index, first, second) or _passed_alike(index, first, second):
                continue  # (passes given alike take the same path, and leave the same parameters unused)
            start, end = index.order[index.statement_of(first)], index.order[index.statement_of(second)]
            if any(start <= index.order[index.statement_of(b)] < end for b in backwards):
                continue
            if any(index.order[index.statement_of(b)] >= end for b in backwards):
                return first, second
    return None


def _passed_alike(index: Index, a: cst.Call, b: cst.Call) -> bool:
    """Whether two calls pass the same arguments by position and keyword, with the same constants where either
    passes one (``encoder(left)`` and ``encoder(right)``; not ``model(x)`` and ``model(x, saved=states)``)."""

    def shape(call: cst.Call) -> list[tuple[str, str | None]]:
        code = index.module_of(call).code_for_node
        return [
            (
                arg.star + (arg.keyword.value if arg.keyword is not None else ""),
                code(arg.value) if _literal(arg.value) else None,
            )
            for arg in call.args
        ]

    first, second = shape(a), shape(b)
    if len(first) != len(second):
        return False
    return all(
        x[0] == y[0] and ((x[1] is None and y[1] is None) or x[1] == y[1])
        for x, y in zip(sorted(first, key=str), sorted(second, key=str), strict=True)
    )


def _literal(value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.SimpleString | cst.Integer | cst.Float) or (
        isinstance(value, cst.Name) and value.value in ("True", "False", "None")
    )


def _unconditional(index: Index, node: cst.CSTNode, stmt: cst.CSTNode) -> bool:
    """Whether ``node`` runs whenever the statement ``stmt`` around it runs to its end (no ``if``, conditional
    expression, ``and``/``or`` or ``try`` between them; loops run their body)."""
    for ancestor in index.ancestors(node):
        if ancestor is stmt:
            return True
        if isinstance(ancestor, cst.If | cst.IfExp | cst.BooleanOperation | cst.Try | cst.Else):
            return False
    return False


def _report_buffers_updated(program: Program, model: Model) -> None:
    """DDP324 for the first buffer (``self.register_buffer("cluster_size", ...)``) that the model's forward, or
    a method of its class that forward calls on ``self``, changes in place (``self.cluster_size.mul_(decay)``,
    ``self.embed.data.copy_(...)``, ``self.count += 1``) where it trains."""
    index = program.index
    classes = list(dict.fromkeys(index.constructed_classes(model.ref)))
    for cls in classes:  # grows: the classes of the parts each class builds (``self.quantiser = Quantiser()``)
        init = index.method(cls, "__init__")
        for node in index.walk(init.body) if init is not None and len(classes) < 50 else ():
            if (
                isinstance(node, cst.Call)
                and (part := index.local_class(node.func)) is not None
                and part not in classes
            ):
                classes.append(part)
    for cls in classes:
        buffers: set[str] = set()
        for owner in index.ancestry(cls):
            init = index.method(owner, "__init__")
            for node in index.walk(init.body) if init is not None else ():
                if (
                    isinstance(node, cst.Call)
                    and m.matches(node.func, m.Attribute(attr=m.Name("register_buffer")))
                    and node.args
                    and isinstance(name := node.args[0].value, cst.SimpleString)
                    and isinstance(value := name.evaluated_value, str)
                ):
                    buffers.add(value)
        forward = index.method(cls, "forward", dispatch=True)
        if not buffers or forward is None:
            continue
        self_name = index.self_name(forward) or "self"
        methods = [forward]
        for node in index.walk(forward.body):
            if isinstance(node, cst.Call) and m.matches(node.func, m.Attribute(value=m.Name(self_name))):
                called = index.method(cls, cast(cst.Attribute, node.func).attr.value, dispatch=True)
                if called is not None and called not in methods:
                    methods.append(called)
        for method in methods:
            own = index.self_name(method) or "self"
            for node in index.walk(method.body):
                field = _buffer_changed(node, own)
                if field is not None and field in buffers:
                    program.report(
                        node,
                        BUFFER_UPDATED_FROM_THE_BATCH,
                        f"`{own}.{field}` is a buffer that {method.name.value}() updates from the batch: "
                        "DistributedDataParallel copies rank 0's buffers to every rank at each forward, so the "
                        "other ranks' updates are dropped; average the update over the ranks (`dist.all_reduce` of "
                        "the batch statistics) or wrap with `broadcast_buffers=False` and keep them in step yourself",
                    )
                    return


def _buffer_changed(node: cst.CSTNode, self_name: str) -> str | None:
    """The field of ``self`` that ``node`` changes in place from a value of the batch: ``self.x.mul_(d).add_(
    counts)``, ``self.x.data.copy_(z)``, ``self.x.data = ...``, ``self.x[...] = ...``, ``self.x += ...``; None
    otherwise, and None where only constants and ``self``'s fields go in (``self.count += 1``, alike on every
    rank)."""

    def field(expr: cst.BaseExpression) -> str | None:
        while (
            (isinstance(expr, cst.Attribute) and expr.attr.value == "data")
            or isinstance(expr, cst.Subscript)
            or (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and _in_place(expr.func))
        ):
            expr = cast(cst.Attribute, expr.func).value if isinstance(expr, cst.Call) else expr.value
        if isinstance(expr, cst.Attribute) and m.matches(expr.value, m.Name(self_name)):
            return expr.attr.value
        return None

    def from_the_batch(*values: cst.BaseExpression) -> bool:
        return any(
            name.value not in (self_name, "True", "False", "None") for value in values for name in _names_read(value)
        )

    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and _in_place(node.func):
        return field(node.func.value) if from_the_batch(*(arg.value for arg in node.args)) else None
    if isinstance(node, cst.AugAssign):
        return field(node.target) if from_the_batch(node.value) else None
    if isinstance(node, cst.Assign) and from_the_batch(node.value):
        for target in node.targets:
            if isinstance(target.target, cst.Subscript) or m.matches(target.target, m.Attribute(attr=m.Name("data"))):
                found = field(target.target)
                if found is not None:
                    return found
    return None


def _in_place(method: cst.Attribute) -> bool:
    name = method.attr.value
    return name.endswith("_") and not name.startswith("_") and name not in ("requires_grad_", "zero_grad_")


def _names_read(value: cst.BaseExpression) -> Iterator[cst.Name]:
    """The names ``value`` reads, not the names after a dot (``self.decay`` reads ``self`` alone)."""
    stack: list[cst.CSTNode] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            yield node
        elif isinstance(node, cst.Attribute):
            stack.append(node.value)
        else:
            stack.extend(node.children)


def _plain_object_returned(index: Index, model: Model) -> cst.Call | None:
    """A ``return Output(...)`` of the model's forward that builds an object of a class of the program that is
    neither a dataclass nor a tuple or dict."""
    for cls in dict.fromkeys(index.constructed_classes(model.ref)):
        forward = index.method(cls, "forward", dispatch=True)
        if forward is None:
            continue
        for node in index.walk(forward.body):
            if not isinstance(node, cst.Return) or not isinstance(node.value, cst.Call):
                continue
            if index.scope_of(node) is not forward:
                continue
            for built in index.classes_built(node.value):
                if not _searchable(index, built):
                    return node.value
    return None


def _searchable(index: Index, cls: cst.ClassDef) -> bool:
    """Whether DDP finds tensors inside an object of ``cls``: a dataclass, a tuple or a dict (a
    ``NamedTuple``, an ``OrderedDict`` subclass)."""
    classes = list(index.ancestry(cls))
    decorated = any(
        index.qualified_names(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator)
        & {"dataclasses.dataclass"}
        for c in classes
        for d in c.decorators
    )
    fields = any(  # (a dataclass's fields are its annotated names; DDP looks at those alone)
        isinstance(small, cst.AnnAssign)
        for c in classes
        for line in c.body.body
        if isinstance(line, cst.SimpleStatementLine)
        for small in line.body
    )
    return (decorated and fields) or index.derives_from(cls, _CONTAINERS)


_CONTAINERS = frozenset(
    {"builtins.tuple", "builtins.dict", "builtins.list", "typing.NamedTuple", "collections.OrderedDict"}
)


def _moved_once_built(index: Index, cls: cst.ClassDef) -> bool:
    """Whether a module of the class is moved to a device where it is built (``Net(cfg).to(device)``) or
    later through the name that holds it (``net.cuda()``)."""
    for call in index.calls:
        if cls not in index.classes_built(call):
            continue
        if _a_move(index, call):
            return True
        holder = index.parent(call)
        target = single_target(holder) if isinstance(holder, cst.Assign) else None
        ref = index.ref_of(target, index.scope_of(call)) if target is not None else None
        scope = ref.scope if ref is not None else None
        if (
            ref is not None
            and isinstance(scope, cst.FunctionDef | cst.Module)
            and any(_a_move(index, read) for read in index.mentions(scope, ref))
        ):
            return True
    return False


def _a_move(index: Index, value: cst.CSTNode) -> bool:
    """``value.to(...)`` or ``value.cuda(...)``."""
    method = index.parent(value)
    return (
        isinstance(method, cst.Attribute)
        and method.value is value
        and method.attr.value in ("to", "cuda")
        and isinstance(call := index.parent(method), cst.Call)
        and call.func is method
    )


def _report_saved_holders(program: Program, models: tuple[Model, ...]) -> None:
    """``pickle.dump(tagger, f)`` (or ``torch.save``) of a whole object of the program's own class that keeps a
    wrapped model in a field (``self.model``): the file holds the DDP wrapper, which loads only where a process
    group exists (an evaluation script run with plain ``python`` fails on it)."""
    index = program.index
    held: dict[Scope, str] = {}  # a class whose field holds a wrapped model (built there or handed in): the field
    for model in models:
        for place in sorted(index.lineage(model.ref), key=lambda r: (r.path, index.order.get(r.scope, -1))):
            if place.path.startswith("self.") and isinstance(place.scope, cst.ClassDef):
                held.setdefault(place.scope, place.path)
    if not held:
        return
    wrapped = frozenset().union(*(index.lineage(model.ref) for model in models))  # saved as `.module`
    for call in index.calls:
        if not (call.args and index.is_call_to(call, torch_api.SAVE | torch_api.PICKLE_DUMPS)):
            continue
        value, scope = call.args[0].value, index.scope_of(call)
        classes: list[cst.ClassDef] = []
        if isinstance(value, cst.Name) and isinstance(scope, cst.FunctionDef) and value.value == index.self_name(scope):
            owner = index.method_class(scope)
            classes = [owner] if owner is not None else []
        elif isinstance(value, cst.Name) and (ref := index.ref_of(value, scope)) is not None and ref not in wrapped:
            classes = list(index.constructed_classes(ref))
        for cls in classes:
            method = next((s for s in cls.body.body if isinstance(s, cst.FunctionDef)), None)
            field = held.get(index.attribute_class(method)) if method is not None else None
            if field is not None:
                program.report(
                    call,
                    SAVED_WITH_ITS_WRAPPER,
                    f"`{index.module_of(call).code_for_node(value)}` is saved whole, with the DDP wrapper that its "
                    f"field `{field}` holds after the conversion: the file loads only where a process group exists; "
                    "save the model's `state_dict()` instead, or swap the module in for the save",
                )
                break


def _one_after_the_other(index: Index, first: cst.Call, second: cst.Call) -> bool:
    """``a.backward(retain_graph=True)`` and ``b.backward()`` as two statements of their own, one right after the
    other: nothing between them reads or changes the gradients, so they are the backward pass of ``a + b``."""
    statements = [index.statement_of(call) for call in (first, second)]
    block = index.parent(statements[0])
    if not (
        isinstance(block, cst.IndentedBlock | cst.Module)
        and index.parent(statements[1]) is block
        and all(
            isinstance(stmt, cst.SimpleStatementLine)
            and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr)
            and stmt.body[0].value is call
            for stmt, call in zip(statements, (first, second), strict=True)
        )
    ):
        return False
    body = list(block.body)
    return body.index(statements[1]) == body.index(statements[0]) + 1 and all(
        arg.keyword is not None and arg.keyword.value == "retain_graph" for arg in (*first.args, *second.args)
    )


def _on_other_sides(index: Index, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """Whether ``a`` and ``b`` sit on the two sides of one ``if`` (never both run in one pass)."""
    for ancestor in index.ancestors(a):
        if isinstance(ancestor, cst.If) and index.inside(b, ancestor):
            orelse = ancestor.orelse
            in_body = [index.inside(node, ancestor.body) for node in (a, b)]
            in_else = [orelse is not None and index.inside(node, orelse) for node in (a, b)]
            return (in_body[0] and in_else[1]) or (in_else[0] and in_body[1])
    return False


def _outermost(index: Index, models: tuple[Model, ...]) -> tuple[Model, ...]:
    """The trained models that no other trained model holds. ``d_net = Distiller(t_net, s_net)`` with an
    optimizer over ``s_net``'s parameters and ``d_net.connector``'s: the step runs ``d_net``, which runs
    ``s_net``; only ``d_net`` is wrapped (a second wrapper over ``s_net``'s parameters would wait for
    gradients its own forward never made). Beside such a model, a module it holds that no optimizer trains
    (the teacher) may get no gradient in a step: ``find_unused_parameters``."""
    built: dict[Model, list[tuple[cst.Call, list[cst.BaseExpression]]]] = {}
    for model in models:
        values = [v for _, v in index.values_assigned(model.ref)] + [v for _, v in index.unpacked_values(model.ref)]
        for named in [v for v in values if isinstance(v, cst.Name)]:  # ``return distiller, data`` of a helper
            held = index.ref_of(named, index.scope_of(named))
            values += [v for _, v in index.values_assigned(held)] if held is not None else []
        for value in values:
            if isinstance(value, cst.Call) and not index.is_call_to(value, DEEPCOPY) and index.classes_built(value):
                parts: list[cst.BaseExpression] = [
                    a.value for a in value.args if not a.star and isinstance(a.value, (cst.Name, cst.Attribute))
                ]
                built.setdefault(model, []).append((value, parts))

    def held_by(inner: Model, outer: Model) -> bool:
        return any(
            index.ref_of(part, index.scope_of(call)) in inner.lineage | {inner.ref}
            for call, parts in built.get(outer, ())
            for part in parts
        )

    trained = {place for model in models for place in model.lineage | {model.ref}}
    kept: list[Model] = []
    for model in models:
        if any(other is not model and held_by(model, other) for other in models):
            continue
        if model.unused is None and any(held_by(other, model) for other in models if other is not model):
            # it holds a trained model (a student) beside one that no optimizer trains (a teacher)
            idle = [
                part
                for call, parts in built.get(model, ())
                for part in parts
                if (ref := index.ref_of(part, index.scope_of(call))) is not None
                and ref not in trained
                and _a_module(index, ref)
            ]
            if idle:
                code = index.module_of(idle[0]).code_for_node(idle[0])
                model = replace(model, unused=f"it holds `{code}`, which no optimizer trains")
        kept.append(model)
    return tuple(kept)


def _a_module(index: Index, ref: Ref) -> bool:
    """Whether the value at ``ref`` is an instance of an nn.Module class of the program (also where
    ``teacher, student = Net(64), Net(16)`` binds it)."""
    classes = list(index.constructed_classes(ref))
    classes += [c for _, value in index.unpacked_values(ref) for c in index.classes_built(value)]
    return any(index.derives_from(c, torch_api.NN_MODULE) for c in classes)


def _data_parallel_tests(index: Index) -> tuple[cst.BaseExpression, ...]:
    """``nn.DataParallel`` as the class an ``isinstance`` test asks for (``if isinstance(model,
    nn.DataParallel): model = model.module``): the program's own unwrapping, which must see DDP too."""
    found: list[cst.BaseExpression] = []
    for call in index.calls:
        if len(call.args) != 2 or not index.is_call_to(call, frozenset({"builtins.isinstance"})):
            continue
        classes = call.args[1].value
        options = [e.value for e in classes.elements] if isinstance(classes, cst.Tuple) else [classes]
        found += [c for c in options if index.qualified_names(c) & torch_api.DATA_PARALLEL]
    return tuple(found)


class _Finder:
    """Each trained model and where it is wrapped, with the checks of what the script does to it after."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.index = program.index
        self.trained = TrainedModels(self.index)
        self.reads = WrapperReads(program, self.trained)
        self.freezing = Freezing(program, self.reads)
        self.redrawn = Redrawn(program, self.reads)
        self.forward = ForwardChecks(program, self.reads)
        self.outputs = OutputUse(program, self.reads)
        self._model_classes: dict[Ref, set[cst.ClassDef]] = {}
        self._claimed: set[cst.BaseExpression] = set()  # reads that already get ``.module``
        # ``a.backward(retain_graph=True)`` right before ``b.backward()``: one backward pass of their sum
        self.summed: list[tuple[cst.Call, cst.Call]] = []

    def models(self) -> Iterator[Model]:
        # Several models may be wrapped after the same statement (an encoder and a decoder both
        # prepared before one optimizer over both); the same model reached twice is wrapped once.
        seen: set[tuple[cst.CSTNode, str]] = set()
        for optimizer in self.trained.optimizers():
            function = enclosing_function(self.index, optimizer)
            if function is not None and self._only_imported(function):
                continue  # a helper only another script uses, re-exported by a package: it trains nothing here
            refs, untraced = self.trained.trained_refs(optimizer)
            if untraced is not None and not refs and self.trained.optimizes_inputs(optimizer):
                continue  # ``SGD([delta])`` over an adversarial perturbation: each rank's own, nothing to average
            if untraced is not None:
                code = self.index.module.code_for_node(untraced)
                text = code if len(code) <= 60 and "\n" not in code else code.splitlines()[0][:57] + "..."
                node, holder = untraced, None
                while (holder := self.index.ref_of(node, self.index.scope_of(untraced))) is None and isinstance(
                    node, (cst.Attribute, cst.Subscript)
                ):
                    node = node.value  # ``self.nets`` of ``self.nets[k]``
                if holder is not None and self.trained.holds_models(holder):
                    message = (
                        f"`{holder.path}` keeps its models in a dict or list, which is no module: ddpify cannot wrap "
                        "it in DistributedDataParallel; wrap each model it holds yourself, or keep them in an "
                        "nn.ModuleDict"
                    )
                else:
                    message = (
                        f"cannot tell which model `{text}` comes from: every parameter this optimizer trains must "
                        "come from a model's `.parameters()` or `.named_parameters()` so that "
                        "DistributedDataParallel averages its gradients"
                    )
                self.program.report(untraced, UNTRACEABLE_OPTIMIZER, message)
                continue
            for ref in refs:
                listed = self.trained.lists.get(ref)
                model = self._model(ref, optimizer) if listed is None else self._list_model(listed, optimizer)
                if model is not None and (model.insert_after, model.expression) not in seen:
                    seen.add((model.insert_after, model.expression))
                    classes = self._model_classes.get(model.ref) or self._model_classes.get(ref, set())
                    through_forward = self.forward.methods_on_gradient_path(model, classes)
                    routed = {cast(cst.Attribute, call.func).value for call in through_forward}
                    if self.forward.refuse_parts_run_directly(model, classes):
                        continue
                    if self.forward.refuse_step_inside_the_model(model, classes):
                        continue
                    if self.forward.refuse_run_by_a_closure(model):
                        continue
                    if self.forward.refuse_initialised_from_a_batch(model, classes):
                        continue
                    if self.forward.refuse_sparse_parameter(model, classes):
                        continue
                    if self._refuse_second_backward(model):
                        continue
                    entries = frozenset({"forward", *(cast(cst.Attribute, c.func).attr.value for c in through_forward)})
                    unused = (
                        self.forward.skipped_submodule(classes, entries)
                        or self.outputs.output_used_sometimes(model, classes)
                        or self.forward.input_gradient(classes, entries)
                    )
                    if unused is not None and self.forward.refuse_returned_parameter(model, classes, unused):
                        continue
                    if unused is not None and self._refuse_two_methods_one_backward(model, through_forward, unused):
                        continue
                    if unused is not None and (outside := self.forward.part_used_outside(classes, model)) is not None:
                        self.program.report(
                            model.insert_after,
                            UNUSED_AND_USED_OUTSIDE,
                            f"{unused}, so `{model.expression}` would need find_unused_parameters=True, but the "
                            f"training step also uses `{model.expression}.{outside}` outside its forward: DDP would "
                            "take its parameters for unused after each forward and raise when their gradients come",
                        )
                        continue
                    borrowed = self.outputs.forwards_for_another_model(model, classes)
                    unwrap = tuple(
                        read for read in (*model.unwrap, *borrowed) if read not in self._claimed and read not in routed
                    )
                    self._claimed.update(unwrap)
                    mixed = (
                        self.reads.reads_of(
                            model.ref, model.insert_after, self.reads.handed_plain(model.ref, model.insert_after)
                        )
                        if unwrap
                        else set()
                    )
                    yield replace(
                        model,
                        unwrap=unwrap,
                        unwrap_where_wrapped=tuple(r for r in unwrap if self._runs_before(r, model.insert_after)),
                        unwrap_if_wrapper=tuple(r for r in unwrap if r in mixed),
                        through_forward=through_forward,
                        lineage=frozenset(self.index.lineage(model.ref)),
                        unused=unused,
                        small_batch_norm=self.forward.small_batch_norm(model, classes),
                        wrapped_again=tuple(self.reads.wrapped_again(model.ref, model.insert_after))
                        if model.item is None
                        else (),
                        redrawn=self.redrawn.after_wrap(model.ref, model.insert_after) if model.item is None else (),
                        redrawn_seeded=self.redrawn.seeded_after_wrap(model.ref, model.insert_after)
                        if model.item is None
                        else (),
                        maybe_none=model.item is None
                        and model.data_parallel is None
                        and self._maybe_none(model.ref, model.insert_after),
                    )

    def _maybe_none(self, target: Ref, wrap: cst.BaseStatement) -> bool:
        """Whether ``target`` may still hold None where the wrap goes: ``fine = None`` and then
        ``if cfg.fine: fine = Net()``, an optional second model, with no assignment that always runs
        in between."""
        index = self.index
        last_always: cst.BaseExpression | None = None
        sometimes = False
        assigned = sorted(index.values_assigned(target), key=lambda a: index.order[a[0]])
        if isinstance(target.scope, cst.ClassDef):
            # a field set to None in ``__init__`` and built in another method only under a condition
            # (``self.aux = None``, then ``if args.aux: self.aux = Aux()`` in ``set_model``)
            init = index.method(target.scope, "__init__")
            last_always = next(
                (
                    value
                    for assign, value in reversed(assigned)
                    if init is not None
                    and index.scope_of(assign) is init
                    and not any(
                        isinstance(a, (cst.If, cst.For, cst.While, cst.Match))
                        for a in index.ancestors(assign)
                        if index.inside(a, init.body)
                    )
                ),
                None,
            )
        for assign, value in assigned:
            stmt = index.statement_of(assign)
            if index.scope_of(stmt) is not index.scope_of(wrap) or (index.after(stmt, wrap) and stmt is not wrap):
                continue
            block = index.parent(stmt)
            if block is not None and (index.inside(wrap, block) or stmt is wrap):
                last_always, sometimes = value, False
            else:
                sometimes = True
        return sometimes and last_always is not None and m.matches(last_always, m.Name("None"))

    def _runs_before(self, read: cst.BaseExpression, wrap: cst.BaseStatement, depth: int = 0) -> bool:
        """Whether ``read`` sits in a function that is also called before ``wrap`` runs: by a call in the
        wrap's own function that comes first, or through a function called there."""
        index = self.index
        function = index.scope_of(read)
        if not isinstance(function, cst.FunctionDef) or function is index.scope_of(wrap) or depth > 3:
            return False
        for call in index.callers(function):
            if index.scope_of(call) is index.scope_of(wrap):
                if not index.after(call, wrap):
                    return True
            elif self._runs_before(call, wrap, depth + 1):
                return True
        return False

    def _model(self, ref: Ref, optimizer: cst.Call) -> Model | None:
        index = self.index
        if isinstance(ref.scope, cst.FunctionDef) and ref.path == index.self_name(ref.scope):
            cls = index.method_class(ref.scope)
            if cls is not None and index.derives_from(cls, torch_api.LIGHTNING_MODULES):
                return None  # ``configure_optimizers``: Lightning's trainer runs its steps (DDP018 where it counts)
            self.program.report(
                optimizer,
                PARTS_RUN_DIRECTLY,
                f"`{cls.name.value if cls is not None else 'the class'}` builds the optimizer over its own parameters "
                f"(`{ref.path}.parameters()`) and trains itself in its own methods: a wrapper made inside the class "
                "cannot take `self`'s place, and a step run from inside the module never goes through the wrapper; "
                "build the optimizer and run the step where the model is built, then convert",
            )
            return None
        lineage = own_lineage(self.index, ref)
        moves, creations, wraps = self._candidates(lineage)
        for stmt in [c[0] for c in creations] + [move[0] for move in moves]:
            made = self._classes_made_by(statement_value(stmt), index.scope_of(stmt))
            subclass = next((c for c in made if index.derives_from(c, torch_api.DATA_PARALLEL)), None)
            if subclass is not None:
                self.program.report(
                    stmt,
                    OWN_DATA_PARALLEL,
                    f"`{subclass.name.value}` is the program's own subclass of nn.DataParallel: what it adds would be "
                    "lost under DistributedDataParallel, and the program may rely on it (its scatter, its patches)",
                )
                return None
        # A builder called for training and by a function that only samples (``net = self.build()`` in both
        # ``train()`` and ``sample()``): the wrap goes where this optimizer's model comes from or goes, or where
        # a copy of it reaches code that trains (``self.model = model.to(gpu)`` of a Trainer), never into a
        # branch that only runs the model
        # A place the model only goes on to is on the path where the training reads it: not a helper's parameter
        # that it only describes or saves (``def describe(net): net = net.module ...``), whose rebinding the
        # caller never sees
        on_path = upstream(index, ref)
        targets = [move[1] for move in moves] + [c[1] for c in creations] + [w[1] for w in wraps]
        trained = {t for t in targets if t in on_path or self._reaches_training(t)}
        if trained:
            moves = [c for c in moves if c[1] in trained]
            creations = [c for c in creations if c[1] in trained]
            wraps = [c for c in wraps if c[1] in trained]
        # Where the model is trained, or after it has been (``model = train_model(model, ...)``,
        # ``model = model.cpu()`` for export), it is not being built: the wrap must come before.
        building = [c[0] for c in moves] + [c[0] for c in creations]
        moves = [c for c in moves if self._before_training(c[0], lineage, building)]
        creations = [c for c in creations if self._before_training(c[0], lineage, building)]
        # A move inside a loop that trains, of a model built before that loop (a discriminator moved to the CPU
        # for rollouts and back each iteration): it runs again after each step; the model was ready before
        kept = [c for c in moves if not self._moved_between_steps(c[0], creations)]
        if kept or creations:
            moves = kept
        # A move inside a loop (``model.to(device).train()`` after a checkpoint on the CPU) is not
        # where the model becomes ready; only the least nested places count.
        moves, creations, wraps = self._least_nested(moves), self._least_nested(creations), self._least_nested(wraps)
        # ``if args.parallel: reader.parallelize()``, which wraps in DataParallel: a run may skip that wrap, and
        # then trains unwrapped. DDP goes where the model is ready on every run; the DataParallel line goes.
        running = [w for w in wraps if self.program.runs_whenever_training_does(w[0])]
        if len(running) < len(wraps) and (moves or creations):
            wraps = running
        # ``dp_model = nn.DataParallel(model)`` run only to evaluate, while training runs the model through an
        # object that holds it (``LossWrapper(model)``, in a DataParallel of its own): DDP must be where the
        # training forward passes, so it wraps the model where it is ready, before the holder takes it
        places = {m[1] for m in moves} | {c[1] for c in creations} | {w[1] for w in wraps}
        evaluating = {t for t in places if self._only_evaluates(t)}
        kept_moves = [c for c in moves if c[1] not in evaluating]
        kept_creations = [c for c in creations if c[1] not in evaluating]
        if kept_moves or kept_creations:  # (built in a factory: ``dp_model = parallel(model)``, a creation)
            moves, creations = kept_moves, kept_creations
            wraps = [w for w in wraps if w[1] not in evaluating]
        # ``build_model()`` overridden by a subclass, each building its model and its optimizer over it:
        # each optimizer's model is the one its own function builds
        own = index.scope_of(optimizer)
        scopes = {index.scope_of(stmt) for stmt in [*(c[0] for c in moves), *(c[0] for c in creations)]}
        if (
            isinstance(own, cst.FunctionDef)
            and own in scopes
            and index.method_class(own) is not None
            and any(
                isinstance(other, cst.FunctionDef)
                and other.name.value == own.name.value
                and index.method_class(other) not in (None, index.method_class(own))
                for other in scopes
            )
        ):
            moves = [c for c in moves if index.scope_of(c[0]) is own]
            creations = [c for c in creations if index.scope_of(c[0]) is own]
            wraps = [c for c in wraps if index.scope_of(c[0]) is own]
        built = [c[:2] for c in moves] + [c[:2] for c in creations] + [c[:2] for c in wraps]
        classes = {c for stmt, place in built for c in self._built_classes(stmt, place)}
        self._model_classes[ref] = classes
        depth = depths(self.index, lineage)
        dropped: dict[str, Any] = {}
        if wraps:
            stmt, target = max(wraps, key=lambda c: (depth.get(c[1], 0), index.order[c[0]]))
            moved_after = [c for c in moves if depth.get(c[1], 0) > depth.get(target, 0)]
            if not (creations and (self._moved_as_it_returns(stmt, target) or moved_after)):
                return self._data_parallel_model(stmt, target, moves, optimizer)
            # ``model = nn.DataParallel(model)`` then ``return model.to(device)``: no statement in the builder
            # holds the moved model, so the DataParallel line goes and the wrap goes where the model arrives
            dropped = {"data_parallel_removed": stmt, "data_parallel_if": self._data_parallel_guard(stmt, target)}
        if moves:
            stmt, target, cuda = max(moves, key=lambda c: (depth.get(c[1], 0), index.order[c[0]]))
            placed = True
            # where the optimizer's model is (``self.net = self.set_device(build(opt))``), not where a helper that
            # moves anything hands back something else (``self.batch = self.set_device(batch)``)
            arrivals = [c for c in creations if c[1] in on_path] or creations
            received = max(arrivals, key=lambda c: (depth.get(c[1], 0), index.order[c[0]]), default=None)
            back = self._returned_by(stmt, creations)
            if back is not None:
                # ``model, epoch = load_checkpoint(model, path)`` under ``if args.resume:``, the move inside it:
                # the model comes back where it was, and that call may not run; the wrap goes after it
                (stmt, target), cuda = back, False
            elif (
                received is not None
                and depth.get(received[1], 0) > depth.get(target, 0)
                and received[1] not in upstream(index, target)
            ):
                # ``model = build_model()`` after the builder moved it: the wrap goes where the model
                # arrives, not into the builder (whose last word is ``return model``). Not where it was
                # built before it went into a trainer's method that moves it (``self.ae = AE()``, then
                # ``self.ae = self.trainer.fit(self.ae)``): that is upstream of the move.
                (stmt, target), cuda = received, False
        elif creations:
            stmt, target = max(creations, key=lambda c: (depth.get(c[1], 0), index.order[c[0]]))
            cuda, placed = False, False
        elif (handed := self._handed_unplaced(ref, optimizer)) is not None:
            (stmt, target), cuda, placed = handed, False, False
        else:
            self.program.report(
                optimizer,
                MODEL_NOT_PLACED,
                "cannot find where the model this optimizer trains is built or put on its device",
            )
            return None
        anchor = self._climb_conditionals(stmt, target)
        guarded = self._called_only_under_a_test(anchor, target)
        if guarded is not None:
            anchor, cuda = guarded, False
        insert_after = self._after_setup(anchor, target)
        realiased = self.reads.realiased(target, insert_after)
        stored = self.reads.stored_before(target, anchor, insert_after, {alias for alias, _ in realiased})
        inside = self._inside_the_builder(stmt, moves, creations, depth) if stored is not None and stored[2] else None
        if inside is not None:
            # ``model, trainer = build()``: the builder hands its model on before it returns it, so the wrap
            # goes into the builder, before the hand-off
            stmt, target, anchor, insert_after, realiased = inside
            cuda, stored = False, None
        if stored is not None:
            self.program.report(stored[0], STORED_BEFORE_WRAP, stored[1])
        on_cuda = cuda and anchor is stmt
        expression = target.path
        if expression.startswith("self."):
            expression = f"{index.self_name(index.scope_of(stmt))}{expression[4:]}"
        unwrap = tuple(self.reads.wrapper_reads(target, insert_after))
        self.forward.warn_moves_in_training(target, insert_after)
        rewraps = self.freezing.unfrozen_after(target, insert_after)
        unwrap = tuple(dict.fromkeys(unwrap + self.reads.stored_after(target, insert_after)))
        frozen = self.freezing.frozen_when_wrapped(target, insert_after)
        if frozen is False and self.freezing.may_hold_no_parameter(target, insert_after):
            frozen = None
        if frozen is None:  # frozen unless a run-time condition unfroze it: wrap it at run time
            return Model(
                target,
                expression,
                insert_after,
                on_cuda,
                placed,
                unwrap,
                optimizer,
                rewraps=rewraps,
                maybe_frozen=True,
                realiased=realiased,
                **dropped,
            )
        if frozen:
            if not rewraps:
                return None  # nothing to synchronise, and DDP refuses a module without trainable parameters
            self.program.report(
                rewraps[0],
                UNFROZEN_AFTER_WRAP,
                f"`{expression}` has no trainable parameter where it would be wrapped in DistributedDataParallel "
                "(which refuses such a module), and is unfrozen here: wrap it once it has trainable parameters",
            )
        return Model(
            target,
            expression,
            insert_after,
            on_cuda,
            placed,
            unwrap,
            optimizer,
            rewraps=rewraps,
            realiased=realiased,
            **dropped,
        )

    def _refuse_two_methods_one_backward(self, model: Model, routed: tuple[cst.Call, ...], unused: str) -> bool:
        """``model(x)`` and ``model.lm_forward(x)`` (run as the wrapper's forward) in one step before one
        backward pass, where some parameters get no gradient (``find_unused_parameters=True``): DDP finds the
        unused parameters from the last forward's output alone, marks the other method's parameters ready,
        then gets their gradients too, and raises (DDP321)."""
        index = self.index
        for call in routed:
            loop = next(index.enclosing_loops(call), None)
            block: cst.CSTNode = loop if loop is not None else index.scope_of(call)
            scope = index.scope_of(call)
            direct = next(
                (
                    other
                    for other in index.walk(block)
                    if isinstance(other, cst.Call)
                    and isinstance(other.func, cst.Name)
                    and index.scope_of(other) is scope
                    and index.ref_of(other.func, scope) in self.index.lineage(model.ref)
                ),
                None,
            )
            if direct is None:
                continue
            method = cast(cst.Attribute, call.func).attr.value
            self.program.report(
                call,
                TWO_METHODS_ONE_BACKWARD,
                f"`{model.expression}` runs both its forward (line {index.position(direct)[0]}) and `{method}()` "
                f"through DistributedDataParallel before one backward pass, while {unused}: DDP finds the unused "
                "parameters from the last forward's output alone and raises when the other method's parameters get "
                "their gradients too; compute both losses in one forward (a method that returns both), then convert",
            )
            return True
        return False

    def _handed_unplaced(self, ref: Ref, optimizer: cst.Call) -> tuple[cst.SimpleStatementLine, Ref] | None:
        """The statement that builds the optimizer, where the model it trains came in as a parameter that
        every call builds in its argument (``fit(Net(), dataset)``) and that nothing moves: the model is
        ready as it arrives, and is wrapped once its optimizer holds it, before any step or forward pass; with
        that parameter. None where that statement may not run (under an ``if`` or in a loop) or the model runs
        before it."""
        index = self.index
        places = upstream(index, ref)
        entries = [
            place
            for place in places
            if (passed := passed_values(index, place)) and all(isinstance(v, cst.Call) for v in passed)
        ]
        if len(entries) != 1:
            return None
        entry = entries[0]
        function = cast(cst.FunctionDef, entry.scope)
        stmt = self._statement_reaching(function, optimizer)
        target = entry
        # a Trainer's ``__init__`` keeps it (``self.model = model``), a method trains it: the field is wrapped,
        # after both the optimizer and the keeping (the methods read the field, never the parameter)
        kept = [
            (index.statement_of(node), place)
            for node in index.walk(function.body)
            if isinstance(node, cst.Assign)
            and index.scope_of(node) is function
            and m.matches(node.value, m.Name(entry.path))
            and (target_node := single_target(node)) is not None
            and (place := index.ref_of(target_node, function)) is not None
            and place != entry
        ]
        if stmt is None or kept:
            if len(kept) != 1:
                return None
            if stmt is None or index.order[kept[0][0]] > index.order[stmt]:
                stmt = kept[0][0]
            target = kept[0][1]
        if not isinstance(stmt, cst.SimpleStatementLine) or any(
            isinstance(node, (cst.If, cst.For, cst.While, cst.Match))
            for node in index.ancestors(stmt)
            if index.inside(node, function.body)
        ):
            return None
        if any(
            isinstance(node, cst.Call)
            and isinstance(node.func, (cst.Name, cst.Attribute))
            and index.ref_of(node.func, function) in places
            and index.order[node] < index.order[stmt]
            for node in index.walk(function.body)
        ):  # ``model(warmup)`` before the optimizer: the wrap would come too late
            return None
        return stmt, target

    def _statement_reaching(
        self, function: cst.FunctionDef, node: cst.CSTNode, depth: int = 0
    ) -> cst.BaseStatement | None:
        """The one statement of ``function`` that holds ``node`` or the one call that runs the function
        holding it (``opt = make_optimizer(model)``); None where there are several or none."""
        index = self.index
        scope = index.scope_of(node)
        if scope is function:
            return index.statement_of(node)
        if not isinstance(scope, cst.FunctionDef) or depth > 3:
            return None
        found = {self._statement_reaching(function, call, depth + 1) for call in index.callers(scope)}
        return found.pop() if len(found) == 1 else None

    def _returned_by(
        self, move: cst.SimpleStatementLine, creations: list[tuple[cst.SimpleStatementLine, Ref]]
    ) -> tuple[cst.SimpleStatementLine, Ref] | None:
        """The last creation that receives the model from a call of the function ``move`` is in, when that
        creation assigns the very place the model was handed to the call from (the model goes in and comes
        back: a checkpoint loader, a ``prepare(model)``)."""
        index = self.index
        function = index.scope_of(move)
        if not isinstance(function, cst.FunctionDef):
            return None
        found = None
        for stmt, target in creations:
            value = statement_value(stmt)
            scope = index.scope_of(stmt)
            if (
                isinstance(value, cst.Call)
                and (callee := index.runs(value, scope)) is not None
                and callee[0] is function
                and any(index.carried_ref(arg.value, scope) == target for arg in value.args)
            ):
                found = (stmt, target)
        return found

    def _only_imported(self, function: cst.FunctionDef) -> bool:
        """Whether ``function``, a plain function of a module the entry imports, is never called and its name
        appears nowhere in the program but in import statements (a package's ``__init__`` re-exporting it)."""
        index = self.index
        module = index.module_of(function)
        if (
            module is index.module
            or function.decorators
            or index.method_class(function) is not None
            or index.scope_of(function) is not module
            or function in self.program.called()
        ):
            return False
        name = function.name.value
        return not any(
            node is not function.name
            and not any(isinstance(a, cst.Import | cst.ImportFrom) for a in index.ancestors(node))
            for node in index.nodes_of(cst.Name)
            if cast(cst.Name, node).value == name
        )

    def _only_evaluates(self, place: Ref) -> bool:
        """Whether the model at ``place`` is run (called, there or where it goes), and only where no gradient
        can come from it (under ``torch.no_grad()``)."""
        index = self.index
        runs = [
            parent
            for reached in index.downstream(place)
            for scope in index.scopes_reading(reached)
            for read in index.mentions(scope, reached)
            if isinstance(parent := index.parent(read), cst.Call) and parent.func is read
        ]
        return bool(runs) and all(without_grad(index, call) for call in runs)

    def _reaches_training(self, place: Ref) -> bool:
        """Whether the value at ``place`` is read, there or where it goes, by a function that trains."""
        index = self.index
        return any(
            self._read_where_it_trains(read)
            for reached in index.downstream(place)
            for scope in index.scopes_reading(reached)
            for read in index.mentions(scope, reached)
        )

    def _read_where_it_trains(self, read: cst.CSTNode) -> bool:
        """Whether ``read`` is in a function that trains (a global read in ``train()`` too), or in a training
        loop of the module's own code."""
        index = self.index
        function = enclosing_function(index, read)
        if function is not None:
            return index.trains(function)
        return index.in_a_training_loop(read)

    def _inside_the_builder(
        self,
        chosen: cst.SimpleStatementLine,
        moves: list[_Move],
        creations: list[tuple[cst.SimpleStatementLine, Ref]],
        depth: dict[Ref, int],
    ) -> tuple[cst.SimpleStatementLine, Ref, cst.BaseStatement, cst.BaseStatement, tuple[tuple[str, str], ...]] | None:
        """Where the model is ready inside the function that builds it, when that function is called once, the
        model is moved nowhere else, and nothing keeps it there before that point; None otherwise."""
        index = self.index
        elsewhere = [
            (s, t)
            for s, t in creations
            if s is not chosen
            and isinstance(t.scope, cst.FunctionDef)
            and t.scope is not index.scope_of(chosen)
            and len(index.callers(t.scope)) == 1
        ]
        for stmt, target in sorted(elsewhere, key=lambda c: (depth.get(c[1], 0), index.order[c[0]]), reverse=True):
            if any(index.scope_of(move) is not target.scope or index.after(move, stmt) for move, _, _ in moves):
                continue
            anchor = self._climb_conditionals(stmt, target)
            insert_after = self._after_setup(anchor, target)
            realiased = self.reads.realiased(target, insert_after)
            if self.reads.stored_before(target, anchor, insert_after, {alias for alias, _ in realiased}) is None:
                return stmt, target, anchor, insert_after, realiased
        return None

    def _candidates(
        self, lineage: set[Ref]
    ) -> tuple[list[_Move], list[tuple[cst.SimpleStatementLine, Ref]], list[tuple[cst.SimpleStatementLine, Ref]]]:
        """The statements that may make the model ready: moves to a device, creations (built, or
        received from a call), and ``nn.DataParallel`` wraps."""
        index = self.index
        moves: list[_Move] = []
        creations: list[tuple[cst.SimpleStatementLine, Ref]] = []
        wraps: list[tuple[cst.SimpleStatementLine, Ref]] = []
        for stmt in index.statements:
            if len(stmt.body) != 1:
                continue
            small = stmt.body[0]
            scope = index.scope_of(stmt)
            if (bound := single_target(small)) is not None:
                value = cast(cst.Assign | cst.AnnAssign, small).value
                assert value is not None
                target = index.ref_of(bound, scope)
                if target in lineage:
                    move = _device_move(value)
                    if index.is_call_to(value, torch_api.DATA_PARALLEL):
                        wraps.append((stmt, target))
                    elif move is not None:
                        moves.append((stmt, target, move))
                    elif index.carried_ref(value, scope) is None or self._built_by_every_caller(value, scope):
                        creations.append((stmt, target))
                elif (
                    isinstance(small, cst.Assign)
                    and isinstance(value, cst.Call)
                    and isinstance(small.targets[0].target, (cst.Tuple, cst.List))
                ):
                    # ``model, criterion = build(...)``: the model arrives with other values
                    for element in small.targets[0].target.elements:
                        part = index.ref_of(element.value, scope)
                        if part in lineage:
                            creations.append((stmt, part))
                elif (
                    isinstance(small, cst.Assign)
                    and isinstance(value, cst.Tuple)
                    and isinstance(small.targets[0].target, (cst.Tuple, cst.List))
                    and len(small.targets[0].target.elements) == len(value.elements)
                ):
                    # ``teacher, student = Net(64), Net(16)``: each built in its place
                    for element, item in zip(small.targets[0].target.elements, value.elements, strict=True):
                        part = index.ref_of(element.value, scope)
                        if (
                            part in lineage
                            and isinstance(item, cst.Element)
                            and index.carried_ref(item.value, scope) is None
                        ):
                            creations.append((stmt, part))
            elif isinstance(small, cst.Expr) and (move := _device_move(small.value)) is not None:
                target = index.carried_ref(small.value, scope)
                if target in lineage:
                    moves.append((stmt, target, move))
            elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                # ``to_device(device, policy, critic)``: a helper of the program that moves the models it is handed
                for moved in self._moved_by_a_helper(small.value, scope):
                    target = index.ref_of(moved, scope)
                    if target in lineage:
                        moves.append((stmt, target, False))
        return moves, creations, wraps

    def _moved_by_a_helper(self, call: cst.Call, scope: Scope) -> list[cst.BaseExpression]:
        """The arguments of ``call`` that the program's function it calls moves to a device: a parameter moved
        in a statement of its own (``net.to(device)``), or each item of ``*modules`` moved in a loop over it."""
        callee = self.index.resolve_callee(call, scope)
        if callee is None or any(a.keyword is not None or a.star for a in call.args):
            return []
        function = callee[0]
        named = parameter_names(function)[callee[1] :]  # (a method's ``self`` is not among the arguments)
        star = function.params.star_arg
        rest = star.name.value if isinstance(star, cst.Param) else None
        moved: set[str] = set()
        for node in self.index.walk(function.body):
            if not (isinstance(node, cst.Expr) and _device_move(node.value) is not None):
                continue
            receiver = node.value
            while isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute):
                receiver = receiver.func.value
            if not isinstance(receiver, cst.Name):
                continue
            loop = next(self.index.enclosing_loops(node), None)
            if (
                rest is not None
                and isinstance(loop, cst.For)
                and m.matches(loop.target, m.Name(receiver.value))
                and m.matches(loop.iter, m.Name(rest))
            ):
                moved.add("*")
            elif receiver.value in named:
                moved.add(receiver.value)
        found = [
            arg.value
            for position, arg in enumerate(call.args)
            if (position < len(named) and named[position] in moved) or (position >= len(named) and "*" in moved)
        ]
        return [value for value in found if isinstance(value, (cst.Name, cst.Attribute))]

    def _built_by_every_caller(self, value: cst.BaseExpression, scope: Scope) -> bool:
        """``self.model = model`` where ``model`` is a parameter that every call builds in place
        (``Learner(nn.Sequential(...))``): the model is ready here, where it arrives."""
        index = self.index
        ref = index.ref_of(value, scope) if isinstance(value, cst.Name) else None
        passed = passed_values(index, ref) if ref is not None else None
        return bool(passed) and all(
            isinstance(v, cst.Call)
            and index.carried_ref(v, index.scope_of(v)) is None
            and index.runs(v, index.scope_of(v)) is None
            for v in passed or ()
        )

    def _list_model(self, listed: model_collections.ModelList, optimizer: cst.Call) -> Model:
        """Every model of a list, wrapped once the list is ready: ``nets = [DDP(net) for net in nets]``."""
        index = self.index
        anchor = self._climb_conditionals(listed.built)
        insert_after = self._after_setup(anchor, listed.ref)
        scope = index.scope_of(listed.built)
        item = listed.item
        built = item
        if isinstance(item, cst.Name):  # nets.append(net): how ``net`` was built in the loop
            assigned = [value for _, value in index.values_assigned(index.ref_of(item, scope) or listed.ref)]
            built = assigned[-1] if assigned else item
        cls = built
        while isinstance(cls, cst.Call) and isinstance(cls.func, cst.Attribute):
            cls = cls.func.value
        if isinstance(cls, cst.Call) and (own := index.local_class(cls.func)) is not None:
            self._model_classes[listed.ref] = {own}
        unwrap = tuple(
            read
            for read in model_collections.item_reads(index, index.downstream(listed.ref), insert_after)
            if self.reads.needs_module(read)
        )
        realiased = self.reads.realiased(listed.ref, insert_after)
        again = {alias for alias, _ in realiased}
        self.reads.refuse_stored_before(listed.ref, anchor, insert_after, again)
        for flow in index.flows_from(listed.ref):  # ensemble = nets: the list of the unwrapped models
            if not index.after(flow.stmt, insert_after) and flow.dst.path not in again:
                self.program.report(
                    flow.stmt,
                    STORED_BEFORE_WRAP,
                    f"`{flow.dst.path}` keeps the list `{listed.ref.path}` before its models can be wrapped in "
                    f"DistributedDataParallel (after line {index.position(insert_after)[0]}): it would still hold "
                    "the plain models; take the list after the wrap",
                )
                break
        on_cuda = _device_move(built) is True and anchor is listed.built
        expression = index.spelled(listed.ref, scope)
        return Model(
            listed.ref,
            expression,
            insert_after,
            on_cuda,
            True,
            unwrap,
            optimizer,
            item=listed.name,
            realiased=realiased,
        )

    def _moved_between_steps(
        self, stmt: cst.SimpleStatementLine, creations: list[tuple[cst.SimpleStatementLine, Ref]]
    ) -> bool:
        """Whether a loop around ``stmt`` trains and builds none of the model's values itself."""
        index = self.index
        return any(
            index.trains(loop.body) and not any(index.inside(made, loop) for made, _ in creations)
            for loop in index.enclosing_loops(stmt)
        )

    def _least_nested(self, candidates: list[_Candidate]) -> list[_Candidate]:
        """The candidates (statement first) inside the fewest loops."""
        depth = {id(c): len(list(self.index.enclosing_loops(c[0]))) for c in candidates}
        least = min(depth.values(), default=0)
        return [c for c in candidates if depth[id(c)] == least]

    def _built_classes(self, stmt: cst.SimpleStatementLine, place: Ref | None = None) -> list[cst.ClassDef]:
        """The script's own classes a statement builds the model from: ``Net`` in ``model = Net().to(device)``,
        ``Gen`` for ``generator`` in ``generator, critic = Gen(), Critic()``."""
        value, scope = statement_value(stmt), self.index.scope_of(stmt)
        small = stmt.body[0]
        if place is not None and isinstance(value, cst.Tuple) and isinstance(small, cst.Assign):
            target = small.targets[0].target
            if isinstance(target, cst.Tuple) and len(target.elements) == len(value.elements):
                for held, made in zip(target.elements, value.elements, strict=True):
                    if self.index.ref_of(held.value, scope) == place:
                        return self._classes_made_by(made.value, scope)
        return self._classes_made_by(value, scope)

    def _classes_made_by(self, value: cst.BaseExpression | None, scope: Scope, depth: int = 0) -> list[cst.ClassDef]:
        """``Net(...)``, ``Net(...).to(device)``, ``MODELS[name](...)`` (every class the registry holds), or a
        builder of the program's own that returns one: ``get_diffusion(args).to(device)`` where
        ``get_diffusion`` ends with ``return GaussianDiffusion(...)``."""
        index = self.index
        while (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and index.local_class(value.func) is None
            and (depth >= 3 or index.resolve_callee(value, scope) is None)
        ):
            value = value.func.value  # ``.to(device)``, ``.cuda()``
        if not isinstance(value, cst.Call):
            return []
        own = index.local_class(value.func)
        if own is not None:
            return [own]
        if isinstance(value.func, cst.Subscript):
            return index.registry_classes(value.func)
        callee = index.resolve_callee(value, scope) if depth < 3 else None
        if callee is None or callee[0].name.value == "__init__":
            return []
        function = callee[0]
        made: list[cst.ClassDef] = []
        for value in index.returned_values(function):
            ref = index.carried_ref(value, function)
            # ``model = Net(...)`` ... ``return model``, or one class in each branch (``if cfg.name == "a":``)
            values = [value] if ref is None else [value for _, value in index.values_assigned(ref)]
            for each in values:
                made += [c for c in self._classes_made_by(each, function, depth + 1) if c not in made]
        return made

    def _data_parallel_model(
        self, stmt: cst.SimpleStatementLine, target: Ref, moves: list[_Move], optimizer: cst.Call
    ) -> Model:
        """``model = nn.DataParallel(model)`` is where the model is ready: DDP takes its place."""
        index = self.index
        data_parallel_if = self._data_parallel_guard(stmt, target)
        on_cuda = any(cuda and self._climb_conditionals(s) is s for s, _, cuda in moves)
        expression = self.index.spelled(target, index.scope_of(stmt))
        placed = data_parallel_if or stmt
        outer = self._climb_conditionals(placed, target)
        # (source order says "after" only within a function: a move in the builder ran before this line)
        later = [c for c in moves if index.scope_of(c[0]) is index.scope_of(outer) and index.after(c[0], outer)]
        # ``model.module.head = nn.Linear(...)`` after it: DDP must be built over the new part's parameters
        later += [(swap, target, False) for swap in self._parts_replaced_after(outer, target)]
        if later:
            # ``model = nn.DataParallel(model)`` then ``model.cuda()``: DDP needs the module on its device
            # first, so the DataParallel line goes and the wrap follows the last move.
            move, _, cuda = max(later, key=lambda c: index.order[c[0]])
            anchor = self._climb_conditionals(move, target)
            insert_after = self._after_setup(anchor, target)
            unwrap = tuple(self.reads.wrapper_reads(target, insert_after))
            return Model(
                target,
                expression,
                insert_after,
                cuda and anchor is move,
                True,
                unwrap,
                optimizer,
                data_parallel_if=data_parallel_if,
                data_parallel_removed=stmt,
                realiased=self.reads.realiased(target, insert_after),
            )
        if outer is placed:
            unwrap = tuple(self.reads.wrapper_reads(target, stmt))
            call = cast(cst.Call, statement_value(stmt))
            return Model(target, expression, stmt, on_cuda, True, unwrap, optimizer, call, data_parallel_if)
        # ``if use_cuda: ... model = nn.DataParallel(model)``: DDP must wrap on every path, so the
        # DataParallel line goes and the wrap follows the whole ``if``.
        insert_after = self._after_setup(outer, target)
        unwrap = tuple(self.reads.wrapper_reads(target, insert_after))
        return Model(
            target,
            expression,
            insert_after,
            False,
            True,
            unwrap,
            optimizer,
            data_parallel_if=data_parallel_if,
            data_parallel_removed=stmt,
            realiased=self.reads.realiased(target, insert_after),
        )

    def _parts_replaced_after(self, wrap: cst.BaseStatement, target: Ref) -> list[cst.SimpleStatementLine]:
        """``model.module.fc = nn.Linear(...)`` (or ``model.module[2] = ...``) after the DataParallel line ``wrap``,
        in its function: a part of the module inside the wrapper replaced by a new one."""
        index = self.index
        scope = index.scope_of(wrap)
        found = []
        for stmt in index.statements:
            small = stmt.body[0] if len(stmt.body) == 1 else None
            if not isinstance(small, cst.Assign) or index.scope_of(stmt) is not scope or not index.after(stmt, wrap):
                continue
            for assigned in small.targets:
                node: cst.BaseExpression = assigned.target
                path: list[str] = []
                while isinstance(node, (cst.Attribute, cst.Subscript)):  # ``model.module[2] = ...`` too
                    path.insert(0, node.attr.value if isinstance(node, cst.Attribute) else "[]")
                    node = node.value
                if (
                    len(path) >= 2
                    and path[0] == "module"
                    and isinstance(node, cst.Name)
                    and index.ref_of(node, scope) == target
                    and isinstance(small.value, cst.Call)
                ):
                    found.append(stmt)
        return found

    def _data_parallel_guard(self, stmt: cst.SimpleStatementLine, target: Ref) -> cst.If | None:
        """``if torch.cuda.device_count() > 1:`` (or ``is_available()``, or ``args.n_gpu > 1`` where ``args.n_gpu``
        holds the count) around a DataParallel line, alone."""
        index = self.index
        condition = index.parent(index.parent(stmt))
        if (
            self._climb_conditionals(stmt, target) is not stmt
            and isinstance(condition, cst.If)
            and condition.orelse is None
            and any(
                m.matches(n, m.Name("device_count") | m.Name("is_available"))
                or (isinstance(n, cst.Name | cst.Attribute) and gpu_count(index, n))
                for n in index.walk(condition.test)
            )
        ):
            return condition
        return None

    def _called_only_under_a_test(self, anchor: cst.BaseStatement, target: Ref) -> cst.BaseStatement | None:
        """The ``if`` around the one call of the method whose body ends where the wrap would go: ``if use_cuda:
        self.cuda()``, with the move in the agent's own ``cuda()``. The wrap goes after that ``if``, so that it
        runs on the CPU too; None where the call runs on every path (or is not one statement of its own)."""
        index = self.index
        function = index.scope_of(anchor)
        if (
            not isinstance(function, cst.FunctionDef)
            or index.parent(anchor) is not function.body
            or not target.path.startswith("self.")
            or index.method_class(function) is None
        ):
            return None
        callers = index.callers(function)
        if len(callers) != 1:
            return None
        caller = index.scope_of(callers[0])
        if not (
            isinstance(caller, cst.FunctionDef)
            and index.method_class(caller) is index.method_class(function)
            and m.matches(callers[0].func, m.Attribute(value=m.Name(index.self_name(caller) or "")))
        ):
            return None  # the field is ``self``'s in the caller too only where it calls the method on itself
        statement = index.statement_of(callers[0])
        if not (
            isinstance(statement, cst.SimpleStatementLine)
            and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)
            and statement.body[0].value is callers[0]
        ):
            return None
        climbed = self._climb_conditionals(statement, target)
        return climbed if climbed is not statement else None

    def _moved_as_it_returns(self, stmt: cst.SimpleStatementLine, target: Ref) -> bool:
        """Whether the function of ``stmt`` returns the model at ``target`` moved, in the return statement itself
        (``return model.to(device)``), after ``stmt``."""
        index = self.index
        function = index.scope_of(stmt)
        if not isinstance(function, cst.FunctionDef):
            return False
        return any(
            _device_move(value) is not None
            and index.carried_ref(value, function) == target
            and index.after(value, stmt)
            for value in index.returned_values(function)
        )

    def _refuse_second_backward(self, model: Model) -> bool:
        """``loss_a.backward(retain_graph=True)`` then ``loss_b.backward()`` after one forward of ``model``.

        DDP prepares one gradient all-reduce per forward; a second backward pass through the same
        forward marks the parameters ready again and raises. A forward of the model (or the model
        handed to the script's own code) between the two backward calls starts a new one.
        """
        index = self.index
        for first, second, _ in self._backward_pairs(model, retained=True):
            if _one_after_the_other(index, first, second):
                if (first, second) not in self.summed:
                    self.summed.append((first, second))
                continue
            self.program.report(
                second,
                SECOND_BACKWARD,
                f"a second backward pass through the forward of `{model.expression}` that line "
                f"{index.position(first)[0]} already ran backward through (`retain_graph=True`): "
                "DistributedDataParallel averages the gradients once per forward and raises on the second; "
                "add the losses and call backward once, or keep the first loss off this model "
                "(a GAN's discriminator step on `fake.detach()`)",
            )
            return True
        return self._refuse_losses_of_one_forward(model) or self._refuse_penalty_only_step(model)

    def _backward_pairs(
        self, model: Model, *, retained: bool
    ) -> Iterator[tuple[cst.Call, cst.Call, cst.BaseExpression]]:
        """Each backward pass in a loop (passing ``retain_graph`` or not, as ``retained`` says) with the next one of
        the loop (where ``retained`` is False, not one on the other side of an ``if``), after a forward of
        ``model`` in the loop and with none between the two: (first, second, the read that runs the last such
        forward)."""
        index = self.index
        for first in index.calls:
            if not is_backward(first) or _retains_graph(first) != retained:
                continue
            loop = next(index.enclosing_loops(first), None)
            if loop is None:
                continue
            start, end, at = index.order[loop], index.last[loop], index.order[first]
            later = [
                c
                for c in index.calls
                if is_backward(c) and at < index.order[c] <= end and (retained or not _on_other_sides(index, first, c))
            ]
            if not later:
                continue
            second = min(later, key=lambda c: index.order[c])
            runs = [
                read
                for ref in own_lineage(index, model.ref)
                for read in index.mentions(loop, ref)
                if self.reads.runs_model(read)
            ]
            before = [read for read in runs if start <= index.order[read] < at]
            if before and not any(at < index.order[read] < index.order[second] for read in runs):
                yield first, second, max(before, key=lambda r: index.order[r])

    def _refuse_penalty_only_step(self, model: Model) -> bool:
        """``penalty.backward()`` where ``penalty`` comes from ``torch.autograd.grad(critic(points).sum(),
        points, create_graph=True)`` alone: through DDP, the parameters the input gradient does not depend on
        (a last bias) never get a gradient, the reduction never ends, and the next forward raises."""
        index = self.index
        reached: dict[cst.Call, bool] = {}  # backward -> whether some forward reaches it directly
        for ref in own_lineage(index, model.ref):
            for scope in index.scopes_reading(ref):
                for read in index.mentions(scope, ref):
                    call = index.parent(read)
                    if not (isinstance(call, cst.Call) and call.func is read and self.reads.runs_model(read)):
                        continue
                    direct = set(backwards_reached(index, call, through_detach=False, through_input_gradients=False))
                    for backward in backwards_reached(index, call, through_detach=False):
                        reached[backward] = reached.get(backward, False) or backward in direct
        for backward in sorted((b for b, direct in reached.items() if not direct), key=lambda b: index.order[b]):
            self.program.report(
                backward,
                PENALTY_ONLY_STEP,
                f"this backward pass reaches `{model.expression}` only through `torch.autograd.grad` of its output "
                "(a gradient penalty stepped on its own): the parameters the input gradient does not depend on "
                "(the last layer's bias) get no gradient, DDP waits for them, and the next forward raises; add the "
                "penalty to the loss of the step that runs the model, or add `0 * <output>.sum()` to it",
            )
            return True
        return False

    def _refuse_losses_of_one_forward(self, model: Model) -> bool:
        """``loss_g, loss_d = model(x, y)``, then ``loss_g.backward()`` and ``loss_d.backward()`` with no forward
        of ``model`` between them: both losses carry gradients of the one forward (not only through
        ``.detach()``). DDP averages the gradients of the first backward pass; the second one's stay on each
        rank (or raise, where the first left parameters without a gradient)."""
        index = self.index
        for first, second, read in self._backward_pairs(model, retained=False):
            call = index.parent(read)
            if not (isinstance(call, cst.Call) and call.func is read):
                continue
            reached = set(backwards_reached(index, call, through_detach=False))
            if first in reached and second in reached:
                self.program.report(
                    second,
                    SECOND_BACKWARD,
                    f"a second backward pass through the forward of `{model.expression}` at line "
                    f"{index.position(call)[0]}, after the one at line {index.position(first)[0]}: "
                    "DistributedDataParallel averages the gradients of one backward pass per forward, and this "
                    "pass's gradients would differ from rank to rank; compute each loss in a forward of its own",
                )
                return True
        return False

    def _climb_conditionals(self, stmt: cst.BaseStatement, target: Ref | None = None) -> cst.BaseStatement:
        """``if use_cuda: model.cuda()``: the wrap goes after the whole ``if``; not out of an ``if`` after which
        ``target`` may be unbound (``if ensemble: models = ... else: model = ...``)."""
        current = stmt
        while True:
            block = self.index.parent(current)
            if isinstance(block, cst.If):  # an ``elif``: the ``If`` whose ``orelse`` it is
                current = block
                continue
            owner = self.index.parent(block) if block is not None else None
            if isinstance(owner, cst.Else):
                owner = self.index.parent(owner)
            if (
                isinstance(owner, cst.If)
                and owner is not self.index.main_guard
                and (target is None or self._bound_after(owner, target) or self._trained_after(owner, target))
                and not self._trains_later_in(block, current, target)
            ):
                current = owner
            else:
                return current

    def _trains_later_in(self, block: cst.CSTNode | None, stmt: cst.BaseStatement, target: Ref | None) -> bool:
        """Whether a statement after ``stmt`` in its ``block`` trains the model at ``target`` (any model where
        ``target`` is None): ``model = trainer.train(model, ...)`` in the branch that builds the model, so the wrap
        cannot wait for the end of the branch. (Another model trained there, a discriminator, does not count.)"""
        index = self.index
        body = list(block.body) if isinstance(block, cst.IndentedBlock) else []
        later = body[body.index(stmt) + 1 :] if stmt in body else []
        return any(
            index.trains(s) and (target is None or index.mentions(s, target))
            for s in later
            if not isinstance(s, (cst.FunctionDef, cst.ClassDef))
        )

    def _trained_after(self, branches: cst.If, target: Ref) -> bool:
        """Whether a statement after the ``if``, in its block, trains the model at ``target``: every path that
        reaches it has the model bound (``config["model"] = ...`` before the ``if``, rebound by
        ``config["model"], opt = amp.initialize(...)`` in it)."""
        index = self.index
        block = index.parent(branches)
        body = list(block.body) if isinstance(block, cst.IndentedBlock | cst.Module) else []
        later = body[body.index(branches) + 1 :] if branches in body else []
        return any(
            index.trains(s) and any(_unconditional(index, read, s) for read in index.mentions(s, target)) for s in later
        )

    def _bound_after(self, branches: cst.If, target: Ref) -> bool:
        """Whether ``target`` is bound after the ``if`` on every path: before it, or in each of its branches."""
        index = self.index
        scope = target.scope
        method = index.scope_of(branches)
        if isinstance(scope, cst.ClassDef) and isinstance(method, cst.FunctionDef):
            # a field (``self.models["mask"]``) bound in this method only inside the ``if``: not bound after it
            # on every path (``if opt.predictive_mask: self.models["mask"] = Mask()``)
            stored = [read for read in index.mentions(method, target) if index.stored(read)]
            if stored and not any(index.after(branches, b) for b in stored):
                return self._bound_in_each_branch(branches, stored)
            return True
        if not isinstance(scope, cst.FunctionDef | cst.Module) or method is not scope:
            return True  # a global read in a function, a field: bound elsewhere, not by these branches
        if isinstance(scope, cst.FunctionDef) and (
            target.path in parameter_names(scope) or target.path in {p.name.value for p in scope.params.kwonly_params}
        ):
            return True  # a parameter: bound on entry
        bindings = [read for read in index.mentions(scope, target) if index.stored(read)]
        if any(index.after(branches, b) for b in bindings) or self._entry_of_a_dict_before(branches, target):
            return True
        return self._bound_in_each_branch(branches, bindings)

    def _bound_in_each_branch(self, branches: cst.If, bindings: list[cst.BaseExpression]) -> bool:
        """Whether each branch of ``branches``, an ``else`` among them, holds one of ``bindings``."""
        index = self.index
        branch: cst.If | cst.Else | None = branches
        while isinstance(branch, cst.If):
            if not any(index.inside(b, branch.body) for b in bindings):
                return False
            branch = branch.orelse
        return branch is not None and any(index.inside(b, branch.body) for b in bindings)

    def _entry_of_a_dict_before(self, branches: cst.If, target: Ref) -> bool:
        """``config["model"]`` where ``config = {..., "model": model}`` is built before the ``if`` in its scope."""
        index = self.index
        root, bracket, rest = target.path.partition("[")
        if not bracket or not rest.endswith("]") or "[" in rest:
            return False
        key = rest[:-1].strip("\"'")
        holder = Ref(target.scope, root)
        return any(
            isinstance(value, cst.Dict)
            and index.after(branches, assign)
            and any(
                isinstance(element, cst.DictElement)
                and isinstance(element.key, cst.SimpleString)
                and element.key.evaluated_value == key
                for element in value.elements
            )
            for assign, value in index.values_assigned(holder)
        )

    def _before_training(
        self,
        stmt: cst.BaseStatement,
        lineage: set[Ref],
        building: list[cst.SimpleStatementLine],
        depth: int = 0,
    ) -> bool:
        """Whether neither ``stmt`` nor a statement before it in its block, since the model first
        appears there, trains; in a function of the program, whether some call of it does not come
        after such training either (``features(net)`` after ``net = fit(loader)``).

        Defining a training function or class (``def train(model): ...`` above ``model = Net()``)
        runs none of it; training before the model is built or named in the block trains another
        model (a teacher trained before its student is built).
        """
        index = self.index
        function = enclosing_function(index, stmt)
        callers = index.callers(function) if function is not None and depth < 3 else []
        # the calls that hand it this model (``get_embeds(model_am)``, not ``get_embeds(model_baseline)``),
        # or, for a field of the model's class, that call the method on an object that holds it
        # (``trainer.load_model()`` after ``trainer.train()``: the reload for evaluation)
        on_field = (
            function is not None
            and index.method_class(function) is not None
            and any(ref.scope is index.attribute_class(function) for ref in lineage)
        )
        handed = []
        for call in callers:
            receiver = call.func.value if on_field and isinstance(call.func, cst.Attribute) else None
            held = index.root_ref(receiver, index.scope_of(call)) if receiver is not None else None
            if held is not None:
                handed.append((call, lineage | {held}))
            elif any(index.mentions(call, ref) for ref in lineage):
                handed.append((call, lineage))
        if handed and not any(
            self._before_training(index.statement_of(call), through, building, depth + 1) for call, through in handed
        ):
            return False
        block = index.parent(stmt)
        siblings = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else [stmt]
        runs = [s for s in siblings[: siblings.index(stmt) + 1] if not isinstance(s, (cst.FunctionDef, cst.ClassDef))]

        def touches(s: cst.BaseStatement) -> bool:
            return any(index.order[s] <= index.order[p] <= index.last[s] for p in building) or any(
                index.mentions(s, ref) for ref in lineage
            )

        first = next((i for i, s in enumerate(runs) if touches(s)), len(runs) - 1)
        # a call of the function that holds the move: what that call trains comes after the move
        if any(index.trains(s) for s in runs[first : len(runs) - (depth > 0)]):
            return False
        # ``with open(path) as f: model = torch.load(f)`` after the training loop: an earlier statement
        # of an enclosing block trained this model already
        for outer in index.ancestors(stmt):
            if isinstance(outer, (cst.FunctionDef, cst.ClassDef)):
                break
            if not isinstance(outer, cst.BaseStatement):
                continue
            block = index.parent(outer)
            siblings = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []
            earlier = siblings[: siblings.index(outer)] if outer in siblings else []
            if any(
                not isinstance(s, (cst.FunctionDef, cst.ClassDef)) and index.trains(s) and touches(s) for s in earlier
            ):
                return False
        return True

    def _after_setup(self, anchor: cst.BaseStatement, target: Ref) -> cst.BaseStatement:
        """The last statement after ``anchor`` that still prepares the model.

        Initialising weights (``model.apply(init)``), freezing parameters, replacing a
        submodule, loading a checkpoint, building the optimizer: all of it happens to the
        plain module, and the wrap follows it. The scan stops where the model first runs --
        a forward call, or the model handed to the script's own functions and classes -- and
        where another model copies its weights (``target = copy.deepcopy(online)``): the copy must
        take the weights the wrap broadcast, or each rank keeps its own initial draw.
        """
        block = self.index.parent(anchor)
        siblings = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else [anchor]
        last = anchor
        for stmt in siblings[siblings.index(anchor) + 1 :]:
            if _leaves_block(stmt):
                break  # ``return model``: nothing after it runs
            if self.index.trains(stmt):
                break  # training starts here (of this model or another): the wrap must come first
            reads = self.index.mentions(stmt, target)
            if not reads:
                if self._prepares_its_holder(stmt, target):
                    last = stmt  # ``self.apply(weights_init)`` draws the weights of ``self.gen`` again
                continue
            if any(
                (self.reads.runs_model(read) and not self.reads.only_prepares(read))
                or self.reads.stored_in(read) is not None
                or self.reads.copied(read)
                for read in reads
            ) or self._frozen_by_a_helper(stmt, reads):
                break
            last = stmt
        return last

    def _frozen_by_a_helper(self, stmt: cst.BaseStatement, reads: list[cst.BaseExpression]) -> bool:
        """``requires_grad(generator, False)``: the model handed, with a literal False, to a function of the
        program that sets ``requires_grad`` of what it is given (a GAN's toggle, frozen before its loop and
        unfrozen for its own step). DDP refuses a module with nothing to train: the wrap comes first."""
        index = self.index
        for read in reads:
            arg = index.parent(read)
            call = index.parent(arg)
            if not (isinstance(arg, cst.Arg) and isinstance(call, cst.Call)):
                continue
            if not any(m.matches(a.value, m.Name("False")) for a in call.args):
                continue
            callee = index.runs(call, index.scope_of(call))
            if callee is not None and any(
                (
                    isinstance(node, cst.Assign)
                    and any(
                        isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad"
                        for t in node.targets
                    )
                )
                or m.matches(node, m.Call(func=m.Attribute(attr=m.Name("requires_grad_"))))
                for node in index.walk(callee[0].body)
            ):
                return True
        return False

    def _prepares_its_holder(self, stmt: cst.BaseStatement, target: Ref) -> bool:
        """Whether ``stmt`` initialises, loads or moves the whole object whose field the model is
        (``self.apply(init)``, ``self.load_state_dict(...)``, ``self.to(device)`` for ``self.gen``)."""
        index = self.index
        if not target.path.startswith("self."):
            return False
        function = enclosing_function(index, stmt)
        owner = index.self_name(function) if function is not None and index.method_class(function) else None
        return owner is not None and any(
            isinstance(node, cst.Call)
            and m.matches(node.func, m.Attribute(value=m.Name(owner)))
            and cast(cst.Attribute, node.func).attr.value in _PREPARING_METHODS
            for node in index.walk(stmt)
        )


# What a module does to every parameter it holds, its submodules' too: before the wrap broadcasts them
_PREPARING_METHODS = (torch_api.MODULE_CHAINING_METHODS - {"train", "eval"}) | {"load_state_dict"}


def _leaves_block(stmt: cst.BaseStatement) -> bool:
    """``return``, ``raise``, ``break`` or ``continue``: the statements after it in its block never run."""
    small = stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ()
    return any(isinstance(s, (cst.Return, cst.Raise, cst.Break, cst.Continue)) for s in small)


def _retains_graph(call: cst.Call) -> bool:
    """``loss.backward(retain_graph=True)`` (or any value but a literal False/None)."""
    arg = argument(call, "retain_graph", 1)
    return arg is not None and not m.matches(arg.value, m.Name("False") | m.Name("None"))


def statement_value(stmt: cst.SimpleStatementLine) -> cst.BaseExpression:
    """The value of a one-statement line that assigns or evaluates it."""
    small = stmt.body[0]
    if not isinstance(small, (cst.Assign, cst.AnnAssign, cst.Expr)) or small.value is None:
        raise TypeError(f"expected an assignment or an expression, got {type(small).__name__}")
    return small.value


def _device_move(value: cst.BaseExpression) -> bool | None:
    """For ``x.to(d)`` / ``x.cuda()`` chains: ``True`` if it is ``.cuda()``, ``False`` for ``.to()``; else None."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        attr = value.func.attr.value
        if attr == "cuda":
            return True
        if attr == "to":
            return False
        value = value.func.value
    return None


def own_lineage(index: Index, ref: Ref) -> set[Ref]:
    """Where the model at ``ref`` came from, and everywhere that value goes.

    Not the other values that meet it downstream: two models handed to one helper
    (``count_params(encoder)``, ``evaluate(student)``) share its parameter, but neither
    is built where the other is. A value that goes into a helper comes back only where
    that call's result goes: ``g, opt_g = restore(g, opt_g)`` then ``d, opt_d = restore(d, opt_d)``
    keep ``g`` and ``d`` apart.
    """
    # a walk down from a place the walk up reached inside a helper leaves it where the walk up came in
    return {place for place, _ in _walk(index, _walk(index, {(ref, ())}, upstream=True), upstream=False)}


def upstream(index: Index, ref: Ref) -> set[Ref]:
    """``ref`` and every place its value came from (through a helper's return, only from what that call
    handed it)."""
    return {place for place, _ in _walk(index, {(ref, ())}, upstream=True)}


_Calls = tuple[cst.CSTNode, ...]  # the statements of the calls a walk is inside, innermost last


def _walk(index: Index, starts: set[tuple[Ref, _Calls]], *, upstream: bool) -> set[tuple[Ref, _Calls]]:
    """The places values go to (or come from), from ``starts``, each with the calls the walk is inside there:
    a value that enters a function at a call leaves it only at that same call (while the walk knows the
    call: one it started inside may return anywhere)."""
    seen = set(starts)
    queue: deque[tuple[Ref, _Calls]] = deque(
        sorted(starts, key=lambda start: (index.order.get(start[0].scope, -1), start[0].path))
    )
    while queue:
        place, calls = queue.popleft()
        flows = index.flows_into(place) if upstream else index.flows_from(place)
        for flow in flows:
            entering, leaving = _crossing(index, flow)
            if upstream:
                entering, leaving = leaving, entering
            if leaving:
                if calls and calls[-1] is not flow.stmt:
                    continue
                inside = calls[:-1]
            elif entering:
                inside = (*calls, flow.stmt)[-_CALL_DEPTH:]
            else:
                inside = calls
            other = flow.src if upstream else flow.dst
            if (other, inside) not in seen:
                seen.add((other, inside))
                queue.append((other, inside))
    return seen


_CALL_DEPTH = 4


def _crossing(index: Index, flow: Flow) -> tuple[bool, bool]:
    """Whether ``flow`` goes into a function from the call's statement (an argument), and whether it comes
    out of one into the call's statement (a returned value)."""
    src, dst = flow.src.scope, flow.dst.scope
    entering = isinstance(dst, cst.FunctionDef) and src is not dst and not index.inside(flow.stmt, dst)
    leaving = isinstance(src, cst.FunctionDef) and src is not dst and not index.inside(flow.stmt, src)
    return entering, leaving


def depths(index: Index, lineage: set[Ref]) -> dict[Ref, int]:
    """How far each place is from where the value started (following flows)."""
    # (``model = model.cuda()`` flows into itself: that does not make it any deeper)
    roots = [r for r in lineage if not any(f.src in lineage and f.src != r for f in index.flows_into(r))]
    depth = dict.fromkeys(roots, 0)
    frontier = list(roots)
    while frontier:
        nxt = []
        for ref in frontier:
            for flow in index.flows_from(ref):
                if flow.dst in lineage and flow.dst != ref and depth.get(flow.dst, -1) < depth[ref] + 1 <= len(lineage):
                    depth[flow.dst] = depth[ref] + 1
                    nxt.append(flow.dst)
        frontier = nxt
    return depth

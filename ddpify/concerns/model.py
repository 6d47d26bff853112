"""Model: each trained model is wrapped in DistributedDataParallel once it is on its device.

A model is whatever a ``torch.optim`` optimizer's ``.parameters()`` come from
(found through the value-flow graph, never by its name). The wrap goes right
after the statement that puts the model on its device (after a checkpoint load
that follows it, if any), and is written back to the same name, so the
training step -- ``model(x)``, ``loss.backward()``, ``optimizer.step()`` -- is
unchanged and DDP synchronises gradients::

    model = Net().to(device)       ->   model = Net().to(device)
                                        model = DDP(model)

``device_ids`` is passed only when the model is put on the GPU with ``.cuda()``;
for ``.to(device)`` DDP takes the device from the module itself, which works
on GPU and CPU alike. Everything that is not a forward call -- ``state_dict``,
``load_state_dict``, custom methods and submodules -- goes to the wrapped
module, so checkpoints keep their keys (no ``module.`` prefix)::

    torch.save(model.state_dict(), path)  ->  torch.save(model.module.state_dict(), path)

``nn.DataParallel(model)`` is where a model is ready: DDP takes its place, and
the ``if torch.cuda.device_count() > 1:`` around it goes.

Models kept in a list, each with its own optimizer, are wrapped together
(:mod:`ddpify.concerns.model_collections`): ``nets = [DDP(net) for net in nets]``.
Optimizers over parts of one model (``model.backbone``, ``model.head``) wrap the
model once: its forward runs the parts, so DDP averages all their gradients.

Limits: an optimizer whose parameters cannot be traced to a model (DDP301), a
model never built or placed in this file (DDP302, DDP304), and a training step
that runs parts of a model but never the model itself (DDP310) are refused; a
custom method that runs submodules in the training step (DDP303), a model moved
between devices inside the training loop (DDP305) and a contrastive loss over
the batch, which now sees only the local batch
(:mod:`ddpify.concerns.batch_negatives`, DDP311), are reported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

import libcst as cst
import libcst.matchers as m

from ddpify import torch_api
from ddpify.concerns import batch_negatives, checkpoints, model_collections
from ddpify.concerns.batch_negatives import IN_BATCH_NEGATIVES
from ddpify.diagnostics import Code, Severity
from ddpify.engine.edits import EditPlan
from ddpify.engine.index import Ref, Scope
from ddpify.engine.program import Program
from ddpify.engine.syntax import argument
from ddpify.result import Options

UNTRACEABLE_OPTIMIZER = Code(
    "DDP301",
    Severity.ERROR,
    "model",
    "an optimizer whose model cannot be traced from its arguments",
    "pass `model.parameters()` (or a list built from it) to the optimizer",
)
MODEL_NOT_PLACED = Code(
    "DDP302",
    Severity.ERROR,
    "model",
    "the model an optimizer trains is never built or put on its device in this file",
    "build the model and move it to its device in the script",
)
OUTSIDE_FORWARD = Code(
    "DDP303",
    Severity.WARNING,
    "model",
    "a custom model method runs submodules in the training step, bypassing DDP's gradient averaging",
    "route the computation through forward()",
)
NO_OPTIMIZER = Code(
    "DDP304",
    Severity.ERROR,
    "model",
    "the script trains but builds no torch.optim optimizer over a model in this file",
    "build the optimizer over `model.parameters()` in the script",
)
MOVES_IN_TRAINING = Code(
    "DDP305",
    Severity.WARNING,
    "model",
    "the model moves between devices inside the training loop",
    "keep the model on its device; save `model.module.state_dict()` without moving it",
)
UNFROZEN_AFTER_WRAP = Code(
    "DDP306",
    Severity.ERROR,
    "model",
    "parameters of a model become trainable after it is wrapped, where the wrap cannot be renewed",
    "unfreeze in the function that wraps the model, or wrap it again after unfreezing: `model = DDP(model.module)`",
)
STORED_BEFORE_WRAP = Code(
    "DDP307",
    Severity.ERROR,
    "model",
    "the model is stored in a list, dict or attribute before it can be wrapped, and used from there afterwards",
    "store the model after it is on its device (and after any checkpoint load), or store `model` again after the wrap",
)
SMALL_BATCH_NORM = Code(
    "DDP308",
    Severity.INFO,
    "model",
    "a model with BatchNorm layers trains on small per-process batches: each rank normalises over its own batch",
    "convert the BatchNorm layers to SyncBatchNorm (`--sync-bn`) if the batch statistics matter",
)
WRAPPER_IN_CONTAINER = Code(
    "DDP309",
    Severity.WARNING,
    "model",
    "the wrapped model is kept in a list, dict or attribute: what is read through it is the wrapper's",
    "read `.module` of the models taken from it for `state_dict()` and attributes (forward calls are right as they are)",
)
PARTS_RUN_DIRECTLY = Code(
    "DDP310",
    Severity.ERROR,
    "model",
    "the training step runs parts of a model (`gan.generator(z)`) but never the model itself",
    "run the parts through the model's forward(), or build them as models of their own, each wrapped",
)
CODES = (
    UNTRACEABLE_OPTIMIZER,
    MODEL_NOT_PLACED,
    OUTSIDE_FORWARD,
    NO_OPTIMIZER,
    MOVES_IN_TRAINING,
    UNFROZEN_AFTER_WRAP,
    STORED_BEFORE_WRAP,
    SMALL_BATCH_NORM,
    WRAPPER_IN_CONTAINER,
    PARTS_RUN_DIRECTLY,
    IN_BATCH_NEGATIVES,
)


_DEEPCOPY = frozenset({"copy.deepcopy"})
# nn.Module methods that run no submodule: ``next(self.parameters()).new_zeros(...)`` computes nothing
_COMPUTES_NOTHING = (torch_api.WRAPPER_SAFE_ATTRIBUTES - {"forward"}) | {
    "state_dict",
    "load_state_dict",
    "register_buffer",
    "register_parameter",
    "get_parameter",
    "get_buffer",
    "get_submodule",
}

# (statement, the place it assigns, whether it is ``.cuda()``): a move of the model to its device
_Move = tuple[cst.SimpleStatementLine, Ref, bool]
_Candidate = TypeVar("_Candidate", bound=tuple[Any, ...])  # (statement, ...)


@dataclass(frozen=True)
class Model:
    """A trained model: what the optimizer at ``optimizer`` steps."""

    ref: Ref
    expression: str  # how the model is written where the wrap goes: ``model``, ``self.model``
    insert_after: cst.BaseStatement  # the wrap goes right after this statement
    on_cuda: bool  # put on its GPU by an unconditional ``.cuda()``
    placed: bool  # moved to a device at all (otherwise DDP runs it where it was built)
    unwrap: tuple[cst.BaseExpression, ...]  # reads of the wrapper that must go to ``.module``
    optimizer: cst.Call
    data_parallel: cst.Call | None = None  # ``nn.DataParallel(model)``, replaced by the DDP wrap in place
    data_parallel_if: cst.If | None = None  # ``if torch.cuda.device_count() > 1:`` around it, inlined
    data_parallel_removed: cst.SimpleStatementLine | None = None  # a conditional DataParallel wrap, dropped
    lineage: frozenset[Ref] = frozenset()  # every place the model's value passes through
    rewraps: tuple[cst.BaseStatement, ...] = ()  # parameters are unfrozen here: wrap again after it
    unused: str | None = None  # why some parameters may get no gradient in a step: find_unused_parameters
    small_batch_norm: cst.Call | None = None  # a DataLoader with a small batch, where the model has BatchNorm
    item: str | None = None  # a list of models: each is wrapped as ``[DDP(<item>) for <item> in <expression>]``


@dataclass(frozen=True)
class Facts:
    models: tuple[Model, ...]
    optimizers: tuple[cst.Call, ...]  # every torch.optim optimizer built in the script
    data_parallel: tuple[cst.Call, ...]  # every nn.DataParallel(...) call

    @property
    def refs(self) -> frozenset[Ref]:
        """Every place any trained model's value passes through."""
        return frozenset().union(*(model.lineage for model in self.models))


def find(program: Program) -> Facts:
    finder = _Finder(program)
    reported = len(program.findings)
    models = tuple(finder.models())
    backward = program.first_backward()
    if not models and len(program.findings) == reported and backward is not None:
        program.report(
            backward,
            NO_OPTIMIZER,
            "the script trains, but builds no torch.optim optimizer over a model's parameters in this file: "
            "cannot find the model to wrap in DistributedDataParallel",
        )
    if models:
        batch_negatives.report(program)
    index = program.index
    data_parallel = tuple(c for c in index.calls if index.is_call_to(c, torch_api.DATA_PARALLEL))
    return Facts(models, tuple(finder.optimizers()), data_parallel)


class _Finder:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.index = program.index
        self._model_classes: dict[Ref, set[cst.ClassDef]] = {}
        self._warned_holders: set[str] = set()
        self._model_lists: dict[Ref, model_collections.ModelList] = {}
        self._all_trained: set[Ref] | None = None
        self._claimed: set[cst.BaseExpression] = set()  # reads that already get ``.module``

    def optimizers(self) -> Iterator[cst.Call]:
        """``torch.optim.X(...)`` calls, however torch.optim was imported."""
        for call in self.index.calls:
            for name in self.index.qualified_names(call.func):
                parts = name.split(".")
                if (
                    name.startswith(torch_api.OPTIMIZER_MODULE + ".")
                    and not set(parts[2:]) & torch_api.NOT_OPTIMIZERS
                    and parts[-1][:1].isupper()
                ):
                    yield call
                    break

    def _trained_refs(self, optimizer: cst.Call) -> tuple[list[Ref], cst.BaseExpression | None]:
        """The models whose parameters the optimizer holds, and the first piece of its ``params`` not traced to one.

        ``params`` is taken apart -- ``itertools.chain(a.parameters(), b.parameters())``, ``list(a...) +
        list(b...)``, param-group dicts, ``filter(...)``, comprehensions, a list filled in a loop over
        ``named_parameters()`` -- and every piece must come from some module's ``parameters()``: a bare
        tensor or a parameter from elsewhere would train without DDP averaging its gradients.
        """
        params_arg = argument(optimizer, "params", 0)
        if params_arg is None:
            return [], optimizer
        calls: list[cst.Call] = []
        untraced = self._trace(params_arg.value, calls, set())
        refs: list[Ref] = []
        for call in calls:
            receiver = cast(cst.Attribute, call.func).value
            listed = model_collections.taken_from(self.index, receiver)
            if listed is not None:
                self._model_lists[listed.ref] = listed
            found = listed.ref if listed is not None else self._module_ref(receiver)
            if found is None:
                return refs, untraced or receiver
            if found not in refs:
                refs.append(found)
        return refs, untraced

    def _module_ref(self, receiver: cst.BaseExpression) -> Ref | None:
        """The outermost model ``receiver`` is part of: ``model`` for ``model.head`` or ``model[0]``.

        A submodule taken from a list or dict of models (``nets[0]``) is not a part of one model: None.
        """
        index = self.index
        scope = index.scope_of(receiver)
        node, subscripted = receiver, False
        while (ref := index.ref_of(node, scope)) is None:
            if isinstance(node, cst.Attribute):
                node = node.value
            elif isinstance(node, cst.Subscript):
                node, subscripted = node.value, True
            else:
                return None
        containers = (cst.List, cst.Tuple, cst.Dict, cst.ListComp, cst.DictComp)
        if subscripted and any(isinstance(a.value, containers) for a in index.assignments_to(ref)):
            return None
        return ref

    def _trace(self, expr: cst.BaseExpression, calls: list[cst.Call], seen: set[Ref]) -> cst.BaseExpression | None:
        """Add the ``X.parameters()`` calls ``expr`` takes its parameters from; the piece that has none, if any."""
        index = self.index
        if isinstance(expr, cst.Call):
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value in torch_api.PARAMETER_METHODS:
                calls.append(expr)
                return None
            names = index.qualified_names(func)
            values = [a.value for a in expr.args if a.keyword is None]
            if names & {"itertools.chain"}:
                pieces = values
            elif names & {"itertools.chain.from_iterable"} or (
                isinstance(func, cst.Name) and func.value in {"list", "tuple", "iter", "sorted", "set"}
            ):
                pieces = values[:1]
            elif isinstance(func, cst.Name) and func.value == "filter" and len(values) == 2:
                pieces = values[1:]
            else:
                return expr
            for piece in pieces:
                if (untraced := self._trace(piece, calls, seen)) is not None:
                    return untraced
            return None if pieces else expr
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
            return self._trace(expr.left, calls, seen) or self._trace(expr.right, calls, seen)
        if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
            if not expr.elements:
                return expr
            for element in expr.elements:
                if (untraced := self._trace(element.value, calls, seen)) is not None:
                    return untraced
            return None
        if isinstance(expr, cst.Dict):  # a param group
            for entry in expr.elements:
                if (
                    isinstance(entry, cst.DictElement)
                    and isinstance(entry.key, cst.SimpleString)
                    and entry.key.evaluated_value == "params"
                ):
                    return self._trace(entry.value, calls, seen)
            return expr
        if isinstance(expr, (cst.ListComp, cst.GeneratorExp, cst.SetComp)):
            comp: cst.CompFor | None = expr.for_in
            while comp is not None:  # the innermost ``for``: ``p for m in models for p in m.parameters()``
                if comp.inner_for_in is None:
                    return self._trace(comp.iter, calls, seen)
                comp = comp.inner_for_in
            return expr
        if isinstance(expr, cst.Name):
            return self._trace_name(expr, calls, seen)
        return expr

    def _trace_argument(
        self, function: cst.FunctionDef, param: str, calls: list[cst.Call], seen: set[Ref]
    ) -> cst.BaseExpression | None:
        """``def make_optimizer(params): return SGD(params)``: what every caller passes for ``params``."""
        index = self.index
        callers = index.callers(function)
        if not callers:
            return function.name  # never called here: nothing to trace
        params = list(function.params.params)
        position = next(i for i, p in enumerate(params) if p.name.value == param)
        for call in callers:
            resolved = index.resolve_callee(call, index.scope_of(call))
            implicit = resolved[1] if resolved is not None else 0
            passed = [a.value for a in call.args if a.keyword is not None and a.keyword.value == param]
            positional = [a for a in call.args if a.keyword is None]
            if not passed and 0 <= position - implicit < len(positional) and not positional[position - implicit].star:
                passed = [positional[position - implicit].value]
            if not passed:
                return call
            if (untraced := self._trace(passed[0], calls, seen)) is not None:
                return untraced
        return None

    def _trace_name(self, name: cst.Name, calls: list[cst.Call], seen: set[Ref]) -> cst.BaseExpression | None:
        """``params = [...]``, or ``params = []`` filled by ``params.append(p)`` in a loop over ``named_parameters()``."""
        index = self.index
        scope = index.scope_of(name)
        ref = index.ref_of(name, scope)
        if ref in seen:
            return None  # traced already
        if ref is None or ref.scope is not scope:
            return name
        seen.add(ref)
        found = len(calls)
        if isinstance(scope, cst.FunctionDef) and any(p.name.value == name.value for p in scope.params.params):
            return self._trace_argument(scope, name.value, calls, seen)
        for assign in index.assignments_to(ref):
            value = assign.value
            if isinstance(value, (cst.List, cst.Tuple)) and not value.elements:
                continue  # filled below
            if self._trace(value, calls, seen) is not None:
                return name
        for read in index.mentions(scope, ref):
            augmented = index.parent(read)
            if isinstance(augmented, cst.AugAssign) and augmented.target is read:  # params += list(head.parameters())
                if (untraced := self._trace(augmented.value, calls, seen)) is not None:
                    return untraced
                continue
            receiver: cst.CSTNode = read
            while isinstance(index.parent(receiver), cst.IfExp):  # ``(decay if p.ndim > 1 else rest).append(p)``
                receiver = cast(cst.CSTNode, index.parent(receiver))
            attribute = index.parent(receiver)
            if not (
                isinstance(attribute, cst.Attribute)
                and attribute.value is receiver
                and attribute.attr.value in {"append", "extend"}
            ):
                continue
            stmt = index.statement_of(read)
            loops = [loop for loop in index.enclosing_loops(read) if isinstance(loop, cst.For)]
            sources = [loop.iter for loop in loops] + [stmt]
            traced = [
                node
                for source in sources
                for node in index.walk(source)
                if isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and node.func.attr.value in torch_api.PARAMETER_METHODS
            ]
            if not traced:
                return name
            calls.extend(traced)
        return None if len(calls) > found else name

    def models(self) -> Iterator[Model]:
        # Several models may be wrapped after the same statement (an encoder and a decoder both
        # prepared before one optimizer over both); the same model reached twice is wrapped once.
        seen: set[tuple[cst.CSTNode, str]] = set()
        for optimizer in self.optimizers():
            refs, untraced = self._trained_refs(optimizer)
            if untraced is not None:
                code = self.index.module.code_for_node(untraced)
                text = code if len(code) <= 60 and "\n" not in code else code.splitlines()[0][:57] + "..."
                self.program.report(
                    untraced,
                    UNTRACEABLE_OPTIMIZER,
                    f"cannot tell which model `{text}` comes from: every parameter this optimizer trains must come "
                    "from a model's `.parameters()` or `.named_parameters()` so that DistributedDataParallel "
                    "averages its gradients",
                )
                continue
            for ref in refs:
                listed = self._model_lists.get(ref)
                model = self._model(ref, optimizer) if listed is None else self._list_model(listed, optimizer)
                if model is not None and (model.insert_after, model.expression) not in seen:
                    seen.add((model.insert_after, model.expression))
                    self._warn_training_outside_forward(model)
                    if self._refuse_parts_run_directly(model):
                        continue
                    classes = self._model_classes.get(model.ref, set())
                    unwrap = tuple(read for read in model.unwrap if read not in self._claimed)
                    self._claimed.update(unwrap)
                    yield replace(
                        model,
                        unwrap=unwrap,
                        lineage=frozenset(self.index.lineage(model.ref)),
                        unused=self._skipped_submodule(classes) or self._output_used_sometimes(model),
                        small_batch_norm=self._small_batch_norm(model, classes),
                    )

    def _model(self, ref: Ref, optimizer: cst.Call) -> Model | None:
        index = self.index
        lineage = index.lineage(ref)
        moves: list[tuple[cst.SimpleStatementLine, Ref, bool]] = []
        creations: list[tuple[cst.SimpleStatementLine, Ref]] = []
        wraps: list[tuple[cst.SimpleStatementLine, Ref]] = []
        for stmt in index.statements:
            if len(stmt.body) != 1:
                continue
            small = stmt.body[0]
            scope = index.scope_of(stmt)
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                target = index.ref_of(small.targets[0].target, scope)
                if target in lineage:
                    move = _device_move(small.value)
                    if index.is_call_to(small.value, torch_api.DATA_PARALLEL):
                        wraps.append((stmt, target))
                    elif move is not None:
                        moves.append((stmt, target, move))
                    elif index.carried_ref(small.value, scope) is None:
                        creations.append((stmt, target))
            elif isinstance(small, cst.Expr) and (move := _device_move(small.value)) is not None:
                target = index.carried_ref(small.value, scope)
                if target in lineage:
                    moves.append((stmt, target, move))
        # Where the model is trained, or after it has been (``model = train_model(model, ...)``,
        # ``model = model.cpu()`` for export), it is not being built: the wrap must come before.
        moves = [c for c in moves if self._before_training(c[0])]
        creations = [c for c in creations if self._before_training(c[0])]
        # A move inside a loop (``model.to(device).train()`` after a checkpoint on the CPU) is not
        # where the model becomes ready; only the least nested places count.
        moves, creations, wraps = self._least_nested(moves), self._least_nested(creations), self._least_nested(wraps)
        built = [c[0] for c in moves] + [c[0] for c in creations] + [c[0] for c in wraps]
        classes = {c for stmt in built if (c := self._built_class(stmt)) is not None}
        self._model_classes[ref] = classes
        depth = self._depths(lineage)
        if wraps:
            stmt, target = max(wraps, key=lambda c: (depth.get(c[1], 0), index.order[c[0]]))
            return self._data_parallel_model(stmt, target, moves, optimizer)
        if moves:
            stmt, target, cuda = max(moves, key=lambda c: (depth.get(c[1], 0), index.order[c[0]]))
            placed = True
        elif creations:
            stmt, target = max(creations, key=lambda c: (depth.get(c[1], 0), index.order[c[0]]))
            cuda, placed = False, False
        else:
            self.program.report(
                optimizer,
                MODEL_NOT_PLACED,
                "cannot find where the model this optimizer trains is built or put on its device",
            )
            return None
        anchor = self._climb_conditionals(stmt)
        on_cuda = cuda and anchor is stmt
        insert_after = self._after_setup(anchor, target)
        expression = target.path
        if expression.startswith("self."):
            expression = f"{index.self_name(index.scope_of(stmt))}{expression[4:]}"
        unwrap = tuple(self._wrapper_reads(target, insert_after))
        self._warn_moves_in_training(target, insert_after)
        rewraps = self._unfrozen_after(target, insert_after)
        self._refuse_stored_before(target, anchor, insert_after)
        unwrap = tuple(dict.fromkeys(unwrap + self._stored_after(target, insert_after)))
        if self._frozen_when_wrapped(target, insert_after):
            if not rewraps:
                return None  # nothing to synchronise, and DDP refuses a module without trainable parameters
            self.program.report(
                rewraps[0],
                UNFROZEN_AFTER_WRAP,
                f"`{expression}` has no trainable parameter where it would be wrapped in DistributedDataParallel "
                "(which refuses such a module), and is unfrozen here: wrap it once it has trainable parameters",
            )
        return Model(target, expression, insert_after, on_cuda, placed, unwrap, optimizer, rewraps=rewraps)

    def _list_model(self, listed: model_collections.ModelList, optimizer: cst.Call) -> Model:
        """Every model of a list, wrapped once the list is ready: ``nets = [DDP(net) for net in nets]``."""
        index = self.index
        anchor = self._climb_conditionals(listed.built)
        insert_after = self._after_setup(anchor, listed.ref)
        scope = index.scope_of(listed.built)
        item = listed.item
        built = item
        if isinstance(item, cst.Name):  # nets.append(net): how ``net`` was built in the loop
            assigned = [a.value for a in index.assignments_to(index.ref_of(item, scope) or listed.ref)]
            built = assigned[-1] if assigned else item
        cls = built
        while isinstance(cls, cst.Call) and isinstance(cls.func, cst.Attribute):
            cls = cls.func.value
        if isinstance(cls, cst.Call) and (own := index.local_class(cls.func)) is not None:
            self._model_classes[listed.ref] = {own}
        unwrap = tuple(
            read
            for read in model_collections.item_reads(index, index.downstream(listed.ref), insert_after)
            if self._needs_module(read)
        )
        self._refuse_stored_before(listed.ref, anchor, insert_after)
        for flow in index.flows_from(listed.ref):  # ensemble = nets: the list of the unwrapped models
            if not index.after(flow.stmt, insert_after):
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
        return Model(listed.ref, expression, insert_after, on_cuda, True, unwrap, optimizer, item=listed.name)

    def _stored_after(self, target: Ref, wrap: cst.BaseStatement) -> tuple[cst.BaseExpression, ...]:
        """Reads of the wrapped model taken out of a list it is kept in after the wrap, that need ``.module``.

        A list filled only with this model (``nets.append(net)`` in the loop that builds it) holds
        nothing but wrappers: ``net.state_dict()`` in ``for net in nets`` gets ``.module``. Any other
        holder (``nets = [net_a, net_b]``, ``self.net = net``) is reported (DDP309).
        """
        index = self.index
        scope = index.scope_of(wrap)
        reads: list[cst.BaseExpression] = []
        for read in index.mentions(scope, target):
            if not index.after(read, wrap) or index.statement_of(read) is wrap:
                continue
            holder = self._stored_in(read)
            if holder is None or self._needs_module(read):  # a checkpoint dict gets ``model.module``
                continue
            listed = model_collections.model_list(index, holder, "model")
            if listed is not None and self._holds_only_models(listed, target, scope):
                taken = model_collections.item_reads(index, index.downstream(listed.ref), wrap)
                reads += [r for r in taken if self._needs_module(r)]
                continue
            holder_ref = index.root_ref(holder, scope)
            text = index.module.code_for_node(holder)
            if (holder_ref is not None and holder_ref == target) or text in self._warned_holders:
                continue
            self._warned_holders.add(text)
            self.program.report(
                read,
                WRAPPER_IN_CONTAINER,
                f"`{text}` keeps the model wrapped in DistributedDataParallel: a "
                "`state_dict()` or attribute read through it is the wrapper's (checkpoint keys gain `module.`); "
                "use `.module` there",
            )
            break
        return tuple(reads)

    def _holds_only_models(self, listed: model_collections.ModelList, target: Ref, scope: Scope) -> bool:
        """Whether every item of ``listed`` is a trained model: ``nets.append(net)`` of ``target`` only, or
        ``[net_a, net_b]`` where each is a model an optimizer trains (so each is wrapped)."""
        index = self.index
        if listed.fills:
            return all(index.ref_of(fill.args[-1].value, scope) == target for fill in listed.fills)
        if not listed.members:
            return False
        if self._all_trained is None:
            self._all_trained = {ref for opt in self.optimizers() for ref in self._trained_refs(opt)[0]}
        return all(index.ref_of(member, scope) in self._all_trained for member in listed.members)

    def _refuse_stored_before(self, target: Ref, anchor: cst.BaseStatement, wrap: cst.BaseStatement) -> None:
        """``nets = [net_a, net_b]`` before ``net_a = DDP(net_a)``: ``nets`` still trains the plain module."""
        index = self.index
        scope = index.scope_of(wrap)
        for read in index.mentions(scope, target):
            if index.after(read, wrap) or index.inside(read, wrap) or index.statement_of(read) is wrap:
                continue
            holder = self._stored_in(read)
            if holder is None:
                continue
            holder_ref = index.root_ref(holder, scope)
            if holder_ref is None or any(index.after(r, wrap) for r in index.mentions(scope, holder_ref)):
                self.program.report(
                    read,
                    STORED_BEFORE_WRAP,
                    f"`{index.module.code_for_node(holder)}` keeps the model before it is ready to be wrapped "
                    f"in DistributedDataParallel (after line {index.position(anchor)[0]}), and is used after the "
                    "wrap: it would train the plain module; store the model after it is on its device",
                )
                return

    def _frozen_when_wrapped(self, target: Ref, wrap: cst.BaseStatement) -> bool:
        """The whole model is frozen before the wrap: ``model.requires_grad_(False)`` or
        ``for p in model.parameters(): p.requires_grad = False`` (not a part: ``model.backbone``)."""
        index = self.index
        frozen = False
        for read in index.mentions(index.scope_of(wrap), target):
            if index.after(read, wrap) and index.statement_of(read) is not wrap:
                continue
            attribute = index.parent(read)
            if not (isinstance(attribute, cst.Attribute) and attribute.value is read):
                continue
            call = index.parent(attribute)
            if not isinstance(call, cst.Call):
                continue
            name = attribute.attr.value
            if name == "requires_grad_":
                frozen = m.matches(call, m.Call(args=[m.Arg(m.Name("False"))]))
            elif name == "parameters":
                loop = index.parent(call)
                if isinstance(loop, cst.For) and loop.iter is call and isinstance(loop.target, cst.Name):
                    variable = loop.target.value
                    for node in index.walk(loop.body):
                        if _makes_trainable(node, frozenset({variable})):
                            frozen = False
                        elif m.matches(
                            node,
                            m.Assign(
                                targets=[m.AssignTarget(m.Attribute(m.Name(variable), m.Name("requires_grad")))],
                                value=m.Name("False"),
                            )
                            | m.Call(
                                func=m.Attribute(m.Name(variable), m.Name("requires_grad_")),
                                args=[m.Arg(m.Name("False"))],
                            ),
                        ):
                            frozen = True
        return frozen

    def _unfrozen_after(self, target: Ref, wrap: cst.BaseStatement) -> tuple[cst.BaseStatement, ...]:
        """Where parameters of the model become trainable after the wrap.

        DDP averages only the parameters that required grad when it was built, so unfreezing
        after the wrap (``for p in model.backbone.parameters(): p.requires_grad = True``,
        ``model.backbone.requires_grad_(True)``) needs a new wrap right after it -- possible
        where the model's name is the one the wrap assigned, in the same function.
        """
        index = self.index
        wrap_scope = index.scope_of(wrap)
        found: list[cst.BaseStatement] = []
        reads = list(self._reads_after_wrap(target, wrap))
        frozen_before = any(
            self._unfreezes(read, value=False) is not None
            for read in index.mentions(wrap_scope, target)
            if not index.after(read, wrap) or index.inside(read, wrap)
        )
        for read in reads:
            statement = self._unfreezes(read)
            if statement is None or statement in found:
                continue
            if not frozen_before and self._toggled(statement, reads):
                continue  # a GAN's ``requires_grad`` toggled each step: DDP registered them all at the wrap
            if index.scope_of(statement) is not wrap_scope or index.ref_of(read, wrap_scope) != target:
                self.program.report(
                    statement,
                    UNFROZEN_AFTER_WRAP,
                    f"parameters of `{index.module.code_for_node(read)}` become trainable here, after the model is "
                    "wrapped in DistributedDataParallel, which averages only the parameters that required grad when "
                    "it was built: unfreeze in the function that wraps the model, or wrap it again after unfreezing",
                )
                continue
            found.append(statement)
        return tuple(found)

    def _toggled(self, unfreeze: cst.BaseStatement, reads: list[cst.BaseExpression]) -> bool:
        """The same training loop also freezes the model again: ``requires_grad`` toggled every step."""
        loops = list(self.index.enclosing_loops(unfreeze))
        return bool(loops) and any(
            self.index.inside(read, loops[0]) and self._unfreezes(read, value=False) is not None for read in reads
        )

    def _unfreezes(self, read: cst.BaseExpression, value: bool = True) -> cst.BaseStatement | None:
        """The statement that makes parameters reached from ``read`` trainable (``value`` False: frozen)."""
        index = self.index
        for loop in index.enclosing_loops(read):
            # for p in model.backbone.parameters(): p.requires_grad = True
            if isinstance(loop, cst.For) and index.inside(read, loop.iter):
                names = frozenset(n.value for n in index.walk(loop.target) if isinstance(n, cst.Name))
                if any(_makes_trainable(node, names, value) for node in index.walk(loop.body)):
                    return loop
                return None
        statement = index.statement_of(read)
        node: cst.CSTNode = read
        while isinstance(parent := index.parent(node), (cst.Attribute, cst.Call)):
            if _makes_trainable(parent, None, value):  # model.backbone.requires_grad_(True)
                return statement
            node = parent
        return None

    def _warn_moves_in_training(self, target: Ref, wrap: cst.BaseStatement) -> None:
        """``model.cpu()`` ... ``model.to(device)`` inside the training loop moves a wrapped model."""
        index = self.index
        for read in index.mentions(index.scope_of(wrap), target):
            attribute = index.parent(read)
            if not (
                isinstance(attribute, cst.Attribute)
                and attribute.value is read
                and attribute.attr.value in {"cpu", "to", "cuda"}
            ):
                continue
            if index.starts_after(read, wrap) and any(index.trains(loop.body) for loop in index.enclosing_loops(read)):
                self.program.report(
                    read,
                    MOVES_IN_TRAINING,
                    "the model moves between devices inside the training loop: DistributedDataParallel expects its "
                    "parameters to stay where they were when it was wrapped; save `model.module.state_dict()` "
                    "without moving the model",
                )
                return

    def _least_nested(self, candidates: list[_Candidate]) -> list[_Candidate]:
        """The candidates (statement first) inside the fewest loops."""
        depth = {id(c): len(list(self.index.enclosing_loops(c[0]))) for c in candidates}
        least = min(depth.values(), default=0)
        return [c for c in candidates if depth[id(c)] == least]

    def _built_class(self, stmt: cst.SimpleStatementLine) -> cst.ClassDef | None:
        """The script's own class a statement builds the model from: ``Net`` in ``model = Net().to(device)``."""
        value = _value(stmt)
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            value = value.func.value
        if isinstance(value, cst.Call):
            return self.index.local_class(value.func)
        return None

    def _refuse_parts_run_directly(self, model: Model) -> bool:
        """``gan.generator(z)`` in the training step, where ``gan`` itself never runs there.

        DistributedDataParallel averages gradients only for what runs through its forward: parts
        run directly (one optimizer per part, or one over the whole model) would train apart on
        every rank. A custom method of the model is DDP303's.
        """
        index = self.index
        if model.item is not None:
            return False
        methods = {
            name for cls in self._model_classes.get(model.ref, ()) for (owner, name) in index.functions if owner is cls
        }
        parts: list[cst.Call] = []
        for read in self._reads_after_wrap(model.ref, model.insert_after):
            if not self._in_training(read):
                continue
            if self._runs_model(read):
                return False
            part = index.parent(read)
            call = index.parent(part)
            if (
                isinstance(call, cst.Call)
                and call.func is part
                and (
                    isinstance(part, cst.Subscript)
                    or (
                        isinstance(part, cst.Attribute)
                        and part.attr.value not in methods | _COMPUTES_NOTHING | torch_api.WRAPPER_SAFE_ATTRIBUTES
                    )
                )
            ):
                parts.append(call)
        if not parts:
            return False
        text = index.module.code_for_node(parts[0].func)
        self.program.report(
            parts[0],
            PARTS_RUN_DIRECTLY,
            f"the training step runs `{text}(...)`, a part of `{model.expression}`, but never `{model.expression}` "
            "itself: DistributedDataParallel averages gradients only for a forward through the wrapped model, so "
            "the parts would train apart on each rank; run them through its forward(), or build each part as a "
            "model of its own",
        )
        return True

    def _in_training(self, node: cst.CSTNode) -> bool:
        """Inside a loop that runs a backward pass, or a function (other than the wrap's) that does."""
        index = self.index
        if any(index.trains(loop.body) for loop in index.enclosing_loops(node)):
            return True
        scope = index.scope_of(node)
        return isinstance(scope, cst.FunctionDef) and index.trains(scope.body) and not self._without_grad(node)

    def _warn_training_outside_forward(self, model: Model) -> None:
        """A custom method that runs submodules inside the training step bypasses DDP's gradient sync."""
        index = self.index
        for read in model.unwrap:
            attribute = index.parent(read)
            call = index.parent(attribute)
            if not (isinstance(attribute, cst.Attribute) and isinstance(call, cst.Call) and call.func is attribute):
                continue
            name = attribute.attr.value
            for cls in self._model_classes.get(model.ref, ()):
                method = index.functions.get((cls, name))
                if method is None or not self._runs_submodules(method, cls):
                    continue
                if any(index.trains(loop.body) for loop in index.enclosing_loops(call)) and not self._without_grad(
                    call
                ):
                    self.program.report(
                        call,
                        OUTSIDE_FORWARD,
                        f"`{model.expression}.{name}()` runs the model outside forward(): if the loss comes from it, "
                        "DDP does not average its gradients across ranks; route it through forward()",
                    )
                    break

    def _skipped_submodule(self, classes: set[cst.ClassDef], seen: frozenset[cst.ClassDef] = frozenset()) -> str | None:
        """A submodule that ``forward`` runs only on some calls: its parameters then get no gradient.

        ``if with_aux: aux = self.aux_head(h)``, or ``if big: return self.expert_big(h)`` before
        ``return self.expert_small(h)``: DDP then waits for gradients that never come and fails at the
        next step, unless built with ``find_unused_parameters=True``. A condition on the module's own
        attributes only (``if self.training:``, ``if self.use_dropout:``) is the same on every step.
        Submodules built from the script's own classes are followed.
        """
        index = self.index
        for cls in classes:
            forward = index.functions.get((cls, "forward"))
            self_name = index.self_name(forward) if forward is not None else None
            if forward is None or self_name is None:
                continue
            calls = [
                node
                for node in index.walk(forward.body)
                if isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and m.matches(node.func.value, m.Name(self_name))
                and (cls, node.func.attr.value) not in index.functions
            ]
            count = Counter(cast(cst.Attribute, c.func).attr.value for c in calls)
            # name the submodule run on fewest paths: ``self.recon`` rather than ``self.cls`` in
            # ``if with_recon: return self.cls(h), self.recon(h)`` / ``return self.cls(h), None``
            for call in sorted(calls, key=lambda c: count[cast(cst.Attribute, c.func).attr.value]):
                condition = self._varying_condition(call, forward, self_name)
                if condition is not None:
                    return (
                        f"`{self_name}.{cast(cst.Attribute, call.func).attr.value}` runs only when "
                        f"`{index.module.code_for_node(condition)}` holds"
                    )
            submodules = {
                sub
                for node in index.walk(cls.body)
                if isinstance(node, cst.Call)
                if (sub := index.local_class(node.func)) is not None and sub not in seen | {cls}
            }
            if submodules and (found := self._skipped_submodule(submodules, seen | classes)) is not None:
                return found
        return None

    def _varying_condition(self, call: cst.Call, forward: cst.FunctionDef, self_name: str) -> cst.BaseExpression | None:
        """The test of an ``if`` that decides whether ``call`` runs, when it may differ between steps."""
        index = self.index

        def varies(test: cst.BaseExpression) -> bool:
            names = [n for n in index.walk(test) if isinstance(n, cst.Name)]
            for name in names:
                parent = index.parent(name)
                if name.value == self_name and isinstance(parent, cst.Attribute) and parent.value is name:
                    continue  # self.training, self.use_aux
                if isinstance(parent, cst.Attribute) and parent.attr is name:
                    continue
                if index.qualified_names(name):  # torch, builtins such as isinstance, True, None
                    continue
                return True
            return False

        node: cst.CSTNode = call
        while node is not forward:
            parent = index.parent(node)
            if isinstance(parent, cst.IfExp) and node is not parent.test and varies(parent.test):
                return parent.test
            if isinstance(node, cst.If) and varies(node.test):
                return node.test
            if isinstance(node, cst.BaseStatement):
                # ``if big: return self.expert_big(h)`` earlier in the same block
                block = index.parent(node)
                if isinstance(block, cst.IndentedBlock):
                    for earlier in block.body[: block.body.index(node)]:
                        if (
                            isinstance(earlier, cst.If)
                            and varies(earlier.test)
                            and any(isinstance(n, cst.Return) for n in index.walk(earlier.body))
                        ):
                            return earlier.test
            node = cast(cst.CSTNode, parent)
        return None

    def _output_used_sometimes(self, model: Model) -> str | None:
        """``out, aux = model(x)`` in the training loop with ``aux`` read only under an ``if``.

        On the other steps the parameters that only ``aux`` depends on get no gradient.
        """
        index = self.index
        scope = index.scope_of(model.insert_after)
        for read in index.mentions(scope, model.ref):
            call = index.parent(read)
            assign = index.parent(call)
            if not (
                isinstance(call, cst.Call)
                and call.func is read
                and isinstance(assign, cst.Assign)
                and len(assign.targets) == 1
                and isinstance(assign.targets[0].target, cst.Tuple)
            ):
                continue
            loops = list(index.enclosing_loops(call))
            if not loops or not index.trains(loops[0].body):
                continue
            for element in assign.targets[0].target.elements:
                output = element.value
                if not isinstance(output, cst.Name) or output.value == "_":
                    continue
                ref = index.ref_of(output, scope)
                if ref is None:
                    continue
                uses = [
                    r
                    for r in index.mentions(loops[0].body, ref)
                    if index.starts_after(r, assign) and not index.inside(r, assign)
                ]
                tests = [self._only_when(use, loops[0]) for use in uses]
                if uses and all(test is not None for test in tests):
                    condition = index.module.code_for_node(cast(cst.BaseExpression, tests[0]))
                    return f"`{output.value}` from `{model.expression}(...)` is used only when `{condition}` holds"
        return None

    def _only_when(self, node: cst.CSTNode, loop: cst.CSTNode) -> cst.BaseExpression | None:
        """The test of an ``if`` inside ``loop`` whose body (not its test) holds ``node``."""
        child = node
        for ancestor in self.index.ancestors(node):
            if ancestor is loop:
                return None
            if isinstance(ancestor, cst.If) and child is not ancestor.test:
                return ancestor.test
            child = ancestor
        return None

    def _small_batch_norm(self, model: Model, classes: set[cst.ClassDef]) -> cst.Call | None:
        """A DataLoader whose batch (a number) is at most 16, where the model has BatchNorm layers."""
        index = self.index
        places: list[cst.CSTNode] = [*classes, *self._submodule_classes(classes)]
        places += [
            s for s in index.statements if index.mentions(s, model.ref) and not index.after(s, model.insert_after)
        ]
        if not any(
            isinstance(node, (cst.Name, cst.Attribute))
            and (dotted := index.module.code_for_node(node)).rsplit(".", 1)[-1].startswith("BatchNorm")
            and "Sync" not in dotted
            for place in places
            for node in index.walk(place)
        ):
            return None
        for call in index.calls:
            if index.is_call_to(call, torch_api.DATALOADER):
                batch = argument(call, "batch_size", 1)
                if batch is not None and isinstance(batch.value, cst.Integer) and int(batch.value.value) <= 16:
                    return call
        return None

    def _submodule_classes(self, classes: set[cst.ClassDef]) -> set[cst.ClassDef]:
        """The program's own classes that ``classes`` build submodules from (followed to any depth)."""
        found: set[cst.ClassDef] = set()
        frontier = set(classes)
        while frontier:
            frontier = {
                sub
                for cls in frontier
                for node in self.index.walk(cls.body)
                if isinstance(node, cst.Call) and (sub := self.index.local_class(node.func)) is not None
            } - found
            found |= frontier
        return found

    def _without_grad(self, node: cst.CSTNode) -> bool:
        """Inside ``with torch.no_grad():`` (or ``inference_mode``): no gradient can come from here."""
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, cst.With):
                for item in ancestor.items:
                    call = item.item
                    if isinstance(call, cst.Call) and self.index.qualified_names(call.func) & torch_api.NO_GRAD:
                        return True
        return False

    def _runs_submodules(self, method: cst.FunctionDef, cls: cst.ClassDef) -> bool:
        self_name = self.index.self_name(method)
        if self_name is None:
            return False
        for node in self.index.walk(method.body):
            if not isinstance(node, cst.Call):
                continue
            func = node.func
            # ``self.encoder(x)`` (a submodule, not another method), ``self.forward(x)``, ``self(x)``
            if (
                isinstance(func, cst.Attribute)
                and m.matches(func.value, m.Name(self_name))
                and func.attr.value not in _COMPUTES_NOTHING
                and ((cls, func.attr.value) not in self.index.functions or func.attr.value == "forward")
            ) or m.matches(func, m.Name(self_name)):
                return True
        return False

    def _data_parallel_model(
        self, stmt: cst.SimpleStatementLine, target: Ref, moves: list[_Move], optimizer: cst.Call
    ) -> Model:
        """``model = nn.DataParallel(model)`` is where the model is ready: DDP takes its place."""
        index = self.index
        anchor = self._climb_conditionals(stmt)
        condition = index.parent(index.parent(stmt))
        data_parallel_if = None
        if (
            anchor is not stmt
            and isinstance(condition, cst.If)
            and condition.orelse is None
            and any(
                m.matches(n, m.Name("device_count") | m.Name("is_available")) for n in self.index.walk(condition.test)
            )
        ):
            data_parallel_if = condition
        on_cuda = any(cuda and self._climb_conditionals(s) is s for s, _, cuda in moves)
        expression = self.index.spelled(target, index.scope_of(stmt))
        placed = data_parallel_if or stmt
        outer = self._climb_conditionals(placed)
        if outer is placed:
            unwrap = tuple(self._wrapper_reads(target, stmt))
            call = cast(cst.Call, _value(stmt))
            return Model(target, expression, stmt, on_cuda, True, unwrap, optimizer, call, data_parallel_if)
        # ``if use_cuda: ... model = nn.DataParallel(model)``: DDP must wrap on every path, so the
        # DataParallel line goes and the wrap follows the whole ``if``.
        insert_after = self._after_setup(outer, target)
        unwrap = tuple(self._wrapper_reads(target, insert_after))
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
        )

    def _depths(self, lineage: set[Ref]) -> dict[Ref, int]:
        """How far each place is from where the value started (following flows)."""
        roots = [r for r in lineage if not any(f.src in lineage for f in self.index.flows_into(r))]
        depth = dict.fromkeys(roots, 0)
        frontier = list(roots)
        while frontier:
            nxt = []
            for ref in frontier:
                for flow in self.index.flows_from(ref):
                    if flow.dst in lineage and depth.get(flow.dst, -1) < depth[ref] + 1 <= len(lineage):
                        depth[flow.dst] = depth[ref] + 1
                        nxt.append(flow.dst)
            frontier = nxt
        return depth

    def _climb_conditionals(self, stmt: cst.BaseStatement) -> cst.BaseStatement:
        """``if use_cuda: model.cuda()``: the wrap goes after the whole ``if``."""
        current = stmt
        while True:
            block = self.index.parent(current)
            owner = self.index.parent(block) if block is not None else None
            if isinstance(owner, cst.Else):
                owner = self.index.parent(owner)
            if isinstance(owner, cst.If) and owner is not self.index.main_guard:
                current = owner
            else:
                return current

    def _before_training(self, stmt: cst.SimpleStatementLine) -> bool:
        """Whether neither ``stmt`` nor a statement before it in its block trains."""
        index = self.index
        block = index.parent(stmt)
        siblings = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else [stmt]
        return not any(index.trains(s) for s in siblings[: siblings.index(stmt) + 1])

    def _after_setup(self, anchor: cst.BaseStatement, target: Ref) -> cst.BaseStatement:
        """The last statement after ``anchor`` that still prepares the model.

        Initialising weights (``model.apply(init)``), freezing parameters, replacing a
        submodule, loading a checkpoint, building the optimizer: all of it happens to the
        plain module, and the wrap follows it. The scan stops where the model first runs --
        a forward call, or the model handed to the script's own functions and classes.
        """
        block = self.index.parent(anchor)
        siblings = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []
        last = anchor
        for stmt in siblings[siblings.index(anchor) + 1 :]:
            if self.index.trains(stmt):
                break  # training starts here (of this model or another): the wrap must come first
            reads = self.index.mentions(stmt, target)
            if not reads:
                continue
            if any(self._runs_model(read) or self._stored_in(read) is not None for read in reads):
                break
            last = stmt
        return last

    def _stored_in(self, read: cst.BaseExpression) -> cst.BaseExpression | None:
        """What keeps a second reference to the model: ``nets`` in ``nets = [net_a, net_b]``, ``self.net = net``."""
        index = self.index
        node: cst.CSTNode = read
        parent = index.parent(node)
        while isinstance(parent, (cst.Element, cst.DictElement, cst.List, cst.Tuple, cst.Set, cst.Dict)):
            if isinstance(parent, cst.DictElement) and parent.value is not node:
                return None
            node, parent = parent, index.parent(parent)
        call = index.parent(parent)
        if (  # nets.append(net)
            isinstance(parent, cst.Arg)
            and isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value in {"append", "extend", "insert"}
            and call.args[-1] is parent
        ):
            return call.func.value
        if node is read and not (
            isinstance(parent, cst.Assign)
            and any(isinstance(t.target, (cst.Attribute, cst.Subscript)) for t in parent.targets)
        ):
            return None
        if isinstance(parent, cst.Assign) and parent.value is node:
            return parent.targets[0].target
        # ``nn.ModuleList([a, b])`` builds a new module; ``for net in [a, b]: net.to(device)`` prepares both
        return None

    def _runs_model(self, read: cst.BaseExpression) -> bool:
        parent = self.index.parent(read)
        if isinstance(parent, cst.Call) and parent.func is read:
            return True
        if isinstance(parent, cst.Arg):
            call = self.index.parent(parent)
            return isinstance(call, cst.Call) and self.index.resolve_callee(call, self.index.scope_of(call)) is not None
        return False

    def _wrapper_reads(self, target: Ref, wrap: cst.BaseStatement) -> Iterator[cst.BaseExpression]:
        """Reads of the model after it is wrapped that the wrapper does not answer for the module."""
        return (read for read in self._reads_after_wrap(target, wrap) if self._needs_module(read))

    def _reads_after_wrap(self, target: Ref, wrap: cst.BaseStatement) -> Iterator[cst.BaseExpression]:
        """Every read of the wrapped model: of its own name after the wrap, and wherever it flows from there."""
        index = self.index
        wrap_scope = index.scope_of(wrap)

        def after_wrap(node: cst.CSTNode) -> bool:
            if index.scope_of(node) is not wrap_scope and not index.inside(node, wrap_scope):
                return True
            return index.after(node, wrap)

        wrapped = {target}
        queue = [target]
        while queue:
            ref = queue.pop()
            for flow in index.flows_from(ref):
                if self._unwraps_itself(flow.dst):
                    continue  # it gets ``model.module`` (see _needs_module)
                if flow.dst not in wrapped and (ref is not target or after_wrap(flow.stmt)):
                    wrapped.add(flow.dst)
                    queue.append(flow.dst)
        for ref in wrapped:
            for scope in index.scopes_reading(ref):
                for read in index.mentions(scope, ref):
                    if ref is target and not after_wrap(read):
                        continue
                    yield read

    def _guarded_by_hasattr(self, attribute: cst.Attribute) -> bool:
        """``model.X if hasattr(model, "X") else model``: the script copes with a missing ``X`` itself.

        ``X`` may not be an attribute of the module at all (a wrapper's ``module``, or a typo that a
        single-GPU run never reaches); rewriting it to ``model.module.X`` would invent a name.
        """
        if not isinstance(attribute.value, cst.Name):
            return False
        receiver, name = attribute.value.value, attribute.attr.value
        for ancestor in self.index.ancestors(attribute):
            test = ancestor.test if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)) else None
            if test is not None and _hasattr_test(test, receiver, name):
                return True
            if isinstance(ancestor, cst.BooleanOperation) and _hasattr_test(ancestor.left, receiver, name):
                return True
        return False

    def _parameter_of(self, arg: cst.Arg) -> Ref | None:
        """The parameter of the script's own function that ``arg`` fills."""
        index = self.index
        call = index.parent(arg)
        if not isinstance(call, cst.Call):
            return None
        resolved = index.resolve_callee(call, index.scope_of(call))
        if resolved is None:
            return None
        function, implicit = resolved
        params = list(function.params.params)
        if arg.keyword is not None:
            names = [p for p in params if p.name.value == arg.keyword.value]
        elif arg.star or call.args.index(arg) + implicit >= len(params):
            return None
        else:
            names = [params[call.args.index(arg) + implicit]]
        return Ref(function, names[0].name.value) if names else None

    def _unwraps_itself(self, param: Ref) -> bool:
        """A parameter the function tests with ``hasattr(model, ...)`` and never runs: it expects a plain module."""
        function = param.scope
        if not isinstance(function, cst.FunctionDef) or param.path.startswith("self."):
            return False
        calls = [node for node in self.index.walk(function.body) if isinstance(node, cst.Call)]
        hasattr_test = m.Call(func=m.Name("hasattr"), args=[m.Arg(m.Name(param.path)), m.Arg()])
        tested = any(m.matches(call, hasattr_test) for call in calls)
        runs = any(m.matches(call.func, m.Name(param.path)) for call in calls)
        return tested and not runs

    def _needs_module(self, read: cst.BaseExpression) -> bool:
        parent = self.index.parent(read)
        if isinstance(parent, cst.Subscript) and parent.value is read:  # model[0] of an nn.Sequential
            return True
        if isinstance(parent, cst.Attribute) and parent.value is read:
            return parent.attr.value not in torch_api.WRAPPER_SAFE_ATTRIBUTES and not self._guarded_by_hasattr(parent)
        if isinstance(parent, (cst.DictElement, cst.Element)) or (
            isinstance(parent, cst.Assign) and isinstance(parent.targets[0].target, cst.Subscript)
        ):  # torch.save({"model": model, ...}, f), also through a name: checkpoint["model"] = model
            return checkpoints.saved(self.index, read)
        if isinstance(parent, cst.Arg) and (param := self._parameter_of(parent)) is not None:
            return self._unwraps_itself(param)  # unwrap(model) that tests hasattr(model, ...): give it the module
        if isinstance(parent, cst.Arg):
            call = self.index.parent(parent)
            # torch.save(model, f); an EMA or teacher copy: copy.deepcopy(model) copies the module, not the wrapper
            return (
                isinstance(call, cst.Call)
                and self.index.is_call_to(call, torch_api.SAVE | _DEEPCOPY)
                and call.args[0] is parent
            ) or checkpoints.saved(self.index, read)  # torch.save(dict(model=model), f)
        return False


def _hasattr_test(test: cst.BaseExpression, receiver: str, attribute: str) -> bool:
    """Whether ``test`` contains ``hasattr(<receiver>, "<attribute>")``."""
    pattern = m.Call(
        func=m.Name("hasattr"),
        args=[m.Arg(m.Name(receiver)), m.Arg(m.SimpleString(f'"{attribute}"') | m.SimpleString(f"'{attribute}'"))],
    )
    return bool(m.findall(test, pattern))


def _makes_trainable(node: cst.CSTNode, names: frozenset[str] | None, value: bool = True) -> bool:
    """``<name>.requires_grad = True`` or ``<name>.requires_grad_()`` / ``.requires_grad_(True)``.

    ``names`` None: any receiver. With ``value`` False: the freezing ``= False`` / ``requires_grad_(False)``.
    """
    literal = m.Name(str(value))
    arguments = m.Call(args=[m.Arg(literal)]) | m.Call(args=[]) if value else m.Call(args=[m.Arg(literal)])

    def receiver_is(value: cst.BaseExpression) -> bool:
        return names is None or (isinstance(value, cst.Name) and value.value in names)

    if isinstance(node, cst.Assign):
        return m.matches(node.value, literal) and any(
            isinstance(t.target, cst.Attribute)
            and t.target.attr.value == "requires_grad"
            and receiver_is(t.target.value)
            for t in node.targets
        )
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "requires_grad_"
        and receiver_is(node.func.value)
        and m.matches(node, arguments)
    )


def _value(stmt: cst.SimpleStatementLine) -> cst.BaseExpression:
    """The value of a one-statement line that assigns or evaluates it."""
    small = stmt.body[0]
    if not isinstance(small, (cst.Assign, cst.Expr)):
        raise TypeError(f"expected an assignment or an expression, got {type(small).__name__}")
    return small.value


def _in_the_same_parentheses(replacement: cst.BaseExpression) -> Callable[[cst.CSTNode], cst.CSTNode]:
    def replace(node: cst.CSTNode) -> cst.CSTNode:
        original = cast(cst.Call, node)
        return replacement.with_changes(lpar=original.lpar, rpar=original.rpar)

    return replace


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


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    ddp = plan.names.ddp
    wrapped_by_ddp: set[cst.Call] = set()
    for model in facts.models:
        device_ids = ", device_ids=[torch.cuda.current_device()]" if model.on_cuda else ""
        if options.find_unused_parameters or model.unused is not None:
            device_ids += ", find_unused_parameters=True"
        if model.data_parallel is not None:
            wrapped_by_ddp.add(model.data_parallel)
            inner = plan.index.module.code_for_node(model.data_parallel.args[0].value)
            replacement = cst.parse_expression(f"{ddp}({inner}{device_ids})")
            plan.replace(model.data_parallel, _in_the_same_parentheses(replacement))
            if model.data_parallel_if is not None:
                plan.inline(model.data_parallel_if)
            plan.change(model.insert_after, "nn.DataParallel -> DistributedDataParallel (one process per GPU)")
        else:
            if model.data_parallel_removed is not None:
                wrapped_by_ddp.add(cast(cst.Call, _value(model.data_parallel_removed)))
                plan.remove(model.data_parallel_removed)
                if model.data_parallel_if is not None:
                    plan.inline(model.data_parallel_if)
                plan.change(model.data_parallel_removed, "remove nn.DataParallel: each process drives one GPU")
            wrap = cst.parse_statement(f"{model.expression} = {ddp}({model.expression}{device_ids})\n")
            convert = f"{model.expression} = torch.nn.SyncBatchNorm.convert_sync_batchnorm({model.expression})\n"
            if model.item is not None:
                each, item = model.expression, model.item
                wrap = cst.parse_statement(f"{each} = [{ddp}({item}{device_ids}) for {item} in {each}]\n")
                convert = f"{each} = [torch.nn.SyncBatchNorm.convert_sync_batchnorm({item}) for {item} in {each}]\n"
            if options.sync_batchnorm:
                plan.insert_after(model.insert_after, cst.parse_statement(convert))
                plan.need_import("torch")
                plan.change(model.insert_after, f"BatchNorm layers of `{model.expression}` -> SyncBatchNorm")
            plan.insert_after(model.insert_after, wrap)
            wrapped = f"every model in `{model.expression}`" if model.item is not None else f"`{model.expression}`"
            plan.change(model.insert_after, f"wrap {wrapped} in DistributedDataParallel")
        if model.small_batch_norm is not None and not options.sync_batchnorm:
            plan.report(
                model.small_batch_norm,
                SMALL_BATCH_NORM,
                f"`{model.expression}` has BatchNorm layers and each process loads small batches: BatchNorm "
                "normalises over each rank's own batch; `--sync-bn` converts them to SyncBatchNorm",
            )
        if model.unused is not None and not options.find_unused_parameters:
            plan.change(
                model.insert_after,
                f"find_unused_parameters=True: {model.unused}, so some parameters get no gradient in a step",
            )
        for unfrozen in model.rewraps:
            rewrap = cst.parse_statement(
                f"{model.expression} = {ddp}({model.expression}.module{device_ids})"
                "  # DDP averages only the parameters that required grad when it was built\n"
            )
            plan.insert_after(unfrozen, rewrap)
            plan.change(unfrozen, f"wrap `{model.expression}` again: parameters became trainable after the wrap")
        for read in model.unwrap:
            plan.replace(read, lambda n: cst.Attribute(value=cast(cst.BaseExpression, n), attr=cst.Name("module")))
            parent = plan.index.parent(read)
            attribute = parent.attr.value if isinstance(parent, cst.Attribute) else None
            text = plan.index.module.code_for_node(read)
            call = plan.index.parent(parent)
            if attribute:
                summary = f"`{text}.{attribute}` -> `{text}.module.{attribute}`"
            elif isinstance(parent, cst.Arg) and not (
                isinstance(call, cst.Call) and plan.index.is_call_to(call, _DEEPCOPY | torch_api.SAVE)
            ):
                summary = f"pass `{text}.module`: the function tests for a plain module with hasattr()"
            elif isinstance(parent, cst.Subscript):
                summary = f"`{text}[...]` -> `{text}.module[...]`"
            elif isinstance(call, cst.Call) and plan.index.is_call_to(call, _DEEPCOPY):
                summary = f"copy `{text}.module`, not the DistributedDataParallel wrapper"
            else:
                summary = f"save `{text}.module`"
            plan.change(read, summary)
    for call in facts.data_parallel:
        if call not in wrapped_by_ddp and call.args:
            plan.replace(call, lambda n: cast(cst.Call, n).args[0].value)
            plan.change(call, "remove nn.DataParallel: each process drives one GPU")
    if facts.models:
        plan.need_import(
            "torch.nn.parallel", "DistributedDataParallel", ddp if ddp != "DistributedDataParallel" else None
        )

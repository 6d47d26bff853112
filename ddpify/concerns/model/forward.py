"""What the training step runs through a model, and what its forward may leave without a gradient.

DDP averages gradients only for a forward through the wrapped model: parts run directly are
refused (DDP310), a custom method that runs submodules is reported (DDP303), and so is a model
moved between devices in the training loop (DDP305). A submodule that forward runs only on
some steps, or an output used only under an ``if``, needs ``find_unused_parameters=True``;
BatchNorm over small per-process batches is reported (DDP308).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.concerns.model.codes import (
    INITIALISED_FROM_A_BATCH,
    MOVES_IN_TRAINING,
    OUTSIDE_FORWARD,
    PARTS_RUN_DIRECTLY,
    RETURNED_PARAMETER,
    SPARSE_PARAMETER,
)
from ddpify.concerns.model.facts import Model
from ddpify.concerns.model.reads import WrapperReads
from ddpify.engine.index import Index, Ref
from ddpify.engine.program import Program, is_backward, without_grad
from ddpify.engine.syntax import argument, dotted, parameter_names, single_target
from ddpify.engine.values import loader_batch_size

# torch's makers of sparse tensors
_SPARSE_MAKERS = frozenset(
    {"torch.sparse_coo_tensor", "torch.sparse_csr_tensor", "torch.sparse_compressed_tensor", "torch.sparse.FloatTensor"}
)
# nn.Module methods that run no submodule: ``next(self.parameters()).new_zeros(...)`` computes nothing
_COMPUTES_NOTHING = (torch_api.WRAPPER_SAFE_ATTRIBUTES - {"forward"}) | {
    "state_dict",
    "load_state_dict",
    "register_buffer",
    "register_parameter",
    "get_parameter",
    "get_buffer",
    "get_submodule",
    "named_parameters",
    "named_buffers",
    "children",
    "named_children",
    "named_modules",
}


# A submodule's own parameters, read directly (``self.users.weight[u]``).
_PARAMETERS = frozenset({"weight", "bias"})


class ForwardChecks:
    """Checks of the training step and of the forward of the script's own model classes."""

    def __init__(self, program: Program, reads: WrapperReads) -> None:
        self.program = program
        self.index = program.index
        self.reads = reads

    def warn_moves_in_training(self, target: Ref, wrap: cst.BaseStatement) -> None:
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
            if index.inside(read, wrap):
                continue  # the move the wrap follows (``model = model.to(device)``, each run of a loop of runs)
            if index.starts_after(read, wrap) and index.in_a_training_loop(read):
                self.program.report(
                    read,
                    MOVES_IN_TRAINING,
                    "the model moves between devices inside the training loop: DistributedDataParallel expects its "
                    "parameters to stay where they were when it was wrapped; save `model.module.state_dict()` "
                    "without moving the model",
                )
                return

    def refuse_parts_run_directly(self, model: Model, classes: set[cst.ClassDef]) -> bool:
        """``gan.generator(z)`` in the training step, where ``gan`` itself never runs there.

        DistributedDataParallel averages gradients only for what runs through its forward: parts
        run directly (one optimizer per part, or one over the whole model) would train apart on
        every rank. A custom method of the model is DDP303's.
        """
        index = self.index
        if model.item is not None:
            return False
        # the classes' own methods and those they inherit from the program's classes
        ancestry = {c for cls in classes for c in index.ancestry(cls)}
        methods = {name for (owner, name) in index.functions if owner in ancestry}
        parts: list[cst.Call] = []
        iterated: list[cst.BaseExpression] = []  # ``[m(x) for m in models]`` over an nn.ModuleList
        for read in self.reads.reads_after_wrap(model.ref, model.insert_after):
            if not self._in_training(read):
                continue
            handed = self.reads.parts_run_by(read)
            if self.reads.runs_model(read) and handed is None:
                return False
            if handed is not None:  # ``embed(x, model)`` that runs ``model.emb(x)``
                parts += [c for a in handed if (c := self._part_call(a, methods)) is not None]
                continue
            part = index.parent(read)
            if isinstance(part, cst.For | cst.CompFor) and part.iter is read:
                iterated.append(read)
                continue
            call = index.parent(part)
            if isinstance(part, cst.Attribute):
                if (found := self._part_call(part, methods)) is not None:
                    parts.append(found)
            elif isinstance(part, cst.Subscript) and isinstance(call, cst.Call) and call.func is part:
                parts.append(call)
        if not parts and iterated:
            self.program.report(
                iterated[0],
                PARTS_RUN_DIRECTLY,
                f"the training step runs the models in `{model.expression}` one by one, never `{model.expression}` "
                "itself: DistributedDataParallel averages gradients only for a forward through the wrapped model, "
                "so they would train apart on each rank; keep them in a plain list (each one is then wrapped), or "
                "run them through the forward() of a module that holds them",
            )
            return True
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

    def _part_call(self, attribute: cst.Attribute, methods: set[str]) -> cst.Call | None:
        """``model.emb(x)``: the call of a part (not of the model's own ``methods``, nor of one that computes
        nothing) through ``attribute``; None where ``attribute`` is not called."""
        call = self.index.parent(attribute)
        if (
            isinstance(call, cst.Call)
            and call.func is attribute
            and attribute.attr.value not in methods | _COMPUTES_NOTHING | torch_api.WRAPPER_SAFE_ATTRIBUTES
        ):
            return call
        return None

    def refuse_run_by_a_closure(self, model: Model) -> bool:
        """``center(feat, target)`` in a loss function that ``make_loss`` returns beside ``center``: the
        function keeps the module as it was before the wrap, so the step's forward never goes through the
        wrapper and DDP averages none of its gradients (the ranks' copies drift apart)."""
        index = self.index
        for place in index.upstream(model.ref):
            function = place.scope
            if not isinstance(function, cst.FunctionDef) or "." in place.path:
                continue
            for call in self._calls_through(place):
                scope = index.scope_of(call)
                if (
                    scope is function
                    or not isinstance(scope, cst.FunctionDef)
                    or not index.inside(scope, function)
                    or not self._called_in_training(Ref(function, scope.name.value))
                ):
                    continue
                self.program.report(
                    call,
                    PARTS_RUN_DIRECTLY,
                    f"the training step runs `{model.expression}` through `{place.path}(...)` in `{scope.name.value}`, "
                    f"which `{function.name.value}` returns holding the module from before the wrap: "
                    "DistributedDataParallel averages gradients only for a forward through the wrapper, so its copies "
                    f"would train apart on each rank; hand the wrapped `{model.expression}` to the function that runs "
                    "it, or build it where it is trained",
                )
                return True
        return False

    def _called_in_training(self, ref: Ref) -> bool:
        """Whether the function bound at ``ref`` is called in training under a name it reaches
        (``loss = loss_fn(logits, y)`` in the epoch loop, after ``loss_fn, center = make_loss(...)``)."""
        places = self.index.lineage(ref) | {ref}
        return any(self._in_training(call) for place in places for call in self._calls_through(place))

    def _calls_through(self, place: Ref) -> Iterator[cst.Call]:
        """The calls of what the name at ``place`` holds (``center(feat, y)``), wherever that name reads it."""
        index = self.index
        for name in index.names.get(place.path, ()):
            call = index.parent(name)
            if isinstance(call, cst.Call) and call.func is name and index.ref_of(name, index.scope_of(name)) == place:
                yield call

    def refuse_step_inside_the_model(self, model: Model, classes: set[cst.ClassDef]) -> bool:
        """``model.train_a_batch(x, y)`` whose method runs the model (``self(x)``) and the backward pass:
        the forward never goes through the wrapper, which cannot average what it does not run."""
        index = self.index
        # a base class's ``train_a_batch`` too; only the model's classes (a trainer object is not one)
        ancestry = {c for cls in classes if index.derives_from(cls, torch_api.NN_MODULE) for c in index.ancestry(cls)}
        for cls in sorted(ancestry, key=lambda c: index.order[c]):
            for (owner, name), method in sorted(index.functions.items(), key=lambda item: index.order[item[1]]):
                if owner is not cls or name == "forward" or not self._called_on(model, name, method):
                    continue
                backward = next((n for n in index.walk(method.body) if type(n) is cst.Call and is_backward(n)), None)
                if backward is None or not self._runs_submodules(method, cls):
                    continue
                self.program.report(
                    backward,
                    PARTS_RUN_DIRECTLY,
                    f"`{cls.name.value}.{name}()` runs the model and its backward pass inside the model itself: "
                    "DistributedDataParallel averages gradients only for a forward through the wrapper, which this "
                    f"step never takes; compute the loss from `{model.expression}(...)` where `{name}` is called, "
                    "and run the backward pass and the step there",
                )
                return True
        return False

    def refuse_sparse_parameter(self, model: Model, classes: set[cst.ClassDef]) -> bool:
        """``self.A_in = nn.Parameter(adjacency.to_sparse(), requires_grad=False)`` (or a buffer) in a class of
        the model: DDP's constructor broadcasts every parameter and buffer, and fails on a sparse one (DDP320)."""
        index = self.index
        every = set(classes) | self._submodule_classes(set(classes)) if classes else set()
        for cls in sorted(every, key=index.order.__getitem__):
            for node in index.walk(cls):
                if not isinstance(node, cst.Call) or not node.args:
                    continue
                if index.is_call_to(node, torch_api.PARAMETER_CLASSES):
                    held = node.args[0].value
                elif m.matches(node.func, m.Attribute(attr=m.Name("register_buffer"))) and len(node.args) > 1:
                    held = node.args[1].value
                else:
                    continue
                if self._sparse(held):
                    self.program.report(
                        node,
                        SPARSE_PARAMETER,
                        f"`{cls.name.value}` keeps a sparse tensor as a parameter or buffer "
                        f"(`{index.module_of(node).code_for_node(node)}`): DistributedDataParallel broadcasts "
                        f"every parameter and buffer of `{model.expression}` when it wraps it, and cannot broadcast "
                        "a sparse tensor; keep it as a plain attribute of the module, then convert",
                    )
                    return True
        return False

    def _sparse(self, value: cst.BaseExpression, depth: int = 0) -> bool:
        """Whether ``value`` makes a sparse tensor: ``torch.sparse_coo_tensor(...)``, ``x.to_sparse()``, or a
        call of the program's function that returns one."""
        index = self.index
        for node in index.walk(value):
            if not isinstance(node, cst.Call):
                continue
            if index.qualified_names(node.func) & _SPARSE_MAKERS or m.matches(
                node.func, m.Attribute(attr=m.Name("to_sparse") | m.Name("to_sparse_csr") | m.Name("to_sparse_coo"))
            ):
                return True
            callee = index.resolve_callee(node, index.scope_of(node)) if depth < 2 else None
            if callee is not None and any(self._sparse(v, depth + 1) for v in index.returned_values(callee[0])):
                return True
        return False

    def refuse_initialised_from_a_batch(self, model: Model, classes: set[cst.ClassDef]) -> bool:
        """A layer of the model whose forward (or a method it runs) copies into its own parameters what it
        computes from its input (``self.bias.data.copy_(-x.mean(0))`` on the first batch, an ActNorm): run
        through the wrapper on each rank's own batch, the ranks keep different weights (DDP316)."""
        index = self.index
        wrap = model.insert_after
        if any(
            isinstance(call := index.parent(read), cst.Call) and call.func is read and not index.after(read, wrap)
            for read in index.mentions(index.scope_of(wrap), model.ref)
        ):
            return False  # run on a batch before the wrap, which then hands rank 0's weights to every rank
        # where the model's classes are not known (built through helpers), every module class of the program
        every = set(classes) | self._submodule_classes(set(classes)) if classes else set(index.classes.values())
        for cls in sorted(every, key=index.order.__getitem__):
            parameters = self._parameter_fields(cls)
            if not parameters or not index.derives_from(cls, torch_api.NN_MODULE):
                continue
            for method in self._run_by(cls, frozenset({"forward"})):
                write = self._written_from_input(method, parameters)
                if write is None:
                    continue
                self.program.report(
                    write,
                    INITIALISED_FROM_A_BATCH,
                    f"`{cls.name.value}` sets its parameters from the batch it is given, in `{method.name.value}` "
                    f"(`{index.module_of(write).code_for_node(write)}`): through the wrapper, each rank would set "
                    f"them from its own batch and `{model.expression}` would train on different weights on each "
                    "rank for the whole run; initialise it before training on one batch that every rank reads "
                    "alike, then convert",
                )
                return True
        return False

    def _written_from_input(self, method: cst.FunctionDef, parameters: set[str]) -> cst.Call | None:
        """``self.bias.data.copy_(-mean)`` in ``method``, where the value reads a name of the method (its
        input, or what it computed from it): a parameter field overwritten in place from what it is given."""
        index = self.index
        self_name = index.self_name(method)
        if self_name is None:
            return None
        # the method's input, and the names it binds from it (``mean = x.mean(0)``), to a fixed point
        derived = {p.name.value for p in method.params.params[1:]}
        values = _values_bound(index, method)
        grown = True
        while grown:
            grown = False
            for name, held in values.items():
                if name not in derived and any(
                    isinstance(n, cst.Name) and n.value in derived for value in held for n in index.walk(value)
                ):
                    derived.add(name)
                    grown = True
        for node in index.walk(method.body):
            if not (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and node.func.attr.value == "copy_"
                and node.args
            ):
                continue
            written = node.func.value
            if isinstance(written, cst.Attribute) and written.attr.value == "data":
                written = written.value
            if not (
                isinstance(written, cst.Attribute)
                and m.matches(written.value, m.Name(self_name))
                and written.attr.value in parameters
            ):
                continue
            if any(isinstance(n, cst.Name) and n.value in derived for n in index.walk(node.args[0].value)):
                return node
        return None

    def _called_on(self, model: Model, name: str, method: cst.FunctionDef) -> bool:
        """Whether the program calls ``method`` on the model: ``model.name(...)`` through any place that
        holds it (a helper's parameter too)."""
        index = self.index
        if index.callers(method):
            return True
        lineage = index.lineage(model.ref)
        return any(
            isinstance(call.func, cst.Attribute)
            and call.func.attr.value == name
            and index.carried_ref(call.func.value, index.scope_of(call)) in lineage
            for call in index.calls
        )

    def _in_training(self, node: cst.CSTNode) -> bool:
        """Inside a loop that runs a backward pass, or a function (other than the wrap's) that does."""
        index = self.index
        if index.in_a_training_loop(node):
            return True
        scope = index.scope_of(node)
        return isinstance(scope, cst.FunctionDef) and index.trains(scope.body) and not without_grad(self.index, node)

    def methods_on_gradient_path(self, model: Model, classes: set[cst.ClassDef]) -> tuple[cst.Call, ...]:
        """Custom methods of the model that compute the loss of the training step (``loss =
        model.compute_loss(x, y)`` then ``loss.backward()``): these must run as the wrapper's forward.

        DDP averages the gradients only of what its own forward computes; ``model.module.method()``
        would train on each rank apart. A method that runs submodules in the training step but whose
        result cannot be followed to the backward pass is reported instead (DDP303).
        """
        index = self.index
        routed: list[cst.Call] = []
        for read in model.unwrap:
            attribute = index.parent(read)
            call = index.parent(attribute)
            if not (isinstance(attribute, cst.Attribute) and isinstance(call, cst.Call) and call.func is attribute):
                continue
            name = attribute.attr.value
            method = next(  # its own, or a base class's (``compute_all_losses`` of a ``VAE_Baseline``)
                (
                    f
                    for cls in sorted(classes, key=index.order.__getitem__)
                    if (f := index.method(cls, name)) is not None
                    and self._runs_submodules(f, index.method_class(f) or cls)
                ),
                None,
            )
            if method is None or without_grad(self.index, call) or _no_grad_method(index, method):
                continue
            function = index.scope_of(call)
            in_step = isinstance(function, cst.FunctionDef) and index.trains(function.body)  # a train_step method
            if not in_step and not index.in_a_training_loop(call):
                continue
            receiver = dotted(attribute.value)
            kept = frozenset(f"{receiver}.{field}" for field in _fields_set(index, method)) if receiver else frozenset()
            backward = backward_reached(index, call, kept)
            if backward is not None and self._steps_only_others(backward, model):
                # ``actor_loss = -critic.q1(s, actor(s))``: the critic's gradients from it are zeroed before the
                # critic's own step; run outside DDP, whose reducer would wait for the critic's other head
                continue
            if backward is not None:
                routed.append(call)
            elif (
                not (returned := index.returned_values(method))
                or not all(_a_number(v) for v in returned)
                or index.trains(method.body)
            ):
                # (a method that returns a Python number, ``1.0 - acc.mean().item()``, and runs no backward pass
                # itself gives no gradient)
                self.program.report(
                    call,
                    OUTSIDE_FORWARD,
                    f"`{model.expression}.{name}()` runs the model outside forward(), and ddpify cannot tell "
                    "whether the loss comes from it: if it does, DDP does not average its gradients across ranks; "
                    "route it through forward()",
                )
        return tuple(routed)

    def _steps_only_others(self, backward: cst.Call, model: Model) -> bool:
        """Whether the steps after ``backward`` (before the next backward of its function) are known, each
        ``opt.step()`` of an optimizer the program builds, and none of them is ``model``'s own. Any other step
        (``scaler.step(opt)``, a scheduler's, one ddpify cannot place) leaves the answer no."""
        index = self.index
        statement = index.statement_of(backward)
        function = index.scope_of(backward)
        later = [
            node
            for node in index.walk(function)
            if isinstance(node, cst.Call) and index.scope_of(node) is function and index.after(node, statement)
        ]
        steps: list[Ref | None] = []
        for node in later:
            if is_backward(node):
                break
            if m.matches(node.func, m.Attribute(attr=m.Name("step"))):
                receiver = cast(cst.Attribute, node.func).value
                steps.append(None if node.args else index.carried_ref(receiver, function))
        own = self._optimizer_places(model.optimizer)
        if not steps or not own:
            return False
        every = set().union(*(self._optimizer_places(call) for call in self._optimizers()))
        return all(step is not None and step in every and step not in own for step in steps)

    def _optimizers(self) -> list[cst.Call]:
        index = self.index
        return [
            call
            for call in index.calls
            if any(torch_api.builds_optimizer(name) for name in index.qualified_names(call.func))
        ]

    def _optimizer_places(self, optimizer: cst.Call) -> set[Ref]:
        """Where the optimizer built by ``optimizer`` is kept (``self.critic_opt``, ``opt``)."""
        index = self.index
        holder = index.parent(optimizer)
        if not (isinstance(holder, cst.Assign) and len(holder.targets) == 1):
            return set()
        ref = index.ref_of(holder.targets[0].target, index.scope_of(holder))
        return index.downstream(ref) if ref is not None else set()

    def skipped_submodule(
        self,
        classes: set[cst.ClassDef],
        entries: frozenset[str] = frozenset({"forward"}),
        seen: frozenset[cst.ClassDef] = frozenset(),
    ) -> str | None:
        """A submodule that ``forward`` runs only on some calls: its parameters then get no gradient.

        ``if with_aux: aux = self.aux_head(h)``, or ``if big: return self.expert_big(h)`` before
        ``return self.expert_small(h)``: DDP then waits for gradients that never come and fails at the
        next step, unless built with ``find_unused_parameters=True``. So does a flag of the module's own
        (``if self.do_bn: x = self.bn(x)``): where it is off, the submodule never gets a gradient.
        ``if self.training:`` holds in every training step.
        ``entries`` are the methods the step runs as the wrapper's forward (``forward``, and a
        ``compute_loss`` routed through it). Submodules built from the script's own classes are followed.
        """
        index = self.index
        for cls in sorted(classes, key=index.order.__getitem__):
            forward = index.method(cls, "forward")  # its own, or a base class's
            self_name = index.self_name(forward) if forward is not None else None
            if forward is not None and self_name is not None:
                idle = (
                    self._never_used(cls, entries)
                    or self._dropped_output(cls, forward, self_name)
                    or self._slice_run(cls, forward, self_name)
                    or self._ignored_argument(cls, forward, self_name)
                )
                if idle is not None:
                    return idle
            # the methods run as the step's forward: ``forward``, and those an enclosing module calls on this one
            # (``self.updater.get_updated_memory(memory, messages)``)
            for name in sorted(entries | {"forward"}):
                method = index.method(cls, name)
                method_self = index.self_name(method) if method is not None else None
                if method is not None and method_self is not None:
                    found = self._skipped_in(cls, method, method_self)
                    if found is not None:
                        return found
            for sub, called in self._submodules_called(cls, seen | classes).items():
                if (found := self.skipped_submodule({sub}, called | {"forward"}, seen | classes)) is not None:
                    return found
        return None

    def _submodules_called(
        self, cls: cst.ClassDef, seen: frozenset[cst.ClassDef]
    ) -> dict[cst.ClassDef, frozenset[str]]:
        """The program's module classes ``cls`` builds, each with the methods ``cls`` calls on a field
        (``self.updater.get_updated_memory(...)``), in source order."""
        index = self.index
        subs = {  # built here, or by a function of the program that returns one (``get_updater(kind)``)
            sub: set[str]()
            for node in index.walk(cls.body)
            if isinstance(node, cst.Call)
            for sub in index.classes_built(node)
            if sub not in seen | {cls}
        }
        for node in index.walk(cls.body):
            if (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and isinstance(node.func.value, cst.Attribute)
            ):
                for sub, called in subs.items():
                    if index.method(sub, node.func.attr.value) is not None:
                        called.add(node.func.attr.value)
        return {sub: frozenset(called) for sub, called in sorted(subs.items(), key=lambda s: index.order[s[0]])}

    def _skipped_in(self, cls: cst.ClassDef, forward: cst.FunctionDef, self_name: str) -> str | None:
        """A submodule that the method ``forward`` of ``cls`` runs only on some calls."""
        index = self.index
        picked = self._picked_by_an_argument(forward, self_name)
        if picked is not None:
            return picked
        own = [node for node in index.walk(forward.body) if isinstance(node, cst.Call)]
        calls = [
            node
            for node in own
            if isinstance(node.func, cst.Attribute)
            and m.matches(node.func.value, m.Name(self_name))
            and index.method(cls, node.func.attr.value) is None  # (a method of its own or a base class's)
        ]
        # ``nn.parallel.data_parallel(self.main, x, gpus)`` runs ``self.main`` as ``self.main(x)`` does
        calls += [
            node
            for node in own
            if index.is_call_to(node, torch_api.DATA_PARALLEL_FUNCTION)
            and node.args
            and m.matches(node.args[0].value, m.Attribute(value=m.Name(self_name)))
        ]
        calls += self._methods_with_own_weights(cls, forward, self_name)
        weightless = self._parameter_free_fields(cls)
        field = {c: _run_field(c) for c in calls}
        calls = [c for c in calls if field[c] not in weightless]
        count = Counter(field[c] for c in calls)
        conditions = {call: self._varying_condition(call, forward, self_name) for call in calls}
        always = {
            name for name in count if _on_every_path(index, [(c, conditions[c]) for c in calls if field[c] == name])
        }
        # name the submodule run on fewest paths: ``self.recon`` rather than ``self.cls`` in
        # ``if with_recon: return self.cls(h), self.recon(h)`` / ``return self.cls(h), None``
        for call in sorted(calls, key=lambda c: count[field[c]]):
            condition = conditions[call]
            if condition is not None and field[call] not in always:
                holds = "holds" if _runs_where_it_holds(index, call, condition) else "does not hold"
                return (
                    f"`{self_name}.{field[call]}` runs only when "
                    f"`{index.module_of(condition).code_for_node(condition)}` {holds}"
                )
        return None

    def _picked_by_an_argument(self, forward: cst.FunctionDef, self_name: str) -> str | None:
        """``{2: self.up2, 3: self.up3}[scale](h)``, or ``self.heads[task](h)`` (an ``nn.ModuleDict`` or
        ``nn.ModuleList``), where the key is an argument of ``forward``: each call runs one of the parts, and
        the others get no gradient in that step."""
        index = self.index
        arguments = set(parameter_names(forward)[1:])
        for call in index.walk(forward.body):
            if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Subscript)):
                continue
            held, elements = call.func.value, call.func.slice
            if len(elements) != 1 or not isinstance(elements[0].slice, cst.Index):
                continue
            key = elements[0].slice.value
            if not (isinstance(key, cst.Name) and key.value in arguments) or any(
                isinstance(n, cst.Name) and n.value == key.value and index.stored(n) for n in index.walk(forward.body)
            ):
                continue
            parts = (
                [e.value for e in held.elements if isinstance(e, cst.DictElement)]
                if isinstance(held, cst.Dict)
                else [held]
            )
            if (
                parts
                and all(m.matches(p, m.Attribute(value=m.Name(self_name))) for p in parts)
                and (len(parts) > 1 or isinstance(held, cst.Attribute))
            ):
                code = index.module_of(call).code_for_node(call.func)
                return f"`{code}` runs one part picked by `{key.value}`"
        return None

    def _methods_with_own_weights(self, cls: cst.ClassDef, forward: cst.FunctionDef, self_name: str) -> list[cst.Call]:
        """``self.reweight(h)`` in forward, a method of the class that runs weights of its own (``self.eps =
        nn.Parameter(...)``, a submodule) that forward itself never mentions: where forward skips the call,
        those weights get no gradient, as a skipped submodule's."""
        index = self.index
        built, _ = self._fields(cls)
        in_forward = {a.attr.value for a in index.walk(forward.body) if isinstance(a, cst.Attribute)}
        found = []
        for node in index.walk(forward.body):
            if not (
                type(node) is cst.Call
                and isinstance(node.func, cst.Attribute)
                and m.matches(node.func.value, m.Name(self_name))
                and index.method(cls, node.func.attr.value) is not None
            ):
                continue
            methods = self._run_by(cls, frozenset({node.func.attr.value}))
            used = {a.attr.value for f in methods for a in index.walk(f.body) if isinstance(a, cst.Attribute)}
            if (used & set(built)) - in_forward:
                found.append(node)
        return found

    def _dropped_output(self, cls: cst.ClassDef, forward: cst.FunctionDef, self_name: str) -> str | None:
        """A submodule of the program's own class whose forward returns several outputs, one of which
        ``forward`` drops (``seq, _ = self.encoder(ids)``) where only that one runs some of the
        submodule's own layers (a pooler under a token-level head): those get no gradient in any step."""
        index = self.index
        classes = {
            name: sub
            for _, name, value in self._init_fields(cls)
            if isinstance(value, cst.Call) and (sub := index.local_class(value.func)) is not None
        }
        for node in index.walk(forward.body):
            if not (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call)):
                continue
            target, func = node.targets[0].target, node.value.func
            if not (
                isinstance(target, (cst.Tuple, cst.List))
                and m.matches(func, m.Attribute(value=m.Name(self_name)))
                and (sub := classes.get(cast(cst.Attribute, func).attr.value)) is not None
            ):
                continue
            elements = [e.value for e in target.elements]
            if any(isinstance(e, cst.StarredElement) for e in target.elements):
                continue
            read = {n.value for n in index.walk(forward.body) if isinstance(n, cst.Name) and not index.stored(n)}
            dropped = {i for i, e in enumerate(elements) if isinstance(e, cst.Name) and e.value not in read}
            if not dropped:  # ``if self.pooling == "cls": return hidden[:, 0]``: dropped on that return's path
                for path in self._return_paths(forward, node):
                    dropped |= {i for i, e in enumerate(elements) if isinstance(e, cst.Name) and e.value not in path}
            if not dropped or len(dropped) == len(elements):
                continue
            only = self._layers_only_in(sub, len(elements), dropped)
            if only:
                code = index.module_of(node).code_for_node(node).strip()
                return f"`{code}` drops an output that only `{only}` of `{sub.name.value}` computes"
        return None

    def _ignored_argument(self, cls: cst.ClassDef, forward: cst.FunctionDef, self_name: str) -> str | None:
        """``self.mixing(self.query(x), self.key(x), self.value(x))`` in forward, where the forward of a class
        that ``self.mixing`` may hold never reads its ``keys`` parameter: ``self.key`` runs in every step and
        its parameters never get a gradient. The field's classes are those ``__init__`` builds for it, or
        those the class's constructions pass for it (``AttentionLayer(SpectralMixing(n), width)``)."""
        index = self.index
        built, _ = self._fields(cls)
        free = self._parameter_free_fields(cls)
        for call in index.walk(forward.body):
            if not (
                isinstance(call, cst.Call)
                and isinstance(call.func, cst.Attribute)
                and m.matches(call.func.value, m.Name(self_name))
                and index.method(cls, call.func.attr.value) is None
            ):
                continue
            for sub in self._field_classes(cls, call.func.attr.value):
                method = index.method(sub, "forward")
                if method is None or any(p.star for p in call.args):
                    continue
                for arg in call.args:
                    parameter = _parameter_filled(method, call, arg)
                    part = _run_field_of(index, forward, arg.value, self_name)
                    if (
                        parameter is None
                        or part is None
                        or part not in built
                        or part in free
                        or parameter in _names_read(index, method)
                        or _reads_every_argument(method)
                    ):
                        continue
                    return f"`{self_name}.{part}` runs, but `{sub.name.value}.forward` never reads its `{parameter}`"
        return None

    def _field_classes(self, cls: cst.ClassDef, name: str) -> list[cst.ClassDef]:
        """The program's module classes the field ``name`` of ``cls`` may hold (see :meth:`_ignored_argument`)."""
        index = self.index
        found: list[cst.ClassDef] = []
        for init, field, value in self._init_fields(cls):
            if field != name or value is None:
                continue
            if isinstance(value, cst.Call):
                found += index.classes_built(value)
                continue
            parameters = init.params.params
            position = next((i for i, p in enumerate(parameters) if m.matches(value, m.Name(p.name.value))), None)
            if position is None or index.class_of.get(init) is not cls:
                continue
            for call in index.calls:
                if index.local_class(call.func) is not cls:
                    continue
                for arg in call.args:
                    keyword = arg.keyword.value if arg.keyword is not None else None
                    if arg.star or (keyword is None and list(call.args).index(arg) + 1 != position):
                        continue
                    if keyword is not None and keyword != parameters[position].name.value:
                        continue
                    if isinstance(arg.value, cst.Name) and (ref := index.root_ref(arg.value, index.scope_of(arg))):
                        found += index.constructed_classes(ref)
                    else:
                        found += index.classes_built(arg.value)
        return [c for i, c in enumerate(found) if c not in found[:i]]

    def _return_paths(self, forward: cst.FunctionDef, start: cst.CSTNode) -> Iterator[set[str]]:
        """For each ``return`` of ``forward`` after ``start``, the names read on every way to it from there: in
        its value, and in the statements before it in its block and its enclosing blocks."""
        index = self.index

        def reads(node: cst.CSTNode) -> set[str]:
            return {n.value for n in index.walk(node) if isinstance(n, cst.Name) and not index.stored(n)}

        for node in index.walk(forward.body):
            if not isinstance(node, cst.Return) or not index.after(node, start) or index.scope_of(node) is not forward:
                continue
            names = reads(node.value) if node.value is not None else set()
            inner: cst.CSTNode | None = index.statement_of(node)
            while inner is not None and inner is not forward:
                block = index.parent(inner)
                if isinstance(block, cst.IndentedBlock) and isinstance(inner, cst.BaseStatement):
                    body = list(block.body)
                    for earlier in body[: body.index(inner)] if inner in body else []:
                        if index.after(earlier, start):
                            names |= reads(earlier)
                inner = block
            yield names

    def _slice_run(self, cls: cst.ClassDef, forward: cst.FunctionDef, self_name: str) -> str | None:
        """``for block in self.blocks[: step + 1]:`` in forward, a slice of a list of layers that its bounds
        choose (a progressively grown GAN): the layers past it get no gradient in that step."""
        index = self.index
        built = set(self._fields(cls)[0])
        for node in index.walk(forward.body):
            if not isinstance(node, cst.For):
                continue
            held = node.iter
            if not (
                isinstance(held, cst.Subscript)
                and m.matches(held.value, m.Attribute(value=m.Name(self_name)))
                and cast(cst.Attribute, held.value).attr.value in built
                and any(isinstance(e.slice, cst.Slice) for e in held.slice)
            ):
                continue
            bounds = [
                part
                for e in held.slice
                if isinstance(e.slice, cst.Slice)
                for part in (e.slice.lower, e.slice.upper)
                if part is not None
            ]
            if any(not isinstance(b, (cst.Integer, cst.UnaryOperation)) for b in bounds):
                code = index.module_of(held).code_for_node(held)
                return f"`{code}` runs only the layers its bounds choose"
        return None

    def _layers_only_in(self, cls: cst.ClassDef, width: int, dropped: set[int]) -> str | None:
        """A layer of ``cls`` (``self.pooler``) that its forward runs only for the outputs at ``dropped``
        of the ``width`` it returns, followed through the names forward binds; None where every
        ``return`` of it is not a tuple of that width."""
        index = self.index
        forward = index.method(cls, "forward")
        self_name = index.self_name(forward) if forward is not None else None
        if forward is None or self_name is None:
            return None
        values = _values_bound(index, forward)
        returns = [r for r in index.walk(forward.body) if isinstance(r, cst.Return) and index.scope_of(r) is forward]
        if not returns or not all(isinstance(r.value, cst.Tuple) and len(r.value.elements) == width for r in returns):
            return None

        def layers(expr: cst.BaseExpression) -> set[str]:
            found: set[str] = set()
            wanted, seen = [expr], set()
            while wanted:
                current = wanted.pop()
                for n in index.walk(current):
                    if isinstance(n, cst.Call) and m.matches(n.func, m.Attribute(value=m.Name(self_name))):
                        found.add(cast(cst.Attribute, n.func).attr.value)
                    elif isinstance(n, cst.Name) and n.value in values and n.value not in seen:
                        seen.add(n.value)
                        wanted += values[n.value]
            return found

        kept: set[str] = set()
        lost: set[str] = set()
        for r in returns:
            for i, element in enumerate(cast(cst.Tuple, r.value).elements):
                (lost if i in dropped else kept).update(layers(element.value))
        own = set(self._fields(cls)[0])
        only = sorted((lost - kept) & own)
        return f"{self_name}.{only[0]}" if only else None

    def input_gradient(self, classes: set[cst.ClassDef], entries: frozenset[str]) -> str | None:
        """A method run as the wrapper's forward that returns a gradient of the model's output with respect to
        its input (``torch.autograd.grad(H.sum(), x, create_graph=True)``, a Hamiltonian network's vector field):
        the loss of that gradient gives no gradient to the parameters it does not depend on (the last layer's
        bias), and DDP waits for them unless it looks for unused parameters."""
        index = self.index
        for cls in sorted(classes, key=index.order.__getitem__):
            for name in sorted(entries | {"forward"}):
                method = index.method(cls, name)
                if method is None:
                    continue
                for node in index.walk(method.body):
                    if (
                        isinstance(node, cst.Call)
                        and index.is_call_to(node, torch_api.AUTOGRAD_GRAD)
                        and (graph := argument(node, "create_graph")) is not None
                        and not m.matches(graph.value, m.Name("False"))
                    ):
                        return (
                            f"`{cls.name.value}.{name}` returns a gradient with respect to its input "
                            "(`torch.autograd.grad(..., create_graph=True)`), which does not depend on every "
                            "parameter (the last layer's bias)"
                        )
        return None

    def refuse_returned_parameter(self, model: Model, classes: set[cst.ClassDef], unused: str) -> bool:
        """``return outputs, self.log_vars`` in forward, where some steps give a parameter no gradient
        (``unused`` says which): DDP cannot train that model whatever ``find_unused_parameters``."""
        index = self.index
        for cls in sorted(classes, key=index.order.__getitem__):
            forward = index.method(cls, "forward")
            self_name = index.self_name(forward) if forward is not None else None
            if forward is None or self_name is None:
                continue
            parameters = self._parameter_fields(cls)
            for node in index.walk(forward.body):
                if not isinstance(node, cst.Return) or node.value is None:
                    continue
                for value in _elements(node.value):
                    if m.matches(value, m.Attribute(value=m.Name(self_name))) and (
                        cast(cst.Attribute, value).attr.value in parameters
                    ):
                        self.program.report(
                            value,
                            RETURNED_PARAMETER,
                            f"`{cls.name.value}.forward` returns its parameter `{index.module_of(value).code_for_node(value)}`"
                            f", and {unused}",
                        )
                        return True
        return False

    def _init_fields(self, cls: cst.ClassDef) -> Iterator[tuple[cst.FunctionDef, str, cst.BaseExpression | None]]:
        """Each ``self.x = ...`` (or ``self.x: T = ...``, or ``self.x, self.y = x, y``) of ``__init__`` of the
        class and of its bases: the ``__init__``, the field's name and the value it is given."""
        index = self.index
        for owner in index.ancestry(cls):
            init = index.functions.get((owner, "__init__"))
            self_name = index.self_name(init) if init is not None else None
            if init is None or self_name is None:
                continue
            for node in index.walk(init.body):
                target = single_target(node)
                if target is not None and m.matches(target, m.Attribute(value=m.Name(self_name))):
                    yield init, cast(cst.Attribute, target).attr.value, cast(cst.Assign | cst.AnnAssign, node).value
                elif isinstance(node, cst.Assign) and len(node.targets) == 1:
                    for field, value in _paired(node.targets[0].target, node.value):
                        if m.matches(field, m.Attribute(value=m.Name(self_name))):
                            yield init, cast(cst.Attribute, field).attr.value, value

    def _parameter_fields(self, cls: cst.ClassDef) -> set[str]:
        """The fields ``__init__`` of the class (or of a base) sets to ``nn.Parameter(...)``, also through
        ``self.register_parameter("bias", nn.Parameter(...))``."""
        index = self.index
        found = {
            name
            for _, name, value in self._init_fields(cls)
            if isinstance(value, cst.Call) and index.qualified_names(value.func) & torch_api.PARAMETER_CLASSES
        }
        for owner in index.ancestry(cls):
            init = index.functions.get((owner, "__init__"))
            for node in index.walk(init.body) if init is not None else ():
                if (
                    isinstance(node, cst.Call)
                    and isinstance(node.func, cst.Attribute)
                    and node.func.attr.value == "register_parameter"
                    and node.args
                    and isinstance(node.args[0].value, cst.SimpleString)
                    and isinstance(name := node.args[0].value.evaluated_value, str)
                ):
                    found.add(name)
        return found

    def _parameter_free_fields(self, cls: cst.ClassDef) -> set[str]:
        """The fields ``__init__`` of the class (or of a base) sets to a layer of torch with no parameters
        (``self.pool = nn.MaxPool2d(2)``) or to a plain function (``self.trace = exact if e else approx``,
        ``F.relu``, a lambda), and to nothing else."""
        free: set[str] = set()
        other: set[str] = set()
        for init, name, value in self._init_fields(cls):
            names = self.index.qualified_names(value.func) if isinstance(value, cst.Call) else frozenset()
            plain = value is not None and self._plain_function(value, init)
            empty = isinstance(value, cst.Call) and self._holds_nothing(value)
            (free if plain or empty or (names and names <= torch_api.PARAMETER_FREE_LAYERS) else other).add(name)
        return free - other

    def _holds_nothing(self, value: cst.Call) -> bool:
        """``LockedDropout()``: a module class of the program whose ``__init__`` (and its bases') sets no field and
        that registers nothing: it has no parameters to leave without a gradient."""
        index = self.index
        cls = index.local_class(value.func)
        if cls is None or any(True for _ in self._init_fields(cls)):
            return False
        return not any(
            (
                isinstance(node, cst.Attribute)
                and node.attr.value in ("register_parameter", "register_buffer", "add_module")
            )
            or (isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Attribute))
            for owner in index.ancestry(cls)
            for node in index.walk(owner.body)
        )

    def _plain_function(self, value: cst.BaseExpression, scope: cst.FunctionDef) -> bool:
        """Whether ``value`` is a function, never a module: a lambda, a function of the program or of
        ``torch.nn.functional``/``torch``, or a choice between such (``exact if flag else approx``)."""
        if isinstance(value, cst.Lambda):
            return True
        if isinstance(value, cst.IfExp):
            return self._plain_function(value.body, scope) and self._plain_function(value.orelse, scope)
        if not isinstance(value, (cst.Name, cst.Attribute)):
            return False
        if self.index.function_named(value, scope) is not None:
            return True
        names = self.index.qualified_names(value)
        return bool(names) and all(
            q.startswith("torch.nn.functional.") or (q.startswith("torch.") and q.count(".") == 1 and q[6:].islower())
            for q in names
        )

    def _fields(self, cls: cst.ClassDef) -> tuple[list[str], list[str]]:
        """The fields ``__init__`` of the class and of its bases builds as modules or parameters
        (``self.head = nn.Linear(...)``, ``self.eps = nn.Parameter(...)``, a class of the program, an
        EMA copy), and those it sets from its parameters (``self.teacher = teacher``)."""
        index = self.index
        built: list[str] = []
        passed: list[str] = []
        for init, name, value in self._init_fields(cls):
            parameters = {p.name.value for p in init.params.params[1:]}  # all but ``self``
            if isinstance(value, cst.Call) and (
                any(q.startswith("torch.nn.") for q in index.qualified_names(value.func))
                or index.local_class(value.func) is not None
                or "copy.deepcopy" in index.qualified_names(value.func)  # an EMA copy of a part
            ):
                built.append(name)
            elif isinstance(value, cst.Name) and value.value in parameters:
                passed.append(name)
        return built, passed

    def _holders(self, cls: cst.ClassDef) -> dict[str, set[str]]:
        """For each field, the fields ``__init__`` builds around it: ``{"projector": {"encoder"}}`` for
        ``self.encoder = nn.Sequential(self.backbone, self.projector)``."""
        index = self.index
        holders: dict[str, set[str]] = {}
        for owner in index.ancestry(cls):
            init = index.functions.get((owner, "__init__"))
            self_name = index.self_name(init) if init is not None else None
            if init is None or self_name is None:
                continue
            for node in index.walk(init.body):
                target = single_target(node)
                if target is None or not m.matches(target, m.Attribute(value=m.Name(self_name))):
                    continue
                value = cast(cst.Assign | cst.AnnAssign, node).value
                for part in index.walk(value) if value is not None else ():
                    if isinstance(part, cst.Attribute) and m.matches(part.value, m.Name(self_name)):
                        holders.setdefault(part.attr.value, set()).add(cast(cst.Attribute, target).attr.value)
        return holders

    def _never_used(self, cls: cst.ClassDef, entries: frozenset[str]) -> str | None:
        """Why a submodule gets no gradient from the wrapper's forward, if one does not: ``__init__`` builds it
        (``self.label_emb = nn.Embedding(...)``, an EMA copy ``self.ema_model = deepcopy(self.model)``) and
        nothing forward runs mentions it, or forward runs it only under ``torch.no_grad()`` (a teacher handed
        to a distiller, ``self.teacher = teacher``)."""
        index = self.index
        built, passed = self._fields(cls)  # passed: ``self.teacher = teacher``, a module if forward calls it
        forward = index.method(cls, "forward")
        self_name = (index.self_name(forward) if forward is not None else None) or "self"
        # Only what the wrapper's forward runs gets a gradient: forward (or the method the step runs as
        # forward) and the methods of the class it calls, not an EMA update or sampling beside it.
        methods = [f for f in self._run_by(cls, entries) if not _no_grad_method(index, f)]
        holders = self._holders(cls)
        weightless = self._parameter_free_fields(cls)  # ``self.idrop = nn.Dropout(p)``: nothing to wait for
        for name in (*(b for b in built if b not in weightless), *passed):
            mentions = [a for f in methods for a in index.attributes.get(name, ()) if index.inside(a, f)]
            if not mentions and name in built:
                # ``self.encoder = nn.Sequential(self.backbone, self.projector)``: run through the module holding it
                held = [h for h in sorted(holders.get(name, ())) if h in built]
                if not any(index.inside(a, f) for h in held for a in index.attributes.get(h, ()) for f in methods):
                    if self._run_outside_in_training(cls, name):
                        continue  # ``model.head(h)`` in the step's loss: a gradient every step, which DDP awaits
                    return f"`{self_name}.{name}` is built but forward() never runs it"
                continue
            runs = [a for a in mentions if isinstance(call := index.parent(a), cst.Call) and call.func is a]
            if runs and all(without_grad(self.index, a) for a in mentions):
                return f"forward() runs `{self_name}.{name}` only under torch.no_grad()"
            # ``self.teacher(x)``, or a method of it (``self.teacher.extract_feature(x)``)
            calls = [call for a in mentions if (call := _run_through(index, a)) is not None]
            if calls and len(calls) == len(mentions) and all(self._detached(call) for call in calls):
                return f"forward() uses what `{self_name}.{name}` computes only detached"
        return None

    def part_used_outside(self, classes: set[cst.ClassDef], model: Model) -> str | None:
        """A part of the model (``model.decoder``) that the training step uses from outside forward, if any:
        read through the model itself (a place of its lineage), not any ``x.decoder`` of the program."""
        index = self.index
        lineage = set(index.lineage(model.ref))
        for cls in sorted(classes, key=index.order.__getitem__):
            for name in self._fields(cls)[0]:
                reads = [
                    read
                    for read in index.attributes.get(name, ())
                    if index.ref_of(read.value, index.scope_of(read)) in lineage
                ]
                if reads and self._run_outside_in_training(cls, name, reads):
                    return name
        return None

    def _run_outside_in_training(self, cls: cst.ClassDef, name: str, reads: list[cst.Attribute] | None = None) -> bool:
        """Whether the training step reads the field ``name`` of a ``cls`` model from outside its class
        (``model.linear(h)`` in a likelihood helper the loop calls): that part gets a gradient in every step,
        not through forward, and marking it unused (``find_unused_parameters``) makes DDP see it ready twice."""
        index = self.index
        own = {f for f, c in index.class_of.items() if c is cls}
        for read in index.attributes.get(name, ()) if reads is None else reads:
            function = next((a for a in index.ancestors(read) if isinstance(a, cst.FunctionDef)), None)
            if function is not None and index.method_scope(function) in own:
                continue  # (a method of the class, or a function nested in one)
            parent = index.parent(read)
            # ``model.decoder.weight`` handed to a loss (a sampled softmax) is a read of the part's own weights
            weights = isinstance(parent, cst.Attribute) and parent.attr.value in _PARAMETERS
            if without_grad(index, read) or (
                isinstance(parent, cst.Attribute) and parent.value is read and not weights
            ):
                continue  # ``model.ema_body.parameters()`` under no_grad: an update beside the step, no gradient
            if index.in_a_training_loop(read) or any(
                index.in_a_training_loop(call) for call in (index.callers(function) if function is not None else ())
            ):
                return True
        return False

    def _detached(self, call: cst.Call) -> bool:
        """Whether every use of ``call``'s result is ``.detach()``: ``t = self.teacher(x)`` and then only
        ``t.detach()`` (also ``self.teacher(x).detach()``), so no gradient reaches the module that ran. The
        result may pass through a subscript (``feats[i].detach()``), a list or tuple built around it
        (``[self.teacher(x)]``) and names bound to it or to its parts (``feats, out = self.teacher.extract(x)``,
        ``out`` unused); it must be read somewhere."""
        reads: list[cst.CSTNode] = []
        return self._only_detached(call, reads, 0) and bool(reads)

    def _only_detached(self, value: cst.CSTNode, reads: list[cst.CSTNode], depth: int) -> bool:
        index = self.index
        parent = index.parent(value)
        if depth > 6 or parent is None:
            return False
        if isinstance(parent, cst.Attribute) and parent.value is value:
            reads.append(parent)
            return parent.attr.value == "detach"
        if isinstance(parent, cst.Subscript) and parent.value is value:
            return self._only_detached(parent, reads, depth + 1)
        if isinstance(parent, cst.Element) and isinstance(display := index.parent(parent), (cst.List, cst.Tuple)):
            return self._only_detached(display, reads, depth + 1)
        if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1 and parent.value is value):
            return False
        names = list(_target_names(parent.targets[0].target))
        if not names:
            return False
        scope = index.scope_of(value)
        for name in names:
            ref = index.ref_of(name, scope)
            if ref is None or not isinstance(ref.scope, cst.FunctionDef):
                return False
            for read in index.mentions(ref.scope, ref):
                if read is not name and not self._only_detached(read, reads, depth + 1):
                    return False
        return True

    def _run_by(self, cls: cst.ClassDef, entries: frozenset[str]) -> list[cst.FunctionDef]:
        """The methods instances of ``cls`` run for ``entries`` (their own or a base class's), and those they
        call or name on ``self`` (``super().forward(x)`` too), to any depth."""
        index = self.index
        found = [f for name in sorted(entries) if (f := index.method(cls, name)) is not None]
        for method in found:  # grows as it goes
            self_name = index.self_name(method)
            for node in index.walk(method.body):
                if not isinstance(node, cst.Attribute):
                    continue
                if m.matches(node.value, m.Name(self_name or "")):
                    callee = index.method(cls, node.attr.value)
                elif m.matches(node.value, m.Call(func=m.Name("super"))):
                    owner = index.class_of.get(method)
                    bases = index.bases(owner) if owner is not None else []
                    callee = next((f for b in bases if (f := index.method(b, node.attr.value)) is not None), None)
                else:
                    continue
                if callee is not None and callee not in found:
                    found.append(callee)
        return found

    def _never_passed(self, forward: cst.FunctionDef, name: cst.Name) -> bool:
        """Whether ``name`` is a parameter of ``forward`` with a constant default that no call of the model
        passes (``forward(self, x, saved=None)``, every ``model(x)`` without ``saved``): the same in every
        step. False where no call of the model is found, or one passes arguments through ``*``/``**``."""
        index = self.index
        cls = index.method_class(forward)
        params = [p for p in forward.params.params if p.name.value != index.self_name(forward)]
        position = next((i for i, p in enumerate(params) if p.name.value == name.value), None)
        ref = Ref(forward, name.value)
        if cls is None or position is None or index.ref_of(name, forward) != ref or any(index.values_assigned(ref)):
            return False
        default = params[position].default
        if not (isinstance(default, cst.Name) and default.value in ("None", "True", "False")) and not isinstance(
            default, cst.Integer | cst.Float | cst.SimpleString
        ):
            return False
        found = False
        for call in index.calls:
            if not self._calls_the_model(call, cls):
                continue
            found = True
            if any(a.star for a in call.args) or any(
                (a.keyword is not None and a.keyword.value == name.value) for a in call.args
            ):
                return False
            if sum(1 for a in call.args if a.keyword is None) > position:
                return False
        return found

    def _calls_the_model(self, call: cst.Call, cls: cst.ClassDef) -> bool:
        """``model(x)`` where ``model`` holds an instance of ``cls`` (or ``self(x)`` in one of its methods)."""
        index = self.index
        func = call.func
        if not isinstance(func, cst.Name | cst.Attribute):
            return False
        scope = index.scope_of(call)
        if isinstance(func, cst.Name) and isinstance(scope, cst.FunctionDef) and func.value == index.self_name(scope):
            return index.method_class(scope) is cls
        ref = index.ref_of(func, scope)
        return ref is not None and cls in set(index.constructed_classes(ref))

    def _varying_condition(self, call: cst.Call, forward: cst.FunctionDef, self_name: str) -> cst.BaseExpression | None:
        """The test of an ``if`` that decides whether ``call`` runs, when it may differ between steps."""
        index = self.index

        def varies(test: cst.BaseExpression) -> bool:
            names = [n for n in index.walk(test) if isinstance(n, cst.Name)]
            for name in names:
                parent = index.parent(name)
                if (
                    name.value == self_name
                    and isinstance(parent, cst.Attribute)
                    and parent.value is name
                    and parent.attr.value == "training"
                ):
                    continue  # self.training: true in every training step
                if isinstance(parent, cst.Attribute) and parent.attr is name:
                    continue
                if index.qualified_names(name):  # torch, builtins such as isinstance, True, None
                    continue
                if self._never_passed(forward, name):  # ``saved=None`` that no call of the model passes
                    continue
                return True
            return False

        attr = _run_field(call)

        built_under = _built_only_under(index, index.method_class(forward), attr)

        def decides(test: cst.BaseExpression, runs_where_it_holds: bool) -> bool:
            # ``if self.downsample is not None: identity = self.downsample(x)``: the submodule runs
            # whenever it exists, so its parameters, where it has any, get a gradient in every step; so
            # does one built and run under the same test (``if self.cfg == "resnet":`` in both)
            exists = _tests_existence(test, self_name, attr)
            if runs_where_it_holds and built_under is not None and _spelled(index, test) == built_under:
                return False
            return varies(test) and (exists is None or exists != runs_where_it_holds)

        node: cst.CSTNode = call
        while node is not forward:
            parent = index.parent(node)
            if isinstance(parent, cst.IfExp) and node is not parent.test and decides(parent.test, node is parent.body):
                return parent.test
            if isinstance(node, cst.If) and decides(node.test, index.inside(call, node.body)):
                return node.test
            if isinstance(node, cst.BaseStatement):
                # ``if big: return self.expert_big(h)`` earlier in the same block
                block = index.parent(node)
                if isinstance(block, cst.IndentedBlock):
                    for earlier in block.body[: block.body.index(node)]:
                        if (
                            isinstance(earlier, cst.If)
                            and decides(earlier.test, False)
                            and any(isinstance(n, cst.Return) for n in index.walk(earlier.body))
                        ):
                            return earlier.test
            node = cast(cst.CSTNode, parent)
        return None

    def small_batch_norm(self, model: Model, classes: set[cst.ClassDef]) -> cst.Call | None:
        """A DataLoader whose batch (a number) is at most 16, where the model has BatchNorm layers."""
        index = self.index
        places: list[cst.CSTNode] = [*classes, *self._submodule_classes(classes)]
        places += [
            s for s in index.statements if index.mentions(s, model.ref) and not index.after(s, model.insert_after)
        ]
        if not any(
            isinstance(node, (cst.Name, cst.Attribute))
            and (node.value if isinstance(node, cst.Name) else node.attr.value).startswith("BatchNorm")
            and "Sync" not in index.module.code_for_node(node)
            for place in places
            for node in index.walk(place)
        ):
            return None
        for call in index.calls:
            if index.builds_loader(call):
                batch = loader_batch_size(index, call)
                if isinstance(batch, cst.Name) and (ref := index.ref_of(batch, index.scope_of(call))) is not None:
                    # ``batch_size_train = 12`` at module level: a name given one number
                    values = [value for _, value in index.values_assigned(ref)]
                    batch = values[0] if len(values) == 1 else batch
                if isinstance(batch, cst.Integer) and int(batch.value) <= 16:
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

    def _part_method_computes_nothing(self, cls: cst.ClassDef, field: str, name: str, depth: int) -> bool:
        """``self.rnn.init_hidden(bsz)``, where every class of the program that ``__init__`` builds for ``rnn``
        has that method and none of them runs a submodule in it (it makes zeros)."""
        classes = [
            sub
            for _, each, value in self._init_fields(cls)
            if each == field and isinstance(value, cst.Call)
            for sub in self.index.classes_built(value)
        ]
        methods = [self.index.method(sub, name) for sub in classes]
        return (
            depth < 3
            and bool(classes)
            and all(
                method is not None and not self._runs_submodules(method, sub, depth + 1)
                for method, sub in zip(methods, classes, strict=True)
            )
        )

    def _runs_submodules(self, method: cst.FunctionDef, cls: cst.ClassDef, depth: int = 0) -> bool:
        """Whether ``method`` computes with the model's parameters: it runs a submodule, reads a
        submodule's weights (``self.users.weight``), or calls a method of the class that does."""
        self_name = self.index.self_name(method)
        if self_name is None:
            return False
        for node in self.index.walk(method.body):
            if isinstance(node, cst.Attribute) and node.attr.value in _PARAMETERS:
                owner = node.value  # ``self.embedding.weight``
                if (
                    isinstance(owner, cst.Attribute)
                    and m.matches(owner.value, m.Name(self_name))
                    and self.index.method(cls, owner.attr.value) is None
                ):
                    return True
            if not isinstance(node, cst.Call):
                continue
            func = node.func
            # ``self.encoder(x)`` (a submodule, not another method), ``self.forward(x)``, ``self(x)``; ``model(x)``
            # after ``model = self.train()``
            if (
                isinstance(func, cst.Attribute)
                and m.matches(func.value, m.Name(self_name))
                and func.attr.value not in _COMPUTES_NOTHING
                and (self.index.method(cls, func.attr.value) is None or func.attr.value == "forward")
            ) or (isinstance(func, cst.Name) and func.value in _names_of_self(method, self_name)):
                return True
            if (  # ``self.decoder.reconstruct_error(x, z)``: a method of a submodule ``__init__`` builds or gets
                isinstance(func, cst.Attribute)
                and isinstance(func.value, cst.Attribute)
                and m.matches(func.value.value, m.Name(self_name))
                and func.value.attr.value in {name for names in self._fields(cls) for name in names}
                and func.attr.value not in _COMPUTES_NOTHING
                and not self._part_method_computes_nothing(cls, func.value.attr.value, func.attr.value, depth)
            ):
                return True
            if (  # ``self.propagate()``, a method of the class that does
                depth < 3
                and isinstance(func, cst.Attribute)
                and m.matches(func.value, m.Name(self_name))
                and (inner := self.index.method(cls, func.attr.value)) is not None  # (its own or a base's)
                and inner is not method
                and self._runs_submodules(inner, cls, depth + 1)
            ):
                return True
        return False


def _parameter_filled(function: cst.FunctionDef, call: cst.Call, arg: cst.Arg) -> str | None:
    """The parameter of the method ``function`` (its ``self`` skipped) that ``arg`` of ``call`` fills."""
    parameters = [*function.params.posonly_params, *function.params.params][1:]
    if arg.keyword is not None:
        names = {p.name.value for p in (*parameters, *function.params.kwonly_params)}
        return arg.keyword.value if arg.keyword.value in names else None
    position = list(call.args).index(arg)
    return parameters[position].name.value if position < len(parameters) else None


def _run_field_of(index: Index, forward: cst.FunctionDef, value: cst.BaseExpression, self_name: str) -> str | None:
    """``key`` of ``self.key(x)``, the field whose output is the whole argument: also through tensor
    methods (``self.key(x).view(b, n, h, -1)``) and a name bound to that right before and read nowhere else
    (``keys = self.key(keys).view(...)`` ... ``self.mixing(queries, keys, values)``)."""
    if isinstance(value, cst.Name):
        name = value
        assigns = [
            a
            for a in _assignments(forward.body)
            if m.matches(single_target(a), m.Name(name.value)) and index.after(name, a)
        ]
        if not assigns or index.scope_of(assigns[-1]) is not forward:
            return None
        later = [
            n
            for n in index.walk(forward.body)
            if isinstance(n, cst.Name) and n.value == name.value and not index.stored(n) and index.after(n, assigns[-1])
        ]
        if later != [name]:
            return None
        value = assigns[-1].value
    while (
        isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and isinstance(value.func.value, cst.Call)
    ):
        value = value.func.value  # ``self.key(x).view(...)``
    if (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and m.matches(value.func.value, m.Name(self_name))
    ):
        return value.func.attr.value
    return None


def _names_read(index: Index, function: cst.FunctionDef) -> set[str]:
    return {n.value for n in index.walk(function.body) if isinstance(n, cst.Name) and not index.stored(n)}


def _reads_every_argument(function: cst.FunctionDef) -> bool:
    """``*args`` or ``**kwargs``: where the arguments are read as a whole."""
    params = function.params
    return isinstance(params.star_arg, cst.Param) or params.star_kwarg is not None


def _a_number(value: cst.BaseExpression | None) -> bool:
    """Whether ``value`` is a Python number, which carries no gradient: ``x.item()``, ``float(...)``, a literal, or
    arithmetic of such."""
    if isinstance(value, (cst.Integer, cst.Float)):
        return True
    if isinstance(value, cst.BinaryOperation):
        return _a_number(value.left) and _a_number(value.right)
    if isinstance(value, cst.UnaryOperation):
        return _a_number(value.expression)
    if isinstance(value, cst.Call):
        func = value.func
        if isinstance(func, cst.Attribute):
            return func.attr.value == "item" and not value.args
        return isinstance(func, cst.Name) and func.value in ("float", "int", "round")
    return False


# Module methods that return the module itself
_RETURNS_SELF = frozenset({"train", "eval", "to", "cuda", "cpu", "float", "half", "double", "requires_grad_"})


def _names_of_self(method: cst.FunctionDef, self_name: str) -> set[str]:
    """``self``, and the names ``method`` binds to it: ``model = self``, ``model = self.train()``."""
    names = {self_name}
    for node in _assignments(method.body):
        value = node.value
        while (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in _RETURNS_SELF
        ):
            value = value.func.value
        if isinstance(value, cst.Name) and value.value in names:
            names |= {t.target.value for t in node.targets if isinstance(t.target, cst.Name)}
    return names


def _assignments(node: cst.CSTNode) -> Iterator[cst.Assign]:
    """The assignments in ``node``, in source order, not inside nested functions or classes."""
    for child in node.children:
        if isinstance(child, cst.Assign):
            yield child
        if not isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            yield from _assignments(child)


def _no_grad_method(index: Index, method: cst.FunctionDef) -> bool:
    """``@torch.no_grad()`` (or ``inference_mode``) on the method: no gradient comes from it."""
    for decorator in method.decorators:
        func = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
        if index.qualified_names(func) & torch_api.NO_GRAD:
            return True
    return False


def reaches_backward(index: Index, call: cst.Call, kept: frozenset[str] = frozenset()) -> bool:
    """Whether the value of ``call`` reaches a ``.backward()`` in its own function: directly, or through
    names (and ``self`` attributes) assigned from it, in the order the statements run; ``kept`` are the
    places the call itself stores to (``model.loss`` after ``model.step(x)`` sets ``self.loss``)."""
    return backward_reached(index, call, kept) is not None


def backward_reached(index: Index, call: cst.Call, kept: frozenset[str] = frozenset()) -> cst.Call | None:
    """The first ``.backward()`` that the value of ``call`` reaches (see :func:`reaches_backward`)."""
    return next(backwards_reached(index, call, kept), None)


def backwards_reached(
    index: Index,
    call: cst.Call,
    kept: frozenset[str] = frozenset(),
    *,
    through_detach: bool = True,
    through_input_gradients: bool = True,
) -> Iterator[cst.Call]:
    """Each ``.backward()`` that the value of ``call`` reaches, in order (see :func:`reaches_backward`); where
    ``through_detach`` is False, a value read only through ``.detach()`` carries no gradient on
    (``critic(fake.detach())``); where ``through_input_gradients`` is False too, neither does a value read only
    inside ``torch.autograd.grad(...)`` (a gradient penalty: what it gives back is a gradient with respect to
    the input, which reaches only some of the model's parameters)."""
    scope = index.scope_of(call)
    names: set[str] = set()

    def carries(expr: cst.BaseExpression) -> bool:
        if through_detach:
            return expr is call or index.inside(call, expr) or _mentions_any(index, expr, names)
        skip = _detached_values(index, expr, input_gradients=not through_input_gradients)
        if expr is call or (index.inside(call, expr) and not any(call is s or index.inside(call, s) for s in skip)):
            return True
        return _mentions_any(index, expr, names, skip=skip)

    for node in index.walk(scope):
        if node is call:
            names.update(kept)
        if isinstance(node, cst.Call) and is_backward(node):
            receiver = cast(cst.Attribute, node.func).value
            if any(carries(arg) for arg in [receiver, *(a.value for a in node.args)]):
                yield node
        if isinstance(node, cst.Expr) and isinstance(node.value, cst.Call) and index.scope_of(node) is scope:
            # ``parts.append(model.embed(x))``: the container now holds the value
            method = node.value.func
            if isinstance(method, cst.Attribute) and any(carries(a.value) for a in node.value.args):
                names.update(_bound_names(index, method.value))
        if isinstance(node, cst.Assign | cst.AugAssign | cst.AnnAssign) and index.scope_of(node) is scope:
            value = node.value
            if value is None:
                continue
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            if carries(value):
                for target in targets:
                    names.update(_bound_names(index, target))
            elif not through_detach and isinstance(node, cst.Assign):
                # ``fake_out = critic(fake.detach())`` after ``fake_out = critic(fake)``: the name holds
                # a value without the gradient now
                names.difference_update(t.value for t in targets if isinstance(t, cst.Name))


def _detached_values(index: Index, expr: cst.BaseExpression, *, input_gradients: bool = False) -> set[cst.CSTNode]:
    """The parts of ``expr`` that carry no gradient on: the receivers of ``.detach()``, ``.item()``, ``.size()``
    and the like, of ``.data``, ``.shape`` and ``.device``, what ``len()`` is given (``torch.zeros(len(fake),
    1)``), and with ``input_gradients`` every ``torch.autograd.grad(...)`` call."""
    found: set[cst.CSTNode] = set()
    for node in index.walk(expr):
        if input_gradients and isinstance(node, cst.Call) and index.is_call_to(node, torch_api.AUTOGRAD_GRAD):
            found.add(node)
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value in _NO_GRADIENT_METHODS:
                found.add(node.func.value)
        elif isinstance(node, cst.Call) and m.matches(node.func, m.Name("len")) and node.args:
            found.add(node.args[0].value)
        elif isinstance(node, cst.Attribute) and node.attr.value in ("shape", "device", "dtype", "ndim", "data"):
            found.add(node.value)
    return found


_NO_GRADIENT_METHODS = frozenset({"detach", "item", "size", "dim", "numel", "tolist", "numpy", "argmax", "argmin"})


def _elements(value: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """``value``, or each element of the tuples and lists it is made of."""
    if isinstance(value, cst.Tuple | cst.List):
        for element in value.elements:
            yield from _elements(element.value)
    else:
        yield value


def _on_every_path(index: Index, calls: list[tuple[cst.Call, cst.BaseExpression | None]]) -> bool:
    """Whether the calls of one submodule, each with the test that decides whether it runs, run it on every
    path: one runs whatever the tests, or two run on the two sides of one test (``if self.use_tf: x =
    self.embed(y)`` / ``else: x = self.embed(prev)``; ``if flat: return self.out(h)`` then ``return
    self.out(self.hidden(h))``)."""
    if any(condition is None for _, condition in calls):
        return True
    sides: dict[cst.BaseExpression, set[bool]] = {}
    for call, condition in calls:
        assert condition is not None
        sides.setdefault(condition, set()).add(_runs_where_it_holds(index, call, condition))
    return any(len(found) == 2 for found in sides.values())


def _runs_where_it_holds(index: Index, call: cst.Call, test: cst.BaseExpression) -> bool:
    """Whether ``call`` runs where ``test`` (from :meth:`ForwardChecks._varying_condition`) holds: in the body of its
    ``if``, not in its ``else`` nor after an earlier ``if`` that returns."""
    owner = index.parent(test)
    if isinstance(owner, cst.If | cst.IfExp) and index.inside(call, owner):
        return index.inside(call, owner.body) or call is owner.body
    return False


def _fields_set(index: Index, method: cst.FunctionDef) -> set[str]:
    """The attributes of ``self`` that ``method`` assigns (``self.loss = ...``)."""
    self_name = index.self_name(method)
    return {
        target.target.attr.value
        for node in index.walk(method.body)
        if isinstance(node, cst.Assign)
        for target in node.targets
        if isinstance(target.target, cst.Attribute) and m.matches(target.target.value, m.Name(self_name or ""))
    }


def _values_bound(index: Index, function: cst.FunctionDef) -> dict[str, list[cst.BaseExpression]]:
    """Each name (or dotted field) that ``function``'s assignments bind, with every value it is given."""
    values: dict[str, list[cst.BaseExpression]] = {}
    for node in index.walk(function.body):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                for name in _bound_names(index, target.target):
                    values.setdefault(name, []).append(node.value)
    return values


def _run_through(index: Index, field: cst.CSTNode) -> cst.Call | None:
    """The call that runs the module read at ``field``: ``field(x)``, or a method of it (``field.encode(x)``)."""
    parent = index.parent(field)
    if isinstance(parent, cst.Call) and parent.func is field:
        return parent
    if isinstance(parent, cst.Attribute) and parent.value is field:
        call = index.parent(parent)
        if isinstance(call, cst.Call) and call.func is parent:
            return call
    return None


def _paired(
    target: cst.BaseExpression, value: cst.BaseExpression
) -> Iterator[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """Each target of ``a, b = x, y`` with the value it gets (element by element, where both sides are
    displays of one length)."""
    if isinstance(target, cst.Tuple | cst.List) and isinstance(value, cst.Tuple | cst.List):
        if len(target.elements) == len(value.elements) and not any(
            isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements)
        ):
            for left, right in zip(target.elements, value.elements, strict=True):
                yield from _paired(left.value, right.value)
        return
    yield target, value


def _target_names(target: cst.BaseExpression) -> Iterator[cst.Name]:
    """The plain names an assignment target binds (``a`` and ``b`` of ``a, (b, _) = ...``); none where it
    also stores into a subscript or an attribute."""
    if isinstance(target, cst.Tuple | cst.List):
        found = [list(_target_names(e.value)) for e in target.elements if not isinstance(e, cst.StarredElement)]
        if all(found) and len(found) == len(target.elements):
            for names in found:
                yield from names
    elif isinstance(target, cst.Name):
        yield target


def _bound_names(index: Index, target: cst.BaseExpression) -> Iterator[str]:
    if isinstance(target, cst.Tuple | cst.List):
        for element in target.elements:
            yield from _bound_names(index, element.value)
    elif isinstance(target, cst.StarredElement | cst.Subscript):
        yield from _bound_names(index, target.value)
    elif text := dotted(target):
        yield text


def _mentions_any(index: Index, expr: cst.BaseExpression, names: set[str], skip: Collection[cst.CSTNode] = ()) -> bool:
    """Whether ``expr`` reads one of ``names``, outside the subtrees ``skip``."""
    if not names:
        return False
    return any(
        isinstance(node, cst.Name | cst.Attribute)
        and dotted(node) in names
        and not any(node is s or index.inside(node, s) for s in skip)
        for node in index.walk(expr)
    )


def _run_field(call: cst.Call) -> str:
    """The field a call of forward runs: ``main`` in ``self.main(x)`` and in ``data_parallel(self.main, x)``."""
    func = call.func
    last = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    first = call.args[0].value if call.args else None
    if last == "data_parallel" and isinstance(first, cst.Attribute):
        return first.attr.value
    return cast(cst.Attribute, func).attr.value


def _built_only_under(index: Index, cls: cst.ClassDef | None, attr: str) -> str | None:
    """The test under which the class assigns ``self.<attr>``, where every assignment of it stands in the body of
    an ``if`` of that one test (``if self.cfg == "resnet": self.convert = nn.Conv2d(...)``); None otherwise."""
    if cls is None:
        return None
    tests: set[str] = set()
    for node in index.walk(cls.body):
        if not (isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Attribute)):
            continue
        target = node.target
        if target.attr.value != attr or not isinstance(target.value, cst.Name):
            continue
        function = index.scope_of(node)
        if not isinstance(function, cst.FunctionDef) or target.value.value != index.self_name(function):
            continue
        owner = next((a for a in index.ancestors(node) if isinstance(a, cst.If | cst.FunctionDef)), None)
        if not isinstance(owner, cst.If) or not index.inside(node, owner.body):
            return None
        tests.add(_spelled(index, owner.test))
    return tests.pop() if len(tests) == 1 else None


def _spelled(index: Index, expr: cst.BaseExpression) -> str:
    return " ".join(index.module_of(expr).code_for_node(expr).split())


def _tests_existence(test: cst.BaseExpression, self_name: str, attr: str) -> bool | None:
    """Whether ``test`` holds exactly where the submodule ``self.<attr>`` exists (``self.proj is not None``,
    ``self.proj``, ``hasattr(self, "proj")``): True; exactly where it does not (``self.proj is None``, ``not
    self.proj``): False; None for any other test."""
    field = m.Attribute(value=m.Name(self_name), attr=m.Name(attr))
    if m.matches(test, field) or m.matches(
        test, m.Call(func=m.Name("hasattr"), args=[m.Arg(m.Name(self_name)), m.Arg(m.SimpleString())])
    ):
        if isinstance(test, cst.Call):
            name = cast(cst.SimpleString, test.args[1].value).evaluated_value
            return True if name == attr else None
        return True
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _tests_existence(test.expression, self_name, attr)
        return None if inner is None else not inner
    if (
        isinstance(test, cst.Comparison)
        and len(test.comparisons) == 1
        and m.matches(test.left, field)
        and m.matches(test.comparisons[0].comparator, m.Name("None"))
    ):
        operator = test.comparisons[0].operator
        return True if isinstance(operator, cst.IsNot) else False if isinstance(operator, cst.Is) else None
    return None

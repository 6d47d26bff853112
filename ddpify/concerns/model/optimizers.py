"""Which models each ``torch.optim`` optimizer trains, traced from its ``params`` through the value flow."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.concerns import model_collections
from ddpify.engine.called import enclosing_function
from ddpify.engine.index import Index, Ref
from ddpify.engine.syntax import argument, assigned, parameter_names
from ddpify.engine.values import built_by, passed_values

# what a piece of ``params`` is traced to: ``X.parameters()``, or ``X.weight`` of a module ``X``
Traced = cst.Call | cst.Attribute


# torch's learning-rate schedulers and weight averaging: stepped like an optimizer, built over one
_SCHEDULERS = ("torch.optim.lr_scheduler.", "torch.optim.swa_utils.")


class TrainedModels:
    """The script's optimizers, and the models (or lists of models) whose parameters each one holds."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.lists: dict[Ref, model_collections.ModelList] = {}  # the lists of models traced so far
        self._all_trained: set[Ref] | None = None
        self._stepped: frozenset[str] | None = None
        self._optimizers: tuple[cst.Call, ...] | None = None
        self._traced: dict[Ref, list[Traced]] = {}  # each name traced, with the parameters calls it holds
        self._reused = 0  # how many times a name was found traced before

    def optimizers(self) -> Iterator[cst.Call]:
        """``torch.optim.X(...)`` calls, however torch.optim was imported; and anything else built over a
        model's parameters that the script calls ``.step()`` on: ``getattr(optim, args.optim)(...)``, an
        optimizer class of the program's own (a SAM-style wrapper)."""
        if self._optimizers is None:
            self._optimizers = tuple(
                call
                for call in self.index.calls
                if self._torch_optimizer(call) or self._stepped_over_parameters(call) or self._factory_params(call)
            )
        return iter(self._optimizers)

    def params_of(self, optimizer: cst.Call) -> cst.BaseExpression | None:
        """What the optimizer built by ``optimizer`` takes as its ``params``."""
        factory = self._factory_params(optimizer)
        if factory is not None:
            return factory
        params_arg = argument(optimizer, "params", 0)
        return params_arg.value if params_arg is not None else None

    def _factory_params(self, call: cst.Call) -> cst.BaseExpression | None:
        """``get_instance(torch.optim, "optimizer", config, params)``: a helper of the program that returns
        ``getattr(module, name)(*args, **kwargs)``, handed ``torch.optim``; the argument that becomes the
        optimizer's ``params`` (the first of ``*args``, or the parameter the inner call passes first)."""
        index = self.index
        if not any(index.qualified_names(a.value) & {torch_api.OPTIMIZER_MODULE} for a in call.args):
            return None
        resolved = index.resolve_callee(call, index.scope_of(call))
        if resolved is None:
            return None
        function, implicit = resolved
        names = parameter_names(function)[implicit:]
        star = function.params.star_arg
        star_name = star.name.value if isinstance(star, cst.Param) else None
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        for made in index.returned_values(function):
            if not isinstance(made, cst.Call):
                continue
            getter = made.func
            if not (isinstance(getter, cst.Call) and m.matches(getter.func, m.Name("getattr")) and getter.args):
                continue
            module = getter.args[0].value
            if not (isinstance(module, cst.Name) and module.value in names):
                continue
            given = positional[names.index(module.value)] if names.index(module.value) < len(positional) else None
            if given is None or torch_api.OPTIMIZER_MODULE not in index.qualified_names(given):
                continue
            first = made.args[0] if made.args else None
            if first is None:
                return None
            if first.star == "*" and m.matches(first.value, m.Name(star_name or "")):
                return positional[len(names)] if len(positional) > len(names) else None
            if not first.star and isinstance(first.value, cst.Name) and first.value.value in names:
                position = names.index(first.value.value)
                return positional[position] if position < len(positional) else None
        return None

    def _torch_optimizer(self, call: cst.Call) -> bool:
        for name in self.index.qualified_names(call.func):
            parts = name.split(".")
            if (
                name.startswith(torch_api.OPTIMIZER_MODULE + ".")
                and not set(parts[2:]) & torch_api.NOT_OPTIMIZERS
                and parts[-1][:1].isupper()
            ):
                return True
        return False

    def _stepped_over_parameters(self, call: cst.Call) -> bool:
        """``opt = <anything>(model.parameters(), ...)`` and ``opt.step(...)`` (or ``opt.first_step()``...)
        somewhere in the program."""
        index = self.index
        first = argument(call, "params", 0)
        if first is None or first.star:
            return False
        places = {place for target in index.holders(call) for place in index.downstream(target)}
        if not any(place.path.rpartition(".")[2] in self._stepped_names() for place in places):
            return False
        literal = any(
            isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and n.func.attr.value in torch_api.PARAMETER_METHODS
            for n in index.walk(first.value)
        )
        if any(index.is_call_to(call, names) for names in (torch_api.SAVE,)) or self._torch_optimizer(call):
            return False
        if isinstance(first.value, cst.Call) and self._torch_optimizer(first.value):
            return False  # ``Warmup(torch.optim.Adam(model.parameters()), ...)``: the Adam inside is the optimizer
        if any(q.startswith(_SCHEDULERS) for q in index.qualified_names(call.func)):
            return False  # ``ReduceLROnPlateau(self.optimizer, ...)``: stepped, and over an optimizer
        if any(
            isinstance(value, cst.Call) and self._torch_optimizer(value) for value in built_by(index, first.value) or ()
        ):
            return False  # ``get_schedule(optimizer, ...)`` after ``optimizer = torch.optim.AdamW(...)``
        stepped = any(
            isinstance(read_parent := index.parent(read), cst.Attribute)
            and read_parent.attr.value.endswith("step")  # step(), SAM's first_step() / second_step()
            and isinstance(index.parent(read_parent), cst.Call)
            for place in places
            for scope in index.scopes_reading(place)
            for read in index.mentions(scope, place)
        )
        if not stepped or literal:
            return stepped
        # ``AdamW(grouped_parameters)`` of a library, ``optim_name([{"params": base_params}, ...])``: param
        # groups built from a model before the call
        found: list[Traced] = []
        self._trace(first.value, found, set())
        return bool(found)

    def _stepped_names(self) -> frozenset[str]:
        """The last names of what the program calls ``.step()`` (or ``.first_step()``...) on: ``optimizer``
        for ``self.optimizer.step()``."""
        if self._stepped is None:
            names = set()
            for call in self.index.calls:
                func = call.func
                if isinstance(func, cst.Attribute) and func.attr.value.endswith("step"):
                    receiver = func.value
                    if isinstance(receiver, cst.Name):
                        names.add(receiver.value)
                    elif isinstance(receiver, cst.Attribute):
                        names.add(receiver.attr.value)
            self._stepped = frozenset(names)
        return self._stepped

    def trained_refs(self, optimizer: cst.Call) -> tuple[list[Ref], cst.BaseExpression | None]:
        """The models whose parameters the optimizer holds, and the first piece of its ``params`` not traced to one.

        ``params`` is taken apart -- ``itertools.chain(a.parameters(), b.parameters())``, ``list(a...) +
        list(b...)``, param-group dicts, ``filter(...)``, comprehensions, a list filled in a loop over
        ``named_parameters()`` -- and every piece must come from some module's ``parameters()``: a bare
        tensor or a parameter from elsewhere would train without DDP averaging its gradients.
        """
        params = self.params_of(optimizer)
        if params is None:
            return [], optimizer
        calls: list[Traced] = []
        untraced = self._trace(params, calls, set())
        refs: list[Ref] = []
        for call in calls:
            receiver = call.value if isinstance(call, cst.Attribute) else cast(cst.Attribute, call.func).value
            listed = model_collections.taken_from(self.index, receiver)
            whole = model_collections.parts_of_one_model(self.index, listed) if listed is not None else None
            found: Ref | None
            if whole is not None:
                # ``b = [model.conv1, model.conv2]`` for ``b[i].parameters()`` (one learning rate per part)
                listed, found = None, whole
            elif listed is not None:
                self.lists[listed.ref] = listed
                found = listed.ref
            else:
                found = self._module_ref(receiver)
            if found is None:
                return refs, untraced or receiver
            for model in (
                self._whole_model(found, call)
                or self._callers_receivers(found)
                or self._callers_arguments(found)
                or [found]
            ):
                model = self._inside_data_parallel(model)
                if model not in refs:
                    refs.append(model)
        return refs, untraced

    def _inside_data_parallel(self, ref: Ref) -> Ref:
        """``model`` for ``model.module`` where ``model`` holds ``nn.DataParallel(...)``: the model it wraps is
        the one trained (``get_params(model.module, "head")`` after ``model = nn.DataParallel(model)``, also
        for the helper's parameter that every call hands ``model.module``)."""
        index = self.index
        function = ref.scope
        if isinstance(function, cst.FunctionDef) and ref.path in parameter_names(function):
            given: set[Ref | None] = set()
            for value in passed_values(index, ref) or ():
                outer = None
                if isinstance(value, cst.Attribute) and value.attr.value == "module":
                    outer = index.ref_of(value.value, index.scope_of(value))
                given.add(outer if outer is not None and self._data_parallel(outer) else None)
            found = given.pop() if len(given) == 1 else None
            return found or ref
        if not ref.path.endswith(".module"):
            return ref
        outer = Ref(ref.scope, ref.path.removesuffix(".module"))
        return outer if self._data_parallel(outer) else ref

    def _data_parallel(self, ref: Ref) -> bool:
        """Whether ``ref`` holds ``nn.DataParallel(...)`` built where it is assigned (not by a builder nor handed
        in: the reads of ``.module`` before the wrap are made plain only where the wrapper is removed)."""
        return any(
            isinstance(made := _unchained(value), cst.Call) and self.index.is_call_to(made, torch_api.DATA_PARALLEL)
            for _, value in self.index.values_assigned(ref)
        )

    def _whole_model(self, ref: Ref, call: Traced) -> list[Ref]:
        """The models a method of a model class runs on, for ``self.model.classifier.parameters()`` in it (a
        ``get_optimizer`` that trains only a head): the part belongs to them. [] where the method has no
        such receivers (``__init__``, a GAN's parts each trained apart)."""
        index = self.index
        method = index.method_scope(index.scope_of(call))
        if (
            method is None
            or method.name.value == "__init__"
            or not isinstance(ref.scope, cst.ClassDef)
            or not ref.path.startswith("self.")
            or not index.derives_from(index.class_of[method], torch_api.NN_MODULE)
        ):
            return []
        return self._callers_receivers(Ref(method, index.self_name(method) or "self"))

    def _callers_arguments(self, ref: Ref) -> list[Ref]:
        """A parameter of a helper called with different models (``make_optimizer(encoder)`` in one program,
        ``make_optimizer(classifier)`` in another): each caller's model, each trained by its own optimizer
        and wrapped where it is built. [] where every caller hands the same value."""
        function = ref.scope
        if not isinstance(function, cst.FunctionDef) or ref.path not in parameter_names(function):
            return []
        given = list(dict.fromkeys(flow.src for flow in self.index.flows_into(ref)))
        return given if len(given) > 1 else []

    def _callers_receivers(self, ref: Ref) -> list[Ref]:
        """``self`` of a model's own method (``configure_optimizers``): the models it is called on
        (``model.configure_optimizers(config)``), where every call names one."""
        index = self.index
        function = ref.scope
        if not isinstance(function, cst.FunctionDef) or index.self_name(function) != ref.path:
            return []
        calls = index.callers(function)
        receivers = [
            self._module_ref(call.func.value) if isinstance(call.func, cst.Attribute) else None for call in calls
        ]
        if calls:
            return [r for r in receivers if r is not None] if None not in receivers else []
        # called on an instance (``model = TinyGPT(); model.configure_optimizers(...)``): the receivers
        # built by the method's own class
        cls = index.class_of.get(function)
        init = index.functions.get((cls, "__init__")) if cls is not None else None
        found: list[Ref] = []
        for call in index.calls:
            if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == function.name.value):
                continue
            receiver = self._module_ref(call.func.value)
            # built there, or handed on from where it was built (``model = self.model`` in a Trainer)
            built = receiver is not None and any(
                (init is not None and self._built_by(a.value, init)) or self._built_by_name(a.value)
                for place in index.lineage(receiver)
                for a in index.assignments_to(place)
            )
            if receiver is not None and built and receiver not in found:
                found.append(receiver)
        return found

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
        if subscripted and any(isinstance(value, containers) for _, value in index.values_assigned(ref)):
            return None
        if node is not receiver and self.holds_models(ref):
            return None  # ``nets.enc`` of ``nets = Munch(enc=..., head=...)``: not a part of one model
        if node is not receiver and (field := self._field_of_plain_object(receiver, node, ref)) is not None:
            return field
        return ref

    def _field_of_plain_object(self, receiver: cst.BaseExpression, node: cst.BaseExpression, ref: Ref) -> Ref | None:
        """``self.gen`` of ``class GAN`` for ``gan.gen`` (or ``gan.gen.head``), where ``gan`` holds an instance
        of a class of the program that is no module (it derives from no class but its own program's and
        ``object``): the model is the field, not the object that holds it, which DDP cannot wrap."""
        index = self.index
        part = receiver
        while isinstance(part, (cst.Attribute, cst.Subscript)) and part.value is not node:
            part = part.value
        if not isinstance(part, cst.Attribute) or part.value is not node:
            return None
        classes = list(dict.fromkeys(index.constructed_classes(ref)))
        if len(classes) != 1 or not self._plain_object_class(classes[0]):
            return None
        field = Ref(classes[0], f"self.{part.attr.value}")
        return field if next(index.assignments_to(field), None) is not None else None

    def _plain_object_class(self, cls: cst.ClassDef) -> bool:
        """Whether every base of ``cls``, and of its program's own bases, is a class of the program or
        ``object``: no library class that might be an ``nn.Module``."""
        index = self.index
        return all(
            index.local_class(base.value) is not None or m.matches(base.value, m.Name("object"))
            for c in index.ancestry(cls)
            for base in c.bases
            if base.keyword is None
        )

    def holds_models(self, ref: Ref) -> bool:
        """Whether ``ref`` holds a container of models that is no module itself: a dict (also an attribute-dict
        class, the program's own or a library's such as ``Munch``), a list, a tuple; ``nn.ModuleDict`` is a
        module."""
        index = self.index
        held = [v for _, v in index.values_assigned(ref)]
        for value in [b for v in held for b in built_by(index, v) or [v]]:
            if isinstance(value, (cst.List, cst.Tuple)) and _parameter_groups(value):
                continue  # ``[{"params": ...}, {"params": ..., "lr": ...}]``: what an optimizer takes
            if isinstance(value, (cst.List, cst.Tuple, cst.Dict, cst.ListComp, cst.DictComp)):
                return True
            if not isinstance(value, cst.Call):
                continue
            names = index.qualified_names(value.func)
            if names & _CONTAINERS or any(n.rsplit(".", 1)[-1] in _ATTRIBUTE_DICTS for n in names):
                return True
            cls = index.local_class(value.func)
            if (
                cls is not None
                and index.derives_from(cls, _CONTAINERS)
                and not index.derives_from(cls, torch_api.NN_MODULE)
            ):
                return True
        return False

    def _built_by_name(self, value: cst.BaseExpression | None) -> bool:
        """``getattr(models, opt.model)()``: a class of a package of the program, chosen by name."""
        index = self.index
        value = _unchained(value)
        if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Call)):
            return False
        getter = value.func
        return (
            m.matches(getter.func, m.Name("getattr"))
            and len(getter.args) >= 2
            and any(name in index.module_names for name in index.qualified_names(getter.args[0].value))
        )

    def _built_by(self, value: cst.BaseExpression | None, init: cst.FunctionDef) -> bool:
        """Whether ``value`` is a new object of the class whose ``__init__`` is ``init`` (``Net().to(device)``)."""
        value = _unchained(value)
        return isinstance(value, cst.Call) and self.index.resolve_callee(value, self.index.scope_of(value)) == (init, 1)

    def _trace(self, expr: cst.BaseExpression, calls: list[Traced], seen: set[Ref]) -> cst.BaseExpression | None:
        """Add the ``X.parameters()`` calls ``expr`` takes its parameters from; the piece that has none, if any."""
        index = self.index
        if isinstance(expr, cst.Call):
            func = expr.func
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value in torch_api.PARAMETER_METHODS
                # not ``gen.parameters(model)``, a function of the program's module ``gen``
                and not self._module_function(expr)
            ):
                # ``layer.parameters()`` for ``layer`` in ``model.modules()``: parameters of ``model``
                calls.append(self._submodules_of(func.value) or expr)
                return None
            if isinstance(func, cst.Attribute) and func.attr.value in {"items", "values"} and not expr.args:
                return self._trace(func.value, calls, seen)  # ``param_dict.items()`` of a dict of parameters
            names = index.qualified_names(func)
            values = [a.value for a in expr.args if a.keyword is None]
            if names & {"itertools.chain"}:
                pieces = values
            elif names & {"itertools.chain.from_iterable"} or (
                isinstance(func, cst.Name)
                # ``dict(model.named_parameters())``: the same pairs, by name
                and (func.value in {"list", "tuple", "iter", "sorted", "set"} or (func.value == "dict" and values))
            ):
                pieces = values[:1]
            elif isinstance(func, cst.Name) and func.value == "filter" and len(values) == 2:
                pieces = values[1:]
            elif isinstance(func, cst.Attribute) and func.attr.value == "difference":
                pieces = [func.value]  # ``set(model.parameters()).difference(head_params)``: some of the first
            elif isinstance(func, cst.Attribute) and func.attr.value == "union":
                pieces = [func.value, *values]
            elif self._own_parameters(expr, seen):
                calls.append(expr)  # ``distiller.get_learnable_parameters()``: parameters of the receiver
                return None
            elif isinstance(func, cst.Name) and func.value == "dict" and not values:
                params = argument(expr, "params")  # ``dict(params=decay, weight_decay=0)``: a param group
                return self._trace(params.value, calls, seen) if params is not None else expr
            elif (returned := self._returned_by_program(expr)) is not None:
                pieces = returned  # ``param_groups(model, wd)``: a helper of the program builds the groups
            else:
                return expr
            for piece in pieces:
                if (untraced := self._trace(piece, calls, seen)) is not None:
                    return untraced
            return None if pieces else expr
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.BitOr)):
            return self._trace(expr.left, calls, seen) or self._trace(expr.right, calls, seen)
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Subtract):
            return self._trace(expr.left, calls, seen)  # ``set(model.parameters()) - set(head)``: some of the left
        if isinstance(expr, cst.IfExp):  # ``model.head.parameters() if args.head_only else model.parameters()``
            return self._trace(expr.body, calls, seen) or self._trace(expr.orelse, calls, seen)
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
        if (
            isinstance(expr, (cst.ListComp, cst.GeneratorExp, cst.SetComp))
            and isinstance(expr.elt, cst.Subscript)
            and isinstance(expr.elt.value, cst.Name)
            # not ``[p[1] for p in model.named_parameters() if ...]``: an item of what it iterates
            and not m.matches(expr.for_in.target, m.Name(expr.elt.value.value))
        ):
            return self._trace(expr.elt.value, calls, seen)  # ``[param_dict[name] for name in decay]``
        if isinstance(expr, (cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp)):
            comp: cst.CompFor | None = expr.for_in
            while comp is not None:  # the innermost ``for``: ``p for m in models for p in m.parameters()``
                if comp.inner_for_in is None:
                    return self._trace(comp.iter, calls, seen)
                comp = comp.inner_for_in
            return expr
        if isinstance(expr, cst.Attribute) and self._parameter_of_a_module(expr):
            calls.append(expr)  # ``head.kernel``: an ``nn.Parameter`` that the module's class sets in ``__init__``
            return None
        if isinstance(expr, (cst.Name, cst.Attribute)) and (submodules := self._submodules_of(expr)) is not None:
            calls.append(submodules)  # ``m.weight`` in ``for m in model.modules()``: a parameter of ``model``
            return None
        if isinstance(expr, cst.Attribute) and (field := index.ref_of(expr, index.scope_of(expr))) is not None:
            values = [value for _, value in index.values_assigned(field)]  # ``self.params = params`` in __init__
            filled = self._filled(field)  # ``self.params = []`` then ``self.params += list(enc.parameters())``
            if field in seen or not (values or filled):
                return None if field in seen else expr
            seen.add(field)
            for value in values:
                if filled and isinstance(value, (cst.List, cst.Tuple)) and not value.elements:
                    continue
                if (untraced := self._trace(value, calls, seen)) is not None:
                    return untraced
            for value in filled:
                if (untraced := self._trace(value, calls, seen)) is not None:
                    return untraced
            return None
        if isinstance(expr, cst.Attribute) and (values := self._set_on_an_object(expr)):
            # ``model.optim_list = [{"params": ...}]`` then ``Adam(model.optim_list)``: what was set there
            for value in values:
                if (untraced := self._trace(value, calls, seen)) is not None:
                    return untraced
            return None
        if isinstance(expr, cst.Name):
            source = self._loop_source(expr)
            if source is not None:  # ``for p in model.parameters(): yield p``
                return self._trace(source, calls, seen)
            return self._trace_name(expr, calls, seen)
        if isinstance(expr, cst.Subscript):  # ``ps[0]`` of ``ps = list(m.parameters())``: one of them
            return self._trace(expr.value, calls, seen)
        return expr

    def _parameter_of_a_module(self, expr: cst.Attribute) -> bool:
        """``head.kernel`` where ``head`` holds a module of the program's own class whose ``__init__`` sets
        ``self.kernel = nn.Parameter(...)``."""
        index = self.index
        for value in built_by(index, expr.value) or ():
            made = _unchained(value)
            cls = index.local_class(made.func) if isinstance(made, cst.Call) else None
            init = index.method(cls, "__init__") if cls is not None else None
            if init is None:
                continue
            self_name = index.self_name(init)
            for node in index.walk(init.body):
                if (
                    isinstance(node, cst.Assign)
                    and len(node.targets) == 1
                    and m.matches(
                        node.targets[0].target, m.Attribute(value=m.Name(self_name or ""), attr=m.Name(expr.attr.value))
                    )
                    and isinstance(node.value, cst.Call)
                    and index.is_call_to(node.value, torch_api.PARAMETER_CLASSES)
                ):
                    return True
        return False

    def _filled(self, field: Ref) -> list[cst.BaseExpression]:
        """What ``self.params += ...``, ``self.params.append(...)`` and ``self.params.extend(...)`` put into the
        list kept at ``field``."""
        index = self.index
        found: list[cst.BaseExpression] = []
        for node in index.nodes_of(cst.AugAssign):
            assert isinstance(node, cst.AugAssign)
            if isinstance(node.operator, cst.AddAssign) and index.ref_of(node.target, index.scope_of(node)) == field:
                found.append(node.value)
        for call in index.calls:
            func = call.func
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value in {"append", "extend"}
                and len(call.args) == 1
                and index.ref_of(func.value, index.scope_of(call)) == field
            ):
                value = call.args[0].value
                found.append(cst.List([cst.Element(value)]) if func.attr.value == "append" else value)
        return found

    def _set_on_an_object(self, expr: cst.Attribute) -> list[cst.BaseExpression]:
        """The values ``obj.field = value`` statements of ``expr``'s own scope set, for ``expr`` spelled
        ``obj.field`` with ``obj`` a plain name (not ``self``, whose fields are places of their own)."""
        index = self.index
        if not isinstance(expr.value, cst.Name):
            return []
        scope = index.scope_of(expr)
        found: list[cst.BaseExpression] = []
        for attribute in index.attributes.get(expr.attr.value, ()):
            if attribute is expr or not m.matches(attribute.value, m.Name(expr.value.value)):
                continue
            target = index.parent(attribute)
            assign = index.parent(target)
            if (
                isinstance(target, cst.AssignTarget)
                and isinstance(assign, cst.Assign)
                and len(assign.targets) == 1
                and index.scope_of(attribute) is scope
            ):
                found.append(assign.value)
        return found

    def _own_parameters(self, call: cst.Call, seen: set[Ref]) -> bool:
        """``model.get_learnable_parameters()``, a method of the program's model classes that every class
        defining it returns parameters of ``self`` from (``self.student.parameters()``, ``super()``'s)."""
        index = self.index
        func = call.func
        if not isinstance(func, cst.Attribute) or m.matches(func.value, m.Call(func=m.Name("super"))):
            return False
        methods = [
            f
            for (owner, name), f in index.functions.items()
            if name == func.attr.value and isinstance(owner, cst.ClassDef) and index.self_name(f) is not None
        ]
        if not methods or self._module_ref(func.value) is None:
            return False
        for method in methods:
            returns = self._given(method)
            for returned in returns:
                if isinstance(returned, (cst.List, cst.Tuple)) and not returned.elements:
                    continue  # ``return []``: no parameters of its own (a model without a backbone)
                found: list[Traced] = []
                if self._trace(returned, found, seen) is not None or not all(map(self._on_self, found)):
                    return False
            if not returns:
                return False
        return True

    def _on_self(self, call: Traced) -> bool:
        """``self.student.parameters()``: a parameters call on ``self`` (or a part of it) in a method."""
        index = self.index
        function = next((a for a in index.ancestors(call) if isinstance(a, cst.FunctionDef)), None)
        method = index.method_scope(function) if function is not None else None
        if method is None:
            return False
        self_name = index.self_name(method) or ""

        def rooted(node: cst.BaseExpression, depth: int = 0) -> bool:
            while isinstance(node, (cst.Attribute, cst.Subscript)):
                node = node.value
            if not isinstance(node, cst.Name) or depth > 2:
                return False
            if node.value == self_name:
                return True
            # ``for regressor in self.regressors: ... regressor.parameters()``
            loops = [
                n for n in index.walk(method.body) if isinstance(n, cst.For) and m.matches(n.target, m.Name(node.value))
            ]
            return bool(loops) and all(rooted(loop.iter, depth + 1) for loop in loops)

        return rooted(call.value if isinstance(call, cst.Attribute) else cast(cst.Attribute, call.func).value)

    def _module_function(self, call: cst.Call) -> bool:
        """Whether ``call`` runs a function of the program that is no method (``gen.parameters(model)``)."""
        resolved = self.index.resolve_callee(call, self.index.scope_of(call))
        return resolved is not None and self.index.method_class(resolved[0]) is None

    def _returned_by_program(self, call: cst.Call) -> list[cst.BaseExpression] | None:
        """What the program's own function that ``call`` runs returns (each ``return`` value) or, for a
        generator, yields, if it gives anything."""
        resolved = self.index.runs(call, self.index.scope_of(call))  # ``self.param_groups(model)`` too
        if resolved is None:
            return None
        return self._given(resolved[0]) or None

    def _given(self, function: cst.FunctionDef) -> list[cst.BaseExpression]:
        """The values ``function`` returns, or those it yields (``yield from`` an iterable: its items)."""
        index = self.index
        if not index.is_generator(function):
            return index.returned_values(function)
        return [
            node.value.item if isinstance(node.value, cst.From) else node.value
            for node in index.walk(function.body)
            if isinstance(node, cst.Yield) and node.value is not None and index.scope_of(node) is function
        ]

    def _loop_source(self, name: cst.Name) -> cst.BaseExpression | None:
        """What the ``for`` loop binding ``name`` (read in its body) iterates over: ``model.modules()`` for
        ``m`` in ``for m in model.modules(): ... m.weight``; None where no loop around it binds it."""
        for loop in self.index.enclosing_loops(name):
            if not isinstance(loop, cst.For):
                continue
            if any(m.matches(target, m.Name(name.value)) for target in assigned(loop.target)):
                return self._items_of(loop.iter, name.value, loop.target)
        return None

    def _items_of(self, source: cst.BaseExpression, name: str, target: cst.BaseExpression) -> cst.BaseExpression | None:
        """What ``name`` takes the items of in ``for <target> in <source>``: ``params`` for ``p`` in ``for p in
        tqdm(params)`` or ``for i, p in enumerate(params)``; None for the counter of ``enumerate``."""
        while isinstance(source, cst.Call) and source.args and source.args[0].keyword is None:
            func = source.func
            if isinstance(func, cst.Name) and func.value == "enumerate":
                elements = target.elements if isinstance(target, cst.Tuple) else ()
                if len(elements) != 2 or not m.matches(elements[1].value, m.Name(name)):
                    return None
                target = elements[1].value
            elif not (
                (isinstance(func, cst.Name) and func.value in {"list", "tuple", "sorted", "iter", "reversed"})
                or any(q.split(".")[0] == "tqdm" for q in self.index.qualified_names(func))
            ):
                break
            source = source.args[0].value
        return source

    def _submodules_of(self, expr: cst.BaseExpression) -> cst.Call | None:
        """``model.modules()`` (or ``named_modules``, ``children``, ``named_children``) that the loop variable
        at the root of ``expr`` (``m`` of ``m.weight``) comes from: a part of that model."""
        root = expr
        while isinstance(root, (cst.Attribute, cst.Subscript)):
            root = root.value
        source = self._loop_source(root) if isinstance(root, cst.Name) else None
        if (
            isinstance(source, cst.Call)
            and isinstance(source.func, cst.Attribute)
            and source.func.attr.value in torch_api.SUBMODULE_METHODS
        ):
            return source
        return None

    def _trace_argument(
        self, function: cst.FunctionDef, param: str, calls: list[Traced], seen: set[Ref]
    ) -> cst.BaseExpression | None:
        """``def make_optimizer(params): return SGD(params)``: what every caller passes for ``params``."""
        index = self.index
        callers = index.callers(function)
        if not callers:
            return function.name  # never called here: nothing to trace
        params = list(function.params.params)
        position = next(i for i, p in enumerate(params) if p.name.value == param)
        for call in callers:
            resolved = index.runs(call, index.scope_of(call))
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

    def _trace_name(self, name: cst.Name, calls: list[Traced], seen: set[Ref]) -> cst.BaseExpression | None:
        """``params = [...]``, or ``params = []`` filled by ``params.append(p)`` in a loop over ``named_parameters()``."""
        index = self.index
        scope = index.scope_of(name)
        ref = index.ref_of(name, scope)
        if ref in seen:  # traced already (or being traced): what it was traced to counts here too
            if ref in self._traced:
                calls.extend(call for call in self._traced[ref] if not any(call is c for c in calls))
                self._reused += 1
            return None
        if ref is None or ref.scope is not scope:
            return name
        seen.add(ref)
        found, reused = len(calls), self._reused
        if isinstance(scope, cst.FunctionDef) and any(p.name.value == name.value for p in scope.params.params):
            return self._trace_argument(scope, name.value, calls, seen)
        for assign in index.assignments_to(ref):
            value = assign.value
            if isinstance(value, (cst.List, cst.Tuple)) and not value.elements:
                continue  # filled below
            if self._trace(value, calls, seen) is not None:
                return name
        for _, item in index.unpacked_values(ref):  # ``no_decay, decay = split_params(model)``, ``a, b = [], []``
            if isinstance(item, (cst.List, cst.Tuple)) and not item.elements:
                continue  # filled below
            if self._trace(item, calls, seen) is not None:
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
            call = index.parent(attribute)
            appended = call.args[0].value if isinstance(call, cst.Call) and len(call.args) == 1 else None
            found_before = len(calls)
            if appended is not None and self._trace(appended, calls, seen) is None:
                continue  # ``groups.append({"params": [p], "lr": scale * lr})`` for ``p`` of a model's
            del calls[found_before:]
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
        if len(calls) > found or self._reused > reused:
            self._traced[ref] = calls[found:]
            return None
        return None if self._left_empty(ref) else name

    def _left_empty(self, ref: Ref) -> bool:
        """``custom_ops = []`` that nothing fills: a param group with no parameters (every value the name is
        given is an empty list, and no read of it appends, extends or hands it on)."""
        index = self.index
        values = [value for _, value in index.values_assigned(ref)]
        if not values or not all(isinstance(v, (cst.List, cst.Tuple)) and not v.elements for v in values):
            return False
        scope = ref.scope if isinstance(ref.scope, cst.FunctionDef | cst.Module) else None
        if scope is None:
            return False
        for read in index.mentions(scope, ref):
            parent = index.parent(read)
            if isinstance(parent, cst.AssignTarget):
                continue
            if not isinstance(parent, cst.DictElement | cst.Element) or (
                isinstance(parent, cst.DictElement) and parent.value is not read
            ):
                return False
        return True

    def optimizes_inputs(self, optimizer: cst.Call) -> bool:
        """Whether the optimizer steps tensors the program made trainable itself, none a module's parameter:
        ``SGD([delta])`` after ``delta = (0.001 * torch.randn_like(x)).requires_grad_(True)`` (an adversarial
        perturbation, an image optimised for style transfer). Each rank optimises its own inputs: there are
        no gradients to average and no model to wrap."""
        index = self.index
        params = self.params_of(optimizer)
        items = params.elements if isinstance(params, (cst.List, cst.Tuple)) else []
        if not items or not self._built_for_each_step(optimizer):
            return False  # built once (``Adam([log_alpha])`` of SAC's temperature): a parameter every rank learns
        for item in items:
            values = built_by(index, item.value) if isinstance(item, cst.Element) else None
            if values and all(index.scope_of(v) is index.scope_of(optimizer) for v in values):
                # ``delta = 0.001 * torch.randn(x.shape)`` then ``delta = Variable(delta, requires_grad=True)``:
                # what the name holds when the optimizer takes it is its last value before
                before = [v for v in values if not index.after(v, optimizer)]
                last = max(before, key=index.order.__getitem__) if before else None
                name = item.value.value if isinstance(item.value, cst.Name) else None
                if last is not None and any(isinstance(n, cst.Name) and n.value == name for n in index.walk(last)):
                    values = [last]  # built from what the name held before: that value is gone
            if not values or not all(self._made_trainable(value) for value in values):
                return False
        return True

    def _built_for_each_step(self, optimizer: cst.Call, depth: int = 0) -> bool:
        """Whether the optimizer is built anew in a loop, or in a function called in one (an attack run
        for each batch): what it optimises lasts one step, never a parameter that lives on."""
        index = self.index
        if next(index.enclosing_loops(optimizer), None) is not None:
            return True
        function = enclosing_function(index, optimizer)
        return (
            function is not None
            and depth < 2
            and any(self._built_for_each_step(call, depth + 1) for call in index.callers(function))
        )

    def _made_trainable(self, value: cst.BaseExpression) -> bool:
        """``x.requires_grad_()`` or ``torch.zeros(..., requires_grad=True)`` (``Variable(t, requires_grad=True)``):
        a tensor made a trainable leaf by the program, not a parameter of a module."""
        index = self.index
        made = False
        for node in index.walk(value):
            if isinstance(node, cst.Call) and index.qualified_names(node.func) & torch_api.PARAMETER_CLASSES:
                return False
            if isinstance(node, cst.Attribute) and node.attr.value in ("parameters", "named_parameters"):
                return False
            if (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and node.func.attr.value == "requires_grad_"
            ):
                made = True
            if isinstance(node, cst.Arg) and node.keyword is not None and node.keyword.value == "requires_grad":
                made = made or m.matches(node.value, m.Name("True"))
        return made

    def all_trained(self) -> set[Ref]:
        """Every model any optimizer of the script trains."""
        if self._all_trained is None:
            self._all_trained = {ref for opt in self.optimizers() for ref in self.trained_refs(opt)[0]}
        return self._all_trained


_CONTAINERS = frozenset({"builtins.dict", "builtins.list", "builtins.tuple", "collections.OrderedDict"})
_ATTRIBUTE_DICTS = frozenset({"Munch", "EasyDict", "edict", "AttrDict", "SimpleNamespace", "DotMap", "Box"})


def _unchained(value: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """``value`` without the module methods chained on it: ``Net()`` for ``Net().to(device).eval()``."""
    while (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in torch_api.MODULE_CHAINING_METHODS
    ):
        value = value.func.value
    return value


def _parameter_groups(value: cst.List | cst.Tuple) -> bool:
    """Whether every element of ``value`` is a dict display with a ``"params"`` key: parameter groups."""
    return bool(value.elements) and all(
        isinstance(element, cst.Element)
        and isinstance(element.value, cst.Dict)
        and any(
            isinstance(entry, cst.DictElement)
            and isinstance(entry.key, cst.SimpleString)
            and entry.key.evaluated_value == "params"
            for entry in element.value.elements
        )
        for element in value.elements
    )

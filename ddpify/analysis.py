"""Read-only analysis: the anatomy of a training script, as a frozen object.

``analyse()`` runs once per script and answers every question the rewrite
passes ask -- which models an optimizer trains and where each one is on its
device, which DataLoaders feed training and which loop is the epoch loop,
which statements print or save -- so that the passes only *rewrite* and never
re-discover facts. Objects are found by what they are (see :mod:`ddpify.flow`),
never by variable names.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.metadata import PositionProvider

from ddpify import torch_api
from ddpify.diagnostics import Diagnostic, Severity
from ddpify.flow import Index, Ref, Scope, _walk, build_index


@dataclass(frozen=True)
class Names:
    """Names the generated code uses, chosen so they clash with nothing in the script."""

    dist: str
    ddp: str
    sampler: str
    setup: str
    os: str
    atexit: str


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
    data_parallel_removed: cst.BaseStatement | None = None  # a conditional DataParallel wrap, dropped


@dataclass(frozen=True)
class Accumulation:
    """Gradient accumulation: several backward passes per optimizer step."""

    forward: cst.BaseStatement  # the first statement of the micro-step that runs the model
    condition: cst.BaseExpression  # true on the micro-step that ends with ``optimizer.step()``
    models: tuple[str, ...]  # the wrapped models the micro-step runs


@dataclass(frozen=True)
class EpochLoop:
    loop: cst.For | cst.SimpleStatementLine  # the epoch loop, or the statement that restarts the iterator
    loader: str  # the loader as written in the loop's scope: ``train_loader``, ``self.train_data``
    after: cst.BaseStatement | None = None  # the loader is built inside the loop: set the epoch after this


@dataclass(frozen=True)
class Loader:
    call: cst.Call
    training: bool
    epoch_loops: tuple[EpochLoop, ...]
    # ``DataLoader(ds, **kwargs)``: the ``**kwargs`` argument and the keys it may
    # hold (None when they cannot be known from the script).
    spread: cst.Arg | None = None
    spread_keys: frozenset[str] | None = None
    # ``len(loader.dataset)``: the whole dataset, where this rank now sees its shard
    dataset_lengths: tuple[cst.Attribute, ...] = ()
    # ``it = iter(loader)`` after ``except StopIteration:``: a new pass over the data begins
    restarts: tuple[EpochLoop, ...] = ()


@dataclass(frozen=True)
class Anatomy:
    index: Index
    names: Names
    trains: bool
    models: tuple[Model, ...]
    loaders: tuple[Loader, ...]
    accumulations: tuple[Accumulation, ...]
    outputs: tuple[tuple[cst.BaseStatement, str], ...]  # (statement, what it is) safe to run on rank 0 only
    # calls inside an output statement that must still run on every rank: they are
    # computed into a variable first, e.g. the ``evaluate(...)`` in ``print(evaluate(...))``
    hoisted: tuple[cst.Call, ...]
    trackers: tuple[cst.Call, ...]  # SummaryWriter(...) / wandb.init(...) assigned to a name
    progress_bars: tuple[cst.Call, ...]  # tqdm(...) calls without ``disable=``
    makedirs: tuple[cst.Call, ...]  # os.makedirs(...) / os.mkdir(...) without ``exist_ok=``
    gpu_numbers: tuple[cst.Integer, ...]  # ``device = 0`` later used as a device: this rank's GPU instead
    reloaded_saves: tuple[cst.SimpleStatementLine, ...]  # saves whose file the script loads again later
    saves: tuple[cst.SimpleStatementLine, ...]  # torch.save statements
    state_loads: tuple[cst.Call, ...]  # torch.load(...) of state dicts, without map_location
    data_parallel: tuple[cst.Call, ...]  # every nn.DataParallel(...) call
    setup_at_module_level: bool  # training objects are built outside the main guard's call tree
    diagnostics: tuple[Diagnostic, ...]


def analyse(wrapper: cst.MetadataWrapper, path: str) -> Anatomy:
    index = build_index(wrapper)
    finder = _Finder(index, path)
    return finder.anatomy()


def distributed_use(module: cst.Module) -> str | None:
    """The first distributed API the script calls (by qualified name), or None.

    Runs before any metadata is computed, so that already-converted scripts --
    ddpify's own output among them -- are recognised cheaply.
    """
    code = module.code
    if not any(word in code for word in _DISTRIBUTED_WORDS):
        return None
    finder = _DistributedUse()
    module.visit(finder)
    return finder.found


# Text that any distributed call must contain, to skip the search for most scripts.
_DISTRIBUTED_WORDS = tuple({name.rstrip(".").rsplit(".", 1)[-1] for name in torch_api.DISTRIBUTED_CALLS})


class _DistributedUse(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.aliases: dict[str, str] = {}
        self.found: str | None = None

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = alias.evaluated_name
            self.aliases[alias.evaluated_alias or full.split(".")[0]] = full if alias.asname else full.split(".")[0]

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.module is None or node.relative or isinstance(node.names, cst.ImportStar):
            return
        base = dotted(node.module)
        for alias in node.names:
            self.aliases[alias.evaluated_alias or alias.evaluated_name] = f"{base}.{alias.evaluated_name}"

    def visit_Call(self, node: cst.Call) -> None:
        root, _, rest = dotted(node.func).partition(".")
        if self.found is None and root in self.aliases:
            name = f"{self.aliases[root]}.{rest}" if rest else self.aliases[root]
            if name.startswith(torch_api.DISTRIBUTED_CALLS):
                self.found = name


def dotted(expr: cst.BaseExpression) -> str:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return f"{dotted(expr.value)}.{expr.attr.value}"
    return ""


class _Finder:
    def __init__(self, index: Index, path: str) -> None:
        self.index = index
        self.path = path
        self.diagnostics: list[Diagnostic] = []
        self._model_classes: dict[Ref, set[cst.ClassDef]] = {}

    def report(self, node: cst.CSTNode, code: str, severity: Severity, message: str) -> None:
        line, column = self.index.position(node)
        self.diagnostics.append(Diagnostic(line, column, code, severity, message, self.path))

    # -- the whole script --------------------------------------------------
    def anatomy(self) -> Anatomy:
        index = self.index
        trains = any(m.matches(c.func, m.Attribute(attr=m.Name("backward"))) for c in index.calls)
        names = self._names()
        if not trains:
            return Anatomy(index, names, False, (), (), (), (), (), (), (), (), (), (), (), (), (), False, ())
        models = tuple(self._models())
        if not models and not self.diagnostics:
            backward = next(c for c in index.calls if m.matches(c.func, m.Attribute(attr=m.Name("backward"))))
            self.report(
                backward,
                "DDP304",
                Severity.ERROR,
                "the script trains, but builds no torch.optim optimizer over a model's parameters in this file: "
                "cannot find the model to wrap in DistributedDataParallel",
            )
        loaders = tuple(self._loaders(models))
        self._warn_rank_local_exits(models)
        self._warn_downloads()
        saves = tuple(self._statements_calling(torch_api.SAVE))
        trackers = tuple(self._trackers())
        self._hoisted: list[cst.Call] = []
        outputs = tuple(self._outputs(models, trackers))
        return Anatomy(
            index=index,
            names=names,
            trains=True,
            models=models,
            loaders=loaders,
            accumulations=tuple(self._accumulations(models)),
            outputs=outputs,
            hoisted=tuple(self._hoisted),
            trackers=trackers,
            progress_bars=tuple(
                c
                for c in index.calls
                if index.is_call_to(c, torch_api.PROGRESS_BARS)
                and not any(a.keyword and a.keyword.value == "disable" for a in c.args)
            ),
            makedirs=tuple(
                c
                for c in index.calls
                if index.is_call_to(c, torch_api.MAKEDIRS)
                and not any(a.keyword and a.keyword.value == "exist_ok" for a in c.args)
                and len(c.args) < 3
            ),
            gpu_numbers=tuple(self._gpu_numbers()),
            reloaded_saves=tuple(self._reloaded(saves)),
            saves=saves,
            state_loads=tuple(self._state_loads()),
            data_parallel=tuple(c for c in index.calls if index.is_call_to(c, torch_api.DATA_PARALLEL)),
            setup_at_module_level=self._setup_at_module_level(models, loaders),
            diagnostics=tuple(self.diagnostics),
        )

    def _names(self) -> Names:
        used = self.index.identifiers

        def fresh(base: str, fallback: str) -> str:
            return base if base not in used else fallback

        module_binds = self.index.bound[self.index.module]
        os_name = "os" if "os" not in used or ("os" in module_binds and self._imports_module("os")) else "os_"
        atexit_name = "atexit" if "atexit" not in used or self._imports_module("atexit") else "atexit_"
        return Names(
            dist=fresh("dist", "torch_dist"),
            ddp=fresh("DDP", "DistributedDataParallel"),
            sampler=fresh("DistributedSampler", "DistributedSampler_"),
            setup=fresh("setup_distributed", "setup_ddp_process_group"),
            os=os_name,
            atexit=atexit_name,
        )

    def _imports_module(self, name: str) -> bool:
        """Whether the script has a plain top-level ``import <name>``."""
        for stmt in self.index.module.body:
            for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.Import) and any(
                    alias.evaluated_name == name and alias.asname is None for alias in small.names
                ):
                    return True
        return False

    # -- models ------------------------------------------------------------
    def _optimizers(self) -> Iterator[cst.Call]:
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

    def _trained_refs(self, optimizer: cst.Call) -> list[Ref]:
        scope = self.index.scope_of(optimizer)
        params = next((a.value for a in optimizer.args if a.keyword is None or a.keyword.value == "params"), None)
        if params is None:
            return []
        sources = [params]
        ref = self.index.ref_of(params, scope)
        if ref is not None:  # params = list(model.parameters()); optim.SGD(params)
            sources += [flowless.value for flowless in self._assigned_values(ref)]
        refs: list[Ref] = []
        for source in sources:
            for node in self.index.walk(source):
                if m.matches(node, m.Call(func=m.Attribute(attr=m.OneOf(*map(m.Name, torch_api.PARAMETER_METHODS))))):
                    found = self.index.root_ref(node.func.value, self.index.scope_of(node))
                    if found is not None and found not in refs:
                        refs.append(found)
        return refs

    def _assigned_values(self, ref: Ref) -> Iterator[cst.Assign]:
        for stmt in self.index.statements:
            for small in stmt.body:
                if isinstance(small, cst.Assign) and any(
                    self.index.ref_of(t.target, self.index.scope_of(small)) == ref for t in small.targets
                ):
                    yield small

    def _models(self) -> Iterator[Model]:
        seen: set[cst.CSTNode] = set()
        for optimizer in self._optimizers():
            refs = self._trained_refs(optimizer)
            if not refs:
                self.report(
                    optimizer,
                    "DDP301",
                    Severity.ERROR,
                    "cannot tell which model this optimizer trains (expected `model.parameters()` in its arguments)",
                )
                continue
            for ref in refs:
                model = self._model(ref, optimizer)
                if model is not None and model.insert_after not in seen:
                    seen.add(model.insert_after)
                    self._warn_training_outside_forward(model)
                    yield model

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
        # A move inside a loop (``model.to(device).train()`` after a checkpoint on the CPU) is not
        # where the model becomes ready; only the least nested places count.
        moves, creations, wraps = (self._least_nested(c) for c in (moves, creations, wraps))
        classes = {c for stmt, *_ in (*moves, *creations, *wraps) if (c := self._built_class(stmt)) is not None}
        self._model_classes[ref] = classes
        depth = self._depths(lineage)
        if wraps:
            stmt, target = max(wraps, key=lambda c: (depth.get(c[1], 0), index.position(c[0])))
            return self._data_parallel_model(stmt, target, moves, optimizer)
        if moves:
            stmt, target, cuda = max(moves, key=lambda c: (depth.get(c[1], 0), index.position(c[0])))
            placed = True
        elif creations:
            stmt, target = max(creations, key=lambda c: (depth.get(c[1], 0), index.position(c[0])))
            cuda, placed = False, False
        else:
            self.report(
                optimizer,
                "DDP302",
                Severity.ERROR,
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
        return Model(target, expression, insert_after, on_cuda, placed, unwrap, optimizer)

    def _warn_moves_in_training(self, target: Ref, wrap: cst.BaseStatement) -> None:
        """``model.cpu()`` ... ``model.to(device)`` inside the training loop moves a wrapped model."""
        index = self.index
        for read in index.mentions(index.scope_of(wrap), target, index.scope_of(wrap)):
            attribute = index.parent(read)
            if not (
                isinstance(attribute, cst.Attribute)
                and attribute.value is read
                and attribute.attr.value in {"cpu", "to", "cuda"}
            ):
                continue
            if index.position(read) > index.position(wrap) and any(
                index.trains(loop.body) for loop in index.enclosing_loops(read)
            ):
                self.report(
                    read,
                    "DDP305",
                    Severity.WARNING,
                    "the model moves between devices inside the training loop: DistributedDataParallel expects its "
                    "parameters to stay where they were when it was wrapped; save `model.module.state_dict()` "
                    "without moving the model",
                )
                return

    def _least_nested(self, candidates: list[tuple]) -> list[tuple]:
        depth = {id(c): len(list(self.index.enclosing_loops(c[0]))) for c in candidates}
        least = min(depth.values(), default=0)
        return [c for c in candidates if depth[id(c)] == least]

    def _built_class(self, stmt: cst.SimpleStatementLine) -> cst.ClassDef | None:
        """The script's own class a statement builds the model from: ``Net`` in ``model = Net().to(device)``."""
        value = stmt.body[0].value
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            value = value.func.value
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
            return self.index.classes.get(value.func.value)
        return None

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
                    self.report(
                        call,
                        "DDP303",
                        Severity.WARNING,
                        f"`{model.expression}.{name}()` runs the model outside forward(): if the loss comes from it, "
                        "DDP does not average its gradients across ranks; route it through forward()",
                    )
                    break

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
        for node in self.index.walk(method.body):
            if isinstance(node, cst.Call) and m.matches(node.func, m.Attribute(value=m.Name(self_name))):
                if (cls, node.func.attr.value) not in self.index.functions or node.func.attr.value == "forward":
                    return True
            if isinstance(node, cst.Call) and m.matches(node.func, m.Name(self_name)):
                return True
        return False

    def _data_parallel_model(
        self, stmt: cst.SimpleStatementLine, target: Ref, moves: list, optimizer: cst.Call
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
        expression = self._expression(target, index.scope_of(stmt))
        placed = data_parallel_if or stmt
        outer = self._climb_conditionals(placed)
        if outer is placed:
            unwrap = tuple(self._wrapper_reads(target, stmt))
            call = stmt.body[0].value
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

    def _after_setup(self, anchor: cst.BaseStatement, target: Ref) -> cst.BaseStatement:
        """The last statement after ``anchor`` that still prepares the model.

        Initialising weights (``model.apply(init)``), freezing parameters, replacing a
        submodule, loading a checkpoint, building the optimizer: all of it happens to the
        plain module, and the wrap follows it. The scan stops where the model first runs --
        a forward call, or the model handed to the script's own functions and classes.
        """
        block = self.index.parent(anchor)
        siblings = list(block.body) if block is not None else []
        scope = self.index.scope_of(anchor)
        last = anchor
        for stmt in siblings[siblings.index(anchor) + 1 :]:
            reads = self.index.mentions(stmt, target, scope)
            if not reads:
                continue
            if any(self._runs_model(read) for read in reads):
                break
            last = stmt
        return last

    def _runs_model(self, read: cst.BaseExpression) -> bool:
        parent = self.index.parent(read)
        if isinstance(parent, cst.Call) and parent.func is read:
            return True
        if isinstance(parent, cst.Arg):
            call = self.index.parent(parent)
            return self.index.resolve_callee(call, self.index.scope_of(call)) is not None
        return False

    def _wrapper_reads(self, target: Ref, wrap: cst.BaseStatement) -> Iterator[cst.BaseExpression]:
        """Reads of the model after it is wrapped that the wrapper does not answer for the module."""
        index = self.index
        wrap_scope = index.scope_of(wrap)
        wrap_end = index.metadata[PositionProvider][wrap].end
        wrap_end = (wrap_end.line, wrap_end.column)

        def after_wrap(node: cst.CSTNode) -> bool:
            if index.scope_of(node) is not wrap_scope and not _inside(index, node, wrap_scope):
                return True
            start = index.metadata[PositionProvider][node].start
            return (start.line, start.column) > wrap_end

        wrapped = {target}
        queue = [target]
        while queue:
            ref = queue.pop()
            for flow in index.flows_from(ref):
                if flow.dst not in wrapped and (ref is not target or after_wrap(flow.stmt)):
                    wrapped.add(flow.dst)
                    queue.append(flow.dst)
        for ref in wrapped:
            for scope in _scopes_reading(index, ref):
                for read in index.mentions(scope, ref, scope):
                    if ref is target and not after_wrap(read):
                        continue
                    if self._needs_module(read):
                        yield read

    def _needs_module(self, read: cst.BaseExpression) -> bool:
        parent = self.index.parent(read)
        if isinstance(parent, cst.Subscript) and parent.value is read:  # model[0] of an nn.Sequential
            return True
        if isinstance(parent, cst.Attribute) and parent.value is read:
            return parent.attr.value not in torch_api.WRAPPER_SAFE_ATTRIBUTES
        if isinstance(parent, cst.Arg):
            call = self.index.parent(parent)
            return self.index.is_call_to(call, torch_api.SAVE) and call.args[0] is parent
        return False

    def _accumulations(self, models: tuple[Model, ...]) -> Iterator[Accumulation]:
        """``loss.backward()`` every micro-step, ``optimizer.step()`` under ``if (i + 1) % k == 0``."""
        index = self.index
        optimizer_refs: set[Ref] = set()
        for optimizer in self._optimizers():
            parent = index.parent(optimizer)
            if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
                ref = index.ref_of(parent.targets[0].target, index.scope_of(optimizer))
                if ref is not None:
                    optimizer_refs |= index.downstream(ref)
        lineages = [(model, index.lineage(model.ref)) for model in models]
        for loop in index.loops:
            if not isinstance(loop.body, cst.IndentedBlock):
                continue
            body = list(loop.body.body)
            backward = next(
                (
                    i
                    for i, st in enumerate(body)
                    if isinstance(st, cst.SimpleStatementLine)
                    and any(
                        m.matches(n, m.Call(func=m.Attribute(attr=m.Name("backward")))) for n in self.index.walk(st)
                    )
                ),
                None,
            )
            if backward is None:
                continue
            step_if = next(
                (
                    st
                    for st in body[backward + 1 :]
                    if isinstance(st, cst.If)
                    and st.orelse is None
                    and any(self._is_step(n, optimizer_refs) for n in self.index.walk(st.body))
                ),
                None,
            )
            if step_if is None or not _pure(step_if.test):
                continue
            scope = index.scope_of(loop)
            run = []
            first = None
            for position, stmt in enumerate(body[: backward + 1]):
                for node in self.index.walk(stmt):
                    if isinstance(node, cst.Call) and (ref := index.carried_ref(node.func, scope)) is not None:
                        for model, lineage in lineages:
                            if ref in lineage:
                                text = index.module.code_for_node(node.func)
                                if text not in run:
                                    run.append(text)
                                first = position if first is None else first
            assigned = {n.value for st in body[: first or 0] for n in self.index.walk(st) if isinstance(n, cst.Name)}
            tested = {n.value for n in self.index.walk(step_if.test) if isinstance(n, cst.Name)}
            if run and first is not None and not (tested & assigned):
                yield Accumulation(body[first], step_if.test, tuple(run))

    def _is_step(self, node: cst.CSTNode, optimizer_refs: set[Ref]) -> bool:
        return (
            isinstance(node, cst.Call)
            and m.matches(node.func, m.Attribute(attr=m.Name("step")))
            and self.index.carried_ref(node.func.value, self.index.scope_of(node)) in optimizer_refs
        )

    def _warn_downloads(self) -> None:
        for call in self.index.calls:
            if any(
                a.keyword is not None and a.keyword.value == "download" and m.matches(a.value, m.Name("True"))
                for a in call.args
            ):
                self.report(
                    call,
                    "DDP209",
                    Severity.WARNING,
                    "every rank downloads this dataset at the same time into the same folder; download it once "
                    "before launching (or on rank 0, followed by dist.barrier())",
                )

    def _warn_rank_local_exits(self, models: tuple[Model, ...]) -> None:
        """``if loss.item() < tol: break`` -- each rank decides on its own shard, and the others hang."""
        index = self.index
        model_refs = set().union(*(index.lineage(model.ref) for model in models)) if models else set()
        reported: set[cst.CSTNode] = set()
        for loop in index.loops:
            if not index.trains(loop.body):
                continue
            local = self._rank_local_names(loop, model_refs)
            for node in self.index.walk(loop.body):
                if not isinstance(node, (cst.Break, cst.Return)) or node in reported:
                    continue
                for ancestor in index.ancestors(node):
                    if ancestor is loop or isinstance(ancestor, (cst.For, cst.While, cst.FunctionDef)):
                        break
                    if isinstance(ancestor, cst.If) and self._reads_rank_local(ancestor.test, local):
                        reported.add(node)
                        keyword = "break" if isinstance(node, cst.Break) else "return"
                        self.report(
                            node,
                            "DDP601",
                            Severity.WARNING,
                            f"`{keyword}` depends on a value computed from this rank's batches: ranks can leave the "
                            "training loop at different steps and hang; all-reduce the value (or decide on rank 0 "
                            "and broadcast) before deciding",
                        )
                        break

    def _rank_local_names(self, loop: cst.For | cst.While, model_refs: set[Ref]) -> set[str]:
        local: set[str] = set()
        if isinstance(loop, cst.For) and not m.matches(loop.iter, m.Call(func=m.Name("range"))):
            target = loop.target
            if m.matches(loop.iter, m.Call(func=m.Name("enumerate"))) and isinstance(target, cst.Tuple):
                target = cst.Tuple(elements=target.elements[1:])  # the batch counter is the same everywhere
            local |= {n.value for n in self.index.walk(target) if isinstance(n, cst.Name)}
        assignments = [n for n in self.index.walk(loop.body) if isinstance(n, (cst.Assign, cst.AugAssign))]
        for _ in range(3):
            for assign in assignments:
                if self._reads_rank_local(assign.value, local, model_refs):
                    targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]
                    local |= {n.value for t in targets for n in self.index.walk(t) if isinstance(n, cst.Name)}
        return local

    def _reads_rank_local(self, expr: cst.CSTNode, local: set[str], model_refs: set[Ref] = frozenset()) -> bool:
        for node in self.index.walk(expr):
            if isinstance(node, cst.Name) and node.value in local:
                return True
            if isinstance(node, cst.Call):
                if m.matches(node.func, m.Attribute(attr=m.Name("item"))):
                    return True
                if model_refs and self.index.carried_ref(node.func, self.index.scope_of(node)) in model_refs:
                    return True
        return False

    # -- data --------------------------------------------------------------
    def _origin(self, call: cst.Call) -> Ref | None:
        index = self.index
        parent = index.parent(call)
        scope = index.scope_of(call)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            return index.ref_of(parent.targets[0].target, scope)
        if isinstance(parent, cst.Return) and isinstance(scope, cst.FunctionDef):
            return Ref(scope, "<return>")
        if isinstance(parent, cst.Element) and isinstance(index.parent(parent), cst.Tuple):
            ret = index.parent(index.parent(parent))
            if isinstance(ret, cst.Return) and isinstance(scope, cst.FunctionDef):
                slot = [e for e in index.parent(parent).elements].index(parent)
                return Ref(scope, f"<return {slot}>")
        return None

    def _loaders(self, models: tuple[Model, ...]) -> Iterator[Loader]:
        index = self.index
        found_training = False
        for call in index.calls:
            if not index.is_call_to(call, torch_api.DATALOADER):
                continue
            origin = self._origin(call)
            refs = index.downstream(origin) if origin is not None else set()
            sites = [site for site in self._iterations(refs) if self._site_trains(site[0])]
            training = bool(sites)
            epoch_loops: list[EpochLoop] = []
            restarts = tuple(self._restarts(refs)) if training else ()
            if training:
                found_training = True
                for node, ref in sites:
                    loop = self._epoch_loop(node, ref)
                    if loop is not None and _inside(index, call, loop.loop):
                        built = next(
                            a for a in (call, *index.ancestors(call)) if index.parent(index.parent(a)) is loop.loop
                        )
                        loop = EpochLoop(loop.loop, loop.loader, built)
                    if loop is not None and loop not in epoch_loops:
                        epoch_loops.append(loop)
                repeated = any(
                    isinstance(lp, cst.While)
                    for node, _ in sites
                    for lp in index.enclosing_loops(node)
                    if lp is not node
                )
                if not epoch_loops and not restarts and repeated:
                    self.report(
                        call,
                        "DDP203",
                        Severity.WARNING,
                        "the training loop repeats inside a `while` loop: call `loader.sampler.set_epoch(n)` "
                        "at the start of each pass, or every pass shuffles the same way",
                    )
                self._check_sampling_arguments(call)
            elif origin is None or not self._iterations(refs):
                self.report(
                    call,
                    "DDP204",
                    Severity.WARNING,
                    "cannot follow this DataLoader to a loop: left without a DistributedSampler",
                )
            spread = next((a for a in call.args if a.star == "**"), None)
            keys = self._dict_keys(spread.value, index.scope_of(call)) if spread is not None else None
            if training and keys is not None and keys & torch_api.DATALOADER_SAMPLING_KEYWORDS:
                self.report(
                    spread,
                    "DDP202",
                    Severity.ERROR,
                    "the training DataLoader already has its own sampler; a DistributedSampler would replace it",
                )
            lengths = tuple(self._dataset_lengths(refs)) if training else ()
            yield Loader(call, training, tuple(epoch_loops), spread, keys, lengths, restarts)
        if not found_training:
            loop = next((lp for lp in index.loops if index.trains(lp.body)), None)
            self.report(
                loop or index.module,
                "DDP201",
                Severity.ERROR,
                "the training loop does not draw its batches from a torch DataLoader that ddpify can follow; "
                "every rank would train on the same samples",
            )

    def _is_iterable_dataset(self, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
        index = self.index
        if isinstance(expr, cst.Call):
            if isinstance(expr.func, cst.Name) and expr.func.value in index.classes:
                return self._subclasses_iterable_dataset(index.classes[expr.func.value])
            return False
        ref = index.ref_of(expr, scope)
        if ref is None or depth > 3:
            return False
        return any(self._is_iterable_dataset(a.value, index.scope_of(a), depth + 1) for a in self._assigned_values(ref))

    def _subclasses_iterable_dataset(self, cls: cst.ClassDef, depth: int = 0) -> bool:
        for base in cls.bases:
            if self.index.qualified_names(base.value) & torch_api.ITERABLE_DATASET:
                return True
            parent = self.index.classes.get(dotted(base.value))
            if parent is not None and depth < 5 and self._subclasses_iterable_dataset(parent, depth + 1):
                return True
        return False

    def _restarts(self, refs: set[Ref]) -> Iterator[EpochLoop]:
        """``except StopIteration: it = iter(loader)``: the statements that start another pass."""
        index = self.index
        for stmt in index.statements:
            small = stmt.body[0]
            if len(stmt.body) != 1 or not isinstance(small, cst.Assign):
                continue
            value = small.value
            if not (isinstance(value, cst.Call) and m.matches(value.func, m.Name("iter")) and value.args):
                continue
            ref = index.ref_of(value.args[0].value, index.scope_of(stmt))
            if ref in refs and any(
                isinstance(a, cst.ExceptHandler) and a.type is not None and "StopIteration" in dotted(a.type)
                for a in index.ancestors(stmt)
            ):
                yield EpochLoop(stmt, self._expression(ref, index.scope_of(stmt)))

    def _dataset_lengths(self, refs: set[Ref]) -> Iterator[cst.Attribute]:
        index = self.index
        for ref in refs:
            for scope in _scopes_reading(index, ref):
                for read in index.mentions(scope, ref, scope):
                    attribute = index.parent(read)
                    if m.matches(attribute, m.Attribute(attr=m.Name("dataset"))) and attribute.value is read:
                        arg = index.parent(attribute)
                        if isinstance(arg, cst.Arg) and m.matches(index.parent(arg), m.Call(func=m.Name("len"))):
                            yield attribute

    def _check_sampling_arguments(self, call: cst.Call) -> None:
        dataset = next((a.value for a in call.args if a.keyword is None or a.keyword.value == "dataset"), None)
        if dataset is not None and self._is_iterable_dataset(dataset, self.index.scope_of(call)):
            self.report(
                dataset,
                "DDP208",
                Severity.ERROR,
                "the training data is an IterableDataset: a DistributedSampler cannot shard it; "
                "make each rank yield its own share (e.g. skip items by dist.get_rank())",
            )
        for position, arg in enumerate(call.args):
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword in torch_api.DATALOADER_SAMPLING_KEYWORDS or (
                keyword is None and not arg.star and position >= torch_api.DATALOADER_POSITIONS["sampler"]
            ):
                self.report(
                    arg,
                    "DDP202",
                    Severity.ERROR,
                    "the training DataLoader already has its own sampler; a DistributedSampler would replace it",
                )
            elif arg.star == "*":
                self.report(arg, "DDP205", Severity.ERROR, "cannot add a sampler to a DataLoader built from `*args`")

    def _dict_keys(self, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> frozenset[str] | None:
        """The keys a ``**kwargs`` dict can hold, from its literal definitions and updates; None if unknown."""
        if depth > 3:
            return None
        if isinstance(expr, cst.Dict):
            keys = set()
            for element in expr.elements:
                if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString):
                    keys.add(element.key.evaluated_value)
                elif isinstance(element, cst.StarredDictElement):
                    inner = self._dict_keys(element.value, scope, depth + 1)
                    if inner is None:
                        return None
                    keys |= inner
                else:
                    return None
            return frozenset(keys)
        if isinstance(expr, cst.IfExp):
            body, orelse = self._dict_keys(expr.body, scope, depth + 1), self._dict_keys(expr.orelse, scope, depth + 1)
            return None if body is None or orelse is None else body | orelse
        if isinstance(expr, cst.Call) and m.matches(expr.func, m.Name("dict")):
            if any(a.keyword is None for a in expr.args):
                return None
            return frozenset(a.keyword.value for a in expr.args)
        ref = self.index.ref_of(expr, scope)
        if ref is None or self.index.flows_into(ref):
            return None
        keys: set[str] = set()
        assigned = False
        for assign in self._assigned_values(ref):
            found = self._dict_keys(assign.value, self.index.scope_of(assign), depth + 1)
            if found is None:
                return None
            keys |= found
            assigned = True
        for read in self.index.mentions(
            ref.scope if not isinstance(ref.scope, cst.ClassDef) else self.index.module, ref, scope
        ):
            parent = self.index.parent(read)
            if isinstance(parent, cst.Attribute) and parent.value is read:
                call = self.index.parent(parent)
                if parent.attr.value == "update" and isinstance(call, cst.Call) and len(call.args) == 1:
                    found = self._dict_keys(call.args[0].value, self.index.scope_of(call), depth + 1)
                    if found is None:
                        return None
                    keys |= found
                elif parent.attr.value not in {"get", "copy", "items", "keys", "values"}:
                    return None
            elif isinstance(parent, cst.Subscript):
                element = parent.slice[0].slice if parent.slice else None
                if isinstance(self.index.parent(parent), cst.AssignTarget):
                    if isinstance(element, cst.Index) and isinstance(element.value, cst.SimpleString):
                        keys.add(element.value.evaluated_value)
                    else:
                        return None
        return frozenset(keys) if assigned else None

    def _iterations(self, refs: set[Ref]) -> list[tuple[cst.CSTNode, Ref]]:
        """Where batches are drawn from the loader: ``for ... in loader`` loops and ``next(it)`` calls."""
        index = self.index
        sites: list[tuple[cst.CSTNode, Ref]] = []
        for loop in index.loops:
            if isinstance(loop, cst.For):
                ref = self._iterated_ref(loop.iter, index.scope_of(loop), refs)
                if ref is not None:
                    sites.append((loop, ref))
        for comprehension in index.comprehensions:
            ref = self._iterated_ref(comprehension.iter, index.scope_of(comprehension), refs)
            if ref is not None:
                sites.append((comprehension, ref))
        for call in index.calls:
            if m.matches(call.func, m.Name("next")) and call.args:
                ref = index.carried_ref(call.args[0].value, index.scope_of(call))
                if ref in refs:
                    sites.append((call, ref))
        return sites

    def _iterated_ref(self, expr: cst.BaseExpression, scope: Scope, refs: set[Ref]) -> Ref | None:
        ref = self.index.carried_ref(expr, scope)
        if ref in refs:
            return ref
        if isinstance(expr, cst.Call) and not m.matches(expr.func, m.Name("len") | m.Name("range")):
            for arg in expr.args:
                if arg.keyword is None:
                    found = self._iterated_ref(arg.value, scope, refs)
                    if found is not None:
                        return found
        return None

    def _site_trains(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.CompFor):
            return False
        if isinstance(node, cst.For):
            return self.index.trains(node.body)
        return any(self.index.trains(loop.body) for loop in self.index.enclosing_loops(node))

    def _epoch_loop(self, site: cst.CSTNode, ref: Ref, depth: int = 0) -> EpochLoop | None:
        index = self.index
        loops = [lp for lp in index.enclosing_loops(site) if lp is not site]
        if depth == 0 and isinstance(site, cst.Call):  # next(it): the loop drawing batches is the innermost one
            loops = loops[1:]
        for loop in loops:
            if isinstance(loop, cst.For):
                return EpochLoop(loop, self._expression(ref, index.scope_of(loop)))
            return None  # a `while` loop counts steps, not epochs
        scope = index.scope_of(site)
        if not isinstance(scope, cst.FunctionDef) or depth > 4:
            return None
        for call in index.callers(scope):
            caller_scope = index.scope_of(call)
            caller_ref = self._ref_at_call(ref, scope, call, caller_scope)
            if caller_ref is not None:
                found = self._epoch_loop(call, caller_ref, depth + 1)
                if found is not None:
                    return found
        return None

    def _ref_at_call(self, ref: Ref, callee: cst.FunctionDef, call: cst.Call, caller: Scope) -> Ref | None:
        """How the caller names the value that the callee knows as ``ref``."""
        index = self.index
        if isinstance(ref.scope, cst.Module):
            return ref
        if isinstance(ref.scope, cst.ClassDef):
            owner = index._method_scope(caller)
            return ref if owner is not None and index.class_of.get(owner) is ref.scope else None
        stmt = index.statement_of(call)
        return next((flow.src for flow in index.flows_into(ref) if flow.stmt is stmt), None)

    def _expression(self, ref: Ref, scope: Scope) -> str:
        if ref.path.startswith("self."):
            return f"{self.index.self_name(self.index._method_scope(scope))}{ref.path[4:]}"
        return ref.path

    # -- side effects --------------------------------------------------------
    def _statements_calling(self, names: frozenset[str]) -> Iterator[cst.SimpleStatementLine]:
        for stmt in self.index.statements:
            if all(isinstance(s, cst.Expr) and self.index.is_call_to(s.value, names) for s in stmt.body):
                yield stmt

    def _gpu_numbers(self) -> Iterator[cst.Integer]:
        """``device = 0`` (``gpu_id = 0``) whose value reaches ``.to(...)`` / ``.cuda(...)`` as a device."""
        index = self.index
        for stmt in index.statements:
            small = stmt.body[0]
            if not (len(stmt.body) == 1 and isinstance(small, cst.Assign) and isinstance(small.value, cst.Integer)):
                continue
            ref = index.ref_of(small.targets[0].target, index.scope_of(stmt)) if len(small.targets) == 1 else None
            if ref is None:
                continue
            refs = index.downstream(ref)
            for other in refs:
                for scope in _scopes_reading(index, other):
                    if any(self._used_as_device(read) for read in index.mentions(scope, other, scope)):
                        yield small.value
                        break
                else:
                    continue
                break

    def _used_as_device(self, read: cst.BaseExpression) -> bool:
        arg = self.index.parent(read)
        if not isinstance(arg, cst.Arg):
            return False
        call = self.index.parent(arg)
        if arg.keyword is not None:
            return arg.keyword.value == "device"
        return call.args[0] is arg and m.matches(call.func, m.Attribute(attr=m.Name("to") | m.Name("cuda")))

    def _reloaded(self, saves: tuple[cst.SimpleStatementLine, ...]) -> Iterator[cst.SimpleStatementLine]:
        """Saves of a file the script reads back with ``torch.load``: the other ranks must wait for rank 0."""
        index = self.index
        loaded = {
            index.module.code_for_node(call.args[0].value)
            for call in index.calls
            if index.is_call_to(call, torch_api.LOAD) and call.args
        }
        for stmt in saves:
            call = stmt.body[0].value
            path = next(
                (
                    a.value
                    for i, a in enumerate(call.args)
                    if (i == 1 and a.keyword is None) or (a.keyword and a.keyword.value == "f")
                ),
                None,
            )
            if path is not None and index.module.code_for_node(path) in loaded:
                yield stmt

    def _state_loads(self) -> Iterator[cst.Call]:
        """``torch.load`` calls without ``map_location`` whose result only feeds ``load_state_dict``."""
        index = self.index
        for call in index.calls:
            if not index.is_call_to(call, torch_api.LOAD):
                continue
            if len([a for a in call.args if a.keyword is None]) > 1 or any(
                a.keyword and a.keyword.value == "map_location" for a in call.args
            ):
                continue
            if self._feeds_state_dicts(call):
                yield call
            else:
                self.report(
                    call,
                    "DDP401",
                    Severity.WARNING,
                    "torch.load without map_location: every rank loads onto the GPU the checkpoint was saved "
                    "from; pass map_location=<this rank's device>",
                )

    def _feeds_state_dicts(self, call: cst.Call) -> bool:
        index = self.index
        parent = index.parent(call)
        if isinstance(parent, cst.Arg):
            return m.matches(index.parent(parent), m.Call(func=m.Attribute(attr=m.Name("load_state_dict"))))
        if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1):
            return False
        ref = index.ref_of(parent.targets[0].target, index.scope_of(call))
        if ref is None:
            return False
        reads = [
            r
            for scope in _scopes_reading(index, ref)
            for r in index.mentions(scope, ref, scope)
            if not isinstance(index.parent(r), cst.AssignTarget)
        ]
        for read in reads:
            node = read
            while isinstance(index.parent(node), cst.Subscript) and index.parent(node).value is node:
                node = index.parent(node)
            arg = index.parent(node)
            if isinstance(arg, cst.Arg) and m.matches(
                index.parent(arg), m.Call(func=m.Attribute(attr=m.Name("load_state_dict")))
            ):
                continue
            if node is not read:  # checkpoint["epoch"]: a plain value read out of the checkpoint
                continue
            return False
        return bool(reads)

    def _trackers(self) -> Iterator[cst.Call]:
        for call in self.index.calls:
            parent = self.index.parent(call)
            if self.index.is_call_to(call, torch_api.TRACKER_FACTORIES) and isinstance(parent, cst.Assign):
                yield call

    def _outputs(
        self, models: tuple[Model, ...], trackers: tuple[cst.Call, ...]
    ) -> Iterator[tuple[cst.BaseStatement, str]]:
        """Statements whose only effect is output: printing, logging, plots, trackers, files written."""
        index = self.index
        model_refs = set().union(*(index.lineage(model.ref) for model in models)) if models else set()
        tracker_refs: set[Ref] = set()
        for call in trackers:
            assign = index.parent(call)
            ref = index.ref_of(assign.targets[0].target, index.scope_of(call))
            if ref is not None:
                tracker_refs |= index.downstream(ref)
        logger_refs: set[Ref] = set()
        for call in index.calls:
            if index.is_call_to(call, torch_api.LOGGER_FACTORIES) and isinstance(index.parent(call), cst.Assign):
                ref = index.ref_of(index.parent(call).targets[0].target, index.scope_of(call))
                if ref is not None:
                    logger_refs |= index.downstream(ref)
        for stmt in index.statements:
            kinds = {self._output_kind(small, tracker_refs, logger_refs) for small in stmt.body}
            if len(kinds) == 1 and None not in kinds:
                kind = kinds.pop()
                work = self._work_calls(stmt, model_refs)
                if (
                    work
                    and len(stmt.body) == 1
                    and not any(
                        isinstance(a, (cst.Lambda, cst.BaseComp)) for call in work for a in index.ancestors(call)
                    )
                ):
                    self._hoisted.extend(work)
                elif work:
                    self.report(
                        stmt,
                        "DDP501",
                        Severity.WARNING,
                        f"this {kind} also runs the model or the script's own functions: left on every rank, "
                        "so it happens once per process",
                    )
                    continue
                yield stmt, kind
        for node in index.walk(index.module):
            if isinstance(node, cst.With) and self._writes_file(node) and not self._runs_collectives(node, model_refs):
                yield node, "file write"
            elif isinstance(node, cst.If) and isinstance(node.body, cst.SimpleStatementSuite) and node.orelse is None:
                # if step % 10 == 0: print(loss.item())
                kinds = {self._output_kind(small, tracker_refs, logger_refs) for small in node.body.body}
                if len(kinds) == 1 and None not in kinds and not self._runs_collectives(node.body, model_refs):
                    yield node, kinds.pop()

    def _output_kind(self, small: cst.BaseSmallStatement, trackers: set[Ref], loggers: set[Ref]) -> str | None:
        if not isinstance(small, cst.Expr) or not isinstance(small.value, cst.Call):
            return None
        index = self.index
        call = small.value
        names = index.qualified_names(call.func)
        if "builtins.print" in names:
            return "print"
        if names & torch_api.LOGGING_FUNCTIONS:
            return "logging call"
        if names & torch_api.OUTPUT_FUNCTIONS:
            return "output call"
        if names & torch_api.TRACKER_FACTORIES or any(n.startswith(torch_api.TRACKER_MODULES) for n in names):
            return "tracker call"
        if isinstance(call.func, cst.Attribute):
            receiver = index.carried_ref(call.func.value, index.scope_of(call))
            if receiver in trackers:
                return "tracker call"
            if receiver in loggers and call.func.attr.value in torch_api.LOGGER_METHODS:
                return "logging call"
            if call.func.attr.value in torch_api.OUTPUT_METHODS:
                return "output call"
        return None

    def _writes_file(self, node: cst.With) -> bool:
        """``with open(path, "w") as f:`` (or "a", "x")."""
        for item in node.items:
            call = item.item
            if isinstance(call, cst.Call) and "builtins.open" in self.index.qualified_names(call.func):
                mode = next(
                    (
                        a.value
                        for i, a in enumerate(call.args)
                        if (a.keyword is None and i == 1) or (a.keyword and a.keyword.value == "mode")
                    ),
                    None,
                )
                if isinstance(mode, cst.SimpleString) and set(mode.evaluated_value) & set("wax"):
                    return True
        return False

    def _runs_collectives(self, stmt: cst.CSTNode, model_refs: set[Ref]) -> bool:
        return bool(self._work_calls(stmt, model_refs))

    def _work_calls(self, node: cst.CSTNode, model_refs: set[Ref]) -> list[cst.Call]:
        """The outermost calls in ``node`` that run the model or the script's own functions."""
        if isinstance(node, cst.Call):
            scope = self.index.scope_of(node)
            if (
                self.index.resolve_callee(node, scope) is not None
                or self.index.carried_ref(node.func, scope) in model_refs
            ):
                return [node]
        return [call for child in self.index.children.get(node, ()) for call in self._work_calls(child, model_refs)]

    def _setup_at_module_level(self, models: tuple[Model, ...], loaders: tuple[Loader, ...]) -> bool:
        """Whether training objects are built by module-level code (outside every function)."""
        index = self.index
        guard = index.main_guard
        if guard is None:
            return True
        nodes = [model.insert_after for model in models] + [loader.call for loader in loaders]
        return any(index.scope_of(node) is index.module and not _inside(index, node, guard) for node in nodes)


def _pure(expr: cst.BaseExpression) -> bool:
    """Arithmetic and comparisons on names, attributes, numbers and ``len()``: safe to evaluate earlier."""
    for node in _walk(expr):
        if isinstance(node, cst.Call) and not m.matches(node.func, m.Name("len")):
            return False
        if isinstance(node, (cst.NamedExpr, cst.Await, cst.Yield, cst.Lambda)):
            return False
    return True


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


def _inside(index: Index, node: cst.CSTNode, container: cst.CSTNode) -> bool:
    return any(ancestor is container for ancestor in index.ancestors(node))


def _scopes_reading(index: Index, ref: Ref) -> list[cst.CSTNode]:
    """The function bodies in which ``ref`` can be read."""
    if isinstance(ref.scope, cst.ClassDef):
        return [f for f, cls in index.class_of.items() if cls is ref.scope]
    return [ref.scope]

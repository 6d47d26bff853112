"""Invariants of a converted script, checked on the output text alone.

A safety net under the concerns: whatever the analysis concluded, the script
ddpify is about to write is parsed again with CPython's :mod:`ast` (not libcst,
and without ddpify's index) and checked for violations that would make it
train wrongly under ``torchrun``:

* DDP901 a distributed call (``DistributedSampler(...)``, ``DDP(...)``,
  ``dist.get_rank()``, ``dist.barrier()``, ...) runs at module level before the
  module-level call that joins the process group;
* DDP902 a ``DataLoader`` iterated by a training loop has no sampler, or its
  epoch loop does not call ``set_epoch`` on its ``DistributedSampler`` exactly once;
* DDP903 ``torch.save(...)`` or ``open(..., "w")`` runs on every rank;
* DDP904 an optimizer updates a model that its training loop runs unwrapped, or a wrap in a function
  rebinds a local name that nothing reads afterwards;
* DDP905 a distributed call (the wrap, a sampler, ``set_epoch``, a rank test)
  follows a ``return``, ``raise``, ``break`` or ``continue`` in its block, so it never runs;
* DDP906 in a module other than the entry script (which other scripts may
  import without a process group), a distributed call runs where no
  ``dist.is_initialized()`` test guards it;
* DDP908 a collective ddpify added (a broadcast, a reduction, the wrap, or a helper
  of the script that runs one) runs under a test of the rank.

In a module other than the entry, the ``if __name__ == "__main__":`` block (a
self-test) is left out: it never runs when the entry imports the module.

Each check looks only at what it can decide from the syntax in one scope, and
passes whenever it cannot decide: it exists to catch a clear violation, never
to refuse a good script. A violation is a bug in ddpify; the conversion is
refused and nothing is written.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator

from ddpify import invariant_calls as where
from ddpify.diagnostics import (
    INVARIANT_DATA,
    INVARIANT_ONE_WRITER,
    INVARIANT_SETUP_FIRST,
    INVARIANT_WRAPPED,
    Code,
    Diagnostic,
)
from ddpify.engine.reach import is_main_block
from ddpify.invariant_calls import DISTRIBUTED as _DISTRIBUTED

_SETUP = frozenset({"torch.distributed.init_process_group"})
_WRAPS = frozenset(
    {"torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel"}
)
_DATA_LOADER = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
_SAMPLERS = frozenset({"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"})
_MAP_STYLE = frozenset(
    {
        "torch.utils.data.TensorDataset",
        "torch.utils.data.dataset.TensorDataset",
        "torch.utils.data.Subset",
        "torch.utils.data.ConcatDataset",
    }
)
_PROGRESS_BARS = frozenset({"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.std.tqdm"})
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_LEAVES = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)


def check(code: str, path: str = "<string>", *, entry: bool = True, original: str = "") -> list[Diagnostic]:
    """Every clear violation of an invariant in the converted script ``code`` (with ``entry`` false,
    in a converted module of its program, which other scripts may import without a process group).

    Distributed calls that ``original`` (the module before conversion) already made are the
    program's own: where they stand is not ddpify's doing (they can only be in code that never
    runs, or the program would have been left alone as already distributed).
    """
    try:
        tree = ast.parse(code)
        before = ast.parse(original)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # the output is compiled elsewhere; what does not parse is not decidable here
    if not entry:  # another module's main block (its self-test) never runs when the entry imports the module
        tree.body = [stmt for stmt in tree.body if not (isinstance(stmt, ast.If) and is_main_block(stmt))]
    script = _Script(tree)
    script.entry = entry
    script.before = before
    found = [
        *script.setup_first(),
        *script.training_data(),
        *script.one_writer(),
        *script.optimized_models_wrapped(),
        *script.wrappers_read(),
        *where.distributed_calls_run(script),
        *(() if entry else where.distributed_calls_guarded(script)),
        *where.collectives_on_every_rank(script),
    ]
    return [
        code.at(
            1,
            1,
            f"ddpify produced a script that would {what} (output line {line}); nothing written; please report",
            path,
        )
        for code, line, what in sorted(found, key=lambda f: (f[1], f[0].code))
    ]


_Violation = tuple[Code, int, str]


class _Script:
    """The parsed output, indexed once: parents, the scope of every node, names by their text."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.entry = True  # the entry script, whose main block runs
        self.parent: dict[ast.AST, ast.AST] = {}
        self.calls: list[ast.Call] = []
        # per function, class or module: the calls, attributes and ifs that run in it
        self.in_scope: dict[ast.AST, list[ast.AST]] = {tree: []}
        self.bindings: dict[ast.AST, dict[str, list[ast.AST]]] = {tree: {}}  # per scope: name -> statements
        self.by_tail: dict[str, list[ast.Name | ast.Attribute]] = {}  # ``x`` and ``a.x`` under "x"
        self.functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        self.imports: dict[str, str] = {}
        parent, by_tail, iter_children = self.parent, self.by_tail, ast.iter_child_nodes
        stack: list[tuple[ast.AST, ast.AST]] = [(tree, tree)]
        while stack:
            node, scope = stack.pop()
            if isinstance(node, ast.Name):
                by_tail.setdefault(node.id, []).append(node)
                continue  # a name has only its context below it
            if isinstance(node, ast.Constant):
                continue
            if isinstance(node, ast.Attribute):
                by_tail.setdefault(node.attr, []).append(node)
                self.in_scope[scope].append(node)
            elif isinstance(node, ast.Call):
                self.calls.append(node)
                self.in_scope[scope].append(node)
            elif isinstance(node, ast.If):
                self.in_scope[scope].append(node)
            elif isinstance(node, ast.stmt | ast.NamedExpr):
                self._record(node, scope)
            inner = scope
            if isinstance(node, _SCOPES):
                inner = node
                self.in_scope[node] = []
                self.bindings[node] = {}
            for child in iter_children(node):
                if not isinstance(child, _LEAVES):
                    parent[child] = node
                    stack.append((child, inner))
        self.backward_loops: set[ast.AST] = set()
        for call in self.calls:
            if isinstance(call.func, ast.Attribute) and call.func.attr == "backward":
                for ancestor in self.ancestors(call):
                    if isinstance(ancestor, _SCOPES):
                        break
                    if isinstance(ancestor, (ast.For, ast.AsyncFor, ast.While)):
                        self.backward_loops.add(ancestor)
        self._setup: dict[str, bool] = {}
        self.before: ast.Module | None = None  # the module before the conversion
        self._own_calls: Counter[str] | None = None

    def made_before(self, call: ast.AST) -> bool:
        """Whether the module before the conversion already makes ``call`` (the same text)."""
        if self._own_calls is None:
            before = self.before if self.before is not None else ast.Module(body=[], type_ignores=[])
            self._own_calls = Counter(ast.unparse(n) for n in ast.walk(before) if isinstance(n, ast.Call))
        return self._own_calls[ast.unparse(call)] > 0

    def _record(self, node: ast.stmt | ast.NamedExpr, scope: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.functions.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                head = alias.name.split(".")[0]
                self.imports[alias.asname or head] = alias.name if alias.asname else head
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        targets = node.targets if isinstance(node, ast.Assign) else _targets(node)
        for target in targets:
            for name in _bound_names(target):
                self.bindings[scope].setdefault(name, []).append(node)

    # -- helpers ---------------------------------------------------------
    def qualified(self, expr: ast.expr) -> str | None:
        parts: list[str] = []
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name) or expr.id not in self.imports:
            return None
        return ".".join([self.imports[expr.id], *reversed(parts)])

    def calls_to(self, call: ast.AST, names: frozenset[str]) -> bool:
        return isinstance(call, ast.Call) and self.qualified(call.func) in names

    def scope_of(self, node: ast.AST) -> ast.AST:
        current = self.parent.get(node)
        while current is not None and not isinstance(current, (*_SCOPES, ast.Module)):
            current = self.parent.get(current)
        return current if current is not None else self.tree

    def body_nodes(self, block: ast.AST) -> Iterator[ast.AST]:
        """Everything below ``block`` that runs with it: nested functions, lambdas and classes left out."""
        stack = list(ast.iter_child_nodes(block))
        while stack:
            node = stack.pop()
            yield node
            if not isinstance(node, _SCOPES):
                stack.extend(ast.iter_child_nodes(node))

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        current = self.parent.get(node)
        while current is not None:
            yield current
            current = self.parent.get(current)

    def joins_group(self, name: str) -> bool:
        """Whether calling the module's function ``name`` joins the process group (directly or through its calls)."""
        if name not in self._setup:
            self._setup[name] = False  # a recursive call adds nothing
            self._setup[name] = any(
                self.calls_to(node, _SETUP)
                or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and self.joins_group(node.func.id))
                for function in self.functions.get(name, ())
                for node in self.in_scope[function]
            )
        return self._setup[name]

    # -- (a) the process group first -------------------------------------
    def setup_first(self) -> Iterator[_Violation]:
        setup_line = None
        uses: list[ast.Call] = []
        for node in self.in_scope[self.tree]:
            if not isinstance(node, ast.Call):
                continue
            if self.calls_to(node, _SETUP) or (isinstance(node.func, ast.Name) and self.joins_group(node.func.id)):
                setup_line = node.lineno if setup_line is None else min(setup_line, node.lineno)
            elif self.calls_to(node, _DISTRIBUTED) and not self._guarded_by_is_initialized(node):
                uses.append(node)
        if setup_line is None:
            return  # the group is joined inside a function, or not at all: not decidable here
        for use in uses:
            if use.lineno < setup_line:
                what = f"call `{ast.unparse(use.func)}(...)` before the process group is set up"
                yield INVARIANT_SETUP_FIRST, use.lineno, what

    def _guarded_by_is_initialized(self, node: ast.AST) -> bool:
        """Under an ``is_initialized()`` test, or after ``if not dist.is_initialized(): return ...`` in its block."""
        return any(
            isinstance(a, (ast.If, ast.IfExp, ast.BoolOp))
            and any(isinstance(n, ast.Attribute | ast.Name) and _tail(n) == "is_initialized" for n in ast.walk(a))
            for a in self.ancestors(node)
        ) or any(
            _leaves_without_group(earlier)
            for statement in (node, *self.ancestors(node))
            if isinstance(statement, ast.stmt)
            for earlier in self._earlier_in_block(statement)
        )

    def _earlier_in_block(self, statement: ast.stmt) -> list[ast.stmt]:
        parent = self.parent.get(statement)
        if parent is None:
            return []
        for _, value in ast.iter_fields(parent):
            if isinstance(value, list) and statement in value:
                return value[: value.index(statement)]
        return []

    # -- (b) training data sharded, set_epoch once -----------------------
    def training_data(self) -> Iterator[_Violation]:
        for loop in self.backward_loops:
            if not isinstance(loop, (ast.For, ast.AsyncFor)):
                continue
            scope = self.scope_of(loop)
            name = self.iterated_name(loop.iter, scope)
            if name is None:
                continue
            loaders = list(self._assignments(scope, name))
            if len(loaders) != 1 or not self.calls_to(loaders[0].value, _DATA_LOADER):
                continue
            assignment = loaders[0]
            loader = assignment.value
            assert isinstance(loader, ast.Call)
            sampler = next((k.value for k in loader.keywords if k.arg in ("sampler", "batch_sampler")), None)
            if sampler is None:
                if any(k.arg is None for k in loader.keywords) or len(loader.args) > 3:
                    continue  # **kwargs, or a sampler passed by position
                if self._map_style(scope, loader) and not self._sampler_set_later(scope, name):
                    what = f"train on `{name}` without a sampler: every rank would load the same batches"
                    yield INVARIANT_DATA, loader.lineno, what
                continue
            yield from self._set_epoch_once(scope, loop, name, sampler)

    def _assignments(self, scope: ast.AST, name: str) -> list[ast.Assign]:
        """The plain ``name = ...`` statements of ``scope``; none when ``name`` is bound any other way too."""
        found = self.bindings[scope].get(name, [])
        if all(isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name) for a in found):
            return [a for a in found if isinstance(a, ast.Assign)]
        return []

    def _map_style(self, scope: ast.AST, loader: ast.Call) -> bool:
        dataset = (
            loader.args[0] if loader.args else next((k.value for k in loader.keywords if k.arg == "dataset"), None)
        )
        if isinstance(dataset, ast.Name):
            bound = self._assignments(scope, dataset.id)
            dataset = bound[0].value if len(bound) == 1 else None
        if not isinstance(dataset, ast.Call):
            return False
        qualified = self.qualified(dataset.func)
        if qualified in _MAP_STYLE or (qualified or "").startswith("torchvision.datasets."):
            return True
        if isinstance(dataset.func, ast.Name):
            classes = [c for c in self.tree.body if isinstance(c, ast.ClassDef) and c.name == dataset.func.id]
            return len(classes) == 1 and _map_style_class(classes[0])
        return False

    def _sampler_set_later(self, scope: ast.AST, name: str) -> bool:
        return any(
            isinstance(n, ast.Attribute)
            and isinstance(n.ctx, ast.Store)
            and isinstance(n.value, ast.Name)
            and n.value.id == name
            for n in self.in_scope[scope]
        )

    def _set_epoch_once(self, scope: ast.AST, loop: ast.AST, name: str, sampler: ast.expr) -> Iterator[_Violation]:
        receivers = {f"{name}.sampler"}
        if isinstance(sampler, ast.Name):
            bound = self._assignments(scope, sampler.id)
            if len(bound) != 1:
                return
            receivers.add(sampler.id)
            sampler = bound[0].value
        if not self.calls_to(sampler, _SAMPLERS) or not _shuffles(sampler):
            return
        epoch = next(
            (a for a in self.ancestors(loop) if isinstance(a, (ast.For, ast.AsyncFor, ast.While, *_SCOPES))), None
        )
        if not isinstance(epoch, (ast.For, ast.AsyncFor)):
            return  # one pass over the data, or passes counted some other way: not decidable here
        calls = sorted(
            (
                n
                for n in self.body_nodes(epoch)
                if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "set_epoch"
                and ast.unparse(n.func.value) in receivers
            ),
            key=lambda n: (n.lineno, n.col_offset),
        )
        unconditional = [c for c in calls if not any(isinstance(a, _BRANCHES) for a in self._between(c, epoch))]
        if not calls:
            what = f"never call `{name}.sampler.set_epoch(epoch)`: every epoch would shuffle the same way"
            yield INVARIANT_DATA, epoch.lineno, what
        elif len(unconditional) > 1:
            what = f"call `set_epoch` on `{name}`'s sampler {len(unconditional)} times per epoch"
            yield INVARIANT_DATA, unconditional[1].lineno, what

    def _between(self, node: ast.AST, outer: ast.AST) -> Iterator[ast.AST]:
        for ancestor in self.ancestors(node):
            if ancestor is outer:
                return
            yield ancestor

    # -- (c) one writer --------------------------------------------------
    def one_writer(self) -> Iterator[_Violation]:
        for node in self.calls:
            if self.qualified(node.func) == "torch.save":
                what = "save with `torch.save(...)` on every rank"
            elif isinstance(node.func, ast.Name) and node.func.id == "open" and _writes(node):
                what = "open a file for writing on every rank"
            else:
                continue
            if any(isinstance(n, ast.Name) and "rank" in n.id.lower() for n in ast.walk(node)):
                continue  # a file per rank
            if not self._on_rank_zero(node, frozenset()):
                yield INVARIANT_ONE_WRITER, node.lineno, what

    def _on_rank_zero(self, node: ast.AST, seen: frozenset[str]) -> bool:
        """Whether ``node`` runs on rank 0 only, or on one rank at a time; True also when that cannot be decided."""
        for ancestor in self.ancestors(node):
            if self._in_turns(ancestor):
                return True
            if isinstance(ancestor, (ast.If, ast.IfExp, ast.While)) and self._rankish(ancestor.test):
                return True
            if not self.entry and isinstance(ancestor, ast.If) and is_main_block(ancestor):
                return True  # another module's main block: it never runs when the entry imports the module
            if isinstance(ancestor, ast.BoolOp) and any(self._rankish(v) for v in ancestor.values):
                return True
            if isinstance(ancestor, (ast.Lambda, ast.ClassDef)):
                return True
            if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return self._function_on_rank_zero(ancestor, seen)
        return False  # module level: every rank runs it

    def _in_turns(self, stmt: ast.AST) -> bool:
        """Whether ``stmt`` runs between ``if <rank test>: dist.barrier()`` statements of its block, before and
        after it: the ranks take their turns there (a cache rank 0 writes first, that the others then read)."""
        parent = self.parent.get(stmt)
        body = next(
            (
                block
                for field in ("body", "orelse", "finalbody")
                if isinstance(block := getattr(parent, field, None), list) and stmt in block
            ),
            None,
        )
        if body is None:
            return False
        at = body.index(stmt)

        def turn(other: ast.stmt) -> bool:
            return (
                isinstance(other, ast.If)
                and self._rankish(other.test)
                and any(
                    isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "barrier"
                    for n in ast.walk(other)
                )
            )

        return any(turn(other) for other in body[:at]) and any(turn(other) for other in body[at + 1 :])

    def _function_on_rank_zero(self, function: ast.FunctionDef | ast.AsyncFunctionDef, seen: frozenset[str]) -> bool:
        if any(
            isinstance(n, ast.If) and self._rankish(n.test) and isinstance(n.body[0], ast.Return)
            for n in self.in_scope[function]
        ):
            return True  # an early return on the other ranks
        name = function.name
        if name in seen or len(self.functions.get(name, ())) != 1 or function.decorator_list:
            return True
        method = isinstance(self.parent.get(function), ast.ClassDef)
        calls = []
        for node in self.by_tail.get(name, ()):
            if isinstance(node, ast.Attribute if method else ast.Name):
                parent = self.parent.get(node)
                if not (isinstance(parent, ast.Call) and parent.func is node):
                    return True  # passed around as a value: its callers are not known
                calls.append(parent)
        return not calls or all(self._on_rank_zero(call, seen | {name}) for call in calls)

    def _rankish(self, test: ast.expr) -> bool:
        """A test that can tell rank 0 from the others (or that this check cannot read)."""
        for node in ast.walk(test):
            if isinstance(node, (ast.Name, ast.Attribute)) and any(
                word in _tail(node).lower() for word in ("rank", "main", "master")
            ):
                return True
            if isinstance(node, ast.Name) and self._rank_value(node.id):
                return True
        return False

    def _rank_value(self, name: str) -> bool:
        """Whether ``name`` is assigned from something about a rank anywhere, or is a helper's name."""
        if name in self.functions:
            return True  # a helper whose answer this check does not read
        return any(
            isinstance(node, ast.Assign)
            and any(
                isinstance(n, (ast.Name, ast.Attribute)) and "rank" in _tail(n).lower() for n in ast.walk(node.value)
            )
            for bindings in self.bindings.values()
            for node in bindings.get(name, ())
        )

    # -- (e) a wrapper is read --------------------------------------------
    def wrappers_read(self) -> Iterator[_Violation]:
        """``model = DDP(model)`` in a function, where nothing reads ``model`` after it: the wrap rebinds a
        local name that the training never runs (the module was kept in a field before)."""
        for call in self.calls:
            if not self.calls_to(call, _WRAPS) or self.made_before(call):
                continue
            assign = self.parent.get(call)
            scope = self.scope_of(call)
            if not (
                isinstance(assign, ast.Assign)
                and len(assign.targets) == 1
                and isinstance(target := assign.targets[0], ast.Name)
                and isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef))
            ):
                continue
            if any(isinstance(node, ast.Global | ast.Nonlocal) and target.id in node.names for node in ast.walk(scope)):
                continue
            if not self._handed_on_before(scope, target.id, assign):
                continue  # (nothing else holds the plain model either: no run trains it unwrapped)
            loops = [a for a in self.ancestors(assign) if isinstance(a, (ast.For, ast.AsyncFor, ast.While))]
            reads = [
                node
                for node in ast.walk(scope)
                if isinstance(node, ast.Name) and node.id == target.id and isinstance(node.ctx, ast.Load)
            ]
            if not any(
                (read.lineno, read.col_offset) >= (assign.end_lineno or assign.lineno, assign.end_col_offset or 0)
                or (any(_inside(read, loop) for loop in loops) and not _inside(read, assign))
                for read in reads
            ):
                what = f"wrap `{target.id}` in DistributedDataParallel where nothing reads `{target.id}` afterwards"
                yield INVARIANT_WRAPPED, assign.lineno, what

    def _handed_on_before(self, scope: ast.AST, name: str, wrap: ast.Assign) -> bool:
        """Whether ``name`` is kept or handed on before the wrap: stored (``self.model = model``), put into a
        container, or passed to a call (``self.add_module("g", g)``), so that a plain model lives on elsewhere."""
        for node in ast.walk(scope):
            if not (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)):
                continue
            if (node.lineno, node.col_offset) >= (wrap.lineno, wrap.col_offset):
                continue
            parent = self.parent.get(node)
            if isinstance(parent, ast.Assign | ast.AnnAssign) and parent.value is node:
                return True
            if isinstance(parent, ast.Call) and node in parent.args:
                return True
            if isinstance(parent, ast.keyword | ast.List | ast.Tuple | ast.Dict | ast.Set):
                return True
        return False

    # -- (d) what is optimized is wrapped --------------------------------
    def optimized_models_wrapped(self) -> Iterator[_Violation]:
        for optimizer in self.calls:
            qualified = self.qualified(optimizer.func) or ""
            if not qualified.startswith("torch.optim.") or qualified.startswith("torch.optim.lr_scheduler"):
                continue
            scope = self.scope_of(optimizer)
            for name in self._optimized_names(optimizer):
                loop = self._first_training_loop(scope, optimizer, name)
                if loop is None or self._held_by_a_wrapped_model(scope, name):
                    continue
                if not any(
                    isinstance(n, ast.Assign)
                    and n.lineno < loop.lineno
                    and any(
                        self.calls_to(c, _WRAPS) or self._returns_wrapped(c, _position(n, name))
                        for c in ast.walk(n.value)
                    )
                    for n in self.bindings[scope].get(name, ())
                ):
                    what = f"train `{name}` without DistributedDataParallel: its gradients would not be averaged"
                    yield INVARIANT_WRAPPED, loop.lineno, what
            for alias, name, loop in self._aliases_trained(scope, optimizer, sorted(self._optimized_names(optimizer))):
                what = (
                    f"train `{alias}`, another name for `{name}` taken before its wrap, without "
                    "DistributedDataParallel: its gradients would not be averaged"
                )
                yield INVARIANT_WRAPPED, loop.lineno, what

    def _held_by_a_wrapped_model(self, scope: ast.AST, name: str) -> bool:
        """``d_net = Distiller(t_net, s_net)``, then ``d_net = DDP(d_net)``: ``s_net`` trains inside ``d_net``,
        whose wrapper averages its gradients."""
        for bound in self.bindings[scope].values():
            assigns = [n for n in bound if isinstance(n, ast.Assign)]
            built = any(
                isinstance(a.value, ast.Call) and any(isinstance(g, ast.Name) and g.id == name for g in a.value.args)
                for a in assigns
            )
            if built and any(self.calls_to(c, _WRAPS) for a in assigns for c in ast.walk(a.value)):
                return True
        return False

    def _aliases_trained(
        self, scope: ast.AST, optimizer: ast.Call, names: list[str]
    ) -> Iterator[tuple[str, str, ast.For | ast.AsyncFor | ast.While]]:
        """``net = model`` before ``model = DDP(model)``, then a training loop that calls ``net(...)``: the
        alias still names the plain module."""
        bindings = self.bindings[scope]
        for name in names:
            wraps = [
                n.lineno
                for n in bindings.get(name, ())
                if isinstance(n, ast.Assign) and any(self.calls_to(c, _WRAPS) for c in ast.walk(n.value))
            ]
            if not wraps:
                continue
            aliases = {name}  # ``net = model``, and ``other = net`` in turn, all taken before the wrap
            grown = True
            while grown:
                grown = False
                for alias, bound in bindings.items():
                    assigns = [n for n in bound if isinstance(n, ast.Assign)]
                    if alias in aliases or not assigns or len(assigns) != len(bound):
                        continue
                    if all(
                        isinstance(a.value, ast.Name) and a.value.id in aliases and a.lineno < min(wraps)
                        for a in assigns
                    ):
                        aliases.add(alias)
                        grown = True
            for alias in sorted(aliases - {name}):
                loop = self._first_training_loop_calling(scope, optimizer, alias)
                if loop is not None:
                    yield alias, name, loop

    def _first_training_loop_calling(
        self, scope: ast.AST, optimizer: ast.Call, name: str
    ) -> ast.For | ast.AsyncFor | ast.While | None:
        """The first loop after ``optimizer`` in ``scope`` that runs ``.backward()``, where it calls ``name``."""
        loops = sorted(
            (
                n
                for n in self.backward_loops
                if isinstance(n, (ast.For, ast.AsyncFor, ast.While))
                and n.lineno > optimizer.lineno
                and self.scope_of(n) is scope
            ),
            key=lambda n: n.lineno,
        )
        for loop in loops[:1]:
            if any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
                for n in self.body_nodes(loop)
            ):
                return loop
        return None

    def _returns_wrapped(self, node: ast.AST, position: int | None) -> bool:
        """``get_model(...)``, a function of this module whose returned model it wraps itself (the
        ``position``-th of a returned tuple, where the caller unpacks one); or ``Builder(...).build()``,
        the one method of that name in this module."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute)):
            return False
        functions = self.functions.get(_tail(node.func), ())
        if len(functions) != 1:
            return False
        function = functions[0]
        for returned in ast.walk(function):
            if not isinstance(returned, ast.Return) or returned.value is None:
                continue
            value = returned.value
            if isinstance(value, ast.Tuple) and position is not None and position < len(value.elts):
                value = value.elts[position]
            if any(self.calls_to(c, _WRAPS) for c in ast.walk(value)):
                return True
            if isinstance(value, ast.Name) and any(
                isinstance(n, ast.Assign) and any(self.calls_to(c, _WRAPS) for c in ast.walk(n.value))
                for n in self.bindings.get(function, {}).get(value.id, ())
            ):
                return True
        return False

    def _optimized_names(self, optimizer: ast.Call) -> set[str]:
        names = set()
        for node in ast.walk(optimizer):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("parameters", "named_parameters")
            ):
                receiver = node.func.value
                chain = []
                while isinstance(receiver, ast.Attribute):
                    chain.append(receiver.attr)
                    receiver = receiver.value
                if isinstance(receiver, ast.Name) and "module" not in chain:
                    names.add(receiver.id)
        return names

    def _first_training_loop(
        self, scope: ast.AST, optimizer: ast.Call, name: str
    ) -> ast.For | ast.AsyncFor | ast.While | None:
        """The first loop after ``optimizer`` in the same scope that runs ``.backward()`` and calls ``name``."""
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef) and name in {
            a.arg for a in (*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs)
        }:
            return None  # wrapped, or not, by the caller
        assigned = [n for n in self.bindings[scope].get(name, ()) if isinstance(n, ast.Assign)]
        if not assigned:
            return None  # bound elsewhere (a global, an import): not decidable here
        if all(isinstance(n.value, ast.Attribute | ast.Name | ast.Subscript) for n in assigned):
            return None  # another name for a model kept elsewhere (``model = self.model``): wrapped there, or not
        return self._first_training_loop_calling(scope, optimizer, name)

    def iterated_name(self, expr: ast.expr, scope: ast.AST) -> str | None:
        """``loader`` in ``for b in loader``, ``enumerate(loader)``, ``tqdm(loader)``, or ``pbar = tqdm(loader)``."""
        for _ in range(8):
            if isinstance(expr, ast.Call) and expr.args and _wraps_iterable(self.qualified(expr.func), expr.func):
                expr = expr.args[0]
                continue
            if not isinstance(expr, ast.Name):
                return None
            bound = self._assignments(scope, expr.id)
            if len(bound) != 1 or not (
                isinstance(bound[0].value, ast.Call) and self.qualified(bound[0].value.func) in _PROGRESS_BARS
            ):
                return expr.id
            expr = bound[0].value
        return None


_BRANCHES = (ast.If, ast.IfExp, ast.Try, ast.Match, ast.BoolOp, ast.For, ast.AsyncFor, ast.While)


def _inside(node: ast.AST, outer: ast.AST) -> bool:
    """Whether ``node`` lies in the lines of ``outer`` (a loop that runs it again after the wrap)."""
    start: int = getattr(outer, "lineno", 0)
    end: int = getattr(outer, "end_lineno", None) or start
    line: int = getattr(node, "lineno", 0)
    return start <= line <= end


def _leaves_without_group(statement: ast.stmt) -> bool:
    """``if not dist.is_initialized(): return ...`` (or ``raise``, ``continue``, ``break``): what follows it
    in its block runs only where a process group exists."""
    return (
        isinstance(statement, ast.If)
        and not statement.orelse
        and isinstance(statement.test, ast.UnaryOp)
        and isinstance(statement.test.op, ast.Not)
        and isinstance(statement.test.operand, ast.Call)
        and isinstance(statement.test.operand.func, (ast.Name, ast.Attribute))
        and _tail(statement.test.operand.func) == "is_initialized"
        and isinstance(statement.body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))
    )


def _tail(node: ast.Name | ast.Attribute) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr


def _wraps_iterable(qualified: str | None, func: ast.expr) -> bool:
    """``enumerate`` or a progress bar: the loop still draws from the iterable they are given."""
    if isinstance(func, ast.Name) and func.id == "enumerate":
        return True
    return qualified in _PROGRESS_BARS


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr, ast.For)):
        return [node.target]
    if isinstance(node, ast.With):
        return [item.optional_vars for item in node.items if item.optional_vars is not None]
    return []


def _bound_names(target: ast.expr) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return {n for element in target.elts for n in _bound_names(element)}
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return set()


def _map_style_class(cls: ast.ClassDef) -> bool:
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    bases = {ast.unparse(b).split(".")[-1] for b in cls.bases}
    return "__getitem__" in methods and "__len__" in methods and not (bases & {"IterableDataset", "IterDataPipe"})


def _writes(call: ast.Call) -> bool:
    mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and bool(set(mode.value) & set("wax"))


def _shuffles(sampler: ast.expr) -> bool:
    """A ``DistributedSampler(...)`` that certainly shuffles (the default)."""
    assert isinstance(sampler, ast.Call)
    shuffle = next((k.value for k in sampler.keywords if k.arg == "shuffle"), None)
    if any(k.arg is None for k in sampler.keywords) or len(sampler.args) > 3:
        return False
    return shuffle is None or (isinstance(shuffle, ast.Constant) and shuffle.value is True)


def _position(assign: ast.Assign, name: str) -> int | None:
    """Where ``name`` stands in a tuple target (``(net, head) = get_model()``: 0 for ``net``)."""
    for target in assign.targets:
        if isinstance(target, ast.Tuple | ast.List):
            for i, element in enumerate(target.elts):
                if isinstance(element, ast.Name) and element.id == name:
                    return i
    return None

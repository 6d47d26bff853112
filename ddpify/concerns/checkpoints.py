"""Checkpoints: ``torch.save`` runs on global rank 0 only.

Every rank holds the same weights after each step, so one copy is enough, and
N processes writing one file corrupt it. The model pass has already made the
saved object the unwrapped module (``model.module.state_dict()``), so the
checkpoint loads into the single-GPU model as before::

    torch.save(model.state_dict(), "model.pt")
    ->  if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), "model.pt")

The global rank (not the local one) decides, so a multi-node job writes one
checkpoint, not one per node. In a script that saves, statements that copy,
move or delete files (``shutil.copyfile(path, "model_best.pth")``,
``os.replace``) run on rank 0 too: on every rank they would race over the file
rank 0 is writing.

When the script reads a saved file back later (``torch.load`` of the same
path), a ``dist.barrier()`` follows the save, on every rank, so that nobody
reads a file rank 0 is still writing.

``torch.load`` of a state dict gets ``map_location="cpu"``: without it every
rank would load the tensors onto the GPU they were saved from (GPU 0), and
``load_state_dict`` copies them to the model's own device anyway::

    model.load_state_dict(torch.load(path))
    ->  model.load_state_dict(torch.load(path, map_location="cpu"))

A checkpoint that stores the model object itself -- ``torch.save(model, f)``,
``torch.save({"model": model, ...}, f)``, or a dict filled first and saved
through its name -- stores ``model.module`` (found by the model concern with
:func:`saved`): the wrapper would need a process group to be loaded again.

Limits: a ``torch.load`` without ``map_location`` whose result is not only fed
to ``load_state_dict`` is reported (DDP401), not changed; a barrier follows a
save only when the script loads a path of the same shape again (the same strings and attributes, values
aside).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.concerns import downloads
from ddpify.diagnostics import Code, Severity
from ddpify.engine import uniformity
from ddpify.engine.called import enclosing_function
from ddpify.engine.edits import EditPlan, with_comma
from ddpify.engine.index import Index
from ddpify.engine.program import Program
from ddpify.engine.syntax import argument, single_target
from ddpify.engine.uniformity.batches import RankLocal
from ddpify.engine.values import built_by
from ddpify.result import Options

if TYPE_CHECKING:  # loop_control reads the model concern, which reads this one
    from ddpify.concerns import loop_control

LOAD_WITHOUT_MAP_LOCATION = Code(
    "DDP401",
    Severity.WARNING,
    "checkpoints",
    "torch.load without map_location of something other than a state dict",
    'pass map_location=<this rank\'s device> (or "cpu")',
)
CODES = (LOAD_WITHOUT_MAP_LOCATION,)


@dataclass(frozen=True)
class Facts:
    saves: tuple[cst.SimpleStatementLine, ...]  # torch.save statements
    file_moves: tuple[cst.SimpleStatementLine, ...]  # shutil.copyfile(...), os.replace(...): files rank 0 writes
    reloaded_saves: tuple[cst.SimpleStatementLine, ...]  # saves whose file the script loads again later
    state_loads: tuple[cst.Call, ...]  # torch.load(...) of state dicts, without map_location
    exports: tuple[cst.SimpleStatementLine, ...] = ()  # torch.onnx.export(...), scripted.save(...), save_pretrained
    # the values that differ between ranks (the data concern's uniformity analysis): a barrier after a save
    # must not sit behind a test of one (``if acc > best: save(...)`` where ``acc`` is this rank's own)
    rank_local: RankLocal | None = None


def find(program: Program, fetches: downloads.Facts, control: loop_control.Facts) -> Facts:
    finder = _Finder(program)
    # a download's own files (fetched, unpacked, removed) and a cache's (built in turns: each rank writes
    # it in its turn where it is still missing) are handled in turns, not on rank 0
    saves = tuple(s for s in finder.saves() if not fetches.in_turns(program.index, s))
    moves = tuple(m for m in finder.file_moves() if not fetches.in_turns(program.index, m)) if saves else ()
    exports = tuple(s for s in finder.exports() if not fetches.in_turns(program.index, s))
    reloaded = tuple(finder.reloaded(saves + moves))
    varying = control.rank_local if reloaded else None
    return Facts(saves, moves, reloaded, tuple(finder.state_loads()), exports, varying)


class _Finder:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.index = program.index

    def saves(self) -> Iterator[cst.SimpleStatementLine]:
        """Statements that only call ``torch.save``."""
        for stmt in self.index.statements:
            if all(isinstance(s, cst.Expr) and self.index.is_call_to(s.value, torch_api.SAVE) for s in stmt.body):
                yield stmt

    def exports(self) -> Iterator[cst.SimpleStatementLine]:
        """Statements that only write a model exported for inference: ``torch.onnx.export(model, x, path)``,
        ``torch.jit.save(scripted, path)``, ``scripted.save(path)`` of what ``torch.jit.script`` made, or
        ``model.save_pretrained(path)``: each rank would write the same files at once."""
        for stmt in self.index.statements:
            if all(isinstance(s, cst.Expr) and self._writes_export(s.value) for s in stmt.body):
                yield stmt

    def _writes_export(self, value: cst.BaseExpression) -> bool:
        index = self.index
        if not isinstance(value, cst.Call):
            return False
        if index.is_call_to(value, torch_api.EXPORT_WRITES):
            return True
        func = value.func
        if not isinstance(func, cst.Attribute):
            return False
        if func.attr.value == "save_pretrained":
            return True
        if func.attr.value != "save":
            return False
        made = func.value
        if isinstance(made, cst.Call):
            return index.is_call_to(made, torch_api.COMPILED_FOR_EXPORT)
        ref = index.ref_of(made, index.scope_of(value)) if isinstance(made, cst.Name) else None
        if ref is None:
            return False
        assigned = list(index.values_assigned(ref))  # in source order
        if assigned and all(
            isinstance(v, cst.Call) and index.is_call_to(v, torch_api.COMPILED_FOR_EXPORT) for _, v in assigned
        ):
            return True
        # ``model = torch.jit.script(model)`` after ``model = Net().to(device)``: the last binding before the save
        # in its own function, where nothing else rebinds the name
        before = [(a, v) for a, v in assigned if index.scope_of(a) is index.scope_of(value) and index.after(value, a)]
        if not before or len(before) != len(assigned):
            return False
        last_assign, last = before[-1]
        return (
            isinstance(last, cst.Call)
            and index.is_call_to(last, torch_api.COMPILED_FOR_EXPORT)
            and not any(index.inside(value, loop) for loop in index.enclosing_loops(index.statement_of(last_assign)))
        )

    def file_moves(self) -> Iterator[cst.SimpleStatementLine]:
        """Statements that only copy, move or delete files (``shutil.copyfile(path, "best.pth")``):
        on every rank they would race over the files rank 0 writes."""
        for stmt in self.index.statements:
            if all(isinstance(s, cst.Expr) and self.index.is_call_to(s.value, _FILE_MOVES) for s in stmt.body):
                yield stmt

    def reloaded(self, saves: tuple[cst.SimpleStatementLine, ...]) -> Iterator[cst.SimpleStatementLine]:
        """Saves (and copies or moves) of a file the script reads back with ``torch.load``: the other ranks
        must wait for rank 0."""
        index = self.index
        loads = [call for call in index.calls if index.is_call_to(call, torch_api.LOAD) and call.args]
        for stmt in saves:
            call = cast(cst.Expr, stmt.body[0]).value
            if not isinstance(call, cst.Call):
                continue
            # ``if os.path.exists(path): model.load_state_dict(torch.load(path))`` before the training loop that
            # saves there: a resume, which no rank reaches after the save
            paths = [load.args[0].value for load in loads if self._may_run_after(load, stmt)]
            loaded = {_path_shape(index, path) for path in paths}
            # ``os.path.join(os.path.dirname(path), "best.pth")`` and ``os.path.join(args.logs, "best.pth")``: the
            # same file name in a folder spelled two ways (a needless barrier costs little, a missing one a race)
            named = {name for path in paths if (name := _file_name(index, path))}
            # ``name + ".pth"`` saved where ``"max_acc.pth"`` is loaded: a computed name may be that file
            suffixes = {name.rpartition(".")[2] for name in named} | {s for path in paths if (s := _suffix(path))}
            # a helper's parameter (``fit_probe("encoder.pt")`` loading its ``path``): what its callers pass
            # (each of them: ``load_checkpoint(args.resume)`` and later ``load_checkpoint("best.tar")``)
            followed = set().union(*(path_shapes(index, path) for path in paths)) - {""}
            if index.is_call_to(call, _FILE_MOVES):  # ``shutil.copy(path, best)``: it writes its second argument
                path = call.args[1] if len(call.args) > 1 and not index.is_call_to(call, _REMOVES) else None
            else:
                path = argument(call, "f", 1)
            if path is not None and (
                _path_shape(index, path.value) in loaded
                or path_shape(index, path.value) in followed
                or _file_name(index, path.value) in named
                or (not _file_name(index, path.value) and _suffix(path.value) in suffixes - {""})
            ):
                yield stmt

    def _may_run_after(self, load: cst.Call, save: cst.BaseStatement) -> bool:
        """Whether ``load`` may run after ``save``: later in the same function, in a loop around both, or
        elsewhere (another function's order is not followed here)."""
        index = self.index
        scope = index.scope_of(save)
        if index.scope_of(load) is not scope or index.after(load, save):
            return True
        if any(index.inside(load, loop) for loop in index.enclosing_loops(save)):
            return True
        # ``for fold in range(k): train(fold)``: a second call loads what the first one saved
        if isinstance(scope, cst.FunctionDef):
            callers = index.callers(scope)
            return len(callers) != 1 or next(index.enclosing_loops(callers[0]), None) is not None
        return False

    def state_loads(self) -> Iterator[cst.Call]:
        """``torch.load`` calls without ``map_location`` whose result only feeds ``load_state_dict``."""
        index = self.index
        for call in index.calls:
            if not index.is_call_to(call, torch_api.LOAD):
                continue
            if argument(call, "map_location", 1) is not None:
                continue
            if self._feeds_state_dicts(call):
                yield call
            else:
                self.program.report(
                    call,
                    LOAD_WITHOUT_MAP_LOCATION,
                    "torch.load without map_location: every rank loads onto the GPU the checkpoint was saved "
                    "from; pass map_location=<this rank's device>",
                )

    def _feeds_state_dicts(self, call: cst.Call) -> bool:
        index = self.index
        node: cst.CSTNode = call
        while isinstance(up := index.parent(node), cst.Subscript) and up.value is node:
            node = up  # ``torch.load(path)["params"]``: the state dict is an entry of the checkpoint
        parent = index.parent(node)
        if isinstance(parent, cst.Arg):
            return _loads_state_dict(index.parent(parent))
        if node is not call:
            return False
        if (bound := single_target(parent)) is None:  # ``ckpt = torch.load(...)``, or ``ckpt: dict = ...``
            return False
        ref = index.ref_of(bound, index.scope_of(call))
        if ref is None:
            return False
        reads = [
            r
            for scope in index.scopes_reading(ref)
            for r in index.mentions(scope, ref)
            if not isinstance(index.parent(r), cst.AssignTarget) and single_target(index.parent(r)) is not r
        ]
        for read in reads:
            node = read
            while isinstance(up := index.parent(node), cst.Subscript) and up.value is node:
                node = up
            arg = index.parent(node)
            if isinstance(arg, cst.Arg) and _loads_state_dict(index.parent(arg)):
                continue
            if node is not read and not self._used_as_an_object(node):
                continue  # checkpoint["epoch"]: a plain value read out of the checkpoint
            return False
        return bool(reads)

    def _used_as_an_object(self, entry: cst.BaseExpression) -> bool:
        """Whether the name that ``entry`` (``ckpt["model"]``) is bound to is called or has an attribute read
        (``model(x)``, ``optimizer.step()``): a whole model or optimizer pickled in the checkpoint, which
        ``map_location="cpu"`` would leave on the CPU."""
        index = self.index
        parent = index.parent(entry)
        if isinstance(parent, cst.Element):  # ``model, optimizer = ckpt["model"], ckpt["optimizer"]``
            value = index.parent(parent)
            assign = index.parent(value)
            if not (isinstance(value, cst.Tuple) and isinstance(assign, cst.Assign) and len(assign.targets) == 1):
                return False
            targets = assign.targets[0].target
            if not isinstance(targets, cst.Tuple) or len(targets.elements) != len(value.elements):
                return False
            target = targets.elements[list(value.elements).index(parent)].value
        elif isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            target = parent.targets[0].target
        else:
            return False
        scope = index.scope_of(entry)
        ref = index.ref_of(target, scope)
        if ref is None:
            return False
        for read in index.mentions(scope, ref):
            up = index.parent(read)
            if (isinstance(up, cst.Call) and up.func is read) or (isinstance(up, cst.Attribute) and up.value is read):
                return True
        return False


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    for stmt in facts.saves:
        plan.on_rank_zero(stmt)
        plan.change(stmt, "torch.save on global rank 0 only")
    for stmt in facts.exports:
        plan.on_rank_zero(stmt)
        plan.change(stmt, "the model's export is written on global rank 0 only")
    for stmt in facts.file_moves:
        plan.on_rank_zero(stmt)
        call = cast(cst.Call, cast(cst.Expr, stmt.body[0]).value)
        plan.change(stmt, f"`{plan.index.module.code_for_node(call.func)}` on global rank 0 only, like the save")
    for stmt in facts.reloaded_saves:
        barrier_after(plan, stmt, varying=facts.rank_local)
        what = "copy" if stmt in facts.file_moves else "save"
        plan.change(stmt, f"dist.barrier() after the {what}: the file is read back later")
    for call in facts.state_loads:
        plan.replace(
            call, lambda n: cast(cst.Call, n).with_changes(args=[*with_comma(cast(cst.Call, n).args), _MAP_TO_CPU])
        )
        plan.change(call, 'torch.load(..., map_location="cpu"): not onto the GPU the checkpoint came from')


def barrier_after(
    plan: EditPlan,
    stmt: cst.BaseStatement,
    why: str = "the others read what rank 0 just wrote",
    varying: RankLocal | None = None,
) -> None:
    """A barrier after ``stmt``, which rank 0 alone runs, where every rank reaches it: the other ranks
    wait there until rank 0 has written the file they read next. A test above it that ``varying`` (the
    values that differ between ranks; a clock and a draw where not given) reads is decided on rank 0."""
    dist = plan.names.dist
    barrier = cst.parse_statement(f"{dist}.barrier()  # {why}\n")
    if plan.index.module_of(stmt) in plan.shared:  # other scripts call it without a process group
        barrier = cst.parse_statement(f"if {dist}.is_initialized():\n    {dist}.barrier()  # {why}\n")
    where = _outside_conditions(plan, _rank_zero_unit(plan, stmt))
    plan.insert_after(where, barrier)
    varying = varying or RankLocal(plan.index, (), frozenset())
    for test in _varying_tests_above(plan.index, where, varying):
        if uniformity.decide_on_rank_zero(plan, test.test):
            plan.change(
                test,
                f"`{plan.index.module_of(test).code_for_node(test.test)}` may differ between ranks (this rank's own "
                "batches, a clock, a draw): every rank takes rank 0's decision, so that all of them reach the "
                "barrier after the save",
            )


def _varying_tests_above(
    index: Index, where: cst.BaseStatement, varying: RankLocal, depth: int = 0
) -> Iterator[cst.If]:
    """The ``if`` tests around the calls of the function holding ``where`` (and of the functions calling it)
    that may differ between ranks (a clock, a draw: what ``varying`` reads as such): ``if time.time() - t0 >
    every: save_state(...)`` where ``save_state`` waits at a barrier; the ranks that skip it would leave the
    others waiting."""
    function = enclosing_function(index, where)
    if function is None or depth > 2:
        return
    for call in index.callers(function):
        for ancestor in index.ancestors(call):
            if isinstance(ancestor, (cst.For, cst.While, cst.FunctionDef)):
                break
            if isinstance(ancestor, cst.If) and varying.reads(ancestor.test, index.scope_of(ancestor)):
                yield ancestor
        yield from _varying_tests_above(index, index.statement_of(call), varying, depth + 1)


def path_shape(index: Index, path: cst.BaseExpression) -> str:
    """:func:`_path_shape` of each value ``path`` may hold, followed back through the program (a helper's
    parameter: what its callers pass), joined; '' where one spells nothing or it cannot be followed."""
    shapes = path_shapes(index, path)
    return shapes.pop() if len(shapes) == 1 else ""


def path_shapes(index: Index, path: cst.BaseExpression) -> set[str]:
    """:func:`_path_shape` of each value ``path`` may hold (``save_features(path)`` called with three file
    names: three shapes); empty where one spells nothing or it cannot be followed."""
    shapes = {_path_shape(index, value) for value in built_by(index, path) or ()}
    return set() if "" in shapes else shapes


def _saves_its_parameter(index: Index, arg: cst.Arg) -> bool:
    """Whether the program's function that ``arg`` is handed to passes the parameter it fills, as it is, to
    ``torch.save`` (``def save_checkpoint(state, ...): torch.save(state, filename)``)."""
    filled = index.parameter_of(arg)
    if filled is None or not isinstance(filled.scope, cst.FunctionDef):
        return False
    return any(
        isinstance(node, cst.Call)
        and index.is_call_to(node, torch_api.SAVE)
        and node.args
        and index.ref_of(node.args[0].value, filled.scope) == filled
        for node in index.walk(filled.scope.body)
    )


def saved(index: Index, value: cst.BaseExpression) -> bool:
    """Whether ``torch.save`` (or ``pickle.dump``) writes ``value`` itself: inside a dict, list or tuple that is saved, directly
    (``torch.save({"model": model}, f)``) or through a name (``ckpt = {"model": model}``,
    ``ckpt["model"] = model``, then ``torch.save(ckpt, f)``)."""
    parent = index.parent(value)
    if isinstance(parent, (cst.DictElement, cst.Element)) and parent.value is value:
        container = index.parent(parent)
        return isinstance(container, (cst.Dict, cst.List, cst.Tuple)) and saved(index, container)
    if isinstance(parent, cst.Arg):
        call = index.parent(parent)
        if parent.value is not value:  # the keyword's own name
            return False
        if isinstance(call, cst.Call) and parent.keyword is not None and index.is_call_to(call, _DICT):
            return saved(index, call)  # dict(model=model, epoch=epoch)
        if not isinstance(call, cst.Call):
            return False
        if index.is_call_to(call, torch_api.SAVE | torch_api.PICKLE_DUMPS):
            return call.args[0] is parent
        if isinstance(value, (cst.List, cst.Tuple, cst.Dict)) and _saves_its_parameter(index, parent):
            return True  # ``save_checkpoint({"model": model, ...}, path)`` whose helper ``torch.save``s it whole
        # save_ckpt(path, [("net", net)], step)
        return isinstance(value, (cst.List, cst.Tuple, cst.Dict)) and _handles_state_dicts(index, call)
    if not isinstance(parent, (cst.Assign, cst.AnnAssign)) or parent.value is not value:
        return False
    if (target := single_target(parent)) is None:
        return False
    if isinstance(target, cst.Subscript):
        holder = index.ref_of(target.value, index.scope_of(parent))
    elif isinstance(value, (cst.Dict, cst.List, cst.Tuple)) or index.is_call_to(value, _DICT):
        holder = index.ref_of(target, index.scope_of(parent))
    else:  # ``m = model``: ``m`` is followed as the model itself
        return False
    return holder is not None and any(
        index.is_call_to(call, torch_api.SAVE | torch_api.PICKLE_DUMPS)
        and call.args
        and index.ref_of(call.args[0].value, index.scope_of(call)) == holder
        for call in index.calls
    )


def _handles_state_dicts(index: Index, call: cst.Call) -> bool:
    """Whether ``call`` runs a function of the program that saves state dicts (``torch.save`` and
    ``.state_dict()``) or loads them (``.load_state_dict(...)``): the models handed to it in a list or dict
    (``[("net", net), ("optimizer", opt)]``) are read for their keys, which must be the module's."""
    callee = index.resolve_callee(call, index.scope_of(call))
    if callee is None:
        return False
    body: cst.CSTNode = callee[0].body
    if callee[0].name.value == "__init__":  # ``Saver(path, [("net", net)]).run()``: what its methods do
        body = next((a for a in index.ancestors(callee[0]) if isinstance(a, cst.ClassDef)), callee[0]).body
    calls = [n for n in index.walk(body) if isinstance(n, cst.Call)]
    methods = {c.func.attr.value for c in calls if isinstance(c.func, cst.Attribute)}
    saves = any(index.is_call_to(c, torch_api.SAVE) for c in calls)
    return (saves and "state_dict" in methods) or "load_state_dict" in methods


def _path_shape(index: Index, path: cst.BaseExpression) -> str:
    """What a path expression spells out, its values left aside: the text of its strings and the names of
    the attributes it reads, in order. ``'{}.pkl'.format(epoch)`` and ``'{}.pkl'.format(best_epoch)`` may
    name the same file, and so may ``save + "_epoch_" + str(i) + ".pth"`` and ``save + "_epoch_" +
    str(best + 1) + ".pth"``; ``f"{d}/model.pt"`` and ``f"{d}/optim.pt"`` never do."""
    parts = []
    for node in index.walk(path):
        if isinstance(node, cst.SimpleString):
            parts.append(node.value[1:-1])
        elif isinstance(node, cst.FormattedStringText):
            parts.append(node.value)
        elif isinstance(node, cst.Attribute):
            parts.append("." + node.attr.value)
    return "|".join(parts)


def _file_name(index: Index, path: cst.BaseExpression) -> str:
    """The file name a path ends in where it is written out whole, with a suffix (``"model_best.pth"`` as the
    last part of ``os.path.join(folder, "model_best.pth")``); '' otherwise."""
    last: cst.BaseExpression | None = path
    if isinstance(path, cst.Call) and index.is_call_to(path, frozenset({"os.path.join"})) and path.args:
        last = path.args[-1].value
    if not isinstance(last, cst.SimpleString):
        return ""
    text = last.evaluated_value
    name = text.rsplit("/", 1)[-1] if isinstance(text, str) else ""
    return name if "." in name.strip(".") else ""


def _suffix(path: cst.BaseExpression) -> str:
    """The suffix of a file name computed with a constant end (``name + ".pth"``, ``f"{name}.pth"``, the last
    part of ``os.path.join``); '' otherwise."""
    last = path.args[-1].value if isinstance(path, cst.Call) and path.args else path
    if isinstance(last, cst.BinaryOperation) and isinstance(last.operator, cst.Add):
        last = last.right
    if isinstance(last, cst.FormattedString) and last.parts:
        end = last.parts[-1]
        text = end.value if isinstance(end, cst.FormattedStringText) else ""
    elif isinstance(last, cst.SimpleString):
        text = last.evaluated_value if isinstance(last.evaluated_value, str) else ""
    else:
        return ""
    _, dot, suffix = text.rpartition(".")
    return suffix if dot and suffix.isalnum() and "/" not in suffix else ""


def _rank_zero_unit(plan: EditPlan, stmt: cst.BaseStatement) -> cst.BaseStatement:
    """The statement that will hold the rank-0 test: the save, an ``if`` whose test takes the rank test,
    or the ``with open(path, "wb") as f:`` around ``torch.save(model, f)`` (the file is written on rank 0)."""
    index = plan.index
    while isinstance(with_ := index.parent(index.parent(stmt)), cst.With) and any(
        _opens_for_writing(index, item.item) for item in with_.items
    ):
        stmt = with_
    block = plan.index.parent(stmt)
    owner = plan.index.parent(block)
    if (
        isinstance(block, cst.IndentedBlock)
        and isinstance(owner, cst.If)
        and owner.orelse is None
        and owner is not plan.index.main_guard
        and all(s in plan.rank_zero_only for s in block.body)
    ):
        return owner
    return stmt


def _outside_conditions(plan: EditPlan, stmt: cst.BaseStatement) -> cst.BaseStatement:
    """The ``if`` (or ``if``/``else``) around ``stmt`` at the outermost level of its block: a barrier
    there runs on every rank whichever way the test goes (``if val_loss < best:``, a test on this
    rank's own values, would leave some ranks waiting at a barrier the others never reach)."""
    index = plan.index
    current = stmt
    while True:
        block = index.parent(current)
        owner = index.parent(block) if block is not None else None
        if isinstance(owner, cst.Else):
            owner = index.parent(owner)
        while isinstance(owner, cst.If) and isinstance(index.parent(owner), cst.If):  # elif
            owner = index.parent(owner)
        if not isinstance(owner, cst.If) or owner is index.main_guard or _read_back_within(index, current, owner):
            return current
        current = owner


def _read_back_within(index: Index, stmt: cst.BaseStatement, block: cst.If) -> bool:
    """Whether ``block`` goes on, after ``stmt``, to read a file back (``torch.load``, ``open`` to read): a
    barrier after the whole ``if`` would come after that read (``torch.save(model.state_dict(), tmp)`` then
    ``copy.load_state_dict(torch.load(tmp))`` in one branch), so it stays right after ``stmt``."""
    return any(
        isinstance(node, cst.Call)
        and index.after(node, stmt)
        and not index.inside(node, stmt)
        and (
            index.is_call_to(node, torch_api.LOAD)
            or (index.is_call_to(node, _OPEN) and not _opens_for_writing(index, node))
        )
        for node in index.walk(block)
    )


def _opens_for_writing(index: Index, expr: cst.BaseExpression) -> bool:
    if not (isinstance(expr, cst.Call) and index.is_call_to(expr, _OPEN)):
        return False
    mode = argument(expr, "mode", 1)
    value = mode.value.evaluated_value if mode is not None and isinstance(mode.value, cst.SimpleString) else None
    return isinstance(value, str) and any(c in value for c in "wax")


def _loads_state_dict(node: cst.CSTNode | None) -> bool:
    """``<something>.load_state_dict(...)``."""
    return isinstance(node, cst.Call) and m.matches(node.func, m.Attribute(attr=m.Name("load_state_dict")))


_DICT = frozenset({"builtins.dict"})
_OPEN = frozenset({"builtins.open"})
_REMOVES = frozenset({"shutil.rmtree", "os.remove", "os.unlink"})
_FILE_MOVES = frozenset(
    {
        *(f"shutil.{name}" for name in ("copyfile", "copy", "copy2", "copytree", "move", "rmtree")),
        *(f"os.{name}" for name in ("rename", "replace", "remove", "unlink", "symlink", "link")),
    }
)

_MAP_TO_CPU = cst.Arg(
    keyword=cst.Name("map_location"),
    value=cst.SimpleString('"cpu"'),
    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
)

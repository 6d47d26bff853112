"""Side effects: output happens once, on global rank 0.

Statements whose only effect is output -- ``print``, ``logging`` calls,
``plt.savefig`` / ``save_image``, ``with open(path, "w")`` blocks, calls on a
TensorBoard ``SummaryWriter`` or on ``wandb`` -- run on rank 0 only. A
consecutive run of them shares one ``if``, and an ``if`` that holds nothing
else takes the rank test into its condition::

    if batch_idx % log_interval == 0:           if batch_idx % log_interval == 0 and dist.get_rank() == 0:
        print(f"loss {loss.item():.4f}")   ->       print(f"loss {loss.item():.4f}")

Trackers are created on rank 0 only (``None`` elsewhere) so that no other rank
opens a run or a log folder; progress bars are kept on every rank but disabled
outside rank 0 (``tqdm(..., disable=dist.get_rank() != 0)``), so the loop is
untouched; ``os.makedirs`` / ``os.mkdir`` become ``os.makedirs(..., exist_ok=True)`` so
that ranks creating the same folder do not race.

Work inside an output statement -- ``print(f"acc {evaluate(model)}")`` --
must still run on every rank (it may hold collectives, such as DDP's forward),
so it is computed into a variable first and only the output is gated::

    print(f"acc {evaluate(model)}")   ->   evaluate_result = evaluate(model)
                                           if dist.get_rank() == 0:
                                               print(f"acc {evaluate_result}")

Where that cannot be done (the work is inside a lambda or comprehension, or
on a line with other statements), the statement stays on every rank and is
reported (DDP501).

A file opened without ``with`` (``f = open(path, "w")``, and what is built on
it, such as ``writer = csv.writer(f)``) is opened, written and closed on
rank 0 only; a use of it that cannot go there is refused (DDP503). A
``with open(path, "w")`` block that also trains must run on every rank, so the
other ranks write to ``os.devnull``::

    with open("log.csv", "w") as f:
    ->  with open("log.csv", "w") if dist.get_rank() == 0 else open(os.devnull, "w") as f:

Log files (``logging.FileHandler(path)``, ``logging.basicConfig(filename=path)``)
are named ``os.devnull`` on the other ranks the same way.

Output that runs before the process group exists (at import time, or in a
function called then) cannot ask for the rank: it stays on every rank, once per
process. A tracker created by module-level code makes the process group
start right after the imports; one created among the imports is refused (DDP502).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import cast

import libcst as cst
import libcst.matchers as m

from ddpify import torch_api
from ddpify.concerns import downloads, model, process_group
from ddpify.diagnostics import Code, Severity
from ddpify.engine import uniformity
from ddpify.engine.edits import EditPlan, fresh, statement, with_comma
from ddpify.engine.index import Index, Ref, Scope
from ddpify.engine.program import Program
from ddpify.engine.syntax import argument
from ddpify.result import Options

TRACKER_BEFORE_SETUP = Code(
    "DDP502",
    Severity.ERROR,
    "side_effects",
    "an experiment tracker is created before the process group exists (at import time): every rank would log",
    "create it inside the function that trains (after the process group is set up)",
)
OUTPUT_RUNS_WORK = Code(
    "DDP501",
    Severity.WARNING,
    "side_effects",
    "an output statement that also runs the model or the script's own functions stays on every rank",
    "compute the value into a variable first, then output it",
)
FILE_USE_NOT_GATED = Code(
    "DDP503",
    Severity.ERROR,
    "side_effects",
    "a file opened for writing without `with` is used where it cannot be put on rank 0: every rank would write it",
    "write it inside `with open(...) as f:`, or use the file object only in statements of their own",
)
TRACKER_USED_ELSEWHERE = Code(
    "DDP504",
    Severity.ERROR,
    "side_effects",
    "an experiment tracker made on rank 0 only is used where every rank runs: it is None on the others",
    "use it only in statements of their own (`writer.add_scalar(...)`), or under `if writer is not None:`",
)
MODULE_OUTPUT_KEPT = Code(
    "DDP505",
    Severity.WARNING,
    "side_effects",
    "terminal output in another module of the program stays on every rank: one output file cannot hold that module",
    "convert with --in-place or -o DIR/ to put it on rank 0 too",
)
CODES = (OUTPUT_RUNS_WORK, TRACKER_BEFORE_SETUP, FILE_USE_NOT_GATED, TRACKER_USED_ELSEWHERE, MODULE_OUTPUT_KEPT)

# Output to the terminal: where the program's other modules cannot be written, it may stay on every rank.
_TERMINAL = frozenset({"print", "logging call", "terminal output"})


@dataclass(frozen=True)
class Facts:
    outputs: tuple[tuple[cst.BaseStatement, str], ...]  # (statement, what it is) safe to run on rank 0 only
    # calls inside an output statement that must still run on every rank: they are
    # computed into a variable first, e.g. the ``evaluate(...)`` in ``print(evaluate(...))``
    hoisted: tuple[cst.Call, ...]
    trackers: tuple[cst.Call, ...]  # SummaryWriter(...) / wandb.init(...) assigned to a name
    progress_bars: tuple[cst.Call, ...]  # tqdm(...) calls without ``disable=``
    makedirs: tuple[cst.Call, ...]  # os.makedirs(...) / os.mkdir(...) without ``exist_ok=``
    # ``with open(path, "w")`` around training (which must run on every rank): the others write to os.devnull
    devnull_opens: tuple[cst.Call, ...] = ()
    # output in a function that runs both before the process group exists and after: rank 0 once it exists
    ungrouped: tuple[tuple[cst.BaseStatement, str], ...] = ()
    log_files: tuple[cst.Arg, ...] = ()  # logging.FileHandler(path): the other ranks log to os.devnull
    # ``writer.log_dir`` read where every rank runs: a plain value of the tracker, rank 0's on every rank
    tracker_values: tuple[cst.Attribute, ...] = ()


def find(program: Program, models: model.Facts, group: process_group.Facts, fetches: downloads.Facts) -> Facts:
    """Output to put on rank 0. Output that runs before the process group exists (at import time, or
    in a function called then) cannot ask for the rank: it stays on every rank, once per process.
    Output in a function that fetches files stays as it is: the ranks run it in turns."""
    finder = _Finder(program)
    index = program.index

    def late(node: cst.CSTNode) -> bool:
        return not group.runs_before_setup(index, node)

    finder.exempt = lambda node: fetches.in_turns(index, node)

    trackers = tuple(finder.trackers())
    for call in trackers:
        if not late(call):
            program.report(
                call,
                TRACKER_BEFORE_SETUP,
                f"`{index.module.code_for_node(call.func)}` is created before the process group exists, so every "
                "rank would create it: create it inside the function that trains",
            )
    trackers = tuple(filter(late, trackers))
    hoisted: list[cst.Call] = []
    found = [(stmt, kind) for stmt, kind in finder.outputs(models.refs, trackers, hoisted) if not finder.exempt(stmt)]
    hoisted = [call for call in hoisted if not finder.exempt(call)]
    outputs = tuple((stmt, kind) for stmt, kind in found if late(stmt))
    # output in a helper that also runs before the process group exists: a test that needs no group
    early_work = {index.statement_of(call) for call in hoisted if not late(call)}
    ungrouped = tuple(
        (stmt, kind)
        for stmt, kind in found
        if not late(stmt) and group.runs_also_after_setup(index, stmt) and stmt not in early_work
    )
    hoisted = [call for call in hoisted if late(call)]
    gated = {stmt for stmt, _ in outputs}
    _check_files_written_once(program, group, finder.files, gated)
    tracker_values = _check_trackers_used_on_rank_zero(program, group, finder, trackers, gated)
    devnull_opens = tuple(finder.devnull_opens(gated, late))
    log_files = tuple(finder.log_files(late))
    progress_bars = tuple(
        c
        for c in index.calls
        if index.is_call_to(c, torch_api.PROGRESS_BARS) and argument(c, "disable") is None and late(c)
    )
    makedirs = tuple(
        c
        for c in index.calls
        if index.is_call_to(c, torch_api.MAKEDIRS)
        and argument(c, "exist_ok") is None
        and len(c.args) < 3
        and not finder.exempt(c)
    )
    return Facts(
        outputs, tuple(hoisted), trackers, progress_bars, makedirs, devnull_opens, ungrouped, log_files, tracker_values
    )


def _reads_off_rank_zero(
    index: Index,
    refs: Iterable[Ref],
    gated: set[cst.BaseStatement],
    counts: Callable[[Ref, cst.BaseExpression, cst.BaseStatement], bool] = lambda ref, read, stmt: True,
) -> Iterator[tuple[Ref, Scope, cst.BaseExpression]]:
    """The first read of ``refs`` that ``counts`` in each statement that is not put on rank 0."""
    seen: set[cst.BaseStatement] = set()
    for ref in sorted(refs, key=lambda r: r.path):
        for scope in index.scopes_reading(ref):
            for read in index.mentions(scope, ref):
                stmt = index.statement_of(read)
                if stmt in seen or stmt in gated or any(a in gated for a in index.ancestors(stmt)):
                    continue
                if counts(ref, read, stmt):
                    seen.add(stmt)
                    yield ref, scope, read


def _check_files_written_once(
    program: Program, group: process_group.Facts, files: set[Ref], gated: set[cst.BaseStatement]
) -> None:
    """Every use of a file opened for writing without ``with`` must run on rank 0 with the ``open``."""
    index = program.index
    for ref, scope, read in _reads_off_rank_zero(index, files, gated):
        where = (
            "runs before the process group exists (at import time), where the rank is not known"
            if group.runs_before_setup(index, index.statement_of(read))
            else "cannot be put on rank 0 with the rest"
        )
        program.report(
            read,
            FILE_USE_NOT_GATED,
            f"`{index.spelled(ref, scope)}` is a file opened for writing without `with`; this use {where}, "
            "so every rank would write the file: write it inside `with open(...)`, or use it only in "
            "statements of their own",
        )


def _check_trackers_used_on_rank_zero(
    program: Program,
    group: process_group.Facts,
    finder: _Finder,
    trackers: tuple[cst.Call, ...],
    gated: set[cst.BaseStatement],
) -> tuple[cst.Attribute, ...]:
    """A tracker is None off rank 0: every use of its attributes must run on rank 0, or test for None.

    A plain attribute read where every rank runs (``writer.log_dir`` in a path) takes rank 0's value
    on every rank; those reads are returned. Any other use is refused (DDP504)."""
    index = program.index

    def dereferenced(ref: Ref, read: cst.BaseExpression, stmt: cst.BaseStatement) -> bool:
        parent = index.parent(read)
        used = (isinstance(parent, cst.Attribute) and parent.value is read) or isinstance(parent, cst.WithItem)
        tested = any(  # ``if writer is not None:``
            isinstance(a, (cst.If, cst.IfExp, cst.While)) and index.mentions(a.test, ref) for a in index.ancestors(read)
        )
        return used and not tested and not finder.exempt(stmt)

    values: list[cst.Attribute] = []
    for ref, scope, read in _reads_off_rank_zero(index, finder.assigned_from(trackers), gated, dereferenced):
        attribute = index.parent(read)
        if (
            isinstance(attribute, cst.Attribute)
            and _plain_value(index, attribute)
            and not group.runs_before_setup(index, read)
        ):
            values.append(attribute)  # ``os.path.join(writer.log_dir, "model.pt")``: rank 0's value everywhere
            continue
        program.report(
            read,
            TRACKER_USED_ELSEWHERE,
            f"`{index.spelled(ref, scope)}` is an experiment tracker, made on rank 0 only and None on the "
            "other ranks, but this statement runs on every rank: use it only in statements of their own, "
            f"or under `if {index.spelled(ref, scope)} is not None:`",
        )
    return tuple(values)


def _plain_value(index: Index, attribute: cst.Attribute) -> bool:
    """``writer.log_dir``: an attribute read for its value, neither called nor read further nor assigned."""
    parent = index.parent(attribute)
    if isinstance(parent, cst.Call) and parent.func is attribute:
        return False
    return not isinstance(parent, cst.Attribute | cst.AssignTarget | cst.Subscript | cst.AugAssign)


class _Finder:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.index = program.index
        self.files = self._open_files()
        # code whose output and writes stay as they are (a download the ranks run in turns)
        self.exempt: Callable[[cst.CSTNode], bool] = lambda node: False

    def devnull_opens(self, gated: set[cst.BaseStatement], late: Callable[[cst.CSTNode], bool]) -> Iterator[cst.Call]:
        """Files opened for writing outside the statements put on rank 0.

        ``with open(path, "w") as f:`` around code that must run on every rank
        (training) opens ``os.devnull`` on the other ranks. Any other such
        ``open`` is refused (DDP503): every rank would write the file.
        """
        index = self.index
        for call in index.calls:
            if not ("builtins.open" in index.qualified_names(call.func) and _writes(call)) or self.exempt(call):
                continue
            stmt = index.statement_of(call)
            if stmt in gated or any(a in gated for a in index.ancestors(stmt)):
                continue
            item = index.parent(call)
            if (
                isinstance(item, cst.WithItem)
                and late(call)
                and call.args
                and call.args[0].keyword is None
                and not _writes(call, "x")  # os.devnull exists already
            ):
                yield call
                continue
            if self._targets_of(call) & self.files:
                continue  # reported with its uses by _check_files_written_once
            self.program.report(
                call,
                FILE_USE_NOT_GATED,
                "a file opened for writing here is opened by every rank"
                + (" (before the process group exists, at import time)" if not late(call) else "")
                + ": bind it to a plain name (`f = open(...)`) or write it inside `with open(...)`",
            )

    def log_files(self, late: Callable[[cst.CSTNode], bool]) -> Iterator[cst.Arg]:
        """The file name of ``logging.FileHandler(path)`` / ``logging.basicConfig(filename=path)``: the
        other ranks log to ``os.devnull``."""
        index = self.index
        for call in index.calls:
            if index.is_call_to(call, torch_api.LOG_FILE_HANDLERS):
                name = argument(call, "filename", 0)  # FileHandler(path) or FileHandler(filename=path)
            elif index.is_call_to(call, _BASIC_CONFIG):
                name = argument(call, "filename")
                if name is None:
                    continue
            else:
                continue
            if name is not None and late(call) and not _writes(call, "x"):
                yield name
            else:
                self.program.report(
                    call,
                    FILE_USE_NOT_GATED,
                    "the log file named here is opened on every rank"
                    + (" (before the process group exists, at import time)" if not late(call) else "")
                    + ": set up logging after the process group, with the file name first",
                )

    def _targets_of(self, call: cst.Call) -> set[Ref]:
        assign = self.index.parent(call)
        return self._targets(assign) if isinstance(assign, cst.Assign) and assign.value is call else set()

    def _open_files(self) -> set[Ref]:
        """Names bound to a file opened for writing without ``with`` (``f = open(path, "w")``), and
        to what is built on it (``writer = csv.writer(f)``)."""
        index = self.index
        files: set[Ref] = set()
        assigns = [small for stmt in index.statements for small in stmt.body if isinstance(small, cst.Assign)]
        for small in assigns:
            call = small.value
            if isinstance(call, cst.Call) and "builtins.open" in index.qualified_names(call.func) and _writes(call):
                files.update(self._targets(small))
        grown = bool(files)
        while grown:
            grown = False
            for small in assigns:
                call, scope = small.value, index.scope_of(small)
                if (
                    isinstance(call, cst.Call)
                    and index.resolve_callee(call, scope) is None
                    and any(index.carried_ref(arg.value, scope) in files for arg in call.args)
                    and not self._targets(small) <= files
                ):
                    files.update(self._targets(small))
                    grown = True
        return files

    def _targets(self, small: cst.Assign) -> set[Ref]:
        scope = self.index.scope_of(small)
        refs = {self.index.ref_of(target.target, scope) for target in small.targets}
        return {ref for ref in refs if ref is not None}

    def trackers(self) -> Iterator[cst.Call]:
        for call in self.index.calls:
            parent = self.index.parent(call)
            if self.index.is_call_to(call, torch_api.TRACKER_FACTORIES) and isinstance(parent, cst.Assign):
                yield call

    def outputs(
        self, model_refs: frozenset[Ref], trackers: tuple[cst.Call, ...], hoisted: list[cst.Call]
    ) -> Iterator[tuple[cst.BaseStatement, str]]:
        """Statements whose only effect is output: printing, logging, plots, trackers, files written.

        Calls inside them that must run on every rank are added to ``hoisted``.
        """
        index = self.index
        tracker_refs = self.assigned_from(trackers)
        logger_refs = self.assigned_from(
            c for c in index.calls if index.is_call_to(c, torch_api.LOGGER_FACTORIES) and _assigned(index.parent(c))
        )
        for stmt in index.statements:
            kinds = {self._output_kind(small, tracker_refs, logger_refs) for small in stmt.body}
            if len(kinds) == 1 and (kind := kinds.pop()) is not None:
                work = self._work_calls(stmt, model_refs)
                if (
                    work
                    and len(stmt.body) == 1
                    and not any(
                        isinstance(a, (cst.Lambda, cst.BaseComp)) for call in work for a in index.ancestors(call)
                    )
                ):
                    hoisted.extend(work)
                elif work:
                    self.program.report(
                        stmt,
                        OUTPUT_RUNS_WORK,
                        f"this {kind} also runs the model or the script's own functions: left on every rank, "
                        "so it happens once per process",
                    )
                    continue
                yield stmt, kind
        for node in index.walk_program():
            if isinstance(node, cst.With) and self._writes_file(node) and not self._runs_collectives(node, model_refs):
                yield node, "file write"
            elif isinstance(node, cst.If) and isinstance(node.body, cst.SimpleStatementSuite) and node.orelse is None:
                # if step % 10 == 0: print(loss.item())
                kinds = {self._output_kind(small, tracker_refs, logger_refs) for small in node.body.body}
                if (
                    len(kinds) == 1
                    and (kind := kinds.pop()) is not None
                    and not self._runs_collectives(node.body, model_refs)
                ):
                    yield node, kind

    def assigned_from(self, calls: Iterable[cst.Call]) -> set[Ref]:
        """Every place the results of ``calls`` (each assigned to one name) flow to."""
        index = self.index
        refs: set[Ref] = set()
        for call in calls:
            assign = index.parent(call)
            if not isinstance(assign, cst.Assign):
                continue
            ref = index.ref_of(assign.targets[0].target, index.scope_of(call))
            if ref is not None:
                refs |= index.downstream(ref)
        return refs

    def _output_kind(self, small: cst.BaseSmallStatement, trackers: set[Ref], loggers: set[Ref]) -> str | None:
        index = self.index
        if isinstance(small, cst.Assign):
            if self.files and self._targets(small) & self.files:
                return "file write"  # f = open(path, "w"); writer = csv.writer(f)
            return "tracker call" if self._tracker_result(small, trackers) else None
        if not isinstance(small, cst.Expr) or not isinstance(small.value, cst.Call):
            return None
        call = small.value
        scope = index.scope_of(call)
        if (
            self.files
            and index.resolve_callee(call, scope) is None
            and (
                (isinstance(call.func, cst.Attribute) and index.carried_ref(call.func.value, scope) in self.files)
                or any(index.carried_ref(arg.value, scope) in self.files for arg in call.args)
            )
        ):
            return "file write"  # writer.writerow(row), f.close(), json.dump(obj, f)
        if (
            isinstance(call.func, cst.Attribute)
            and isinstance(call.func.value, cst.Call)
            and "builtins.open" in index.qualified_names(call.func.value.func)
            and _writes(call.func.value)
        ):
            return "file write"  # open(path, "w").write(text)
        names = index.qualified_names(call.func)
        if "builtins.print" in names:
            return "print"
        if names & torch_api.LOGGING_FUNCTIONS:
            return "logging call"
        if names & torch_api.TERMINAL_OUTPUT:
            return "terminal output"
        if names & torch_api.OUTPUT_FUNCTIONS:
            return "output call"
        if names & torch_api.TRACKER_FACTORIES or any(n.startswith(torch_api.TRACKER_MODULES) for n in names):
            return "tracker call"
        if isinstance(call.func, cst.Attribute):
            receiver = index.carried_ref(call.func.value, scope)
            if receiver in trackers or self._on_a_tracker(call.func.value, trackers):
                return "tracker call"
            if receiver in loggers and call.func.attr.value in torch_api.LOGGER_METHODS:
                return "logging call"
            if call.func.attr.value in torch_api.OUTPUT_METHODS:
                return "output call"
        return None

    def _on_a_tracker(self, expr: cst.BaseExpression, trackers: set[Ref]) -> bool:
        """``experiment.config`` in ``experiment.config.update(...)``: an attribute chain that starts at a tracker."""
        scope = self.index.scope_of(expr)
        while isinstance(expr, cst.Attribute):
            expr = expr.value
            if self.index.carried_ref(expr, scope) in trackers:
                return True
        return False

    def _tracker_result(self, small: cst.Assign, trackers: set[Ref]) -> bool:
        """``win = viz.line(...)``: a value that a tracker returns and that only the tracker's own calls
        read. Those run on rank 0 only, so it is made there too."""
        index = self.index
        call = small.value
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)):
            return False
        if index.carried_ref(call.func.value, index.scope_of(small)) not in trackers:
            return False
        # ``win = viz.line(...)``, or ``wins["loss"] = viz.line(...)``: a dict of window handles
        holders = [t.target.value if isinstance(t.target, cst.Subscript) else t.target for t in small.targets]
        if not all(isinstance(holder, cst.Name) for holder in holders):
            return False
        scope = index.scope_of(small)
        refs = {ref for holder in holders if (ref := index.ref_of(holder, scope)) is not None}
        for ref in refs:
            for reading in index.scopes_reading(ref):
                for read in index.mentions(reading, ref):
                    if isinstance(index.parent(read), cst.AssignTarget) or index.inside(read, small):
                        continue  # bound anew, or read by the call itself (``win=win``)
                    if self._stores_tracker_result(read, trackers):
                        continue  # ``wins["acc"] = viz.line(...)``: another handle put in the dict
                    if self._tracker_call_around(read, trackers) is None:
                        return False
        return True

    def _stores_tracker_result(self, read: cst.BaseExpression, trackers: set[Ref]) -> bool:
        subscript = self.index.parent(read)
        target = self.index.parent(subscript)
        assign = self.index.parent(target)
        return (
            isinstance(subscript, cst.Subscript)
            and isinstance(target, cst.AssignTarget)
            and isinstance(assign, cst.Assign)
            and isinstance(assign.value, cst.Call)
            and isinstance(assign.value.func, cst.Attribute)
            and self.index.carried_ref(assign.value.func.value, self.index.scope_of(assign)) in trackers
        )

    def _tracker_call_around(self, node: cst.CSTNode, trackers: set[Ref]) -> cst.Call | None:
        """The call on a tracker (``writer.add_scalar(...)``) that ``node`` is part of."""
        for ancestor in self.index.ancestors(node):
            if (
                isinstance(ancestor, cst.Call)
                and isinstance(ancestor.func, cst.Attribute)
                and self.index.carried_ref(ancestor.func.value, self.index.scope_of(ancestor)) in trackers
            ):
                return ancestor
        return None

    def _writes_file(self, node: cst.With) -> bool:
        """``with open(path, "w") as f:`` (or "a", "x")."""
        return any(
            isinstance(item.item, cst.Call)
            and "builtins.open" in self.index.qualified_names(item.item.func)
            and _writes(item.item)
            for item in node.items
        )

    def _runs_collectives(self, stmt: cst.CSTNode, model_refs: frozenset[Ref]) -> bool:
        return bool(self._work_calls(stmt, model_refs))

    def _work_calls(self, node: cst.CSTNode, model_refs: frozenset[Ref]) -> list[cst.Call]:
        """The outermost calls in ``node`` that run the model or the script's own functions."""
        if isinstance(node, cst.Call):
            scope = self.index.scope_of(node)
            if (
                self.index.resolve_callee(node, scope) is not None
                or self.index.carried_ref(node.func, scope) in model_refs
                or self._item_of_models(node.func, model_refs)
            ):
                return [node]
        return [call for child in self.index.children.get(node, ()) for call in self._work_calls(child, model_refs)]

    def _item_of_models(self, func: cst.BaseExpression, model_refs: frozenset[Ref]) -> bool:
        """``net`` in ``for net in nets:`` (or ``zip(nets, opts)``), where ``nets`` holds models."""
        index = self.index
        if not isinstance(func, cst.Name):
            return False
        for loop in index.enclosing_loops(func):
            if isinstance(loop, cst.For) and any(
                isinstance(n, cst.Name) and n.value == func.value for n in index.walk(loop.target)
            ):
                return any(
                    index.carried_ref(n, index.scope_of(n)) in model_refs
                    for n in index.walk(loop.iter)
                    if isinstance(n, (cst.Name, cst.Attribute))
                )
        return False


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    index = plan.index
    dist = plan.names.dist
    if not options.module_output:
        facts = _entry_output_only(facts, plan)
    gated = {stmt for stmt, _ in facts.outputs}
    if facts.tracker_values:
        helper = uniformity.same_on_every_rank(plan)
        for value in facts.tracker_values:
            owner = index.module.code_for_node(value.value)
            plan.replace(value, _shared_from_rank_zero(helper, owner))
            plan.change(value, f"`{owner}` exists on rank 0 only: every rank takes rank 0's `{value.attr.value}`")
    reported: set[tuple[cst.Module, str]] = set()  # the first output of each kind in each file
    for stmt, kind in facts.outputs:
        if any(ancestor in gated for ancestor in index.ancestors(stmt)):
            continue
        plan.on_rank_zero(stmt)
        if (index.module_of(stmt), kind) not in reported:
            reported.add((index.module_of(stmt), kind))
            plan.change(stmt, f"{kind} on global rank 0 only")
    taken: set[str] = set()
    for call in facts.hoisted:
        stmt = index.statement_of(call)
        name = fresh(f"{_callee_name(call)}_result", index.identifiers | taken)
        taken.add(name)
        hoisted = cst.parse_statement(f"{name} = {index.module.code_for_node(call)}\n")
        plan.insert_before(stmt, hoisted.with_changes(leading_lines=statement(stmt).leading_lines))
        plan.replace(stmt, lambda n: statement(n).with_changes(leading_lines=()))
        plan.replace(call, _name(name))
        plan.change(call, f"compute `{name}` on every rank, output it on rank 0")
    for call in facts.trackers:
        plan.replace(call, lambda n: cst.IfExp(test=plan.rank_zero, body=cast(cst.Call, n), orelse=cst.Name("None")))
        plan.change(call, f"{index.module.code_for_node(call.func)} created on global rank 0 only (None elsewhere)")
    for call in facts.progress_bars:
        disable = cst.Arg(
            keyword=cst.Name("disable"),
            value=cst.parse_expression(plan.with_group(call, f"{dist}.get_rank() != 0")),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        plan.replace(call, _append_argument(disable))
        plan.change(call, "progress bar shown on global rank 0 only")
    ungrouped = {stmt for stmt, _ in facts.ungrouped}
    test = cst.parse_expression(f"not {dist}.is_initialized() or {dist}.get_rank() == 0")
    for stmt, kind in facts.ungrouped:
        if not any(ancestor in ungrouped for ancestor in index.ancestors(stmt)):
            plan.replace(stmt, _under(test))
            plan.change(stmt, f"{kind} on global rank 0 only, once the process group exists (it also runs before)")
    for call in facts.devnull_opens:
        plan.replace(call, _to_devnull_off_rank_zero(plan))
        plan.change(call, "the file is written on global rank 0 only (the other ranks write to os.devnull)")
    for file_name in facts.log_files:
        plan.replace(file_name, _file_off_rank_zero(plan))
        plan.change(file_name, "the log file is written on global rank 0 only (the other ranks log to os.devnull)")
    for call in facts.makedirs:
        if m.matches(call.func, m.Attribute(attr=m.Name("mkdir"))):
            plan.replace(call, _call_makedirs)
        exist_ok = cst.Arg(
            keyword=cst.Name("exist_ok"),
            value=cst.Name("True"),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        plan.replace(call, _append_argument(exist_ok))
        plan.change(call, "os.makedirs(..., exist_ok=True): ranks creating the same folder do not race")


def _entry_output_only(facts: Facts, plan: EditPlan) -> Facts:
    """The facts without the terminal output of the program's other modules, reported once per module."""
    index = plan.index

    def kept(node: cst.CSTNode, kind: str = "print") -> bool:
        return kind in _TERMINAL and index.module_of(node) is not index.module

    left: list[cst.CSTNode] = [stmt for stmt, kind in (*facts.outputs, *facts.ungrouped) if kept(stmt, kind)]
    left += [call for call in facts.progress_bars if kept(call)]
    first: dict[cst.Module, cst.CSTNode] = {}
    for node in sorted(left, key=lambda n: index.order[n]):
        first.setdefault(index.module_of(node), node)
    for node in first.values():
        plan.report(
            node,
            MODULE_OUTPUT_KEPT,
            f"output to the terminal in {index.path_of(node)} stays on every rank, since one output file cannot hold "
            "that module: convert with --in-place or -o DIR/ to put it on rank 0 too",
        )
    gone = {stmt for stmt in left if isinstance(stmt, cst.BaseStatement)}
    return replace(
        facts,
        outputs=tuple((stmt, kind) for stmt, kind in facts.outputs if stmt not in gone),
        ungrouped=tuple((stmt, kind) for stmt, kind in facts.ungrouped if stmt not in gone),
        hoisted=tuple(call for call in facts.hoisted if index.statement_of(call) not in gone),
        progress_bars=tuple(call for call in facts.progress_bars if call not in left),
    )


def _shared_from_rank_zero(helper: str, owner: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    def replace(node: cst.CSTNode) -> cst.CSTNode:
        value = cst.Module([]).code_for_node(node)
        return cst.parse_expression(f"{helper}({value} if {owner} is not None else None)")

    return replace


def _name(name: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    return lambda _: cst.Name(name)


def _append_argument(arg: cst.Arg) -> Callable[[cst.CSTNode], cst.CSTNode]:
    def append(node: cst.CSTNode) -> cst.CSTNode:
        call = cast(cst.Call, node)
        return call.with_changes(args=[*with_comma(call.args), arg])

    return append


def _under(test: cst.BaseExpression) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """``stmt`` -> ``if test: stmt``."""

    def wrap(node: cst.CSTNode) -> cst.CSTNode:
        stmt = statement(node)
        body = cst.IndentedBlock(body=[stmt.with_changes(leading_lines=())])
        return cst.If(test=test, body=body, leading_lines=stmt.leading_lines)

    return wrap


def _to_devnull_off_rank_zero(plan: EditPlan) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """``open(path, "w")`` -> ``open(path, "w") if dist.get_rank() == 0 else open(os.devnull, "w")``."""

    def replace(node: cst.CSTNode) -> cst.CSTNode:
        call = cast(cst.Call, node)
        first, *rest = call.args
        devnull = call.with_changes(
            args=[first.with_changes(value=cst.parse_expression(f"{plan.names.os}.devnull")), *rest]
        )
        return cst.IfExp(test=plan.rank_zero, body=call, orelse=devnull)

    return replace


def _file_off_rank_zero(plan: EditPlan) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """``FileHandler(path)`` -> ``FileHandler(path if dist.get_rank() == 0 else os.devnull)``."""

    def replace(node: cst.CSTNode) -> cst.CSTNode:
        arg = cast(cst.Arg, node)
        devnull = cst.parse_expression(f"{plan.names.os}.devnull")
        return arg.with_changes(value=cst.IfExp(plan.rank_zero, arg.value, devnull))

    return replace


def _call_makedirs(node: cst.CSTNode) -> cst.CSTNode:
    """``os.mkdir(...)`` -> ``os.makedirs(...)``."""
    call = cast(cst.Call, node)
    return call.with_changes(func=cast(cst.Attribute, call.func).with_changes(attr=cst.Name("makedirs")))


_BASIC_CONFIG = frozenset({"logging.basicConfig"})


def _writes(open_call: cst.Call, modes: str = "wax") -> bool:
    """``open(path, "w")`` (or "a", "x", with or without "b" / "+")."""
    mode = argument(open_call, "mode", 1)
    return (
        mode is not None
        and isinstance(mode.value, cst.SimpleString)
        and bool(set(str(mode.value.evaluated_value)) & set(modes))
    )


def _assigned(node: cst.CSTNode | None) -> bool:
    return isinstance(node, cst.Assign)


def _callee_name(call: cst.Call) -> str:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else "value"

"""Which statements of the program are output: what the side_effects concern puts on rank 0."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import cast

import libcst as cst

from ddpify import torch_api
from ddpify.concerns import checkpoints
from ddpify.concerns.side_effects.facts import FILE_USE_NOT_GATED, OUTPUT_RUNS_WORK
from ddpify.engine.index import Index, Ref, Scope
from ddpify.engine.program import Program
from ddpify.engine.syntax import argument, single_target
from ddpify.engine.values import built_by, never_runs


class Finder:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.index = program.index
        # the names bound to each file opened for writing without ``with``, and to what is built on it
        self.opened = self._open_files()
        self.files: set[Ref] = set().union(*self.opened.values())
        self.everywhere: list[cst.Call] = []  # such opens left on every rank, os.devnull off rank 0
        # code whose output and writes stay as they are (a download the ranks run in turns)
        self.exempt: Callable[[cst.CSTNode], bool] = lambda node: False
        # trackers kept as a field of an object the program hands on (``config.writer = SummaryWriter()``):
        # every place the object passes through, and the field's name
        self.tracker_fields: list[tuple[frozenset[Ref], str]] = []
        self.tracker_refs: set[Ref] = set()  # the places holding a tracker (None off rank 0)

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
            if self._targets_of(call) & self.files:
                continue  # reported with its uses by _check_files_written_once
            if call in self.everywhere or self._to_devnull(call, late):
                yield call  # ``with open(...)`` around training, ``sys.stdout = open(...)``, a file handed on
                continue
            self.program.report(
                call,
                FILE_USE_NOT_GATED,
                "a file opened for writing here, at import time, is opened by every rank before the process "
                "group exists: open it where the program runs (in `main()`, or under `if __name__ == "
                '"__main__":`)'
                if not late(call)
                else "a file opened for writing here is opened by every rank, and os.devnull cannot stand in for "
                'it on the others (a mode "x" or "+", or the path not given first): open it with "w" or "a", '
                "the path first",
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
            if never_runs(index, call):
                continue  # ``FileHandler(name)`` of a helper that no call asks for a file
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
        return (
            self._targets(assign) if isinstance(assign, (cst.Assign, cst.AnnAssign)) and assign.value is call else set()
        )

    def _open_files(self) -> dict[cst.Call, set[Ref]]:
        """Each file opened for writing without ``with`` (``f = open(path, "w")``): the names bound to
        it, and to what is built on it (``writer = csv.writer(f)``)."""
        index = self.index
        opened: dict[cst.Call, set[Ref]] = {}
        assigns = [small for stmt in index.statements for small in stmt.body if isinstance(small, cst.Assign)]
        for small in assigns:
            call = small.value
            if isinstance(call, cst.Call) and "builtins.open" in index.qualified_names(call.func) and _writes(call):
                opened.setdefault(call, set()).update(self._targets(small))
        for files in opened.values():
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
        return opened

    def opened_everywhere(self, stray: Iterable[cst.BaseExpression], late: Callable[[cst.CSTNode], bool]) -> bool:
        """Leave on every rank each file with a use in ``stray`` (where rank 0's statements cannot take
        it) whose ``open`` can write to os.devnull off rank 0; whether any was."""
        index = self.index
        used = {index.carried_ref(read, index.scope_of(read)) for read in stray}
        for call, files in self.opened.items():
            if files & used and self._to_devnull(call, late):
                self.everywhere.append(call)
        if self.everywhere:
            kept = [files for call, files in self.opened.items() if call not in self.everywhere]
            self.files = set().union(*kept)
        return bool(self.everywhere)

    def _to_devnull(self, call: cst.Call, late: Callable[[cst.CSTNode], bool]) -> bool:
        """Whether ``open(path, mode)`` can open os.devnull off rank 0: after the process group exists,
        the path first, a mode that neither needs a new file ("x") nor reads back ("+")."""
        return late(call) and bool(call.args) and call.args[0].keyword is None and not _writes(call, "x+")

    def _targets(self, small: cst.Assign | cst.AnnAssign) -> set[Ref]:
        scope = self.index.scope_of(small)
        targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
        refs = {self.index.ref_of(target, scope) for target in targets}
        return {ref for ref in refs if ref is not None}

    def trackers(self) -> Iterator[cst.Call]:
        for call in self.index.calls:
            parent = self.index.parent(call)
            if self._builds_tracker(call) and (
                isinstance(parent, cst.Assign)
                or single_target(parent) is not None
                or (isinstance(parent, cst.Return) and self.index.holders(call))  # ``return SummaryWriter(...)``
            ):
                yield call

    def _builds_tracker(self, call: cst.Call) -> bool:
        """``SummaryWriter(log_dir)``, ``wandb.init(...)``, or the program's own subclass of a tracker class
        (``class RunWriter(SummaryWriter)``, with methods of its own that log)."""
        index = self.index
        if index.is_call_to(call, torch_api.TRACKER_FACTORIES):
            return True
        own = index.local_class(call.func)
        return own is not None and index.derives_from(own, torch_api.TRACKER_FACTORIES)

    def outputs(
        self, model_refs: frozenset[Ref], trackers: tuple[cst.Call, ...], hoisted: list[cst.Call]
    ) -> Iterator[tuple[cst.BaseStatement, str]]:
        """Statements whose only effect is output: printing, logging, plots, trackers, files written.

        Calls inside them that must run on every rank are added to ``hoisted``.
        """
        index = self.index
        tracker_refs = self.assigned_from(trackers)
        self.tracker_fields = self._fields_holding(trackers)
        tracker_refs |= self._aliases_of_fields()
        self.tracker_refs = tracker_refs
        logger_refs = self.assigned_from(
            c for c in index.calls if index.is_call_to(c, torch_api.LOGGER_FACTORIES) and _assigned(index.parent(c))
        )
        for stmt in index.statements:
            if _after_a_leap(index, stmt):
                continue  # ``raise NotImplementedError`` then ``print(...)``: it never runs, and stays as it is
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
        for node in index.nodes_of(cst.With):
            with_ = cast(cst.With, node)
            if self._writes_file(with_) and not self._runs_collectives(with_, model_refs):
                yield with_, "file write"

    def assigned_from(self, calls: Iterable[cst.Call]) -> set[Ref]:
        """Every place the results of ``calls`` (each assigned to one name) flow to."""
        index = self.index
        refs: set[Ref] = set()
        for call in calls:
            assign = index.parent(call)
            if isinstance(assign, cst.Assign) and len(assign.targets) > 1:  # ``a = b = Writer()``: the first
                ref = index.ref_of(assign.targets[0].target, index.scope_of(call))
                refs |= index.downstream(ref) if ref is not None else set()
                continue
            for ref in index.holders(call):
                refs |= index.downstream(ref)
        return refs

    def _output_kind(self, small: cst.BaseSmallStatement, trackers: set[Ref], loggers: set[Ref]) -> str | None:
        index = self.index
        if isinstance(small, cst.Assign):
            if self.files and self._targets(small) & self.files:
                return "file write"  # f = open(path, "w"); writer = csv.writer(f)
            if all(self._tracker_module_state(t.target) for t in small.targets):
                return "tracker call"  # ``wandb.run.name = ...``: state of the run made on rank 0
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
            if self._on_a_tracker_field(call.func.value):
                return "tracker call"
            if receiver in loggers and call.func.attr.value in torch_api.LOGGER_METHODS:
                return "logging call"
            if call.func.attr.value in torch_api.OUTPUT_METHODS:
                return "output call"
            if call.func.attr.value == "save" and self._a_pil_image(call.func.value):
                return "output call"
            if call.func.attr.value == "write" and self._a_progress_bar(call.func.value):
                return "output call"  # ``bar.write(line)``: tqdm's class method prints, bar disabled or not
        return None

    def _a_progress_bar(self, expr: cst.BaseExpression) -> bool:
        """Whether ``expr`` is a progress bar (``bar = tqdm(total=n)``)."""
        index = self.index
        return any(
            isinstance(value, cst.Call) and index.is_call_to(value, torch_api.PROGRESS_BARS)
            for value in built_by(index, expr) or ()
        )

    def _a_pil_image(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """Whether ``expr`` is an image PIL made (``Image.fromarray(array)``, also through ``.convert(...)``, or
        by a transform object: ``ToPILImage()(grid)``, an object of the program whose ``__call__`` returns one)
        or a matplotlib animation: an object whose ``.save(path)`` writes a file."""
        index = self.index
        for value in built_by(index, expr) or ():
            while isinstance(value, cst.Call):
                if index.qualified_names(value.func) & torch_api.PIL_IMAGES:
                    return True
                for maker in built_by(index, value.func) or ():
                    if isinstance(maker, cst.Call) and index.qualified_names(maker.func) & torch_api.PIL_TRANSFORMS:
                        return True
                    for cls in index.classes_built(maker) if isinstance(maker, cst.Call) and depth < 3 else ():
                        method = index.method(cls, "__call__", dispatch=True)
                        if method is not None and any(
                            self._a_pil_image(made, depth + 1) for made in index.returned_values(method)
                        ):
                            return True
                if not isinstance(value.func, cst.Attribute):
                    break
                value = value.func.value  # ``Image.fromarray(grid).convert("RGB")``
        return False

    def _on_a_tracker(self, expr: cst.BaseExpression, trackers: set[Ref]) -> bool:
        """``experiment.config`` in ``experiment.config.update(...)``: an attribute chain that starts at a tracker."""
        scope = self.index.scope_of(expr)
        while isinstance(expr, cst.Attribute):
            if self._instance_field(expr, trackers):
                return True
            expr = expr.value
            if self.index.carried_ref(expr, scope) in trackers:
                return True
        return False

    def _instance_field(self, expr: cst.Attribute, trackers: set[Ref]) -> bool:
        """``monitor.writer`` where ``monitor = Monitor(...)`` keeps its tracker in ``self.writer``."""
        index = self.index
        if not isinstance(expr.value, cst.Name):
            return False
        holder = index.carried_ref(expr.value, index.scope_of(expr))
        if holder is None or not any(ref.path == f"self.{expr.attr.value}" for ref in trackers):
            return False
        for _, value in index.values_assigned(holder):
            for cls in index.classes_built(value) if isinstance(value, cst.Call) else ():
                if any(Ref(owner, f"self.{expr.attr.value}") in trackers for owner in index.ancestry(cls)):
                    return True
        return False

    def _fields_holding(self, calls: Iterable[cst.Call]) -> list[tuple[frozenset[Ref], str]]:
        """``config.writer = SummaryWriter(...)`` where ``config`` is a plain object (parsed arguments, a
        config): the places ``config`` passes through, and ``writer``."""
        index = self.index
        fields: list[tuple[frozenset[Ref], str]] = []
        for call in calls:
            assign = index.parent(call)
            if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1):
                continue
            target = assign.targets[0].target
            if not isinstance(target, cst.Attribute) or index.ref_of(target, index.scope_of(call)) is not None:
                continue  # ``self.writer`` is a field the value flow follows already
            owner = index.carried_ref(target.value, index.scope_of(call))
            if owner is not None:
                fields.append((frozenset(index.lineage(owner)), target.attr.value))
        return fields

    def _aliases_of_fields(self) -> set[Ref]:
        """``tb_logger = self.config.tb_logger``: another name for a tracker kept on an object."""
        index = self.index
        refs: set[Ref] = set()
        if not self.tracker_fields:
            return refs
        for stmt in index.statements:
            for small in stmt.body:
                if (
                    isinstance(small, cst.Assign)
                    and len(small.targets) == 1
                    and isinstance(small.value, cst.Attribute)
                    and self._on_a_tracker_field(small.value)
                    and (ref := index.ref_of(small.targets[0].target, index.scope_of(small))) is not None
                ):
                    refs |= index.downstream(ref)
        return refs

    def _on_a_tracker_field(self, expr: cst.BaseExpression) -> bool:
        """``self.config.writer`` in ``self.config.writer.add_scalar(...)``, for a tracker kept on ``config``."""
        index = self.index
        scope = index.scope_of(expr)
        while isinstance(expr, cst.Attribute):
            owner = index.carried_ref(expr.value, scope)
            if owner is not None and any(
                expr.attr.value == name and owner in places for places, name in self.tracker_fields
            ):
                return True
            expr = expr.value
        return False

    def _tracker_module_state(self, target: cst.BaseExpression) -> bool:
        """``wandb.run.name`` or ``wandb.run.summary["acc"]``: an attribute of a tracker module's own objects."""
        if not isinstance(target, cst.Attribute | cst.Subscript):
            return False
        while isinstance(target, cst.Attribute | cst.Subscript):
            target = target.value
            if isinstance(target, cst.Attribute) and any(
                n.startswith(torch_api.TRACKER_MODULES) for n in self.index.qualified_names(target)
            ):
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
        if not all(isinstance(holder, cst.Name | cst.Attribute) for holder in holders):  # ``self.win`` too
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
                    if self._picks_a_tracker_call(read, trackers):
                        continue  # ``if win is None: win = viz.line(...) else: viz.line(..., win=win)``
                    if self._only_saved(read):
                        continue  # ``{"recon": self.win_recon}`` in a checkpoint, which rank 0 alone writes
                    if self._tracker_call_around(read, trackers) is None:
                        return False
        return True

    def _only_saved(self, read: cst.BaseExpression, depth: int = 0) -> bool:
        """``read`` goes only into a checkpoint: an entry of a dict (or list) that ``torch.save`` writes, directly
        or through names that hold it (``wins = {...}``, ``states = {"wins": wins}``, ``torch.save(states, f)``)."""
        index = self.index
        if checkpoints.saved(index, read):
            return True
        entry = index.parent(read)
        container = index.parent(entry)
        assign = index.parent(container)
        if not (
            depth < 3
            and isinstance(entry, (cst.DictElement, cst.Element))
            and entry.value is read
            and isinstance(container, (cst.Dict, cst.List, cst.Tuple))
            and isinstance(assign, cst.Assign)
            and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)
        ):
            return False
        scope = index.scope_of(assign)
        holder = index.ref_of(assign.targets[0].target, scope)
        reads = (
            [r for r in index.mentions(scope, holder) if not isinstance(index.parent(r), cst.AssignTarget)]
            if holder
            else []
        )
        return bool(reads) and all(self._only_saved(r, depth + 1) for r in reads)

    def _picks_a_tracker_call(self, read: cst.BaseExpression, trackers: set[Ref]) -> bool:
        """Whether ``read`` is in the test of an ``if`` whose every branch only calls the tracker (and keeps
        what it returns): on the other ranks the handle stays as it was made, and the calls do not run."""
        index = self.index
        test = next((a for a in index.ancestors(read) if isinstance(a, cst.If) and index.inside(read, a.test)), None)
        if test is None:
            return False
        smalls = [
            small
            for stmt in index.walk(test)
            if isinstance(stmt, cst.SimpleStatementLine) and not index.inside(stmt, test.test)
            for small in stmt.body
        ]
        compound = [n for n in index.walk(test) if isinstance(n, cst.BaseCompoundStatement) and n is not test]
        calls = [s.value for s in smalls if isinstance(s, (cst.Expr, cst.Assign))]
        return (
            bool(smalls)
            and len(calls) == len(smalls)
            and all(isinstance(c, cst.If) for c in compound)
            and all(
                isinstance(c, cst.Call)
                and isinstance(c.func, cst.Attribute)
                and index.carried_ref(c.func.value, index.scope_of(c)) in trackers
                for c in calls
            )
        )

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
        """``with open(path, "w") as f:`` (or "a", "x"; an archive or a compressed file too), and pathlib's
        ``with path.open("wb") as f:``."""
        return any(
            isinstance(item.item, cst.Call)
            and (
                (self.index.qualified_names(item.item.func) & _FILE_OPENERS and _writes(item.item))
                or _path_opened_for_writing(item.item)
            )
            for item in node.items
        )

    def _runs_collectives(self, stmt: cst.CSTNode, model_refs: frozenset[Ref]) -> bool:
        return bool(self._work_calls(stmt, model_refs))

    def _work_calls(self, node: cst.CSTNode, model_refs: frozenset[Ref]) -> list[cst.Call]:
        """The outermost calls in ``node`` that run the model or the script's own functions."""
        if isinstance(node, cst.Call):
            scope = self.index.scope_of(node)
            if (
                (self.index.resolve_callee(node, scope) is not None and self.index.instance_method(node, scope) is None)
                or self._method_of_own_object(node, scope, model_refs)  # ``trainer.step(x)``
                or self.index.carried_ref(node.func, scope) in model_refs
                or self._item_of_models(node.func, model_refs)
                or self._library_call_on_a_model(node, scope, model_refs)
            ):
                return [node]
        return [call for child in self.index.children.get(node, ()) for call in self._work_calls(child, model_refs)]

    def _library_call_on_a_model(self, call: cst.Call, scope: Scope, model_refs: frozenset[Ref]) -> bool:
        """``evaluate(model, val_loader)`` imported from code ddpify does not read: it may run the wrapped
        model, whose forward syncs buffers with the other ranks, so it runs on every rank."""
        names = self.index.qualified_names(call.func)
        if not names or names & torch_api.OUTPUT_FUNCTIONS or any(n.startswith(_NOT_WORK) for n in names):
            return False
        return any(self.index.carried_ref(arg.value, scope) in model_refs for arg in call.args)

    def _method_of_own_object(self, call: cst.Call, scope: Scope, model_refs: frozenset[Ref]) -> bool:
        """``trainer.step(x)`` on an object of the program's own class (not a model: a model's own
        methods, ``model.sample(n)``, are the wrapped model's reads, run on rank 0 through ``.module``)."""
        if not self.index.instance_methods(call, scope):  # of one class or another, or a function chosen
            return False
        receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
        if receiver is None:
            return True
        held = self.index.carried_ref(receiver, scope)
        # a tracker of the program's own class (``writer.log_loss(...)``) exists on rank 0 only
        return held not in model_refs and held not in self.tracker_refs and not self._on_a_tracker_field(receiver)

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


_BASIC_CONFIG = frozenset({"logging.basicConfig"})
# Library calls handed a model that only show or record it: they stay with the output on rank 0.
_NOT_WORK = (
    "builtins.",
    "IPython.",
    "logging.",
    "tqdm.",
    "wandb.",
    "mlflow.",
    "torch.save",
    "torch.jit.save",
    "torch.onnx.",
    "torch.utils.tensorboard",
    *torch_api.TRACKER_MODULES,
)


# Calls that open a file by its path and mode (the mode second): ``tarfile.open(path, "w:gz")`` too.
_FILE_OPENERS = frozenset(
    {
        "builtins.open",
        "io.open",
        "codecs.open",
        "gzip.open",
        "bz2.open",
        "lzma.open",
        "tarfile.open",
        "zipfile.ZipFile",
    }
)


def _writes(open_call: cst.Call, modes: str = "wax", position: int = 1) -> bool:
    """``open(path, "w")`` (or "a", "x", with or without "b" / "+"); pathlib's ``path.open("w")`` gives the
    mode first (``position`` 0)."""
    mode = argument(open_call, "mode", position)
    return (
        mode is not None
        and isinstance(mode.value, cst.SimpleString)
        and bool(set(str(mode.value.evaluated_value)) & set(modes))
    )


def _after_a_leap(index: Index, stmt: cst.BaseStatement) -> bool:
    """Whether a ``raise``, ``return``, ``break`` or ``continue`` comes before ``stmt`` in its own block."""
    block = index.parent(stmt)
    body = list(getattr(block, "body", ()))
    if stmt not in body:
        return False
    return any(
        isinstance(small, cst.Raise | cst.Return | cst.Break | cst.Continue)
        for earlier in body[: body.index(stmt)]
        if isinstance(earlier, cst.SimpleStatementLine)
        for small in earlier.body
    )


def _path_opened_for_writing(call: cst.Call) -> bool:
    """``path.open("wb")`` (pathlib: the mode comes first), ``mode=`` spelled or not."""
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "open"):
        return False
    mode = argument(call, "mode", 0)  # a mode, not a member's name (``archive.open("weights.txt")``)
    text = str(mode.value.evaluated_value) if mode is not None and isinstance(mode.value, cst.SimpleString) else ""
    return bool(text) and set(text) <= set("rwaxbt+") and _writes(call, position=0)


def _assigned(node: cst.CSTNode | None) -> bool:
    return isinstance(node, cst.Assign)


def _callee_name(call: cst.Call) -> str:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else "value"

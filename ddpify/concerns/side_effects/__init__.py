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
rank 0 only. Where a use of it cannot go there (the file handed to a function
of the program, ``sys.stdout = open(...)``), it is opened on every rank and the
other ranks write to ``os.devnull``; one opened at import time, before the rank
is known, is refused (DDP503). A ``with open(path, "w")`` block that also
trains is kept the same way: it must run on every rank, and the other ranks
write to ``os.devnull``::

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
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.concerns import checkpoints, downloads, model, process_group
from ddpify.concerns.side_effects.facts import (
    CODES,
    FILE_USE_NOT_GATED,
    TRACKER_BEFORE_SETUP,
    TRACKER_USED_ELSEWHERE,
    Facts,
)
from ddpify.concerns.side_effects.finder import Finder, _writes
from ddpify.concerns.side_effects.rewrite import rewrite
from ddpify.engine.index import Index, Ref, Scope
from ddpify.engine.program import Program
from ddpify.engine.syntax import argument, single_target
from ddpify.engine.uniformity import files, in_worker_code

__all__ = ["CODES", "Facts", "find", "rewrite"]


def find(program: Program, models: model.Facts, group: process_group.Facts, fetches: downloads.Facts) -> Facts:
    """Output to put on rank 0. Output that runs before the process group exists (at import time, or
    in a function called then) cannot ask for the rank: it stays on every rank, once per process.
    Output in a function that fetches files stays as it is: the ranks run it in turns."""
    finder = Finder(program)
    index = program.index

    def late(node: cst.CSTNode) -> bool:
        return not group.runs_before_setup(index, node)

    finder.exempt = lambda node: fetches.in_turns(index, node)

    trackers = tuple(finder.trackers())
    for call in trackers:
        if not late(call) and not process_group.made_for_nothing(program, call):
            program.report(
                call,
                TRACKER_BEFORE_SETUP,
                f"`{index.module.code_for_node(call.func)}` is created before the process group exists, so every "
                "rank would create it: create it inside the function that trains",
            )
    trackers = tuple(filter(late, trackers))

    def found_outputs() -> tuple[list[tuple[cst.BaseStatement, str]], list[cst.Call]]:
        hoisted: list[cst.Call] = []
        found = finder.outputs(models.refs, trackers, hoisted)
        return [(stmt, kind) for stmt, kind in found if not finder.exempt(stmt)], hoisted

    reported = len(program.findings)
    found, hoisted = found_outputs()
    # A file opened without ``with`` and used where rank 0's statements cannot take it (handed to a
    # function, read in a test): opened on every rank, as os.devnull off rank 0, and used as it is.
    gated = {stmt for stmt, _ in found if late(stmt)}
    stray = _reads_off_rank_zero(index, finder.files, gated, every=True)  # ``return train_f, val_f``: both
    spared = finder.opened_everywhere((read for _, _, read in stray), late)
    if spared:
        del program.findings[reported:]  # found again, without those files
        found, hoisted = found_outputs()
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
        if index.is_call_to(c, torch_api.PROGRESS_BARS)
        and argument(c, "disable") is None
        and late(c)
        and not _counts_read(index, c)
    )
    makedirs = tuple(
        c
        for c in index.calls
        if (index.is_call_to(c, torch_api.MAKEDIRS) or _path_mkdir(index, c))
        and argument(c, "exist_ok") is None
        and len(c.args) < 3
        and not finder.exempt(c)
    )
    return Facts(
        outputs,
        tuple(hoisted),
        trackers,
        progress_bars,
        makedirs,
        devnull_opens,
        ungrouped,
        log_files,
        tracker_values,
        tuple(_read_back(index, outputs)),
        tuple(_fresh_folders(index, late, finder.exempt)),
        tuple(
            c
            for c in index.calls
            if index.is_call_to(c, _INPUT) and late(c) and not finder.exempt(c) and not in_worker_code(index, c)
        ),
        _configs_read(index, late),
        tuple(
            line
            for line in files.removals_after_looks(index)
            if late(line) and not finder.exempt(line) and not in_worker_code(index, line)
        ),
    )


_INPUT = frozenset({"builtins.input"})
_WANDB_INIT = frozenset({"wandb.init"})


def _configs_read(index: Index, late: Callable[[cst.CSTNode], bool]) -> tuple[cst.Call, ...]:
    """The statements ``wandb.init(...)`` (on rank 0 once converted), where the program reads ``wandb.config``
    (``batch_size=wandb.config.batch_size``): a value, not a call of the tracker, that every rank needs."""
    reads = [
        node
        for node in index.attributes.get("config", ())
        if "wandb.config" in index.qualified_names(node) and not _called_on(index, node)
    ]
    if not reads:
        return ()
    return tuple(
        call
        for call in index.calls
        if index.is_call_to(call, _WANDB_INIT)
        and late(call)
        and isinstance(call.func, cst.Attribute)
        and isinstance(index.parent(index.parent(call)), cst.SimpleStatementLine)  # ``wandb.init(...)`` alone
    )


def _called_on(index: Index, node: cst.Attribute) -> bool:
    """``wandb.config.update(...)``: a method of the tracker's, called (on rank 0 with the rest of it)."""
    method = index.parent(node)
    return (
        isinstance(method, cst.Attribute) and isinstance(call := index.parent(method), cst.Call) and call.func is method
    )


def _path_mkdir(index: Index, call: cst.Call) -> bool:
    """``output_dir.mkdir()`` of a ``pathlib.Path``: a method ``mkdir`` whose object is not a module and whose
    arguments are pathlib's (``mode``, ``parents``, ``exist_ok``)."""
    func = call.func
    return (
        isinstance(func, cst.Attribute)
        and func.attr.value == "mkdir"
        and not index.qualified_names(func)
        and not index.qualified_names(func.value) & {"os", "os.path"}
        and all(
            not a.star and (a.keyword is None or a.keyword.value in ("mode", "parents", "exist_ok")) for a in call.args
        )
        and len([a for a in call.args if a.keyword is None]) <= 1
    )


def _counts_read(index: Index, bar: cst.Call) -> bool:
    """``total / pbar.n``: the program reads what the bar counted, which a disabled bar does not count;
    such a bar is left on every rank."""
    held = single_target(index.parent(bar))
    ref = index.ref_of(held, index.scope_of(bar)) if held is not None else None
    if ref is None:
        return False
    for scope in index.scopes_reading(ref):
        for read in index.mentions(scope, ref):
            attribute = index.parent(read)
            if isinstance(attribute, cst.Attribute) and attribute.value is read:
                call = index.parent(attribute)
                # (``pbar.n = start_step`` sets where it counts from: no read)
                if not (isinstance(call, cst.Call) and call.func is attribute) and not isinstance(
                    call, cst.AssignTarget
                ):
                    return True
    return False


def _fresh_folders(
    index: Index, late: Callable[[cst.CSTNode], bool], exempt: Callable[[cst.CSTNode], bool]
) -> Iterator[cst.SimpleStatementLine]:
    """``os.makedirs(run_dir, exist_ok=False)`` alone on its line: the run must start in a folder of its
    own. Rank 0 makes it (and fails where it exists, as before); the others wait for it."""
    for call in index.calls:
        exist_ok = argument(call, "exist_ok")
        stmt = index.statement_of(call)
        if (
            index.is_call_to(call, torch_api.MAKEDIRS)
            and exist_ok is not None
            and m.matches(exist_ok.value, m.Name("False"))
            and isinstance(stmt, cst.SimpleStatementLine)
            and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr)
            and stmt.body[0].value is call
            and late(call)
            and not exempt(call)
        ):
            yield stmt


def _read_back(index: Index, outputs: tuple[tuple[cst.BaseStatement, str], ...]) -> Iterator[cst.BaseStatement]:
    """The outputs that write a file the program reads later: the other ranks must wait for rank 0."""
    read = {
        shape
        for call in index.calls
        if (path := _file_read(index, call)) is not None
        for shape in checkpoints.path_shapes(index, path)
    }
    if not read:
        return
    for stmt, kind in outputs:
        if kind == "file write" and isinstance(stmt, cst.With):  # ``with open(path, "w") as f: ...``
            if any(isinstance(n, cst.Call) and index.is_call_to(n, torch_api.SAVE) for n in index.walk(stmt.body)):
                continue  # ``torch.save(model, f)``: the save's own barrier (checkpoints)
            paths = [
                item.item.args[0].value
                for item in stmt.items
                if isinstance(item.item, cst.Call)
                and "builtins.open" in index.qualified_names(item.item.func)
                and _writes(item.item)
                and item.item.args
                and not item.item.args[0].keyword
            ]
            if any(checkpoints.path_shapes(index, path) & read for path in paths):
                yield stmt
            continue
        if kind != "output call" or not isinstance(stmt, cst.SimpleStatementLine):
            continue
        call = cast(cst.Call, cast(cst.Expr, stmt.body[0]).value)
        path = _file_written(index, call)
        if path is not None and checkpoints.path_shapes(index, path) & read:
            yield stmt


def _file_read(index: Index, call: cst.Call) -> cst.BaseExpression | None:
    """The path a call reads a file from: ``pd.read_csv(path)``, ``np.load(path)``, ``open(path)``."""
    names = index.qualified_names(call.func)
    if names & _READS and call.args and not call.args[0].keyword:
        if "builtins.open" in names and _writes(call):
            return None
        return call.args[0].value
    if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("read_text", "read_bytes"):
        return _path_of(index, call.func.value)
    return None


_PATHS = frozenset({"pathlib.Path", "pathlib.PurePath"})


def _path_of(index: Index, path: cst.BaseExpression) -> cst.BaseExpression:
    """The path ``Path(path)`` is made from (what the program names the file by), or ``path`` itself."""
    if isinstance(path, cst.Call) and index.is_call_to(path, _PATHS) and len(path.args) == 1 and not path.args[0].star:
        return path.args[0].value
    return path


def _file_written(index: Index, call: cst.Call) -> cst.BaseExpression | None:
    """The path an output call writes: ``frame.to_csv(path)``, ``np.save(path, a)``, ``Path(p).write_text(s)``."""
    if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("write_text", "write_bytes"):
        return _path_of(index, call.func.value)
    if call.args and not call.args[0].keyword and not index.qualified_names(call.func) & _WRITES_INTO_A_FILE:
        return call.args[0].value
    return None


_READS = frozenset(
    {
        "builtins.open",
        *(f"pandas.read_{kind}" for kind in ("csv", "table", "json", "parquet", "pickle", "excel", "feather")),
        *(f"numpy.{name}" for name in ("load", "loadtxt", "genfromtxt")),
        "scipy.io.loadmat",
        "PIL.Image.open",
        # images read back (frames written each epoch, gathered into an animation at the end)
        *(f"imageio.{v}imread" for v in ("", "v2.", "v3.")),
        "cv2.imread",
        "matplotlib.pyplot.imread",
        "skimage.io.imread",
        "torchvision.io.read_image",
    }
)
_WRITES_INTO_A_FILE = frozenset({"json.dump", "pickle.dump"})  # their file object comes second


def _reads_off_rank_zero(
    index: Index,
    refs: Iterable[Ref],
    gated: set[cst.BaseStatement],
    counts: Callable[[Ref, cst.BaseExpression, cst.BaseStatement], bool] = lambda ref, read, stmt: True,
    *,
    every: bool = False,
) -> Iterator[tuple[Ref, Scope, cst.BaseExpression]]:
    """The first read of ``refs`` that ``counts`` in each statement that is not put on rank 0 (with
    ``every``, each such read)."""
    seen: set[cst.BaseStatement] = set()
    for ref in sorted(refs, key=lambda r: r.path):
        for scope in index.scopes_reading(ref):
            for read in index.mentions(scope, ref):
                stmt = index.statement_of(read)
                if stmt in seen or stmt in gated or any(a in gated for a in index.ancestors(stmt)):
                    continue
                if counts(ref, read, stmt):
                    if not every:
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
    finder: Finder,
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

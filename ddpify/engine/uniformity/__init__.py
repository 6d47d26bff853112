"""Rank uniformity: which values every rank computes alike, and which decisions need them to.

Under torchrun the same program runs N times. Most values come out the same in
every process (*uniform*: constants, arguments, files read, draws after the same
seed); some do not (*per process*: the clock, a fresh UUID, the process id, a
draw from an unseeded generator). A per-process value is harmless until it
decides something that every rank must decide alike:

* a **file or folder name** (each rank writes its own run folder, or they race);
* an **optimizer's or scheduler's settings** (``lr = 10 ** random.uniform(-4, -2)``
  in a random search: every rank steps with its own learning rate and the
  replicas drift apart);
* the **trip count of a training loop** (``epochs = random.choice([5, 10])``:
  one rank stops early and the others wait for it in the gradient all-reduce);
* the **exit from a training loop** (``if loss.item() < tol: break``; values
  computed from this rank's batches, :mod:`.batches`);
* **how often a step runs the model** (the loss an LBFGS closure returns,
  :mod:`.steering`);
* a **look at a path** that another rank may have changed first (:mod:`.files`).

:func:`deciding_values` finds the assignments of per-process values that reach
one of those, following the value through the statements built from it and
the program's flows. The run_names concern then gives every rank rank 0's
value (one ``broadcast_object_list`` where the value is made, in the main
process after the process group exists) or reports it where it cannot.

Draws inside a data set's methods run in DataLoader worker processes, where no
collective may run; they are never made uniform here (and what they draw is
per-sample augmentation, which may differ between ranks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.engine.edits import EditPlan, fresh
from ddpify.engine.index import Index, Ref
from ddpify.engine.syntax import argument, dotted
from ddpify.engine.uniformity.sources import SCALAR_DRAWS, Seeding, per_process

# Calls that take a path (or make one from their arguments).
PATH_CALLS = frozenset(
    {
        "os.makedirs",
        "os.mkdir",
        "os.path.join",
        "pathlib.Path",
        "builtins.open",
        "torch.utils.tensorboard.SummaryWriter",
        "torch.utils.tensorboard.writer.SummaryWriter",
        "tensorboardX.SummaryWriter",
        "logging.FileHandler",
        "logging.basicConfig",
        "shutil.copy",
        "shutil.copyfile",
        "shutil.copytree",
        "shutil.move",
        "wandb.init",
        "torchvision.utils.save_image",
    }
)
# Calls that write an object to a path: the keyword and position of the object, which names nothing.
SAVE_CALLS = {"torch.save": ("obj", 0), "numpy.save": ("arr", 1), "numpy.savetxt": ("X", 1)}
PATH_METHODS = frozenset({"mkdir", "joinpath", "open", "write_text", "write_bytes", "savefig", "to_csv"})
# Methods of a data set, which DataLoader workers run.
_DATASET_METHODS = frozenset({"__getitem__", "__iter__", "__len__"})


NAMES_A_PATH = "names a file or folder"


@dataclass(frozen=True)
class Deciding:
    """``target = <per-process value>`` and what the value decides (a file name, an optimizer, a loop)."""

    assign: cst.Assign
    decides: str


def deciding_values(index: Index) -> Iterator[Deciding]:
    """Each assignment of a per-process value that decides what every rank must decide alike, in source order."""
    seeding = Seeding(index)
    for assign in _per_process_assignments(index, seeding):
        target = index.ref_of(assign.targets[0].target, index.scope_of(assign))
        if (target is None and not isinstance(assign.targets[0].target, cst.Attribute)) or in_worker_code(
            index, assign
        ):
            continue
        for decides, test in (
            ("names a file or folder", _in_path_call),
            ("sets up an optimizer", _in_optimizer),
            ("bounds a training loop", _bounds_training_loop),
        ):
            if reaches(index, target, test, assign):
                yield Deciding(assign, decides)
                break


def _per_process_assignments(index: Index, seeding: Seeding) -> Iterator[cst.Assign]:
    """``x = <expression with a per-process call>``, alone on its line, one target."""
    for stmt in index.statements:
        if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign) or len(stmt.body[0].targets) != 1:
            continue
        assign = stmt.body[0]
        if any(
            isinstance(node, cst.Call)
            and per_process(index, node, seeding, SCALAR_DRAWS)
            and not any(isinstance(a, cst.Lambda) for a in index.ancestors(node) if index.inside(a, assign.value))
            for node in index.walk(assign.value)
        ):
            yield assign


def in_worker_code(index: Index, node: cst.CSTNode) -> bool:
    """Inside a method of a class that has data set methods: DataLoader workers may run it."""
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, cst.ClassDef):
            return any((ancestor, name) in index.functions for name in _DATASET_METHODS)
    return False


def reaches(
    index: Index, target: Ref | None, test: Callable[[Index, cst.CSTNode], bool], assign: cst.Assign | None = None
) -> bool:
    """Whether the value at ``target``, or a value built from it, is read where ``test`` holds (``target`` None:
    the field ``assign`` sets, ``args.seed = ...``, read in the same function)."""
    seen: set[Ref] = set()
    queue: list[Ref] = []
    if target is not None:
        seen.add(target)
        queue.append(target)
    elif assign is not None and _reached(index, _field_reads(index, assign), test, seen, queue):
        return True
    while queue:
        ref = queue.pop()
        for scope in index.scopes_reading(ref):
            if _reached(index, list(index.mentions(scope, ref)), test, seen, queue):
                return True
        for flow in index.flows_from(ref):
            if flow.dst not in seen:
                seen.add(flow.dst)
                queue.append(flow.dst)
    return False


def _reached(
    index: Index, reads: list[cst.CSTNode], test: Callable[[Index, cst.CSTNode], bool], seen: set[Ref], queue: list[Ref]
) -> bool:
    """Whether one of ``reads`` (or of the fields assigned from them) is where ``test`` holds; the places
    assigned from them go on ``queue``."""
    while reads:
        read = reads.pop()
        if test(index, read):
            return True
        built = _assigned_from(index, read)
        if built is not None and built not in seen:
            seen.add(built)
            queue.append(built)
        elif built is None and (assign := _assignment_around(index, read)) is not None:
            reads += _field_reads(index, assign)
        elif built is None:
            reads += _option_reads(index, read)
            arg = index.parent(read)
            handed = index.parameter_of(arg) if isinstance(arg, cst.Arg) and arg.value is read else None
            if handed is not None and handed not in seen:  # ``model_save(args.save)``: the helper's parameter
                seen.add(handed)
                queue.append(handed)
    return False


def _option_reads(index: Index, read: cst.CSTNode) -> list[cst.CSTNode]:
    """``parser.add_argument("--save", default=<read>)``: the reads of the option's field (``args.save``)
    anywhere in the program, where the value lands when the command line does not set it."""
    arg = next((a for a in index.ancestors(read) if isinstance(a, cst.Arg | cst.BaseStatement)), None)
    call = index.parent(arg) if isinstance(arg, cst.Arg) else None
    if (
        not isinstance(arg, cst.Arg)
        or arg.keyword is None
        or arg.keyword.value != "default"
        or not isinstance(call, cst.Call)
        or not m.matches(call.func, m.Attribute(attr=m.Name("add_argument")))
    ):
        return []
    dest = argument(call, "dest")
    flags = [a.value.evaluated_value for a in call.args if a.keyword is None and isinstance(a.value, cst.SimpleString)]
    named = [f for f in flags if isinstance(f, str)]
    if dest is not None and isinstance(dest.value, cst.SimpleString) and isinstance(dest.value.evaluated_value, str):
        field = dest.value.evaluated_value
    else:  # argparse's own rule: the first long option, else the first
        first = next((f for f in named if f.startswith("--")), named[0] if named else "")
        field = first.lstrip("-").replace("-", "_")
    if not field:
        return []
    return [
        node
        for node in index.nodes_of(cst.Attribute)
        if cast(cst.Attribute, node).attr.value == field and isinstance(cast(cst.Attribute, node).value, cst.Name)
    ]


def _argument_of(index: Index, read: cst.CSTNode, call_test: Callable[[cst.Call], bool]) -> bool:
    """Whether ``read`` is inside the arguments of a call of its statement that ``call_test`` accepts."""
    for ancestor in index.ancestors(read):
        if isinstance(ancestor, cst.BaseStatement):
            return False
        if (
            isinstance(ancestor, cst.Call)
            and index.inside(read, ancestor)
            and read is not ancestor.func
            and call_test(ancestor)
        ):
            return True
    return False


def _in_path_call(index: Index, read: cst.CSTNode) -> bool:
    def takes_path(call: cst.Call) -> bool:
        for name in sorted(index.qualified_names(call.func) & SAVE_CALLS.keys()):
            written = argument(call, *SAVE_CALLS[name])
            return written is None or not index.inside(read, written.value)
        return index.is_call_to(call, PATH_CALLS) or (
            isinstance(call.func, cst.Attribute) and call.func.attr.value in PATH_METHODS
        )

    return _argument_of(index, read, takes_path)


def _in_optimizer(index: Index, read: cst.CSTNode) -> bool:
    """An argument of a ``torch.optim`` optimizer or scheduler."""
    prefix = torch_api.OPTIMIZER_MODULE + "."
    return _argument_of(
        index, read, lambda call: any(name.startswith(prefix) for name in index.qualified_names(call.func))
    )


def _bounds_training_loop(index: Index, read: cst.CSTNode) -> bool:
    """In what a ``for`` loop that trains iterates over, or in the test of a ``while`` loop that trains."""
    for ancestor in index.ancestors(read):
        if isinstance(ancestor, cst.For) and index.inside(read, ancestor.iter):
            return index.trains(ancestor.body)
        if isinstance(ancestor, cst.While) and index.inside(read, ancestor.test):
            return index.trains(ancestor.body)
        if isinstance(ancestor, cst.BaseStatement) and not isinstance(ancestor, cst.For | cst.While):
            return False
    return False


def _assignment_around(index: Index, read: cst.CSTNode) -> cst.Assign | None:
    """The one-target assignment whose value holds ``read``, alone on its line."""
    stmt = index.statement_of(read)
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and (read is small.value or index.inside(read, small.value))
    ):
        return small
    return None


def _field_reads(index: Index, assign: cst.Assign) -> list[cst.CSTNode]:
    """``args.run = f"{stamp}"`` (a field of an object the index does not follow, an argparse namespace): the
    reads of ``args.run`` after it in the same function."""
    target = assign.targets[0].target
    text = dotted(target) if isinstance(target, cst.Attribute) else ""
    if not text or text.startswith("self."):
        return []
    scope = index.scope_of(assign)
    return [
        node
        for node in index.walk(scope)
        if isinstance(node, cst.Attribute)
        and index.scope_of(node) is scope
        and index.after(node, assign)
        and dotted(node) == text
    ]


def _assigned_from(index: Index, read: cst.CSTNode) -> Ref | None:
    """The place an assignment whose value holds ``read`` stores it in: ``path`` in ``path = f"{run}/ckpt.pt"``."""
    assign = _assignment_around(index, read)
    if assign is None or read is assign.value:  # a plain copy (``b = a``) is one of the index's flows
        return None
    return index.ref_of(assign.targets[0].target, index.scope_of(assign))


SAME_ON_EVERY_RANK = '''
def {helper}(value):
    """Rank 0's value on every rank, where each process could see its own (the clock, a draw, a file)."""
    values = [value]
    {broadcast}
    return values[0]
'''


def same_on_every_rank(plan: EditPlan) -> str:
    """The name of the generated helper that gives every rank rank 0's value (defined once)."""
    helper = fresh("same_on_every_rank", plan.index.identifiers)
    if not plan.has_setup_helper(helper):
        dist = plan.names.dist
        forms = [
            cst.parse_module(SAME_ON_EVERY_RANK.format(helper=helper, broadcast=broadcast)).body[0]
            for broadcast in (
                f"{dist}.broadcast_object_list(values, src=0)",
                f"if {dist}.is_initialized():\n        {dist}.broadcast_object_list(values, src=0)",
            )
        ]
        plan.add_setup_helper(helper, *cast(list[cst.FunctionDef], forms))
    return helper


def decide_on_rank_zero(plan: EditPlan, test: cst.BaseExpression) -> bool:
    """``if <test>:`` decided by rank 0 for every rank: ``same_on_every_rank(<test>)`` (once per test;
    False where it already is)."""
    if test in plan.decided_on_rank_zero:
        return False
    plan.decided_on_rank_zero.add(test)
    same = same_on_every_rank(plan)
    plan.replace(test, lambda n: cst.Call(cst.Name(same), [cst.Arg(cast(cst.BaseExpression, n))]))
    return True


FLAG_OVER_RANKS = '''
def {helper}(flag):
    """{doc}"""
{unset}    flag = torch.tensor(int(bool(flag)))
    {dist}.all_reduce(flag, op={dist}.ReduceOp.{op})
    return bool(flag)
'''


def decide_on_any_rank(plan: EditPlan, test: cst.BaseExpression) -> None:
    """``if <test>:`` taken on every rank where it holds on any: ``on_any_rank(<test>)``."""
    helper = on_any_rank(plan)
    plan.replace(test, lambda n: cst.Call(cst.Name(helper), [cst.Arg(cast(cst.BaseExpression, n))]))


def on_any_rank(plan: EditPlan) -> str:
    """The name of the generated helper that tells every rank whether a flag holds on any rank (defined once)."""
    doc = "Whether `flag` holds on any rank, on every rank: a training step one rank skips, every rank skips."
    return _flag_over_ranks(plan, "on_any_rank", "MAX", doc)


def decide_on_every_rank(plan: EditPlan, test: cst.BaseExpression) -> bool:
    """``if <test>:`` taken on every rank where it holds on all of them: ``on_every_rank(<test>)`` (once per
    test; False where it already is)."""
    if test in plan.decided_on_rank_zero:
        return False
    plan.decided_on_rank_zero.add(test)
    doc = "Whether `flag` holds on every rank, on every rank: a training step runs where no rank would skip it."
    helper = _flag_over_ranks(plan, "on_every_rank", "MIN", doc)
    plan.replace(test, lambda n: cst.Call(cst.Name(helper), [cst.Arg(cast(cst.BaseExpression, n))]))
    return True


def _flag_over_ranks(plan: EditPlan, base: str, op: str, doc: str) -> str:
    """The name of a generated helper that reduces a flag over the ranks with ``op`` (``MAX``: on any rank,
    ``MIN``: on every rank), defined once, with its form for a script run without a process group."""
    helper = fresh(base, plan.index.identifiers)
    if not plan.has_setup_helper(helper):
        dist = plan.names.dist
        forms = [
            cst.parse_module(FLAG_OVER_RANKS.format(helper=helper, dist=dist, op=op, doc=doc, unset=unset)).body[0]
            for unset in ("", f"    if not {dist}.is_initialized():\n        return flag\n")
        ]
        plan.add_setup_helper(helper, *cast(list[cst.FunctionDef], forms))
        plan.need_import("torch")
    return helper


MEAN_OVER_RANKS = '''
def {helper}(value):
    """The mean over every rank of a number each rank computes from its own batches (a loss, a metric)."""
{unset}    total = torch.tensor(float(value), dtype=torch.float64)
    {dist}.all_reduce(total)
    return total.item() / {dist}.get_world_size()
'''


def mean_over_ranks(plan: EditPlan) -> str:
    """The name of the generated helper that gives every rank the mean of a per-rank number (defined once)."""
    helper = fresh("mean_over_ranks", plan.index.identifiers)
    if not plan.has_setup_helper(helper):
        dist = plan.names.dist
        forms = [
            cst.parse_module(MEAN_OVER_RANKS.format(helper=helper, dist=dist, unset=unset)).body[0]
            for unset in ("", f"    if not {dist}.is_initialized():\n        return value\n")
        ]
        plan.add_setup_helper(helper, *cast(list[cst.FunctionDef], forms))
        plan.need_import("torch")
    return helper

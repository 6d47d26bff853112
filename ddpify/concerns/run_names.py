"""Run names: a folder or file named by the clock or at random gets one name, rank 0's, on every rank.

Each process computes ``f"runs/{datetime.now():%Y%m%d-%H%M%S}"`` or ``uuid.uuid4().hex``
for itself: the ranks then write N checkpoint folders, or race to create one and
fail with ``FileExistsError``. Where such a value names a file or folder (it reaches
``os.makedirs``, ``open``, ``torch.save``, a ``SummaryWriter``, ``Path``...), every
rank takes rank 0's instead::

    run_dir = f"runs/{datetime.now():%Y%m%d-%H%M%S}"
    ->  run_dir = same_on_every_rank(f"runs/{datetime.now():%Y%m%d-%H%M%S}")

with ``same_on_every_rank`` (``dist.broadcast_object_list`` of rank 0's value) written
into the script. Limits: a name computed before the process group exists (at import
time) cannot be shared, and is reported (DDP507); values built from it in other
statements are followed within one function (and ``self`` fields of one class).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import libcst as cst

from ddpify.concerns import process_group
from ddpify.diagnostics import Code, Severity
from ddpify.engine.edits import EditPlan, fresh
from ddpify.engine.index import Index, Ref
from ddpify.engine.program import Program
from ddpify.result import Options

NAME_PER_RANK = Code(
    "DDP507",
    Severity.WARNING,
    "run_names",
    "a file or folder is named by the clock or at random before the process group exists: each rank names its own",
    "compute the name after the process group is set up (inside the function that trains), or pass it in",
)
CODES = (NAME_PER_RANK,)

# Calls whose value differs between processes started together.
PER_PROCESS = frozenset(
    {
        "datetime.datetime.now",
        "datetime.datetime.today",
        "datetime.datetime.utcnow",
        "time.time",
        "time.time_ns",
        "time.strftime",
        "time.localtime",
        "time.ctime",
        "time.asctime",
        "uuid.uuid1",
        "uuid.uuid4",
        "os.getpid",
        "secrets.token_hex",
        "secrets.token_urlsafe",
        "random.random",
        "random.randint",
        "random.randrange",
        "random.choice",
        "random.getrandbits",
    }
)
# Calls that take a path (or make one from their arguments).
PATH_CALLS = frozenset(
    {
        "os.makedirs",
        "os.mkdir",
        "os.path.join",
        "pathlib.Path",
        "builtins.open",
        "torch.save",
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
        "numpy.save",
        "numpy.savetxt",
        "torchvision.utils.save_image",
    }
)
PATH_METHODS = frozenset({"mkdir", "joinpath", "open", "write_text", "write_bytes", "savefig", "to_csv"})

HELPER = '''
def {helper}(value):
    """Rank 0's value on every rank: a name drawn from the clock or at random is the same everywhere."""
    values = [value]
    {broadcast}
    return values[0]
'''


@dataclass(frozen=True)
class Facts:
    names: tuple[cst.Assign, ...]  # ``run_dir = <per-process value>``, where the value names a file or folder


def find(program: Program, setup: process_group.Facts) -> Facts:
    index = program.index
    found: list[cst.Assign] = []
    for assign in _per_process_assignments(index):
        target = index.ref_of(assign.targets[0].target, index.scope_of(assign))
        if target is None or not _names_a_path(index, target):
            continue
        if setup.runs_before_setup(index, assign):
            program.report(
                assign,
                NAME_PER_RANK,
                f"`{index.module.code_for_node(assign.targets[0].target)}` is drawn from the clock or at random before "
                "the process group exists, and names a file or folder: each rank computes its own; compute it after "
                "the process group is set up",
            )
            continue
        found.append(assign)
    return Facts(tuple(found))


def _per_process_assignments(index: Index) -> Iterator[cst.Assign]:
    """``x = <expression with a per-process call>``, alone on its line, one target."""
    for stmt in index.statements:
        if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign) or len(stmt.body[0].targets) != 1:
            continue
        assign = stmt.body[0]
        if any(
            isinstance(node, cst.Call) and index.is_call_to(node, PER_PROCESS)
            for node in index.walk(assign.value)
            if not any(isinstance(a, cst.Lambda) for a in index.ancestors(node) if index.inside(a, assign.value))
        ):
            yield assign


def _names_a_path(index: Index, target: Ref) -> bool:
    """Whether the value at ``target``, or a value built from it, reaches a call that takes a path."""
    seen = {target}
    queue = [target]
    while queue:
        ref = queue.pop()
        for scope in index.scopes_reading(ref):
            for read in index.mentions(scope, ref):
                if _in_path_call(index, read):
                    return True
                built = _assigned_from(index, read)
                if built is not None and built not in seen:
                    seen.add(built)
                    queue.append(built)
        for flow in index.flows_from(ref):
            if flow.dst not in seen:
                seen.add(flow.dst)
                queue.append(flow.dst)
    return False


def _in_path_call(index: Index, read: cst.CSTNode) -> bool:
    for ancestor in index.ancestors(read):
        if isinstance(ancestor, cst.BaseStatement):
            return False
        if isinstance(ancestor, cst.Call) and index.inside(read, ancestor) and read is not ancestor.func:
            if index.is_call_to(ancestor, PATH_CALLS):
                return True
            if isinstance(ancestor.func, cst.Attribute) and ancestor.func.attr.value in PATH_METHODS:
                return True
    return False


def _assigned_from(index: Index, read: cst.CSTNode) -> Ref | None:
    """The place an assignment whose value holds ``read`` stores it in: ``path`` in ``path = f"{run}/ckpt.pt"``."""
    stmt = index.statement_of(read)
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and index.inside(read, small.value):
        return index.ref_of(small.targets[0].target, index.scope_of(small))
    return None


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    if not facts.names:
        return
    dist = plan.names.dist
    helper = fresh("same_on_every_rank", plan.index.identifiers)
    forms = [
        cst.parse_module(HELPER.format(helper=helper, broadcast=broadcast)).body[0]
        for broadcast in (
            f"{dist}.broadcast_object_list(values, src=0)",
            f"if {dist}.is_initialized():\n        {dist}.broadcast_object_list(values, src=0)",
        )
    ]
    plan.add_setup_helper(helper, *cast(list[cst.FunctionDef], forms))
    for assign in facts.names:
        plan.replace(
            assign.value,
            lambda node: cst.Call(func=cst.Name(helper), args=[cst.Arg(cast(cst.BaseExpression, node))]),
        )
        target = plan.index.module.code_for_node(assign.targets[0].target)
        plan.change(assign, f"`{target}` names a file or folder: rank 0's value on every rank, not one per rank")

"""Process group: join torchrun's group before any training object is built; destroy it at the end.

A small setup function is added after the imports. Under ``srun`` without
torchrun it takes the ranks from SLURM's variables. It picks this process's GPU
from ``LOCAL_RANK`` *before* ``init_process_group`` (so NCCL binds the right
device, and plain ``"cuda"`` in the script now means this rank's GPU), uses
NCCL with CUDA and Gloo without, and -- when the script is run with plain
``python`` rather than ``torchrun`` -- forms a group of one through an
in-process store, so no port is needed::

    if __name__ == "__main__":          if __name__ == "__main__":
        main()                     ->       setup_distributed()
                                            try:
                                                main()
                                            finally:
                                                dist.destroy_process_group()

With ``--spawn``, plain ``python train_ddp.py`` on a machine with several GPUs
starts one process per GPU itself (re-running the script with torchrun's
variables set), for users without torchrun; on the CPU it stays one process.

Scripts that build their model or data at module level call the setup right
after it is defined and register the teardown with ``atexit``, which runs on
every rank also when training raises.

A script that already calls a distributed API (``torch.distributed``, DDP,
``DistributedSampler``, ``torch.multiprocessing.spawn``, Lightning,
Accelerate, DeepSpeed, Horovod) is recognised by :func:`distributed_use` and
left alone.

Limits: imports after module-level training code starts are refused (DDP104):
the process group must exist before that code runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import libcst as cst

from ddpify import torch_api
from ddpify.concerns import data, model
from ddpify.diagnostics import Code, Severity
from ddpify.engine.edits import EditPlan, statement
from ddpify.engine.index import Index
from ddpify.engine.program import Program
from ddpify.result import Options

LATE_IMPORTS = Code(
    "DDP104",
    Severity.ERROR,
    "process_group",
    "imports after the module-level training code starts, where the process group must already exist",
    "move the imports to the top of the script",
)
CODES = (LATE_IMPORTS,)


@dataclass(frozen=True)
class Facts:
    setup_at_module_level: bool  # training objects are built outside the main guard's call tree


def find(program: Program, models: model.Facts, loaders: data.Facts) -> Facts:
    """Whether training objects are built by module-level code (outside every function)."""
    index = program.index
    guard = index.main_guard
    if guard is None:
        return Facts(setup_at_module_level=True)
    nodes = [trained.insert_after for trained in models.models] + [loader.call for loader in loaders.loaders]
    return Facts(any(index.scope_of(node) is index.module and not index.inside(node, guard) for node in nodes))


def distributed_use(index: Index) -> str | None:
    """The first distributed API the script calls (by qualified name), or None."""
    for call in index.calls:
        for name in sorted(index.qualified_names(call.func)):
            if name.startswith(torch_api.DISTRIBUTED_CALLS):
                return name
    return None


SETUP = '''
def {setup}():
    """Join the process group started by torchrun (or srun), or form a group of one under plain `python`."""
    if "RANK" not in {os}.environ and "SLURM_PROCID" in {os}.environ and "MASTER_ADDR" in {os}.environ:
        # Started by `srun` without torchrun: SLURM numbers the processes, the batch script sets MASTER_ADDR/PORT.
        {os}.environ.update(
            RANK={os}.environ["SLURM_PROCID"],
            LOCAL_RANK={os}.environ["SLURM_LOCALID"],
            WORLD_SIZE={os}.environ["SLURM_NTASKS"],
        )
{spawn}    if torch.cuda.is_available():
        # Before init_process_group, so that NCCL binds this process to its own GPU.
        torch.cuda.set_device(int({os}.environ.get("LOCAL_RANK", 0)))
        backend = "cpu:gloo,cuda:nccl"  # NCCL for GPU tensors; Gloo still serves a model kept on the CPU
    else:
        backend = "gloo"
    if "RANK" in {os}.environ:
        {dist}.init_process_group(backend)
    else:  # plain `python`: a group of one, which needs no rendezvous port
        {dist}.init_process_group(backend, store={dist}.HashStore(), rank=0, world_size=1)
'''


SPAWN = """    nproc = int({os}.environ.get("PET_NPROC_PER_NODE", torch.cuda.device_count()))
    if "RANK" not in {os}.environ and nproc > 1:
        # Plain `python` on a machine with several GPUs: run this script once per GPU, as torchrun would.
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = str(sock.getsockname()[1])
        workers = [
            subprocess.Popen(
                [sys.executable, *sys.argv],
                env={{**{os}.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
                     "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}},
            )
            for rank in range(nproc)
        ]
        sys.exit(max(worker.wait() for worker in workers))
"""


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    names = plan.names
    index = plan.index
    module = index.module
    spawn = SPAWN.format(os=names.os) if options.spawn else ""
    setup = cst.parse_module(SETUP.format(setup=names.setup, os=names.os, dist=names.dist, spawn=spawn)).body[0]
    assert isinstance(setup, cst.FunctionDef)
    if options.spawn:
        for stdlib in ("socket", "subprocess", "sys"):
            if stdlib not in index.bound[module]:
                plan.need_import(stdlib)
    setup = setup.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    anchor = _first_statement_after_imports(module)
    late = [s for s in module.body[module.body.index(anchor) + 1 :] if _is_import(s)]
    if late and (facts.setup_at_module_level or index.main_guard is None):
        plan.report(
            late[0],
            LATE_IMPORTS,
            "the script imports modules after its module-level training code starts; "
            "move the imports to the top so that the process group can be set up first",
        )
        return
    plan.insert_before(anchor, setup)
    _two_blank_lines_before(plan, anchor)
    plan.setup_definition = setup
    bound = index.bound[module]
    if names.os not in bound:
        plan.need_import("os", asname=None if names.os == "os" else names.os)
    if "torch" not in bound:
        plan.need_import("torch")
    plan.need_import("torch.distributed", asname=names.dist)
    guard = index.main_guard
    if facts.setup_at_module_level or guard is None:
        call = cst.parse_statement(f"{names.setup}()\n").with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        teardown = cst.parse_statement(
            f"{names.atexit}.register({names.dist}.destroy_process_group)  # every rank, also when training raises\n"
        )
        plan.insert_before(anchor, call, teardown)
        if names.atexit not in index.bound[module]:
            plan.need_import("atexit", asname=None if names.atexit == "atexit" else names.atexit)
        plan.change(anchor, "join the process group here; destroy it at exit on every rank")
    else:
        start = _first_training_statement(index, guard)
        plan.replace(guard, lambda node: _with_process_group(cast(cst.If, node), start, names.setup, names.dist))
        plan.change(guard, "join the process group before training; destroy it in `finally` on every rank")
    plan.change(anchor, f"add `{names.setup}()`: device from LOCAL_RANK, NCCL on CUDA / Gloo on CPU")


def _first_statement_after_imports(module: cst.Module) -> cst.BaseStatement:
    """The statement after the last top-level import that comes before any definition or training code."""
    body = list(module.body)
    last_import = -1
    for position, stmt in enumerate(body):
        if _is_import(stmt):
            last_import = position
        elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef, cst.If, cst.For, cst.While, cst.With)):
            break
    return body[min(last_import + 1, len(body) - 1)]


def _is_import(stmt: cst.BaseStatement) -> bool:
    if isinstance(stmt, cst.SimpleStatementLine):
        return all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)
    if isinstance(stmt, cst.Try) and isinstance(stmt.body, cst.IndentedBlock):  # try: import x / except ...
        return all(_is_import(s) for s in stmt.body.body)
    return False


def _two_blank_lines_before(plan: EditPlan, anchor: cst.BaseStatement) -> None:
    """The statement after the inserted definitions starts two blank lines below them (PEP 8)."""
    blanks = 0
    for line in statement(anchor).leading_lines:
        if line.comment is not None:
            break
        blanks += 1
    if blanks < 2:
        missing = [cst.EmptyLine()] * (2 - blanks)
        plan.replace(anchor, lambda n: statement(n).with_changes(leading_lines=[*missing, *statement(n).leading_lines]))


def _first_training_statement(index: Index, guard: cst.If) -> int:
    """Where the main guard starts running the script's own code; argument parsing before it stays as it is."""
    body = guard.body.body
    for position, stmt in enumerate(body):
        for node in index.walk(stmt):
            if isinstance(node, cst.Call) and index.resolve_callee(node, index.module) is not None:
                return position
    return 0


def _with_process_group(guard: cst.If, start: int, setup: str, dist: str) -> cst.If:
    body = guard.body
    if isinstance(body, cst.SimpleStatementSuite):  # if __name__ == "__main__": main()
        line = cst.SimpleStatementLine(body=[s.with_changes(semicolon=cst.MaybeSentinel.DEFAULT) for s in body.body])
        body = cst.IndentedBlock(body=[line])
    teardown = cst.Finally(body=cst.IndentedBlock(body=[cst.parse_statement(f"{dist}.destroy_process_group()\n")]))
    kept, (first, *rest) = body.body[:start], [statement(s) for s in body.body[start:]]
    attempt = cst.Try(body=cst.IndentedBlock(body=[first.with_changes(leading_lines=()), *rest]), finalbody=teardown)
    call = cst.parse_statement(f"{setup}()\n").with_changes(leading_lines=first.leading_lines)
    return guard.with_changes(body=body.with_changes(body=[*kept, call, attempt]))

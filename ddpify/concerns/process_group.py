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

Scripts that build their model or data at module level, or create an
experiment tracker there, call the setup right after it is defined and register the teardown with ``atexit``, which runs on
every rank also when training raises.

A script that already calls a distributed API (``torch.distributed``, DDP,
``DistributedSampler``, ``torch.multiprocessing.spawn``, Lightning,
Accelerate, DeepSpeed, Horovod) is recognised by :func:`distributed_use` and
left alone.

Inside the main guard the setup comes first, after nothing but argument
parsing (so that ``--help`` needs no process group): a sampler, a rank test
or any of the script's own functions may follow. Code that runs before it --
module-level statements and the functions they call -- cannot ask for the
rank; :meth:`Facts.runs_before_setup` tells the other concerns so.

Imports placed after helper definitions (``import torch``, ``def helper(): ...``,
``from model import Net``, then module-level training) move the module-level
setup below the last import, where the first statement that can need the group
runs: only definitions, constants and argument parsing may come before it.

Imports after module-level code that may need the process group (training, a
data set, any call other than argument parsing, seeding or warnings filters: a
script written in notebook cells) put the setup right before that code; the
imports ddpify adds go above it, the script's later imports need no group.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import libcst as cst

from ddpify import torch_api
from ddpify.concerns import data, model
from ddpify.diagnostics import Code, Severity
from ddpify.engine.called import called_functions, enclosing_function
from ddpify.engine.edits import EditPlan, statement
from ddpify.engine.index import Index
from ddpify.engine.program import Program
from ddpify.engine.syntax import imported_names, single_target
from ddpify.result import Options

# Calls that may run before the process group exists: they neither train nor ask for a rank or a device.
_HARMLESS_CALLS = ("argparse.", "warnings.", "sys.path.", "os.path.", "matplotlib.use", "random.seed")
_HARMLESS_SEEDS = frozenset({"torch.manual_seed", "numpy.random.seed"})
BUILT_AT_IMPORT = Code(
    "DDP106",
    Severity.ERROR,
    "process_group",
    "a module of the program builds a model or a training DataLoader when it is imported, before the "
    "process group exists",
    "build it in a function that the training script calls",
)
CODES = (BUILT_AT_IMPORT,)


@dataclass(frozen=True)
class Facts:
    setup_at_module_level: bool  # training objects are built outside the main guard's call tree
    # where the setup call goes: before this statement of the module (module level) or of the main guard's body
    setup_before: cst.BaseStatement
    # code that runs before the setup, when no process group exists yet: module-level statements and the
    # functions they call (the rank cannot be asked there)
    before_setup: frozenset[cst.CSTNode]
    # the script's functions called both before the setup and after it
    before_and_after: frozenset[cst.CSTNode] = frozenset()

    def runs_before_setup(self, index: Index, node: cst.CSTNode) -> bool:
        """Whether ``node`` runs before the process group exists, on some path."""
        return node in self.before_setup or any(a in self.before_setup for a in index.ancestors(node))

    def runs_also_after_setup(self, index: Index, node: cst.CSTNode) -> bool:
        """Whether ``node`` is in a function that runs both before the process group exists and after."""
        return any(a in self.before_and_after for a in index.ancestors(node))


def find(program: Program, models: model.Facts, loaders: data.Facts) -> Facts:
    """Where the process group is set up, and which code runs before it.

    The setup goes right after the imports when training objects are built by
    module-level code (outside every function), or when module-level code
    creates an experiment tracker or a logging file handler, or saves with
    ``torch.save`` (which only rank 0 may do); else at the
    top of the main guard, after nothing but argument parsing.
    """
    index = program.index
    module = index.module
    guard = index.main_guard
    nodes = [trained.insert_after for trained in models.models] + [loader.call for loader in loaders.loaders]
    # Other modules run their top-level code when they are imported: before any setup.
    imported = [s for other in index.modules[1:] for s in _runs(other.body)]
    at_import = frozenset(imported) | _called_from(index, imported)
    for node in nodes:
        if index.scope_of(node) is not module and any(a in at_import for a in (node, *index.ancestors(node))):
            program.report(
                node,
                BUILT_AT_IMPORT,
                f"{index.path_of(node)} builds this when it is imported, before the process group exists "
                "(a DistributedSampler or DistributedDataParallel needs one): build it in a function that "
                "the training script calls",
            )
    if guard is not None and not any(
        index.scope_of(node) is module and not index.inside(node, guard) for node in nodes
    ):
        anchor, early = _in_main_guard(index, guard)
        before = frozenset(early) | _called_from(index, early) | at_import
        # only rank 0 may create or write them
        opens = torch_api.TRACKER_FACTORIES | torch_api.LOG_FILE_HANDLERS | torch_api.SAVE
        if not any(
            index.is_call_to(call, opens) and not made_for_nothing(program, call) for call in _calls_in(index, before)
        ):
            after: list[cst.CSTNode] = [guard] if anchor is guard else [s for s in guard.body.body if s not in early]
            return Facts(False, anchor, before, before & _called_from(index, after))
    anchor = _module_level_anchor(index)
    early = _runs(module.body[: module.body.index(anchor)])
    before = frozenset(early) | _called_from(index, early) | at_import
    return Facts(True, anchor, before, before & _called_from(index, _runs(module.body[module.body.index(anchor) :])))


# trackers that write local event files, unlike a run of an online tracker (``wandb.init``)
_EVENT_WRITERS = torch_api.TRACKER_FACTORIES - {"wandb.init"}


def made_for_nothing(program: Program, call: cst.Call) -> bool:
    """``writer = SummaryWriter(...)`` at a module's top level where only functions that nothing calls read
    ``writer`` (a plotting routine kept from an earlier experiment): every rank makes it at import, an
    empty event file each, and none logs to it."""
    index = program.index
    target = single_target(index.parent(call))
    if (
        not index.is_call_to(call, _EVENT_WRITERS)
        or not isinstance(target, cst.Name)
        or not isinstance(index.scope_of(call), cst.Module)
    ):
        return False
    called = program.called()
    for read in [*index.names.get(target.value, ()), *index.attributes.get(target.value, ())]:
        if read is target or isinstance(index.parent(read), cst.ImportAlias):
            continue
        function = enclosing_function(index, read)
        if function is None or function in called:
            return False
    return True


def _in_main_guard(index: Index, guard: cst.If) -> tuple[cst.BaseStatement, list[cst.BaseStatement]]:
    """The statement of the main guard the setup goes before, and the statements that run before it."""
    others = [s for s in index.module.body if s is not guard]
    body: list[cst.BaseStatement] = [statement(s) for s in guard.body.body]
    anchor = body[_argument_parsing(index, body)]
    return anchor, _runs(others + body[: body.index(anchor)])


def _runs(statements: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """The statements that run code where they stand (not definitions)."""
    return [s for s in statements if not isinstance(s, (cst.FunctionDef, cst.ClassDef))]


def _calls_in(index: Index, nodes: Iterable[cst.CSTNode]) -> Iterator[cst.Call]:
    for node in nodes:
        for inner in index.walk(node):
            if isinstance(inner, cst.Call):
                yield inner


def _argument_parsing(index: Index, body: Sequence[cst.BaseStatement]) -> int:
    """How many statements at the start of ``body`` only parse the command line (``argparse``).

    They may stay before the setup, so that ``--help`` needs no process group;
    anything else -- even a seed -- comes after it, since any call may reach a
    distributed API (a sampler, a rank test) once the script is converted.
    """
    parsers = {  # a parser built at module level: parser = argparse.ArgumentParser(...)
        ref
        for stmt in index.statements
        for small in stmt.body
        if isinstance(small, cst.Assign)
        and index.scope_of(small) is index.module
        and any(n.startswith("argparse.") for n in index.qualified_names(_callee(small.value)))
        for target in small.targets
        if (ref := index.ref_of(target.target, index.module)) is not None
    }
    for position, stmt in enumerate(body[:-1]):
        if not isinstance(stmt, cst.SimpleStatementLine):
            return position
        for node in index.walk(stmt):
            if not isinstance(node, cst.Call):
                continue
            names = index.qualified_names(node.func)
            receiver = node.func.value if isinstance(node.func, cst.Attribute) else None
            if any(n.startswith("argparse.") for n in names):
                continue
            if receiver is not None and index.root_ref(receiver, index.scope_of(node)) in parsers:
                continue
            return position
        for small in stmt.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    ref = index.ref_of(target.target, index.scope_of(small))
                    if ref is not None:
                        parsers.add(ref)
    return len(body) - 1


def _callee(value: cst.BaseExpression) -> cst.BaseExpression:
    return value.func if isinstance(value, cst.Call) else value


def _called_from(index: Index, roots: Sequence[cst.CSTNode]) -> frozenset[cst.CSTNode]:
    """The script's own functions that ``roots`` run, directly or through each other."""
    seen: set[cst.CSTNode] = set()
    stack = list(roots)
    while stack:
        for node in index.walk(stack.pop()):
            if isinstance(node, cst.Call):
                callee = index.resolve_callee(node, index.scope_of(node))
                if callee is not None and callee[0] not in seen:
                    seen.add(callee[0])
                    stack.append(callee[0].body)
    return frozenset(seen)


def distributed_use(index: Index) -> tuple[cst.Call, str] | None:
    """The first call of the code that runs which sets up or launches distributed training (a process
    group, a DDP or FSDP wrap, processes spawned, a training framework), with its qualified name; or
    None. Calls that only ask (``dist.get_rank()`` under ``dist.is_initialized()``, a helper nobody
    calls) do not make a program distributed: it still needs a process group."""
    called: set[cst.FunctionDef] | None = None
    for call in index.calls:
        for name in sorted(index.qualified_names(call.func)):
            if name.startswith(torch_api.DISTRIBUTED_CALLS):
                if called is None:
                    called = called_functions(index)
                function = enclosing_function(index, call)
                if function is None or function in called:
                    return call, name
    return None


SETUP_DOCSTRING = "Join the process group started by torchrun (or srun), or form a group of one under plain `python`."
SETUP = (
    '''
def {setup}():
    """'''
    + SETUP_DOCSTRING
    + '''"""
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
)


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


def _imported_before(module: cst.Module, anchor: cst.BaseStatement, name: str) -> bool:
    """Whether a module-level import above ``anchor`` binds ``name`` (``import torch``, ``import torch.nn``,
    also inside ``try:``)."""
    body = list(module.body)
    stop = next((i for i, stmt in enumerate(body) if stmt is anchor), len(body))
    pending: list[cst.CSTNode] = list(body[:stop])
    while pending:
        node = pending.pop()
        if isinstance(node, (cst.Import, cst.ImportFrom)):
            if any(local == name for local, _ in imported_names(node)):
                return True
        elif not isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            pending.extend(node.children)
    return False


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
    if facts.setup_at_module_level or index.main_guard is None:
        anchor = _module_level_anchor(index)
    plan.imports_before = anchor  # the setup (and the helpers after it) must find them imported
    plan.insert_before(anchor, setup)
    _two_blank_lines_before(plan, anchor)
    plan.setup_definition = setup
    bound = index.bound[module]
    if names.os not in bound:
        plan.need_import("os", asname=None if names.os == "os" else names.os)
    if "torch" not in bound or not _imported_before(module, anchor, "torch"):
        # the helper classes after the setup name ``torch`` in their bases, read where they are defined
        plan.need_import("torch")
        plan.torch_first = "torch" in bound  # imported, but only below: a program's run keeps it too
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
        # The place is marked in the guard's body rather than counted: the other edits remove, add and group
        # statements of that body before this one is made.
        marker = None
        if facts.setup_before is not guard:
            marker = cst.SimpleStatementLine(body=[cst.Expr(cst.Name(names.setup))])
            plan.before[facts.setup_before].insert(0, marker)
        plan.replace(guard, lambda node: _with_process_group(cast(cst.If, node), marker, names.setup, names.dist))
        plan.change(guard, "join the process group before training; destroy it in `finally` on every rank")
    plan.change(anchor, f"add `{names.setup}()`: device from LOCAL_RANK, NCCL on CUDA / Gloo on CPU")


def _module_level_anchor(index: Index) -> cst.BaseStatement:
    """Where module-level code joins the process group: right after the imports; when more imports
    follow definitions, constants, argument parsing or seeding, after the last of them; when they
    follow code that may need the group (a script written in cells, importing as it goes), right
    before that code: the imports after it need no group (ddpify's own go above the setup)."""
    body: list[cst.BaseStatement] = list(index.module.body)
    first = _first_statement_after_imports(index.module)
    last = max((position for position, stmt in enumerate(body) if _is_import(stmt)), default=-1)
    needs_group = next((s for s in body[:last] if not _runs_without_group(index, s)), None)
    if needs_group is not None:
        return needs_group
    return body[last + 1] if body.index(first) <= last < len(body) - 1 else first


def _first_line(index: Index, stmt: cst.BaseStatement) -> str:
    line = index.module.code_for_node(statement(stmt).with_changes(leading_lines=())).strip().splitlines()[0]
    return line if len(line) <= 50 else line[:47] + "..."


def _runs_without_group(index: Index, stmt: cst.BaseStatement) -> bool:
    """A definition, an import, or a line whose calls only parse arguments, seed or filter warnings."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) or _is_import(stmt):
        return True
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for call in _calls_in(index, [stmt]):
        names = index.qualified_names(call.func)
        if not _on_parser(index, call) and not any(
            n.startswith(_HARMLESS_CALLS) or n in _HARMLESS_SEEDS for n in names
        ):
            return False
    return True


def _on_parser(index: Index, call: cst.Call) -> bool:
    """``parser.add_argument(...)`` / ``parser.parse_args()`` on a module-level ``argparse`` parser."""
    receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
    ref = index.root_ref(receiver, index.module) if receiver is not None else None
    return ref is not None and any(
        name.startswith("argparse.")
        for assigned in index.assignments_to(ref)
        for name in index.qualified_names(_callee(assigned.value))
    )


def _first_statement_after_imports(module: cst.Module) -> cst.BaseStatement:
    """The statement after the last top-level import that comes before any definition or training code."""
    body = list(module.body)
    last_import = int(module.get_docstring(clean=False) is not None) - 1  # below the docstring, at least
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


def _with_process_group(guard: cst.If, marker: cst.SimpleStatementLine | None, setup: str, dist: str) -> cst.If:
    """The guard's body from ``marker`` on (all of it when None) runs in ``try``, after the setup call."""
    body = guard.body
    teardown = cst.Finally(body=cst.IndentedBlock(body=[cst.parse_statement(f"{dist}.destroy_process_group()\n")]))
    start = next((i for i, s in enumerate(body.body) if s is marker), -1) if marker is not None else 0
    if start < 0:
        raise AssertionError("the place of the process group's setup was lost from the main guard")
    statements = [s for s in body.body if s is not marker]
    kept, (first, *rest) = statements[:start], [statement(s) for s in statements[start:]]
    attempt = cst.Try(body=cst.IndentedBlock(body=[first.with_changes(leading_lines=()), *rest]), finalbody=teardown)
    call = cst.parse_statement(f"{setup}()\n").with_changes(leading_lines=first.leading_lines)
    return guard.with_changes(body=body.with_changes(body=[*kept, call, attempt]))

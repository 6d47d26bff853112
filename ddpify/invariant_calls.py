"""Where the distributed calls ddpify adds run: invariants DDP905, DDP906 and DDP908 (see :mod:`ddpify.invariants`).

* DDP905: a distributed call (the wrap, a sampler, ``set_epoch``, a rank test) follows a
  ``return``, ``raise``, ``break`` or ``continue`` in its block, so it never runs;
* DDP906: in a module other than the entry script (which other scripts may import
  without a process group), a distributed call runs where no ``dist.is_initialized()``
  test guards it, directly or around every use of the function or class that holds it;
* DDP908: a collective (a broadcast, a reduction, the wrap, or a helper of the
  script that runs one) runs under a test of the rank, where the other ranks never join it.

Calls the module already made before the conversion are the program's own (they can only be
in code that never runs, or the program would have been left alone as already distributed).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ddpify.diagnostics import INVARIANT_COLLECTIVE, INVARIANT_RUNS, INVARIANT_WITHOUT_GROUP

if TYPE_CHECKING:
    from ddpify.invariants import _Script, _Violation

# Calls into torch.distributed, DistributedSampler and DDP (by qualified name), which need a process group.
DISTRIBUTED = frozenset(
    {
        "torch.utils.data.DistributedSampler",
        "torch.utils.data.distributed.DistributedSampler",
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
        *(
            f"torch.distributed.{name}"
            for name in (
                "get_rank",
                "get_world_size",
                "barrier",
                "all_reduce",
                "all_gather",
                "all_gather_object",
                "broadcast",
                "broadcast_object_list",
                "reduce",
                "gather",
                "scatter",
                "new_group",
            )
        ),
    }
)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# The calls every rank must make together (``barrier`` aside: "rank 0 first" pairs one under each of a rank
# test's two sides).
COLLECTIVES = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
        *(
            f"torch.distributed.{name}"
            for name in (
                "all_reduce",
                "all_gather",
                "all_gather_object",
                "broadcast",
                "broadcast_object_list",
                "reduce",
                "gather",
                "scatter",
                "new_group",
            )
        ),
    }
)


def _distributed(script: _Script, node: ast.AST) -> bool:
    """A call ddpify added into torch.distributed, DDP or DistributedSampler, or ``loader.sampler.set_epoch(...)``."""
    distributed = script.calls_to(node, DISTRIBUTED) or (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "set_epoch"
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr in ("sampler", "batch_sampler")
    )
    return distributed and not script.made_before(node)


def distributed_calls_run(script: _Script) -> Iterator[_Violation]:
    for node in ast.walk(script.tree):
        for block in _statement_lists(node):
            ended = False
            for stmt in block:
                if ended:
                    for inner in ast.walk(stmt):
                        if _distributed(script, inner):
                            assert isinstance(inner, ast.Call)
                            what = f"call `{ast.unparse(inner.func)}(...)` where it never runs"
                            yield INVARIANT_RUNS, inner.lineno, what
                            break
                ended = ended or isinstance(stmt, (ast.Return, ast.Raise, ast.Break, ast.Continue))


def distributed_calls_guarded(script: _Script) -> Iterator[_Violation]:
    for call in script.calls:
        if _distributed(script, call) and not _runs_with_group_only(script, call, set()):
            what = f"call `{ast.unparse(call.func)}(...)` in a module other scripts may import without a process group"
            yield INVARIANT_WITHOUT_GROUP, call.lineno, what


def collectives_on_every_rank(script: _Script) -> Iterator[_Violation]:
    """A collective ddpify added (or a call of a function of the script that runs one) under a rank test."""
    helpers = {
        function.name
        for functions in script.functions.values()
        for function in functions
        if any(script.calls_to(n, COLLECTIVES) for n in script.in_scope[function])
    }
    for call in script.calls:
        collective = script.calls_to(call, COLLECTIVES) or (isinstance(call.func, ast.Name) and call.func.id in helpers)
        if collective and _under_rank_test(script, call) and not script.made_before(call):
            what = f"call `{ast.unparse(call.func)}(...)` on some ranks only, where the others never join it"
            yield INVARIANT_COLLECTIVE, call.lineno, what


def _under_rank_test(script: _Script, node: ast.AST) -> bool:
    """Whether a test of the rank decides, within its function, whether ``node`` runs (clear cases only)."""
    child = node
    for ancestor in script.ancestors(node):
        if isinstance(ancestor, (*_DEFINITIONS, ast.Lambda)):
            return False
        if (
            isinstance(ancestor, (ast.If, ast.IfExp, ast.While))
            and child is not ancestor.test
            and _tests_rank(ancestor.test)
        ):
            return True
        if isinstance(ancestor, ast.BoolOp):
            index = ancestor.values.index(child) if child in ancestor.values else 0
            if any(_tests_rank(v) for v in ancestor.values[:index]):
                return True
        child = ancestor
    return False


def _tests_rank(test: ast.expr) -> bool:
    """``dist.get_rank() == 0``, ``args.local_rank in (-1, 0)``, ``rank == 0``: a test that reads a rank."""
    for node in ast.walk(test):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get_rank":
            return True
        if isinstance(node, ast.Name) and "rank" in node.id.lower() and not node.id.startswith(_UNIFORM_HELPERS):
            return True
        if isinstance(node, ast.Attribute) and "rank" in node.attr.lower():
            return True
    return False


# The helpers ddpify generates that give every rank one value: a test through them is the same everywhere.
_UNIFORM_HELPERS = ("same_on_every_rank", "mean_over_ranks", "on_any_rank")


def _runs_with_group_only(script: _Script, node: ast.AST, seen: set[str]) -> bool:
    """Whether ``node`` runs only where a process group exists: under an ``is_initialized()``
    test, or in a function or class that the module uses only there."""
    if script._guarded_by_is_initialized(node):
        return True
    owner = next((a for a in script.ancestors(node) if isinstance(a, (*_DEFINITIONS,))), None)
    while owner is not None and script.parent.get(owner) is not script.tree:
        owner = next((a for a in script.ancestors(owner) if isinstance(a, (*_DEFINITIONS,))), None)
    if owner is None or owner.name in seen:
        return owner is not None
    uses = [n for n in script.by_tail.get(owner.name, ()) if isinstance(n, ast.Name)]
    return bool(uses) and all(_runs_with_group_only(script, use, seen | {owner.name}) for use in uses)


def _statement_lists(node: ast.AST) -> Iterator[list[ast.stmt]]:
    for _, value in ast.iter_fields(node):
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            yield value

"""Losses that contrast each sample with the rest of its batch, which DDP shrinks to the local batch.

InfoNCE, NT-Xent and CLIP-style losses score every sample against every other one in the batch
(a similarity matrix ``a @ b.T``) and ask for the diagonal: ``cross_entropy(logits,
torch.arange(n))``. Under DistributedDataParallel each rank computes the loss on its own batch,
so the negatives are only that rank's samples: the loss means something else than on one GPU,
and nothing fails. The script is still written; the note says where to gather the batch across
ranks (``torch.distributed.nn.all_gather`` keeps the gradients).

Found by the labels, never by names: a cross-entropy (``F.cross_entropy``, ``F.nll_loss`` or an
``nn.CrossEntropyLoss`` instance) whose target is built from ``torch.arange`` -- directly or
through names assigned in the same function -- outside ``torch.no_grad()``.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ddpify.diagnostics import Code, Severity
from ddpify.engine.index import Index
from ddpify.engine.program import Program, without_grad
from ddpify.engine.syntax import argument

IN_BATCH_NEGATIVES = Code(
    "DDP311",
    Severity.WARNING,
    "model",
    "a contrastive loss takes its negatives from the batch: each rank now contrasts only its own batch",
    "gather the embeddings across ranks (`torch.distributed.nn.all_gather`, which keeps gradients) before the "
    "similarity, if the loss should see the global batch",
)

_CROSS_ENTROPY = frozenset({"torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss"})
_CROSS_ENTROPY_MODULES = frozenset({"torch.nn.CrossEntropyLoss", "torch.nn.NLLLoss"})
_ARANGE = frozenset({"torch.arange"})


def report(program: Program) -> None:
    """Report the first loss over in-batch negatives of a script that trains (one note is enough)."""
    if not program.trains:
        return
    index = program.index
    for call, target in _cross_entropies(index):
        if _arange_in(index, target, depth=3) and not without_grad(index, call):
            program.report(
                call,
                IN_BATCH_NEGATIVES,
                f"`{_short(index.module.code_for_node(call))}` contrasts each sample with the others in its batch "
                "(`torch.arange` labels): under DistributedDataParallel each rank sees only its own batch, so the "
                "negatives come from one rank; gather the embeddings with `torch.distributed.nn.all_gather` (which "
                "keeps gradients) before the similarity if the loss should see the global batch",
            )
            return


def _cross_entropies(index: Index) -> Iterator[tuple[cst.Call, cst.BaseExpression]]:
    """Every cross-entropy call with its target: ``F.cross_entropy(x, y)`` or ``criterion(x, y)``."""
    for call in index.calls:
        if index.is_call_to(call, _CROSS_ENTROPY):
            target = argument(call, "target", 1)
        elif _is_cross_entropy_module(index, call.func):
            target = call.args[1] if len(call.args) > 1 and call.args[1].keyword is None else None
        else:
            continue
        if target is not None:
            yield call, target.value


def _is_cross_entropy_module(index: Index, func: cst.BaseExpression) -> bool:
    """``nn.CrossEntropyLoss()(x, y)``, or a name or ``self.criterion`` assigned one."""
    if index.is_call_to(func, _CROSS_ENTROPY_MODULES):
        return True
    ref = index.ref_of(func, index.scope_of(func))
    if ref is None:
        return False
    return any(index.is_call_to(value, _CROSS_ENTROPY_MODULES) for _, value in index.values_assigned(ref))


def _arange_in(index: Index, expr: cst.BaseExpression, depth: int) -> bool:
    """Whether ``expr`` is built from ``torch.arange``, also through names assigned in its function."""
    for node in index.walk(expr):
        if index.is_call_to(node, _ARANGE) and not _tiled(index, node):
            return True
        if depth and isinstance(node, cst.Name):
            scope = index.scope_of(node)
            ref = index.ref_of(node, scope)
            if (
                ref is not None
                and ref.scope is scope
                and any(_arange_in(index, value, depth - 1) for _, value in index.values_assigned(ref))
            ):
                return True
    return False


def _tiled(index: Index, arange: cst.CSTNode) -> bool:
    """``torch.arange(n_way).repeat(n_query)``: class labels tiled over an episode's queries (a prototypical
    network's), not the diagonal of a similarity matrix over the batch."""
    method = index.parent(arange)
    return isinstance(method, cst.Attribute) and method.attr.value in ("repeat", "repeat_interleave", "expand")


def _short(code: str) -> str:
    code = " ".join(code.split())
    return code if len(code) <= 60 else code[:57] + "..."

"""The model concern's facts: each trained model, where it is wrapped and what reads of it need ``.module``."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ddpify.engine.index import Ref


@dataclass(frozen=True)
class Model:
    """A trained model: what the optimizer at ``optimizer`` steps."""

    ref: Ref
    expression: str  # how the model is written where the wrap goes: ``model``, ``self.model``
    insert_after: cst.BaseStatement  # the wrap goes right after this statement
    on_cuda: bool  # put on its GPU by an unconditional ``.cuda()``
    placed: bool  # moved to a device at all (otherwise DDP runs it where it was built)
    unwrap: tuple[cst.BaseExpression, ...]  # reads of the wrapper that must go to ``.module``
    optimizer: cst.Call
    data_parallel: cst.Call | None = None  # ``nn.DataParallel(model)``, replaced by the DDP wrap in place
    data_parallel_if: cst.If | None = None  # ``if torch.cuda.device_count() > 1:`` around it, inlined
    data_parallel_removed: cst.SimpleStatementLine | None = None  # a conditional DataParallel wrap, dropped
    lineage: frozenset[Ref] = frozenset()  # every place the model's value passes through
    rewraps: tuple[cst.BaseStatement, ...] = ()  # parameters are unfrozen here: wrap again after it
    # built anew after training, then handed to code that reads the wrapped model: wrap again after each
    wrapped_again: tuple[cst.BaseStatement, ...] = ()
    # parameters drawn again after the wrap, each rank from its own generator: rank 0's copied after it
    redrawn: tuple[tuple[cst.BaseStatement, cst.BaseExpression], ...] = ()  # each with the model as it reads it
    # drawn again after the wrap from a generator seeded alike on every rank: alike wherever every rank draws
    redrawn_seeded: tuple[cst.BaseStatement, ...] = ()
    maybe_none: bool = False  # None unless a condition built it (an optional second model): wrapped where it is not
    unused: str | None = None  # why some parameters may get no gradient in a step: find_unused_parameters
    small_batch_norm: cst.Call | None = None  # a DataLoader with a small batch, where the model has BatchNorm
    item: str | None = None  # a list of models: each is wrapped as ``[DDP(<item>) for <item> in <expression>]``
    # frozen whole unless a condition unfroze it: wrapped only where it has trainable parameters
    maybe_frozen: bool = False
    # ``model.compute_loss(...)`` whose result the backward pass differentiates: run as the wrapper's forward
    through_forward: tuple[cst.Call, ...] = ()
    # reads in code that also runs before the wrap (a sampling helper called on a ``--sample-only``
    # path and after training): ``.module`` only where the model is wrapped
    unwrap_where_wrapped: tuple[cst.BaseExpression, ...] = ()
    # reads through a place that may hold a plain model too (``best_model`` kept as a deep copy, a helper
    # also handed an EMA copy): ``.module`` only where it holds the wrapper
    unwrap_if_wrapper: tuple[cst.BaseExpression, ...] = ()
    # other names taken for the model before the wrap (``net = model``) and used after it: each is taken
    # again right after the wrap (``net = model``), so that it names the wrapper
    realiased: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Facts:
    models: tuple[Model, ...]
    optimizers: tuple[cst.Call, ...]  # every torch.optim optimizer built in the script
    data_parallel: tuple[cst.Call, ...]  # every nn.DataParallel(...) call
    # ``nn.DataParallel`` in ``isinstance(model, nn.DataParallel)``: the program's own unwrapping
    data_parallel_tests: tuple[cst.BaseExpression, ...] = ()
    # ``a.backward(retain_graph=True)`` right before ``b.backward()``: rewritten ``(a + b).backward()``
    summed_backwards: tuple[tuple[cst.Call, cst.Call], ...] = ()

    @property
    def refs(self) -> frozenset[Ref]:
        """Every place any trained model's value passes through."""
        return frozenset().union(*(model.lineage for model in self.models))

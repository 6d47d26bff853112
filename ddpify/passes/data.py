"""Data: every training DataLoader draws its own shard through a DistributedSampler.

A loader feeds training when its batches are drawn in a loop that runs a
backward pass (see :mod:`ddpify.analysis`). ``shuffle=`` moves into the
sampler, because a DataLoader refuses both; the sampler's ``set_epoch`` is
called at the start of each epoch so that every epoch shuffles differently
(and identically on all ranks)::

    loader = DataLoader(ds, batch_size=64, shuffle=True)
    ->  loader = DataLoader(ds, batch_size=64, sampler=DistributedSampler(ds))

    for epoch in range(epochs):              for epoch in range(epochs):
        train(model, loader)          ->         loader.sampler.set_epoch(epoch)
                                                 train(model, loader)

``len(loader.dataset)`` on a training loader becomes ``len(loader.sampler)``,
the number of samples this rank trains on, so per-sample averages and progress
counts stay right. The per-process batch size stays as written, so the global
batch is now ``world size`` times larger. Evaluation loaders are left whole: every rank
evaluates the full set, so the numbers it reports are the single-process ones.
"""

from __future__ import annotations

import libcst as cst

from ddpify import torch_api
from ddpify.analysis import Anatomy, Loader
from ddpify.diagnostics import Severity
from ddpify.edits import EditPlan, fresh
from ddpify.result import Options

PER_PROCESS_BATCH = '''
def {helper}(batch_size):
    """The share of the single-process batch that each process loads, so the global batch stays the same."""
    world_size = {dist}.get_world_size()
    if batch_size % world_size:
        raise ValueError(f"batch size {{batch_size}} cannot be split evenly over {{world_size}} processes")
    return batch_size // world_size
'''


def run(anatomy: Anatomy, plan: EditPlan, options: Options) -> None:
    taken: set[str] = set()
    helper = None
    for loader in anatomy.loaders:
        if loader.training:
            if _add_sampler(anatomy, plan, loader, taken, options.keep_global_batch):
                _set_epoch(anatomy, plan, loader, taken)
            if options.keep_global_batch:
                helper = helper or fresh("per_process_batch", anatomy.index.identifiers | taken)
                taken.add(helper)
                _split_batch(anatomy, plan, loader, helper)
            for attribute in loader.dataset_lengths:
                plan.replace(attribute, lambda n: n.with_changes(attr=cst.Name("sampler")))
                text = anatomy.index.module.code_for_node(attribute.value)
                plan.change(attribute, f"len({text}.dataset) -> len({text}.sampler): the samples this rank trains on")


def _add_sampler(anatomy: Anatomy, plan: EditPlan, loader: Loader, taken: set[str], keep_global_batch: bool) -> bool:
    """Give the loader its DistributedSampler; whether that sampler shuffles (and so needs ``set_epoch``)."""
    index = anatomy.index
    call = loader.call
    sampler = anatomy.names.sampler
    dataset_arg = next(
        (
            a
            for i, a in enumerate(call.args)
            if (a.keyword is None and i == 0) or (a.keyword and a.keyword.value == "dataset")
        ),
        None,
    )
    if dataset_arg is None:
        plan.report(call, "DDP206", Severity.ERROR, "cannot find the dataset this DataLoader reads")
        return False
    dataset = dataset_arg.value
    stmt = index.statement_of(call)
    if not isinstance(dataset, (cst.Name, cst.Attribute)):
        name = fresh("train_dataset", index.identifiers | taken)
        taken.add(name)
        _hoist(plan, stmt, f"{name} = {index.module.code_for_node(dataset)}")
        plan.replace(dataset, lambda n, name=name: cst.Name(name))
        dataset_code = name
    else:
        dataset_code = index.module.code_for_node(dataset)

    shuffle_position = torch_api.DATALOADER_POSITIONS["shuffle"]
    shuffle = next(
        (
            a
            for i, a in enumerate(call.args)
            if (a.keyword is not None and a.keyword.value == "shuffle") or (a.keyword is None and i == shuffle_position)
        ),
        None,
    )
    arguments = dataset_code
    spread = loader.spread
    shuffles = True
    if shuffle is None and spread is not None and (loader.spread_keys is None or "shuffle" in loader.spread_keys):
        # DataLoader(ds, **kwargs) where kwargs may hold "shuffle": it moves into the sampler.
        name = fresh("shuffle", index.identifiers | taken)
        taken.add(name)
        _hoist(plan, stmt, f'{name} = {index.module.code_for_node(spread.value)}.pop("shuffle", False)')
        arguments += f", shuffle={name}"
    elif shuffle is None or _is_false(shuffle.value):
        arguments += ", shuffle=False"
        shuffles = False
    elif not _is_true(shuffle.value):
        arguments += f", shuffle={index.module.code_for_node(shuffle.value)}"
    value = cst.parse_expression(f"{sampler}({arguments})")
    new_arg = cst.Arg(
        value=value,
        keyword=cst.Name("sampler"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    if shuffle is not None:
        plan.replace(shuffle, lambda n: n.with_changes(keyword=new_arg.keyword, equal=new_arg.equal, value=value))
        summary = "training DataLoader: shuffle moves into a DistributedSampler"
    else:
        position = call.args.index(spread) if spread is not None else len(call.args)
        plan.replace(call, lambda n: _insert_arg(n, new_arg, position))
        summary = "training DataLoader: add a DistributedSampler"
    batch = _batch_size(call)
    if batch is not None and not keep_global_batch:
        size = index.module.code_for_node(batch.value)
        summary += f"; each process loads batches of {size}, so the global batch is {size} x world size"
    plan.change(call, summary)
    plan.need_import(
        "torch.utils.data.distributed", "DistributedSampler", None if sampler == "DistributedSampler" else sampler
    )
    return shuffles


def _hoist(plan: EditPlan, stmt: cst.BaseStatement, code: str) -> None:
    """Compute ``code`` on its own line just before ``stmt`` (which hands over its blank lines and comments)."""
    line = cst.parse_statement(f"{code}\n")
    if not plan.before.get(stmt):
        line = line.with_changes(leading_lines=stmt.leading_lines)
        plan.replace(stmt, lambda n: n.with_changes(leading_lines=()))
    plan.insert_before(stmt, line)


def _split_batch(anatomy: Anatomy, plan: EditPlan, loader: Loader, helper: str) -> None:
    call = loader.call
    batch = _batch_size(call)
    if batch is None:
        plan.report(
            call,
            "DDP207",
            Severity.WARNING,
            "--keep-global-batch: the batch size of this DataLoader is not one of its arguments; "
            "each process loads the full batch",
        )
        return
    if not plan.has_setup_helper(helper):
        definition = cst.parse_module(PER_PROCESS_BATCH.format(helper=helper, dist=anatomy.names.dist)).body[0]
        plan.add_setup_helper(helper, definition)
    plan.replace(batch.value, lambda n: cst.Call(func=cst.Name(helper), args=[cst.Arg(n)]))
    plan.change(batch, "per-process batch = batch size / world size (the global batch stays as before)")


def _batch_size(call: cst.Call) -> cst.Arg | None:
    position = torch_api.DATALOADER_POSITIONS["batch_size"]
    return next(
        (
            a
            for i, a in enumerate(call.args)
            if (a.keyword is not None and a.keyword.value == "batch_size")
            or (a.keyword is None and not a.star and i == position)
        ),
        None,
    )


def _set_epoch(anatomy: Anatomy, plan: EditPlan, loader: Loader, taken: set[str]) -> None:
    for restart in loader.restarts:
        sampler = f"{restart.loader}.sampler"
        plan.insert_before(restart.loop, cst.parse_statement(f"{sampler}.set_epoch({sampler}.epoch + 1)\n"))
        plan.change(restart.loop, f"a new pass over the data: `{sampler}.set_epoch(...)` reshuffles it")
    for epoch_loop in loader.epoch_loops:
        loop = epoch_loop.loop
        target = loop.target
        if not isinstance(target, cst.Name) or not isinstance(loop.body, cst.IndentedBlock):
            plan.report(
                loop,
                "DDP203",
                Severity.WARNING,
                "the epoch loop has no simple loop variable: call "
                f"`{epoch_loop.loader}.sampler.set_epoch(epoch)` at the start of each epoch yourself",
            )
            continue
        epoch = target.value
        if epoch == "_":
            epoch = fresh("epoch", anatomy.index.identifiers | taken)
            taken.add(epoch)
            plan.replace(target, lambda n, e=epoch: n.with_changes(value=e))
        stmt = cst.parse_statement(f"{epoch_loop.loader}.sampler.set_epoch({epoch})\n")
        if epoch_loop.after is not None:  # the loader is built anew each epoch
            plan.insert_after(epoch_loop.after, stmt)
        else:
            plan.insert_before(loop.body.body[0], stmt)
        plan.change(loop, f"call `{epoch_loop.loader}.sampler.set_epoch({epoch})` at the start of each epoch")


def _insert_arg(call: cst.Call, arg: cst.Arg, position: int) -> cst.Call:
    """Insert ``arg`` before ``call.args[position]`` (or last), in the layout of the arguments around it."""
    args = list(call.args)
    if not args:
        return call.with_changes(args=[arg])
    if position < len(args):
        return call.with_changes(
            args=[
                *args[:position],
                arg.with_changes(
                    comma=args[position - 1].comma
                    if position > 0 and isinstance(args[position - 1].comma, cst.Comma)
                    else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                ),
                *args[position:],
            ]
        )
    last = args[-1]
    if isinstance(last.comma, cst.Comma):  # a trailing comma: the call is laid out one argument per line
        comma = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else last.comma
        args.append(arg.with_changes(comma=last.comma))
        args[-2] = last.with_changes(comma=comma)
    else:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(arg)
    return call.with_changes(args=args)


def _is_true(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def _is_false(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "False"

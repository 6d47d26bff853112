"""The data concern's rewrite: a training DataLoader's DistributedSampler, ``set_epoch``, ``drop_last``, batch split.

A sampler of the script's own is shared by ``samplers``, an IterableDataset
by :mod:`.streams`, and ``random_split`` is seeded by :mod:`.seeds`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import takewhile
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.concerns.data.checks import carried_state_refused
from ddpify.concerns.data.codes import BATCH_NOT_ARGUMENT, CARRIED_STATE, NO_DATASET, NO_EPOCH, STAR_ARGS
from ddpify.concerns.data.facts import (
    Facts,
    Loader,
    batch_size,
    batch_size_arg,
    is_false,
    is_none,
    is_true,
    shuffle_chosen,
)
from ddpify.concerns.data.seeds import seed_order, seed_split
from ddpify.concerns.data.streams import define_shard, shard_stream
from ddpify.concerns.samplers import define_wrapper, needs_wrapper, sample_entries, sampler_rngs, share
from ddpify.engine.edits import EditPlan, Statement, fresh, insert_arg, statement, without_keyword
from ddpify.engine.index import Index
from ddpify.engine.syntax import argument
from ddpify.engine.values import attribute_values, gpu_count, loader_batch_size
from ddpify.result import Options

PER_PROCESS_BATCH = '''
def {helper}(batch_size):
    """The share of the single-process batch that each process loads, so the global batch stays the same."""
    world_size = {world_size}
    if batch_size % world_size:
        raise ValueError(f"batch size {{batch_size}} cannot be split evenly over {{world_size}} processes")
    return batch_size // world_size
'''


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    for split in facts.splits:
        seed_split(plan, split)
    generators: dict[tuple[cst.Module, str], str] = {}
    for order in facts.orders:
        seed_order(plan, order, generators)
    taken: set[str] = set()
    helper = wrapper = whole_run_wrapper = shard = None
    renamed: dict[cst.For | cst.While, str] = {}  # ``for _ in range(n)``: the name its epoch gets
    # the set_epoch calls made, by where they go: a loader built in two branches of a factory is one loader there
    epochs_set: set[tuple[cst.CSTNode, str]] = set()
    lengths_read: set[cst.Attribute] = set()  # the ``len(loader.dataset)`` made ``len(loader.sampler)``
    scaled: set[cst.BinaryOperation] = set()  # ``batch_size * torch.cuda.device_count()`` made ``batch_size``
    passes: dict[cst.Call, str] = {}  # a loader built again for each pass: the sampler its passes share
    # the global RNGs besides torch's that a sampler the wrapper deals out draws from: it seeds them alike too
    rngs = sorted(
        {
            rng
            for loader in facts.loaders
            if loader.training and loader.own_sampler is not None
            for rng in sampler_rngs(plan.index, loader.own_sampler)
        }
    )
    # a loader built one way or another (``batch_sampler=`` under one setting, ``shuffle=True`` under the other)
    # keeps its sampler under either attribute: each ``set_epoch`` asks which one this run has
    kept_under: dict[tuple[cst.CSTNode, str], set[str]] = {}
    for loader in facts.loaders:
        if loader.training and loader.stream is None:
            own = loader.own_sampler
            for epoch_loop in loader.epoch_loops:
                key = (epoch_loop.loop, epoch_loop.loader)
                kept_under.setdefault(key, set()).add(own.attribute if own is not None else "sampler")
    for loader in facts.loaders:
        if loader.training:
            own = loader.own_sampler
            if loader.stream is not None:
                shard = shard or define_shard(plan, taken)
                shard_stream(plan, loader.stream, shard)
                reshuffles = False
            elif own is not None:
                if own.wrapped and loader.whole_run:
                    whole_run_wrapper = whole_run_wrapper or define_wrapper(plan, taken, whole_run=True, rngs=rngs)
                elif needs_wrapper(plan, own, whole_run=False):
                    wrapper = wrapper or define_wrapper(plan, taken, rngs=rngs)
                share(plan, own, (whole_run_wrapper if loader.whole_run else wrapper) or "", loader.whole_run)
                if own.by_default:
                    _sampler_by_default(plan, loader, taken)
                reshuffles = own.reshuffles
            else:
                reshuffles = _add_sampler(plan, loader, taken, options.keep_global_batch, passes)
            if reshuffles:
                kept = own.attribute if own is not None else "sampler"
                _set_epoch(plan, loader, taken, kept, renamed, epochs_set, kept_under)
            if options.keep_global_batch:
                helper = helper or fresh("per_process_batch", plan.index.identifiers | taken)
                taken.add(helper)
                _split_batch(plan, loader, helper)
            if loader.full_batches is not None:
                _drop_last(plan, loader)
            _per_gpu_batch(plan, loader, scaled)
            for attribute in loader.sampler_reads:
                _read_own_sampler(plan, attribute)
            for attribute in loader.dataset_lengths if loader.stream is None else ():
                if attribute in lengths_read:  # (one loader built in several places: read once)
                    continue
                lengths_read.add(attribute)
                plan.replace(attribute, lambda n: n.with_changes(attr=cst.Name("sampler")))
                text = plan.index.module.code_for_node(attribute.value)
                plan.change(attribute, f"len({text}.dataset) -> len({text}.sampler): the samples this rank trains on")


def _add_sampler(
    plan: EditPlan, loader: Loader, taken: set[str], keep_global_batch: bool, passes: dict[cst.Call, str]
) -> bool:
    """Give the loader its DistributedSampler; whether that sampler shuffles (and so needs ``set_epoch``).
    ``passes``: the sampler named for the first construction of a loader built again for each pass."""
    index = plan.index
    call = loader.call
    sampler = plan.names.sampler
    dataset_arg = argument(call, "dataset", torch_api.DATALOADER_POSITIONS["dataset"])
    if dataset_arg is None:
        if any(a.star == "*" for a in call.args):
            return False  # already refused: DDP205
        plan.report(call, NO_DATASET, "cannot find the dataset this DataLoader reads")
        return False
    dataset = dataset_arg.value
    if loader.entry is not None and loader.entry.variable is not None:
        if any(isinstance(node, cst.Call) for node in index.walk(dataset)):
            plan.report(
                dataset,
                NO_DATASET,
                "the dataset of a DataLoader built in a dict comprehension is made in place: build the datasets "
                "first and index them here (`datasets[x]`)",
            )
            return False
        if loader.spread is not None and (loader.spread_keys is None or "shuffle" in loader.spread_keys):
            plan.report(
                loader.spread,
                STAR_ARGS,
                "the `**` arguments of a DataLoader built for each key may hold `shuffle`, which the "
                "DistributedSampler of its training entries replaces: pass `shuffle` by name",
            )
            return False
        return sample_entries(plan, call, loader.entry, dataset)
    stmt = index.statement_of(call)
    if not isinstance(dataset, (cst.Name, cst.Attribute)):
        name = fresh("dataset" if loader.evaluated else "train_dataset", index.identifiers | taken)
        taken.add(name)
        _hoist_edited(plan, stmt, name, dataset)
        dataset_code = name
    else:
        dataset_code = index.module.code_for_node(dataset)

    default = next(
        (
            a
            for a in call.args
            if a.keyword is not None and a.keyword.value in torch_api.DATALOADER_SAMPLING_KEYWORDS and is_none(a.value)
        ),
        None,
    )
    if default is not None:  # ``sampler=None`` written out: it makes way for the DistributedSampler
        keyword = cast(cst.Name, default.keyword).value
        plan.replace(call, lambda n: without_keyword(cast(cst.Call, n), keyword, "None"))
    shuffle = argument(call, "shuffle", torch_api.DATALOADER_POSITIONS["shuffle"])
    arguments = dataset_code
    spread = loader.spread
    shuffles = True
    if shuffle is None and spread is not None and (loader.spread_keys is None or "shuffle" in loader.spread_keys):
        # DataLoader(ds, **kwargs) where kwargs may hold "shuffle": it moves into the sampler.
        name = fresh("shuffle", index.identifiers | taken)
        taken.add(name)
        _hoist(plan, stmt, f'{name} = {index.module.code_for_node(spread.value)}.pop("shuffle", False)')
        arguments += f", shuffle={name}"
    elif shuffle is None or is_false(shuffle.value):
        arguments += ", shuffle=False"
        shuffles = False
    elif not is_true(shuffle.value):
        arguments += f", shuffle={index.module.code_for_node(shuffle.value)}"
    if loader.carried is not None:
        return _contiguous_batches(plan, loader, dataset_code, shuffle, keep_global_batch)
    code = f"{sampler}({arguments})"
    if loader.evaluated and loader.trains_when is not None and shuffle is not None and is_true(shuffle.value):
        # ``data_provider(flag)`` shuffles the validation loader too: the callers tell the training one apart,
        # and the others keep the whole set on every rank (in order: a mean over it does not depend on it)
        code = f"{sampler}({dataset_code}) if {loader.trains_when} else None"
    elif (chosen := shuffle_chosen(loader)) is not None:
        # ``make_loader(split)`` builds the validation loader too: it keeps the whole set on every rank,
        # and the loader that shuffles (the training one) gets the sampler
        condition = index.module.code_for_node(chosen)
        code = f"{sampler}({dataset_code}) if {condition} else None"
        if loader.trains_when not in (None, condition):  # evaluation loaders shuffle too: the callers tell apart
            code = f"{sampler}({dataset_code}, shuffle={condition}) if {loader.trains_when} else None"
    value = cst.parse_expression(code)
    new_arg = _sampler_arg(value)
    inline = loader.inline
    if index.module_of(call) in plan.shared:
        named = _add_sampler_where_distributed(
            plan, loader, new_arg, shuffle, taken, "train_sampler" if inline is not None else "sampler"
        )
        summary = "training DataLoader: a DistributedSampler once a process group exists (other scripts use it too)"
        if inline is not None and shuffles:
            _hoist(plan, stmt, f"if {named} is not None:\n    {named}.set_epoch({inline.epoch})")
            plan.change(inline.loop, f"call `{named}.set_epoch({inline.epoch})` before each pass over the data")
        shuffles = shuffles and inline is None
    else:
        if inline is not None:
            # built where its batches are drawn: the sampler gets a name, to set its epoch before each pass
            named = fresh("train_sampler", index.identifiers | taken)
            taken.add(named)
            _hoist(plan, stmt, f"{named} = {code}")
            if shuffles:
                _hoist(plan, stmt, f"{named}.set_epoch({inline.epoch})")
                plan.change(inline.loop, f"call `{named}.set_epoch({inline.epoch})` before each pass over the data")
                shuffles = False  # its epoch is set here
            value = cst.Name(named)
            new_arg = new_arg.with_changes(value=value)
        elif loader.first_pass is not None and shuffles:
            # ``it = iter(DataLoader(...))`` built again where a pass ends: one sampler for every pass, its
            # epoch moved on at each new one, as ``set_epoch`` would be in an epoch loop
            named = passes.get(loader.first_pass, "")
            if not named:
                named = passes[loader.first_pass] = fresh("train_sampler", index.identifiers | taken)
                taken.add(named)
                _hoist(plan, stmt, f"{named} = {code}")
            else:
                _hoist(plan, stmt, f"{named}.set_epoch({named}.epoch + 1)")
                plan.change(call, f"a new pass over the data: `{named}.set_epoch(...)` reshuffles it")
            shuffles = False
            value = cst.Name(named)
            new_arg = new_arg.with_changes(value=value)
        if shuffle is not None:
            plan.replace(shuffle, lambda n: n.with_changes(keyword=new_arg.keyword, equal=new_arg.equal, value=value))
            summary = "training DataLoader: shuffle moves into a DistributedSampler"
        else:
            position = call.args.index(spread) if spread is not None else len(call.args)
            if default is not None and call.args.index(default) < position:
                position -= 1
            plan.replace(call, lambda n: insert_arg(cast(cst.Call, n), new_arg, position))
            summary = "training DataLoader: add a DistributedSampler"
    batch = batch_size(index, call)
    if batch is not None and not keep_global_batch:
        size = index.module.code_for_node(batch)
        summary += f"; each process loads batches of {size}, so the global batch is {size} x world size"
    plan.change(call, summary)
    plan.need_import(
        "torch.utils.data.distributed", "DistributedSampler", None if sampler == "DistributedSampler" else sampler
    )
    return shuffles


CONTIGUOUS_BATCHES = '''
def {helper}(size, batch_size):
    """This rank's samples: an equal, contiguous run of whole batches, in order, so that a state carried
    from one batch to the next still meets the data that follows it."""
    batches = size // batch_size // {dist}.get_world_size()
    start = {dist}.get_rank() * batches * batch_size
    return range(start, start + batches * batch_size)
'''


def _sampler_arg(value: cst.BaseExpression) -> cst.Arg:
    """``sampler=<value>``, written as keyword arguments are (no spaces around ``=``)."""
    return cst.Arg(
        value=value,
        keyword=cst.Name("sampler"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )


def _contiguous_batches(
    plan: EditPlan, loader: Loader, dataset: str, shuffle: cst.Arg | None, keep_global_batch: bool
) -> bool:
    """``sampler=contiguous_batches(len(dataset), batch_size)``: a loader whose batches carry a state from one
    to the next (an RNN's hidden state) gives each rank a contiguous run of the batches it drew before."""
    call = loader.call
    carried = cast(str, loader.carried)
    if keep_global_batch or plan.without_group(call) or loader.inline is not None:
        why = (
            "--keep-global-batch would change its batches"
            if keep_global_batch
            else "is built in a module that other scripts import"
            if plan.without_group(call)
            else "is built where its batches are drawn"
        )
        plan.report(call, CARRIED_STATE, carried_state_refused(carried, "this DataLoader", why))
        return False
    helper = fresh("contiguous_batches", plan.index.identifiers)
    if not plan.has_setup_helper(helper):
        definition = cst.parse_module(CONTIGUOUS_BATCHES.format(helper=helper, dist=plan.names.dist)).body[0]
        plan.add_setup_helper(helper, cast(cst.FunctionDef, definition))
    given, read = batch_size_arg(call), batch_size(plan.index, call)
    if given is not None:
        size = plan.index.module.code_for_node(given.value)
    elif loader.spread is not None and read is not None:  # ``DataLoader(ds, **kwargs)``
        size = f'{plan.index.module.code_for_node(loader.spread.value)}["batch_size"]'
    else:
        size = "1"
    new_arg = _sampler_arg(cst.parse_expression(f"{helper}(len({dataset}), {size})"))
    if shuffle is not None:  # ``shuffle=False``
        plan.replace(
            shuffle, lambda n: n.with_changes(keyword=new_arg.keyword, equal=new_arg.equal, value=new_arg.value)
        )
    else:
        spread = loader.spread
        position = call.args.index(spread) if spread is not None else len(call.args)
        plan.replace(call, lambda n: insert_arg(cast(cst.Call, n), new_arg, position))
    shown = plan.index.module.code_for_node(read) if read is not None else size
    plan.change(
        call,
        f"training DataLoader: each process loads a contiguous run of its batches, in order, since {carried}; "
        f"each process loads batches of {shown}, so the global batch is {shown} x world size",
    )
    return False


def _sampler_by_default(plan: EditPlan, loader: Loader, taken: set[str]) -> None:
    """``DataLoader(ds, **kwargs)`` where ``kwargs["sampler"]`` is set only on request: where it is not,
    a DistributedSampler goes into the dict, taking the dict's ``shuffle``."""
    index = plan.index
    call = loader.call
    code = index.module_of(call).code_for_node
    holder = code(cast(cst.Arg, loader.spread).value)
    dataset = cast(cst.Arg, argument(call, "dataset", torch_api.DATALOADER_POSITIONS["dataset"])).value
    stmt = index.statement_of(call)
    if isinstance(dataset, (cst.Name, cst.Attribute)):
        dataset_code = code(dataset)
    else:
        dataset_code = fresh("train_dataset", index.identifiers | taken)
        taken.add(dataset_code)
        _hoist_edited(plan, stmt, dataset_code, dataset)
    shuffle = f'{holder}.pop("shuffle", False)' if loader.spread_keys and "shuffle" in loader.spread_keys else "False"
    test = plan.with_group(call, f'"sampler" not in {holder}')
    _hoist(
        plan,
        stmt,
        f"if {test}:  # none asked for: this rank's share of the data set\n"
        f'    {holder}["sampler"] = {plan.names.sampler}({dataset_code}, shuffle={shuffle})',
    )
    plan.change(call, f"training DataLoader: a DistributedSampler where `{holder}` holds no sampler")


def _add_sampler_where_distributed(
    plan: EditPlan, loader: Loader, sampler: cst.Arg, shuffle: cst.Arg | None, taken: set[str], name: str
) -> str:
    """In a module that other scripts import too, the sampler exists only where a process group does,
    and the loader shuffles by itself elsewhere, as the script did."""
    index = plan.index
    name = fresh(name, index.identifiers | taken)
    taken.add(name)
    code = index.module.code_for_node(sampler.value)
    if isinstance(sampler.value, cst.IfExp):  # the training loader's own test: ``(A if train else None) if ...``
        code = f"({code})"
    _hoist(plan, index.statement_of(loader.call), f"{name} = {code} if {plan.names.dist}.is_initialized() else None")
    if shuffle is not None and not is_false(shuffle.value):
        own = index.module.code_for_node(shuffle.value)
        test = f"({own}) and {name} is None"
        if is_true(shuffle.value):
            test = f"{name} is None"
        elif isinstance(shuffle.value, (cst.Name, cst.Attribute)):
            test = f"{own} and {name} is None"
        plan.replace(shuffle.value, lambda n: cst.parse_expression(test))
    spread = loader.spread
    position = loader.call.args.index(spread) if spread is not None else len(loader.call.args)
    new_arg = sampler.with_changes(value=cst.Name(name))
    plan.replace(loader.call, lambda n: insert_arg(cast(cst.Call, n), new_arg, position))
    return name


def _drop_last(plan: EditPlan, loader: Loader) -> None:
    """``drop_last=True``: the training step builds shapes from the batch size, so every batch must be full."""
    flag = cst.Arg(
        value=cst.Name("True"),
        keyword=cst.Name("drop_last"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )

    def add(node: cst.CSTNode) -> cst.CSTNode:
        call = cast(cst.Call, node)
        spread = next((i for i, a in enumerate(call.args) if a.star == "**"), len(call.args))
        return insert_arg(call, flag, spread)

    plan.replace(loader.call, add)
    assert loader.full_batches is not None
    shape = plan.index.module.code_for_node(loader.full_batches.func)
    plan.change(
        loader.call,
        f"drop_last=True: the training step builds shapes from the batch size (`{shape}(...)`), and a rank's "
        "last batch can be smaller once the data is split",
    )


def _hoist_edited(plan: EditPlan, stmt: cst.BaseStatement, name: str, expr: cst.BaseExpression) -> None:
    """``name = <expr>`` on its own line just before ``stmt``, and ``name`` in its place: ``expr`` as the other
    edits leave it (``MyDataset(items, seen=model.module.seen)``), not as the input spells it."""
    edited: list[cst.BaseExpression] = []

    def keep(node: cst.CSTNode) -> cst.CSTNode:
        edited.append(cast(cst.BaseExpression, node))
        return cst.Name(name)

    def assign(leading: Sequence[cst.EmptyLine] = statement(stmt).leading_lines) -> Statement:
        line = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], edited[-1])])
        return line.with_changes(leading_lines=leading) if first else line

    first = not plan.before.get(stmt)
    if first:
        plan.replace(stmt, lambda n: statement(n).with_changes(leading_lines=()))
    plan.insert_before_built(stmt, assign)
    plan.replace(expr, keep)


def _hoist(plan: EditPlan, stmt: cst.BaseStatement, code: str) -> None:
    """Compute ``code`` on its own line just before ``stmt`` (which hands over its blank lines and comments)."""
    line = cst.parse_statement(f"{code}\n")
    if not plan.before.get(stmt):
        line = line.with_changes(leading_lines=statement(stmt).leading_lines)
        plan.replace(stmt, lambda n: statement(n).with_changes(leading_lines=()))
    plan.insert_before(stmt, line)


def _split_batch(plan: EditPlan, loader: Loader, helper: str) -> None:
    call = loader.call
    batch = batch_size_arg(call)
    if batch is None:
        plan.report(
            call,
            BATCH_NOT_ARGUMENT,
            "--keep-global-batch: the batch size of this DataLoader is not one of its arguments; "
            "each process loads the full batch",
        )
        return
    if not plan.has_setup_helper(helper):
        dist = plan.names.dist
        forms = [
            cst.parse_module(PER_PROCESS_BATCH.format(helper=helper, world_size=world_size)).body[0]
            for world_size in (f"{dist}.get_world_size()", f"{dist}.get_world_size() if {dist}.is_initialized() else 1")
        ]
        assert all(isinstance(form, cst.FunctionDef) for form in forms)
        plan.add_setup_helper(helper, *cast(list[cst.FunctionDef], forms))
    plan.replace(batch.value, lambda n: cst.Call(func=cst.Name(helper), args=[cst.Arg(cast(cst.BaseExpression, n))]))
    plan.change(batch, "per-process batch = batch size / world size (the global batch stays as before)")


def _variables(index: Index, module: cst.Module) -> set[str]:
    """The names ``module`` spells as names, not only as attributes (``self.epoch`` leaves ``epoch``
    free for a loop variable)."""
    return {
        name
        for name, nodes in index.names.items()
        if any(
            index.module_of(node) is module
            and not (isinstance(parent := index.parent(node), cst.Attribute) and parent.attr is node)
            for node in nodes
        )
    }


def _set_epoch(
    plan: EditPlan,
    loader: Loader,
    taken: set[str],
    attribute: str,
    renamed: dict[cst.For | cst.While, str],
    made: set[tuple[cst.CSTNode, str]],
    kept_under: dict[tuple[cst.CSTNode, str], set[str]],
) -> None:
    """``sampler.set_epoch(epoch)`` at the start of each epoch loop (``for _ in ...`` gets a name, once), where
    no other construction of the same loader has put it (``made``)."""
    for restart in loader.restarts:
        sampler = f"{restart.loader}.{attribute}"
        if (restart.stmt, sampler) in made:
            continue
        made.add((restart.stmt, sampler))
        again = cst.parse_statement(f"{sampler}.set_epoch({sampler}.epoch + 1)\n")
        plan.insert_before(restart.stmt, plan.where_distributed(restart.stmt, again))
        plan.change(restart.stmt, f"a new pass over the data: `{sampler}.set_epoch(...)` reshuffles it")
    for epoch_loop in loader.epoch_loops:
        loop = epoch_loop.loop
        target = loop.target if isinstance(loop, cst.For) else None
        if (target is not None and not isinstance(target, cst.Name)) or not isinstance(loop.body, cst.IndentedBlock):
            plan.report(
                loop,
                NO_EPOCH,
                "the epoch loop has no simple loop variable: call "
                f"`{epoch_loop.loader}.{attribute}.set_epoch(epoch)` at the start of each epoch yourself",
            )
            continue
        epoch = target.value if target is not None else epoch_loop.counter
        if epoch == "_" and isinstance(loop, cst.For) and loop in renamed:  # a second loader of this loop
            epoch = renamed[loop]
        elif epoch == "_" and target is not None:  # (a ``while`` loop's counter is read as it is)
            epoch = renamed[loop] = fresh("epoch", _variables(plan.index, plan.index.module_of(loop)) | taken)
            taken.add(epoch)
            plan.replace(target, _renamed(epoch))
        code = f"{epoch_loop.loader}.{attribute}.set_epoch({epoch})"
        if (loop, code) in made:
            continue
        made.add((loop, code))
        condition = _sampled_when(plan, loader) if epoch_loop.after is not None else None
        if (condition is not None and not plan.index.inside(loader.call, loop)) or len(
            kept_under.get((loop, epoch_loop.loader), ())
        ) > 1:  # the test is the builder's, or the run's
            condition = f"isinstance({epoch_loop.loader}.{attribute}, {plan.names.sampler})"
        if condition is not None:  # built anew for each phase: only the training one has the sampler
            code = f"if {condition}:\n    {code}"
        stmt = plan.where_distributed(loop, cst.parse_statement(code + "\n"))
        if epoch_loop.after is not None:  # the loader is built anew each epoch
            plan.insert_after(epoch_loop.after, stmt)
        elif guarded := _drawn_under_a_test(plan.index, loader, loop):
            # ``if not args.no_train: for x, y in train_loader:``, the loader built under the same test: the
            # epoch is set where the batches are drawn, on the path where the loader exists
            for site in guarded:
                plan.insert_before(site, stmt)
        else:
            plan.insert_before(loop.body.body[0], stmt)
        plan.change(loop, f"call `{epoch_loop.loader}.{attribute}.set_epoch({epoch})` at the start of each epoch")


_GPU_QUERIES = frozenset({"torch.cuda.device_count", "torch.cuda.is_available"})


def _per_gpu_batch(plan: EditPlan, loader: Loader, done: set[cst.BinaryOperation]) -> None:
    """``batch_size * torch.cuda.device_count()`` (or ``* n_gpu``) for a training loader's batch size, as
    nn.DataParallel wanted it (it split each batch over the GPUs) -> ``batch_size``: each process now loads
    its own batches onto its one GPU, and the global batch is already that times the world size."""
    index = plan.index
    given = loader_batch_size(index, loader.call)  # by keyword, by position, or in a ``**kwargs`` dict
    if given is None:
        return
    values = [given, *attribute_values(index, given)]  # ``batch_size=args.train_batch_size``
    ref = index.carried_ref(given, index.scope_of(given))
    for place in [ref, *index.upstream(ref)] if ref is not None else []:  # through the helpers it is handed to
        values += [value for _, value in index.values_assigned(place)]
    for value in values:
        if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply)) or value in done:
            continue
        kept = value.left if gpu_count(index, value.right) else value.right if gpu_count(index, value.left) else None
        if kept is None:
            continue
        done.add(value)
        code = index.module_of(value).code_for_node
        assign = index.parent(value)
        if (
            isinstance(assign, cst.Assign)
            and len(assign.targets) == 1
            and code(assign.targets[0].target) == code(kept)
            and isinstance(stmt := index.statement_of(value), cst.SimpleStatementLine)
            and len(stmt.body) == 1
        ):
            # ``batch_size = batch_size * n_gpu`` would become ``batch_size = batch_size``; ``if n_gpu > 1:`` goes
            # with it where it held nothing else
            owner = index.parent(index.parent(stmt))
            alone = (
                isinstance(owner, cst.If)
                and owner.orelse is None
                and len(owner.body.body) == 1
                and all(index.is_call_to(c, _GPU_QUERIES) for c in index.walk(owner.test) if isinstance(c, cst.Call))
            )
            plan.remove(owner if alone and isinstance(owner, cst.If) else stmt)
        else:
            plan.replace(value, _replaced_by(kept))
        plan.change(
            value,
            f"`{code(value)}` -> `{code(kept)}`: nn.DataParallel split each batch over "
            "the GPUs; each process now loads its own batches onto its one GPU",
        )


def _replaced_by(kept: cst.BaseExpression) -> Callable[[cst.CSTNode], cst.CSTNode]:
    return lambda _: kept


def _drawn_under_a_test(index: Index, loader: Loader, loop: cst.For | cst.While) -> list[cst.BaseStatement]:
    """The loops of ``loop`` that draw the loader's batches (or the statements that call a function of the
    program holding such a loop: ``train_epoch(...)``), where the first lies under an ``if`` inside ``loop``,
    one per block, where the loader itself is built under an ``if`` (it may not exist on every path); []
    otherwise, or where a site is not such a loop."""
    built = takewhile(lambda a: not isinstance(a, (cst.FunctionDef, cst.Module)), index.ancestors(loader.call))
    if not any(isinstance(a, cst.If) for a in built):
        return []
    sites: list[cst.BaseStatement] = []
    for site in loader.sites:
        if not isinstance(site, cst.For):
            return []
        if index.inside(site, loop.body):
            sites.append(site)
    if not sites:
        for call in index.walk(loop.body):
            callee = index.resolve_callee(call, index.scope_of(call)) if isinstance(call, cst.Call) else None
            if callee is not None and any(index.inside(site, callee[0]) for site in loader.sites):
                sites.append(index.statement_of(call))
    sites.sort(key=index.order.__getitem__)
    if not sites:
        return []
    between = takewhile(lambda a: a is not loop, index.ancestors(sites[0]))
    if not any(isinstance(a, cst.If) for a in between):
        return []
    first: dict[int, cst.BaseStatement] = {}
    for site in sites:
        first.setdefault(id(index.parent(site)), site)
    return list(first.values())


def _read_own_sampler(plan: EditPlan, attribute: cst.Attribute) -> None:
    """``len(loader.sampler.indices)`` -> ``len(loader.sampler)``, the samples this rank trains on; any
    other read of the program's own sampler -> ``loader.sampler.sampler.<attribute>``."""
    index = plan.index
    text = index.module.code_for_node(attribute)
    arg = index.parent(attribute)
    call = index.parent(arg)
    sampler = cast(cst.Attribute, attribute.value)
    if isinstance(arg, cst.Arg) and isinstance(call, cst.Call) and m.matches(call.func, m.Name("len")):
        plan.replace(attribute, lambda _: sampler)
        plan.change(
            attribute, f"len({text}) -> len({index.module.code_for_node(sampler)}): the samples this rank trains on"
        )
        return
    plan.replace(sampler, lambda n: cst.Attribute(value=cast(cst.BaseExpression, n), attr=cst.Name("sampler")))
    plan.change(attribute, f"`{text}` reads the script's own sampler, which the DistributedSampler wraps")


def _sampled_when(plan: EditPlan, loader: Loader) -> str | None:
    """The test under which the loader gets its sampler (``split == "train"``), where it also serves
    evaluation without one; None where it always has one."""
    chosen = shuffle_chosen(loader)
    if chosen is None:
        return None
    return loader.trains_when or plan.index.module.code_for_node(chosen)


def _name(name: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A replacement by the name ``name``."""
    return lambda _: cst.Name(name)


def _renamed(name: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """The same name node, now spelled ``name``."""
    return lambda node: cast(cst.Name, node).with_changes(value=name)

"""The model concern's rewrite: the DistributedDataParallel wrap and the ``.module`` reads.

The wrap goes in place of ``nn.DataParallel`` or after the statement where the model is ready,
again after parameters are unfrozen, and ``.module`` goes on the reads that need it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import libcst as cst

from ddpify import torch_api
from ddpify.concerns.model.codes import SMALL_BATCH_NORM
from ddpify.concerns.model.facts import Facts, Model
from ddpify.concerns.model.finder import statement_value
from ddpify.concerns.model.reads import DEEPCOPY
from ddpify.engine.edits import EditPlan, fresh, with_comma
from ddpify.engine.index import Index, Ref
from ddpify.engine.syntax import argument, dotted, single_target
from ddpify.result import Options


def _in_the_same_parentheses(replacement: cst.BaseExpression) -> Callable[[cst.CSTNode], cst.CSTNode]:
    def replace(node: cst.CSTNode) -> cst.CSTNode:
        original = cast(cst.Call, node)
        return replacement.with_changes(lpar=original.lpar, rpar=original.rpar)

    return replace


def _in_the_same_parentheses_as_argument(node: cst.CSTNode) -> cst.CSTNode:
    """``nn.DataParallel(build())`` -> ``build()``, keeping any parentheses around the call."""
    call = cast(cst.Call, node)
    return call.args[0].value.with_changes(lpar=call.lpar, rpar=call.rpar)


def _module_if_wrapped(ddp: str, bare: bool) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """``model`` -> ``(model.module if isinstance(model, DDP) else model)``; without the parentheses where
    it is ``bare``, a whole argument."""

    def replace(node: cst.CSTNode) -> cst.CSTNode:
        read = cast(cst.BaseExpression, node)
        text = cst.Module([]).code_for_node(read.with_changes(lpar=[], rpar=[]))
        code = f"{text}.module if isinstance({text}, {ddp}) else {text}"
        return cst.parse_expression(code if bare else f"({code})")

    return replace


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    for first, second in facts.summed_backwards:
        _sum_the_losses(plan, first, second)
    ddp = plan.names.ddp
    wrapped_by_ddp: set[cst.Call] = set()
    stripped: set[cst.Call] = set()  # ``load_state_dict`` calls that load the input's DataParallel checkpoints
    copied: set[cst.BaseStatement] = set()  # statements after which rank 0's parameters are copied
    trained = facts.refs
    routed: set[cst.Call] = set()
    for model in facts.models:
        arguments = ", device_ids=[torch.cuda.current_device()]" if model.on_cuda else ""
        if options.find_unused_parameters or model.unused is not None:
            arguments += ", find_unused_parameters=True"
        if model.data_parallel is not None:
            wrapped_by_ddp.add(model.data_parallel)
            _replace_data_parallel(plan, model, arguments)
        else:
            if model.data_parallel_removed is not None:
                wrapped_by_ddp.add(cast(cst.Call, statement_value(model.data_parallel_removed)))
                _remove_data_parallel(plan, model)
            _wrap(plan, model, arguments, options)
        if model.small_batch_norm is not None and not options.sync_batchnorm:
            plan.report(
                model.small_batch_norm,
                SMALL_BATCH_NORM,
                f"`{model.expression}` has BatchNorm layers and each process loads small batches: BatchNorm "
                "normalises over each rank's own batch; `--sync-bn` converts them to SyncBatchNorm",
            )
        if model.unused is not None and not options.find_unused_parameters:
            plan.change(
                model.insert_after,
                f"find_unused_parameters=True: {model.unused}, so some parameters get no gradient in a step",
            )
        for unfrozen in model.rewraps:
            rewrap = cst.parse_statement(
                f"{model.expression} = {ddp}({model.expression}.module{arguments})"
                "  # DDP averages only the parameters that required grad when it was built\n"
            )
            plan.insert_after(unfrozen, plan.where_distributed(unfrozen, rewrap))
            plan.change(unfrozen, f"wrap `{model.expression}` again: which parameters train changed after the wrap")
        for drawn, read in model.redrawn:
            if drawn in copied:
                continue  # one helper drawing the weights of two models (``init(gen)``, ``init(critic)``)
            copied.add(drawn)
            scope = plan.index.scope_of(drawn)
            parameter = fresh("param", {n.value for n in plan.index.walk(scope) if isinstance(n, cst.Name)})
            dist = plan.names.dist
            named = plan.index.module_of(read).code_for_node(read)  # the model as this function names it
            copy = cst.parse_statement(
                f"for {parameter} in {named}.parameters():  # drawn on each rank: take rank 0's, as the "
                f"wrap did\n    {dist}.broadcast({parameter}.detach(), src=0)\n"
            )
            plan.insert_after(drawn, plan.where_distributed(drawn, copy))
            plan.change(drawn, f"copy rank 0's parameters of `{named}` to every rank: drawn again after the wrap")
        for ready in model.wrapped_again:
            again = cst.parse_statement(
                f"{model.expression} = {ddp}({model.expression}{arguments})"
                "  # built anew: the code that follows reads it as the wrapped model\n"
            )
            plan.insert_after(ready, plan.where_distributed(ready, again))
            plan.change(ready, f"wrap `{model.expression}` again: it was built anew after training")
        for read in model.unwrap:
            _unwrap(plan, model, read)
        for call in model.through_forward:
            if call not in routed:  # (one call that several models' wraps reach, each a setting's)
                routed.add(call)
                _through_forward(plan, call)
        if _had_data_parallel(plan, facts, model):
            _load_old_checkpoints(plan, model.lineage, stripped)
    for call in facts.data_parallel:
        if call not in wrapped_by_ddp and call.args:
            stmt = plan.index.statement_of(call)
            if _rewraps_itself(plan, stmt, call):
                plan.remove(stmt)  # ``model = nn.DataParallel(model)`` would become ``model = model``
            else:
                plan.replace(call, lambda n: cast(cst.Call, n).args[0].value)
            plan.change(call, "remove nn.DataParallel: each process drives one GPU")
            # ``model = nn.DataParallel(Net()).to(device)``, the model wrapped further on: plain until then
            assign = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
            target = single_target(assign) if assign is not None else None
            held = plan.index.ref_of(target, plan.index.scope_of(stmt)) if target is not None else None
            for model in facts.models:
                if model.ref == held and plan.index.after(model.insert_after, stmt):
                    _plain_until_the_wrap(plan, model, stmt)
                else:
                    _plain_where_it_is_held(plan, model, call)
            # a model only evaluated (``--eval``): it loads the input's checkpoints and reads no ``.module``
            lineage = frozenset(place for ref in plan.index.holders(call) for place in plan.index.lineage(ref))
            if lineage and not lineage & trained:
                _load_old_checkpoints(plan, lineage, stripped)
                _module_reads_dropped(plan, lineage)
    for call in plan.index.calls if facts.models else ():
        if plan.index.is_call_to(call, torch_api.DATA_PARALLEL_FUNCTION):
            _forward_without_data_parallel(plan, call)
    for test in facts.data_parallel_tests if facts.models else ():
        plan.replace(test, lambda _: cst.Name(ddp))
        plan.change(test, "`isinstance(..., nn.DataParallel)` -> `isinstance(..., DDP)`: the program unwraps its model")
    if facts.models:
        plan.need_import(
            "torch.nn.parallel", "DistributedDataParallel", ddp if ddp != "DistributedDataParallel" else None
        )


def _forward_without_data_parallel(plan: EditPlan, call: cst.Call) -> None:
    """``nn.parallel.data_parallel(net, x, gpus)`` -> ``net(x)``: each process runs its own forward on its
    own GPU (the module's GPUs are no longer the ones listed; through the wrapper, its gradients are averaged).
    A tuple of inputs is spread over the arguments, as ``data_parallel`` does."""
    index = plan.index
    module = argument(call, "module", 0)
    inputs = argument(call, "inputs", 1)
    kwargs = argument(call, "module_kwargs", 5)
    if module is None or inputs is None or any(a.star for a in call.args):
        return
    code = index.module_of(call).code_for_node
    value = inputs.value
    if isinstance(value, cst.Tuple):
        arguments = [code(e.value) for e in value.elements]
    else:
        ref = index.ref_of(value, index.scope_of(call)) if isinstance(value, cst.Name) else None
        bound = [v for _, v in index.values_assigned(ref)] if ref is not None else []
        spread = bool(bound) and all(isinstance(v, cst.Tuple) for v in bound)
        arguments = [("*" if spread else "") + code(value)]
    if kwargs is not None:
        arguments.append("**" + code(kwargs.value))
    replacement = cst.parse_expression(f"{code(module.value)}({', '.join(arguments)})")
    plan.replace(call, lambda n: replacement.with_changes(lpar=cast(cst.Call, n).lpar, rpar=cast(cst.Call, n).rpar))
    plan.change(call, "nn.parallel.data_parallel(...) -> a forward of the model itself: each process drives one GPU")


def _sum_the_losses(plan: EditPlan, first: cst.Call, second: cst.Call) -> None:
    """``a.backward(retain_graph=True)`` then ``b.backward()`` -> ``(a + b).backward()``: the same gradients,
    in the one backward pass per forward that DistributedDataParallel averages."""
    index = plan.index
    code = index.module_of(first).code_for_node
    losses = [code(cast(cst.Attribute, call.func).value) for call in (first, second)]
    summed = cst.parse_expression(f"({losses[0]} + {losses[1]}).backward()").with_changes(args=second.args)
    plan.replace(first, lambda _: summed)
    plan.remove(index.statement_of(second))
    plan.change(
        first,
        f"`{losses[0]}.backward(retain_graph=True)` then `{losses[1]}.backward()` -> one backward pass of their sum: "
        "the same gradients, averaged by DistributedDataParallel once per forward",
    )


def _had_data_parallel(plan: EditPlan, facts: Facts, model: Model) -> bool:
    """Whether the input wrapped ``model`` in ``nn.DataParallel``, whose checkpoints name every key ``module.*``."""
    if model.data_parallel is not None or model.data_parallel_removed is not None:
        return True
    index = plan.index
    for call in facts.data_parallel:
        stmt = index.statement_of(call)
        if isinstance(stmt, cst.SimpleStatementLine) and isinstance(assign := stmt.body[0], cst.Assign):
            target = index.ref_of(assign.targets[0].target, index.scope_of(stmt))
            if target is not None and target in model.lineage:
                return True
        given: cst.BaseExpression = call  # ``return nn.DataParallel(net).to(device)``: the same module
        while (
            isinstance(attr := index.parent(given), cst.Attribute)
            and attr.attr.value in torch_api.MODULE_CHAINING_METHODS
            and isinstance(chained := index.parent(attr), cst.Call)
        ):
            given = chained
        if any(ref in model.lineage for ref in index.holders(given)):
            return True
    return False


STRIP_PREFIX = '''
def {helper}(state_dict):
    """A checkpoint saved from nn.DataParallel names its keys `module.*`; the model loads them without."""
    consume_prefix_in_state_dict_if_present(state_dict, "module.")
    return state_dict
'''


def _module_reads_dropped(plan: EditPlan, lineage: frozenset[Ref]) -> None:
    """``scorer.module.score`` of a model no longer wrapped in ``nn.DataParallel``: ``scorer.score``."""
    index = plan.index
    for attribute in index.attributes.get("module", ()):
        if index.carried_ref(attribute.value, index.scope_of(attribute)) not in lineage:
            continue
        plan.replace(attribute, lambda n: cast(cst.Attribute, n).value)
        text = index.module_of(attribute).code_for_node(attribute.value)
        plan.change(attribute, f"`{text}.module` -> `{text}`: it is no longer wrapped in nn.DataParallel")


def _load_old_checkpoints(plan: EditPlan, lineage: frozenset[Ref], stripped: set[cst.Call]) -> None:
    """``model.load_state_dict(sd)`` -> ``model.load_state_dict(without_module_prefix(sd))``: the input's
    checkpoints, saved from its ``nn.DataParallel``, still load into the model that is no longer wrapped in it
    (the converted program saves ``model.module``'s keys, without the prefix)."""
    index = plan.index
    loads = [
        call
        for call in index.calls
        if isinstance(call.func, cst.Attribute)
        and call.func.attr.value == "load_state_dict"
        and call.args
        and call.args[0].keyword is None
        and not call.args[0].star
        and index.root_ref(call.func.value, index.scope_of(call)) in lineage
        and call not in stripped
    ]
    stripped.update(loads)
    if not loads:
        return
    helper = fresh("without_module_prefix", index.identifiers)
    if not plan.has_setup_helper(helper):
        definition = cast(cst.FunctionDef, cst.parse_module(STRIP_PREFIX.format(helper=helper)).body[0])
        plan.add_setup_helper(helper, definition, definition)
        plan.need_import("torch.nn.modules.utils", "consume_prefix_in_state_dict_if_present")

    def strip(node: cst.CSTNode) -> cst.CSTNode:
        arg = cast(cst.Arg, node)
        return arg.with_changes(value=cst.Call(func=cst.Name(helper), args=[cst.Arg(arg.value)]))

    for call in loads:
        filtered = _filtered_by_own_keys(plan, call, lineage)
        if filtered:
            # ``{k: v for k, v in ckpt.items() if k in own}``: stripped after the filter, nothing would load
            for source in filtered:
                plan.replace(
                    source, lambda n: cst.Call(func=cst.Name(helper), args=[cst.Arg(cast(cst.BaseExpression, n))])
                )
                plan.change(
                    source, "a checkpoint saved from nn.DataParallel (keys `module.*`) still matches the model's keys"
                )
            continue
        # on the argument, not its value: ``torch.load(...)`` there may get its own edit (map_location)
        plan.replace(call.args[0], strip)
        plan.change(call, "a checkpoint saved from nn.DataParallel (keys `module.*`) still loads")


def _filtered_by_own_keys(plan: EditPlan, load: cst.Call, lineage: frozenset[Ref]) -> list[cst.BaseExpression]:
    """``own = model.state_dict()``, ``own.update({k: v for k, v in ckpt.items() if k in own})``, then
    ``model.load_state_dict(own)``: the ``ckpt`` that such a filter keeps against the model's own keys (the
    load itself holds the model's keys, which need no strip)."""
    index = plan.index
    value = load.args[0].value
    scope = index.scope_of(load)
    own = index.ref_of(value, scope) if isinstance(value, cst.Name) else None
    if own is None:
        return []
    if not any(
        isinstance(bound, cst.Call)
        and isinstance(bound.func, cst.Attribute)
        and bound.func.attr.value == "state_dict"
        and index.root_ref(bound.func.value, index.scope_of(bound)) in lineage
        for _, bound in index.values_assigned(own)
    ):
        return []
    body = next((a for a in index.ancestors(load) if isinstance(a, cst.FunctionDef)), index.module_of(load))
    sources: list[cst.BaseExpression] = []
    for comprehension in index.walk(body):
        if not isinstance(comprehension, cst.DictComp):
            continue
        loop = comprehension.for_in
        if (
            isinstance(loop.iter, cst.Call)
            and isinstance(loop.iter.func, cst.Attribute)
            and loop.iter.func.attr.value == "items"
            and any(index.mentions(test.test, own) for test in loop.ifs)
        ):
            sources.append(loop.iter.func.value)
    return sources


def _rewraps_itself(plan: EditPlan, stmt: cst.BaseStatement, call: cst.Call) -> bool:
    """``x = nn.DataParallel(x)``, alone on its line."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return False
    assign = stmt.body[0]
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and assign.value is call):
        return False
    code = plan.index.module.code_for_node
    return code(assign.targets[0].target).strip() == code(call.args[0].value).strip()


def _replace_data_parallel(plan: EditPlan, model: Model, arguments: str) -> None:
    """``nn.DataParallel(model)`` -> ``DDP(model)`` in place; an ``if device_count() > 1:`` around it goes."""
    assert model.data_parallel is not None
    inner = plan.index.module.code_for_node(model.data_parallel.args[0].value)
    if plan.index.module_of(model.data_parallel) in plan.shared:
        # other scripts import this module without a process group: the wrap goes after, where it has one
        if inner.strip() == model.expression:
            plan.remove(model.insert_after)
        else:
            plan.replace(model.data_parallel, _in_the_same_parentheses_as_argument)
        wrap = cst.parse_statement(f"{model.expression} = {plan.names.ddp}({model.expression}{arguments})\n")
        plan.insert_after(model.insert_after, plan.where_distributed(model.insert_after, wrap))
        if model.data_parallel_if is not None:
            plan.inline(model.data_parallel_if)
        plan.change(model.insert_after, "nn.DataParallel -> DistributedDataParallel (one process per GPU)")
        return
    replacement = cst.parse_expression(f"{plan.names.ddp}({inner}{arguments})")
    plan.replace(model.data_parallel, _in_the_same_parentheses(replacement))
    if model.data_parallel_if is not None:
        plan.inline(model.data_parallel_if)
    plan.change(model.insert_after, "nn.DataParallel -> DistributedDataParallel (one process per GPU)")


def _remove_data_parallel(plan: EditPlan, model: Model) -> None:
    """A ``model = nn.DataParallel(model)`` line the wrap replaces elsewhere goes (with an ``if`` that held it alone)."""
    assert model.data_parallel_removed is not None
    guard = model.data_parallel_if
    call = cast(cst.Call, statement_value(model.data_parallel_removed))
    code = plan.index.module_of(call).code_for_node
    target = single_target(model.data_parallel_removed.body[0])
    rebinds = target is not None and code(call.args[0].value).strip() == code(target).strip()  # ``net = DP(net)``
    if guard is None and rebinds:
        guard = _alone_under_a_plain_test(plan.index, model.data_parallel_removed)
    if not rebinds and code(call.args[0].value).strip() != model.expression:
        # ``model = nn.DataParallel(build())``: the line also builds the model, so only the wrapper goes
        plan.replace(call, _in_the_same_parentheses_as_argument)
        if guard is not None:
            plan.inline(guard)
    elif guard is not None and len(guard.body.body) == 1:
        plan.remove(guard)  # ``if device_count() > 1: model = nn.DataParallel(model)``
    else:
        plan.remove(model.data_parallel_removed)
        if guard is not None:
            plan.inline(guard)
    plan.change(model.data_parallel_removed, "remove nn.DataParallel: each process drives one GPU")
    _plain_until_the_wrap(plan, model, model.data_parallel_removed)


def _alone_under_a_plain_test(index: Index, stmt: cst.BaseStatement) -> cst.If | None:
    """The ``if`` that holds ``stmt`` alone, with no ``else``, whose test only reads values (``if opt["gpu_ids"]
    and opt["parallel"]:``): with the statement gone it does nothing."""
    block = index.parent(stmt)
    guard = index.parent(block)
    if not (
        isinstance(block, cst.IndentedBlock)
        and len(block.body) == 1
        and isinstance(guard, cst.If)
        and guard.body is block
        and guard.orelse is None
        and not isinstance(index.parent(guard), cst.If)  # not an ``elif``
    ):
        return None
    if any(isinstance(node, cst.Call | cst.Await | cst.NamedExpr) for node in index.walk(guard.test)):
        return None
    return guard


def _plain_where_it_is_held(plan: EditPlan, model: Model, call: cst.Call) -> None:
    """``model = make_parallel(model)`` whose helper returned ``nn.DataParallel(model)``, the model wrapped only
    after the function that holds it returns: ``model.module.head`` there reads the plain model."""
    index = plan.index
    for ref in index.holders(call):
        scope = ref.scope
        if (
            not isinstance(scope, cst.FunctionDef)
            or ref not in model.lineage
            or index.inside(model.insert_after, scope)
            or index.scope_of(call) is scope
        ):
            continue
        held = [a for a in index.assignments_to(ref) if index.scope_of(a) is scope and _kept_from_a_call(index, a)]
        for read in index.mentions(scope, ref):
            if _reads_module(index, read) and any(index.after(read, a) for a in held):
                _plain_here(plan, read, index.module_of(read).code_for_node(read))


def _kept_from_a_call(index: Index, assign: cst.CSTNode) -> bool:
    """Whether ``assign`` keeps what a call of a function of the program returns (``model = helper(model)``)."""
    value = getattr(assign, "value", None)
    return isinstance(value, cst.Call) and index.resolve_callee(value, index.scope_of(assign)) is not None


def _reads_module(index: Index, read: cst.BaseExpression) -> bool:
    """Whether ``read`` (the model) is read as ``read.module``."""
    attribute = index.parent(read)
    return isinstance(attribute, cst.Attribute) and attribute.value is read and attribute.attr.value == "module"


def _plain_here(plan: EditPlan, read: cst.BaseExpression, text: str) -> None:
    """``model.module`` -> ``model`` at ``read``: the model is not wrapped (yet) where it is read."""
    plan.replace(cast(cst.Attribute, plan.index.parent(read)), lambda node: cast(cst.Attribute, node).value)
    plan.change(read, f"`{text}.module` -> `{text}`: not wrapped yet here")


def _plain_until_the_wrap(plan: EditPlan, model: Model, removed: cst.BaseStatement) -> None:
    """``model.module.classifier`` read after the removed DataParallel line and before the wrap that now
    follows (``if device_count() > 1: model = nn.DataParallel(model); head = model.module.classifier``): the
    model is plain there, so ``.module`` goes."""
    index = plan.index
    scope = index.scope_of(removed)
    wrapped_there = _returned_before(index, model)  # (wrapped again right before these returns)
    for read in index.mentions(scope, model.ref):
        if (
            _reads_module(index, read)
            and index.after(read, removed)
            and index.order[read] <= index.last[model.insert_after]
            and not any(index.inside(read, early) for early in wrapped_there)
        ):
            _plain_here(plan, read, model.expression)


def _wrap(plan: EditPlan, model: Model, arguments: str, options: Options) -> None:
    """``model = DDP(model)`` (or each model of a list) after the statement where the model is ready."""
    ddp = plan.names.ddp
    wrap = cst.parse_statement(f"{model.expression} = {ddp}({model.expression}{arguments})\n")
    convert = f"{model.expression} = torch.nn.SyncBatchNorm.convert_sync_batchnorm({model.expression})\n"
    if model.item is not None:
        each, item = model.expression, model.item
        wrap = cst.parse_statement(f"{each} = [{ddp}({item}{arguments}) for {item} in {each}]\n")
        convert = f"{each} = [torch.nn.SyncBatchNorm.convert_sync_batchnorm({item}) for {item} in {each}]\n"
    anchor = model.insert_after
    if options.sync_batchnorm:
        plan.insert_after(anchor, plan.where_distributed(anchor, cst.parse_statement(convert)))
        plan.need_import("torch")
        plan.change(anchor, f"BatchNorm layers of `{model.expression}` -> SyncBatchNorm")
    wrapped = f"every model in `{model.expression}`" if model.item is not None else f"`{model.expression}`"
    if model.maybe_frozen:
        # DDP refuses a module without a trainable parameter
        test = f"any(p.requires_grad for p in {model.expression}.parameters())"
        wrap = cst.If(test=cst.parse_expression(plan.with_group(anchor, test)), body=cst.IndentedBlock([wrap]))
        plan.change(anchor, f"wrap {wrapped} in DistributedDataParallel when it has trainable parameters")
    elif model.maybe_none:
        test = f"{model.expression} is not None"
        wrap = cst.If(test=cst.parse_expression(plan.with_group(anchor, test)), body=cst.IndentedBlock([wrap]))
        plan.change(anchor, f"wrap {wrapped} in DistributedDataParallel where it is built (it may be None)")
    else:
        for early in _returned_before(plan.index, model):
            # ``if opt.pretrain_path: ...; return model, model.parameters()`` above the wrap: wrapped there too
            again = cst.parse_statement(f"{model.expression} = {ddp}({model.expression}{arguments})\n")
            plan.insert_before(early, plan.where_distributed(early, again))
            plan.change(early, f"wrap {wrapped} in DistributedDataParallel before this return")
        wrap = plan.where_distributed(anchor, wrap)
        plan.change(anchor, f"wrap {wrapped} in DistributedDataParallel")
    plan.insert_after(anchor, wrap)
    for alias, source in model.realiased:
        same = "the same models" if model.item is not None else "the same model"
        plan.insert_after(anchor, cst.parse_statement(f"{alias} = {source}  # {same}, now wrapped\n"))
        plan.change(anchor, f"`{alias}`, another name for `{source}` taken before the wrap, names the wrapper")


def _returned_before(index: Index, model: Model) -> list[cst.BaseStatement]:
    """The ``return`` statements of the function the wrap goes into that give the model back (alone or among
    other values) before the wrap, after the model is built: each leaves with the model unwrapped."""
    anchor = model.insert_after
    function = index.scope_of(anchor)
    if not isinstance(function, cst.FunctionDef) or model.item is not None:
        return []
    built = [a for a in index.assignments_to(model.ref) if index.scope_of(a) is function]
    found: list[cst.BaseStatement] = []
    for value in index.returned_values(function):
        stmt = index.statement_of(value)
        if (
            index.order[stmt] <= index.last[anchor]  # before the wrap, or inside the block it follows
            and any(index.after(stmt, a) for a in built)
            and any(isinstance(n, cst.Name) and index.ref_of(n, function) == model.ref for n in _returned_items(value))
        ):
            found.append(stmt)
    return found


def _returned_items(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """``model`` of ``return model`` and of ``return model, model.parameters()``."""
    if isinstance(value, cst.Tuple):
        return [e.value for e in value.elements]
    return [value]


_THROUGH_FORWARD = '''
def {helper}(model, method, *args, **kwargs):
    """``model.<method>(...)`` run as the forward of its DistributedDataParallel wrapper: DDP averages
    the gradients only of what its forward computes."""
    if not isinstance(model, {ddp}):
        return getattr(model, method)(*args, **kwargs)
    module = model.module

    def forward(*args, **kwargs):
        del module.forward  # the method's own calls of the model run its usual forward
        return getattr(module, method)(*args, **kwargs)

    module.forward = forward
    try:
        return model(*args, **kwargs)
    finally:
        module.__dict__.pop("forward", None)
'''


def _through_forward(plan: EditPlan, call: cst.Call) -> None:
    """``model.compute_loss(x, y)`` -> ``forward_through(model, "compute_loss", x, y)``."""
    helper = fresh("forward_through", plan.index.identifiers)
    if not plan.has_setup_helper(helper):
        code = _THROUGH_FORWARD.format(helper=helper, ddp=plan.names.ddp)
        definition = cast(cst.FunctionDef, cst.parse_module(code).body[0])
        plan.add_setup_helper(helper, definition, definition)
    attribute = cast(cst.Attribute, call.func)
    name = attribute.attr.value

    def route(node: cst.CSTNode) -> cst.CSTNode:
        original = cast(cst.Call, node)
        if not isinstance(original.func, cst.Attribute):
            return original  # routed already (two models' wraps reach the same call)
        receiver = original.func.value
        head = [cst.Arg(receiver), cst.Arg(cst.SimpleString(f'"{name}"'))]
        return original.with_changes(
            func=cst.Name(helper), args=with_comma(head) + list(original.args) if original.args else head
        )

    plan.replace(call, route)
    text = plan.index.module_of(call).code_for_node(attribute.value)
    plan.change(
        call,
        f"`{text}.{name}(...)` runs as the forward of the DistributedDataParallel wrapper, which averages its gradients",
    )


def _unwrap(plan: EditPlan, model: Model, read: cst.BaseExpression) -> None:
    """A read of the wrapped model that needs the model itself: ``.module``."""
    early = read in model.unwrap_where_wrapped
    mixed = read in model.unwrap_if_wrapper
    if plan.index.module_of(read) in plan.shared or model.maybe_frozen or early or mixed:
        # Other scripts pass this code a plain model (or it stays plain while frozen, or this code
        # also runs before the wrap, or is also handed a plain copy): take ``.module`` only from the wrapper.
        parent = plan.index.parent(read)
        bare = isinstance(parent, cst.Arg) and parent.value is read and not parent.star
        plan.replace(read, _module_if_wrapped(plan.names.ddp, bare))
        why = (
            "this code also runs before the wrap"
            if early
            else "a plain model reaches it too"
            if mixed
            else "other scripts pass a plain model"
        )
        plan.change(read, f"`{plan.index.module.code_for_node(read)}.module` when it is wrapped ({why})")
        return
    plan.replace(read, lambda n: cst.Attribute(value=cast(cst.BaseExpression, n), attr=cst.Name("module")))
    parent = plan.index.parent(read)
    attribute = parent.attr.value if isinstance(parent, cst.Attribute) else None
    text = plan.index.module.code_for_node(read)
    call = plan.index.parent(parent)
    if attribute:
        summary = f"`{text}.{attribute}` -> `{text}.module.{attribute}`"
    elif isinstance(parent, cst.Call) and parent.func is read:
        summary = (
            f"`{text}(...)` -> `{text}.module(...)`: this step trains another model and leaves outputs of "
            f"`{text}` unused, which its DistributedDataParallel wrapper would wait for"
        )
    elif (
        isinstance(parent, cst.Arg)
        and isinstance(call, cst.Call)
        and plan.index.is_call_to(call, torch_api.EXPORT_MODEL)
    ):
        summary = f"export `{text}.module`, not the DistributedDataParallel wrapper"
    elif (
        isinstance(parent, cst.Arg)
        and isinstance(call, cst.Call)
        and "builtins.isinstance" in plan.index.qualified_names(call.func)
    ):
        summary = f"pass `{text}.module` to isinstance(): the wrapper is no instance of the model's class"
    elif (
        isinstance(parent, cst.Arg)
        and isinstance(call, cst.Call)
        and isinstance(call.func, cst.Attribute)
        and dotted(call.func.value) == dotted(read)
    ):
        summary = f"pass `{text}.module` to its own method `{call.func.attr.value}()`, written for the module"
    elif isinstance(parent, cst.Arg) and not (
        isinstance(call, cst.Call) and plan.index.is_call_to(call, DEEPCOPY | torch_api.SAVE | torch_api.PICKLE_DUMPS)
    ):
        summary = f"pass `{text}.module`: the function tests for a plain module with hasattr()"
    elif isinstance(parent, cst.Subscript):
        summary = f"`{text}[...]` -> `{text}.module[...]`"
    elif isinstance(call, cst.Call) and plan.index.is_call_to(call, DEEPCOPY):
        summary = f"copy `{text}.module`, not the DistributedDataParallel wrapper"
    else:
        summary = f"save `{text}.module`"
    plan.change(read, summary)

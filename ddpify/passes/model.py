"""Model: each trained model is wrapped in DistributedDataParallel once it is on its device.

The wrap goes right after the statement that puts the model on its device
(after a checkpoint load that follows it, if any), and is written back to the
same name, so the training step -- ``model(x)``, ``loss.backward()``,
``optimizer.step()`` -- is unchanged and DDP synchronises gradients::

    model = Net().to(device)       ->   model = Net().to(device)
                                        model = DDP(model)

``device_ids`` is passed only when the model is put on the GPU with ``.cuda()``;
for ``.to(device)`` DDP takes the device from the module itself, which works
on GPU and CPU alike. Everything that is not a forward call -- ``state_dict``,
``load_state_dict``, custom methods and submodules -- goes to the wrapped
module, so checkpoints keep their keys (no ``module.`` prefix)::

    torch.save(model.state_dict(), path)  ->  torch.save(model.module.state_dict(), path)

With gradient accumulation (a backward pass every micro-step, ``optimizer.step()``
under ``if (i + 1) % k == 0``), the all-reduce of the other micro-steps is
skipped by setting DDP's ``require_backward_grad_sync`` before the forward pass,
which is what ``no_sync()`` does, without re-indenting the step::

    model.require_backward_grad_sync = (i + 1) % k == 0
"""

from __future__ import annotations

import libcst as cst

from ddpify.analysis import Anatomy
from ddpify.edits import EditPlan
from ddpify.result import Options


def run(anatomy: Anatomy, plan: EditPlan, options: Options) -> None:
    ddp = anatomy.names.ddp
    wrapped_by_ddp = set()
    for model in anatomy.models:
        device_ids = ", device_ids=[torch.cuda.current_device()]" if model.on_cuda else ""
        if model.data_parallel is not None:
            wrapped_by_ddp.add(model.data_parallel)
            inner = anatomy.index.module.code_for_node(model.data_parallel.args[0].value)
            replacement = cst.parse_expression(f"{ddp}({inner}{device_ids})")
            plan.replace(model.data_parallel, lambda n, r=replacement: r.with_changes(lpar=n.lpar, rpar=n.rpar))
            if model.data_parallel_if is not None:
                plan.inline(model.data_parallel_if)
            plan.change(model.insert_after, "nn.DataParallel -> DistributedDataParallel (one process per GPU)")
        else:
            if model.data_parallel_removed is not None:
                wrapped_by_ddp.add(model.data_parallel_removed.body[0].value)
                plan.remove(model.data_parallel_removed)
                if model.data_parallel_if is not None:
                    plan.inline(model.data_parallel_if)
                plan.change(model.data_parallel_removed, "remove nn.DataParallel: each process drives one GPU")
            wrap = cst.parse_statement(f"{model.expression} = {ddp}({model.expression}{device_ids})\n")
            plan.insert_after(model.insert_after, wrap)
            plan.change(model.insert_after, f"wrap `{model.expression}` in DistributedDataParallel")
        for read in model.unwrap:
            plan.replace(read, lambda n: cst.Attribute(value=n, attr=cst.Name("module")))
            parent = anatomy.index.parent(read)
            attribute = parent.attr.value if isinstance(parent, cst.Attribute) else None
            text = _text(anatomy, read)
            plan.change(
                read,
                f"`{text}.{attribute}` -> `{text}.module.{attribute}`" if attribute else f"save `{text}.module`",
            )
    for accumulation in anatomy.accumulations:
        condition = anatomy.index.module.code_for_node(accumulation.condition)
        lines = [
            cst.parse_statement(f"{model}.require_backward_grad_sync = {condition}\n") for model in accumulation.models
        ]
        comment = cst.EmptyLine(
            comment=cst.Comment("# All-reduce gradients only in the micro-step that updates the weights.")
        )
        lines[0] = lines[0].with_changes(leading_lines=[comment])
        plan.insert_before(accumulation.forward, *lines)
        plan.change(
            accumulation.forward, "gradient accumulation: gradients are all-reduced only before optimizer.step()"
        )
    for call in anatomy.data_parallel:
        if call not in wrapped_by_ddp and call.args:
            plan.replace(call, lambda n: n.args[0].value)
            plan.change(call, "remove nn.DataParallel: each process drives one GPU")
    if anatomy.models:
        plan.need_import(
            "torch.nn.parallel", "DistributedDataParallel", ddp if ddp != "DistributedDataParallel" else None
        )


def _text(anatomy: Anatomy, node: cst.CSTNode) -> str:
    return anatomy.index.module.code_for_node(node)

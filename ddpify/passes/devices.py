"""Devices: a GPU index written into the script becomes this rank's GPU.

After the setup block has called ``torch.cuda.set_device(LOCAL_RANK)``, plain
``"cuda"`` already means this process's GPU, so ``torch.device("cuda")``,
``.cuda()`` and ``.to("cuda")`` stay as they are. What pins every rank to one
GPU is an explicit index, so only that is removed::

    torch.device("cuda:0")     ->  torch.device("cuda")
    torch.device("cuda", 0)    ->  torch.device("cuda")
    x.cuda(0)                  ->  x.cuda()

A script that sets ``CUDA_VISIBLE_DEVICES`` or calls ``torch.cuda.set_device``
itself would override the rank's device: that is reported, not guessed at.
"""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m

from ddpify.analysis import Anatomy
from ddpify.diagnostics import Severity
from ddpify.edits import EditPlan
from ddpify.flow import _walk
from ddpify.result import Options

_CUDA_INDEX = re.compile(r"""^(?P<q>['"])cuda:\d+(?P=q)$""")


def run(anatomy: Anatomy, plan: EditPlan, options: Options) -> None:
    index = anatomy.index
    for node in _walk(index.module):
        if isinstance(node, cst.SimpleString) and _CUDA_INDEX.match(node.value):
            quote = node.value[0]
            plan.replace(node, lambda n, q=quote: n.with_changes(value=f"{q}cuda{q}"))
            plan.change(node, f"{node.value} -> {quote}cuda{quote}: this rank's GPU")
        elif isinstance(node, cst.Call):
            _call(anatomy, plan, node)
        elif isinstance(node, cst.AssignTarget) and m.matches(
            node.target, m.Subscript(slice=[m.SubscriptElement(m.Index(m.SimpleString()))])
        ):
            if node.target.slice[0].slice.value.evaluated_value == "CUDA_VISIBLE_DEVICES":
                _visible_devices(plan, node)


def _call(anatomy: Anatomy, plan: EditPlan, call: cst.Call) -> None:
    index = anatomy.index
    names = index.qualified_names(call.func)
    if "torch.device" in names and len(call.args) == 2 and m.matches(call.args[0].value, m.SimpleString()):
        if call.args[0].value.evaluated_value == "cuda" and call.args[1].keyword is None:
            plan.replace(call, lambda n: n.with_changes(args=[n.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)]))
            plan.change(call, 'torch.device("cuda", N) -> torch.device("cuda"): this rank\'s GPU')
    elif m.matches(call.func, m.Attribute(attr=m.Name("cuda"))) and len(call.args) == 1 and call.args[0].keyword is None:
        if isinstance(call.args[0].value, cst.Integer):
            plan.replace(call, lambda n: n.with_changes(args=[]))
            plan.change(call, ".cuda(N) -> .cuda(): this rank's GPU")
    elif "torch.cuda.set_device" in names:
        plan.report(
            call,
            "DDP101",
            Severity.ERROR,
            "the script chooses its GPU with torch.cuda.set_device(); under torchrun each process "
            "must use the GPU given by LOCAL_RANK: remove this call",
        )
    elif m.matches(call.func, m.Attribute(attr=m.Name("setdefault") | m.Name("update"))) and any(
        m.matches(n, m.SimpleString()) and "CUDA_VISIBLE_DEVICES" in n.value for n in _walk(call)
    ):
        _visible_devices(plan, call)


def _visible_devices(plan: EditPlan, node: cst.CSTNode) -> None:
    plan.report(
        node,
        "DDP102",
        Severity.WARNING,
        "the script sets CUDA_VISIBLE_DEVICES itself: every rank then sees only those GPUs; "
        "set it in the launch environment instead",
    )

"""Devices: a GPU index written into the script becomes this rank's GPU.

After the setup block has called ``torch.cuda.set_device(LOCAL_RANK)``, plain
``"cuda"`` already means this process's GPU, so ``torch.device("cuda")``,
``.cuda()`` and ``.to("cuda")`` stay as they are. What pins every rank to one
GPU is an explicit index, so only that is removed::

    torch.device("cuda:0")       ->  torch.device("cuda")
    f"cuda:{args.gpu}"           ->  "cuda"
    torch.device("cuda", gpu)    ->  torch.device("cuda")
    x.cuda(args.gpu)             ->  x.cuda()
    device = 0; model.to(device) ->  device = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(gpu)   ->  (removed: the setup block already chose)

A script that sets ``CUDA_VISIBLE_DEVICES`` itself would hide the other GPUs
from every rank: a plain assignment is removed (and reported), since under
torchrun the launch environment chooses the GPUs; other forms are reported. ``.to(N)`` with an integer
variable cannot be told apart from other ``.to`` calls and is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from ddpify import torch_api
from ddpify.diagnostics import Code, Severity
from ddpify.engine.edits import EditPlan
from ddpify.engine.program import Program
from ddpify.engine.syntax import walk
from ddpify.result import Options

SET_DEVICE_IN_EXPRESSION = Code(
    "DDP101",
    Severity.ERROR,
    "devices",
    "torch.cuda.set_device() used inside an expression, where it cannot be removed",
    "remove the call: under torchrun each process uses the GPU given by LOCAL_RANK",
)
VISIBLE_DEVICES = Code(
    "DDP102",
    Severity.WARNING,
    "devices",
    "the script sets CUDA_VISIBLE_DEVICES itself (removed when it is a plain assignment)",
    "set CUDA_VISIBLE_DEVICES in the launch environment instead",
)
SET_DEVICE_REMOVED = Code(
    "DDP103",
    Severity.WARNING,
    "devices",
    "the script's own torch.cuda.set_device() was removed: an option that chose the GPU no longer does",
    "choose GPUs with the launch environment (CUDA_VISIBLE_DEVICES, torchrun --nproc_per_node)",
)
CODES = (SET_DEVICE_IN_EXPRESSION, VISIBLE_DEVICES, SET_DEVICE_REMOVED)


@dataclass(frozen=True)
class Facts:
    gpu_numbers: tuple[cst.Integer, ...]  # ``device = 0`` later used as a device: this rank's GPU instead


def find(program: Program) -> Facts:
    return Facts(tuple(_Finder(program).gpu_numbers()))


class _Finder:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.index = program.index

    def gpu_numbers(self) -> Iterator[cst.Integer]:
        """``device = 0`` (``gpu_id = 0``) whose value reaches ``.to(...)`` / ``.cuda(...)`` as a device."""
        index = self.index
        for stmt in index.statements:
            small = stmt.body[0]
            if not (len(stmt.body) == 1 and isinstance(small, cst.Assign) and isinstance(small.value, cst.Integer)):
                continue
            ref = index.ref_of(small.targets[0].target, index.scope_of(stmt)) if len(small.targets) == 1 else None
            if ref is None:
                continue
            refs = index.downstream(ref)
            for other in refs:
                for scope in index.scopes_reading(other):
                    if any(self._used_as_device(read) for read in index.mentions(scope, other, scope)):
                        yield small.value
                        break
                else:
                    continue
                break

    def _used_as_device(self, read: cst.BaseExpression) -> bool:
        arg = self.index.parent(read)
        if not isinstance(arg, cst.Arg):
            return False
        call = self.index.parent(arg)
        if arg.keyword is not None:
            return arg.keyword.value == "device"
        return call.args[0] is arg and m.matches(call.func, m.Attribute(attr=m.Name("to") | m.Name("cuda")))


_CUDA_INDEX = re.compile(r"""^(?P<q>['"])cuda:\d+(?P=q)$""")


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    index = plan.index
    _gpu_numbers(facts, plan)
    for node in index.walk(index.module):
        if isinstance(node, cst.FormattedString) and _formats_cuda_index(node):
            quote = node.end
            plan.replace(node, lambda n, q=quote: cst.SimpleString(f"{q}cuda{q}", lpar=n.lpar, rpar=n.rpar))
            plan.change(node, f"{index.module.code_for_node(node)} -> {quote}cuda{quote}: this rank's GPU")
        elif isinstance(node, cst.SimpleString) and _CUDA_INDEX.match(node.value):
            quote = node.value[0]
            plan.replace(node, lambda n, q=quote: n.with_changes(value=f"{q}cuda{q}"))
            plan.change(node, f"{node.value} -> {quote}cuda{quote}: this rank's GPU")
        elif isinstance(node, cst.Call):
            _call(plan, node)
        elif isinstance(node, cst.AssignTarget) and m.matches(
            node.target, m.Subscript(slice=[m.SubscriptElement(m.Index(m.SimpleString()))])
        ):
            if node.target.slice[0].slice.value.evaluated_value == "CUDA_VISIBLE_DEVICES":
                stmt = index.statement_of(node)
                if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
                    plan.remove(stmt)
                    plan.report(
                        node,
                        VISIBLE_DEVICES,
                        "removed the script's own CUDA_VISIBLE_DEVICES: with it every rank would see only "
                        "those GPUs and ranks past them would fail; set it in the launch environment instead",
                    )
                else:
                    _visible_devices(plan, node)


def _gpu_numbers(facts: Facts, plan: EditPlan) -> None:
    for number in facts.gpu_numbers:
        local_rank = cst.parse_expression(f'int({plan.names.os}.environ.get("LOCAL_RANK", 0))')
        plan.replace(number, lambda n, r=local_rank: r)
        plan.change(number, f"GPU {number.value} -> this rank's GPU (LOCAL_RANK)")
        stmt = plan.index.statement_of(number)
        comment = stmt.trailing_whitespace.comment
        if comment is not None and "cuda" in comment.value.lower():  # "# cuda:0" no longer says what happens
            plan.replace(stmt, lambda n: n.with_changes(trailing_whitespace=cst.TrailingWhitespace()))


def _formats_cuda_index(node: cst.FormattedString) -> bool:
    """``f"cuda:{args.gpu}"``: a device string with a GPU index filled in."""
    parts = node.parts
    return (
        len(parts) == 2
        and isinstance(parts[0], cst.FormattedStringText)
        and parts[0].value == "cuda:"
        and isinstance(parts[1], cst.FormattedStringExpression)
        and node.start in ('f"', "f'")
    )


def _call(plan: EditPlan, call: cst.Call) -> None:
    index = plan.index
    names = index.qualified_names(call.func)
    if "torch.device" in names and len(call.args) == 2 and m.matches(call.args[0].value, m.SimpleString()):
        if call.args[0].value.evaluated_value == "cuda" and call.args[1].keyword in (None, "index"):
            plan.replace(call, lambda n: n.with_changes(args=[n.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)]))
            plan.change(call, 'torch.device("cuda", N) -> torch.device("cuda"): this rank\'s GPU')
    elif m.matches(call.func, m.Attribute(attr=m.Name("cuda"))) and call.args and call.args[0].keyword is None:
        plan.replace(call, lambda n: n.with_changes(args=n.args[1:]))
        plan.change(call, f".cuda({index.module.code_for_node(call.args[0].value)}) -> .cuda(): this rank's GPU")
    elif names & torch_api.SET_DEVICE:
        _set_device(plan, call)
    elif m.matches(call.func, m.Attribute(attr=m.Name("setdefault") | m.Name("update"))) and any(
        m.matches(n, m.SimpleString()) and "CUDA_VISIBLE_DEVICES" in n.value for n in walk(call)
    ):
        _visible_devices(plan, call)


def _set_device(plan: EditPlan, call: cst.Call) -> None:
    """The setup block already chose this rank's GPU: the script's own choice goes."""
    index = plan.index
    stmt = index.statement_of(call)
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and stmt.body[0].value is call):
        plan.report(
            call,
            SET_DEVICE_IN_EXPRESSION,
            "the script chooses its GPU with torch.cuda.set_device(); under torchrun each process "
            "must use the GPU given by LOCAL_RANK: remove this call",
        )
        return
    block = index.parent(stmt)
    owner = index.parent(block)
    if isinstance(owner, cst.If) and owner.orelse is None and len(block.body) == 1 and owner is not index.main_guard:
        plan.remove(owner)
    else:
        plan.remove(stmt)
    plan.report(
        call,
        SET_DEVICE_REMOVED,
        f"removed `{index.module.code_for_node(call)}`: each process now uses the GPU given by LOCAL_RANK, "
        "so an option that chose the GPU no longer does",
    )


def _visible_devices(plan: EditPlan, node: cst.CSTNode) -> None:
    plan.report(
        node,
        VISIBLE_DEVICES,
        "the script sets CUDA_VISIBLE_DEVICES itself: every rank then sees only those GPUs, and ranks "
        "past them fail; set it in the launch environment instead",
    )

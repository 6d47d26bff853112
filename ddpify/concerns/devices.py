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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, cast

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.diagnostics import Code, Severity
from ddpify.engine.edits import EditPlan
from ddpify.engine.index import Index
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
class GpuIndex:
    """A GPU index written into the script, dropped so that the rank's own GPU is used."""

    node: cst.SimpleString | cst.FormattedString | cst.Call | cst.BinaryOperation
    # "string": ``"cuda:0"``; "f-string": ``f"cuda:{gpu}"``; "formatted": ``"cuda:{}".format(gpu)``,
    # ``"cuda:%d" % gpu``, ``"cuda:" + str(gpu)``; "device": ``torch.device("cuda", gpu)``; "cuda": ``x.cuda(gpu)``
    kind: Literal["string", "f-string", "formatted", "device", "cuda"]


@dataclass(frozen=True)
class Facts:
    gpu_numbers: tuple[cst.Integer, ...]  # ``device = 0`` later used as a device: this rank's GPU instead
    gpu_indices: tuple[GpuIndex, ...]  # in source order
    removed: tuple[cst.BaseStatement, ...]  # ``torch.cuda.set_device(...)`` and ``CUDA_VISIBLE_DEVICES`` lines
    # ``os.environ["CUDA_VISIBLE_DEVICES"]`` read where the script's own assignment is removed
    visible_devices_reads: tuple[cst.Subscript, ...] = ()


def find(program: Program) -> Facts:
    finder = _Finder(program)
    gpu_numbers = tuple(finder.gpu_numbers())
    indices: list[GpuIndex] = []
    removed: list[cst.BaseStatement] = []
    index = program.index
    for node in index.nodes_of(cst.FormattedString, cst.SimpleString, cst.Call, cst.AssignTarget, cst.BinaryOperation):
        if isinstance(node, cst.FormattedString) and _formats_cuda_index(node):
            indices.append(GpuIndex(node, "f-string"))
        elif isinstance(node, (cst.Call, cst.BinaryOperation)) and _fills_cuda_index(node):
            indices.append(GpuIndex(node, "formatted"))
        elif isinstance(node, cst.SimpleString) and _CUDA_INDEX.match(node.value):
            element = index.parent(node)
            if isinstance(element, cst.DictElement) and element.key is node:
                continue  # ``map_location={"cuda:0": "cpu"}``: the GPU a checkpoint was saved from, matched as written
            if _an_option_choice(index, node):
                continue  # ``choices=["cpu", "cuda:0"]``: what a person may type, not a device in use
            indices.append(GpuIndex(node, "string"))
        elif isinstance(node, cst.Call):
            kind = finder.gpu_index_call(node)
            if kind is not None:
                indices.append(GpuIndex(node, kind))
            elif index.qualified_names(node.func) & torch_api.SET_DEVICE:
                removed.extend(finder.set_device(node))
            elif finder.sets_visible_devices(node):
                finder.report_visible_devices(node)
        elif isinstance(node, cst.AssignTarget) and _subscript_key(node.target) == "CUDA_VISIBLE_DEVICES":
            removed.extend(finder.visible_devices_assignment(node))
    reads = finder.visible_devices_reads() if any(_sets_visible_devices(stmt) for stmt in removed) else ()
    return Facts(gpu_numbers, tuple(indices), tuple(removed), tuple(reads))


def _an_option_choice(index: Index, node: cst.SimpleString) -> bool:
    """Whether ``node`` is one of the values of a ``choices=`` argument (argparse's ``add_argument``)."""
    element = index.parent(node)
    container = index.parent(element) if isinstance(element, cst.Element) else None
    arg = index.parent(container) if isinstance(container, cst.List | cst.Tuple | cst.Set) else None
    return isinstance(arg, cst.Arg) and arg.keyword is not None and arg.keyword.value == "choices"


def _sets_visible_devices(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(small, cst.Assign)
        and any(_subscript_key(target.target) == "CUDA_VISIBLE_DEVICES" for target in small.targets)
        for small in stmt.body
    )


_CUDA_INDEX = re.compile(r"""^(?P<q>['"])cuda:\d+(?P=q)$""")


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
            if any(
                self._used_as_device(read)
                for other in index.downstream(ref)
                for scope in index.scopes_reading(other)
                for read in index.mentions(scope, other)
            ):
                yield small.value

    def _used_as_device(self, read: cst.BaseExpression) -> bool:
        arg = self.index.parent(read)
        if not isinstance(arg, cst.Arg):
            return False
        call = self.index.parent(arg)
        if arg.keyword is not None:
            return arg.keyword.value == "device"
        return (
            isinstance(call, cst.Call)
            and call.args[0] is arg
            and m.matches(call.func, m.Attribute(attr=m.Name("to") | m.Name("cuda")))
            and not self._own_method(call)
        )

    def gpu_index_call(self, call: cst.Call) -> Literal["device", "cuda"] | None:
        """``torch.device("cuda", N)`` or ``x.cuda(N)``."""
        if "torch.device" in self.index.qualified_names(call.func) and len(call.args) == 2:
            first, second = call.args
            if isinstance(first.value, cst.SimpleString) and first.value.evaluated_value == "cuda":
                return "device" if second.keyword is None else None
            return None
        if (
            m.matches(call.func, m.Attribute(attr=m.Name("cuda")))
            and call.args
            and call.args[0].keyword is None
            and not call.args[0].star
            and not self._own_method(call)
        ):
            return "cuda"
        return None

    def _own_method(self, call: cst.Call) -> bool:
        """``self.cuda(*items)``: a method of the program's own class, not torch's ``.cuda(device)``."""
        callee = self.index.resolve_callee(call, self.index.scope_of(call))
        return callee is not None and callee[0].name.value == "cuda"

    def set_device(self, call: cst.Call) -> Iterator[cst.BaseStatement]:
        """The setup block already chose this rank's GPU: the script's own choice goes (the line, or its ``if``)."""
        index = self.index
        stmt = index.statement_of(call)
        if not (
            isinstance(stmt, cst.SimpleStatementLine)
            and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr)
            and stmt.body[0].value is call
        ):
            self.program.report(
                call,
                SET_DEVICE_IN_EXPRESSION,
                "the script chooses its GPU with torch.cuda.set_device(); under torchrun each process "
                "must use the GPU given by LOCAL_RANK: remove this call",
            )
            return
        block = index.parent(stmt)
        owner = index.parent(block)
        if (
            isinstance(block, cst.IndentedBlock)
            and isinstance(owner, cst.If)
            and owner.orelse is None
            and len(block.body) == 1
            and owner is not index.main_guard
        ):
            yield owner
        else:
            yield stmt
        self.program.report(
            call,
            SET_DEVICE_REMOVED,
            f"removed `{index.module.code_for_node(call)}`: each process now uses the GPU given by LOCAL_RANK, "
            "so an option that chose the GPU no longer does",
        )

    def visible_devices_assignment(self, target: cst.AssignTarget) -> Iterator[cst.BaseStatement]:
        """``os.environ["CUDA_VISIBLE_DEVICES"] = ...`` alone on its line goes; elsewhere it is reported."""
        stmt = self.index.statement_of(target)
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
            yield stmt
            self.program.report(
                target,
                VISIBLE_DEVICES,
                "removed the script's own CUDA_VISIBLE_DEVICES: with it every rank would see only "
                "those GPUs and ranks past them would fail; set it in the launch environment instead",
            )
        else:
            self.report_visible_devices(target)

    def visible_devices_reads(self) -> Iterator[cst.Subscript]:
        """``os.environ["CUDA_VISIBLE_DEVICES"]`` read as a value (``len(...split(","))``): with the script's
        own assignment gone it is unset unless the launch sets it, and the read would raise KeyError."""
        index = self.index
        for node in index.nodes_of(cst.Subscript):
            assert isinstance(node, cst.Subscript)
            holder = index.parent(node)
            if (
                _subscript_key(node) == "CUDA_VISIBLE_DEVICES"
                and not isinstance(holder, (cst.AssignTarget, cst.Del))
                and "os.environ" in index.qualified_names(node.value)
            ):
                yield node

    def sets_visible_devices(self, call: cst.Call) -> bool:
        """``os.environ.setdefault("CUDA_VISIBLE_DEVICES", ...)``, ``os.environ.update(CUDA_VISIBLE_DEVICES=...)``."""
        return m.matches(call.func, m.Attribute(attr=m.Name("setdefault") | m.Name("update"))) and any(
            isinstance(n, cst.SimpleString) and "CUDA_VISIBLE_DEVICES" in n.value for n in walk(call)
        )

    def report_visible_devices(self, node: cst.CSTNode) -> None:
        self.program.report(
            node,
            VISIBLE_DEVICES,
            "the script sets CUDA_VISIBLE_DEVICES itself: every rank then sees only those GPUs, and ranks "
            "past them fail; set it in the launch environment instead",
        )


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    _gpu_numbers(facts, plan)
    code = plan.index.module.code_for_node
    for gpu_index in facts.gpu_indices:
        node = gpu_index.node
        if isinstance(node, (cst.FormattedString, cst.SimpleString)):
            quote: str = node.end if isinstance(node, cst.FormattedString) else node.value[0]
            plan.replace(node, _plain_cuda(quote))
            written = code(node) if isinstance(node, cst.FormattedString) else node.value
            plan.change(node, f"{written} -> {quote}cuda{quote}: this rank's GPU")
        elif gpu_index.kind == "formatted":
            string = node.left if isinstance(node, cst.BinaryOperation) else cast(cst.Attribute, node.func).value
            quote = cast(cst.SimpleString, string).value[0]
            plan.replace(node, _plain_cuda(quote))
            plan.change(node, f"{code(node)} -> {quote}cuda{quote}: this rank's GPU")
        elif gpu_index.kind == "device":
            plan.replace(node, _first_argument_only)
            plan.change(node, 'torch.device("cuda", N) -> torch.device("cuda"): this rank\'s GPU')
        else:
            plan.replace(node, _without_first_argument)
            plan.change(node, f".cuda({code(cast(cst.Call, node).args[0].value)}) -> .cuda(): this rank's GPU")
    for stmt in facts.removed:
        plan.remove(stmt)
    for read in facts.visible_devices_reads:
        environ, key = code(read.value), code(read.slice[0].slice)
        plan.replace(read, _constant(cst.parse_expression(f'{environ}.get({key}, "0")')))
        plan.change(
            read,
            f'{environ}[{key}] -> {environ}.get({key}, "0"): the launch sets it now, if anything; '
            "unset, each process drives the one GPU of its LOCAL_RANK",
        )


def _gpu_numbers(facts: Facts, plan: EditPlan) -> None:
    for number in facts.gpu_numbers:
        local_rank = cst.parse_expression(f'int({plan.names.os}.environ.get("LOCAL_RANK", 0))')
        plan.replace(number, _constant(local_rank))
        plan.change(number, f"GPU {number.value} -> this rank's GPU (LOCAL_RANK)")
        stmt = plan.index.statement_of(number)
        comment = stmt.trailing_whitespace.comment if isinstance(stmt, cst.SimpleStatementLine) else None
        if comment is not None and "cuda" in comment.value.lower():  # "# cuda:0" no longer says what happens
            plan.replace(stmt, _without_trailing_comment)


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


def _fills_cuda_index(node: cst.Call | cst.BinaryOperation) -> bool:
    """``"cuda:{}".format(gpu)``, ``"cuda:%d" % gpu``, ``"cuda:" + str(gpu)``: a device string with a GPU
    index filled in by the older spellings of an f-string."""
    if isinstance(node, cst.Call):
        func = node.func
        return (
            isinstance(func, cst.Attribute)
            and func.attr.value == "format"
            and isinstance(func.value, cst.SimpleString)
            and func.value.evaluated_value in ("cuda:{}", "cuda:{0}")
            and len(node.args) == 1
        )
    left = node.left
    if not isinstance(left, cst.SimpleString):
        return False
    if isinstance(node.operator, cst.Modulo):
        return left.evaluated_value in ("cuda:%d", "cuda:%s", "cuda:%i")
    return isinstance(node.operator, cst.Add) and left.evaluated_value == "cuda:"


def _subscript_key(target: cst.BaseExpression) -> str | None:
    """``"K"`` for a target ``x["K"]``."""
    if isinstance(target, cst.Subscript) and len(target.slice) == 1:
        element = target.slice[0].slice
        if isinstance(element, cst.Index) and isinstance(element.value, cst.SimpleString):
            key = element.value.evaluated_value
            return key if isinstance(key, str) else None
    return None


def _plain_cuda(quote: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    def plain(node: cst.CSTNode) -> cst.CSTNode:
        string = cast(cst.SimpleString | cst.FormattedString | cst.Call | cst.BinaryOperation, node)
        return cst.SimpleString(f"{quote}cuda{quote}", lpar=string.lpar, rpar=string.rpar)

    return plain


def _first_argument_only(node: cst.CSTNode) -> cst.CSTNode:
    call = cast(cst.Call, node)
    return call.with_changes(args=[call.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)])


def _without_first_argument(node: cst.CSTNode) -> cst.CSTNode:
    call = cast(cst.Call, node)
    return call.with_changes(args=call.args[1:])


def _constant(value: cst.BaseExpression) -> Callable[[cst.CSTNode], cst.CSTNode]:
    return lambda _: value


def _without_trailing_comment(node: cst.CSTNode) -> cst.CSTNode:
    return cast(cst.SimpleStatementLine, node).with_changes(trailing_whitespace=cst.TrailingWhitespace())

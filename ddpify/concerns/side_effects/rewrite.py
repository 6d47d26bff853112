"""The side_effects concern's rewrite: output on rank 0, trackers made there, files written once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.concerns import checkpoints
from ddpify.concerns.side_effects.facts import _TERMINAL, MODULE_OUTPUT_KEPT, Facts
from ddpify.concerns.side_effects.finder import _callee_name
from ddpify.engine import uniformity
from ddpify.engine.edits import EditPlan, Statement, fresh, statement, with_comma
from ddpify.result import Options


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    index = plan.index
    dist = plan.names.dist
    if not options.module_output:
        facts = _entry_output_only(facts, plan)
    gated = {stmt for stmt, _ in facts.outputs}
    if facts.tracker_values:
        helper = uniformity.same_on_every_rank(plan)
        for value in facts.tracker_values:
            owner = index.module.code_for_node(value.value)
            plan.replace(value, _shared_from_rank_zero(helper, owner))
            plan.change(value, f"`{owner}` exists on rank 0 only: every rank takes rank 0's `{value.attr.value}`")
    for call in facts.prompts:
        helper = uniformity.same_on_every_rank(plan)
        rank_zero = f"{dist}.get_rank() == 0"
        if plan.without_group(call):  # another script may run it without a group: it asks, as before
            rank_zero = f"not {dist}.is_initialized() or {rank_zero}"
        plan.replace(call, _asked_on(helper, rank_zero))
        plan.change(
            call,
            "`input()` is asked on global rank 0 only, and every rank takes its answer (the others would read "
            "an empty stdin, or wait)",
        )
    for stmt in facts.read_back:
        checkpoints.barrier_after(plan, stmt)
        plan.change(stmt, "dist.barrier() after the write: the file is read back later")
    for line in facts.removals:
        if line in plan.rank_zero_only:  # (one that a save's own removal already put there)
            continue
        plan.on_rank_zero(line)
        checkpoints.barrier_after(plan, line, "the others wait until rank 0 has removed it")
        plan.change(line, "removed on global rank 0 only (the others wait for it)")
    for stmt in facts.fresh_folders:
        plan.on_rank_zero(stmt)
        checkpoints.barrier_after(plan, stmt, "the others use the folder rank 0 just made")
        plan.change(stmt, "the run's own folder is made on global rank 0 only (the others wait for it)")
    reported: set[tuple[cst.Module, str]] = set()  # the first output of each kind in each file
    for stmt, kind in facts.outputs:
        if any(ancestor in gated for ancestor in index.ancestors(stmt)):
            continue
        plan.on_rank_zero(stmt)
        if (index.module_of(stmt), kind) not in reported:
            reported.add((index.module_of(stmt), kind))
            plan.change(stmt, f"{kind} on global rank 0 only")
    taken: set[str] = set()
    edited: dict[str, cst.BaseExpression] = {}  # each hoisted call as the other concerns edit it
    for call in facts.hoisted:
        stmt = index.statement_of(call)
        name = fresh(f"{_callee_name(call)}_result", index.identifiers | taken)
        taken.add(name)

        def keep(node: cst.CSTNode, name: str = name) -> cst.CSTNode:
            edited[name] = cast(cst.BaseExpression, node)
            return cst.Name(name)

        def assign(name: str = name, leading: Sequence[cst.EmptyLine] = statement(stmt).leading_lines) -> Statement:
            value = edited[name]
            return cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], value)], leading)

        plan.insert_before_built(stmt, assign)
        plan.replace(stmt, lambda n: statement(n).with_changes(leading_lines=()))
        plan.replace(call, keep)
        plan.change(call, f"compute `{name}` on every rank, output it on rank 0")
    for call in facts.trackers:
        plan.replace(call, lambda n: cst.IfExp(test=plan.rank_zero, body=cast(cst.Call, n), orelse=cst.Name("None")))
        plan.change(call, f"{index.module.code_for_node(call.func)} created on global rank 0 only (None elsewhere)")
    for call in facts.shared_configs:
        _share_config(plan, call)
    for call in facts.progress_bars:
        disable = cst.Arg(
            keyword=cst.Name("disable"),
            value=cst.parse_expression(plan.with_group(call, f"{dist}.get_rank() != 0")),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        plan.replace(call, _append_argument(disable))
        plan.change(call, "progress bar shown on global rank 0 only")
    ungrouped = {stmt for stmt, _ in facts.ungrouped}
    test = cst.parse_expression(f"not {dist}.is_initialized() or {dist}.get_rank() == 0")
    for stmt, kind in facts.ungrouped:
        if not any(ancestor in ungrouped for ancestor in index.ancestors(stmt)):
            plan.replace(stmt, _under(test))
            plan.change(stmt, f"{kind} on global rank 0 only, once the process group exists (it also runs before)")
    synced = any(plan.index.is_call_to(c, _FSYNC) for c in plan.index.calls)
    for call in facts.devnull_opens:
        # inside another expression (``open(path, "w") if path else None``) the choice keeps its own parentheses
        alone = isinstance(plan.index.parent(call), (cst.Assign, cst.WithItem, cst.Arg, cst.Return, cst.Expr))
        if synced and _temporary_file_args(call) is not None:
            # ``os.fsync`` refuses os.devnull (EINVAL): the other ranks write to a file that vanishes on close
            plan.need_import("tempfile")
            plan.replace(call, _parenthesized(_to_temporary_off_rank_zero(plan), alone))
            plan.change(call, "the file is written on global rank 0 only (the other ranks write to a temporary file)")
            continue
        plan.replace(call, _parenthesized(_to_devnull_off_rank_zero(plan), alone))
        plan.change(call, "the file is written on global rank 0 only (the other ranks write to os.devnull)")
    for file_name in facts.log_files:
        plan.replace(file_name, _file_off_rank_zero(plan))
        plan.change(file_name, "the log file is written on global rank 0 only (the other ranks log to os.devnull)")
    for call in facts.makedirs:
        on_a_path = not plan.index.is_call_to(call, torch_api.MAKEDIRS)  # ``output_dir.mkdir()`` of pathlib
        if m.matches(call.func, m.Attribute(attr=m.Name("mkdir"))) and not on_a_path:
            plan.replace(call, _call_makedirs)
        elif isinstance(call.func, cst.Name) and plan.index.is_call_to(call, frozenset({"os.mkdir"})):
            # ``from os import mkdir``: ``mkdir(path, exist_ok=True)`` is a TypeError; os.makedirs takes it
            plan.replace(call.func, _os_makedirs(plan.names.os))
            plan.need_import("os", asname=None if plan.names.os == "os" else plan.names.os)
        exist_ok = cst.Arg(
            keyword=cst.Name("exist_ok"),
            value=cst.Name("True"),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        plan.replace(call, _append_argument(exist_ok))
        made = "Path.mkdir" if on_a_path else "os.makedirs"
        plan.change(call, f"{made}(..., exist_ok=True): ranks creating the same folder do not race")


def _entry_output_only(facts: Facts, plan: EditPlan) -> Facts:
    """The facts without the terminal output of the program's other modules, reported once per module."""
    index = plan.index

    def kept(node: cst.CSTNode, kind: str = "print") -> bool:
        return kind in _TERMINAL and index.module_of(node) is not index.module

    left: list[cst.CSTNode] = [stmt for stmt, kind in (*facts.outputs, *facts.ungrouped) if kept(stmt, kind)]
    left += [call for call in facts.progress_bars if kept(call)]
    first: dict[cst.Module, cst.CSTNode] = {}
    for node in sorted(left, key=lambda n: index.order[n]):
        first.setdefault(index.module_of(node), node)
    for node in first.values():
        plan.report(
            node,
            MODULE_OUTPUT_KEPT,
            f"output to the terminal in {index.path_of(node)} stays on every rank, since one output file cannot hold "
            "that module: convert with --in-place or -o DIR/ to put it on rank 0 too",
        )
    gone = {stmt for stmt in left if isinstance(stmt, cst.BaseStatement)}
    return replace(
        facts,
        outputs=tuple((stmt, kind) for stmt, kind in facts.outputs if stmt not in gone),
        ungrouped=tuple((stmt, kind) for stmt, kind in facts.ungrouped if stmt not in gone),
        hoisted=tuple(call for call in facts.hoisted if index.statement_of(call) not in gone),
        progress_bars=tuple(call for call in facts.progress_bars if call not in left),
    )


SHARED_CONFIG = """\
{config} = {same}(dict({wandb}.config) if {dist}.get_rank() == 0 else None)
if {dist}.get_rank() != 0:  # a run that logs nothing, with rank 0's settings (a sweep's too) in {wandb}.config
    {wandb}.init(mode="disabled", config={config})
"""


def _share_config(plan: EditPlan, call: cst.Call) -> None:
    """After rank 0's ``wandb.init(...)``: the other ranks read ``wandb.config`` too (the batch size, the
    learning rate), and find there what rank 0's run holds."""
    index = plan.index
    wandb = index.module_of(call).code_for_node(cast(cst.Attribute, call.func).value)
    config = fresh("run_config", index.identifiers)
    same = uniformity.same_on_every_rank(plan)
    code = SHARED_CONFIG.format(config=config, same=same, wandb=wandb, dist=plan.names.dist)
    stmt = index.statement_of(call)
    plan.insert_after(stmt, *(statement(s) for s in cst.parse_module(code).body))
    plan.change(call, f"{wandb}.config is read on every rank: the others get rank 0's, in a run that logs nothing")


def _shared_from_rank_zero(helper: str, owner: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    def replace(node: cst.CSTNode) -> cst.CSTNode:
        value = cst.Module([]).code_for_node(node)
        return cst.parse_expression(f"{helper}({value} if {owner} is not None else None)")

    return replace


def _asked_on(helper: str, rank_zero: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    def replace(node: cst.CSTNode) -> cst.CSTNode:
        asked = cst.Module([]).code_for_node(node)
        return cst.parse_expression(f"{helper}({asked} if {rank_zero} else None)")

    return replace


def _name(name: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    return lambda _: cst.Name(name)


def _append_argument(arg: cst.Arg) -> Callable[[cst.CSTNode], cst.CSTNode]:
    def append(node: cst.CSTNode) -> cst.CSTNode:
        call = cast(cst.Call, node)
        return call.with_changes(args=[*with_comma(call.args), arg])

    return append


def _under(test: cst.BaseExpression) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """``stmt`` -> ``if test: stmt``."""

    def wrap(node: cst.CSTNode) -> cst.CSTNode:
        stmt = statement(node)
        body = cst.IndentedBlock(body=[stmt.with_changes(leading_lines=())])
        return cst.If(test=test, body=body, leading_lines=stmt.leading_lines)

    return wrap


def _to_devnull_off_rank_zero(plan: EditPlan) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """``open(path, "w")`` -> ``open(path, "w") if dist.get_rank() == 0 else open(os.devnull, "w")``."""

    def replace(node: cst.CSTNode) -> cst.CSTNode:
        call = cast(cst.Call, node)
        first, *rest = call.args
        devnull = call.with_changes(
            args=[first.with_changes(value=cst.parse_expression(f"{plan.names.os}.devnull")), *rest]
        )
        return cst.IfExp(test=plan.rank_zero, body=call, orelse=devnull)

    return replace


def _parenthesized(replace: Callable[[cst.CSTNode], cst.CSTNode], alone: bool) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """``replace``, its result in parentheses unless it stands alone (a value assigned, an argument)."""
    if alone:
        return replace

    def wrapped(node: cst.CSTNode) -> cst.CSTNode:
        new = cast(cst.IfExp, replace(node))
        return new.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])

    return wrapped


_FSYNC = frozenset({"os.fsync"})
# What ``open`` and ``tempfile.TemporaryFile`` both take, by keyword.
_FILE_KEYWORDS = frozenset({"mode", "buffering", "encoding", "newline", "errors"})


def _temporary_file_args(call: cst.Call) -> list[cst.Arg] | None:
    """The arguments of ``open(path, ...)`` that ``tempfile.TemporaryFile`` takes as they are (the mode
    and buffering by position, the rest by keyword); None if some other is given."""
    rest = list(call.args[1:])
    positional = [a for a in rest if a.keyword is None]
    if len(positional) > 2 or any(a.star for a in rest):
        return None
    if any(a.keyword is not None and a.keyword.value not in _FILE_KEYWORDS for a in rest):
        return None
    return rest


def _to_temporary_off_rank_zero(plan: EditPlan) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """``open(path, "w")`` -> ``open(path, "w") if dist.get_rank() == 0 else tempfile.TemporaryFile("w")``."""

    def replace(node: cst.CSTNode) -> cst.CSTNode:
        call = cast(cst.Call, node)
        args = _temporary_file_args(call) or []
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        temporary = cst.Call(func=cst.parse_expression("tempfile.TemporaryFile"), args=args)
        return cst.IfExp(test=plan.rank_zero, body=call, orelse=temporary)

    return replace


def _file_off_rank_zero(plan: EditPlan) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """``FileHandler(path)`` -> ``FileHandler(path if dist.get_rank() == 0 else os.devnull)``."""

    def replace(node: cst.CSTNode) -> cst.CSTNode:
        arg = cast(cst.Arg, node)
        devnull = cst.parse_expression(f"{plan.names.os}.devnull")
        return arg.with_changes(value=cst.IfExp(plan.rank_zero, arg.value, devnull))

    return replace


def _os_makedirs(os_name: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """``mkdir`` (imported from os) -> ``os.makedirs``."""
    return lambda _: cst.Attribute(cst.Name(os_name), cst.Name("makedirs"))


def _call_makedirs(node: cst.CSTNode) -> cst.CSTNode:
    """``os.mkdir(...)`` -> ``os.makedirs(...)``."""
    call = cast(cst.Call, node)
    return call.with_changes(func=cast(cst.Attribute, call.func).with_changes(attr=cst.Name("makedirs")))

"""Text batchified by the script's own function: each rank keeps its own ``bsz`` streams of it.

The finder recognises ``data = batchify(tokens, bsz)`` (``data.view(bsz, -1)``, transposed or not); the
rewrite batchifies for all ranks at once and narrows the result to this rank's streams.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from ddpify.concerns.tensors.lineage import Refused, _code, _Lineage, _value_of
from ddpify.concerns.tensors.samples import _SampleFinder
from ddpify.engine.edits import EditPlan, statement
from ddpify.engine.index import Ref
from ddpify.engine.syntax import argument, parameter_names


@dataclass(frozen=True)
class Streams:
    """``data = batchify(tokens, bsz)``: columns (or rows) of contiguous text; each rank keeps ``bsz`` of them."""

    stmt: cst.SimpleStatementLine  # ``data = batchify(tokens, bsz)``
    name: str  # ``data``
    size: cst.BaseExpression  # ``bsz`` as the call passes it
    dim: int  # the dimension that holds the streams


class _StreamFinder(_SampleFinder):
    """A tensor of contiguous text the training step reads, and the batch size its batchify takes."""

    def _streams(self, lineage: _Lineage) -> Streams | None:
        """A tensor the training step reads that the script's own ``batchify(data, bsz)`` made."""
        index = self.index
        found: dict[Ref, tuple[cst.Assign | cst.AugAssign | cst.AnnAssign, cst.Arg, int]] = {}
        for leaf in lineage.leaves:
            ref = index.ref_of(leaf, index.scope_of(leaf))
            assignments = [a for a in self._assignments(ref) if index.after(leaf, a)] if ref is not None else []
            if ref is None or not assignments:
                continue
            last = max(assignments, key=lambda a: index.order[a])
            value = _value_of(last, ref)
            shape = self._batchified(value) if isinstance(value, cst.Call) else None
            if shape is not None:
                found[ref] = (last, *shape)
        if not found:
            return None
        if len(found) > 1:
            names = ", ".join(f"`{ref.path}`" for ref in found)
            raise Refused(index.module, f"the training step reads several batchified tensors ({names})")
        ((ref, (assignment, size, dim)),) = found.items()
        stmt = index.statement_of(assignment)
        if (
            len(self._assignments(ref)) != 1
            or not isinstance(stmt, cst.SimpleStatementLine)
            or len(stmt.body) != 1
            or not isinstance(assignment, cst.Assign)
            or len(assignment.targets) != 1
            or not isinstance(assignment.targets[0].target, cst.Name)
        ):
            raise Refused(assignment, f"`{ref.path}` is batchified in a way ddpify cannot extend to every rank")
        if not isinstance(size.value, (cst.Name, cst.Attribute, cst.Integer)):
            raise Refused(size, f"the batch size `{_code(index, size.value)}` is not a plain name or number")
        if self.setup.runs_before_setup(index, stmt):
            raise Refused(stmt, "the data is batchified before the process group is set up (at import time)")
        for leaf in lineage.leaves:
            if index.ref_of(leaf, index.scope_of(leaf)) != ref and self._data_ref(leaf) is not None:
                raise Refused(leaf, f"the training step reads `{leaf.value}` beside the batchified `{ref.path}`")
        return Streams(stmt, ref.path, size.value, dim)

    def _batchified(self, call: cst.Call) -> tuple[cst.Arg, int] | None:
        """For a call to the script's ``batchify(data, bsz)`` -- ``data.view(bsz, -1)``, then ``.t()`` or not, or
        ``corpus.get_data(path, bsz)`` that ends with ``ids.view(bsz, -1)`` --
        the argument that gives the number of streams, and the dimension they end up in."""
        index = self.index
        scope = index.scope_of(call)
        # ``batchify(tokens, bsz)``, or a method of a corpus object: ``corpus.get_data(path, bsz)``
        callee = index.runs(call, scope)
        if callee is None:
            return None
        function, implicit = callee
        names = parameter_names(function)[implicit:]
        found: list[tuple[int, int]] = []
        for node in index.walk(function.body):
            if not (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and node.func.attr.value in ("view", "reshape")
                and len(node.args) == 2
                and isinstance(node.args[0].value, cst.Name)
                and node.args[0].value.value in names
                and isinstance(node.args[1].value, cst.UnaryOperation)
            ):
                continue
            after = index.parent(node)
            outer = index.parent(after)
            transposed = (isinstance(after, cst.Attribute) and after.attr.value == "T") or (
                isinstance(after, cst.Attribute)
                and isinstance(outer, cst.Call)
                and (
                    (after.attr.value == "t" and not outer.args)
                    or (after.attr.value == "transpose" and [_code(index, a.value) for a in outer.args] == ["0", "1"])
                )
            )
            found.append((names.index(node.args[0].value.value), 1 if transposed else 0))
        if len(found) != 1:
            return None
        position, dim = found[0]
        size = argument(call, names[position], position)
        return (size, dim) if size is not None else None


def _replaced_by(code: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A replacement by the expression ``code``."""
    return lambda _: cst.parse_expression(code)


def rewrite_streams(streams: Streams, plan: EditPlan) -> None:
    """Batchify for all ranks at once, then keep this rank's own streams."""
    size = plan.index.module.code_for_node(streams.size)
    rank = plan.rank(streams.stmt)
    plan.replace(streams.size, _replaced_by(f"{size} * {plan.world_size(streams.stmt)}"))
    own = f"{streams.name}.narrow({streams.dim}, {rank} * {size}, {size})"
    if streams.dim == 1:  # columns of a contiguous tensor are not contiguous
        own += ".contiguous()"
    line = statement(cst.parse_statement(f"{streams.name} = {own}\n"))
    keep = f"# Each rank keeps {size} of the streams, each a contiguous run of the data as before."
    plan.insert_after(streams.stmt, line.with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(keep))]))
    plan.change(
        streams.stmt,
        f"batchified `{streams.name}`: made for all ranks at once ({size} x world_size streams), each rank keeps "
        f"its own {size}, so every rank takes the same steps over contiguous text; the global batch is "
        "world_size times larger",
    )

"""Annotated assignments, read as the plain assignments Python runs them as.

Python runs ``x: T = value`` as ``x = value`` (inside a function the annotation
is not even evaluated). Typed training scripts are common, and a concern that
matches ``cst.Assign`` alone would convert a typed script otherwise than its
untyped twin: lose a broadcast, refuse a sampler, miss a tracker. Rather than
every question handling both forms, :func:`lowered` gives the analysis a tree
where each annotated assignment with a value is a plain ``cst.Assign`` whose one
target keeps the annotation (:class:`AssignTarget`). That target prints the
annotation back, so the tree prints the source byte for byte, positions are
those of the source, and an edit that keeps the target keeps the annotation.

An annotation alone (``x: int``) binds nothing and stays as it is.
``benchmarks/annotated_twins.py`` checks the property on every fixture, trial
and example script.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from libcst._nodes.internal import CodegenState, visit_required


@dataclass(frozen=True, eq=False, kw_only=True)
class AssignTarget(cst.AssignTarget):
    """The target of ``x: T = value``, read as the one target of ``x = value``; prints ``x: T =``.

    The class keeps libcst's name: visitors and matchers dispatch on it."""

    annotation: cst.Annotation

    def _visit_and_replace_children(self, visitor: cst.CSTVisitorT) -> AssignTarget:
        return AssignTarget(
            target=visit_required(self, "target", self.target, visitor),
            annotation=visit_required(self, "annotation", self.annotation, visitor),
            whitespace_before_equal=visit_required(
                self, "whitespace_before_equal", self.whitespace_before_equal, visitor
            ),
            whitespace_after_equal=visit_required(self, "whitespace_after_equal", self.whitespace_after_equal, visitor),
        )

    def _codegen_impl(self, state: CodegenState) -> None:
        with state.record_syntactic_position(self):
            self.target._codegen(state)
        self.annotation._codegen(state, default_indicator=":")
        self.whitespace_before_equal._codegen(state)
        state.add_token("=")
        self.whitespace_after_equal._codegen(state)


_NOT_STATEMENTS = (cst.BaseExpression, cst.BaseSmallStatement, cst.Decorator, cst.Parameters)


# The fields through which a statement holds statements (blocks, branches, handlers, cases)
_BLOCKS = ("body", "orelse", "handlers", "finalbody", "cases")


def _paths(node: cst.CSTNode, path: list[cst.CSTNode], found: set[cst.CSTNode]) -> None:
    """Adds to ``found`` each annotated assignment with a value under ``node`` and the nodes on the way to
    it. Reads the statement fields directly: libcst's visitors would rebuild every node they pass."""
    if isinstance(node, cst.AnnAssign):
        if node.value is not None:
            found.update(path)
            found.add(node)
        return
    if isinstance(node, _NOT_STATEMENTS):
        return
    path.append(node)
    for name in _BLOCKS:
        held = getattr(node, name, None)
        if isinstance(held, cst.CSTNode):
            _paths(held, path, found)
        elif isinstance(held, (list, tuple)):
            for child in held:
                _paths(child, path, found)
    path.pop()


class _Lower(cst.CSTTransformer):
    def __init__(self, on_path: set[cst.CSTNode]) -> None:
        super().__init__()
        self.on_path = on_path

    def on_visit(self, node: cst.CSTNode) -> bool:
        return node in self.on_path and not isinstance(node, _NOT_STATEMENTS)

    def leave_AnnAssign(self, original_node: cst.AnnAssign, updated_node: cst.AnnAssign) -> cst.AnnAssign | cst.Assign:
        node = updated_node
        if node.value is None:
            return node
        equal = node.equal
        before, after = (
            (equal.whitespace_before, equal.whitespace_after)
            if isinstance(equal, cst.AssignEqual)
            else (cst.SimpleWhitespace(" "), cst.SimpleWhitespace(" "))
        )
        if not isinstance(before, cst.SimpleWhitespace) or not isinstance(after, cst.SimpleWhitespace):
            return node  # not in the tree libcst parses from a statement; kept as written
        target = AssignTarget(
            target=node.target,
            annotation=node.annotation,
            whitespace_before_equal=before,
            whitespace_after_equal=after,
        )
        return cst.Assign(targets=[target], value=node.value, semicolon=node.semicolon)


def lowered(module: cst.Module) -> cst.Module:
    """``module`` with each ``x: T = value`` read as ``x = value`` (printing as it was written); ``module``
    itself where it holds none. Only the statements around them are rebuilt."""
    on_path: set[cst.CSTNode] = set()
    _paths(module, [], on_path)
    return module.visit(_Lower(on_path)) if on_path else module

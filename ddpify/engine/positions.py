"""Where nodes start in the source, computed for the few nodes that are reported.

libcst's ``PositionProvider`` records a range for every node of the tree,
which costs about twice parsing and printing the script; ddpify needs the
start of a few dozen nodes (diagnostics and changes). :func:`locate` prints
the module once, noting only when each wanted node starts, and turns those
offsets into lines and columns the way ``PositionProvider`` counts them
(syntactic starts: leading blank lines, indentation and comments excluded).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import accumulate

import libcst as cst
from libcst._nodes.internal import CodegenState

_NEWLINE = re.compile(r"\r\n?|\n")


class _Locating(CodegenState):
    """Prints the module (into ``tokens``, as libcst does) and notes the token at which each wanted node starts."""

    def __init__(self, module: cst.Module, wanted: set[cst.CSTNode]) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.wanted = wanted
        self.starts: dict[cst.CSTNode, int] = {}
        self.entered: dict[cst.CSTNode, int] = {}

    def before_codegen(self, node: cst.CSTNode) -> None:
        if node in self.wanted:
            self.entered[node] = len(self.tokens)

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self.entered.pop(node, None)
        if start is not None and node not in self.starts:  # a syntactic start, if recorded, wins
            self.starts[node] = start

    @contextmanager
    def record_syntactic_position(
        self,
        node: cst.CSTNode,
        *,
        start_node: cst.CSTNode | None = None,
        end_node: cst.CSTNode | None = None,
    ) -> Iterator[None]:
        if node not in self.wanted:
            yield
            return
        if start_node is not None:
            self.wanted.add(start_node)
        start = len(self.tokens)
        try:
            yield
        finally:
            self.starts[node] = self.starts[start_node] if start_node is not None else start


def locate(module: cst.Module, nodes: set[cst.CSTNode]) -> dict[cst.CSTNode, tuple[int, int]]:
    """Line and column (both 1-based) where each of ``nodes`` starts."""
    state = _Locating(module, set(nodes))
    module._codegen(state)
    offsets = [0, *accumulate(len(token) for token in state.tokens)]
    code = "".join(state.tokens)
    line_starts = [0, *(match.end() for match in _NEWLINE.finditer(code))]
    found: dict[cst.CSTNode, tuple[int, int]] = {}
    for node in nodes:
        offset = offsets[state.starts[node]]
        line = bisect_right(line_starts, offset)
        found[node] = (line, offset - line_starts[line - 1] + 1)
    return found

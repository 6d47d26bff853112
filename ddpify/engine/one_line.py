"""One-line bodies, read as the blocks Python runs them as.

``if os.path.exists(path): os.remove(path)`` runs as its two-line twin does,
yet libcst holds the body as a ``SimpleStatementSuite``: no statement line,
no block. A concern that looks for statements (a save, a file removed, a
loader built) would not see the one-line form, and the edits that put a
statement on rank 0 or add one after it need a block to work in. Rather than
every question handling both forms, :func:`lowered` gives the analysis a tree
where each one-line body is an indented block of one statement line per small
statement (:class:`IndentedBlock`). That block prints the line as it was
written while its statements are one simple statement each, as many as
before: the tree prints the source byte for byte, positions are those of the
source, and an edit inside the line (``x.cuda()`` made ``x.to(device)``) keeps
it one line. An edit that adds or wraps statements prints the block indented,
as a reader would write it.

``benchmarks/one_line_twins.py`` checks the property on every fixture, trial
and example script.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import libcst as cst
from libcst._nodes.internal import CodegenState, visit_body_sequence, visit_required, visit_sequence


@dataclass(frozen=True, eq=False, kw_only=True)
class IndentedBlock(cst.IndentedBlock):
    """The body ``written`` on the line of its statement's header, read as a block of one line per small
    statement. The class keeps libcst's name: visitors and matchers dispatch on it."""

    written: cst.SimpleStatementSuite

    def _visit_and_replace_children(self, visitor: cst.CSTVisitorT) -> IndentedBlock:
        return IndentedBlock(
            header=visit_required(self, "header", self.header, visitor),
            indent=self.indent,
            body=visit_body_sequence(self, "body", self.body, visitor),
            footer=visit_sequence(self, "footer", self.footer, visitor),
            written=self.written,
        )

    def _as_written(self) -> bool:
        """Whether the block still fits the line it was written on: as many statements, each one simple
        statement with nothing above it and no comment after it."""
        return len(self.body) == len(self.written.body) and all(
            isinstance(line, cst.SimpleStatementLine)
            and len(line.body) == 1
            and not line.leading_lines
            and line.trailing_whitespace.comment is None
            for line in self.body
        )

    def _codegen_impl(self, state: CodegenState) -> None:
        if not self._as_written():
            super()._codegen_impl(state)
            return
        self.written.leading_whitespace._codegen(state)
        last = len(self.body) - 1
        for at, line in enumerate(self.body):
            small = line.body[0]  # type: ignore[attr-defined]  # a simple statement line: _as_written
            state.before_codegen(line)
            with state.record_syntactic_position(line):
                small._codegen(state)
            state.after_codegen(line)
            semicolon = self.written.body[at].semicolon
            if isinstance(semicolon, cst.Semicolon):
                semicolon._codegen(state)
            elif at < last:
                state.add_token("; ")
        self.header._codegen(state)


def lowered(module: cst.Module) -> cst.Module:
    """``module`` with each one-line body held as a block (printing as it was written); ``module`` itself
    where it has none. Only the statements around them are rebuilt, without libcst's visitors (which
    rebuild every node they pass)."""
    new = _lowered(module)
    return module if new is None else cast(cst.Module, new)


# The fields through which a statement holds statements (blocks, branches, handlers, cases)
_BLOCKS = ("body", "orelse", "handlers", "finalbody", "cases")


def _lowered(node: cst.CSTNode) -> cst.CSTNode | None:
    """``node`` with the one-line bodies under it held as blocks; None where it has none."""
    if isinstance(node, cst.SimpleStatementSuite):
        return _block(node)
    if isinstance(node, (cst.SimpleStatementLine, cst.BaseExpression)):
        return None
    changes: dict[str, object] = {}
    for name in _BLOCKS:
        held = getattr(node, name, None)
        if isinstance(held, cst.CSTNode):
            new = _lowered(held)
            if new is not None:
                changes[name] = new
        elif isinstance(held, (list, tuple)):
            items = [_lowered(child) for child in held]
            if any(item is not None for item in items):
                changes[name] = [old if new is None else new for old, new in zip(held, items)]
    return node.with_changes(**changes) if changes else None


def _block(suite: cst.SimpleStatementSuite) -> IndentedBlock:
    lines = [
        cst.SimpleStatementLine(body=[small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)]) for small in suite.body
    ]
    return IndentedBlock(body=lines, header=suite.trailing_whitespace, written=suite)

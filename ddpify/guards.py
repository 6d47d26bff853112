"""Input guards: is this text something ddpify can read and rewrite faithfully?

Run before anything is analysed, in order; the first that fails turns the
input away with one diagnostic and the input is left as it is:

1. the bytes decode as Python source text, with an encoding that writes text
   back unchanged (DDP003): ``# coding: idna`` decodes but cannot encode a
   long line again;
2. the text compiles under the running Python (DDP002): Python 2 code such as
   ``except E, e:`` parses in libcst's newest grammar but is not Python 3, and
   CPython's messages name the problem and its place. When libcst's parser
   does read the file, the construct at CPython's error may be newer syntax
   (``type X = int`` on 3.11): the message names the Python it needs;
3. no form feed inside indentation (DDP006): libcst cannot indent new code
   next to it;
4. libcst parses it (DDP007 when CPython compiled it but libcst cannot);
5. every later step can walk the tree (DDP005): they walk it recursively
   (libcst's visitors, its code generator, ddpify's index), and a tree too
   deep for that would end in a RecursionError halfway through. A tree deeper
   than :data:`PLAIN_DEPTH` is walked once as a trial, with
   :data:`SPARE_FRAMES` frames to spare. CPython's own compiler has a limit
   too (``1 + 1 + ... + 1`` with thousands of terms, or 200 nested tuples),
   also DDP005;
6. libcst reproduces it byte for byte (DDP004): it cannot for a few
   whitespace-only endings and CR-only line breaks.

A text that compiles but never mentions ``torch`` has nothing for ddpify and
is not parsed at all (guards 3 to 6 are skipped for it).
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import sys
import tokenize
import warnings

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from ddpify.diagnostics import FORM_FEED, INVALID_SYNTAX, NO_ROUND_TRIP, TOO_DEEP, UNREADABLE, UNSUPPORTED, Diagnostic
from ddpify.engine import annotated, one_line
from ddpify.engine.collect import UNINDEXED
from ddpify.engine.syntax import NODE_KINDS

# A tree up to this deep is walked without a trial: a level costs at most about
# four Python frames in libcst's visitors, well within Python's default
# recursion limit (1000). Training scripts stay under 40; a table of a few
# hundred adjacent string literals goes past 250.
PLAIN_DEPTH = 150
# A deeper tree must survive a trial walk with this many frames to spare: room
# for the frames that ddpify's own passes and the added code need on top.
SPARE_FRAMES = 100

_TOO_DEEP = "the code is nested too deeply for ddpify's parser"


def parse_checked(
    source: str | bytes, path: str, *, torch_only: bool = True, round_trip: bool = True
) -> cst.Module | Diagnostic | None:
    """The parsed module; the diagnostic that turns the input away; or None for valid
    Python that never mentions ``torch`` (not parsed, unless ``torch_only`` is false).

    With ``round_trip`` false, whether the tree prints the source back is left to the
    caller (:func:`round_trip_failure`), which asks it only of a module it edits: printing
    costs as much as parsing, and most modules of a program are only read."""
    unreadable = _unreadable(source)
    if unreadable is not None:
        return UNREADABLE.at(1, 1, unreadable, path)
    try:
        compile_quietly(source, path)
    except SyntaxError as exc:
        line, column = exc.lineno or 1, exc.offset or 1
        message = _newer_syntax(source, line, column) or f"invalid Python 3: {exc.msg}"
        return INVALID_SYNTAX.at(line, column, message, path)
    except ValueError as exc:  # e.g. null bytes
        return UNREADABLE.at(1, 1, f"cannot read the file: {exc}", path)
    except RecursionError:
        return TOO_DEEP.at(1, 1, f"{_TOO_DEEP} (Python's own compiler runs out of recursion depth on it)", path)
    except MemoryError:  # CPython's parser past its stack, e.g. 200 tuples nested in one another
        return TOO_DEEP.at(1, 1, f"{_TOO_DEEP} (Python's own parser runs out of stack on it)", path)
    text = source.decode("latin-1") if isinstance(source, bytes) else source
    if torch_only and "torch" not in text:
        return None
    form_feed = _FORM_FEED_INDENT.search(text)
    if form_feed is not None:
        line = text.count("\n", 0, form_feed.start()) + 1
        return FORM_FEED.at(line, 1, "a form feed inside indentation: libcst cannot indent new code next to it", path)
    try:
        module = cst.parse_module(source)
    except RecursionError:
        return TOO_DEEP.at(1, 1, _TOO_DEEP, path)
    except cst.ParserSyntaxError as exc:  # CPython compiled it: a limit or gap of the parser, not the user's error
        mixed = _MIXED_INDENT.search(text)
        if mixed is not None:  # Python takes a tab to the next multiple of 8 columns; libcst does not
            line = text.count("\n", 0, mixed.start()) + 1
            message = (
                "indentation of a tab and spaces that Python accepts and ddpify's parser (libcst) cannot read; "
                "indent this block with spaces only"
            )
            return UNSUPPORTED.at(line, 1, message, path)
        message = "valid Python that ddpify's parser (libcst) cannot read; simpler code here may help"
        return UNSUPPORTED.at(exc.raw_line, exc.raw_column + 1, message, path)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:  # encoding detection
        return UNREADABLE.at(1, 1, f"cannot decode the file: {exc}", path)
    depth = nesting_depth(module)
    if depth + LAYOUT_DEPTH > PLAIN_DEPTH and not _walkable(module, SPARE_FRAMES):
        return TOO_DEEP.at(_deepest_line(source), 1, f"{_TOO_DEEP} ({depth} levels deep)", path)
    if round_trip and (failure := round_trip_failure(module, source, path)) is not None:
        return failure
    return one_line.lowered(annotated.lowered(module))


# a line indented with a tab and spaces, in either order
_MIXED_INDENT = re.compile(r"^(?:[ ]*\t[ \t]*[ ]|\t*[ ]+\t)[ \t]*\S", re.MULTILINE)


def round_trip_failure(module: cst.Module, source: str | bytes, path: str) -> Diagnostic | None:
    """``DDP004`` where printing ``module`` does not give ``source`` back byte for byte: a file whose
    tree prints otherwise cannot be written back with only ddpify's edits changed."""
    if (module.bytes if isinstance(source, bytes) else module.code) == source:
        return None
    message = (
        "the parser cannot reproduce this file byte for byte (unusual line endings "
        "or trailing whitespace); normalise them and try again"
    )
    return NO_ROUND_TRIP.at(1, 1, message, path)


def compile_quietly(source: str | bytes, path: str) -> None:
    """Compile to check validity; warnings about the user's code (``x is 1``) are not ours to print."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compile(source, path, "exec", dont_inherit=True)


def nesting_depth(module: cst.Module) -> int:
    """How many nodes deep the code of the tree goes, counted without recursion. Whitespace and
    line ends (half the nodes of a module) are not walked: they nest at most :data:`LAYOUT_DEPTH`
    levels below a node of code."""
    deepest = 0
    stack: list[tuple[cst.CSTNode, int]] = [(module, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth = pop()
        deepest = max(deepest, depth)
        inner = depth + 1
        for name in _child_fields(type(node)):
            value = getattr(node, name)
            kind = type(value)
            if kind in NODE_KINDS:
                if kind not in UNINDEXED:
                    push((value, inner))
            elif kind is tuple or kind is list:
                stack += [(item, inner) for item in value if type(item) in NODE_KINDS and type(item) not in UNINDEXED]
    return deepest


# How deep whitespace and line ends nest below a node: ParenthesizedWhitespace -> EmptyLine -> Comment.
LAYOUT_DEPTH = 3


def _walkable(module: cst.Module, spare: int) -> bool:
    """Whether libcst's visitor walks the whole tree with ``spare`` frames left over."""
    if spare > 0:
        return _walkable(module, spare - 1)
    try:
        module.visit(cst.CSTVisitor())
    except RecursionError:
        return False
    return True


_FIELDS: dict[type[cst.CSTNode], tuple[str, ...]] = {}


def _child_fields(kind: type[cst.CSTNode]) -> tuple[str, ...]:
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(kind))
    return names


def _deepest_line(source: str | bytes) -> int:
    """The line where the nesting is deepest, by CPython's own tree (which the input compiled to)."""
    deepest, line = 0, 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = ast.parse(source)
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest and isinstance(node, (ast.expr, ast.stmt)):
            deepest, line = depth, node.lineno
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return line


# Syntax that libcst's parser reads but an older Python does not, by the node
# that holds it and the Python that introduced it. Python 3.14's unparenthesised
# ``except A, B:`` is left out on purpose: in Python 2 code it means something else.
_INTRODUCED: dict[type[cst.CSTNode], tuple[tuple[int, int], str]] = {
    cst.TryStar: ((3, 11), "`except*`"),
    cst.TypeAlias: ((3, 12), "a `type` statement"),
    cst.TypeParameters: ((3, 12), "a type parameter list (`[T]`)"),
    cst.FormattedString: ((3, 12), "this f-string (nested quotes, backslashes or comments inside `{}`)"),
    cst.TemplatedString: ((3, 14), "a template string (`t'...'`)"),
}


def _newer_syntax(source: str | bytes, line: int, column: int) -> str | None:
    """Why the running Python rejects code at ``line:column`` that libcst's grammar accepts, or None."""
    try:
        wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
        positions = wrapper.resolve(PositionProvider)
    except Exception:  # the parser rejects it too (a real syntax error), or it is too deep to walk
        return None
    newer = [(where, introduced) for node, where in positions.items() if (introduced := _introduced(node))]
    # The construct at the error, and any newer one inside it (``[T = int]``: CPython stops at the ``[``).
    around = [where for where, _ in newer if _contains(where, (line, column - 1))]
    inside = [introduced for where, introduced in newer if any(_within(where, outer) for outer in around)]
    newest = max(inside, default=None)
    running = sys.version_info[:2]
    if newest is None or newest[0] <= running:
        return None
    needed = "{}.{}".format(*newest[0])
    return f"{newest[1]} needs Python {needed} or newer; this is {running[0]}.{running[1]}"


def _introduced(node: cst.CSTNode) -> tuple[tuple[int, int], str] | None:
    if isinstance(node, cst.TypeParam) and node.default is not None:
        return (3, 13), "a type parameter default (`[T = int]`)"
    return _INTRODUCED.get(type(node))


def _contains(where: CodeRange, place: tuple[int, int]) -> bool:
    """Whether ``(line, column)`` (0-based column, as libcst counts) lies in ``where``."""
    return (where.start.line, where.start.column) <= place <= (where.end.line, where.end.column)


def _within(inner: CodeRange, outer: CodeRange) -> bool:
    return _contains(outer, (inner.start.line, inner.start.column)) and _contains(
        outer, (inner.end.line, inner.end.column)
    )


# Indentation after a form feed (CPython counts columns from the last one), however many there are.
_FORM_FEED_INDENT = re.compile(r"^[ \t\x0c]*\x0c[ \t]+\S", re.MULTILINE)

# What ddpify writes into a file: ASCII code, with lines longer than 63
# characters (the label limit that makes the ``idna`` codec fail). Text with
# it appended must encode to the file's bytes with it appended.
_ASCII_PROBE = "".join(map(chr, range(32, 127))) + "\t\r\n"


def _unreadable(source: str | bytes) -> str | None:
    """Why the input is not Python source text that ddpify can write back, or None."""
    if "\0" in source if isinstance(source, str) else b"\0" in source:
        return "cannot decode the file: it contains null bytes (a binary file?)"
    try:
        if isinstance(source, str):
            source.encode("utf-8")
            return None
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        text = source.decode(encoding)
    except (SyntaxError, UnicodeError, LookupError) as exc:
        return f"cannot decode the file: {exc}"
    try:
        faithful = (text + _ASCII_PROBE).encode(encoding) == source + _ASCII_PROBE.encode("ascii")
    except UnicodeError:
        faithful = False
    if not faithful:
        return f"the file's encoding ({encoding}) cannot write Python code back unchanged; save the file as UTF-8"
    return None

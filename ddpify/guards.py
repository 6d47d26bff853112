"""Input guards: is this text something ddpify can read and rewrite faithfully?

Run before anything is analysed, in order; the first that fails turns the
input away with one diagnostic and the input is left as it is:

1. the bytes decode as Python source text (DDP003);
2. the text compiles under the running Python (DDP002): Python 2 code such as
   ``except E, e:`` parses in libcst's newest grammar but is not Python 3, and
   CPython's messages name the problem and its place;
3. no form feed inside indentation (DDP006): libcst cannot indent new code
   next to it;
4. libcst parses it (DDP002; DDP005 when the nesting is too deep for it);
5. libcst reproduces it byte for byte (DDP004): it cannot for a few
   whitespace-only endings and CR-only line breaks.

A text that compiles but never mentions ``torch`` has nothing for ddpify and
is not parsed at all (guards 3 to 5 are skipped for it).
"""

from __future__ import annotations

import io
import re
import tokenize
import warnings

import libcst as cst

from ddpify.diagnostics import Diagnostic, Severity


def parse_checked(source: str | bytes, path: str) -> cst.Module | Diagnostic | None:
    """The parsed module; the diagnostic that turns the input away; or None for valid
    Python that never mentions ``torch`` (not parsed)."""
    unreadable = _undecodable(source)
    if unreadable is not None:
        return _error(path, 1, 1, "DDP003", f"cannot decode the file: {unreadable}")
    try:
        compile_quietly(source, path)
    except SyntaxError as exc:
        return _error(path, exc.lineno or 1, exc.offset or 1, "DDP002", f"invalid Python 3: {exc.msg}")
    except ValueError as exc:  # e.g. null bytes
        return _error(path, 1, 1, "DDP003", f"cannot read the file: {exc}")
    text = source.decode("latin-1") if isinstance(source, bytes) else source
    if "torch" not in text:
        return None
    form_feed = _FORM_FEED_INDENT.search(text)
    if form_feed is not None:
        line = text.count("\n", 0, form_feed.start()) + 1
        return _error(
            path, line, 1, "DDP006", "a form feed inside indentation: libcst cannot indent new code next to it"
        )
    try:
        module = cst.parse_module(source)
    except RecursionError:
        return _error(path, 1, 1, "DDP005", "the code is nested too deeply for ddpify's parser")
    except cst.ParserSyntaxError as exc:
        return _error(path, exc.raw_line, exc.raw_column + 1, "DDP002", f"syntax error: {exc.message}")
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:  # encoding detection
        return _error(path, 1, 1, "DDP003", f"cannot decode the file: {exc}")
    if (module.bytes if isinstance(source, bytes) else module.code) != source:
        return _error(
            path,
            1,
            1,
            "DDP004",
            "the parser cannot reproduce this file byte for byte (unusual line endings "
            "or trailing whitespace); normalise them and try again",
        )
    return module


def compile_quietly(source: str | bytes, path: str) -> None:
    """Compile to check validity; warnings about the user's code (``x is 1``) are not ours to print."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compile(source, path, "exec", dont_inherit=True)


_FORM_FEED_INDENT = re.compile(r"^[ \t]*\x0c[ \t]+\S", re.MULTILINE)


def _undecodable(source: str | bytes) -> str | None:
    """Why the input is not Python source text at all, or None."""
    if "\0" in source if isinstance(source, str) else b"\0" in source:
        return "it contains null bytes (a binary file?)"
    try:
        if isinstance(source, bytes):
            encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
            source.decode(encoding)
        else:
            source.encode("utf-8")
    except (SyntaxError, UnicodeError, LookupError) as exc:
        return str(exc)
    return None


def _error(path: str, line: int, column: int, code: str, message: str) -> Diagnostic:
    return Diagnostic(line, column, code, Severity.ERROR, message, path)

"""convert(): parse -> guard -> analyse -> passes -> checks -> Conversion.

The pure core: it never reads or writes files, prints or exits, and it never
raises -- every outcome, a bug included, is a :class:`~ddpify.result.Conversion`.
It never imports or runs the user's script either; it only reads its text.

Guards, in order, each turning the input away before anything is rewritten:

1. the input must compile under the running Python (Python 2 code such as
   ``except E, e:`` parses in libcst's newest grammar but is not Python 3);
2. the parser must reproduce the input byte for byte (libcst cannot for a few
   whitespace-only endings and CR-only line breaks);
3. a script that is already distributed, or has no training step, is left
   alone.

After rewriting, the output must compile and converting it again must change
nothing; otherwise the conversion is an internal error and nothing is written.
"""

from __future__ import annotations

import io
import re
import tokenize
import warnings

import libcst as cst
from libcst.metadata import MetadataWrapper

from ddpify.analysis import analyse, distributed_use
from ddpify.diagnostics import Diagnostic, Severity
from ddpify.edits import EditPlan, apply
from ddpify.passes import PASSES
from ddpify.result import Conversion, Options, Status


def convert(source: str | bytes, *, path: str = "<string>", options: Options = Options()) -> Conversion:
    """Convert one training script; see the module docstring for what is guaranteed."""
    try:
        return _convert(source, path, options)
    except Exception as exc:
        return _outcome(source, Status.INTERNAL_ERROR, [_at(path, 1, 1, "DDP900", f"internal error: {exc!r}")])


def _convert(source: str | bytes, path: str, options: Options) -> Conversion:
    unreadable = _undecodable(source)
    if unreadable is not None:
        return _outcome(source, Status.INVALID, [_at(path, 1, 1, "DDP003", f"cannot decode the file: {unreadable}")])
    try:  # CPython first: its messages name the problem (e.g. Python 2's print statement) and its place
        _compile(source, path)
    except SyntaxError as exc:
        return _outcome(
            source,
            Status.INVALID,
            [_at(path, exc.lineno or 1, exc.offset or 1, "DDP002", f"invalid Python 3: {exc.msg}")],
        )
    except ValueError as exc:  # e.g. null bytes
        return _outcome(source, Status.INVALID, [_at(path, 1, 1, "DDP003", f"cannot read the file: {exc}")])
    text = source.decode("latin-1") if isinstance(source, bytes) else source
    if "torch" not in text:
        return _outcome(source, Status.UNCHANGED, [_nothing_to_do(path)])
    form_feed = _FORM_FEED_INDENT.search(text)
    if form_feed is not None:
        line = text.count("\n", 0, form_feed.start()) + 1
        return _outcome(
            source,
            Status.INVALID,
            [_at(path, line, 1, "DDP006", "a form feed inside indentation: libcst cannot indent new code next to it")],
        )
    try:
        module = cst.parse_module(source)
    except RecursionError:
        return _outcome(
            source, Status.INVALID, [_at(path, 1, 1, "DDP005", "the code is nested too deeply for ddpify's parser")]
        )
    except cst.ParserSyntaxError as exc:
        return _outcome(source, Status.INVALID, [_at(path, exc.raw_line, exc.raw_column + 1, "DDP002", _syntax(exc))])
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:  # encoding detection
        return _outcome(source, Status.INVALID, [_at(path, 1, 1, "DDP003", f"cannot decode the file: {exc}")])

    if (module.bytes if isinstance(source, bytes) else module.code) != source:
        return _outcome(
            source,
            Status.INVALID,
            [
                _at(
                    path,
                    1,
                    1,
                    "DDP004",
                    "the parser cannot reproduce this file byte for byte (unusual line endings "
                    "or trailing whitespace); normalise them and try again",
                )
            ],
        )
    already = distributed_use(module)
    if already is not None:
        return _outcome(
            source,
            Status.UNCHANGED,
            [_at(path, 1, 1, "DDP010", f"already distributed (uses {already}): left unchanged", Severity.INFO)],
        )

    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    anatomy = analyse(wrapper, path)
    if not anatomy.trains:
        return _outcome(source, Status.UNCHANGED, [_nothing_to_do(path)])

    plan = EditPlan(anatomy.index, path, cst.parse_expression(f"{anatomy.names.dist}.get_rank() == 0"))
    for rewrite in PASSES:
        rewrite.run(anatomy, plan, options)
    diagnostics = sorted([*anatomy.diagnostics, *plan.diagnostics], key=lambda d: (d.line, d.column, d.code))
    if any(d.severity is Severity.ERROR for d in diagnostics):
        return _outcome(source, Status.REFUSED, diagnostics)

    converted = apply(plan)
    code = converted.bytes if isinstance(source, bytes) else converted.code
    _check_output(code, path)
    changes = tuple(sorted(plan.changes, key=lambda c: c.line))
    return Conversion(source, code, Status.CONVERTED, tuple(diagnostics), changes)


_FORM_FEED_INDENT = re.compile(r"^[ \t]*\x0c[ \t]+\S", re.MULTILINE)


def _compile(source: str | bytes, path: str) -> None:
    """Compile to check validity; warnings about the user's code (``x is 1``) are not ours to print."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compile(source, path, "exec", dont_inherit=True)


def _undecodable(source: str | bytes) -> str | None:
    """Why the input is not Python source text at all, or None."""
    if ("\0" if isinstance(source, str) else b"\0") in source:
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


def _check_output(code: str | bytes, path: str) -> None:
    """The output compiles and is a fixed point; anything else is a bug in ddpify."""
    _compile(code, path)
    again = _convert(code, path, Options())
    if again.status is not Status.UNCHANGED:
        raise AssertionError(f"converting the output again gives {again.status.value}, not unchanged")


def _outcome(source: str | bytes, status: Status, diagnostics: list[Diagnostic]) -> Conversion:
    return Conversion(source, source, status, tuple(diagnostics))


def _at(path: str, line: int, column: int, code: str, message: str, severity: Severity = Severity.ERROR) -> Diagnostic:
    return Diagnostic(line, column, code, severity, message, path)


def _nothing_to_do(path: str) -> Diagnostic:
    return _at(path, 1, 1, "DDP011", "no training step (`.backward()`) found: nothing to do", Severity.INFO)


def _syntax(exc: cst.ParserSyntaxError) -> str:
    return f"syntax error: {exc.message}"

"""Everything ddpify tells the user, on stderr: diagnostics, one summary per file, progress, errors.

Code, diffs and verification reports go to stdout; every message goes to
stderr, so that ``ddpify train.py > train_ddp.py`` captures only the script.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from typing import TYPE_CHECKING

from ddpify import Severity
from ddpify.cli.exits import Outcome

if TYPE_CHECKING:
    from ddpify import Conversion

PACKAGE = "ddpify"


class Reporter:
    """Prints findings and summaries on stderr; with ``--quiet`` only errors."""

    def __init__(self, *, quiet: bool) -> None:
        self.quiet = quiet

    def say(self, line: str) -> None:
        if not self.quiet:
            error(line)

    def error(self, line: str) -> None:
        error(line)

    def block(self, text: str) -> None:
        """Several lines, as they are (another program's output); not with ``--quiet``."""
        if not self.quiet:
            error_block(text)

    def diagnostics(self, conversion: Conversion, *, fallback: str | None = None) -> None:
        """Every diagnostic (errors only when quiet); ``fallback`` when an error is expected but none came."""
        for diagnostic in conversion.diagnostics:
            if diagnostic.severity is Severity.ERROR:
                self.error(diagnostic.format())
            else:
                self.say(diagnostic.format())
        if fallback is not None and not conversion.errors:
            self.error(fallback)

    def changes(self, conversion: Conversion, name: str) -> None:
        for change in conversion.changes:
            self.say(f"{change.path or name}:{change.line}: {change.summary}")


def error(line: str) -> None:
    """One line on stderr (a line break or other control character inside, which a file name may
    hold, is written as an escape); a stderr that cannot be written to is not worth a traceback."""
    with contextlib.suppress(OSError, ValueError):
        print(one_line(line), file=sys.stderr, flush=True)


_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F) if code != 0x09} | {
    0x0A: "\\n",
    0x0D: "\\r",
}


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters written as escapes (``\\n``)."""
    return text.translate(_CONTROLS)


def error_block(text: str) -> None:
    """Several lines on stderr, as they are (another program's output)."""
    with contextlib.suppress(OSError, ValueError):
        print(text, file=sys.stderr, flush=True)


def counts(conversion: Conversion, *, changes: bool = True) -> str:
    """``3 changes, 1 warning``."""
    parts = [plural(len(conversion.changes), "change")] if changes else []
    for severity, noun in ((Severity.ERROR, "error"), (Severity.WARNING, "warning")):
        count = sum(1 for d in conversion.diagnostics if d.severity is severity)
        if count:
            parts.append(plural(count, noun))
    return ", ".join(parts)


def summary_line(outcomes: Counter[Outcome], *, warnings: int) -> str:
    """``12 files: 9 converted, 2 unchanged, 1 refused (1 warning)``."""
    parts = [
        # The other labels say what became of the files; this one is a noun.
        plural(count, outcome.label) if outcome is Outcome.INTERNAL_ERROR else f"{count} {outcome.label}"
        for outcome in Outcome
        if (count := outcomes[outcome])
    ]
    line = f"{plural(sum(outcomes.values()), 'file')}: {', '.join(parts)}"
    return f"{line} ({plural(warnings, 'warning')})" if warnings else line


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def bug_report_address() -> str:
    """The ``Issues`` entry of the package's project URLs, as installed."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        urls = metadata(PACKAGE).get_all("Project-URL") or []
    except PackageNotFoundError:
        urls = []
    for entry in urls:
        label, _, url = str(entry).partition(",")
        if label.strip().lower() == "issues" and url.strip():
            return url.strip()
    return f"the {PACKAGE} issue tracker"


def internal_error_message(name: str, detail: str) -> str:
    return (
        f"internal error while converting {name}: {detail}; "
        f"please report a bug at {bug_report_address()} with the input attached"
    )


class Progress:
    """``[n/total]`` on stderr, redrawn in place; cleared before anything else is printed."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled
        self.width = 0

    def show(self, done: int) -> None:
        if self.enabled:
            text = f"\r[{done}/{self.total}]"
            sys.stderr.write(text)
            sys.stderr.flush()
            self.width = len(text) - 1

    def clear(self) -> None:
        if self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()
            self.width = 0


def isatty(stream: object) -> bool:
    check = getattr(stream, "isatty", None)
    return bool(check and check())

"""Exit codes, what became of each file, and the one exception the shell raises for the user.

====  ==========================================================================
0     converted (warnings may have been printed), or nothing to do; with
      ``--verify``, also every check of the verification run passed
1     ``--check``: the output is missing or differs from what would be generated
2     bad usage or unreadable input, an unusable output or stream, an input
      changed on disk while ``--in-place`` converted it; nothing written
3     conversion refused (an error diagnostic); nothing written
4     ``--verify`` / ``ddpify verify``: the script does not train in
      data-parallel (a check failed or it hung); the report says which
123   internal error (a bug); nothing written
130   interrupted (SIGINT); 143: terminated (SIGTERM); no half-written file
====  ==========================================================================

With several files the exit code is the highest of the files' codes under the
precedence 123 > 3 > 2 > 1 > 0: a bug outranks a refusal, a refusal an
unreadable file, and that a stale ``--check`` output.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    STALE = 1
    USAGE = 2
    REFUSED = 3
    NOT_DATA_PARALLEL = 4  # a check of the verification run failed or the run hung
    INTERNAL_ERROR = 123
    INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
    BROKEN_PIPE = 141  # 128 + SIGPIPE
    TERMINATED = 143  # 128 + SIGTERM


class Outcome(enum.Enum):
    """What became of one file, as the summary line of several files counts it."""

    CONVERTED = ("converted", ExitCode.OK)
    WOULD_CONVERT = ("would be converted", ExitCode.OK)  # --diff
    UNCHANGED = ("unchanged", ExitCode.OK)
    CURRENT = ("up to date", ExitCode.OK)  # --check
    STALE = ("would be rewritten", ExitCode.STALE)  # --check
    # one of several inputs whose program changes other modules too: no output file next to it can hold it
    NEEDS_FOLDER = ("need --in-place or -o DIR/", ExitCode.OK)
    REFUSED = ("refused", ExitCode.REFUSED)
    INVALID = ("invalid", ExitCode.USAGE)  # not valid Python
    FAILED = ("failed", ExitCode.USAGE)  # unreadable input or unwritable output
    INTERNAL_ERROR = ("internal error", ExitCode.INTERNAL_ERROR)

    def __init__(self, label: str, code: ExitCode) -> None:
        self.label = label
        self.code = code


class Failure(Exception):
    """A one-line message for the user and the exit code that goes with it."""

    def __init__(self, message: str, code: ExitCode = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class NeedsFolder(Failure):
    """The program of an entry changes other modules too, which an output file next to it cannot hold."""

    def __init__(self, entry: str, modules: str) -> None:
        super().__init__(
            f"{entry}: the conversion also changes {modules}, which one output file cannot hold; "
            "rewrite them with --in-place, or write the whole program into a folder with -o DIR/"
        )
        # as one of several inputs, where the others go on
        self.status = f"{entry}: needs --in-place or -o DIR/ (its conversion also changes {modules})"


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; a ``BaseException`` so that no ``except Exception`` swallows it."""

    def __init__(self, signum: int, message: str = "interrupted") -> None:
        super().__init__(message)
        self.signum = signum
        self.message = message

    @property
    def code(self) -> int:
        return 128 + self.signum

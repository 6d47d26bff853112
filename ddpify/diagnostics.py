"""One record for every finding, printed one way: ``path:line:col: CODE message``.

Codes are grouped by concern so that a reader can tell from the number alone
what part of the script is meant:

* ``DDP0xx`` the input as a whole (already distributed, nothing to convert)
* ``DDP1xx`` process group, launch and devices
* ``DDP2xx`` data loading and sampling
* ``DDP3xx`` the model and its ``DistributedDataParallel`` wrap
* ``DDP4xx`` checkpoints
* ``DDP5xx`` side effects (printing, logging, files)
* ``DDP6xx`` training-loop control (decisions that must be the same on every rank)
* ``DDP9xx`` ddpify itself (internal errors, and invariants its output breaks)

An ``error`` means the script cannot be converted safely and nothing is
written; a ``warning`` means the script is written and a person should look;
``info`` is a fact about the conversion.

Every code is a :class:`Code` record, declared once by the part of ddpify that
reports it: the input-level and internal codes below, each concern's own in
``ddpify/concerns/<concern>.py`` (its ``CODES``). :func:`registry` collects
them all; a diagnostic is only ever made from a registered record.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Severity(enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Diagnostic:
    """A finding at a place in the input (line and column are 1-based)."""

    line: int
    column: int
    code: str
    severity: Severity
    message: str
    path: str = "<string>"

    def format(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: {self.code} {self.message}"


@dataclass(frozen=True)
class Code:
    """A diagnostic code: its number, how serious it is, who reports it, what it means, how to fix it."""

    code: str
    severity: Severity
    concern: str  # the concern module that reports it, or "input" / "ddpify"
    meaning: str  # one line
    fix: str

    def at(self, line: int, column: int, message: str, path: str = "<string>") -> Diagnostic:
        """This finding at a place in the input."""
        return Diagnostic(line, column, self.code, self.severity, message, path)


INVALID_SYNTAX = Code(
    "DDP002", Severity.ERROR, "input", "the input is not valid Python 3", "fix the syntax error (or port from Python 2)"
)
UNREADABLE = Code(
    "DDP003", Severity.ERROR, "input", "the input is not text, or does not decode", "give a Python source file"
)
NO_ROUND_TRIP = Code(
    "DDP004",
    Severity.ERROR,
    "input",
    "the parser cannot reproduce the file byte for byte",
    "normalise line endings and trailing whitespace",
)
TOO_DEEP = Code(
    "DDP005", Severity.ERROR, "input", "the code is nested too deeply for the parser", "flatten the nesting"
)
FORM_FEED = Code(
    "DDP006",
    Severity.ERROR,
    "input",
    "a form feed inside indentation, next to which new code cannot be indented",
    "remove the form feed",
)
UNSUPPORTED = Code(
    "DDP007",
    Severity.ERROR,
    "input",
    "valid Python that the parser cannot read",
    "write the statement more simply (e.g. fewer adjacent string literals)",
)
ALREADY_DISTRIBUTED = Code(
    "DDP010", Severity.INFO, "input", "the script already runs distributed: left unchanged", "nothing to do"
)
NOTHING_TO_DO = Code(
    "DDP011", Severity.INFO, "input", "no training step (`.backward()`) found: left unchanged", "nothing to do"
)
UNFOLLOWED_IMPORT = Code(
    "DDP012",
    Severity.WARNING,
    "input",
    "the program loads code in a way ddpify cannot follow (a computed module name, a path, a changed "
    "sys.path, a relative import in the entry script, a module present only as compiled .pyc): that code is "
    "not converted with it",
    "import the module by name (`import utils`), or check what the code it loads does on every rank",
)
UNFOLLOWED_IN_FOLDER = Code(
    "DDP013",
    Severity.ERROR,
    "input",
    "-o DIR/ would hold a copy of the program without the code it loads in a way ddpify cannot follow",
    "import the module by name, or convert the program where it is with --in-place",
)
STOPPED_PATH = Code(
    "DDP015",
    Severity.WARNING,
    "input",
    "a construct that cannot be converted runs only under one setting (the branch of `if args.arch == ...` "
    "that builds or trains one way of several): that branch stops at run time, at its start, with the reason; "
    "the rest of the program is converted",
    "fix the construct named in the message, or leave that setting out; `--strict` refuses instead",
)
# A notebook's code cells, made into one script (ddpify/notebook.py).
NOTEBOOK_SETUP = Code(
    "DDP020",
    Severity.INFO,
    "input",
    "an IPython magic or shell command that only sets up or times the notebook (`%matplotlib`, `!pip install`, "
    "`%%time`): kept as a comment, the code it times kept",
    "nothing to do; install what `!pip install` names before running the script",
)
NOTEBOOK_ONLY = Code(
    "DDP021",
    Severity.WARNING,
    "input",
    "IPython-only code that does work the script cannot do as it is (`%run`, `%cd`, `%env`, `!wget`, `%%writefile`, "
    "`x = !ls`, `get_ipython()`): kept as a comment, so the script does not do it",
    "do it in Python (`os.chdir`, `os.environ`, `subprocess.run`) or before starting the script",
)
NOTEBOOK_DISPLAY = Code(
    "DDP022",
    Severity.INFO,
    "input",
    "a value the notebook displays (`display(x)`, or a cell's last expression that calls nothing): printed, "
    "on rank 0 only like every print",
    "nothing to do; remove the print if the output is not wanted",
)
TRAINING_UNFOLLOWED = Code(
    "DDP014",
    Severity.ERROR,
    "input",
    "no training step in the code ddpify can follow, and the program loads code by a computed name "
    '(importlib.import_module("models." + name)) whose modules train: nothing is written',
    "import the module that trains by name, or convert that module's entry point; ddpify cannot tell which "
    "module the computed name picks",
)
TRAINING_IN_A_LIBRARY = Code(
    "DDP016",
    Severity.ERROR,
    "input",
    "no training step in the code ddpify can follow, and the program hands its optimizer to a call it cannot "
    "follow (a library's training loop, or code it cannot trace): nothing is written",
    "write the training loop out (forward, backward, step), or use the library's own distributed support",
)
TRAINING_OUT_OF_SIGHT = Code(
    "DDP017",
    Severity.ERROR,
    "input",
    "no training step that the program's calls reach as ddpify follows them, yet a method the program calls "
    "on an object ddpify cannot trace trains (a trainer class taken from a dict by name): nothing is written",
    "build the object that trains by its class (`Trainer(...)`) where the program picks it, or convert the module "
    "that trains; ddpify cannot tell which code the program runs",
)
FRAMEWORK_BESIDE_A_LOOP = Code(
    "DDP018",
    Severity.ERROR,
    "input",
    "one way the program trains goes through Lightning's Trainer, which starts its own processes and process "
    "group, beside a training loop of the program's own that ddpify converts",
    "run that path with Lightning's own multi-device settings (strategy='ddp'), and convert the program's own loop "
    "where a setting picks it; a branch of such a setting stops at its start (DDP015)",
)
INTERNAL_ERROR = Code(
    "DDP900", Severity.ERROR, "ddpify", "a bug in ddpify: nothing is written", "report it with the input script"
)
# Invariants of the converted script (ddpify/invariants.py): a violation is a bug in ddpify.
INVARIANT_SETUP_FIRST = Code(
    "DDP901",
    Severity.ERROR,
    "ddpify",
    "the converted script would use torch.distributed before joining the process group: nothing is written",
    "report it with the input script",
)
INVARIANT_DATA = Code(
    "DDP902",
    Severity.ERROR,
    "ddpify",
    "the converted script would train on unsharded data, or not call set_epoch once per epoch: nothing is written",
    "report it with the input script",
)
INVARIANT_ONE_WRITER = Code(
    "DDP903",
    Severity.ERROR,
    "ddpify",
    "the converted script would save or write a file on every rank: nothing is written",
    "report it with the input script",
)
INVARIANT_WRAPPED = Code(
    "DDP904",
    Severity.ERROR,
    "ddpify",
    "the converted script would train a model without DistributedDataParallel: nothing is written",
    "report it with the input script",
)
INVARIANT_RUNS = Code(
    "DDP905",
    Severity.ERROR,
    "ddpify",
    "the converted script would put a distributed call where it never runs (after a return): nothing is written",
    "report it with the input script",
)
INVARIANT_WITHOUT_GROUP = Code(
    "DDP906",
    Severity.ERROR,
    "ddpify",
    "a converted module other than the entry script would need a process group that other scripts importing "
    "it do not have: nothing is written",
    "report it with the input script",
)
INVARIANT_BOUND = Code(
    "DDP907",
    Severity.ERROR,
    "ddpify",
    "the converted script would read a name that the input binds where it is no longer bound (a construction "
    "removed, a read moved above its assignment): an internal error, nothing is written",
    "report it with the input script",
)
INVARIANT_COLLECTIVE = Code(
    "DDP908",
    Severity.ERROR,
    "ddpify",
    "the converted script would run a collective (a broadcast, a reduction, the wrap) on some ranks only, where "
    "the others never join it and the run hangs: nothing is written",
    "report it with the input script",
)

INPUT_CODES = (
    STOPPED_PATH,
    INVALID_SYNTAX,
    UNREADABLE,
    NO_ROUND_TRIP,
    TOO_DEEP,
    FORM_FEED,
    UNSUPPORTED,
    ALREADY_DISTRIBUTED,
    NOTHING_TO_DO,
    UNFOLLOWED_IMPORT,
    UNFOLLOWED_IN_FOLDER,
    TRAINING_UNFOLLOWED,
    TRAINING_IN_A_LIBRARY,
    TRAINING_OUT_OF_SIGHT,
    FRAMEWORK_BESIDE_A_LOOP,
    NOTEBOOK_SETUP,
    NOTEBOOK_ONLY,
    NOTEBOOK_DISPLAY,
)
INTERNAL_CODES = (
    INTERNAL_ERROR,
    INVARIANT_SETUP_FIRST,
    INVARIANT_DATA,
    INVARIANT_ONE_WRITER,
    INVARIANT_WRAPPED,
    INVARIANT_RUNS,
    INVARIANT_WITHOUT_GROUP,
    INVARIANT_BOUND,
    INVARIANT_COLLECTIVE,
)


def nothing_to_do(path: str) -> Diagnostic:
    """The finding of a program without a training step (``DDP011``)."""
    return NOTHING_TO_DO.at(1, 1, "no training step (`.backward()`) found: nothing to do", path)


def registry() -> dict[str, Code]:
    """Every diagnostic code ddpify can report, by its number."""
    from ddpify.concerns import CONCERNS  # the concerns import libcst; the CLI's start-up does not need them

    codes: dict[str, Code] = {}
    for code in (*INPUT_CODES, *(c for concern in CONCERNS for c in concern.CODES), *INTERNAL_CODES):
        if code.code in codes:
            raise ValueError(f"{code.code} is declared twice")
        codes[code.code] = code
    return dict(sorted(codes.items()))


@dataclass(frozen=True)
class Change:
    """One rewrite, reported to the user as ``path:line: summary`` (line in the input)."""

    line: int
    summary: str
    path: str = ""  # the file of the program it was made in

"""Notebooks in, scripts out: a Jupyter notebook's code cells made into one Python script.

Distributed training cannot run inside a notebook's kernel the way torchrun
runs it, so a notebook is converted to a script: its code cells, in order,
each under a ``# %% cell N`` line (N counts every cell from the top, Markdown
included, as a reader counts them; editors that know the percent format show
the cells again). That script is then converted like any other, and every
finding names the cell and its line as well as the script's line.

What a script cannot run is made harmless on the way, each with a diagnostic:

* IPython magics and shell commands (``%matplotlib inline``, ``!pip install
  x``, ``%%writefile utils.py``, ``files = !ls``) are kept as comments where
  they were (``pass  # ...`` where a block would be left empty). ``%time``,
  ``%timeit`` and ``%prun`` keep the statement they time, and the cell magics
  ``%%time``, ``%%timeit``, ``%%capture`` and ``%%prun`` the cell's code.
  Those that only set up or time the notebook are DDP020 (info); those that do
  work the script would need (``%run``, ``%cd``, ``%env X=1``, ``!wget``, a
  cell of shell or a file the cell writes) are DDP021 (warning). So are
  statements on ``get_ipython()``, as ``jupyter nbconvert`` writes magics.
* ``display(x)`` (IPython's, when the notebook defines no ``display`` of its
  own) becomes ``print(x)``; a cell's last expression, which the notebook
  shows, becomes ``print(...)`` when it calls nothing (``model``,
  ``x.shape``, ``losses[-5:]``; not after a ``;``, which hides it). The usual
  conversion then prints both on rank 0 only (DDP022). A last expression that
  calls something (``df.head()``, ``model.train()``) is left as it is: it runs
  on every rank as in the notebook and shows nothing, since a call may change
  state that every rank needs. ``plt.show()``, and a ``display`` imported from
  ``IPython.display``, are left to the usual conversion, which runs them on rank 0.

Before → after (the script, before the usual conversion puts the print on rank 0)::

    cell 1   %matplotlib inline          # %% cell 1
                                         # %matplotlib inline
    cell 2   (Markdown)
    cell 3   model = Net().to(device)    # %% cell 3
             model                       model = Net().to(device)
                                         print(model)

Reading (:func:`read`) uses nbformat, the Jupyter project's own reader, for
versions 3 and 4; it is an optional dependency (``ddpify[notebook]``) that only
notebooks need. A notebook that is not valid JSON, not a notebook, of another
version or of another language raises :class:`NotebookError`. Nothing here
touches files: the command line reads and writes them.

Limits: a magic inside a multi-line string or bracket is left alone (it is not
one, for IPython either); ``$name`` in a shell command is not expanded into
anything; ``get_ipython()`` bound to a name is left as it is; a top-level
``await``, which IPython runs, is not Python in a script (DDP002 at its cell).
"""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import re
import tokenize
import warnings
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ddpify.diagnostics import NOTEBOOK_DISPLAY, NOTEBOOK_ONLY, NOTEBOOK_SETUP, Change, Code, Diagnostic

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ddpify.result import Conversion

EXTENSION = ".ipynb"
VERSIONS = (3, 4)
INSTALL = "pip install 'ddpify[notebook]'"

# Line magics that only set up, inspect or time the notebook.
SETUP_MAGICS = frozenset(
    {
        "aimport",
        "autoreload",
        "conda",
        "config",
        "history",
        "load_ext",
        "lsmagic",
        "magic",
        "mamba",
        "matplotlib",
        "pdb",
        "pinfo",
        "pinfo2",
        "pip",
        "precision",
        "pwd",
        "pylab",
        "reload_ext",
        "unload_ext",
        "who",
        "who_ls",
        "whos",
        "xmode",
    }
)
# Magics whose argument (line) or body (cell) is Python that runs once in the script.
TIMING_MAGICS = frozenset({"time", "timeit", "prun"})
TIMING_CELL_MAGICS = frozenset({"time", "timeit", "prun", "capture"})
# Cell magics that only show something in the notebook.
DISPLAY_CELL_MAGICS = frozenset({"html", "javascript", "js", "latex", "markdown", "svg"})
# Shell commands that install packages, or only look at the machine.
INSTALLERS = frozenset({"pip", "pip3", "conda", "mamba"})
LOOKING_COMMANDS = frozenset(
    {"cat", "date", "df", "du", "echo", "free", "head", "hostname", "ls", "lscpu", "nproc", "nvidia-smi", "pwd"}
    | {"tail", "uname", "which", "whoami"}
)
_ASSIGNED_MAGIC = re.compile(r"[\w.]+(\s*,\s*[\w.]+)*\s*=\s*[!%]")
_HELP = re.compile(r"\?{1,2}\s*[\w.*]*|[\w.*]+\s*\?{1,2}")
_MAGIC_NAME = re.compile(r"%{1,2}(\w+)")
_SHOWN = 60  # characters of a magic quoted in a message


class NotebookError(ValueError):
    """A notebook that cannot be read; the message says why, in one line."""


@dataclass(frozen=True)
class Place:
    """A line of a notebook: its cell (counted from 1, every cell) and the line in that cell."""

    cell: int
    line: int


@dataclass(frozen=True)
class Cell:
    """A code cell's text and its number among all the notebook's cells."""

    number: int
    source: str


@dataclass(frozen=True)
class Script:
    """A notebook's code cells as one script, where each of its lines came from, and the findings made on the way."""

    path: str  # the notebook, as named in messages
    text: str
    places: tuple[Place, ...]  # one per line of ``text``
    diagnostics: tuple[Diagnostic, ...]  # at lines of ``text``

    @property
    def source(self) -> bytes:
        return self.text.encode("utf-8")

    def place(self, line: int) -> Place:
        """The cell and cell line of the script's ``line`` (a ``# %%`` line: the first line of its cell)."""
        if not self.places:  # no code cell: the script is empty
            return Place(1, 1)
        return self.places[min(max(line, 1), len(self.places)) - 1]

    def at(self, line: int) -> tuple[str, int]:
        """Where the script's ``line`` is, as a finding names it: ``train.ipynb:cell 4`` and the cell's line."""
        place = self.place(line)
        return f"{self.path}:cell {place.cell}", place.line

    def report(self, conversion: Conversion) -> Conversion:
        """``conversion`` of :attr:`text`, with the findings made on the way, each at its cell and line."""
        findings = sorted(
            [*conversion.diagnostics, *self.diagnostics],
            key=lambda d: (d.path != self.path, d.path, d.line, d.column, d.code),
        )
        return replace(
            conversion,
            diagnostics=tuple(self._located(d) for d in findings),
            changes=tuple(self._located_change(c) for c in conversion.changes),
        )

    def _located(self, diagnostic: Diagnostic) -> Diagnostic:
        if diagnostic.path != self.path:
            return diagnostic  # in another module of the program
        path, line = self.at(diagnostic.line)
        message = f"{diagnostic.message} (script line {diagnostic.line})"
        return replace(diagnostic, path=path, line=line, message=message)

    def _located_change(self, change: Change) -> Change:
        if change.path not in ("", self.path):
            return change
        path, line = self.at(change.line)
        return replace(change, path=path, line=line)


def is_notebook(path: str) -> bool:
    return path.lower().endswith(EXTENSION)


def script_name(path: str) -> str:
    """The name of the script made from the notebook at ``path``: ``train.ipynb`` -> ``train.py``."""
    return path[: -len(EXTENSION)] + ".py" if is_notebook(path) else path


def available() -> bool:
    """Whether nbformat, which reading a notebook needs, is installed."""
    return importlib.util.find_spec("nbformat") is not None


def read(data: bytes, path: str) -> Script:
    """The script made of the notebook ``data``; raises :class:`NotebookError` when it cannot be read."""
    return script(code_cells(data, path), path)


def code_cells(data: bytes, path: str) -> list[Cell]:
    """The code cells of a version 3 or 4 notebook, in order; raises :class:`NotebookError`."""
    if not available():
        raise NotebookError(f"{path}: reading a notebook needs nbformat: {INSTALL}")
    import nbformat

    try:
        text = data.decode("utf-8-sig")
        raw = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotebookError(f"{path}: not a notebook: not JSON ({_first_line(exc)})") from None
    version = raw.get("nbformat") if isinstance(raw, dict) else None
    if version is None:
        raise NotebookError(f"{path}: not a notebook: no nbformat version in it")
    if version not in VERSIONS:
        raise NotebookError(f"{path}: notebook format version {version!r}; ddpify reads versions 3 and 4")
    try:
        with warnings.catch_warnings():
            # A cell without an id (nbformat 4.5) is read as Jupyter reads it: no warning on stderr.
            warnings.simplefilter("ignore")
            notebook = nbformat.reads(text, as_version=4, capture_validation_error={})  # type: ignore[no-untyped-call]
            nbformat.validate(notebook)
    except Exception as exc:  # nbformat raises jsonschema's errors, ValueError and KeyError alike
        raise NotebookError(f"{path}: not a valid version {version} notebook: {_first_line(exc)}") from None
    language = _language(notebook.get("metadata", {}))
    if language is not None and language.lower() != "python":
        raise NotebookError(f"{path}: a notebook in {language}, not Python")
    return [
        Cell(number, cell.source)
        for number, cell in enumerate(notebook.cells, start=1)
        if cell.cell_type == "code" and cell.source.strip()
    ]


def _language(metadata: Any) -> str | None:
    for key, field in (("kernelspec", "language"), ("language_info", "name")):
        value = metadata.get(key, {}).get(field) if isinstance(metadata.get(key), dict) else None
        if isinstance(value, str) and value:
            return value
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def script(cells: Sequence[Cell], path: str) -> Script:
    """The script of ``cells``: each under its ``# %% cell N`` line, one blank line between cells."""
    defines_display = any(_binds(cell.source, "display") for cell in cells)
    lines: list[str] = []
    places: list[Place] = []
    diagnostics: list[Diagnostic] = []
    for cell in cells:
        if lines:
            lines.append("")
            places.append(Place(cell.number, 1))
        lines.append(f"# %% cell {cell.number}")
        places.append(Place(cell.number, 1))
        made = _cell(cell, display=not defines_display)
        offset = len(lines)
        lines.extend(made.lines)
        places.extend(Place(cell.number, n) for n in range(1, len(made.lines) + 1))
        diagnostics.extend(code.at(offset + line, column, message, path) for line, column, code, message in made.found)
    text = "\n".join(lines) + "\n" if lines else ""
    return Script(path, text, tuple(places), tuple(diagnostics))


@dataclass
class _Made:
    """One cell's lines as the script holds them, and what was found: (cell line, column, code, message)."""

    lines: list[str]
    found: list[tuple[int, int, Code, str]]


def _cell(cell: Cell, *, display: bool) -> _Made:
    lines = cell.source.replace("\r\n", "\n").replace("\r", "\n").rstrip().split("\n")
    made = _Made(list(lines), [])
    commented = _magics(made)
    commented |= _ipython_calls(made)
    _keep_blocks(made, commented)
    _displays(made, display=display)
    return made


def _magics(made: _Made) -> set[int]:
    """Comment out IPython's own syntax, line by line; the indexes of the lines commented."""
    lines = made.lines
    commented: set[int] = set()
    first = next((i for i, line in enumerate(lines) if line.strip()), 0)
    stripped = lines[first].strip()
    if stripped.startswith("%%"):
        name = _name(stripped)
        code, message = _cell_magic(name, stripped)
        made.found.append((first + 1, len(lines[first]) - len(lines[first].lstrip()) + 1, code, message))
        last = first if name in TIMING_CELL_MAGICS else len(lines) - 1
        for i in range(first, last + 1):
            lines[i] = _comment(lines[i])
            commented.add(i)
        if name not in TIMING_CELL_MAGICS:
            return commented
    i = 0
    while i < len(lines):
        line = lines[i]
        text = line.strip()
        if i in commented or not _is_ipython(text) or _continues(lines[:i]):
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        end = i
        while lines[end].rstrip().endswith("\\") and end + 1 < len(lines):
            end += 1  # IPython joins a magic's continuation lines
        kept = _timed_statement(text) if end == i else None
        code, message = _line_magic(text)
        made.found.append((i + 1, len(indent) + 1, code, message))
        if kept is not None:
            lines[i] = indent + kept
        else:
            for j in range(i, end + 1):
                lines[j] = _comment(lines[j])
                commented.add(j)
        i = end + 1
    return commented


def _is_ipython(text: str) -> bool:
    """Whether a line that starts a statement is IPython syntax rather than Python."""
    return text.startswith(("%", "!")) or bool(_ASSIGNED_MAGIC.match(text)) or bool(_HELP.fullmatch(text))


def _continues(before: Sequence[str]) -> bool:
    """Whether the line after ``before`` continues a statement (an open bracket or string, a backslash)."""
    if not before:
        return False
    try:
        for _ in tokenize.generate_tokens(io.StringIO("\n".join(before) + "\n").readline):
            pass
    except tokenize.TokenError:
        return True
    except (IndentationError, SyntaxError):
        return False
    return False


def _name(text: str) -> str:
    match = _MAGIC_NAME.match(text)
    return match.group(1) if match else ""


def _shown(text: str) -> str:
    text = text.strip()
    return f"`{text}`" if len(text) <= _SHOWN else f"`{text[: _SHOWN - 3]}...`"


def _cell_magic(name: str, text: str) -> tuple[Code, str]:
    shown = _shown(text)
    if name in TIMING_CELL_MAGICS:
        return NOTEBOOK_SETUP, f"{shown}: an IPython cell magic, kept as a comment; the cell's code runs once"
    if name in DISPLAY_CELL_MAGICS:
        return NOTEBOOK_SETUP, f"{shown}: a cell that only shows {name} in the notebook, kept as comments"
    if name == "writefile":
        return NOTEBOOK_ONLY, f"{shown}: the cell writes a file, which the script does not: kept as comments"
    return NOTEBOOK_ONLY, f"{shown}: a cell IPython runs as {name or 'a magic'}, not Python: kept as comments"


def _line_magic(text: str) -> tuple[Code, str]:
    """The code and message for one line of IPython syntax."""
    shown = _shown(text)
    if _ASSIGNED_MAGIC.match(text):
        target = text.split("=", 1)[0].strip()
        return NOTEBOOK_ONLY, f"{shown}: IPython sets {target} from a magic or shell command; kept as a comment"
    if _HELP.fullmatch(text):
        return NOTEBOOK_SETUP, f"{shown}: IPython's help, kept as a comment"
    if text.startswith("!"):
        return _shell(text.lstrip("!").strip(), shown)
    name = _name(text)
    if name in TIMING_MAGICS:
        kept = _timed_statement(text)
        if kept is not None:
            return NOTEBOOK_SETUP, f"{shown}: the %{name} magic dropped, the statement it times kept"
        return NOTEBOOK_SETUP, f"{shown}: an IPython magic, kept as a comment"
    if name in ("pip", "conda", "mamba"):
        return NOTEBOOK_SETUP, f"{shown}: kept as a comment; install it before running the script"
    if name in SETUP_MAGICS or (name == "env" and not text[len("%env") :].strip()):
        return NOTEBOOK_SETUP, f"{shown}: an IPython magic, kept as a comment"
    return NOTEBOOK_ONLY, f"{shown}: an IPython magic the script does not run, kept as a comment"


def _shell(command: str, shown: str) -> tuple[Code, str]:
    words = command.split()
    program = words[0].rsplit("/", 1)[-1] if words else ""
    if program in INSTALLERS or words[1:3] == ["-m", "pip"]:
        return NOTEBOOK_SETUP, f"{shown}: a shell command, kept as a comment; install it before running the script"
    if program in LOOKING_COMMANDS:
        return NOTEBOOK_SETUP, f"{shown}: a shell command, kept as a comment"
    return NOTEBOOK_ONLY, f"{shown}: a shell command the script does not run, kept as a comment"


def _timed_statement(text: str) -> str | None:
    """The statement ``%time STATEMENT`` times, when it is one line of Python (options aside: kept whole)."""
    name = _name(text)
    if not text.startswith("%") or text.startswith("%%") or name not in TIMING_MAGICS:
        return None
    statement = text[1 + len(name) :].strip()
    if not statement or statement.startswith("-"):
        return None
    try:
        ast.parse(statement)
    except SyntaxError:
        return None
    return statement


def _comment(line: str) -> str:
    stripped = line.lstrip()
    return line[: len(line) - len(stripped)] + "# " + stripped if stripped else line


def _ipython_calls(made: _Made) -> set[int]:
    """Comment out statements on ``get_ipython()``, which a script does not have; the lines commented."""
    tree = _parse(made.lines)
    if tree is None:
        return set()
    commented: set[int] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Expr) and _on_get_ipython(node.value)) or node.end_lineno is None:
            continue
        assert isinstance(node.value, ast.Call)
        span = range(node.lineno - 1, node.end_lineno)
        first = made.lines[node.lineno - 1]
        if first[: node.col_offset].strip() or made.lines[node.end_lineno - 1][node.end_col_offset or 0 :].strip():
            continue  # shares its lines with other statements
        made.found.append((node.lineno, node.col_offset + 1, *_ipython_call(node.value, first)))
        for i in span:
            made.lines[i] = _comment(made.lines[i])
            commented.add(i)
    return commented


def _on_get_ipython(call: ast.expr) -> bool:
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Call)
        and isinstance(call.func.value.func, ast.Name)
        and call.func.value.func.id == "get_ipython"
    )


def _ipython_call(call: ast.Call, line: str) -> tuple[Code, str]:
    """What ``get_ipython().method(...)`` is, judged as the magic or shell command it runs."""
    assert isinstance(call.func, ast.Attribute)
    method = call.func.attr
    words = [arg.value for arg in call.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
    shown = _shown(line)
    if method == "run_line_magic" and words:
        code, _ = _line_magic(f"%{words[0]} {words[1] if len(words) > 1 else ''}".strip())
        if code is NOTEBOOK_SETUP:
            return code, f"{shown}: an IPython magic, kept as a comment"
    elif method == "system" and words:
        code, _ = _shell(words[0], shown)
        if code is NOTEBOOK_SETUP:
            return code, f"{shown}: a shell command, kept as a comment"
    elif method == "run_cell_magic" and words and words[0] in DISPLAY_CELL_MAGICS:
        return NOTEBOOK_SETUP, f"{shown}: a cell that only shows {words[0]} in the notebook, kept as a comment"
    return NOTEBOOK_ONLY, f"{shown}: IPython code the script cannot run (no get_ipython()), kept as a comment"


def _keep_blocks(made: _Made, commented: set[int]) -> None:
    """A block that only held magics would be empty: its commented lines become ``pass  # ...``."""
    if not commented or _parse(made.lines) is not None:
        return
    for i in sorted(commented):
        line = made.lines[i]
        stripped = line.lstrip()
        if line != stripped and stripped.startswith("# "):
            made.lines[i] = line[: len(line) - len(stripped)] + "pass  " + stripped


def _displays(made: _Made, *, display: bool) -> None:
    """``display(x)`` becomes ``print(x)``, and the cell's last expression, if it calls nothing, is printed."""
    tree = _parse(made.lines)
    if tree is None:
        return
    edits: list[tuple[int, int, int, str]] = []  # (line index, start, end, text), in characters
    if display:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "display":
                if node.keywords:
                    message = "`display(...)` with keywords needs IPython; import it or print instead"
                    made.found.append((node.lineno, node.col_offset + 1, NOTEBOOK_ONLY, message))
                    continue
                start = _column(made.lines, node.func.lineno, node.func.col_offset)
                edits.append((node.func.lineno - 1, start, start + len("display"), "print"))
                message = "`display(...)`: IPython's display, printed instead"
                made.found.append((node.lineno, node.col_offset + 1, NOTEBOOK_DISPLAY, message))
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.Expr) and _shows(last, made.lines) and last.end_lineno is not None:
        value = last.value
        start = _column(made.lines, value.lineno, value.col_offset)
        end = _column(made.lines, last.end_lineno, last.end_col_offset or 0)
        edits.append((last.end_lineno - 1, end, end, ")"))
        edits.append((value.lineno - 1, start, start, "print("))
        text = ast.get_source_segment("\n".join(made.lines), value) or ""
        message = f"{_shown(text)}: the cell's value, which the notebook shows, printed"
        made.found.append((value.lineno, value.col_offset + 1, NOTEBOOK_DISPLAY, message))
    for index, start, end, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        line = made.lines[index]
        made.lines[index] = line[:start] + text + line[end:]
    made.found.sort(key=lambda f: (f[0], f[1]))


def _shows(statement: ast.Expr, lines: Sequence[str]) -> bool:
    """Whether the notebook shows this last expression and printing it cannot change anything:
    it calls nothing, is not a constant, and no ``;`` hides it."""
    value = statement.value
    if isinstance(value, ast.Constant) or statement.end_lineno is None:
        return False
    after = lines[statement.end_lineno - 1][_column(lines, statement.end_lineno, statement.end_col_offset or 0) :]
    if after.lstrip().startswith(";"):
        return False
    changes = (ast.Call, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr, ast.Lambda)
    return not any(isinstance(node, changes) for node in ast.walk(value))


def _column(lines: Sequence[str], lineno: int, offset: int) -> int:
    """The character column of ``ast``'s UTF-8 byte offset on line ``lineno``."""
    return len(lines[lineno - 1].encode("utf-8")[:offset].decode("utf-8", errors="replace"))


def _parse(lines: Iterable[str]) -> ast.Module | None:
    try:
        return ast.parse("\n".join(lines) + "\n")
    except (SyntaxError, ValueError):
        return None


def _binds(source: str, name: str) -> bool:
    """Whether the cell defines, imports or assigns ``name`` (then ``display`` is the notebook's own)."""
    tree = _parse([line for line in source.splitlines() if not _is_ipython(line.strip())])
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (alias.asname or alias.name.split(".")[0]) == name for alias in node.names
        ):
            return True
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return True
    return False

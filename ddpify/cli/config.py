"""``[tool.ddpify]`` in ``pyproject.toml``: a project's choices in one place, under the command line.

The file is found as ruff finds its own: the nearest ``pyproject.toml`` with a
``[tool.ddpify]`` table, walking up from the folder that holds the inputs
(the current folder for stdin). ``--config FILE`` reads that file's
``[tool.ddpify]`` instead, and ``--no-config`` reads none. A flag given on the
command line wins over the file::

    [tool.ddpify]
    sync-bn = true
    output = "build/ddp/"
    extend-exclude = ["experiments/*"]

    [tool.ddpify.verify]
    nproc = 2
    max-steps = 20

Bad configuration (TOML that does not parse, an unknown key, a value of the
wrong type) is a usage error, exit 2, reported as ``file:line`` with the key,
before anything is read or written. So is an ``output`` that leads outside the
file's project (the folder that holds it; ``..``, an absolute path, a symlink
out), unless the command line places the outputs itself: a repository's
configuration must not make a plain ``ddpify train.py`` write elsewhere. :data:`KEYS` lists every key; README's
"Configuration" documents each.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ddpify.cli.exits import Failure
from ddpify.cli.request import valid_suffix

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PYPROJECT = "pyproject.toml"
TABLE = "tool.ddpify"
VERIFY_TABLE = f"{TABLE}.verify"


@dataclass(frozen=True)
class Settings:
    """What ``[tool.ddpify]`` sets; ``None`` where it says nothing."""

    path: str | None = None  # the file read; None: no configuration
    keep_global_batch: bool | None = None
    sync_bn: bool | None = None
    find_unused_parameters: bool | None = None
    shard_eval: bool | None = None
    strict: bool | None = None
    spawn: bool | None = None
    output: str | None = None  # a folder, ending with a slash, resolved against the file's folder
    # Why ``output`` may not be used (it leads out of the file's project); a command line that places
    # the outputs itself never uses it.
    output_refused: str | None = None
    suffix: str | None = None
    exclude: tuple[str, ...] | None = None  # None: the default excludes
    extend_exclude: tuple[str, ...] = ()
    exclude_root: str | None = None  # the folder the exclude globs are relative to: the file's
    jobs: int | None = None
    nproc: int | None = None
    timeout: float | None = None
    max_steps: int | None = None


@dataclass(frozen=True)
class Key:
    """One key of the table: the setting it fills, what it accepts, and how that is said."""

    setting: str
    accepts: Callable[[object], bool]
    expected: str


def _boolean(value: object) -> bool:
    return isinstance(value, bool)


def _integer(minimum: int) -> Callable[[object], bool]:
    return lambda value: isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _positive_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _text(value: object) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _globs(value: object) -> bool:
    return isinstance(value, list) and all(_text(item) for item in value)


def _suffix(value: object) -> bool:
    return isinstance(value, str) and valid_suffix(value)


KEYS: dict[str, Key] = {
    "keep-global-batch": Key("keep_global_batch", _boolean, "true or false"),
    "sync-bn": Key("sync_bn", _boolean, "true or false"),
    "find-unused-parameters": Key("find_unused_parameters", _boolean, "true or false"),
    "shard-eval": Key("shard_eval", _boolean, "true or false"),
    "strict": Key("strict", _boolean, "true or false"),
    "spawn": Key("spawn", _boolean, "true or false"),
    "output": Key("output", _text, "a folder, as a string"),
    "suffix": Key("suffix", _suffix, 'a part of a file name, such as "_ddp"'),
    "exclude": Key("exclude", _globs, "a list of glob strings"),
    "extend-exclude": Key("extend_exclude", _globs, "a list of glob strings"),
    "jobs": Key("jobs", _integer(1), "an integer of at least 1"),
}
VERIFY_KEYS: dict[str, Key] = {
    "nproc": Key("nproc", _integer(2), "an integer of at least 2"),
    "timeout": Key("timeout", _positive_number, "a number of seconds above 0"),
    "max-steps": Key("max_steps", _integer(1), "an integer of at least 1"),
}


def load(sources: Sequence[str], *, config: str | None, no_config: bool) -> Settings:
    """The settings for a run on ``sources``; raises ``Failure`` (exit 2) for bad configuration."""
    if no_config:
        return Settings()
    if config is not None:
        table = _table(config, _parse(config))
        if table is None:
            raise Failure(f"{config}: no [{TABLE}] table")
        return _settings(config, table)
    found = find(start_folder(sources))
    return Settings() if found is None else _settings(*found)


def start_folder(sources: Sequence[str]) -> str:
    """The folder that holds every input (the current folder for stdin): where the search starts."""
    folders = [
        os.path.abspath(src if os.path.isdir(src) else os.path.dirname(src) or ".") for src in sources if src != "-"
    ]
    return os.path.commonpath(folders) if folders else os.getcwd()


def find(start: str) -> tuple[str, dict[str, Any]] | None:
    """The nearest ``pyproject.toml`` at or above ``start`` that has a ``[tool.ddpify]`` table, and the table."""
    folder = os.path.abspath(start)
    while True:
        candidate = _shown_path(os.path.join(folder, PYPROJECT))
        table = _table(candidate, _parse(candidate)) if os.path.isfile(candidate) else None
        if table is not None:
            return candidate, table
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def _parse(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as stream:
            document: dict[str, Any] = tomllib.load(stream)
            return document
    except OSError as exc:
        raise Failure(f"{path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        line, message = _decode_error(exc)
        raise Failure(f"{path}:{line}: not valid TOML: {message}") from exc
    except UnicodeDecodeError as exc:
        raise Failure(f"{path}: not valid TOML: not UTF-8 ({exc.reason})") from exc


def _decode_error(exc: tomllib.TOMLDecodeError) -> tuple[int, str]:
    """The line of a TOML error, and its message without the position tomllib appends to it."""
    text = str(exc)
    match = re.search(r" \(at line (\d+), column \d+\)$", text)
    if match:
        return int(match.group(1)), text[: match.start()]
    lineno = getattr(exc, "lineno", None)  # Python 3.14 and tomli 2.1 also give it as an attribute
    return (lineno if isinstance(lineno, int) else 1), text.removesuffix(" (at end of document)")


def _table(path: str, document: dict[str, Any]) -> dict[str, Any] | None:
    tool = document.get("tool")
    if not isinstance(tool, dict) or "ddpify" not in tool:
        return None
    table = tool["ddpify"]
    if not isinstance(table, dict):
        raise Failure(f"{path}:{_line_of(path, TABLE)}: [{TABLE}] must be a table")
    return table


def _settings(path: str, table: dict[str, Any]) -> Settings:
    values: dict[str, Any] = {}
    for name, value in table.items():
        if name == "verify":
            if not isinstance(value, dict):
                raise Failure(f"{path}:{_line_of(path, TABLE, name)}: [{TABLE}] verify must be a table")
            values.update(_checked(path, VERIFY_TABLE, value, VERIFY_KEYS))
        else:
            values.update(_checked(path, TABLE, {name: value}, KEYS))
    if "output" in values and "suffix" in values:
        raise Failure(
            f"{path}:{_line_of(path, TABLE, 'suffix')}: [{TABLE}] sets both output and suffix; keep one: "
            "output names a folder for the outputs, suffix writes each next to its input"
        )
    folder = os.path.dirname(path) or "."
    if "output" in values:
        given = values["output"]
        values["output"] = _folder(os.path.join(folder, given))
        project = os.path.realpath(folder)
        real = os.path.realpath(values["output"])
        if os.path.commonpath([project, real]) != project:
            values["output_refused"] = (
                f"{path}:{_line_of(path, TABLE, 'output')}: [{TABLE}] output {given!r} leads outside the project "
                f"of {path} (to {real}); a configuration file may only write inside its project: change it, "
                "or give -o on the command line"
            )
    for name in ("exclude", "extend_exclude"):
        if name in values:
            values[name] = tuple(values[name])
    return Settings(path=path, exclude_root=folder, **values)


def _checked(path: str, table_name: str, table: dict[str, Any], keys: dict[str, Key]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, value in table.items():
        key = keys.get(name)
        if key is None:
            known = [*keys, *(["verify"] if keys is KEYS else [])]
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
            raise Failure(f"{path}:{_line_of(path, table_name, name)}: [{table_name}] unknown key {name!r}; {hint}")
        if not key.accepts(value):
            raise Failure(
                f"{path}:{_line_of(path, table_name, name)}: [{table_name}] {name} must be {key.expected}, "
                f"not {_shown(value)}"
            )
        values[key.setting] = value
    return values


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    return f"{value!r} ({type(value).__name__})" if not isinstance(value, int | float) else repr(value)


def _shown_path(path: str) -> str:
    """``path`` relative to the current folder when it lies below it, else absolute."""
    relative = os.path.relpath(path)
    return os.path.abspath(path) if relative.startswith("..") else relative


def _folder(path: str) -> str:
    """``path`` as ``-o`` takes a folder: shown as :func:`_shown_path` does, ending with a slash."""
    return _shown_path(path).rstrip("/" + os.sep) + "/"


# -- where a key is written, for messages -----------------------------------------------------------

_HEADER = re.compile(r"^\s*\[\[?\s*(?P<name>[^\]]+?)\s*\]\]?\s*(#.*)?$")
_ASSIGNMENT = re.compile(r"^\s*(?P<key>[A-Za-z0-9_\-.\"' ]+?)\s*=")


def _dotted(key: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in key.split("."))


def _line_of(path: str, table: str, key: str | None = None) -> int:
    """The line of ``path`` that sets ``key`` of ``table`` (or opens ``table``); 1 when it cannot be told.

    Only for messages: the document itself was read by tomllib. A line is
    found by the dotted name it sets, from its table header and its own key
    (``[tool.ddpify]`` then ``jobs = 2``, or ``[tool]`` then ``ddpify.jobs = 2``).
    """
    target = f"{table}.{key}" if key is not None else table
    try:
        with open(path, encoding="utf-8") as stream:
            lines = stream.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return 1
    header = ""
    for number, line in enumerate(lines, start=1):
        opened = _HEADER.match(line)
        if opened:
            header = _dotted(opened.group("name"))
            if header == target:
                return number
            continue
        assigned = _ASSIGNMENT.match(line)
        if assigned and _dotted(f"{header}.{assigned.group('key')}" if header else assigned.group("key")) == target:
            return number
    return _line_of(path, table) if key is not None else 1

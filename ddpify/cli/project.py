"""The project around an entry script: where its imports lead, and its files, each read once per run.

* **Resolution follows importlib.** ``python train.py`` searches the script's
  folder first; ddpify searches it and the project's root. In one folder a
  package (``utils/__init__.py``) comes before a compiled module
  (``utils.cpython-311-x86_64-linux-gnu.so``), which comes before ``utils.py``;
  a folder without ``__init__.py`` is a namespace package only when no folder
  has the module itself. A module present only as bytecode (``utils.pyc``
  beside the script, which Python imports when ``utils.py`` is missing) is
  local but cannot be read: :mod:`ddpify.cli.program` names it. A name Python never looks for on the path (a built-in
  module such as ``sys``, a frozen one such as ``os``, or one the interpreter
  imports while it starts, such as ``encodings``) is never a local module, even
  when a file of that name exists.
* **A module keeps the path it is imported from.** ``utils.py`` that is a
  symlink to ``../shared/utils.py`` is the module ``utils`` at ``utils.py``:
  that is where ``-o DIR/`` writes it. Two paths that lead to one file are one
  module (the first path found names it).
* **Reading is bounded and safe.** Only regular files are read (a FIFO would
  block, ``/dev/zero`` never ends), opened without waiting; a symlink loop or
  a dangling link is no file; at most ``limit`` bytes are read, whatever
  ``stat`` says the size is.
* **The scan for other importers** (scripts of the project that import a
  module of the program too) walks the project once per run, outside hidden
  folders, environments and build output, without following symlinked
  folders, and at most :data:`MAX_SCANNED` files.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib.machinery
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ddpify.cli.screening import Facts, FirstPass, screen
from ddpify.engine.reach import parse

ROOT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
MAX_SCANNED = 2000  # files of a project looked at for other importers
MAX_ABOVE = 3  # folders above a project searched for a package its scripts import
NOT_SOURCES = frozenset({"venv", "env", "site-packages", "node_modules", "build", "dist", "__pycache__"})

# Modules the interpreter has loaded, or will load without the path, whatever files the script's
# folder holds: built-in and frozen modules, and what start-up imports in every configuration.
_STARTUP = frozenset(
    {
        "_collections_abc",
        "_sitebuiltins",
        "abc",
        "codecs",
        "encodings",
        "genericpath",
        "io",
        "ntpath",
        "os",
        "posixpath",
        "site",
        "stat",
        "zipimport",
    }
)


def _never_local() -> frozenset[str]:
    names = set(sys.builtin_module_names) | _STARTUP
    with contextlib.suppress(ImportError, AttributeError):
        import _imp

        names |= {name.split(".")[0] for name in _imp._frozen_module_names()}  # type: ignore[attr-defined]
    return frozenset(names)


NEVER_LOCAL = _never_local()


def project_root(folder: Path) -> Path:
    """The nearest folder at or above ``folder`` that marks a project's root; ``folder`` if none does."""
    for candidate in (folder, *folder.parents):
        if any(os.path.lexists(candidate / marker) for marker in ROOT_MARKERS):
            return candidate
    return folder


def read_bounded(path: str | Path, limit: int) -> bytes | None:
    """The bytes of the regular file at ``path`` if it holds at most ``limit``; None for anything
    else: missing, a symlink loop, a FIFO, a device, a socket, a folder, unreadable, or larger."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data if len(data) <= limit else None


def is_regular_file(path: Path) -> bool:
    """Whether ``path`` leads to a regular file; a symlink loop, a FIFO or a device is not one."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


@dataclass(frozen=True)
class Found:
    """Where a module name leads: the file to read (None for a namespace package), its real path,
    and where its submodules are looked for (None for a plain module)."""

    file: Path | None
    locations: tuple[Path, ...] | None
    real: str = ""
    compiled: Path | None = None  # a module present only as bytecode (``utils.pyc``), which Python imports too


class Resolver:
    """Module names to local files, as the path finder would find them on ``search``.

    A top-level name not found there is looked for, last, as a package (a folder with
    ``__init__.py``) in one of ``above``: the folders above a script whose project has no root
    marker, where a repository keeps the package its scripts import once it is installed
    (``pip install -e .``) or put on ``PYTHONPATH``.
    """

    def __init__(self, search: tuple[Path, ...], above: tuple[Path, ...] = ()) -> None:
        self.search = search
        self.above = above
        self.cache: dict[str, Found | None] = {}

    def file(self, name: str) -> Found | None:
        """The local file ``import name`` reads, or None (someone else's module, or a namespace package)."""
        found = self.find(name)
        return found if found is not None and found.file is not None else None

    def compiled(self, name: str) -> Path | None:
        """The bytecode file ``import name`` loads when the module is present only as ``name.pyc``."""
        found = self.find(name)
        return found.compiled if found is not None else None

    def find(self, name: str) -> Found | None:
        if name in self.cache:
            return self.cache[name]
        parent, _, last = name.rpartition(".")
        if not parent:
            found = None if name in NEVER_LOCAL else _find_in(last, self.search) or self._package_above(last)
        else:
            outer = self.find(parent)
            found = _find_in(last, outer.locations) if outer is not None and outer.locations else None
        self.cache[name] = found
        return found

    def _package_above(self, name: str) -> Found | None:
        if name in sys.stdlib_module_names:
            return None
        for folder in self.above:
            init = folder / name / "__init__.py"
            if is_regular_file(init):
                return Found(init, (folder / name,), os.path.realpath(init))
            # the folder that holds the script itself, without ``__init__.py``: run as ``python -m src.main``
            # from the folder above, it is a namespace package (``from src.utils import *``)
            portion = os.path.realpath(folder / name)
            if os.path.isdir(portion) and any(
                os.path.commonpath([os.path.realpath(place), portion]) == portion for place in self.search
            ):
                return Found(None, (folder / name,))
        return None


_EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def _find_in(name: str, folders: tuple[Path, ...]) -> Found | None:
    """``name`` in the first of ``folders`` that has it: a package, a compiled module (not ours), a
    ``.py`` module; a namespace package of every folder that has only a plain folder of that name."""
    portions: list[Path] = []
    for folder in folders:
        package = folder / name
        if os.path.isdir(package):
            init = package / "__init__.py"
            if is_regular_file(init):
                return Found(init, (package,), os.path.realpath(init))
            if any(os.path.isfile(package / f"__init__{suffix}") for suffix in _EXTENSIONS):
                return None
            portions.append(package)
        if any(os.path.isfile(folder / f"{name}{suffix}") for suffix in _EXTENSIONS):
            return None
        module = folder / f"{name}.py"
        if is_regular_file(module):
            return Found(module, None, os.path.realpath(module))
        bytecode = folder / f"{name}.pyc"  # a sourceless module: Python loads it, ddpify cannot read it
        if is_regular_file(bytecode):
            return Found(None, None, os.path.realpath(bytecode), compiled=bytecode)
    return Found(None, tuple(portions)) if portions else None


class Project:
    """The files of one project read during a run: each file's facts, found once by its real path."""

    def __init__(self, root: Path, *, limit: int) -> None:
        self.root = root
        self.limit = limit
        self._facts: dict[str, tuple[bytes, Facts | None]] = {}
        self._resolvers: dict[tuple[Path, ...], Resolver] = {}
        self._imports: dict[tuple[tuple[Path, ...], str, str], list[tuple[str, Found]]] = {}
        self._scanned: list[tuple[Path, Facts]] | None = None
        self._strings: dict[str, list[str]] = {}
        self.first_pass = FirstPass()

    @functools.cached_property
    def above(self) -> tuple[Path, ...]:
        """The folders above the root that may hold the project's code: none when a marker names the root;
        without one the project's extent is unknown, and its package may sit a few folders up."""
        marked = any(os.path.lexists(self.root / marker) for marker in ROOT_MARKERS)
        return () if marked else tuple(self.root.parents)[:MAX_ABOVE]

    def holds(self, folder: Path) -> bool:
        """Whether ``folder`` may hold the project's code: the root or inside it, or (with no marker of
        the root) a folder up to ``MAX_ABOVE`` levels above it or inside one."""
        top = self.above[-1] if self.above else self.root
        return folder == top or top in folder.parents

    def resolver(self, search: tuple[Path, ...]) -> Resolver:
        found = self._resolvers.get(search)
        if found is None:
            found = self._resolvers[search] = Resolver(search, self.above)
        return found

    def imports(self, search: tuple[Path, ...], key: str, package: str, facts: Facts) -> list[tuple[str, Found]]:
        """The local modules the file ``key`` (with ``facts``, in ``package``) imports, by name, when
        modules are searched on ``search``: its import statements and constant ``import_module()``."""
        memo = (search, key, package)
        found = self._imports.get(memo)
        if found is None or self._facts.get(key, (b"", None))[1] is not facts:
            resolver = self.resolver(search)
            names = facts.imported_modules(package)
            names += [load.module for load in facts.loads if load.kind == "call" and load.module is not None]
            found = [(name, file) for name in names if (file := resolver.file(name)) is not None]
            self._imports[memo] = found
        return found

    def facts(self, path: Path | str, source: bytes | None = None) -> Facts | None:
        """The first pass's facts of the file at ``path`` (of ``source``, its text, when given):
        None when it cannot be read or parsed. A ``str`` path is taken as real already."""
        key = path if isinstance(path, str) else os.path.realpath(path)
        digest = hashlib.blake2b(source, digest_size=16).digest() if source is not None else None
        known = self._facts.get(key)
        if known is not None and (digest is None or known[0] == digest):
            return known[1]
        if source is None:
            source = read_bounded(key, self.limit)
            if source is None:
                return None
            digest = hashlib.blake2b(source, digest_size=16).digest()
        assert digest is not None
        facts = screen(source)
        self._facts[key] = (digest, facts)
        if facts is not None:
            self.first_pass.add(key, facts)
        return facts

    def strings(self, real: str) -> list[str]:
        """The string constants of the file at the real path ``real``, sorted (found once per run: every
        program that loads a module by a computed name asks them of each file it reaches)."""
        found = self._strings.get(real)
        if found is None:
            source = read_bounded(real, self.limit)
            tree = parse(source) if source is not None else None
            found = self._strings[real] = sorted(
                {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
                if tree is not None
                else set()
            )
        return found

    def scripts(self) -> list[tuple[Path, Facts]]:
        """The project's Python files that import something, with their facts, found once."""
        if self._scanned is None:
            self._scanned = []
            for path in _project_files(self.root):
                facts = self.facts(os.path.realpath(path))
                if facts is not None and facts.imports:
                    self._scanned.append((path, facts))
        return self._scanned


def _project_files(root: Path) -> Iterator[Path]:
    """The project's regular ``*.py`` files, outside hidden folders, environments and build output;
    symlinked folders are not entered (no loops), at most :data:`MAX_SCANNED` files."""
    count = 0
    for folder, subfolders, files in os.walk(root):  # a folder it cannot list is left out
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and d not in NOT_SOURCES)
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = Path(folder, name)
            if not is_regular_file(path):
                continue
            count += 1
            if count > MAX_SCANNED:
                return
            yield path

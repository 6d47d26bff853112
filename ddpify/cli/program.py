"""The training program an entry script belongs to: the local modules it imports, found as Python would.

A module is local when it resolves to a file in the entry script's folder or
the project's root folder (the nearest folder above the entry that holds
``.git``, ``pyproject.toml``, ``setup.py`` or ``setup.cfg``): the two places
``python train.py`` and ``python -m`` find a project's own code. Installed
packages are never read. Imports anywhere in a module count (in functions and
``try`` blocks too); a name that resolves to no file is someone else's.

Only the text of the files is read: nothing is imported or run.
"""

from __future__ import annotations

import ast
import os
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path

from ddpify.cli.exits import Failure
from ddpify.cli.files import read_input
from ddpify.result import LocalModule

ROOT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
MAX_MODULES = 200  # a training program is a handful of files; more is a library, not read whole


@dataclass(frozen=True)
class ProgramFiles:
    """An entry script and the local modules it imports (directly or through one another)."""

    entry: Path
    base: Path  # the folder the program's paths are relative to (the entry's, or the project root)
    modules: tuple[LocalModule, ...]

    def relative(self, path: str) -> str:
        """``path`` (as in a :class:`LocalModule`) relative to ``base``."""
        return os.path.relpath(os.path.abspath(path), self.base)


def project_root(folder: Path) -> Path:
    """The nearest folder at or above ``folder`` that marks a project's root; ``folder`` if none does."""
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in ROOT_MARKERS):
            return candidate
    return folder


def local_modules(entry: str, source: bytes, *, max_size: int, root: Path | None = None) -> ProgramFiles:
    """The program of the script ``entry`` (whose text is ``source``): every local module
    reachable through its imports, in the order found."""
    entry_path = Path(entry).resolve()
    folder = entry_path.parent
    root = root.resolve() if root is not None else project_root(folder)
    search = [folder] if root == folder else [folder, root]
    found: dict[Path, LocalModule] = {}
    queue: deque[tuple[Path, str]] = deque([(entry_path, "")])
    while queue:
        path, package = queue.popleft()
        text = source if path == entry_path else found[path].source
        assert isinstance(text, bytes)
        for name in _imported_modules(text, package):
            file = _resolve(name, search)
            if file is None or file == entry_path or file in found:
                continue
            if len(found) >= MAX_MODULES:
                raise Failure(
                    f"{entry}: imports more than {MAX_MODULES} local modules; convert its training code alone"
                )
            module = LocalModule(_shown(file), name, _read(file, entry, max_size))
            found[file] = module
            queue.append((file, module.package))
    inside = all(folder in file.parents for file in found)
    shared = _imported_elsewhere(set(found), {entry_path}, search, root)
    modules = tuple(replace(module, shared=True) if file in shared else module for file, module in found.items())
    return ProgramFiles(entry_path, folder if inside else root, modules)


def _imported_elsewhere(modules: set[Path], program: set[Path], search: list[Path], root: Path) -> set[Path]:
    """The ``modules`` that a script of the project outside the program imports too (an evaluation
    script next to the training script): their new code must also run without a process group."""
    if not modules:
        return set()
    shared: set[Path] = set()
    for file in _project_files(root):
        if file in program or file in modules:
            continue
        try:
            source = file.read_bytes() if file.stat().st_size <= 1 << 20 else b""
        except OSError:
            continue
        if b"import" not in source:
            continue
        for name in _imported_modules(source, ""):
            resolved = _resolve(name, [file.parent, *search])
            if resolved in modules:
                shared.add(resolved)
    return shared


def _project_files(root: Path) -> list[Path]:
    """The project's Python files, outside hidden folders, virtual environments and build output."""
    found: list[Path] = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d not in _NOT_SOURCES]
        found += [Path(folder, f).resolve() for f in files if f.endswith(".py")]
        if len(found) > MAX_SCANNED:
            break
    return found


_NOT_SOURCES = frozenset({"venv", "env", "site-packages", "node_modules", "build", "dist", "__pycache__"})
MAX_SCANNED = 2000


def _read(path: Path, entry: str, max_size: int) -> bytes:
    try:
        return read_input(str(path), max_size=max_size)
    except Failure as failure:
        raise Failure(
            f"{entry} imports {_shown(path)}, which cannot be read: {failure.message}", failure.code
        ) from None


def _shown(path: Path) -> str:
    """How a module's path is shown and written: relative to the current folder when it is below it."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def _imported_modules(source: bytes, package: str) -> list[str]:
    """Every module name an import in ``source`` may load, packages first: ``a``, ``a.b`` for ``import a.b``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # the conversion reports what is wrong with it
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names += _with_packages(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            if base is None:
                continue
            names += _with_packages(base)
            names += [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]
    return list(dict.fromkeys(names))


def _absolute(node: ast.ImportFrom, package: str) -> str | None:
    if not node.level:
        return node.module
    parts = package.split(".") if package else []
    if node.level - 1 >= len(parts) + (1 if node.module else 0) or not parts:
        return None
    return ".".join([*parts[: len(parts) - node.level + 1], *([node.module] if node.module else [])]) or None


def _with_packages(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _resolve(name: str, search: list[Path]) -> Path | None:
    """The file ``name`` loads from the first folder of ``search`` that has it (a module or a package)."""
    relative = Path(*name.split("."))
    for folder in search:
        for file in (folder / relative.with_suffix(".py"), folder / relative / "__init__.py"):
            if file.is_file():
                return file.resolve()
    return None

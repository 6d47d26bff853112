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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ddpify.cli.exits import Failure
from ddpify.cli.files import read_input
from ddpify.modules import absolute_import
from ddpify.result import LocalModule

if TYPE_CHECKING:
    from ddpify.cli.request import Job

ROOT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
MAX_MODULES = 200  # a training program is a handful of files; more is a library, not read whole


@dataclass(frozen=True)
class ProgramFiles:
    """An entry script and the local modules it imports (directly or through one another)."""

    entry: Path
    base: Path  # the folder the program's paths are relative to (the entry's, or the project root)
    modules: tuple[LocalModule, ...]
    source: bytes = b""  # the entry script's text, as read to find its modules
    # Several inputs: where each input file's output goes, and the code already written there by one
    # program, shared by the programs of one run.
    placed: dict[Path, str] = field(default_factory=dict)
    written: dict[str, tuple[bytes, str]] = field(default_factory=dict)

    def relative(self, path: str) -> str:
        """``path`` (as in a :class:`LocalModule`) relative to ``base``."""
        return os.path.relpath(os.path.abspath(path), self.base)

    def target(self, path: str, folder: str) -> str:
        """Where the module at ``path`` goes in the output folder: where the run puts that input,
        or under ``folder`` at its place in the program."""
        return self.placed.get(Path(path).resolve()) or os.path.join(folder, self.relative(path))

    def claim(self, target: str, code: bytes, entry: str) -> None:
        """Note that ``entry``'s conversion writes ``code`` to ``target``; a module that two
        programs of one run would write differently is refused."""
        earlier = self.written.get(target)
        if earlier is not None and earlier[0] != code:
            raise Failure(
                f"{entry}: {target} is converted differently as part of {earlier[1]}; convert the two "
                "entry scripts one at a time"
            )
        self.written[target] = (code, entry)


@dataclass(frozen=True)
class Linked:
    """Several inputs, as programs: the entry scripts to convert, and each one's program."""

    entries: list[Job]
    programs: dict[str, ProgramFiles]
    modules: dict[str, str]  # each input that is a module of another input's program -> that entry
    written: dict[str, tuple[bytes, str]]  # what the programs wrote, by target (shared with each program)

    def claimed_by(self, job: Job) -> str | None:
        """The entry whose program wrote (or would write) this input's output, if one did."""
        earlier = self.written.get(job.target) if job.target is not None else None
        return earlier[1] if earlier is not None else None


def link(jobs: Sequence[Job], *, max_size: int) -> Linked:
    """Which inputs are entry scripts and which are modules of their programs.

    An input that another input's program imports is converted as part of that
    program, not on its own; its output goes where the run puts it.
    """
    programs: dict[str, ProgramFiles] = {}
    placed: dict[Path, str] = {}
    written: dict[str, tuple[bytes, str]] = {}
    for job in jobs:
        if job.target is not None:
            placed[Path(job.src).resolve()] = job.target
    for job in jobs:
        try:
            source = read_input(job.src, max_size=max_size)
            found = local_modules(job.src, source, max_size=max_size)
        except Failure:
            continue  # reported when the job is converted
        programs[job.src] = replace(found, placed=placed, written=written)
    owner: dict[Path, str] = {}
    for src, program in programs.items():
        for module in program.modules:
            owner.setdefault(Path(module.path).resolve(), src)
    modules = {job.src: owner[p] for job in jobs if (p := Path(job.src).resolve()) in owner and owner[p] != job.src}
    entries = [job for job in jobs if job.src not in modules]
    return Linked(entries, programs, modules, written)


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
    imports: dict[Path, set[Path]] = {}  # each module -> the modules of the program it imports
    queue: deque[tuple[Path, str]] = deque([(entry_path, "")])
    while queue:
        path, package = queue.popleft()
        text = source if path == entry_path else found[path].source
        assert isinstance(text, bytes)
        for name in _imported_modules(text, package):
            file = _resolve(name, search)
            if file is None or file == entry_path:
                continue
            imports.setdefault(path, set()).add(file)
            if file in found:
                continue
            if len(found) >= MAX_MODULES:
                raise Failure(
                    f"{entry}: imports more than {MAX_MODULES} local modules; convert its training code alone"
                )
            module = LocalModule(_shown(file), name, _read(file, entry, max_size))
            found[file] = module
            queue.append((file, module.package))
    inside = all(folder in file.parents for file in found)
    shared = _imported_elsewhere(set(found), imports, {entry_path}, search, root)
    modules = tuple(replace(module, shared=True) if file in shared else module for file, module in found.items())
    return ProgramFiles(entry_path, folder if inside else root, modules, source)


def _imported_elsewhere(
    modules: set[Path], imports: dict[Path, set[Path]], program: set[Path], search: list[Path], root: Path
) -> set[Path]:
    """The ``modules`` that a script of the project outside the program imports too (an evaluation
    script next to the training script), directly or through other modules of the program (a
    package's ``__init__``): their new code must also run without a process group."""
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
    todo = list(shared)
    while todo:  # what a shared module imports runs there too
        for other in imports.get(todo.pop(), ()):
            if other in modules and other not in shared:
                shared.add(other)
                todo.append(other)
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
            base = absolute_import(node.level, node.module or "", package)
            if base is None:
                continue
            names += _with_packages(base)
            names += [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]
    return list(dict.fromkeys(names))


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

"""The training program an entry script belongs to: the local modules it imports, found as Python would.

A module is local when it resolves to a file in the entry script's folder or
the project's root folder (the nearest folder above the entry that holds
``.git``, ``pyproject.toml``, ``setup.py`` or ``setup.cfg``): the two places
``python train.py`` and ``python -m`` find a project's own code. Installed
packages are never read. Imports anywhere in a module count (in functions and
``try`` blocks too), and so does ``importlib.import_module("name")`` with a
constant name; a name that resolves to no file is someone else's. How names
resolve, and how files are read, is :mod:`ddpify.cli.project`.

Imports ddpify cannot follow are kept as :class:`Unfollowed`: a module loaded
by a computed name, code loaded from a path, a change of ``sys.path``, a
relative import in the entry script (which only ``python -m`` runs).

Only the text of the files is read: nothing is imported or run.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ddpify.cli.exits import Failure
from ddpify.cli.files import read_input
from ddpify.cli.notebooks import read_script
from ddpify.cli.project import Project, project_root
from ddpify.cli.screening import Facts, Load
from ddpify.notebook import is_notebook
from ddpify.result import LocalModule

if TYPE_CHECKING:
    from ddpify.cli.project import Found
    from ddpify.cli.request import Job

MAX_MODULES = 1000  # a training program with its library (a model zoo imported whole); more is not read
MAX_SKETCHED = 2000  # modules the first pass follows before it stops deciding


@dataclass(frozen=True)
class Unfollowed:
    """An import ddpify cannot follow, where it is: ``path:line:col`` and what it is."""

    path: str
    line: int
    column: int
    construct: str
    reason: str


@dataclass(frozen=True)
class Written:
    """The outputs of one run's programs, by real path: a digest of what each program wrote there."""

    by_target: dict[str, tuple[bytes, str]] = field(default_factory=dict)

    def claim(self, target: str, code: bytes, entry: str) -> None:
        """Note that ``entry``'s conversion writes ``code`` to ``target``; a module that two
        programs of one run would write differently is refused."""
        key = os.path.realpath(target)
        digest = hashlib.blake2b(code, digest_size=16).digest()
        earlier = self.by_target.get(key)
        if earlier is not None and earlier[0] != digest:
            raise Failure(
                f"{entry}: {target} is converted differently as part of {earlier[1]}; convert the two "
                "entry scripts one at a time"
            )
        self.by_target[key] = (digest, entry)

    def by(self, target: str) -> str | None:
        """The entry whose program wrote (or would write) ``target``, if one did."""
        earlier = self.by_target.get(os.path.realpath(target))
        return earlier[1] if earlier is not None else None


@dataclass(frozen=True)
class ProgramFiles:
    """An entry script and the local modules it imports (directly or through one another)."""

    entry: Path
    base: Path  # the folder the program's paths are relative to (the entry's, or the project root)
    modules: tuple[LocalModule, ...]
    source: bytes = b""  # the entry script's text, as read to find its modules
    unfollowed: tuple[Unfollowed, ...] = ()
    # Several inputs: where each input file's output goes (by real path), and what the run's
    # programs wrote, shared by the programs of one run.
    placed: dict[str, str] = field(default_factory=dict)
    written: Written = field(default_factory=Written)
    # Each module that other scripts of the project import too (by its path, as in a LocalModule),
    # with those scripts.
    importers: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def relative(self, path: str) -> str:
        """``path`` (as in a :class:`LocalModule`) relative to ``base``."""
        return os.path.relpath(os.path.abspath(path), self.base)

    def target(self, path: str, folder: str) -> str:
        """Where the module at ``path`` goes in the output folder: where the run puts that input,
        or under ``folder`` at its place in the program."""
        return self.placed.get(os.path.realpath(path)) or os.path.join(folder, self.relative(path))

    @property
    def sources(self) -> set[str]:
        """The real paths of the program's own files: no output may go there."""
        return {str(self.entry), *(os.path.realpath(module.path) for module in self.modules)}


@dataclass(frozen=True)
class Sketch:
    """A program as the first pass sees it: its files, and whether it may train."""

    entry: Path
    files: dict[str, str]  # the real path of each of its modules -> the name it is imported as
    unknown: bool  # a file the first pass cannot read or parse, or too many to follow
    project: Project | None = None

    def may_train(self) -> bool:
        """Whether the full analysis may find a training step; see :mod:`ddpify.cli.screening`."""
        if self.unknown or self.project is None:
            return True
        return self.project.first_pass.may_train(str(self.entry), self.files)


@dataclass(frozen=True)
class Linked:
    """Several inputs, as programs: the entry scripts to convert, and what the first pass found."""

    entries: list[Job]
    sketches: dict[str, Sketch]
    modules: dict[str, str]  # each input that is a module of another input's program -> that entry
    placed: dict[str, str]
    written: Written
    projects: dict[Path, Project]

    def claimed_by(self, job: Job) -> str | None:
        """The entry whose program wrote (or would write) this input's output, if one did."""
        return self.written.by(job.target) if job.target is not None else None

    def program(self, job: Job, source: bytes, *, max_size: int) -> ProgramFiles:
        """The whole program of ``job`` (its modules read), to convert; raises ``Failure``."""
        found = local_modules(job.src, source, max_size=max_size, projects=self.projects)
        return replace(found, placed=self.placed, written=self.written)


def link(jobs: Sequence[Job], *, max_size: int) -> Linked:
    """Which inputs are entry scripts and which are modules of their programs, and which programs may train.

    An input that another input's program imports is converted as part of that
    program, not on its own; its output goes where the run puts it. Nothing but
    the first pass reads the files here: each once, however many programs share it.
    """
    projects: dict[Path, Project] = {}
    sketches: dict[str, Sketch] = {}
    placed = {os.path.realpath(job.src): job.target for job in jobs if job.target is not None}
    for job in jobs:
        sketches[job.src] = sketch(job.src, max_size=max_size, projects=projects)
    owner: dict[str, str] = {}
    for src, found in sketches.items():
        for file in found.files:
            owner.setdefault(file, src)
    modules = {
        job.src: owner[real] for job in jobs if (real := os.path.realpath(job.src)) in owner and owner[real] != job.src
    }
    entries = [job for job in jobs if job.src not in modules]
    return Linked(entries, sketches, modules, placed, Written(), projects)


def sketch(entry: str, *, max_size: int, projects: dict[Path, Project], root: Path | None = None) -> Sketch:
    """The first pass over the program of ``entry``: its modules' files, and whether it may train."""
    entry_path = Path(os.path.realpath(entry))
    try:
        source = read_input(entry, max_size=max_size)
        if is_notebook(entry):
            source = read_script(entry, source).source
    except Failure:  # reported when the job is converted
        return Sketch(entry_path, {}, unknown=True)
    project = _project(entry_path, projects, max_size, root)
    facts = project.facts(str(entry_path), source)
    if facts is None:  # CPython cannot parse it: the conversion says why
        return Sketch(entry_path, {}, unknown=True)
    walk = _Walk(entry_path, facts, project)
    walk.run(limit=MAX_SKETCHED)
    unknown = walk.truncated or any(module.facts is None for module in walk.found.values())
    return Sketch(entry_path, {real: found.name for real, found in walk.found.items()}, unknown, project)


def local_modules(
    entry: str,
    source: bytes,
    *,
    max_size: int,
    root: Path | None = None,
    projects: dict[Path, Project] | None = None,
) -> ProgramFiles:
    """The program of the script ``entry`` (whose text is ``source``): every local module
    reachable through its imports, in the order found."""
    entry_path = Path(os.path.realpath(entry))
    projects = {} if projects is None else projects
    project = _project(entry_path, projects, max_size, root)
    facts = project.facts(str(entry_path), source)
    walk = _Walk(entry_path, facts, project, read=lambda file: _read(file, entry, max_size))
    walk.run(
        limit=MAX_MODULES,
        failure=f"{entry}: imports more than {MAX_MODULES} local modules; convert its training code alone",
    )
    found = {real: found.module for real, found in walk.found.items() if found.module is not None}
    folder = entry_path.parent
    # the folders Python must search for the program's imports: ``src.utils`` beside the entry (a script
    # run as ``python -m src.main``) is found from the folder above it
    roots = [_import_root(each.file, each.name) for each in walk.found.values() if each.module is not None]
    inside = all(folder in Path(module.path).absolute().parents for module in found.values()) and all(
        root == folder or folder in root.parents for root in roots
    )
    shared = _imported_elsewhere(set(found), walk, {str(entry_path)}, project)
    modules = tuple(replace(module, shared=True) if real in shared else module for real, module in found.items())
    importers = {found[real].path: tuple(sorted(scripts)) for real, scripts in shared.items()}
    # the folder above every file of the program: the project's root, or (with no marker of one) the folder its
    # imports were found from
    base = (
        folder
        if inside
        else Path(os.path.commonpath([project.root, *(Path(m.path).absolute().parent for m in modules), *roots]))
    )
    return ProgramFiles(entry_path, base, modules, source, tuple(walk.unfollowed()), importers=importers)


def _import_root(file: Path, name: str) -> Path:
    """The folder on Python's search path from which ``file`` is imported as ``name``."""
    depth = name.count(".") + (file.name == "__init__.py")
    return file.absolute().parents[depth]


def _project(entry: Path, projects: dict[Path, Project], max_size: int, root: Path | None = None) -> Project:
    root = Path(os.path.realpath(root)) if root is not None else project_root(entry.parent)
    project = projects.get(root)
    if project is None:
        project = projects[root] = Project(root, limit=max_size)
    return project


# A string that may name a module: ``"jobs.fit"``, ``"processor.recognition.REC_Processor"``
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
# a package's name and the dot before a module name filled in at run time: ``"models."``, ``"models.%s"``
_PACKAGE_PREFIX = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\.(?:%s|\{\w*\})?")
_PACKAGE_MODULES = 100  # the modules of such a package that are read, at most


class _Walk:
    """The modules of a program, breadth first from its entry script through each file's imports."""

    def __init__(
        self, entry: Path, facts: Facts | None, project: Project, read: Callable[[Path], bytes] | None = None
    ) -> None:
        self.entry = entry
        self.facts = facts
        self.project = project
        self.read = read
        folder = entry.parent
        self.search = (folder,) if project.root == folder else (folder, project.root)
        self.resolver = project.resolver(self.search)
        self.found: dict[str, _Found] = {}  # by real path
        self.imports: dict[str, set[str]] = {}  # each file -> the modules of the program it imports
        self.truncated = False

    def run(self, *, limit: int, failure: str | None = None) -> None:
        """Walk the program; where its files add folders to ``sys.path`` that the code names
        (``sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))``), walk it again
        with those folders searched too, as Python would."""
        for _ in range(4):
            self._run(limit=limit, failure=failure)
            added = [folder for folder in self._added_folders() if folder not in self.search]
            if not added or self.truncated:
                return
            self.search = (*self.search, *added)
            self.resolver = self.project.resolver(self.search)
            self.found, self.imports = {}, {}

    def _added_folders(self) -> list[Path]:
        """The folders inside the project that the program's changes of ``sys.path`` add, in the order found."""
        files = [(self.entry, self.facts), *((m.file, m.facts) for m in self.found.values())]
        folders: list[Path] = []
        for file, facts in files:
            for load in facts.loads if facts is not None else ():
                folders += [f for f in self._added(file, load) or () if f not in folders]
        return folders

    def _added(self, file: Path, load: Load) -> list[Path] | None:
        """The folders that ``load`` (in ``file``) adds to ``sys.path``, where each is known and may hold the
        project's code (None otherwise); a folder named from where the program runs is taken from the entry's."""
        if load.kind != "search" or not load.added:
            return None
        folders = []
        for relative, from_file in load.added:
            folder = Path(os.path.normpath((file.parent if from_file else self.entry.parent) / relative))
            if not folder.is_dir() or not self.project.holds(folder):
                return None
            folders.append(folder)
        return folders

    def _run(self, *, limit: int, failure: str | None = None) -> None:
        if self.facts is None:
            return
        queue: deque[tuple[str, str, Facts]] = deque([(str(self.entry), "", self.facts)])
        named: set[str] = set()  # the files whose dotted strings were looked at
        while queue:
            while queue and not self.truncated:
                real, package, facts = queue.popleft()
                self._take(queue, real, self.project.imports(self.search, real, package, facts), limit, failure)
            if self.truncated or not self._loads_a_computed_name():
                return
            # ``__import__(path.rpartition(".")[0])`` of ``load_class("jobs.fit.FitJob")``: the modules that
            # the program's strings name may be the ones loaded; reading them lets a backward pass there be seen
            for real, found in self._named_by_strings(named):
                self._take(queue, real, found, limit, None)

    def _loads_a_computed_name(self) -> bool:
        files = [self.facts, *(found.facts for found in self.found.values())]
        return any(load.kind == "call" and load.module is None for facts in files if facts for load in facts.loads)

    def _named_by_strings(self, done: set[str]) -> Iterator[tuple[str, list[tuple[str, Found]]]]:
        """Each file found so far and not looked at yet, with the local modules not found yet that its dotted
        string constants name (``"jobs.fit.FitJob"``, ``"models.resnet"``)."""
        resolver = self.project.resolver(self.search)
        for real in [str(self.entry), *self.found]:
            if real in done:
                continue
            done.add(real)
            strings = self.project.strings(real)
            named: list[tuple[str, Found]] = []
            for text in strings:
                # ``"learners." + args.model``, ``"models.%s" % name``: any module of that package may be loaded
                prefix = _PACKAGE_PREFIX.fullmatch(text)
                name = prefix.group(1) if prefix is not None else ""
                package = resolver.find(name) if name else None
                for folder in package.locations if package is not None and package.locations else ():
                    for module in sorted(Path(folder).glob("*.py"))[:_PACKAGE_MODULES]:
                        located = resolver.file(f"{name}.{module.stem}")
                        if located is not None and located.real not in self.found and located.real != str(self.entry):
                            named.append((f"{name}.{module.stem}", located))
            for text in filter(_DOTTED.fullmatch, strings):
                parts = text.split(".")
                for name in (text, ".".join(parts[:-1])):  # a module, or a name in one
                    located = resolver.file(name)
                    if located is not None:
                        if located.real not in self.found and located.real != str(self.entry):
                            named.append((name, located))
                        break
            yield real, named

    def _take(
        self,
        queue: deque[tuple[str, str, Facts]],
        real: str,
        imported: Iterable[tuple[str, Found]],
        limit: int,
        failure: str | None,
    ) -> None:
        """The local modules the file ``real`` imports (by name, with where each leads), each new one found and
        queued with its facts; past ``limit`` modules, ``failure`` is raised (or the walk is cut short)."""
        for name, found in imported:
            file, target = found.file, found.real
            assert file is not None
            if target == str(self.entry):
                continue
            self.imports.setdefault(real, set()).add(target)
            if target in self.found:
                continue
            if len(self.found) >= limit:
                if failure is not None:
                    raise Failure(failure)
                self.truncated = True
                return
            if self.read is not None:
                source = self.read(file)
                module: LocalModule | None = LocalModule(_shown(file), name, source)
                module_facts = self.project.facts(target, source)
            else:
                module = None
                module_facts = self.project.facts(target)
            self.found[target] = _Found(file, name, module_facts, module)
            if module_facts is not None:
                package = name if file.name == "__init__.py" else name.rpartition(".")[0]
                queue.append((target, package, module_facts))

    def _package(self, file: Path) -> str:
        """The package the relative imports of the module at ``file`` start from."""
        for module in self.found.values():
            if module.file == file:
                return module.name if file.name == "__init__.py" else module.name.rpartition(".")[0]
        return ""

    def unfollowed(self) -> list[Unfollowed]:
        """The imports of the program's files that ddpify cannot follow."""
        files: list[tuple[Path, Facts]] = []
        if self.facts is not None:
            files.append((self.entry, self.facts))
        files += [(module.file, module.facts) for module in self.found.values() if module.facts is not None]
        found: list[Unfollowed] = []
        for index, (file, facts) in enumerate(files):
            shown = _shown(file)
            if index == 0:
                for record in facts.relative_imports():
                    names = record.module or ", ".join(record.names)
                    found.append(
                        Unfollowed(
                            shown,
                            record.line,
                            record.column,
                            f"a relative import ({'.' * record.level}{record.module})",
                            f"an entry script runs only as `python -m` with it, and ddpify does not follow it "
                            f"({names} is not converted)",
                        )
                    )
            package = "" if index == 0 else self._package(file)
            for record, loaded in facts.imported_by_statement(package):
                for name in loaded:
                    compiled = self.resolver.compiled(name)
                    if compiled is not None:
                        found.append(
                            Unfollowed(
                                shown,
                                record.line,
                                record.column,
                                f"`{name}`",
                                f"Python imports it from {_shown(compiled)}, compiled code without its source, "
                                "which ddpify can neither read nor convert; restore its .py file",
                            )
                        )
            own_folder = file.parent == self.entry.parent
            for load in facts.loads:
                if load.kind == "call" and load.module is not None:
                    continue  # followed like an import statement
                if load.kind == "search" and load.own_folder and own_folder:
                    continue  # the entry's own folder: searched first anyway
                added = self._added(file, load)
                if added is not None and all(folder in self.search for folder in added):
                    continue  # folders named in the code: searched as Python would
                found.append(Unfollowed(shown, load.line, load.column, f"`{load.construct}`", _REASONS[load.kind]))
        return found


@dataclass(frozen=True)
class _Found:
    """A module of the program: the path it is imported from, its facts, and (when reading) its text."""

    file: Path
    name: str
    facts: Facts | None
    module: LocalModule | None


_REASONS = {
    "call": "it loads a module whose name is known only when it runs, which ddpify cannot follow",
    "path": "it runs code from a file path, which ddpify does not follow",
    "search": "modules found through the changed search path are not followed",
}


def _imported_elsewhere(modules: set[str], walk: _Walk, program: set[str], project: Project) -> dict[str, set[str]]:
    """The ``modules`` that a script of the project outside the program imports too (an evaluation
    script next to the training script), directly or through other modules of the program (a
    package's ``__init__``), each with the scripts that import it: their new code must also run
    without a process group."""
    if not modules:
        return {}
    shared: dict[str, set[str]] = {}
    for file, facts in project.scripts():
        real = os.path.realpath(file)
        if real in program or real in modules:
            continue
        resolver = project.resolver((file.parent, *walk.search))
        for name in facts.imported_modules(""):
            resolved = resolver.file(name)
            if resolved is not None and resolved.real in modules:
                shared.setdefault(resolved.real, set()).add(_shown(file))
    todo = list(shared)
    while todo:  # what a shared module imports runs there too
        importer = todo.pop()
        for other in walk.imports.get(importer, ()):
            if other in modules and not shared[importer] <= shared.get(other, set()):
                shared.setdefault(other, set()).update(shared[importer])
                todo.append(other)
    return shared


def _read(path: Path, entry: str, max_size: int) -> bytes:
    try:
        return read_input(str(path), max_size=max_size, regular_only=True)
    except Failure as failure:
        raise Failure(
            f"{entry} imports {_shown(path)}, which cannot be read: {failure.message}", failure.code
        ) from None


def _shown(path: Path) -> str:
    """How a module's path is shown and written: relative to the current folder when it is below it."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative

"""Finding the scripts that several inputs name, and where each one's output goes.

A folder is searched recursively for ``*.py`` files (and ``*.ipynb`` notebooks, when
nbformat is installed to read them), skipping the folders in
:data:`EXCLUDED_FOLDERS` (or what the ``exclude`` globs of ``[tool.ddpify]``
name), what ``.gitignore`` excludes (asked of ``git check-ignore`` when the
folder is in a git work tree) and earlier outputs (``*_ddp.py``).  Each output goes next to its input with ``--suffix`` added to
its name, into the folder ``-o`` names under its path relative to the common
base of the inputs, or over the input with ``--in-place``.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
import subprocess
from typing import TYPE_CHECKING

from ddpify import notebook
from ddpify.cli.exits import Failure
from ddpify.cli.files import describe_kind, read_input
from ddpify.cli.notebooks import check_output, read_script
from ddpify.cli.report import plural
from ddpify.cli.request import DEFAULT_SUFFIX, Job, Request, is_output, same_path, with_suffix
from ddpify.notebook import INSTALL, is_notebook, script_name

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ddpify.cli.report import Reporter

# Folders never searched for scripts: version control, environments, build
# output and caches (black's defaults, plus the places installed packages live).
EXCLUDED_FOLDERS = frozenset(
    {
        ".direnv",
        ".eggs",
        ".git",
        ".hg",
        ".ipynb_checkpoints",
        ".mypy_cache",
        ".nox",
        ".pytest_cache",
        ".ruff_cache",
        ".svn",
        ".tox",
        ".venv",
        "__pycache__",
        "build",
        "dist",
        "node_modules",
        "site-packages",
        "venv",
    }
)


def excluder(request: Request) -> Callable[[str], bool]:
    """Whether a folder search skips a path: its name, or its path relative to the configuration's
    folder, matches a glob of ``exclude`` (default :data:`EXCLUDED_FOLDERS`) or ``extend-exclude``."""
    patterns = [*(sorted(EXCLUDED_FOLDERS) if request.exclude is None else request.exclude), *request.extend_exclude]
    patterns = [pattern.rstrip("/") for pattern in patterns]
    root = request.exclude_root

    def excluded(path: str) -> bool:
        names = [os.path.basename(path)]
        if root is not None:
            relative = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
            if not relative.startswith(".."):
                names.append(relative.replace(os.sep, "/"))
        return any(fnmatch.fnmatchcase(name, pattern) for name in names for pattern in patterns)

    return excluded


def _default_excluded(path: str) -> bool:
    return os.path.basename(path) in EXCLUDED_FOLDERS


def plan(request: Request, reporter: Reporter) -> list[Job]:
    """The files the inputs name, in order, and where each one's output goes."""
    suffix = request.suffix or DEFAULT_SUFFIX
    folder = request.output
    paths = find_scripts(request.sources, suffix=suffix, skip=folder, reporter=reporter, exclude=excluder(request))
    paths = [path for path in paths if path in request.sources or _readable_notebook(path, request.max_size, reporter)]
    if request.in_place:
        paths = _without_notebooks_in_place(paths, request.sources, reporter)
    if folder is None:
        if request.in_place:
            return [Job(path, path, in_place=True, write_unchanged=False) for path in paths]
        jobs = [Job(path, with_suffix(script_name(path), suffix), write_unchanged=False) for path in paths]
    else:
        if not os.path.isdir(folder) and not folder.endswith(("/", os.sep)):  # folder/: created
            problem = "not a folder" if os.path.exists(folder) else "no such folder"
            raise Failure(
                f"{folder}: {problem}; with several inputs, -o names an existing folder for the outputs "
                "(or, ending with a slash, one to create)"
            )
        base = common_base(request.sources)
        jobs = [
            Job(
                path, os.path.join(folder, script_name(os.path.relpath(os.path.abspath(path), base))), make_folders=True
            )
            for path in paths
        ]
    jobs = _without_colliding_notebooks(jobs, reporter)
    for job in jobs:
        assert job.target is not None
        if same_path(job.src, job.target):
            raise Failure(f"{job.target} is the input file; pass --in-place to rewrite the inputs")
    return jobs


def _readable_notebook(path: str, max_size: int, reporter: Reporter) -> bool:
    """Whether a file a folder search found is a script, or a notebook that can be read; a notebook
    that cannot is skipped and reported (one named on the command line fails instead)."""
    if not is_notebook(path):
        return True
    try:
        read_script(path, read_input(path, max_size=max_size))
    except Failure as failure:
        reporter.say(f"{path}: skipped, {failure.message.removeprefix(f'{path}: ')}")
        return False
    return True


def _without_notebooks_in_place(paths: list[str], named: Sequence[str], reporter: Reporter) -> list[str]:
    """``--in-place`` cannot turn a notebook into a script: a named one is refused, one found in a folder skipped."""
    kept = []
    for path in paths:
        if not is_notebook(path):
            kept.append(path)
        elif path in named:
            check_output(path, None, in_place=True)
        else:
            reporter.say(f"{path}: skipped, a notebook; --in-place cannot rewrite it as a script")
    return kept


def _without_colliding_notebooks(jobs: list[Job], reporter: Reporter) -> list[Job]:
    """A notebook whose script would land where another input's output goes (``train.ipynb`` beside
    ``train.py``) is skipped: the script keeps its place."""
    taken = {os.path.abspath(job.target) for job in jobs if job.target is not None and not is_notebook(job.src)}
    kept = []
    for job in jobs:
        if is_notebook(job.src) and job.target is not None and os.path.abspath(job.target) in taken:
            reporter.say(f"{job.src}: skipped, a notebook whose script {job.target} is another input's output")
            continue
        if job.target is not None:
            taken.add(os.path.abspath(job.target))
        kept.append(job)
    return kept


def find_scripts(
    sources: Sequence[str],
    *,
    suffix: str,
    skip: str | None,
    reporter: Reporter,
    exclude: Callable[[str], bool] = _default_excluded,
) -> list[str]:
    """The scripts that ``sources`` name, each once, in order; raises ``Failure`` for a missing or empty input.

    A file is taken as given unless its name marks it as an output (``*_ddp.py``);
    a folder gives its ``*.py`` files and notebooks (see :func:`scripts_in`); ``skip`` is a
    folder not to search (the output folder); ``exclude`` says which folders and files a search skips.
    """
    found: list[str] = []
    seen: set[str] = set()
    for src in sources:
        if os.path.isdir(src):
            paths = scripts_in(src, suffix=suffix, skip=skip, reporter=reporter, exclude=exclude)
            if not paths:
                raise Failure(f"{src}: no Python files")
        elif os.path.exists(src):
            if is_output(src, suffix):
                reporter.say(f"{src}: skipped, the name of an output (*{suffix}.py)")
                continue
            paths = [src]
        else:
            raise Failure(f"{src}: {os.strerror(errno.ENOENT)}")
        for path in paths:
            key = os.path.realpath(path)
            if key not in seen:
                seen.add(key)
                found.append(path)
    if not found:
        raise Failure("no Python files to convert")
    return found


def scripts_in(
    folder: str,
    *,
    suffix: str,
    skip: str | None = None,
    reporter: Reporter | None = None,
    exclude: Callable[[str], bool] = _default_excluded,
) -> list[str]:
    """The ``*.py`` files (and ``*.ipynb``, when nbformat can read them) under ``folder``, sorted, without
    excluded folders, ignored files and outputs.

    Only regular files are scripts: a FIFO, device or socket named ``*.py`` is
    skipped (and reported), since reading it could wait forever.
    """
    skipped = os.path.realpath(skip) if skip is not None else None
    extensions = (".py", ".ipynb") if notebook.available() else (".py",)
    candidates: list[str] = []
    notebooks = 0
    for root, folders, names in os.walk(folder):
        folders[:] = sorted(
            name
            for name in folders
            if not exclude(os.path.join(root, name)) and os.path.realpath(os.path.join(root, name)) != skipped
        )
        candidates.extend(
            os.path.join(root, name)
            for name in sorted(names)
            if name.endswith(extensions) and not is_output(name, suffix) and not exclude(os.path.join(root, name))
        )
        notebooks += sum(1 for name in names if is_notebook(name) and not exclude(os.path.join(root, name)))
    if notebooks and not notebook.available() and reporter is not None:
        reporter.say(f"{folder}: {plural(notebooks, 'notebook')} skipped: reading them needs nbformat: {INSTALL}")
    ignored = git_ignored(folder, [os.path.relpath(path, folder) for path in candidates])
    return [
        path
        for path in candidates
        if os.path.relpath(path, folder) not in ignored and _is_regular_or_reported(path, reporter)
    ]


def _is_regular_or_reported(path: str, reporter: Reporter | None) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return True  # reading it says what is wrong
    if stat.S_ISREG(mode):
        return True
    if reporter is not None:
        reporter.say(f"{path}: skipped, not a regular file ({describe_kind(mode)})")
    return False


def git_ignored(folder: str, paths: Sequence[str]) -> set[str]:
    """Which of ``paths`` (relative to ``folder``) git ignores; none outside a git work tree or without git."""
    if not paths:
        return set()
    try:
        inside = subprocess.run(
            ["git", "-C", folder, "rev-parse", "--is-inside-work-tree"], capture_output=True, check=False
        )
        if inside.returncode != 0 or inside.stdout.strip() != b"true":
            return set()
        answer = subprocess.run(
            ["git", "-C", folder, "check-ignore", "--stdin", "-z"],
            input=b"".join(os.fsencode(path) + b"\0" for path in paths),
            capture_output=True,
            check=False,
        )
    except OSError:  # no git
        return set()
    if answer.returncode not in (0, 1):  # 1: nothing ignored; otherwise git failed
        return set()
    return {os.fsdecode(path) for path in answer.stdout.split(b"\0") if path}


def common_base(sources: Sequence[str]) -> str:
    folders = [os.path.abspath(src if os.path.isdir(src) else os.path.dirname(src) or ".") for src in sources]
    return os.path.commonpath(folders)

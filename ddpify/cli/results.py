"""What becomes of one conversion: reported, then written, compared (``--check``) or shown (``--diff``).

A program's files are written in one transaction (:mod:`ddpify.cli.transaction`):
all of them or none. With ``-o DIR/`` every output is a regular file inside DIR at
the place its import name gives it: one that would land on a file of the program
itself, or lead out of DIR through a symlink, is refused before anything is written.
"""

from __future__ import annotations

import os
import shlex
import stat
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ddpify import Severity, Status
from ddpify.cli.diff import print_diff
from ddpify.cli.exits import ExitCode, Failure, NeedsFolder, Outcome
from ddpify.cli.files import check_target, hard_links, read_existing, write_stdout
from ddpify.cli.project import project_root
from ddpify.cli.report import counts, internal_error_message, plural
from ddpify.cli.request import STDOUT_NAME, is_folder, same_file
from ddpify.cli.transaction import Write, write_all
from ddpify.concerns.process_group import SETUP_DOCSTRING
from ddpify.diagnostics import UNFOLLOWED_IMPORT, UNFOLLOWED_IN_FOLDER, Diagnostic

if TYPE_CHECKING:
    from ddpify import Conversion
    from ddpify.cli.program import ProgramFiles
    from ddpify.cli.report import Reporter
    from ddpify.cli.request import Job, Request
    from ddpify.result import LocalModule


def finish(
    request: Request,
    job: Job,
    source: bytes,
    conversion: Conversion,
    reporter: Reporter,
    program: ProgramFiles | None = None,
) -> Outcome:
    """Report one conversion and write, compare or show its code (and that of the program's other
    modules it changed); raises ``Failure`` when that fails."""
    name = job.name
    if conversion.status is Status.INTERNAL_ERROR:
        detail = "; ".join(d.message for d in conversion.errors) or "the converter reported an internal error"
        raise Failure(internal_error_message(name, detail), ExitCode.INTERNAL_ERROR)
    if conversion.status is Status.INVALID:
        reporter.diagnostics(conversion, fallback=f"error: {name}: not valid Python")
        return Outcome.INVALID
    conversion = _with_unfollowed(request, job, conversion, program)
    if conversion.status is Status.REFUSED:
        reporter.diagnostics(conversion, fallback=f"error: {name}: conversion refused")
        _say_if_converted_before(job, source, conversion, program, reporter)
        reporter.say(f"{name}: not converted ({counts(conversion, changes=False)}); nothing written")
        return Outcome.REFUSED

    code = conversion.code
    if not isinstance(code, bytes):
        raise TypeError(f"convert() returned {type(code).__name__} code for bytes input")
    others = _module_targets(request, job, conversion, program)
    unchanged = conversion.status is Status.UNCHANGED
    # Next to its input, a script that needs no change gets no copy.
    writes = job.write_unchanged or not unchanged
    reporter.diagnostics(conversion)
    if request.diff:
        print_diff(source, code, from_name=name, to_name=job.target or name, color=request.color)
        for module, target in others:
            module_code = _bytes(module.code if module.code is not None else module.source)
            to_name = target or module.path
            print_diff(_bytes(module.source), module_code, from_name=module.path, to_name=to_name, color=request.color)
    if request.check:
        if not writes:
            reporter.say(f"{name}: nothing to do")
            return Outcome.UNCHANGED
        stale = [t for m, t in others if t is not None and _stale(t, _module_code(m), reporter)]
        if not stale:
            return check(job, reporter, code)
        assert job.target is not None  # validate(): --check needs an output
        if not _stale(job.target, code, reporter):
            files = plural(len(stale), "other file")
            reporter.say(f"{job.target} is current, but not the program: {files} would be written")
        return Outcome.STALE
    if not unchanged:
        reporter.changes(conversion, name)

    summary = _deliver(request, job, source, code, others, writes=writes, reporter=reporter)
    if others and not unchanged:
        summary += _modules_summary(request, others)
    if unchanged:
        _say_if_converted_before(job, source, conversion, program, reporter)
        reporter.say(f"{name}: nothing to do")
        return Outcome.UNCHANGED
    reporter.say(f"{summary} ({counts(conversion)})")
    return Outcome.WOULD_CONVERT if request.diff else Outcome.CONVERTED


def _deliver(
    request: Request,
    job: Job,
    source: bytes,
    code: bytes,
    others: list[tuple[LocalModule, str | None]],
    *,
    writes: bool,
    reporter: Reporter,
) -> str:
    """Write the code of the entry and of the program's modules where they go, all or none (unless
    ``--diff``); what was done, for the summary."""
    name, target = job.name, job.target
    if request.diff:
        return f"would convert {name}" + (f" -> {target}" if target else "")
    if target is None:
        if writes:
            write_stdout(code)
        return f"converted {name} -> {STDOUT_NAME}" if writes else ""
    files = [
        Write(
            t,
            _module_code(m),
            current=_bytes(m.source) if t == m.path else None,
            in_place=t == m.path,
            make_folders=True,
            read=_bytes(m.source) if t == m.path else None,
        )
        for m, t in others
        if t is not None
    ]
    if writes:
        current = source if job.in_place else None
        files.append(
            Write(target, code, current=current, in_place=job.in_place, make_folders=job.make_folders, read=current)
        )
    links = hard_links(target) if writes and job.in_place and source != code else 1
    notes = [found for write in files if write.in_place and (found := _unusual_input(write.path, job))]
    sources = [(m.path, t) for m, t in others if t is not None and t != m.path]
    sources += [(job.src, target)] if writes and not job.in_place else []
    notes += [(t, _unlinked(src, t)) for src, t in sources if os.path.exists(t) and same_file(src, t)]
    written = set(write_all(files, home=journal_home(request, job)))
    if links > 1:
        reporter.say(f"{name}: written through its {links} hard links")
    for path, note in notes:
        if path in written:
            reporter.say(note)
    if not writes:
        return ""
    return f"converted {name} in place" if job.in_place else f"converted {name} -> {target}"


def _unusual_input(path: str, job: Job) -> tuple[str, str] | None:
    """A note on an input that ``--in-place`` replaces where the user may not expect it: through a
    symbolic link (the linked file changes, maybe outside the project), or a read-only file."""
    real = os.path.realpath(path)
    root = os.path.realpath(project_root(Path(os.path.abspath(os.path.dirname(job.src) or "."))))
    outside = os.path.commonpath([root, real]) != root
    if os.path.islink(path) or outside:
        where = ", outside the project" if outside else ""
        return path, f"note: {path} leads through a symbolic link: written to {_shown_path(real)}{where}"
    try:
        mode = stat.S_IMODE(os.stat(real).st_mode)
    except OSError:
        return None
    if not mode & stat.S_IWUSR:
        return (
            path,
            f"note: {path} is read-only ({mode:04o}): replaced all the same, as --in-place asks, and left read-only",
        )
    return None


def _unlinked(source: str, target: str) -> str:
    return f"note: {target} was a hard link to {source}: it is a file of its own now, and {source} is as it was"


def _shown_path(path: str) -> str:
    relative = os.path.relpath(path)
    return path if relative.startswith(os.path.join(os.pardir, os.pardir, os.pardir)) else relative


def _say_if_converted_before(
    job: Job, source: bytes, conversion: Conversion, program: ProgramFiles | None, reporter: Reporter
) -> None:
    """An entry script that is not distributed, refused or left alone because of modules that ddpify
    converted already for another entry script: say how to convert the entries that share them."""
    if program is None or _converted_guard(source) or b"init_process_group" in source:
        return
    found = {d.path for d in conversion.diagnostics if d.severity is Severity.ERROR or d.code == "DDP010"}
    converted = [m for m in program.modules if _converted_guard(_bytes(m.source))]
    if not any(m.path in found for m in converted):
        return
    names = [m.path for m in converted]
    others = sorted({script for m in converted for script in program.importers.get(m.path, ())} - {job.name})
    entries = " ".join(shlex.quote(path) for path in (job.name, *(others or ["OTHER_ENTRY.py"])))
    restore = " ".join(shlex.quote(path) for path in (*others, *names))
    reporter.say(
        f"note: {', '.join(names)} already {'holds' if len(names) == 1 else 'hold'} ddpify's conversion for "
        f"another entry script ({', '.join(others) or 'one that imports it'}); entry scripts that share modules "
        f"are converted together, in one run: put back the files that conversion changed (with git: git "
        f"checkout -- {restore}), then run: ddpify {entries} --in-place"
    )


def _converted_guard(code: bytes) -> bool:
    """Whether ``code`` holds the guard ddpify writes into a module that must also run without a process
    group, and no process group but the one ddpify's set-up creates (a program distributed by hand has
    that guard too)."""
    if b"dist.is_initialized()" not in code:
        return False
    return b"init_process_group" not in code or SETUP_DOCSTRING.encode() in code


def journal_home(request: Request, job: Job) -> str:
    """The folder whose journal and lock a job's writes use: the output folder, an output file's
    folder, or the folder given as (or holding) the input; where the next run looks for it."""
    if request.output is not None:
        if request.several or is_folder(request.output):
            return request.output
        return os.path.dirname(request.output) or "."
    real = os.path.realpath(job.src)
    for source in request.sources:
        if os.path.isdir(source) and os.path.commonpath([os.path.realpath(source), real]) == os.path.realpath(source):
            return source
    return os.path.dirname(job.src) or "."


def _with_unfollowed(request: Request, job: Job, conversion: Conversion, program: ProgramFiles | None) -> Conversion:
    """The conversion with the imports ddpify cannot follow in its program: warnings (DDP012), or,
    when ``-o DIR/`` would write a program that cannot load that code, a refusal (DDP013)."""
    if program is None or not program.unfollowed:
        return conversion
    in_folder = job.make_folders and request.output is not None
    copied = conversion.status is Status.UNCHANGED and job.whole_program
    if conversion.status is Status.UNCHANGED and not copied:
        return conversion  # nothing written anywhere the program would run from
    if in_folder and not request.diff and (conversion.status is Status.CONVERTED or copied):
        found = [
            UNFOLLOWED_IN_FOLDER.at(
                u.line,
                u.column,
                f"{u.construct}: {u.reason}; -o {request.output} would hold a program without that code",
                u.path,
            )
            for u in program.unfollowed
        ]
        diagnostics = _in_order([*conversion.diagnostics, *found], job.name)
        return replace(conversion, code=conversion.source, status=Status.REFUSED, diagnostics=diagnostics, modules=())
    warnings = [
        UNFOLLOWED_IMPORT.at(u.line, u.column, f"{u.construct}: {u.reason}", u.path) for u in program.unfollowed
    ]
    return replace(conversion, diagnostics=_in_order([*conversion.diagnostics, *warnings], job.name))


def _in_order(diagnostics: list[Diagnostic], path: str) -> tuple[Diagnostic, ...]:
    """The entry script's findings first, then each other module's, each in source order."""
    return tuple(sorted(diagnostics, key=lambda d: (d.path != path, d.path, d.line, d.column, d.code)))


def _module_targets(
    request: Request, job: Job, conversion: Conversion, program: ProgramFiles | None
) -> list[tuple[LocalModule, str | None]]:
    """Where each module of the program goes: changed ones, and with ``-o DIR/`` the unchanged ones
    too (with one script, also when the entry needs no change: the program is copied whole).

    Raises ``Failure`` (exit 2) when modules changed but cannot be written where
    the entry's output can import them, when an output would land on a file of the
    program or lead out of the output folder, or when another entry's conversion
    already wrote a module differently.
    """
    changed = list(conversion.modules)
    if program is None:
        return []
    copied = conversion.status is Status.UNCHANGED and job.whole_program
    if conversion.status is not Status.CONVERTED and not copied:
        return []
    placed: list[tuple[LocalModule, str | None]]
    if job.in_place:
        placed = [(module, module.path) for module in changed]
    elif job.make_folders and request.output is not None:
        new = {module.path: module for module in changed}
        placed = [(new.get(m.path, m), program.target(m.path, request.output)) for m in program.modules]
    elif changed and (request.check or not request.diff):  # written or compared: each needs a place
        names = ", ".join(module.path for module in changed)
        raise NeedsFolder(job.name, names)
    else:
        return [(module, None) for module in changed]
    if job.make_folders and request.output is not None and not request.diff:
        _check_inside(request.output, program, [job.target, *(t for _, t in placed)])
    for module, target in placed:
        if target is not None:
            program.written.claim(target, _module_code(module), job.name)
            if not request.diff:  # every output can be written before any is
                check_target(target, hint="remove it or choose another -o folder", make_folders=True)
    return placed


def _check_inside(folder: str, program: ProgramFiles, targets: list[str | None]) -> None:
    """Raise ``Failure`` unless every target stays inside ``folder`` and off the program's own files."""
    inside = os.path.realpath(folder)
    sources = program.sources
    for target in targets:
        if target is None:
            continue
        real = os.path.realpath(target)
        if real in sources:
            shown = os.path.relpath(real)
            raise Failure(f"{target} is {shown}, a file of the program itself; choose an -o folder outside the program")
        if os.path.commonpath([inside, real]) != inside:
            raise Failure(
                f"{target} leads outside {folder} (to {os.path.relpath(real)}); remove the link or choose "
                "another -o folder"
            )
    for module in program.modules:
        if os.path.basename(module.path) != "__init__.py":
            continue
        package = os.path.dirname(os.path.realpath(module.path))
        if os.path.commonpath([package, inside]) == package:
            raise Failure(
                f"-o {folder} is inside {os.path.dirname(module.path)}/, a package of the program: the copy would "
                "become part of the code it copies; choose an -o folder outside the program's packages"
            )


def _modules_summary(request: Request, others: list[tuple[LocalModule, str | None]]) -> str:
    """``; converted solver.py in place`` for the summary line."""
    changed = [(m, t) for m, t in others if m.changed]
    if request.diff:
        return f"; would convert {', '.join(m.path for m, _ in changed)}" if changed else ""
    where = [f"{m.path} in place" if t == m.path else f"{m.path} -> {t}" for m, t in changed]
    copied = [m.path for m, _ in others if not m.changed]
    return (f"; converted {', '.join(where)}" if where else "") + (
        f"; copied {', '.join(copied)}, which it imports" if copied else ""
    )


def _stale(target: str, code: bytes, reporter: Reporter) -> bool:
    """Whether the file at ``target`` is missing or holds anything but ``code`` (then it is reported)."""
    existing = read_existing(target, limit=len(code) + 1)
    if existing == code:
        return False
    reporter.error(f"would write {target} (it is missing)" if existing is None else f"would rewrite {target}")
    return True


def _module_code(module: LocalModule) -> bytes:
    return _bytes(module.code if module.code is not None else module.source)


def _bytes(code: str | bytes | None) -> bytes:
    if not isinstance(code, bytes):
        raise TypeError("a module's code must be bytes")
    return code


def check(job: Job, reporter: Reporter, code: bytes) -> Outcome:
    """``--check``: whether the output holds exactly ``code``."""
    target = job.target
    assert target is not None  # validate(): --check needs an output
    if _stale(target, code, reporter):
        return Outcome.STALE
    reporter.say(f"{target} is up to date")
    return Outcome.CURRENT

"""What becomes of one conversion: reported, then written, compared (``--check``) or shown (``--diff``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpify import Status
from ddpify.cli.diff import print_diff
from ddpify.cli.exits import ExitCode, Failure, Outcome
from ddpify.cli.files import hard_links, read_existing, write_if_changed, write_stdout
from ddpify.cli.report import counts, internal_error_message
from ddpify.cli.request import STDOUT_NAME

if TYPE_CHECKING:
    from ddpify import Conversion
    from ddpify.cli.report import Reporter
    from ddpify.cli.request import Job, Request


def finish(request: Request, job: Job, source: bytes, conversion: Conversion, reporter: Reporter) -> Outcome:
    """Report one conversion and write, compare or show its code; raises ``Failure`` when that fails."""
    name = job.name
    if conversion.status is Status.INTERNAL_ERROR:
        detail = "; ".join(d.message for d in conversion.errors) or "the converter reported an internal error"
        raise Failure(internal_error_message(name, detail), ExitCode.INTERNAL_ERROR)
    if conversion.status is Status.INVALID:
        reporter.diagnostics(conversion, fallback=f"error: {name}: not valid Python")
        return Outcome.INVALID
    if conversion.status is Status.REFUSED:
        reporter.diagnostics(conversion, fallback=f"error: {name}: conversion refused")
        reporter.say(f"{name}: not converted ({counts(conversion, changes=False)}); nothing written")
        return Outcome.REFUSED

    code = conversion.code
    if not isinstance(code, bytes):
        raise TypeError(f"convert() returned {type(code).__name__} code for bytes input")
    unchanged = conversion.status is Status.UNCHANGED
    # Next to its input, a script that needs no change gets no copy.
    writes = job.write_unchanged or not unchanged
    reporter.diagnostics(conversion)
    if request.diff:
        print_diff(source, code, from_name=name, to_name=job.target or name, color=request.color)
    if request.check:
        if not writes:
            reporter.say(f"{name}: nothing to do")
            return Outcome.UNCHANGED
        return check(job, reporter, code)
    if not unchanged:
        reporter.changes(conversion, name)

    summary = _deliver(request, job, source, code, writes=writes, reporter=reporter)
    if unchanged:
        reporter.say(f"{name}: nothing to do")
        return Outcome.UNCHANGED
    reporter.say(f"{summary} ({counts(conversion)})")
    return Outcome.WOULD_CONVERT if request.diff else Outcome.CONVERTED


def _deliver(request: Request, job: Job, source: bytes, code: bytes, *, writes: bool, reporter: Reporter) -> str:
    """Write the code where it goes (unless ``--diff``); what was done, for the summary."""
    name, target = job.name, job.target
    if request.diff:
        return f"would convert {name}" + (f" -> {target}" if target else "")
    if not writes:
        return ""
    if target is None:
        write_stdout(code)
        return f"converted {name} -> {STDOUT_NAME}"
    links = hard_links(target) if job.in_place and source != code else 1
    write_if_changed(
        target, code, current=source if job.in_place else None, make_folders=job.make_folders, keep_links=job.in_place
    )
    if links > 1:
        reporter.say(f"{name}: written through its {links} hard links")
    return f"converted {name} in place" if job.in_place else f"converted {name} -> {target}"


def check(job: Job, reporter: Reporter, code: bytes) -> Outcome:
    """``--check``: whether the output holds exactly ``code``."""
    target = job.target
    assert target is not None  # validate(): --check needs an output
    if read_existing(target, limit=len(code) + 1) != code:
        reporter.error(f"would rewrite {target}")
        return Outcome.STALE
    reporter.say(f"{target} is up to date")
    return Outcome.CURRENT

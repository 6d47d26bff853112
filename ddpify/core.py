"""convert(): guards -> concerns (find, rewrite) -> apply -> output check -> Conversion.

The pure core: it never reads or writes files, prints or exits, and it never
raises -- every outcome, a bug included, is a :class:`~ddpify.result.Conversion`.
It never imports or runs the user's script either; it only reads its text.

Before anything is rewritten, the input guards (:mod:`ddpify.guards`) turn
away text that ddpify cannot read or reproduce faithfully, and a script that is
already distributed, or has no training step, is left alone. Then every
concern (:mod:`ddpify.concerns`) finds its facts and records its edits, and
the edits are applied in one pass.

After rewriting, the output must compile; otherwise the conversion is an
internal error and nothing is written. It must also keep the invariants of a
data-parallel script (:mod:`ddpify.invariants`, checked on the output text
alone); a violation is refused with its DDP9xx code.
"""

from __future__ import annotations

from ddpify import concerns, invariants
from ddpify.concerns.process_group import distributed_use
from ddpify.diagnostics import ALREADY_DISTRIBUTED, INTERNAL_ERROR, NOTHING_TO_DO, Diagnostic, Severity
from ddpify.engine.edits import EditPlan, apply
from ddpify.engine.program import read_program
from ddpify.guards import compile_quietly, parse_checked
from ddpify.result import Conversion, Options, Status


def convert(source: str | bytes, *, path: str = "<string>", options: Options = Options()) -> Conversion:  # noqa: B008 (frozen)
    """Convert one training script; see the module docstring for what is guaranteed."""
    try:
        return _convert(source, path, options)
    except Exception as exc:
        return _outcome(source, Status.INTERNAL_ERROR, [INTERNAL_ERROR.at(1, 1, f"internal error: {exc!r}", path)])


def _convert(source: str | bytes, path: str, options: Options) -> Conversion:
    module = parse_checked(source, path)
    if module is None:
        return _outcome(source, Status.UNCHANGED, [_nothing_to_do(path)])
    if isinstance(module, Diagnostic):
        return _outcome(source, Status.INVALID, [module])
    program = read_program(module, path)
    already = distributed_use(program.index)
    if already is not None:
        message = f"already distributed (uses {already}): left unchanged"
        return _outcome(source, Status.UNCHANGED, [ALREADY_DISTRIBUTED.at(1, 1, message, path)])
    if not program.trains:
        return _outcome(source, Status.UNCHANGED, [_nothing_to_do(path)])
    found = concerns.find(program)
    plan = EditPlan(program.index, path, program.names)
    concerns.rewrite(found, plan, options)
    diagnostics = sorted([*program.diagnostics(), *plan.diagnostics()], key=lambda d: (d.line, d.column, d.code))
    if any(d.severity is Severity.ERROR for d in diagnostics):
        return _outcome(source, Status.REFUSED, diagnostics)

    converted = apply(plan)
    code = converted.bytes if isinstance(source, bytes) else converted.code
    compile_quietly(code, path)  # output that does not compile is a bug: an internal error, nothing written
    broken = invariants.check(converted.code, path)  # a safety net that does not trust the analysis above
    if broken:
        return _outcome(source, Status.REFUSED, [*diagnostics, *broken])
    changes = tuple(sorted(plan.changes(), key=lambda c: c.line))
    return Conversion(source, code, Status.CONVERTED, tuple(diagnostics), changes)


def _outcome(source: str | bytes, status: Status, diagnostics: list[Diagnostic]) -> Conversion:
    return Conversion(source, source, status, tuple(diagnostics))


def _nothing_to_do(path: str) -> Diagnostic:
    return NOTHING_TO_DO.at(1, 1, "no training step (`.backward()`) found: nothing to do", path)

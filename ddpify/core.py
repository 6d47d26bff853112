"""convert(): parse -> guard -> analyse -> passes -> checks -> Conversion.

The pure core: it never reads or writes files, prints or exits, and it never
raises -- every outcome, a bug included, is a :class:`~ddpify.result.Conversion`.
It never imports or runs the user's script either; it only reads its text.

Before anything is rewritten, the input guards (:mod:`ddpify.guards`) turn
away text that ddpify cannot read or reproduce faithfully, and a script that is
already distributed, or has no training step, is left alone.

After rewriting, the output must compile and converting it again must change
nothing; otherwise the conversion is an internal error and nothing is written.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper

from ddpify.analysis import analyse, distributed_use
from ddpify.diagnostics import Diagnostic, Severity
from ddpify.edits import EditPlan, apply
from ddpify.guards import compile_quietly, parse_checked
from ddpify.passes import PASSES
from ddpify.result import Conversion, Options, Status


def convert(source: str | bytes, *, path: str = "<string>", options: Options = Options()) -> Conversion:
    """Convert one training script; see the module docstring for what is guaranteed."""
    try:
        return _convert(source, path, options)
    except Exception as exc:
        return _outcome(source, Status.INTERNAL_ERROR, [_at(path, 1, 1, "DDP900", f"internal error: {exc!r}")])


def _convert(source: str | bytes, path: str, options: Options) -> Conversion:
    module = parse_checked(source, path)
    if module is None:
        return _outcome(source, Status.UNCHANGED, [_nothing_to_do(path)])
    if isinstance(module, Diagnostic):
        return _outcome(source, Status.INVALID, [module])
    already = distributed_use(module)
    if already is not None:
        return _outcome(
            source,
            Status.UNCHANGED,
            [_at(path, 1, 1, "DDP010", f"already distributed (uses {already}): left unchanged", Severity.INFO)],
        )

    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    anatomy = analyse(wrapper, path)
    if not anatomy.trains:
        return _outcome(source, Status.UNCHANGED, [_nothing_to_do(path)])

    plan = EditPlan(anatomy.index, path, cst.parse_expression(f"{anatomy.names.dist}.get_rank() == 0"))
    for rewrite in PASSES:
        rewrite.run(anatomy, plan, options)
    diagnostics = sorted([*anatomy.diagnostics, *plan.diagnostics], key=lambda d: (d.line, d.column, d.code))
    if any(d.severity is Severity.ERROR for d in diagnostics):
        return _outcome(source, Status.REFUSED, diagnostics)

    converted = apply(plan)
    code = converted.bytes if isinstance(source, bytes) else converted.code
    _check_output(code, path)
    changes = tuple(sorted(plan.changes, key=lambda c: c.line))
    return Conversion(source, code, Status.CONVERTED, tuple(diagnostics), changes)


def _check_output(code: str | bytes, path: str) -> None:
    """The output compiles and is a fixed point; anything else is a bug in ddpify."""
    compile_quietly(code, path)
    again = _convert(code, path, Options())
    if again.status is not Status.UNCHANGED:
        raise AssertionError(f"converting the output again gives {again.status.value}, not unchanged")


def _outcome(source: str | bytes, status: Status, diagnostics: list[Diagnostic]) -> Conversion:
    return Conversion(source, source, status, tuple(diagnostics))


def _at(path: str, line: int, column: int, code: str, message: str, severity: Severity = Severity.ERROR) -> Diagnostic:
    return Diagnostic(line, column, code, severity, message, path)


def _nothing_to_do(path: str) -> Diagnostic:
    return _at(path, 1, 1, "DDP011", "no training step (`.backward()`) found: nothing to do", Severity.INFO)

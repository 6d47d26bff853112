"""The binding check: a name that the input binds before it is read is still bound in the output.

A rewrite that drops a statement (``model = DataParallel(build())`` replaced by
nothing) or moves a read above its assignment leaves a script that compiles and
then fails at run time with a ``NameError`` or ``UnboundLocalError``, possibly
after hours of training. This check does not trust the analysis: it runs
pyflakes, made for exactly this question, on each changed module before and
after the conversion, and compares what pyflakes calls undefined. A name that
the output reads unbound (or reads before its assignment) where the input
never does is a bug in ddpify: the conversion is an internal error and nothing
is written.

The input's own undefined names (a star import, a name defined by ``exec``, a
data set that a notebook cell made) are left out on both sides, so they never
trip the check, however often the output reads them.
"""

from __future__ import annotations

import ast

from pyflakes import checker, messages

from ddpify.diagnostics import INVARIANT_BOUND, Diagnostic

_UNBOUND = (messages.UndefinedName, messages.UndefinedLocal)


def unbound_names(code: str, path: str) -> set[tuple[str, str]]:
    """The names read where pyflakes finds them unbound, each with the kind of finding."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()  # compiled elsewhere: what does not parse is reported there
    found = checker.Checker(tree, filename=path, withDoctest=False).messages
    return {(type(m).__name__, str(m.message_args[0])) for m in found if isinstance(m, _UNBOUND)}


def lost_bindings(original: str, converted: str, path: str) -> list[Diagnostic]:
    """One finding per name that ``converted`` reads unbound where ``original`` never does."""
    after = unbound_names(converted, path)
    extra = after - unbound_names(original, path) if after else after  # the input is read only when needed
    return [
        INVARIANT_BOUND.at(
            1,
            1,
            f"the converted script would read `{name}` "
            f"{'before its assignment' if kind == 'UndefinedLocal' else 'where it no longer binds it'}, "
            "which the input does not: a construction dropped or a read moved by the rewrite",
            path,
        )
        for kind, name in sorted(extra)
    ]

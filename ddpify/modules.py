"""Module names as Python's import system computes them, without importing anything (nor libcst)."""

from __future__ import annotations


def absolute_import(level: int, module: str, package: str) -> str | None:
    """The full name of the module ``from <dots><module> import ...`` loads: ``level`` dots, in a
    module of ``package``; ``from ..data import x`` in package ``pkg.sub`` -> ``pkg.data``.

    None for a relative import that climbs above the top-level package (Python refuses it) or has
    no package to start from (a script run directly).
    """
    if not level:
        return module or None
    parts = package.split(".") if package else []
    up = level - 1
    if up >= len(parts):
        return None
    return ".".join(parts[: len(parts) - up] + ([module] if module else [])) or None

"""Relative imports resolved as Python's import system resolves them."""

from __future__ import annotations

import pytest

from ddpify.modules import absolute_import


@pytest.mark.parametrize(
    ("level", "module", "package", "expected"),
    [
        (0, "torch.nn", "pkg", "torch.nn"),  # absolute: as written
        (1, "loaders", "data", "data.loaders"),  # from .loaders import ... in data/__init__.py
        (1, "", "pkg.sub", "pkg.sub"),  # from . import x
        (2, "data", "pkg.sub", "pkg.data"),  # from ..data import x
        (2, "", "pkg", None),  # from .. import x leaves the top-level package
        (3, "data", "pkg.sub", None),  # beyond the top-level package
        (1, "x", "", None),  # a script run directly has no package
    ],
)
def test_absolute_import(level: int, module: str, package: str, expected: str | None) -> None:
    assert absolute_import(level, module, package) == expected

"""convert(): parse -> guard -> analyse -> passes -> checks -> Conversion (placeholder)."""

from __future__ import annotations

from ddpify.result import Conversion, Options, Status


def convert(source: str | bytes, *, path: str = "<string>", options: Options = Options()) -> Conversion:
    return Conversion(source=source, code=source, status=Status.UNCHANGED)

"""The converted examples committed beside the originals (``*_ddp.py``) are current."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpify import Status, convert

EXAMPLES = Path(__file__).parents[1] / "examples"
ORIGINALS = sorted(p for p in EXAMPLES.glob("*.py") if not p.stem.endswith("_ddp"))


def converted_path(original: Path) -> Path:
    return original.with_name(f"{original.stem}_ddp.py")


@pytest.mark.parametrize("original", ORIGINALS, ids=[p.stem for p in ORIGINALS])
def test_committed_conversion_is_current(original: Path) -> None:
    conversion = convert(original.read_bytes(), path=str(original))
    assert conversion.status is Status.CONVERTED, [d.format() for d in conversion.diagnostics]
    assert converted_path(original).read_bytes() == conversion.code, (
        f"{converted_path(original).name} is stale: run `ddpify {original} -o {converted_path(original)}`"
    )

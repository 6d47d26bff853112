"""What a rank's batches and parameters hash to, so that ranks can be compared without sending tensors.

The probe (``ddpify.verify.probe``) keeps only these digests in its record:

* a batch: a hash of the whole batch and, when its tensors share a first
  dimension, one hash per sample (the rows of its tensors), so that the
  parent can count the samples two ranks share; any object in the batch that
  is not a tensor, a number, a string or a container counts by its type name,
  since its ``repr`` may hold an address that differs by rank;
* an optimizer's parameters, in ``param_groups`` order: a sha256 of the exact
  bytes (dtype and shape included) and three float64 statistics (sum, sum of
  squares, a sum weighted by a fixed sequence), so that the parent can tell
  "identical", "equal up to rounding" and "diverged" apart.

Reading a tensor's bytes never changes it, and nothing here touches a random
number generator.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch

# An irrational step makes sin() a sequence without a period over any model size.
_WEIGHT_STEP = 0.7548776662466927


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    # ctypes instead of numpy (an optional dependency of torch) or
    # bytes(storage) (one Python call per byte).
    flat = tensor.detach().resolve_conj().resolve_neg().cpu().contiguous()
    size = flat.numel() * flat.element_size()
    return ctypes.string_at(flat.data_ptr(), size) if size else b""


def _tensor_rows(tensor: torch.Tensor, rows: int) -> list[bytes]:
    data = _tensor_bytes(tensor)
    width = len(data) // rows
    return [data[i * width : (i + 1) * width] for i in range(rows)]


def _flatten(obj: Any, out: list[Any]) -> None:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, Mapping):
        for key in sorted(obj, key=str):
            _flatten(obj[key], out)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _flatten(item, out)
    elif obj is None or isinstance(obj, (str, bytes, int, float, bool)):
        out.append(obj)
    else:
        # repr() of an arbitrary object may hold its address, which differs by rank.
        out.append(type(obj).__qualname__)


def _short_hash(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()[:16]


def hash_batch(batch: Any) -> tuple[str, list[str] | None]:
    """The batch's hash and, when its tensors share a first dimension, one hash per sample."""
    leaves: list[Any] = []
    _flatten(batch, leaves)
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor) and leaf.dim() > 0]
    samples = None
    if tensors and all(t.shape[0] == tensors[0].shape[0] for t in tensors):
        columns = [_tensor_rows(t, t.shape[0]) for t in tensors]
        samples = [_short_hash(*row) for row in zip(*columns)]
    if samples is not None:
        whole = _short_hash(*(s.encode() for s in samples))
    else:
        whole = _short_hash(*(_tensor_bytes(x) if isinstance(x, torch.Tensor) else repr(x).encode() for x in leaves))
    return whole, samples


def parameter_checksum(params: Sequence[torch.Tensor]) -> dict[str, Any]:
    """``tensors``, ``numel``, ``sha256`` and ``stats`` (sum, sum of squares, weighted sum) of ``params``."""
    digest = hashlib.sha256()
    total = squares = weighted = 0.0
    numel = 0
    with torch.no_grad():
        for param in params:
            tensor = param.detach()
            digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
            digest.update(_tensor_bytes(tensor))
            if tensor.is_complex():
                tensor = torch.view_as_real(tensor)
            values = tensor.to(device="cpu", dtype=torch.float64).reshape(-1)
            count = values.numel()
            weights = torch.sin(torch.arange(numel, numel + count, dtype=torch.float64) * _WEIGHT_STEP)
            total += values.sum().item()
            squares += (values * values).sum().item()
            weighted += (values * weights).sum().item()
            numel += count
    return {"tensors": len(params), "numel": numel, "sha256": digest.hexdigest(), "stats": [total, squares, weighted]}

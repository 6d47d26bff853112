"""Which parameters an optimizer steps that ``DistributedDataParallel`` does not average, and their names.

The probe (``ddpify.verify.probe``) keeps a ``WrapperRecord`` for every DDP
instance, held weakly, with the parameters it registered for gradient
reduction (those that required grad and were not ignored when it was built).
At the first step of each optimizer, ``ownership`` looks every parameter the
optimizer holds up by identity among the live DDP instances'
``module.parameters()``; parameters outside all of them are named by the
script's variables on the stack (``decoder.fc.weight``, from
``script_roots``), or else by the module attribute that holds them, found
through the garbage collector, and grouped by the largest module that holds
only such parameters. When the run stops, ``unregistered`` finds the
parameters that require grad now but were not registered (frozen when DDP
was built, unfrozen later): DDP never averages them. Other wrappers (FSDP,
DataParallel) are not recognised.
"""

from __future__ import annotations

import gc
import os
import weakref
from collections.abc import Iterable, Mapping, Sequence
from types import FrameType
from typing import Any

import torch
from torch import nn

TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
# Parameter names kept per finding, and owners looked up through the garbage
# collector (a scan of the whole heap each) when no variable names them.
_NAMED_PARAMETERS = 8
_OWNER_LOOKUPS = 3


class WrapperRecord:
    """One ``DistributedDataParallel`` instance, held weakly, and what it registered for reduction."""

    def __init__(self, ddp: Any) -> None:
        self.ref = weakref.ref(ddp)
        ignored = getattr(ddp, "parameters_to_ignore", None) or set()
        named = list(ddp.module.named_parameters())
        # Weak references keyed by id: a tensor's == is elementwise, so tensors
        # cannot be members of a set that compares them.
        self.at_init = {id(p): weakref.ref(p) for _, p in named}
        self.registered = {id(p): weakref.ref(p) for name, p in named if p.requires_grad and name not in ignored}

    def parameters(self, *, live: bool = True) -> list[torch.Tensor]:
        """The wrapped module's parameters now; once the DDP instance is gone, none
        (``live``) or those it had when it was built."""
        ddp = self.ref()
        if ddp is not None:
            return list(ddp.module.parameters())
        if live:
            return []
        return [p for p in (ref() for ref in self.at_init.values()) if p is not None]

    def is_registered(self, param: torch.Tensor) -> bool:
        ref = self.registered.get(id(param))
        return ref is not None and ref() is param


def parameter_names(roots: Mapping[str, nn.Module]) -> dict[int, str]:
    """id(parameter) -> its name under the first root that holds it (``decoder.fc.weight``)."""
    names: dict[int, str] = {}
    for root, module in roots.items():
        for name, param in module.named_parameters(prefix=root):
            names.setdefault(id(param), name)
    return names


def _unwrapped_modules(unwrapped: set[int], roots: Mapping[str, nn.Module]) -> list[dict[str, Any]]:
    """The largest modules, reachable from ``roots``, whose parameters are all in ``unwrapped``."""
    found: list[dict[str, Any]] = []
    seen: set[int] = set()

    def visit(name: str, module: nn.Module) -> None:
        if id(module) in seen:
            return
        seen.add(id(module))
        params = [id(p) for p in module.parameters()]
        if params and all(p in unwrapped for p in params):
            found.append({"name": name, "type": type(module).__qualname__, "parameters": len(params)})
            return
        if any(p in unwrapped for p in params):
            for child, submodule in module.named_children():
                visit(f"{name}.{child}", submodule)

    for root, module in roots.items():
        visit(root, module)
    return found


def _owner(param: torch.Tensor) -> str | None:
    """``Type.attribute`` of a module that holds ``param``, found through the garbage collector.

    A module holds its parameters in its ``_parameters`` dict, which its
    instance ``__dict__`` holds (or the module itself, where attributes live
    inline in the object).
    """
    for container in gc.get_referrers(param):
        if not isinstance(container, dict) or not any(value is param for value in container.values()):
            continue
        for holder in gc.get_referrers(container):
            if isinstance(holder, nn.Module):
                candidates = [holder]
            elif isinstance(holder, dict) and holder.get("_parameters") is container:
                candidates = gc.get_referrers(holder)
            else:
                continue
            for module in candidates:
                if isinstance(module, nn.Module) and module._parameters is container:
                    attribute = next(key for key, value in container.items() if value is param)
                    return f"{type(module).__qualname__}.{attribute}"
    return None


def owners(wrappers: Iterable[WrapperRecord], *, live: bool = True) -> dict[int, WrapperRecord]:
    """id(parameter) -> the DDP instance whose module holds it (see ``WrapperRecord.parameters``)."""
    found: dict[int, WrapperRecord] = {}
    for wrapper in wrappers:
        for param in wrapper.parameters(live=live):
            found.setdefault(id(param), wrapper)
    return found


def ownership(
    params: Sequence[torch.Tensor],
    wrappers: Iterable[WrapperRecord],
    roots: Mapping[str, nn.Module],
    names: dict[int, str],
) -> dict[str, Any]:
    """Which of an optimizer's ``params`` belong to no live DDP instance, and which their DDP did not register.

    ``roots`` are the modules the script's variables hold and ``names`` the
    parameter names under them (``parameter_names``); both serve only to name
    what is found. Owners found through the garbage collector are added to
    ``names``.
    """
    by_owner = owners(wrappers)
    # a frozen parameter (requires_grad False) gets no gradient: the optimizer holds it but never moves it
    unwrapped = [p for p in params if id(p) not in by_owner and p.requires_grad]
    for param in [p for p in unwrapped if id(p) not in names][:_OWNER_LOOKUPS]:
        owner = _owner(param)
        if owner is not None:
            names[id(param)] = owner
    return {
        "parameters": len(params),
        "unwrapped": len(unwrapped),
        "unwrapped_names": [_name(p, names) for p in unwrapped[:_NAMED_PARAMETERS]],
        "unwrapped_modules": _unwrapped_modules({id(p) for p in unwrapped}, roots) if unwrapped else [],
        **unregistered(params, by_owner, names),
    }


def unregistered(
    params: Sequence[torch.Tensor], by_owner: Mapping[int, WrapperRecord], names: Mapping[int, str]
) -> dict[str, Any]:
    """How many of the wrapped ``params`` require grad but were not registered for reduction by their DDP, and
    the first names."""
    found = [
        param
        for param in params
        if (wrapper := by_owner.get(id(param))) is not None and param.requires_grad and not wrapper.is_registered(param)
    ]
    return {"unregistered": len(found), "unregistered_names": [_name(p, names) for p in found[:_NAMED_PARAMETERS]]}


def _name(param: torch.Tensor, names: Mapping[int, str]) -> str:
    return names.get(id(param), f"<parameter of shape {tuple(param.shape)}>")


def script_roots(frame: FrameType | None) -> dict[str, nn.Module]:
    """The modules held by variables of the frames from ``frame`` outwards, innermost first (torch's own skipped)."""
    roots: dict[str, nn.Module] = {}
    while frame is not None:
        if not os.path.abspath(frame.f_code.co_filename).startswith(TORCH_DIR + os.sep):
            for name, value in frame.f_locals.items():
                if isinstance(value, nn.Module):
                    roots.setdefault(name, value)
        frame = frame.f_back
    return roots

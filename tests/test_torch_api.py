"""The torch facts in ddpify.torch_api hold for the installed torch."""

from __future__ import annotations

import importlib
import inspect

import pytest

from ddpify import torch_api

torch = pytest.importorskip("torch")
from torch.nn.parallel import DistributedDataParallel  # noqa: E402


def resolve(qualified: str) -> object:
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize(
    "names",
    [torch_api.DATALOADER, torch_api.DATA_PARALLEL, torch_api.SAVE, torch_api.LOAD],
    ids=["DATALOADER", "DATA_PARALLEL", "SAVE", "LOAD"],
)
def test_qualified_names_resolve_to_one_object(names: frozenset[str]) -> None:
    objects = {id(resolve(name)) for name in names}
    assert len(objects) == 1


def test_dataloader_positions_match_its_signature() -> None:
    parameters = list(inspect.signature(torch.utils.data.DataLoader.__init__).parameters)[1:]
    for name, position in torch_api.DATALOADER_POSITIONS.items():
        assert parameters[position] == name


def test_sampling_keywords_are_dataloader_parameters() -> None:
    parameters = inspect.signature(torch.utils.data.DataLoader.__init__).parameters
    assert set(parameters) >= torch_api.DATALOADER_SAMPLING_KEYWORDS


def test_wrapper_safe_attributes_exist_on_the_ddp_wrapper() -> None:
    instance_attributes = {"training", "module"}
    for name in torch_api.WRAPPER_SAFE_ATTRIBUTES - instance_attributes:
        assert hasattr(DistributedDataParallel, name), name


def test_module_methods_that_chain_return_the_module() -> None:
    module = torch.nn.Linear(2, 2)
    for name in torch_api.MODULE_CHAINING_METHODS - {"apply", "type", "cuda", "to", "bfloat16", "half"}:
        assert getattr(module, name)() is module, name
    assert module.apply(lambda m: None) is module
    assert module.to("cpu") is module


def test_optimizer_names_are_optimizers() -> None:
    for name in dir(torch.optim):
        obj = getattr(torch.optim, name)
        is_optimizer = (
            inspect.isclass(obj) and issubclass(obj, torch.optim.Optimizer) and obj is not torch.optim.Optimizer
        )
        if is_optimizer:
            assert name not in torch_api.NOT_OPTIMIZERS and name[:1].isupper()


def test_distributed_calls_name_real_torch_objects() -> None:
    for name in torch_api.DISTRIBUTED_CALLS:
        if not name.startswith("torch."):
            continue  # other libraries are not installed here
        if name.endswith("."):
            importlib.import_module(name.rstrip("."))
        else:
            assert callable(resolve(name)), name


def test_no_grad_and_progress_names_resolve() -> None:
    for name in torch_api.NO_GRAD | torch_api.SET_DEVICE | torch_api.ITERABLE_DATASET:
        resolve(name)

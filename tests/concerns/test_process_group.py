"""ddpify.concerns.process_group: where training objects are built, and scripts already distributed."""

from __future__ import annotations

from ddpify.concerns import data, model, process_group

GUARDED = """
import torch
from torch.utils.data import DataLoader

def main():
    loader = DataLoader(ds, batch_size=8)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in loader:
        model(x).sum().backward()

if __name__ == "__main__":
    main()
"""


def setup_at_module_level(program) -> bool:
    models = model.find(program)
    return process_group.find(program, models, data.find(program)).setup_at_module_level


def test_training_objects_built_in_main_are_set_up_inside_the_guard(read) -> None:
    assert not setup_at_module_level(read(GUARDED))


def test_training_objects_built_at_module_level_need_the_group_first(read) -> None:
    program = read(
        """
        import torch
        from torch.utils.data import DataLoader
        loader = DataLoader(ds, batch_size=8)
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in loader:
            model(x).sum().backward()
        """
    )
    assert setup_at_module_level(program)


def test_a_distributed_call_is_found_however_it_was_imported(read) -> None:
    program = read(
        """
        import torch.distributed as d
        d.init_process_group("nccl")
        """
    )
    assert process_group.distributed_use(program.index) == "torch.distributed.init_process_group"


def test_an_import_alone_is_not_distributed_use(read) -> None:
    program = read(
        """
        import lightning
        from torch.nn.parallel import DistributedDataParallel
        lightning.seed_everything(0)
        """
    )
    assert process_group.distributed_use(program.index) is None

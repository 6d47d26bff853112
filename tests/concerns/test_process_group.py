"""ddpify.concerns.process_group: where training objects are built, and scripts already distributed."""

from __future__ import annotations

from conftest import code

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
    found = process_group.distributed_use(program.index)
    assert found is not None and found[1] == "torch.distributed.init_process_group"


def test_asking_for_the_rank_where_a_group_may_exist_is_not_distributed_use(read) -> None:
    program = read(
        """
        import torch.distributed as dist
        def is_main():
            return not dist.is_initialized() or dist.get_rank() == 0
        if is_main():
            print("hello")
        """
    )
    assert process_group.distributed_use(program.index) is None


def test_an_import_alone_is_not_distributed_use(read) -> None:
    program = read(
        """
        import lightning
        from torch.nn.parallel import DistributedDataParallel
        lightning.seed_everything(0)
        """
    )
    assert process_group.distributed_use(program.index) is None


def setup_before(program) -> str:
    models = model.find(program)
    facts = process_group.find(program, models, data.find(program))
    return program.index.module.code_for_node(facts.setup_before).strip()


def test_the_setup_follows_argument_parsing_only(read) -> None:
    program = read(
        """
        import argparse
        import torch
        from torch.utils.data import DataLoader

        parser = argparse.ArgumentParser()

        if __name__ == "__main__":
            parser.add_argument("--lr", type=float, default=0.1)
            args = parser.parse_args()
            torch.manual_seed(0)
            loader = DataLoader(ds, batch_size=8)
            model = Net()
            optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
            for x in loader:
                model(x).sum().backward()
        """
    )
    assert setup_before(program) == "torch.manual_seed(0)"


def test_code_run_at_import_time_is_before_the_setup(read) -> None:
    program = read(
        """
        def announce():
            print("hello")

        announce()

        def main():
            print("training")

        if __name__ == "__main__":
            main()
        """
    )
    facts = process_group.find(program, model.find(program), data.find(program))
    prints = [call for call in program.index.calls if code(program, call).startswith("print")]
    assert [facts.runs_before_setup(program.index, call) for call in prints] == [True, False]


def test_a_save_at_import_time_moves_the_setup_after_the_imports(read) -> None:
    program = read(
        """
        import torch

        torch.save({"lr": 0.1}, "config.pt")

        def main():
            model = Net()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                model(x).sum().backward()

        if __name__ == "__main__":
            main()
        """
    )
    assert setup_at_module_level(program)
    assert setup_before(program) == 'torch.save({"lr": 0.1}, "config.pt")'


LATE_IMPORTS = """
import argparse

def helper():
    return 1

import torch
from torch.utils.data import DataLoader
parser = argparse.ArgumentParser()
loader = DataLoader(ds, batch_size=8)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in loader:
    model(x).sum().backward()
"""


def facts(program) -> process_group.Facts:
    return process_group.find(program, model.find(program), data.find(program))


def test_imports_after_helpers_move_the_module_level_setup_below_the_last_import(read) -> None:
    program = read(LATE_IMPORTS)
    found = facts(program)
    assert found.setup_at_module_level
    assert code(program, found.setup_before) == "parser = argparse.ArgumentParser()"


def test_imports_after_code_that_may_need_the_group_set_it_up_before_that_code(read) -> None:
    program = read(LATE_IMPORTS.replace("    return 1\n", "    return 1\n\ndevice = torch.device('cuda')\n"))
    found = facts(program)
    assert code(program, found.setup_before) == "device = torch.device('cuda')"
    assert process_group._module_level_anchor(program.index) is found.setup_before

"""ddpify.invariants: clear violations in a converted script are caught; every good output passes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ddpify import convert
from ddpify.diagnostics import INVARIANT_ONE_WRITER
from ddpify.invariants import check
from ddpify.result import Status

ROOT = Path(__file__).parents[1]
GOOD = sorted(
    [*(ROOT / "tests" / "fixtures").glob("*/*/expected.py"), *(ROOT / "examples").glob("*_ddp.py")],
    key=str,
)

HEADER = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def setup_distributed():
    dist.init_process_group("gloo")

"""


def codes(body: str) -> list[tuple[str, int]]:
    """The codes found in ``HEADER + body``, each with the output line its message names."""
    found = []
    for diagnostic in check(HEADER + textwrap.dedent(body).lstrip("\n")):
        line = int(diagnostic.message.split("(output line ")[1].split(")")[0])
        found.append((diagnostic.code, line - HEADER.count("\n")))
    return found


@pytest.mark.parametrize("path", GOOD, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_good_output_keeps_the_invariants(path: Path) -> None:
    assert check(path.read_text(), str(path)) == []


def test_a_distributed_call_before_the_module_level_setup_is_caught() -> None:
    assert codes("""
        if __name__ == "__main__":
            ds = TensorDataset(torch.randn(8, 2))
            loader = DataLoader(ds, sampler=DistributedSampler(ds))
            setup_distributed()
        """) == [("DDP901", 3)]


def test_a_distributed_call_after_the_setup_or_behind_is_initialized_is_fine() -> None:
    assert (
        codes("""
        if dist.is_initialized():
            print(dist.get_rank())
        setup_distributed()
        print(dist.get_rank())
        """)
        == []
    )


def test_a_training_loader_without_a_sampler_is_caught() -> None:
    assert codes("""
        def main(model, optimizer):
            loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4, shuffle=True)
            for epoch in range(2):
                for (x,) in loader:
                    model(x).sum().backward()
        """) == [("DDP902", 2)]


def test_a_loader_drawn_through_a_progress_bar_is_followed() -> None:
    assert codes("""
        from tqdm import tqdm

        def main(model):
            ds = TensorDataset(torch.randn(8, 2))
            loader = DataLoader(ds, sampler=DistributedSampler(ds))
            for epoch in range(2):
                for step, (x,) in enumerate(tqdm(loader)):
                    model(x).sum().backward()
        """) == [("DDP902", 6)]
    assert codes("""
        from tqdm import tqdm

        def main(model):
            ds = TensorDataset(torch.randn(8, 2))
            loader = DataLoader(ds, sampler=DistributedSampler(ds))
            for epoch in range(2):
                pbar = tqdm(loader)
                pbar.sampler.set_epoch(epoch)
                for (x,) in pbar:
                    model(x).sum().backward()
        """) == [("DDP902", 6)]


def test_a_loader_over_a_dataset_of_unknown_kind_is_not_decidable() -> None:
    assert (
        codes("""
        def main(model, dataset):
            loader = DataLoader(dataset, batch_size=4)
            for (x,) in loader:
                model(x).sum().backward()
        """)
        == []
    )


def test_an_epoch_loop_without_set_epoch_is_caught() -> None:
    assert codes("""
        def main(model):
            ds = TensorDataset(torch.randn(8, 2))
            loader = DataLoader(ds, sampler=DistributedSampler(ds))
            for epoch in range(2):
                for i, (x,) in enumerate(loader):
                    model(x).sum().backward()
        """) == [("DDP902", 4)]


def test_set_epoch_twice_per_epoch_is_caught() -> None:
    assert codes("""
        def main(model):
            ds = TensorDataset(torch.randn(8, 2))
            sampler = DistributedSampler(ds)
            loader = DataLoader(ds, sampler=sampler)
            for epoch in range(2):
                sampler.set_epoch(epoch)
                loader.sampler.set_epoch(epoch)
                for (x,) in loader:
                    model(x).sum().backward()
        """) == [("DDP902", 7)]


def test_set_epoch_once_or_an_unshuffled_sampler_is_fine() -> None:
    once = """
        def main(model):
            ds = TensorDataset(torch.randn(8, 2))
            loader = DataLoader(ds, sampler=DistributedSampler(ds))
            for epoch in range(2):
                loader.sampler.set_epoch(epoch)
                for (x,) in loader:
                    model(x).sum().backward()
        """
    assert codes(once) == []
    unshuffled = once.replace("DistributedSampler(ds)", "DistributedSampler(ds, shuffle=False)")
    assert codes(unshuffled.replace("loader.sampler.set_epoch(epoch)", "pass")) == []


def test_a_save_or_a_file_written_on_every_rank_is_caught() -> None:
    assert codes("""
        def main(model):
            torch.save(model.state_dict(), "model.pt")
            with open("log.txt", "a") as f:
                f.write("done")
            with open("config.json") as f:
                pass

        setup_distributed()
        main(model)
        """) == [("DDP903", 2), ("DDP903", 3)]


def test_a_save_on_rank_zero_directly_or_through_its_callers_is_fine() -> None:
    assert (
        codes("""
        def save(model):
            torch.save(model.state_dict(), "model.pt")

        def main(model):
            if dist.get_rank() == 0:
                torch.save(model.state_dict(), "model.pt")
                save(model)
            with open(f"rank{dist.get_rank()}.log", "w") as f:
                pass

        def report(model):
            if dist.get_rank() != 0:
                return
            torch.save(model, "whole.pt")
        """)
        == []
    )


def test_a_save_in_a_function_called_on_every_rank_is_caught() -> None:
    assert codes("""
        def save(model):
            torch.save(model.state_dict(), "model.pt")

        def main(model):
            if dist.get_rank() == 0:
                save(model)
            save(model)

        main(model)
        """) == [("DDP903", 2)]


def test_an_optimized_model_trained_unwrapped_is_caught() -> None:
    assert codes("""
        def main(loader):
            encoder, decoder = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
            optimizer = torch.optim.SGD([*encoder.parameters(), *decoder.parameters()], lr=0.1)
            encoder = DDP(encoder)
            for (x,) in loader:
                decoder(encoder(x)).sum().backward()
                optimizer.step()
        """) == [("DDP904", 5)]


def test_a_wrap_that_nothing_reads_is_caught() -> None:
    # the solver kept the plain model in a field; the wrap rebinds only the parameter's name
    assert codes("""
        class Solver:
            def __init__(self, model):
                self.model = model
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                model = DDP(model)
        """) == [("DDP904", 5)]
    assert (
        codes("""
        class Solver:
            def __init__(self, model):
                self.model = model
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                self.model = DDP(self.model)

        def build(model):
            model = DDP(model)
            return model

        def main(models, loader):
            for model in models:
                model = DDP(model)
                train(model, loader)
        """)
        == []
    )


def test_a_model_trained_by_a_name_taken_before_its_wrap_is_caught() -> None:
    assert codes("""
        def main(loader):
            model = torch.nn.Linear(2, 2)
            net = model
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model = DDP(model)
            for (x,) in loader:
                net(x).sum().backward()
                optimizer.step()
        """) == [("DDP904", 5), ("DDP904", 6)]  # (the wrap nothing reads, and the alias trained unwrapped)
    assert (
        codes("""
        def main(loader):
            model = torch.nn.Linear(2, 2)
            model = DDP(model)
            net = model
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for (x,) in loader:
                net(x).sum().backward()
                optimizer.step()
        """)
        == []
    )


def test_an_optimized_model_wrapped_before_training_is_fine() -> None:
    assert (
        codes("""
        def main(loader, helper_model):
            model = torch.nn.Linear(2, 2)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model = DDP(model)
            extra = torch.optim.SGD(helper_model.parameters(), lr=0.1)
            for (x,) in loader:
                model(x).sum().backward()
                helper_model(x)
                optimizer.step()
        """)
        == []
    )


def test_another_name_for_a_model_kept_elsewhere_is_not_judged_here() -> None:
    assert (
        codes("""
        class Trainer:
            def run(self, loader):
                model = self.model
                optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
                for (x,) in loader:
                    model(x).sum().backward()
                    optimizer.step()
        """)
        == []
    )


def test_a_wrap_after_a_return_is_caught() -> None:
    assert codes("""
        def build():
            model = torch.nn.Linear(2, 2)
            if torch.cuda.is_available():
                model = model.cuda()
            return model
            model = DDP(model)
        """) == [("DDP905", 6)]


def test_code_after_a_return_that_ddpify_did_not_add_is_not_its_doing() -> None:
    body = """
        def build():
            return None
            dist.barrier()
        """
    assert codes(body) == [("DDP905", 3)]
    assert check(HEADER + textwrap.dedent(body), original=HEADER + textwrap.dedent(body)) == []


MODULE = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""


def module_codes(body: str) -> list[tuple[str, int]]:
    """The codes found in a converted module other than the entry script (``MODULE + body``)."""
    found = []
    for diagnostic in check(MODULE + textwrap.dedent(body).lstrip("\n"), entry=False):
        line = int(diagnostic.message.split("(output line ")[1].split(")")[0])
        found.append((diagnostic.code, line - MODULE.count("\n")))
    return found


def test_a_module_other_scripts_import_may_not_need_a_process_group() -> None:
    assert module_codes("""
        def save(state, path):
            if dist.get_rank() == 0:
                torch.save(state, path)

        def fit(model, loader, epochs):
            model = DDP(model)
            for epoch in range(epochs):
                loader.sampler.set_epoch(epoch)
        """) == [("DDP906", 2), ("DDP906", 6), ("DDP906", 8)]


def test_a_module_that_tests_for_the_process_group_is_fine() -> None:
    assert (
        module_codes("""
        def per_process_batch(batch_size):
            return batch_size // dist.get_world_size()

        def save(state, path, batch_size):
            if not dist.is_initialized() or dist.get_rank() == 0:
                torch.save(state, path)
            if dist.is_initialized():
                batch_size = per_process_batch(batch_size)
            pbar = range(3) if dist.is_initialized() and dist.get_rank() != 0 else None

        def fit(model, loader, epochs):
            if dist.is_initialized():
                model = DDP(model)
            for epoch in range(epochs):
                if dist.is_initialized():
                    loader.sampler.set_epoch(epoch)
        """)
        == []
    )


def test_a_helper_called_where_there_may_be_no_group_is_caught() -> None:
    assert module_codes("""
        def per_process_batch(batch_size):
            return batch_size // dist.get_world_size()

        def loader(batch_size):
            return per_process_batch(batch_size)
        """) == [("DDP906", 2)]


def test_a_collective_under_a_rank_test_is_caught() -> None:
    assert codes("""
        def same_on_every_rank(value):
            values = [value]
            dist.broadcast_object_list(values, src=0)
            return values[0]


        def main(path):
            setup_distributed()
            if dist.get_rank() == 0:
                exists = same_on_every_rank(os.path.exists(path))
            model = torch.nn.Linear(2, 1)
            if args.local_rank in (-1, 0) and same_on_every_rank(os.path.exists(path)):
                model = DDP(model)
        """) == [("DDP908", 10), ("DDP908", 12), ("DDP908", 13)]


def test_a_collective_that_every_rank_reaches_is_fine() -> None:
    assert (
        codes("""
        def same_on_every_rank(value):
            values = [value]
            dist.broadcast_object_list(values, src=0)
            return values[0]


        def main(path):
            setup_distributed()
            if same_on_every_rank(os.path.exists(path)) and dist.get_rank() == 0:
                print("overwriting")
            if dist.get_rank() != 0:
                dist.barrier()  # rank 0 first, the others after it
            data = torch.randn(8, 2)
            if dist.get_rank() == 0:
                dist.barrier()
            model = DDP(torch.nn.Linear(2, 1))
        """)
        == []
    )


@pytest.mark.parametrize(
    "path",
    sorted((ROOT / "tests" / "fixtures" / "projects").glob("*/expected/**/*.py"), key=str),
    ids=lambda p: str(p.relative_to(ROOT / "tests" / "fixtures" / "projects")),
)
def test_every_converted_module_keeps_the_invariants(path: Path) -> None:
    case = path.parents[len(path.relative_to(path.parents[0]).parts) - 1]
    while case.parent.name != "projects":
        case = case.parent
    named = case / "entry.txt"
    entry = named.read_text().strip() if named.exists() else "train.py"
    relative = path.relative_to(case / "expected").as_posix()
    original = (case / "input" / relative).read_text()
    assert check(path.read_text(), str(path), entry=relative == entry, original=original) == []


def test_a_broken_invariant_is_a_refusal_with_nothing_written(monkeypatch: pytest.MonkeyPatch) -> None:
    source = (ROOT / "tests" / "fixtures" / "accumulation" / "grad_accumulation" / "input.py").read_text()
    broken = [(INVARIANT_ONE_WRITER, 7, "x")]
    monkeypatch.setattr("ddpify.invariants._Script.one_writer", lambda self: iter(broken))
    result = convert(source, path="train.py")
    assert result.status is Status.REFUSED
    assert result.code == source
    (diagnostic,) = [d for d in result.diagnostics if d.code.startswith("DDP9")]
    assert diagnostic.format() == (
        "train.py:1:1: DDP903 ddpify produced a script that would x (output line 7); nothing written; please report"
    )

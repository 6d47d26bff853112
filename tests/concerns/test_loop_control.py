"""ddpify.concerns.loop_control: exits from the training loop that ranks may take at different steps."""

from __future__ import annotations

from conftest import code, codes

from ddpify.concerns import data, loop_control, model

LOOP = """
import time

import torch
from torch.utils.data import DataLoader
loader = DataLoader(dataset, batch_size=8, shuffle=True)
model = Net().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(100):
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if CONDITION:
            break
"""


def exits(read, condition):
    program = read(LOOP.replace("CONDITION", condition))
    found = loop_control.find(program, model.find(program), data.find(program)).rank_local_exits
    return program, tuple(node for node, _ in found)


def test_a_break_on_the_loss_is_rank_local(read) -> None:
    program, found = exits(read, "loss.item() < 1e-3")
    assert [code(program, node) for node in found] == ["break"]
    assert codes(program) == []  # rewritten, not reported: every rank takes rank 0's decision
    tests = loop_control.find(program, model.find(program), data.find(program)).rank_local_exits[0][1]
    assert [code(program, test.test) for test in tests] == ["loss.item() < 1e-3"]


def test_a_break_on_a_tensor_computed_from_this_ranks_batch_is_rank_local(read) -> None:
    _, found = exits(read, "loss < 1e-3")
    assert len(found) == 1


def test_a_break_on_the_step_counter_is_the_same_on_every_rank(read) -> None:
    program, found = exits(read, "step >= max_steps")
    assert found == ()
    assert codes(program) == []


def test_a_break_on_the_batch_itself_is_rank_local(read) -> None:
    _, found = exits(read, "y.isnan().any()")
    assert len(found) == 1


def test_a_break_on_a_full_set_evaluation_is_the_same_on_every_rank(read) -> None:
    program, found = exits(
        read, "sum(loss_fn(model(vx), vy).item() for vx, vy in val_loader) > best or model(probe).item() > 1"
    )
    assert found == ()
    assert codes(program) == []


def test_a_break_on_a_clock_is_rank_local(read) -> None:
    _, found = exits(read, "time.time() - start > budget")
    assert len(found) == 1


def test_a_value_returned_by_a_function_that_draws_training_batches_is_rank_local(read) -> None:
    program = read(
        """
        import torch
        from torch.utils.data import DataLoader

        def train_epoch(model, loader, optimizer):
            total = 0.0
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                total += loss.item()
            return total / len(loader)

        def evaluate(model, loader):
            return sum(loss_fn(model(x), y).item() for x, y in loader)

        loader = DataLoader(train_set, batch_size=8, shuffle=True)
        val_loader = DataLoader(val_set, batch_size=8)
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(100):
            train_loss = train_epoch(model, loader, optimizer)
            val_loss = evaluate(model, val_loader)
            if val_loss > 10:
                break
            if train_loss < 1e-3:
                break
        """
    )
    found = loop_control.find(program, model.find(program), data.find(program)).rank_local_exits
    assert [program.index.position(node)[0] for node, _ in found] == [27]


def test_a_break_on_an_unseeded_draw_is_rank_local(read) -> None:
    _, found = exits(read, "torch.rand(1).item() < 0.01")
    assert len(found) == 1


def test_a_break_on_a_draw_after_a_seed_is_the_same_on_every_rank(read) -> None:
    program = read(
        LOOP.replace("CONDITION", "torch.rand(1).item() < 0.01").replace("loader =", "torch.manual_seed(0)\nloader =")
    )
    assert loop_control.find(program, model.find(program), data.find(program)).rank_local_exits == ()


def test_a_seed_under_a_condition_does_not_make_a_draw_uniform(read) -> None:
    seeded = "if args.seed is not None:\n    torch.manual_seed(args.seed)\nloader ="
    program = read(LOOP.replace("CONDITION", "torch.rand(1).item() < 0.01").replace("loader =", seeded))
    assert len(loop_control.find(program, model.find(program), data.find(program)).rank_local_exits) == 1


def test_a_batch_value_kept_on_self_does_not_make_every_attribute_rank_local(read) -> None:
    source = """
import torch
from torch.utils.data import DataLoader


class Trainer:
    def run(self):
        loader = DataLoader(dataset, batch_size=8, shuffle=True)
        while True:
            for x, y in loader:
                self.loss = loss_fn(self.model(x), y)
                self.loss.backward()
                self.optimizer.step()
                self.iter_num += 1
                if self.iter_num >= self.max_iters:
                    return
                if self.loss.item() < 1e-3:
                    return
"""
    program = read(source)
    found = loop_control.find(program, model.find(program), data.find(program)).rank_local_exits
    assert [program.index.position(node)[0] for node, _ in found] == [18]  # the loss, not the counter

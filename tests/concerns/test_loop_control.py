"""ddpify.concerns.loop_control: exits from the training loop that ranks may take at different steps."""

from __future__ import annotations

from conftest import code, codes

from ddpify.concerns import loop_control, model

LOOP = """
import torch
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
    return program, loop_control.find(program, model.find(program)).rank_local_exits


def test_a_break_on_the_loss_is_rank_local(read) -> None:
    program, found = exits(read, "loss.item() < 1e-3")
    assert [code(program, node) for node in found] == ["break"]
    assert codes(program) == ["DDP601"]


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

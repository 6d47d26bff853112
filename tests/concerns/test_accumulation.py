"""ddpify.concerns.accumulation: several backward passes per optimizer step."""

from __future__ import annotations

from conftest import code

from ddpify.concerns import accumulation, model

ACCUMULATING = """
import torch
model = Net().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) / 4
    loss.backward()
    if (i + 1) % 4 == 0:
        optimizer.step()
        optimizer.zero_grad()
"""


def test_a_step_under_a_condition_after_the_backward_pass_is_accumulation(read) -> None:
    program = read(ACCUMULATING)
    (found,) = accumulation.find(program, model.find(program)).accumulations
    assert code(program, found.forward) == "loss = loss_fn(model(x), y) / 4"
    assert code(program, found.condition) == "(i + 1) % 4 == 0"
    assert found.models == ("model",)


def test_a_step_every_batch_is_not_accumulation(read) -> None:
    every_batch = ACCUMULATING.replace("    if (i + 1) % 4 == 0:\n        optimizer.step()", "    optimizer.step()")
    program = read(every_batch.replace("        optimizer.zero_grad()", "    optimizer.zero_grad()"))
    assert accumulation.find(program, model.find(program)).accumulations == ()


def test_a_condition_that_calls_something_cannot_move_before_the_forward_pass(read) -> None:
    program = read(ACCUMULATING.replace("(i + 1) % 4 == 0", "should_step(i)"))
    assert accumulation.find(program, model.find(program)).accumulations == ()

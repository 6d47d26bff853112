"""ddpify.concerns.accumulation: several backward passes per optimizer step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import code

from ddpify import convert
from ddpify.concerns import accumulation, model
from ddpify.engine.program import Program

FIXTURES = Path(__file__).parents[1] / "fixtures" / "accumulation"
Reader = Callable[[str], Program]

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


def test_a_step_under_a_condition_after_the_backward_pass_is_accumulation(read: Reader) -> None:
    program = read(ACCUMULATING)
    (found,) = accumulation.find(program, model.find(program)).accumulations
    assert code(program, found.forward) == "loss = loss_fn(model(x), y) / 4"
    assert code(program, found.condition) == "(i + 1) % 4 == 0"
    assert found.models == ("model",)


def test_a_step_every_batch_is_not_accumulation(read: Reader) -> None:
    every_batch = ACCUMULATING.replace("    if (i + 1) % 4 == 0:\n        optimizer.step()", "    optimizer.step()")
    program = read(every_batch.replace("        optimizer.zero_grad()", "    optimizer.zero_grad()"))
    assert accumulation.find(program, model.find(program)).accumulations == ()


def test_a_condition_that_calls_something_cannot_move_before_the_forward_pass(read: Reader) -> None:
    program = read(ACCUMULATING.replace("(i + 1) % 4 == 0", "should_step(i)"))
    assert accumulation.find(program, model.find(program)).accumulations == ()


def _conditions(program: Program) -> list[str]:
    return [code(program, found.condition) for found in accumulation.find(program, model.find(program)).accumulations]


def test_a_step_gated_by_something_other_than_the_micro_step_is_not_accumulation(read: Reader) -> None:
    program = read(ACCUMULATING.replace("(i + 1) % 4 == 0", "not args.freeze"))
    assert _conditions(program) == []


def test_a_modulo_of_a_name_that_does_not_advance_per_micro_step_is_not_accumulation(read: Reader) -> None:
    program = read(ACCUMULATING.replace("(i + 1) % 4 == 0", "epoch % 4 == 0"))
    assert _conditions(program) == []


def test_a_flush_of_the_last_partial_window_is_kept_in_the_condition(read: Reader) -> None:
    program = read(ACCUMULATING.replace("(i + 1) % 4 == 0", "(i + 1) % 4 == 0 or i == len(loader) - 1"))
    assert _conditions(program) == ["(i + 1) % 4 == 0 or i == len(loader) - 1"]


def test_a_counter_advanced_by_the_body_and_reset_by_the_step_is_accumulation(read: Reader) -> None:
    program = read("""
        import torch
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        pending = 0
        for x, y in loader:
            pending += 1
            loss = loss_fn(model(x), y)
            loss.backward()
            if pending == 4:
                optimizer.step()
                pending = 0
        """)
    assert _conditions(program) == ["pending == 4"]


def test_a_counter_advanced_after_the_forward_pass_is_not_evaluated_earlier(read: Reader) -> None:
    program = read("""
        import torch
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            step += 1
            if step % 4 == 0:
                optimizer.step()
        """)
    assert _conditions(program) == []


def test_an_optimizer_stepped_every_micro_step_keeps_every_all_reduce(read: Reader) -> None:
    program = read("""
        import torch
        generator, discriminator = Gen(), Disc()
        opt_g = torch.optim.Adam(generator.parameters())
        opt_d = torch.optim.Adam(discriminator.parameters())
        for i, (real, _) in enumerate(loader):
            loss_d = critic_loss(discriminator(real), discriminator(generator(z).detach()))
            loss_d.backward()
            opt_d.step()
            if i % 5 == 0:
                loss_g = -discriminator(generator(z)).mean()
                loss_g.backward()
                opt_g.step()
        """)
    assert _conditions(program) == []


@pytest.mark.torchrun
@pytest.mark.parametrize(
    ("case", "args"),
    [
        ("counter_reset", []),  # the all-reduce runs only on the micro-step that steps
        ("amp_scaler", []),  # the same, with the step taken through a GradScaler
        ("optional_optimizer", ["--freeze-encoder"]),  # a step gated by a flag: every step all-reduces
    ],
)
def test_converted_case_trains_in_sync(case: str, args: list[str], tmp_path: Path) -> None:
    from ddpify.verify import verify

    converted = convert((FIXTURES / case / "input.py").read_text(), path="train.py").code
    assert isinstance(converted, str)
    script = tmp_path / "train_ddp.py"
    script.write_text(converted)

    report = verify(script, nproc=2, script_args=args, workdir=tmp_path, timeout=120)

    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"


def test_a_step_through_a_grad_scaler_is_accumulation(read: Reader) -> None:
    program = read(
        ACCUMULATING.replace("        optimizer.step()", "        scaler.step(optimizer)\n        scaler.update()")
    )
    assert _conditions(program) == ["(i + 1) % 4 == 0"]

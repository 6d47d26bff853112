"""ddpify.concerns.side_effects: output that should happen once, and the work inside it."""

from __future__ import annotations

from conftest import code, codes

from ddpify.concerns import model, side_effects

SCRIPT = """
import logging
import os
import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

log = logging.getLogger(__name__)

def evaluate(model):
    return 0.5

def main():
    os.makedirs("runs")
    writer = SummaryWriter("runs")
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in tqdm(loader):
        model(x).sum().backward()
    print("done")
    log.info("epoch done")
    writer.add_scalar("acc", 1.0)
    print(f"accuracy {evaluate(model)}")
"""


def facts_of(read, source):
    program = read(source)
    return program, side_effects.find(program, model.find(program))


def test_output_statements_are_found_by_what_they_call(read) -> None:
    program, facts = facts_of(read, SCRIPT)
    kinds = {code(program, stmt): kind for stmt, kind in facts.outputs}
    assert kinds == {
        'print("done")': "print",
        'log.info("epoch done")': "logging call",
        'writer.add_scalar("acc", 1.0)': "tracker call",
        'print(f"accuracy {evaluate(model)}")': "print",
    }


def test_work_inside_an_output_is_hoisted_to_run_on_every_rank(read) -> None:
    program, facts = facts_of(read, SCRIPT)
    assert [code(program, call) for call in facts.hoisted] == ["evaluate(model)"]


def test_trackers_progress_bars_and_folders(read) -> None:
    program, facts = facts_of(read, SCRIPT)
    assert [code(program, call) for call in facts.trackers] == ['SummaryWriter("runs")']
    assert [code(program, call) for call in facts.progress_bars] == ["tqdm(loader)"]
    assert [code(program, call) for call in facts.makedirs] == ['os.makedirs("runs")']


def test_output_whose_work_cannot_be_hoisted_stays_and_is_reported(read) -> None:
    comprehension = "print([evaluate(m) for m in (model,)])"
    program, facts = facts_of(read, SCRIPT.replace('print(f"accuracy {evaluate(model)}")', comprehension))
    assert facts.hoisted == ()
    assert comprehension not in {code(program, stmt) for stmt, _ in facts.outputs}
    assert codes(program) == ["DDP501"]


def test_a_disabled_progress_bar_is_left_alone(read) -> None:
    _, facts = facts_of(read, SCRIPT.replace("tqdm(loader)", "tqdm(loader, disable=quiet)"))
    assert facts.progress_bars == ()

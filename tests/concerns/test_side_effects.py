"""ddpify.concerns.side_effects: output that should happen once, and the work inside it."""

from __future__ import annotations

from conftest import code, codes

from ddpify.concerns import data, downloads, model, process_group, side_effects

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
    models = model.find(program)
    group = process_group.find(program, models, data.find(program))
    return program, side_effects.find(program, models, group, downloads.find(program, group))


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
    assert [c for c in codes(program) if c.startswith("DDP5")] == ["DDP501"]


def test_a_disabled_progress_bar_is_left_alone(read) -> None:
    _, facts = facts_of(read, SCRIPT.replace("tqdm(loader)", "tqdm(loader, disable=quiet)"))
    assert facts.progress_bars == ()


def test_output_before_the_process_group_exists_stays_on_every_rank(read) -> None:
    source = """
    try:
        import wandb
    except ImportError:
        print("wandb is missing")

    def announce():
        print("starting")

    announce()

    def main():
        announce()
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in loader:
            model(x).sum().backward()
        print("done")

    if __name__ == "__main__":
        main()
    """
    program, facts = facts_of(read, source)
    assert [code(program, stmt) for stmt, _ in facts.outputs] == ['print("done")']


def test_a_tracker_created_among_the_imports_is_refused(read) -> None:
    source = (
        """
try:
    import wandb
except ImportError:
    writer = SummaryWriter("runs")
"""
        + SCRIPT.replace('    writer = SummaryWriter("runs")\n', "")
        + """
if __name__ == "__main__":
    main()
"""
    )
    program, facts = facts_of(read, source)
    assert facts.trackers == ()
    assert [c for c in codes(program) if c.startswith("DDP5")] == ["DDP502"]


def test_a_tracker_created_at_module_level_moves_the_setup_there(read) -> None:
    source = (
        SCRIPT.replace('    writer = SummaryWriter("runs")\n', "")
        + """
writer = SummaryWriter("runs")

if __name__ == "__main__":
    main()
"""
    )
    program, facts = facts_of(read, source)
    assert [code(program, call) for call in facts.trackers] == ['SummaryWriter("runs")']
    assert not [c for c in codes(program) if c.startswith("DDP5")]


def test_a_file_opened_without_with_is_written_on_rank_zero_only(read) -> None:
    source = """
    import csv

    def main():
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        f = open("metrics.csv", "w")
        writer = csv.writer(f)
        for x in loader:
            model(x).sum().backward()
            writer.writerow([1])
        f.close()
    """
    program, facts = facts_of(read, source)
    assert [code(program, stmt) for stmt, _ in facts.outputs] == [
        'f = open("metrics.csv", "w")',
        "writer = csv.writer(f)",
        "writer.writerow([1])",
        "f.close()",
    ]
    assert not [c for c in codes(program) if c.startswith("DDP5")]


def test_a_file_opened_at_import_time_is_refused(read) -> None:
    source = """
    log = open("train.log", "w")

    def main():
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in loader:
            model(x).sum().backward()
        log.write("done")

    if __name__ == "__main__":
        main()
    """
    program, facts = facts_of(read, source)
    assert [code(program, stmt) for stmt, _ in facts.outputs] == ['log.write("done")']
    assert [(d.code, d.line) for d in program.diagnostics() if d.code.startswith("DDP5")] == [("DDP503", 2)]
    assert "before the process group exists" in program.diagnostics()[-1].message

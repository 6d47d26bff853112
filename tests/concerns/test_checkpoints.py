"""ddpify.concerns.checkpoints: saves, saves read back, loads of state dicts."""

from __future__ import annotations

import libcst as cst
from conftest import code, codes

from ddpify.concerns import checkpoints, downloads, loop_control

CHECKPOINTS = """
import torch

def main():
    model.load_state_dict(torch.load("init.pt"))
    state = torch.load(args.resume)
    model.load_state_dict(state["model"])
    start = state["epoch"]
    for epoch in range(10):
        train()
        torch.save(model.state_dict(), "last.pt")
        torch.save(model.state_dict(), best_path)
    model.load_state_dict(torch.load(best_path, map_location="cpu"))
"""


def test_every_save_statement_is_found(read) -> None:
    facts = checkpoints.find(read(CHECKPOINTS), downloads.Facts(()), loop_control.Facts(()))
    assert len(facts.saves) == 2


def test_a_save_whose_path_is_loaded_again_is_reloaded(read) -> None:
    program = read(CHECKPOINTS)
    (reloaded,) = checkpoints.find(program, downloads.Facts(()), loop_control.Facts(())).reloaded_saves
    assert code(program, reloaded) == "torch.save(model.state_dict(), best_path)"


def test_loads_that_only_feed_load_state_dict_get_a_map_location(read) -> None:
    program = read(CHECKPOINTS)
    facts = checkpoints.find(program, downloads.Facts(()), loop_control.Facts(()))
    assert [code(program, load) for load in facts.state_loads] == ['torch.load("init.pt")', "torch.load(args.resume)"]
    assert codes(program) == []


def test_a_whole_pickled_model_loaded_without_map_location_is_reported(read) -> None:
    program = read(
        """
        import torch
        model = torch.load("model.pt")
        """
    )
    assert checkpoints.find(program, downloads.Facts(()), loop_control.Facts(())).state_loads == ()
    assert codes(program) == ["DDP401"]


def test_a_value_saved_inside_a_container_is_found(read) -> None:
    program = read(
        """
        import torch
        torch.save({"model": model, "epoch": 1}, "a.pt")
        torch.save([model, 1], "b.pt")
        state = {"epoch": 1}
        state["model"] = model
        torch.save(state, "c.pt")
        torch.save(dict(model=model, epoch=1), "d.pt")
        alias = model
        print({"model": model})
        print(dict(model=model))
        """
    )
    index = program.index
    reads = [n for n in index.names["model"] if not isinstance(arg := index.parent(n), cst.Arg) or arg.keyword is not n]
    found = [checkpoints.saved(index, name) for name in reads]
    assert found == [True, True, True, True, False, False, False]

"""ddpify.concerns.model: which models an optimizer trains, and where each is ready to wrap."""

from __future__ import annotations

from conftest import code, codes

from ddpify.concerns import model

TRAIN = """
import torch
import torch.nn as nn

def main():
    net = nn.Linear(4, 1)
    net = net.cuda()
    net.load_state_dict(torch.load("init.pt"))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    torch.save(net.state_dict(), "net.pt")
"""


def test_the_model_is_what_the_optimizer_steps_whatever_its_name(read) -> None:
    program = read(TRAIN)
    (found,) = model.find(program).models
    assert found.expression == "net"
    assert found.on_cuda and found.placed
    # the wrap follows the checkpoint load and the optimizer, which still see the plain module
    assert code(program, found.insert_after) == "opt = torch.optim.SGD(net.parameters(), lr=0.1)"
    assert [code(program, read) for read in found.unwrap] == ["net"]  # net.state_dict() after the wrap
    assert codes(program) == []


def test_a_model_held_by_a_trainer_is_written_with_self(read) -> None:
    program = read(
        """
        import torch
        class Trainer:
            def __init__(self, model, device):
                self.model = model.to(device)
                self.optimizer = torch.optim.Adam(self.model.parameters())
            def step(self, x):
                self.model(x).sum().backward()
        """
    )
    (found,) = model.find(program).models
    assert found.expression == "self.model"
    assert not found.on_cuda


def test_data_parallel_is_where_the_model_is_ready(read) -> None:
    program = read(
        """
        import torch
        model = Net().to(device)
        if torch.cuda.device_count() > 1:
            model = torch.nn.DataParallel(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(x).sum().backward()
        """
    )
    facts = model.find(program)
    (found,) = facts.models
    assert found.data_parallel is not None and found.data_parallel_if is not None
    assert len(facts.data_parallel) == 1


def test_an_optimizer_over_something_untraceable_is_refused(read) -> None:
    program = read(
        """
        import torch
        optimizer = torch.optim.SGD(get_params(), lr=0.1)
        loss.backward()
        """
    )
    assert model.find(program).models == ()
    assert codes(program) == ["DDP301"]


def test_training_without_an_optimizer_in_the_file_is_refused(read) -> None:
    program = read(
        """
        from lib import build
        model, optimizer = build()
        model(x).sum().backward()
        """
    )
    assert model.find(program).models == ()
    assert codes(program) == ["DDP304"]


def test_a_method_that_runs_submodules_in_the_training_step_is_reported(read) -> None:
    program = read(
        """
        import torch
        class Net(torch.nn.Module):
            def embed(self, x):
                return self.encoder(x)
        model = Net().to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in loader:
            (model(x).sum() + model.embed(x).sum()).backward()
        """
    )
    model.find(program)
    assert codes(program) == ["DDP303"]

"""ddpify.concerns.tensors: which tensors are sharded, and why the others are refused."""

from __future__ import annotations

from dataclasses import replace

from conftest import code, codes

from ddpify.concerns import closures, data, model, process_group, tensors


def find(program):
    loaders, models = data.find(program), model.find(program)
    return tensors.find(program, loaders, models, process_group.find(program, models, loaders))


def refusal(program) -> str:
    """Why the training data is refused (DDP201), or else left whole on every rank (DDP211)."""
    refused = [d.message for d in program.diagnostics() if d.code == "DDP201"]
    if refused:
        return refused[0]
    ((_, reason),) = find(program).unsharded
    return reason


def script(data_lines: str, step: str = "loss = loss_fn(model(x), y)") -> str:
    return f"""
import numpy as np
import torch
import torch.nn as nn

def main():
{data_lines}
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.MSELoss()
    for epoch in range(100):
        optimizer.zero_grad()
        {step}
        loss.backward()
        optimizer.step()

if __name__ == "__main__":
    main()
"""


def test_the_model_input_and_a_target_computed_from_it_are_sharded(read) -> None:
    program = read(script("    x = torch.randn(200, 4)\n    y = x.sum(dim=1, keepdim=True)"))
    (full,) = find(program).full_batches
    assert full.names == ("x", "y") and full.length == "x"
    assert [code(program, read) for read in full.reads] == ["x", "y"]
    assert code(program, full.after) == "y = x.sum(dim=1, keepdim=True)"
    assert codes(program) == []


def test_tensors_made_with_the_same_number_of_rows_belong_together(read) -> None:
    program = read(script("    n = 500\n    x = torch.randn(n, 4)\n    y = torch.randn(n, 1)"))
    (full,) = find(program).full_batches
    assert full.names == ("x", "y")


def test_columns_of_one_array_belong_together_through_a_device_move(read) -> None:
    program = read(
        script(
            "    table = np.loadtxt('data.csv', dtype=np.float32)\n"
            "    x = torch.from_numpy(table[:, :4])\n"
            "    y = torch.from_numpy(table[:, 4:])\n"
            "    x, y = x.to('cuda'), y.to('cuda')"
        )
    )
    (full,) = find(program).full_batches
    assert full.names == ("x", "y")
    assert code(program, full.after) == "x, y = x.to('cuda'), y.to('cuda')"


def test_a_target_unrelated_to_the_input_is_refused(read) -> None:
    program = read(script("    x = torch.randn(200, 4)\n    y = torch.ones(1)"))
    assert find(program).full_batches == ()
    assert "`y` cannot be shown to hold one row per sample of `x`" in refusal(program)


def test_a_model_called_on_two_tensors_is_refused(read) -> None:
    program = read(
        script(
            "    x = torch.randn(200, 4)\n    adj = torch.eye(200)\n    y = x.sum(1)",
            "loss = loss_fn(model(x, adj), y)",
        )
    )
    assert find(program).full_batches == ()
    assert "several tensors (`adj`, `x`)" in refusal(program)


def test_samples_picked_by_index_in_the_step_are_refused(read) -> None:
    program = read(script("    x = torch.randn(200, 4)\n    y = x.sum(1)", "loss = loss_fn(model(x[:100]), y[:100])"))
    assert find(program).full_batches == ()
    assert "uses part of the samples (`x[:100]`)" in refusal(program)


def test_columns_chosen_in_the_step_keep_every_sample(read) -> None:
    program = read(script("    x = torch.randn(200, 5)\n    y = x.sum(1)", "loss = loss_fn(model(x[:, :4]), y)"))
    (full,) = find(program).full_batches
    assert [code(program, read) for read in full.reads] == ["x", "y"]


def test_an_unseeded_random_choice_of_samples_is_refused_unless_it_gets_a_generator_of_its_own(read) -> None:
    choice = "    data = torch.randn(300, 5)\n    rows = torch.randperm(300)[:200]\n    x = data[rows, :4]\n    y = data[rows, 4:]"
    seeded = read(script("    torch.manual_seed(0)\n" + choice))
    (full,) = find(seeded).full_batches
    assert full.names == ("x", "y")
    # the data concern gives the draw a seeded generator of its own: the rows are the same on every rank
    program = read(script(choice))
    (order,) = data.find(program).orders
    assert code(program, order.call) == "torch.randperm(300)"
    (full,) = find(program).full_batches
    assert full.names == ("x", "y")
    # without that (a draw the data concern does not see), the choice is refused
    program = read(script(choice))
    loaders, models = data.find(program), model.find(program)
    unseen = replace(loaders, orders=())
    found = tensors.find(program, unseen, models, process_group.find(program, models, loaders))
    assert found.full_batches == ()
    ((_, reason),) = found.unsharded
    assert "chosen at random (`torch.randperm`) before any seed is set" in reason


def test_a_parameter_holding_the_data_is_refused(read) -> None:
    program = read(
        """
        import torch
        def fit(model, x, y, optimizer):
            for step in range(10):
                optimizer.zero_grad()
                ((model(x) - y) ** 2).mean().backward()
                optimizer.step()
        model = torch.nn.Linear(4, 1)
        fit(model, torch.randn(8, 4), torch.randn(8, 1), torch.optim.SGD(model.parameters(), lr=0.1))
        """
    )
    assert find(program).full_batches == ()
    assert "`x` reaches the training step through a parameter" in refusal(program)


def test_nothing_is_found_when_a_dataloader_feeds_training(read) -> None:
    program = read(
        """
        import torch
        from torch.utils.data import DataLoader
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(8, 4)
        loader = DataLoader(x, batch_size=2)
        for xb in loader:
            model(xb).sum().backward()
        """
    )
    assert find(program).full_batches == ()
    assert codes(program) == []


def test_hand_made_batches_shard_every_read_of_the_data_in_the_loop(read) -> None:
    program = read(
        script(
            "    x = torch.randn(200, 4)\n    y = x.sum(1)",
            "for i in range(0, len(x), 32):\n"
            "            loss = loss_fn(model(x[i : i + 32]), y[i : i + 32])\n"
            "            loss.backward()",
        ).replace("        loss.backward()\n        optimizer.step()", "        optimizer.step()")
    )
    (full,) = find(program).full_batches
    assert full.batched
    assert sorted(code(program, read) for read in full.reads) == ["x", "x", "y"]


def test_a_batch_loop_not_bounded_by_the_length_of_the_data_is_refused(read) -> None:
    program = read(
        script(
            "    x = torch.randn(200, 4)\n    y = x.sum(1)\n    n_batches = 200 // 32",
            "for b in range(n_batches):\n"
            "            loss = loss_fn(model(x[b * 32 : (b + 1) * 32]), y[b * 32 : (b + 1) * 32])\n"
            "            loss.backward()",
        ).replace("        loss.backward()\n        optimizer.step()", "        optimizer.step()")
    )
    assert find(program).full_batches == ()
    assert "the batch loop runs over `range(n_batches)`" in refusal(program)


def test_samples_drawn_at_random_within_the_length_of_the_data_are_sharded(read) -> None:
    step = "idx = torch.randint(0, len(x), (32,))\n        loss = loss_fn(model(x[idx]), y[idx])"
    program = read(script("    x = torch.randn(200, 4)\n    y = x.sum(1)", step))
    (full,) = find(program).full_batches
    assert full.batched and sorted(code(program, read) for read in full.reads) == ["x", "x", "y"]
    fixed = read(script("    x = torch.randn(200, 4)\n    y = x.sum(1)", step.replace("len(x)", "200")))
    assert find(fixed).full_batches == ()
    assert "whose range is not computed from the length of the data" in refusal(fixed)


def test_a_target_of_unknown_making_is_refused(read) -> None:
    program = read(script("    x = torch.randn(200, 4)\n    y = load_targets()"))
    assert find(program).full_batches == ()
    assert "cannot tell whether `y`, which the loss reads, holds one row per sample" in refusal(program)


def test_data_drawn_in_each_step_reseeds_torch_per_rank(read) -> None:
    program = read(
        script("    torch.manual_seed(0)", "x = torch.randn(32, 4)\n        loss = loss_fn(model(x), x.sum(1))")
    )
    facts = find(program)
    (reseed,) = facts.reseeds
    assert facts.full_batches == ()
    assert reseed.seeds == ("torch.manual_seed(torch.initial_seed() + dist.get_rank())",)
    assert code(program, reseed.loop).startswith("for epoch in range(100):")


def test_a_batch_function_drawing_from_a_seeded_numpy_reseeds_numpy(read) -> None:
    program = read(
        """
        import numpy as np
        import torch
        SEED = 7
        np.random.seed(SEED)

        def batch(n):
            return torch.from_numpy(np.random.rand(n, 4).astype("float32"))

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(10):
            x = batch(16)
            model(x).pow(2).mean().backward()
            optimizer.step()
        """
    )
    (reseed,) = find(program).reseeds
    assert reseed.seeds == ("np.random.seed(SEED + dist.get_rank())",)
    assert reseed.draws == ("batch",)


def test_draws_from_an_unseeded_generator_need_no_new_seed(read) -> None:
    program = read(
        script("    pass", "x = np.random.rand(32, 4)\n        loss = loss_fn(model(torch.from_numpy(x)), 0)")
    )
    (reseed,) = find(program).reseeds
    assert reseed.seeds == ()


def test_draws_from_a_generator_of_the_script_are_refused(read) -> None:
    program = read(
        script(
            "    g = torch.Generator().manual_seed(0)",
            "x = torch.randn(32, 4, generator=g)\n        loss = loss_fn(model(x), x.sum(1))",
        )
    )
    assert find(program).reseeds == ()
    assert "draws from a generator of its own" in refusal(program)


def test_a_random_value_deciding_the_control_flow_is_refused(read) -> None:
    step = "x = torch.randn(32, 4)\n        if torch.rand(1) < 0.5:\n            continue\n        loss = loss_fn(model(x), x.sum(1))"
    program = read(script("    pass", step))
    assert find(program).reseeds == ()
    assert "a random value decides the control flow of the training step" in refusal(program)


def test_draws_on_top_of_sharded_data_are_refused(read) -> None:
    program = read(
        script(
            "    x = torch.randn(200, 4)\n    y = x.sum(1)", "loss = loss_fn(model(x + 0.1 * torch.randn_like(x)), y)"
        )
    )
    assert find(program).full_batches == () and find(program).reseeds == ()
    assert "draws `torch.randn_like` on top of data it shards" in refusal(program)


BATCHIFIED = """
import torch

def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1){transpose}.contiguous()

def main(batch_size):
    train_data = batchify(torch.randint(0, 10, (1000,)), batch_size)
    model = torch.nn.Embedding(10, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    hidden = model.init_state(batch_size)
    for i in range(0, train_data.size({length}) - 1, 5):
        x = train_data{rows}
        model(x).sum().backward()
        optimizer.step()

if __name__ == "__main__":
    main(8)
"""


def test_batchified_streams_in_columns_are_found_with_their_batch_size(read) -> None:
    program = read(BATCHIFIED.format(transpose=".t()", length=0, rows="[i : i + 5]"))
    (streams,) = find(program).streams
    assert (streams.name, code(program, streams.size), streams.dim) == ("train_data", "batch_size", 1)
    assert code(program, streams.stmt) == "train_data = batchify(torch.randint(0, 10, (1000,)), batch_size)"
    assert codes(program) == []


def test_batchified_streams_in_rows_are_found_too(read) -> None:
    program = read(BATCHIFIED.format(transpose="", length=1, rows="[:, i : i + 5]"))
    (streams,) = find(program).streams
    assert streams.dim == 0


def test_a_batch_size_computed_in_the_call_is_refused(read) -> None:
    program = read(
        BATCHIFIED.format(transpose=".t()", length=0, rows="[i : i + 5]").replace(
            "(1000,)), batch_size)", "(1000,)), batch_size * 2)"
        )
    )
    assert find(program).streams == ()
    assert "the batch size `batch_size * 2` is not a plain name or number" in refusal(program)


def test_an_input_built_from_the_data_in_a_comprehension_is_refused(read) -> None:
    step = "idx = torch.randint(0, len(x), (8,))\n        loss = loss_fn(model(torch.stack([x[j] for j in idx])), 0)"
    program = read(script("    x = torch.randn(200, 4)", step))
    assert find(program).full_batches == ()
    assert "the model's input is made from `x` in a way ddpify does not follow" in refusal(program)


CLOSURE = """
import torch

torch.manual_seed(0)
x = torch.randn(100, 4)
y = x.sum(1, keepdim=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.{optimizer}(model.parameters(), lr=0.1)

def closure():
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    return loss

for step in range(10):
    optimizer.step(closure)
"""


def test_an_lbfgs_closure_reads_the_shard_and_returns_the_loss_of_all_ranks(read) -> None:
    program = read(CLOSURE.format(optimizer="LBFGS"))
    (full,) = find(program).full_batches
    assert full.closure is not None
    assert full.closure.ret is not None and code(program, full.closure.ret) == "return loss"
    assert sorted(code(program, read) for read in full.reads) == ["x", "y"]
    # averaged over the ranks by the closures concern
    assert [code(program, value) for value in closures.find(program).returned] == ["loss"]


def test_a_closure_of_an_optimizer_that_ignores_the_loss_returns_it_as_it_is(read) -> None:
    program = read(CLOSURE.format(optimizer="SGD"))
    (full,) = find(program).full_batches
    assert full.closure is not None
    assert closures.find(program).returned == ()


def test_a_closure_that_does_not_end_by_returning_its_loss_is_refused(read) -> None:
    program = read(CLOSURE.format(optimizer="LBFGS").replace("    return loss\n", "    print(loss)\n"))
    assert find(program).full_batches == ()
    assert "does not end by returning its loss" in refusal(program)


def test_a_step_function_called_in_the_loop_reads_the_shard(read) -> None:
    program = read(CLOSURE.format(optimizer="SGD").replace("optimizer.step(closure)", "closure()"))
    (full,) = find(program).full_batches
    assert full.closure is not None and full.closure.ret is None


def test_batches_from_an_iterable_it_cannot_follow_are_named_by_it(read) -> None:
    program = read(
        """
        import torch
        from batches import stream
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step, (x, y) in enumerate(stream()):
            optimizer.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            optimizer.step()
        """
    )
    assert find(program).full_batches == ()
    assert "come from `enumerate(stream())`, which ddpify cannot follow to a DataLoader" in refusal(program)

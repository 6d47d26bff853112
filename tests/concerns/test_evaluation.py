"""ddpify.concerns.evaluation: evaluation loops whose sums and counts can be added up over the ranks."""

from __future__ import annotations

import textwrap

from conftest import code

from ddpify import Options, Status, convert
from ddpify.concerns import data, evaluation

SCRIPT = """
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
val_loader = DataLoader(val_set, batch_size=64)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def evaluate(model, loader):
    INIT
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            BODY
    return RESULT


for epoch in range(10):
    for x, y in train_loader:
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(evaluate(model, val_loader))
"""


def script(init: str, body: str, result: str) -> str:
    indent = "\n" + " " * 12
    return (
        SCRIPT.replace("INIT", init.replace("\n", "\n    "))
        .replace("BODY", body.replace("\n", indent))
        .replace("RESULT", result)
    )


def loops(read, init: str, body: str, result: str) -> list[evaluation.Loop]:
    program = read(script(init, body, result))
    facts = evaluation.find(program, data.find(program))
    return [loop for loader in facts.loaders for loop in loader.loops]


def test_correct_and_total_counted_from_zero_are_sums(read) -> None:
    (loop,) = loops(
        read,
        "correct, total = 0, 0",
        "correct += (out.argmax(1) == y).sum().item()\ntotal += y.size(0)",
        "correct / total",
    )
    assert loop.problem is None
    assert loop.sums == ("correct", "total")


def test_a_tensor_sum_and_a_sum_written_out_are_sums(read) -> None:
    (loop,) = loops(
        read,
        "loss_sum = torch.zeros(())\ncount = 0.0",
        "loss_sum += loss_fn(out, y) * len(y)\ncount = count + len(y)",
        "loss_sum / count",
    )
    assert loop.problem is None
    assert loop.sums == ("loss_sum", "count")


def test_a_sum_that_is_never_read_after_the_loop_is_not_added_up(read) -> None:
    (loop,) = loops(read, "correct, seen = 0, 0", "correct += (out.argmax(1) == y).sum()\nseen += 1", "correct")
    assert loop.sums == ("correct",)


def test_predictions_collected_in_a_list_are_refused(read) -> None:
    (loop,) = loops(read, "preds = []", "preds.append(out.argmax(1))", "torch.cat(preds)")
    assert loop.problem is not None and "`preds.append(...)`" in loop.problem


def test_a_running_average_object_is_refused(read) -> None:
    (loop,) = loops(read, "meter = AverageMeter()", "meter.update(loss_fn(out, y).item(), len(y))", "meter.avg")
    assert loop.problem is not None and "`meter.update(...)`" in loop.problem


def test_a_tensor_grown_with_torch_cat_is_refused(read) -> None:
    (loop,) = loops(read, "outs = torch.empty(0)", "outs = torch.cat([outs, out])", "outs")
    assert loop.problem is not None and "`outs`" in loop.problem


def test_the_last_batchs_value_read_after_the_loop_is_refused(read) -> None:
    (loop,) = loops(read, "total = 0", "total += len(y)\nloss = loss_fn(out, y)", "loss.item() / total")
    assert loop.problem is not None and "`loss`" in loop.problem


def test_a_sum_that_does_not_start_at_zero_is_refused(read) -> None:
    (loop,) = loops(read, "total = 1", "total += len(y)", "total")
    assert loop.problem is not None and "not set to zero" in loop.problem


def test_a_maximum_is_refused(read) -> None:
    (loop,) = loops(read, "worst = 0.0", "worst = max(worst, loss_fn(out, y).item())", "worst")
    assert loop.problem is not None and "`worst`" in loop.problem


def test_a_state_carried_from_batch_to_batch_is_refused(read) -> None:
    (loop,) = loops(
        read,
        "total = 0.0\nhidden = model.init_hidden()",
        "out, hidden = model(x, hidden)\ntotal += loss_fn(out, y).item()",
        "total",
    )
    assert loop.problem is not None and "carries `hidden`" in loop.problem


def test_names_set_anew_from_each_batch_are_not_carried(read) -> None:
    (loop,) = loops(
        read,
        "total = 0.0",
        "x, y = x.to(device), y.to(device)\nbatch = {k: v for k, v in [(0, x)]}\ntotal += len(batch)",
        "total",
    )
    assert loop.problem is None


def test_results_kept_in_a_subscript_are_refused(read) -> None:
    (loop,) = loops(read, "confusion = torch.zeros(2, 2)", "confusion[y, out.argmax(1)] += 1", "confusion")
    assert loop.problem is not None and "`confusion[y, out.argmax(1)]`" in loop.problem


def test_a_loop_without_sums_is_refused(read) -> None:
    (loop,) = loops(read, "n = 0", "print(out)", "n")
    assert loop.problem is not None and "no sum or count" in loop.problem


def test_a_progress_bar_updated_in_the_loop_is_not_a_result(read) -> None:
    (loop,) = loops(
        read,
        "total = 0\nbar = tqdm(total=100)",
        "total += len(y)\nbar.update(1)",
        "total, bar.close()",
    )
    assert loop.problem is None
    assert loop.sums == ("total",)


def test_len_of_the_loader_after_the_loop_is_found(read) -> None:
    program = read(script("loss_sum = 0.0", "loss_sum += loss_fn(out, y).item()", "loss_sum / len(loader)"))
    facts = evaluation.find(program, data.find(program))
    ((loop,),) = [loader.loops for loader in facts.loaders]
    assert [code(program, call) for call in loop.batch_counts] == ["len(loader)"]


def test_a_batch_count_taken_before_the_loop_counts_the_batches_of_all_ranks() -> None:
    source = script("loss_sum = 0.0\nbatches = len(loader)", "loss_sum += loss_fn(out, y).item()", "loss_sum / batches")
    conversion = converted(source, shard_eval=True)
    assert conversion.status is Status.CONVERTED, conversion.diagnostics
    assert "    batches = len(loader) * dist.get_world_size()\n" in str(conversion.code)


def test_a_batch_count_inside_the_loop_is_this_ranks_progress() -> None:
    source = script("total = 0", "total += len(y)\nprint(f'{total} of {len(loader)}')", "total")
    conversion = converted(source, shard_eval=True)
    assert conversion.status is Status.CONVERTED, conversion.diagnostics
    assert "{len(loader)}" in str(conversion.code)
    assert "get_world_size" not in str(conversion.code).split("def evaluate", 1)[1]


def gated(condition: str) -> str:
    source = script("total = 0", "total += len(y)", "total")
    return source.replace(
        "    print(evaluate(model, val_loader))", f"    if {condition}:\n        print(evaluate(model, val_loader))"
    )


def test_an_evaluation_run_only_when_the_training_loss_is_low_is_refused() -> None:
    conversion = converted(gated("loss.item() < 0.1"), shard_eval=True)
    assert [e.code for e in conversion.errors] == ["DDP220"]
    assert "runs only while `loss.item() < 0.1`" in conversion.errors[0].message


def test_an_evaluation_run_by_the_clock_is_refused() -> None:
    conversion = converted("import time\n" + gated("time.time() > deadline"), shard_eval=True)
    assert [e.code for e in conversion.errors] == ["DDP220"]


def test_an_evaluation_every_few_epochs_runs_on_every_rank_alike() -> None:
    conversion = converted(gated("epoch % 2 == 0"), shard_eval=True)
    assert conversion.status is Status.CONVERTED, conversion.diagnostics


def converted(source: str, **options: bool):
    return convert(textwrap.dedent(source), path="train.py", options=Options(**options))


def test_without_the_option_evaluation_is_left_whole() -> None:
    source = script("preds = []", "preds.append(out)", "preds")
    conversion = converted(source)
    assert conversion.status is Status.CONVERTED
    assert not conversion.errors
    assert "shuffle=False" not in str(conversion.code)


def test_with_the_option_the_loader_is_sharded_and_the_sums_added_up_before_they_are_read() -> None:
    source = script(
        "correct, total = 0, 0",
        "correct += (out.argmax(1) == y).sum().item()\ntotal += y.size(0)",
        "correct / total / len(loader)",
    )
    conversion = converted(source, shard_eval=True)
    assert conversion.status is Status.CONVERTED, conversion.diagnostics
    out = str(conversion.code)
    assert "val_loader = DataLoader(val_set, batch_size=64, sampler=DistributedSampler(val_set, shuffle=False))" in out
    assert (
        "            total += y.size(0)\n"
        "        correct, total = sum_over_ranks(correct, total)\n"
        "    return correct / total / (len(loader) * dist.get_world_size())\n"
    ) in out
    assert out.count("def sum_over_ranks(") == 1


def test_with_the_option_an_unrecognised_loop_refuses_the_conversion_at_its_line() -> None:
    conversion = converted(script("preds = []", "preds.append(out)", "preds"), shard_eval=True)
    assert conversion.status is Status.REFUSED
    (error,) = conversion.errors
    assert (error.code, error.line) == ("DDP220", 15)
    assert "`preds.append(...)`" in error.message


def test_a_loader_also_drawn_with_next_is_refused() -> None:
    source = script("total = 0", "total += len(y)", "total") + "probe = next(iter(val_loader))\n"
    conversion = converted(source, shard_eval=True)
    assert [e.code for e in conversion.errors] == ["DDP220"]
    assert "outside a `for` loop" in conversion.errors[0].message


def test_a_loader_with_its_own_sampler_is_refused() -> None:
    source = script("total = 0", "total += len(y)", "total").replace(
        "DataLoader(val_set, batch_size=64)", "DataLoader(val_set, batch_size=64, sampler=SequentialSampler(val_set))"
    )
    conversion = converted(source, shard_eval=True)
    assert [e.code for e in conversion.errors] == ["DDP220"]
    assert "its own sampler" in conversion.errors[0].message


def test_an_evaluation_function_also_handed_other_data_is_refused() -> None:
    source = script("total = 0", "total += len(y)", "total") + "print(evaluate(model, [(probe_x, probe_y)]))\n"
    conversion = converted(source, shard_eval=True)
    assert [e.code for e in conversion.errors] == ["DDP220"]
    assert "not a sharded DataLoader" in conversion.errors[0].message


def test_an_evaluation_of_the_training_loader_too_is_added_up() -> None:
    source = script("total = 0", "total += len(y)", "total") + "print(evaluate(model, train_loader))\n"
    conversion = converted(source, shard_eval=True)
    assert conversion.status is Status.CONVERTED, conversion.diagnostics
    assert "total = sum_over_ranks(total)" in str(conversion.code)

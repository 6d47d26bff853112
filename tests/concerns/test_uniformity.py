"""ddpify.engine.uniformity: which calls give each process its own value; which looks at the file system race."""

from __future__ import annotations

from conftest import code

from ddpify.engine.uniformity import files, steering
from ddpify.engine.uniformity.sources import SCALAR_DRAWS, Seeding, per_process

PROGRAM = """
import random
import time

import numpy as np
import torch

def seed_all(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

def trial():
    a = time.time()
    b = random.random()
    seed_all(0)
    c = random.random()
    d = np.random.permutation(10)
    e = torch.randn(3, generator=g)

def helper():
    return torch.rand(1)

def main():
    seed_all(1)
    helper()
"""


def _per_process(read, text, source=PROGRAM, draws=None):
    index = read(source).index
    seeding = Seeding(index)
    return [per_process(index, c, seeding, draws) for c in index.calls if index.module.code_for_node(c) == text]


def test_the_clock_is_each_processs_own_and_a_draw_with_its_own_generator_is_not(read) -> None:
    assert _per_process(read, "time.time()") == ["the clock"]
    assert _per_process(read, "torch.randn(3, generator=g)") == [""]


def test_a_draw_before_the_seed_is_per_process_and_one_after_it_is_not(read) -> None:
    assert _per_process(read, "random.random()") == ["an unseeded draw from random's generator", ""]


def test_a_function_whose_every_caller_has_seeded_draws_alike(read) -> None:
    program = read(PROGRAM)
    index = program.index
    (draw,) = [c for c in index.calls if index.module.code_for_node(c) == "torch.rand(1)"]
    assert per_process(index, draw, Seeding(index)) == ""
    assert per_process(index, draw, None) == "an unseeded draw from torch's generator"


def test_only_the_named_draws_count_when_given(read) -> None:
    unseeded = PROGRAM.replace("    seed_all(0)\n", "")
    assert _per_process(read, "np.random.permutation(10)", unseeded) == ["an unseeded draw from numpy's generator"]
    assert _per_process(read, "np.random.permutation(10)", unseeded, SCALAR_DRAWS) == [""]


def test_a_look_at_a_path_the_set_up_then_changes_is_raced_unless_harmless_or_rank_aware(read) -> None:
    program = read(
        """
        import os
        import shutil
        import sys

        def main(args, is_master):
            if os.path.exists(args.out):
                if not args.resume:
                    sys.exit("exists")
            else:
                os.makedirs(args.out)
            if not os.path.isdir("ckpt"):
                os.makedirs("ckpt")
            if os.path.exists(args.tb):
                shutil.rmtree(args.tb)
            if is_master and os.path.exists(args.cache):
                sys.exit("cache exists")
            os.makedirs(args.cache)
            if os.path.isfile(args.log):
                print("appending")
            train()
            os.remove(args.log)
        """
    )
    index = program.index
    assert [code(program, call) for call in files.raced_checks(index)] == ["os.path.exists(args.out)"]


def test_the_losses_an_optimizer_steers_by_vary_unless_constant_and_an_unfollowed_closure_is_told(read) -> None:
    program = read(
        """
        import functools
        import torch

        optimizer = torch.optim.LBFGS(model.parameters())
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)

        def closure():
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            if loss.isnan():
                return 0.0
            return loss

        optimizer.step(closure)
        optimizer.step(lambda: criterion(model(x), y))
        optimizer.step(functools.partial(closure))
        sgd.step(closure)
        """
    )
    index = program.index
    found = list(steering.steering_losses(index))
    assert [code(program, s.closure) for s in found] == [
        "closure",
        "lambda: criterion(model(x), y)",
        "functools.partial(closure)",
    ]
    assert [[code(program, v) for v in s.returned or ()] for s in found] == [
        ["0.0", "loss"],
        ["criterion(model(x), y)"],
        [],
    ]
    assert found[2].returned is None
    assert [steering.varies(index, v) for s in found[:2] for v in s.returned or ()] == [False, True, True]

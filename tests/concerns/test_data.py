"""ddpify.concerns.data: training loaders, their epoch loops, and what cannot be sharded."""

from __future__ import annotations

import pytest
from conftest import code, codes

from ddpify.concerns import data
from ddpify.engine.uniformity.sources import GLOBAL_SEEDS

LOADERS = """
import torch
from torch.utils.data import DataLoader

def train(model, loader, opt):
    for x, y in loader:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

def main():
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=256)
    for epoch in range(10):
        train(model, train_loader, opt)
        print(len(train_loader.dataset))
    for x, y in test_loader:
        model(x)
"""


def test_a_loader_trains_when_its_batches_reach_a_backward_pass(read) -> None:
    program = read(LOADERS)
    train_loader, test_loader = data.find(program).loaders
    assert train_loader.training and not test_loader.training
    assert codes(program) == []


def test_the_epoch_loop_is_found_through_the_call_into_the_training_function(read) -> None:
    program = read(LOADERS)
    train_loader, _ = data.find(program).loaders
    (epoch_loop,) = train_loader.epoch_loops
    assert epoch_loop.loader == "train_loader"
    assert code(program, epoch_loop.loop).startswith("for epoch in range(10):")


def test_len_of_the_dataset_of_a_training_loader_is_found(read) -> None:
    program = read(LOADERS)
    train_loader, _ = data.find(program).loaders
    assert [code(program, length) for length in train_loader.dataset_lengths] == ["train_loader.dataset"]


def test_the_keys_of_a_kwargs_dict_are_read_from_its_definition(read) -> None:
    program = read(
        """
        from torch.utils.data import DataLoader
        kwargs = {"batch_size": 8, "num_workers": 2}
        kwargs["shuffle"] = True
        loader = DataLoader(ds, **kwargs)
        for x in loader:
            model(x).backward()
        """
    )
    (loader,) = data.find(program).loaders
    assert loader.spread_keys == {"batch_size", "num_workers", "shuffle"}


def test_a_loader_with_its_own_sampler_is_refused(read) -> None:
    program = read(
        """
        from torch.utils.data import DataLoader
        loader = DataLoader(ds, batch_size=8, sampler=WeightedSampler(w))
        for x in loader:
            model(x).backward()
        """
    )
    data.find(program)
    assert codes(program) == ["DDP202"]


def test_batches_that_come_from_no_loader_are_left_to_the_tensors_concern(read) -> None:
    program = read(
        """
        import torch
        for step in range(100):
            x = torch.randn(32, 4)
            model(x).sum().backward()
        """
    )
    assert data.find(program).loaders == ()
    assert codes(program) == []


def test_a_loader_drawn_in_a_training_loop_whose_batches_never_reach_backward_is_evaluation_data(read) -> None:
    program = read(
        """
        from torch.utils.data import DataLoader
        train_loader = DataLoader(train_set, batch_size=16, shuffle=True)
        val_loader = DataLoader(val_set, batch_size=64)
        for epoch in range(3):
            for x, y in train_loader:
                loss = loss_fn(model(x), y)
                losses.append(loss)
                opt.zero_grad()
                loss.backward()
                with torch.no_grad():
                    vx, vy = next(iter(val_loader))
                    val_loss = loss_fn(model(vx), vy).item()
                writer.add_scalar("val", val_loss)
        """
    )
    train_loader, val_loader = data.find(program).loaders
    assert train_loader.training and not val_loader.training
    assert codes(program) == []


def test_a_batch_handed_to_a_training_function_is_training_data(read) -> None:
    program = read(
        """
        from torch.utils.data import DataLoader

        def step(batch):
            model(batch).sum().backward()

        loader = DataLoader(ds, batch_size=16)
        it = iter(loader)
        for i in range(100):
            batch = next(it)
            step(batch)
        """
    )
    (loader,) = data.find(program).loaders
    assert loader.training


def test_set_epoch_goes_on_the_loader_a_progress_bar_wraps(read) -> None:
    program = read(
        """
        from torch.utils.data import DataLoader
        from tqdm import tqdm
        loader = DataLoader(ds, batch_size=16, shuffle=True)
        for epoch in range(3):
            pbar = tqdm(loader)
            for x in pbar:
                model(x).sum().backward()
        """
    )
    (loader,) = data.find(program).loaders
    assert [loop.loader for loop in loader.epoch_loops] == ["loader"]


def test_a_split_before_any_global_seed_gets_the_seed_the_script_sets_later(read) -> None:
    program = read(
        """
        import torch
        from torch.utils.data import random_split
        SEED = 3
        train_set, val_set = random_split(ds, [80, 20])
        torch.manual_seed(SEED)
        """
    )
    (split,) = data.find(program).splits
    assert split.seed == "SEED"


def test_a_split_after_a_seed_that_may_not_run_is_seeded_itself(read) -> None:
    program = read(
        """
        import torch
        from torch.utils.data import random_split
        if args.seed is not None:
            torch.manual_seed(args.seed)
        train_set, val_set = random_split(ds, [80, 20])
        a, b = random_split(ds, [80, 20], torch.Generator().manual_seed(1))
        """
    )
    (split,) = data.find(program).splits
    assert split.seed == "0"


def test_a_split_after_a_global_seed_is_left_alone(read) -> None:
    program = read(
        """
        import torch
        from torch.utils.data import random_split
        torch.manual_seed(0)

        def main():
            train_set, val_set = random_split(ds, [80, 20])

        if __name__ == "__main__":
            main()
        """
    )
    assert data.find(program).splits == ()


def test_a_training_step_shaped_by_the_batch_size_needs_full_batches(read) -> None:
    program = read(
        """
        import torch
        from torch.utils.data import DataLoader

        def step(x):
            labels = torch.ones(args.batch_size, 1)
            loss_fn(model(x), labels).backward()

        loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True)
        val_loader = DataLoader(ds, batch_size=args.batch_size)
        for epoch in range(3):
            for x in loader:
                step(x)
        """
    )
    loader, val_loader = data.find(program).loaders
    assert code(program, loader.full_batches) == "torch.ones(args.batch_size, 1)"
    assert val_loader.full_batches is None


def test_shapes_read_from_the_batch_itself_need_no_full_batches(read) -> None:
    program = read(
        """
        import torch
        from torch.utils.data import DataLoader
        loader = DataLoader(ds, batch_size=batch_size, shuffle=True)
        dropping = DataLoader(ds, batch_size=batch_size, drop_last=False)
        for epoch in range(3):
            for x in loader:
                model(x.view(x.size(0), -1)).sum().backward()
            for x in dropping:
                model(x.view(batch_size, -1)).sum().backward()
        """
    )
    loader, dropping = data.find(program).loaders
    assert loader.full_batches is None and dropping.full_batches is None


CARRY = """
from torch.utils.data import DataLoader, SequentialSampler
loader = DataLoader(ds, batch_size=4{shuffle})
for epoch in range(3):
    hidden = None
    for i, (x, y) in enumerate(loader):
        {reset}
        out, hidden = model(x, hidden)
        loss_fn(out, y).backward()
"""


def test_a_state_carried_between_batches_of_an_unshuffled_loader_is_kept_in_runs_of_batches(read) -> None:
    program = read(CARRY.format(shuffle="", reset="pass"))
    (loader,) = data.find(program).loaders
    assert codes(program) == []
    assert loader.carried is not None and "`hidden` is carried" in loader.carried


def test_a_state_carried_between_batches_of_a_loader_with_its_own_sampler_is_refused(read) -> None:
    program = read(CARRY.format(shuffle=", sampler=SequentialSampler(ds)", reset="pass"))
    data.find(program)
    assert codes(program) == ["DDP210"]


def test_a_state_reset_for_every_batch_or_a_shuffled_loader_is_not_carried(read) -> None:
    for shuffle, reset in ((", shuffle=False", "hidden = None"), (", shuffle=True", "pass")):
        program = read(CARRY.format(shuffle=shuffle, reset=reset))
        data.find(program)
        assert codes(program) == []


def test_a_batch_read_as_a_global_by_a_training_function_is_training_data(read) -> None:
    program = read(
        """
        from torch.utils.data import DataLoader

        def step():
            model(batch).sum().backward()

        loader = DataLoader(ds, batch_size=16)
        for epoch in range(3):
            for batch in loader:
                step()
        """
    )
    (loader,) = data.find(program).loaders
    assert loader.training


def test_a_progress_bar_that_hides_its_loader_leaves_set_epoch_to_the_user(read) -> None:
    program = read(
        """
        from torch.utils.data import DataLoader
        from tqdm import tqdm

        def make_bar():
            loader = DataLoader(ds, batch_size=16, shuffle=True)
            return tqdm(loader)

        bar = make_bar()
        for epoch in range(3):
            for x in bar:
                model(x).sum().backward()
        """
    )
    (loader,) = data.find(program).loaders
    assert loader.training and loader.epoch_loops == ()
    assert codes(program) == ["DDP203"]


def test_the_torch_names_the_data_concern_matches_exist_in_torch() -> None:
    import importlib

    import pytest

    torch = pytest.importorskip("torch")

    def resolve(qualified: str) -> object:
        module, _, name = qualified.rpartition(".")
        return getattr(importlib.import_module(module), name)

    assert {id(resolve(name)) for name in data.RANDOM_SPLIT} == {id(torch.utils.data.random_split)}
    for name in data.SHAPE_FACTORIES | {n for n in GLOBAL_SEEDS if n.startswith("torch.")}:
        assert callable(resolve(name)), name
    for method in data.SHAPE_METHODS:
        assert hasattr(torch.Tensor, method), method


def test_an_iterator_restarted_over_a_progress_bar_reshuffles_the_loader_under_it(read) -> None:
    program = read(
        """
        from torch.utils.data import DataLoader
        from tqdm import tqdm
        loader = DataLoader(ds, batch_size=16, shuffle=True)
        bar = tqdm(loader)
        it = iter(bar)
        for step in range(1000):
            try:
                x = next(it)
            except StopIteration:
                it = iter(bar)
                x = next(it)
            model(x).sum().backward()
        """
    )
    (loader,) = data.find(program).loaders
    assert [restart.loader for restart in loader.restarts] == ["loader"]


def test_a_sampler_the_script_already_has_is_shared_out_where_it_is_built(read) -> None:
    program = read(
        """
        from torch.utils.data import DataLoader, WeightedRandomSampler
        ds = make_dataset()
        sampler = None
        if balanced:
            sampler = WeightedRandomSampler(weights, len(ds))
        loader = DataLoader(ds, batch_size=8, shuffle=(sampler is None), sampler=sampler)
        for epoch in range(3):
            for x in loader:
                model(x).backward()
        """
    )
    (loader,) = data.find(program).loaders
    own = loader.own_sampler
    assert own is not None and codes(program) == []
    assert [code(program, value) for value in own.wrapped] == ["WeightedRandomSampler(weights, len(ds))"]
    assert [code(program, placeholder) for placeholder in own.placeholders] == ["sampler = None"]
    assert own.dataset == "ds" and own.shuffle and own.attribute == "sampler"


SAMPLER_CASES = {
    "an imported sampler": (
        "from samplers import Balanced\nloader = DataLoader(ds, batch_size=8, sampler=Balanced(labels))",
        "cannot see how `Balanced` draws its samples",
    ),
    "a sampler without a length": (
        "class Endless(Sampler):\n    def __iter__(self):\n        yield 0\n"
        "loader = DataLoader(ds, batch_size=8, sampler=Endless())",
        "`Endless` has no `__len__`",
    ),
    "a sampler drawing from numpy when it is made": (
        "import numpy as np\nclass Shuffled(Sampler):\n    def __init__(self):\n"
        "        self.order = np.random.permutation(10).tolist()\n    def __iter__(self):\n"
        "        return iter(self.order)\n    def __len__(self):\n        return 10\n"
        "loader = DataLoader(ds, batch_size=8, sampler=Shuffled())",
        "`Shuffled` draws from `numpy.random` outside `__iter__`",
    ),
    "a sampler drawing from a numpy generator of its own": (
        "import numpy as np\nclass Shuffled(Sampler):\n    def __init__(self):\n"
        "        self.rng = np.random.default_rng()\n    def __iter__(self):\n"
        "        return iter(self.rng.permutation(10).tolist())\n    def __len__(self):\n        return 10\n"
        "loader = DataLoader(ds, batch_size=8, sampler=Shuffled())",
        "`Shuffled` draws from `numpy.random`, which ddpify cannot seed",
    ),
    "a sampler chosen in a loop": (
        "for sampler in (RandomSampler(ds),):\n    pass\nloader = DataLoader(ds, batch_size=8, sampler=sampler)",
        "cannot see every value `sampler` takes",
    ),
    "a placeholder set before the dataset exists": (
        "sampler = None\nds = make()\nloader = DataLoader(ds, batch_size=8, shuffle=(sampler is None), sampler=sampler)",
        "`sampler` is set to None where `ds` does not exist yet",
    ),
    "a placeholder next to a shuffle flag": (
        "sampler = None\nloader = DataLoader(ds, batch_size=8, shuffle=args.shuffle, sampler=sampler)",
        "`shuffle=args.shuffle` next to the sampler `sampler`, which may be None",
    ),
    "a batch sampler that may be None": (
        "batches = None\nloader = DataLoader(ds, batch_sampler=batches)",
        "the batch_sampler `batches` may be None",
    ),
    "indices drawn from an unseeded RNG": (
        "idx = torch.randperm(100)[:80]\nloader = DataLoader(ds, batch_size=8, sampler=SubsetRandomSampler(idx))",
        "come from `torch.randperm` (line 3), unseeded",
    ),
    "a batch sampler next to len(loader.dataset)": (
        "loader = DataLoader(ds, batch_sampler=BatchSampler(RandomSampler(ds), 8, False))\n"
        "steps = len(loader.dataset) // 8",
        "`len(loader.dataset)` is read next to a batch_sampler",
    ),
}


@pytest.mark.parametrize("case", SAMPLER_CASES)
def test_a_sampler_each_rank_could_not_draw_alike_is_refused_with_the_reason(read, case: str) -> None:
    setup, reason = SAMPLER_CASES[case]
    program = read(
        "import torch\nfrom torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler, SubsetRandomSampler\n"
        f"{setup}\n"
        "for epoch in range(3):\n"
        "    for x in loader:\n"
        "        model(x).backward()\n"
    )
    (loader,) = data.find(program).loaders
    assert loader.own_sampler is None
    (diagnostic,) = program.diagnostics()
    assert diagnostic.code == "DDP202" and reason in diagnostic.message, diagnostic.message


def test_the_sampler_wrapper_deals_out_one_draw_of_the_sampler_evenly(monkeypatch) -> None:
    """With replacement, too: positions in the draw are dealt out, so the ranks' shares are disjoint."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DistributedSampler, WeightedRandomSampler

    from ddpify.concerns import samplers

    namespace = {"torch": torch, "DistributedSampler": DistributedSampler}
    text = samplers.WRAPPER.format(wrapper="Wrapper", sampler="DistributedSampler", rngs="", seeded="", resumed="")
    exec(text, namespace)
    weighted = WeightedRandomSampler(torch.tensor([1.0, 1.0, 8.0, 1.0, 1.0]), num_samples=11)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 3)
    rng = torch.get_rng_state()

    def shares(epoch: int) -> list[list[int]]:
        found = []
        for rank in range(3):
            monkeypatch.setattr(torch.distributed, "get_rank", lambda rank=rank: rank)
            wrapper = namespace["Wrapper"](weighted)
            wrapper.set_epoch(epoch)
            found.append(list(wrapper))
            assert len(wrapper) == len(found[-1])
        return found

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        drawn = list(weighted)
    first = shares(1)
    assert [len(share) for share in first] == [4, 4, 4]  # 11 padded to 12
    dealt = [first[position % 3][position // 3] for position in range(11)]
    assert dealt == drawn
    assert shares(1) == first and shares(2) != first
    assert torch.equal(torch.get_rng_state(), rng)  # the script's own RNG stream is left as it was


def test_the_sampler_wrapper_seeds_python_and_numpy_alike_on_every_rank_and_gives_each_its_state_back(
    monkeypatch,
) -> None:
    """A sampler of the script's own drawing from Python's and NumPy's global RNGs in ``__iter__``: every rank
    draws the same sequence and takes a disjoint share; each rank's own streams go on as if nothing drew."""
    torch = pytest.importorskip("torch")
    import random
    from types import SimpleNamespace

    import libcst as cst
    import numpy as np
    from torch.utils.data import DistributedSampler

    from ddpify.concerns import samplers

    plan = SimpleNamespace(
        names=SimpleNamespace(random="random", numpy="np"),
        index=SimpleNamespace(module=cst.parse_module("import numpy as np\nimport random\n")),
    )
    seeded, resumed = samplers._seeding(plan, ["numpy", "random"])  # type: ignore[arg-type]
    text = samplers.WRAPPER.format(
        wrapper="Wrapper", sampler="DistributedSampler", rngs="", seeded=seeded, resumed=resumed
    )
    namespace = {"torch": torch, "DistributedSampler": DistributedSampler, "random": random, "np": np}
    exec(text, namespace)

    class Drawn:
        def __len__(self) -> int:
            return 12

        def __iter__(self):
            return iter([random.randrange(1000) + 1000 * int(np.random.randint(5)) for _ in range(12)])

    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 2)
    random.seed(7)
    np.random.seed(7)
    expected_random, expected_numpy = random.random(), np.random.random()
    random.seed(7)
    np.random.seed(7)
    shares = []
    for rank in range(2):
        monkeypatch.setattr(torch.distributed, "get_rank", lambda rank=rank: rank)
        wrapper = namespace["Wrapper"](Drawn())
        wrapper.set_epoch(3)
        shares.append(list(wrapper))
    assert (random.random(), np.random.random()) == (expected_random, expected_numpy)  # as if nothing drew
    random.seed(3)  # what the wrapper seeds with: the sampler's seed (0) plus the epoch
    np.random.seed(3)
    drawn = list(Drawn())
    assert [shares[p % 2][p // 2] for p in range(12)] == drawn


def test_only_the_entries_of_a_dict_of_loaders_that_the_backward_pass_is_guarded_by_train(read) -> None:
    program = read(
        """
        from torch.utils.data import DataLoader
        loaders = {x: DataLoader(sets[x], batch_size=8, shuffle=True) for x in ["train", "val", "test"]}
        for epoch in range(3):
            for phase in ["train", "val"]:
                for x, y in loaders[phase]:
                    loss = loss_fn(model(x), y)
                    if phase == "train":
                        loss.backward()
        """
    )
    (loader,) = data.find(program).loaders
    assert loader.training and codes(program) == []
    assert loader.entry is not None and [key.value for key in loader.entry.training] == ['"train"']
    assert [loop.loader for loop in loader.epoch_loops] == ['loaders["train"]']
    assert code(program, loader.epoch_loops[0].loop).startswith("for epoch in range(3):")


def test_each_loader_of_a_dict_literal_trains_only_where_its_key_is_drawn_for_training(read) -> None:
    program = read(
        """
        from torch.utils.data import DataLoader
        loaders = {"train": DataLoader(a, batch_size=8, shuffle=True), "val": DataLoader(b, batch_size=64)}
        for epoch in range(3):
            for x in loaders["train"]:
                model(x).sum().backward()
            for x in loaders["val"]:
                model(x)
        """
    )
    train, val = data.find(program).loaders
    assert train.training and not val.training
    assert [loop.loader for loop in train.epoch_loops] == ['loaders["train"]']
    assert codes(program) == []


def test_a_dict_of_loaders_whose_training_key_cannot_be_told_is_refused_once(read) -> None:
    program = read(
        """
        from torch.utils.data import DataLoader
        loaders = {x: DataLoader(sets[x], batch_size=8) for x in ["train", "val"]}
        for epoch in range(3):
            for phase in ["train", "val"]:
                for x in loaders[phase]:
                    loss = model(x).sum()
                    if training[phase]:
                        loss.backward()
        """
    )
    (loader,) = data.find(program).loaders
    assert not loader.training
    (diagnostic,) = program.diagnostics()
    assert diagnostic.code == "DDP201" and "cannot tell for which `phase`" in diagnostic.message


def test_indices_drawn_after_a_seed_are_the_same_on_every_rank(read) -> None:
    program = read(
        """
        import numpy as np
        from torch.utils.data import DataLoader, SubsetRandomSampler
        np.random.seed(0)
        indices = list(range(100))
        np.random.shuffle(indices)
        train_idx = indices[20:]
        loader = DataLoader(ds, batch_size=8, sampler=SubsetRandomSampler(train_idx))
        for epoch in range(3):
            for x in loader:
                model(x).backward()
        """
    )
    (loader,) = data.find(program).loaders
    assert loader.own_sampler is not None and codes(program) == []


SWITCHED = """
import torch
from torch.utils.data import DataLoader

def run(model, loader, {params}):
    {prelude}
    for x, y in loader:
        loss = model(x).sum()
        if {test}:
            opt.zero_grad()
            loss.backward()
            opt.step()

def main():
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=256)
    for epoch in range(10):
        run(model, train_loader, {train_args})
        run(model, test_loader, {test_args})
"""


@pytest.mark.parametrize(
    ("params", "prelude", "test", "train_args", "test_args"),
    [
        ("opt=None", "pass", "opt is not None", "opt", ""),
        ("opt=None", "training = opt is not None", "training", "opt=opt", "opt=None"),
        ("opt, train=True", "pass", "train", "opt", "opt, train=False"),
        ("opt, mode", "pass", 'mode == "train"', 'opt, "train"', 'opt, "val"'),
        ("opt, is_eval=False", "pass", "not is_eval", "opt", "opt, is_eval=True"),
    ],
)
def test_a_loader_handed_to_a_function_that_trains_only_when_asked_is_evaluated(
    read, params: str, prelude: str, test: str, train_args: str, test_args: str
) -> None:
    program = read(
        SWITCHED.format(params=params, prelude=prelude, test=test, train_args=train_args, test_args=test_args)
    )
    train_loader, test_loader = data.find(program).loaders
    assert train_loader.training and not test_loader.training


def test_a_switch_the_call_does_not_decide_keeps_both_loaders_training(read) -> None:
    program = read(
        SWITCHED.format(
            params="opt, train", prelude="pass", test="train", train_args="opt, True", test_args="opt, flag"
        )
    )
    train_loader, test_loader = data.find(program).loaders
    assert train_loader.training and test_loader.training

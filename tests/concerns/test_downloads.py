"""ddpify.concerns.downloads: which data sets take turns to download, and which are only reported."""

from __future__ import annotations

from conftest import code, codes

from ddpify.concerns import data as data_concern
from ddpify.concerns import downloads, process_group
from ddpify.concerns import model as model_concern


def find(program):
    setup = process_group.find(program, model_concern.find(program), data_concern.find(program))
    return downloads.find(program, setup)


def reported(program) -> list[str]:
    """The codes of this concern among everything the finders reported."""
    return [c for c in codes(program) if c in {code.code for code in downloads.CODES}]


TRAIN_AND_TEST = """
import torch
from torchvision import datasets

def main():
    # the data
    train_set = datasets.MNIST("data", train=True, download=True)
    test_set = datasets.MNIST("data", train=False, download=True)
    loader = torch.utils.data.DataLoader(train_set, batch_size=8)
    for x, y in loader:
        model(x).sum().backward()

if __name__ == "__main__":
    main()
"""


def test_neighbouring_downloads_take_their_turn_together(read) -> None:
    program = read(TRAIN_AND_TEST)
    (download,) = find(program).downloads
    assert code(program, download.first).endswith('train_set = datasets.MNIST("data", train=True, download=True)')
    assert code(program, download.last) == 'test_set = datasets.MNIST("data", train=False, download=True)'
    assert reported(program) == []


def test_downloads_apart_take_separate_turns(read) -> None:
    program = read(TRAIN_AND_TEST.replace("    test_set", "    print(len(train_set))\n    test_set"))
    first, second = find(program).downloads
    assert first.first is first.last and second.first is second.last
    assert "train=True" in code(program, first.first) and "train=False" in code(program, second.first)


def test_any_download_value_but_false_counts(read) -> None:
    program = read(
        TRAIN_AND_TEST.replace("train=True, download=True", "train=True, download=args.download").replace(
            "train=False, download=True", "train=False, download=False"
        )
    )
    (download,) = find(program).downloads
    assert download.first is download.last and "args.download" in code(program, download.first)


def test_a_download_before_the_process_group_exists_is_reported(read) -> None:
    program = read(
        """
        import torch
        from torchvision import datasets
        TRAIN = datasets.MNIST("data", download=True)

        def main():
            loader = torch.utils.data.DataLoader(TRAIN, batch_size=8)
            for x, y in loader:
                model(x).sum().backward()

        if __name__ == "__main__":
            main()
        """
    )
    assert find(program).downloads == ()
    assert reported(program) == ["DDP209"]


def test_a_download_in_a_compound_statement_header_is_reported(read) -> None:
    program = read(
        """
        import torch
        from torchvision import datasets
        for x, y in torch.utils.data.DataLoader(datasets.MNIST("data", download=True), batch_size=8):
            model(x).sum().backward()
        """
    )
    assert find(program).downloads == ()
    assert reported(program) == ["DDP209"]


def test_a_download_in_a_statement_that_trains_is_reported(read) -> None:
    program = read(
        """
        import torch
        from torchvision import datasets

        def fit(data):
            for x, y in torch.utils.data.DataLoader(data, batch_size=8):
                model(x).sum().backward()

        fit(datasets.MNIST("data", download=True))
        """
    )
    assert find(program).downloads == ()
    assert reported(program) == ["DDP209"]

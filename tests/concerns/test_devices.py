"""ddpify.concerns.devices: GPU numbers that reach a device argument."""

from __future__ import annotations

from conftest import code, codes

from ddpify.concerns import devices


def test_a_number_that_reaches_to_as_a_device_is_a_gpu_number(read) -> None:
    program = read(
        """
        def main():
            gpu = 0
            model = Net().to(gpu)
        """
    )
    assert [code(program, number) for number in devices.find(program).gpu_numbers] == ["0"]


def test_a_number_that_reaches_a_device_keyword_through_a_function_is_a_gpu_number(read) -> None:
    program = read(
        """
        def build(device):
            return torch.zeros(4, device=device)
        def main():
            device_id = 1
            build(device_id)
        """
    )
    assert [code(program, number) for number in devices.find(program).gpu_numbers] == ["1"]


def test_other_numbers_are_left_alone(read) -> None:
    program = read(
        """
        def main():
            epochs = 0
            seed = 0
            model = Net().to(device)
            for epoch in range(epochs):
                pass
        """
    )
    assert devices.find(program).gpu_numbers == ()


def test_gpu_indices_written_into_the_script_are_found_in_source_order(read) -> None:
    program = read(
        """
        import torch
        a = torch.device("cuda:1")
        b = torch.device(f"cuda:{args.gpu}")
        c = torch.device("cuda", args.gpu)
        d = x.cuda(args.gpu)
        e = torch.device("cuda")
        """
    )
    found = devices.find(program).gpu_indices
    assert [(code(program, g.node), g.kind) for g in found] == [
        ('"cuda:1"', "string"),
        ('f"cuda:{args.gpu}"', "f-string"),
        ('torch.device("cuda", args.gpu)', "device"),
        ("x.cuda(args.gpu)", "cuda"),
    ]


def test_the_scripts_own_gpu_choice_is_removed_and_reported(read) -> None:
    program = read(
        """
        import os
        import torch
        os.environ["CUDA_VISIBLE_DEVICES"] = "0"
        if torch.cuda.is_available():
            torch.cuda.set_device(args.gpu)
        print(torch.cuda.set_device(0))
        """
    )
    removed = devices.find(program).removed
    assert [code(program, stmt).splitlines()[0] for stmt in removed] == [
        'os.environ["CUDA_VISIBLE_DEVICES"] = "0"',
        "if torch.cuda.is_available():",
    ]
    assert codes(program) == ["DDP102", "DDP103", "DDP101"]

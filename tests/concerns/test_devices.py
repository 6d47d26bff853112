"""ddpify.concerns.devices: GPU numbers that reach a device argument."""

from __future__ import annotations

from conftest import code

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

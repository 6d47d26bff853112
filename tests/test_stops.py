"""A construct that cannot be converted, reached only under one setting: that path stops, the rest converts."""

from __future__ import annotations

from pathlib import Path

from ddpify import convert
from ddpify.result import Options, Status

FIXTURE = Path(__file__).parent / "fixtures" / "model" / "flag_path_double_backward" / "input.py"
SOURCE = FIXTURE.read_text()


def codes(conversion) -> list[str]:
    return [d.code for d in conversion.diagnostics if d.code.startswith("DDP0") or d.severity.name == "ERROR"]


def test_the_path_stops_at_its_start_and_keeps_its_code_after_the_stop() -> None:
    done = convert(SOURCE, path="train.py")
    assert done.status is Status.CONVERTED
    assert codes(done) == ["DDP015"]
    (warning,) = done.diagnostics[:1]
    assert (warning.line, warning.column) == (35, 9)  # the second backward, in the input
    code = str(done.code)
    stop = code.index("raise SystemExit(")
    assert code.index("train_twin(model, loader, optimizer)\n", stop) > stop  # kept, after the stop
    assert '"train.py line 35: a second backward pass' in code
    assert "model = DDP(model)" in code  # the path that converts is converted whole


def test_a_branch_written_on_one_line_stops_and_keeps_its_code_too() -> None:
    one_line = SOURCE.replace("        else:\n            train_twin(", "        else: train_twin(")
    assert one_line != SOURCE
    done = convert(one_line, path="train.py")
    assert done.status is Status.CONVERTED
    code = str(done.code)
    stop = code.index("        else:\n            raise SystemExit(\n")
    assert code.index("            train_twin(model, loader, optimizer)\n", stop) > stop


def test_strict_refuses_instead() -> None:
    done = convert(SOURCE, path="train.py", options=Options(strict=True))
    assert done.status is Status.REFUSED
    assert codes(done) == ["DDP312"]


def test_an_error_on_the_only_way_to_train_still_refuses() -> None:
    only = SOURCE.replace(
        '        if args.arch == "single":\n            train_single(model, loader, optimizer)\n'
        "        else:\n            train_twin(model, loader, optimizer)\n",
        "        train_twin(model, loader, optimizer)\n",
    )
    assert only != SOURCE
    done = convert(only, path="train.py")
    assert done.status is Status.REFUSED
    assert codes(done) == ["DDP312"]


def test_a_setting_whose_every_branch_fails_still_refuses() -> None:
    both = SOURCE.replace(
        "            train_single(model, loader, optimizer)\n", "            train_twin(model, loader, optimizer)\n"
    )
    done = convert(both, path="train.py")
    assert done.status is Status.REFUSED


def test_a_function_also_handed_on_as_a_value_is_not_known_to_run_only_there() -> None:
    handed = SOURCE.replace("    torch.save(", "    steps = [train_twin]\n    torch.save(")
    done = convert(handed, path="train.py")
    assert done.status is Status.REFUSED


def test_a_test_that_changes_inside_the_loop_is_no_setting() -> None:
    changing = SOURCE.replace(
        'if args.arch == "single":\n            train_single', "if epoch % 2 == 0:\n            train_single"
    )
    assert changing != SOURCE
    done = convert(changing, path="train.py")
    assert done.status is Status.REFUSED

"""The input guards: odd but valid input gets a precise answer, never an internal error.

Each case goes through ``ddpify.convert`` (and, where the exit code matters,
through ``ddpify.cli.main``): deep nesting, very long operator chains,
encodings that cannot write code back, code that CPython compiles but libcst
cannot read, and syntax that needs a newer Python than the running one.
"""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import libcst as cst
import pytest

from ddpify import Conversion, Status, convert
from ddpify.cli import main
from ddpify.guards import PLAIN_DEPTH, nesting_depth, parse_checked

TRAIN = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=8, shuffle=True)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""

TOO_DEEP = "DDP005 the code is nested too deeply for ddpify's parser"


def only(conversion: Conversion) -> str:
    """The one diagnostic of a conversion, formatted."""
    assert len(conversion.diagnostics) == 1, conversion.diagnostics
    return conversion.diagnostics[0].format()


def nested_list(depth: int) -> str:
    return "x = " + "[" * depth + "]" * depth + "\n"


def long_sum(terms: int) -> str:
    return "x = " + " + ".join(["1"] * terms) + "\n"


# ----------------------------------------------------------------------------
# Nesting and recursion depth: DDP005


def test_deeply_nested_list_literal() -> None:
    conversion = convert("import torch\n" + nested_list(140), path="deep.py")

    assert conversion.status is Status.INVALID
    assert only(conversion).startswith(f"deep.py:2:1: {TOO_DEEP} (")
    assert conversion.code == conversion.source


def test_deeply_nested_list_literal_without_torch_is_not_parsed() -> None:
    conversion = convert(nested_list(140), path="deep.py")

    assert conversion.status is Status.UNCHANGED
    assert only(conversion).startswith("deep.py:1:1: DDP011 ")


@pytest.mark.parametrize("head", ["", "import torch\n"], ids=["plain", "torch"])
def test_sum_too_long_for_the_compiler(head: str) -> None:
    conversion = convert(head + long_sum(3000), path="sum.py")

    assert conversion.status is Status.INVALID
    assert only(conversion) == f"sum.py:1:1: {TOO_DEEP} (Python's own compiler runs out of recursion depth on it)"


def test_tuples_too_deep_for_the_compiler_s_parser() -> None:
    """CPython 3.11 raises MemoryError here (a parser stack overflow); other versions a SyntaxError."""
    source = "import torch\nx = " + "(1, " * 200 + "1" + ")" * 200 + "\n"

    conversion = convert(source, path="tuples.py")

    assert conversion.status is Status.INVALID
    assert TOO_DEEP in only(conversion) or "DDP002 invalid Python 3: too many nested parentheses" in only(conversion)


def test_sum_that_compiles_but_is_too_deep_to_walk() -> None:
    conversion = convert(TRAIN + long_sum(500), path="sum.py")

    assert conversion.status is Status.INVALID
    assert only(conversion) == f"sum.py:16:1: {TOO_DEEP} (503 levels deep)"


def test_finding_the_deepest_line_prints_no_warning_about_the_user_s_code() -> None:
    source = TRAIN + 'pattern = "\\d"\n' + long_sum(500)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would surface as an internal error
        conversion = convert(source, path="sum.py")

    assert conversion.status is Status.INVALID
    assert only(conversion).startswith(f"sum.py:17:1: {TOO_DEEP} (")


def test_a_table_of_adjacent_string_literals_converts() -> None:
    """Like the standard library's ``encodings/*.py``: 256 literals, a tree deeper than PLAIN_DEPTH."""
    source = TRAIN + "TABLE = (\n" + "".join(f"    {chr(i)!r}\n" for i in range(256)) + ")\n"
    assert nesting_depth(cst.parse_module(source)) > PLAIN_DEPTH

    conversion = convert(source, path="table.py")

    assert conversion.status is Status.CONVERTED, conversion.diagnostics


# Shapes whose libcst tree grows one or more levels with each step of n.
SHAPES: dict[str, Callable[[int], str]] = {
    "list": nested_list,
    "tuple": lambda n: "x = " + "(1, " * n + "1" + ")" * n + "\n",
    "dict": lambda n: "x = " + "{1: " * n + "1" + "}" * n + "\n",
    "call": lambda n: "x = " + "f(" * n + ")" * n + "\n",
    "subscript": lambda n: "x = " + "a[" * n + "0" + "]" * n + "\n",
    "sum": long_sum,
    "power": lambda n: "x = " + " ** ".join(["2"] * n) + "\n",
    "and": lambda n: "x = " + " and ".join(["y"] * n) + "\n",
    "not": lambda n: "x = " + "not " * n + "y\n",
    "minus": lambda n: "x = " + "-" * n + "1\n",
    "attribute": lambda n: "x = a" + ".b" * n + "\n",
    "lambda": lambda n: "x = " + "lambda: " * n + "1\n",
    "strings": lambda n: "x = (" + " ".join(['"a"'] * n) + ")\n",
    "comprehension": lambda n: "x = " + "[" * n + "1" + " for _ in y]" * n + "\n",
}


def accepted(source: str) -> bool:
    return isinstance(parse_checked(source, "deep.py"), cst.Module)


def deepest_accepted(shape: Callable[[int], str]) -> int:
    """The largest n that the guards let through (TRAIN included), from this test's stack."""
    low, high = 1, 400
    assert accepted(TRAIN + shape(low)) and not accepted(TRAIN + shape(high))
    while high - low > 1:
        middle = (low + high) // 2
        if accepted(TRAIN + shape(middle)):
            low = middle
        else:
            high = middle
    return low


@pytest.mark.parametrize("name", list(SHAPES))
def test_nesting_at_the_limit_converts_and_one_more_level_is_too_deep(name: str) -> None:
    """Every later step (analysis, rewrite, code generation) copes with what the guards let through."""
    shape = SHAPES[name]
    n = deepest_accepted(shape)

    at_limit = convert(TRAIN + shape(n), path="deep.py")
    beyond = convert(TRAIN + shape(n + 1), path="deep.py")

    assert at_limit.status is Status.CONVERTED, at_limit.diagnostics
    assert beyond.status is Status.INVALID
    message = only(beyond)
    # CPython's own limit (200 nested brackets) can come first: a comprehension adds one level per bracket.
    assert TOO_DEEP in message or "DDP002 invalid Python 3: too many nested parentheses" in message, message


def test_nesting_near_the_limit_through_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shape that costs the most frames per level, with the command line's frames below it.

    Where the limit falls depends on the frames below convert(); on either side
    of it the answer is a conversion or DDP005, never an internal error.
    """
    monkeypatch.chdir(tmp_path)
    shape = SHAPES["tuple"]
    limit = deepest_accepted(shape)
    exits = {}
    for n in (limit - 10, limit - 5, limit - 2, limit - 1, limit, limit + 1):
        Path("train.py").write_text(TRAIN + shape(n))
        exits[n] = main(["train.py", "-o", "out.py", "-q"])
        err = capsys.readouterr().err
        if exits[n] == 0:
            assert err == ""
            compile(Path("out.py").read_bytes(), "out.py", "exec", dont_inherit=True)
        else:
            assert exits[n] == 2 and err.startswith(f"train.py:16:1: {TOO_DEEP} ("), (n, exits[n], err)
    assert exits[limit - 10] == 0 and exits[limit + 1] == 2, exits


@pytest.mark.parametrize(
    "source",
    [nested_list(140), long_sum(3000), long_sum(500)],
    ids=["list-140-deep", "sum-3000-terms", "sum-500-terms"],
)
def test_too_deep_exits_2_and_writes_nothing(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("deep.py").write_text("import torch\n" + source)

    code = main(["deep.py", "-o", "out.py"])

    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert len(err) == 1 and TOO_DEEP in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep.py"]


# ----------------------------------------------------------------------------
# Form feeds inside indentation: DDP006


@pytest.mark.parametrize(
    "indent",
    ["\x0c    ", "\t\x0c ", "\x0c\x0c ", "\x0c \x0c ", " \x0c\x0c  ", "\x0c\x0c\t"],
    ids=["ff-spaces", "tab-ff-space", "ff-ff-space", "ff-space-ff-space", "space-ff-ff-spaces", "ff-ff-tab"],
)
def test_form_feed_inside_indentation(indent: str) -> None:
    source = TRAIN + f"\nclass Config:\n{indent}pass\n"
    compile(source, "ff.py", "exec")

    conversion = convert(source, path="ff.py")

    assert conversion.status is Status.INVALID
    assert only(conversion).startswith("ff.py:18:1: DDP006 a form feed inside indentation")


def test_form_feed_on_a_line_of_its_own_is_fine() -> None:
    conversion = convert(TRAIN.replace("\n\nfor epoch", "\n\x0c\nfor epoch"), path="ff.py")

    assert conversion.status is Status.CONVERTED, conversion.diagnostics


# ----------------------------------------------------------------------------
# Valid Python that libcst's parser cannot read: DDP007, never "syntax error"


def test_thousands_of_adjacent_string_literals() -> None:
    source = TRAIN + "x = (" + " ".join(['"a"'] * 4000) + ")\n"
    compile(source, "strings.py", "exec")  # valid Python

    conversion = convert(source, path="strings.py")

    assert conversion.status is Status.INVALID
    message = only(conversion)
    assert message.startswith("strings.py:16:1: DDP007 valid Python that ddpify's parser (libcst) cannot read")
    assert "syntax error" not in message


def test_a_tab_then_spaces_in_one_indentation_is_named_at_its_line() -> None:
    source = TRAIN + "\n\ndef report(values):\n    for value in values:\n\t    print(value)\n"
    compile(source, "tabs.py", "exec")  # Python takes the tab to column 8

    conversion = convert(source, path="tabs.py")

    assert conversion.status is Status.INVALID
    assert only(conversion).startswith(
        "tabs.py:20:1: DDP007 indentation of a tab and spaces that Python accepts and ddpify's parser"
    )


# ----------------------------------------------------------------------------
# Encodings that decode but cannot write code back: DDP003


@pytest.mark.parametrize("encoding", ["idna", "utf-7", "unicode_escape"])
def test_encoding_that_cannot_write_code_back(encoding: str) -> None:
    source = f"# coding: {encoding}\n{TRAIN}".encode("ascii")

    conversion = convert(source, path="enc.py")

    assert conversion.status is Status.INVALID
    assert only(conversion) == (
        f"enc.py:1:1: DDP003 the file's encoding ({encoding}) cannot write Python code back unchanged; "
        "save the file as UTF-8"
    )


def test_idna_coding_cookie_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_bytes(b"# coding: idna\n" + TRAIN.encode())

    assert main(["train.py", "-o", "out.py"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "train.py:1:1: DDP003 the file's encoding (idna) cannot write Python code back unchanged; save the file as UTF-8"
    ]
    assert not Path("out.py").exists()


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252", "shift_jis", "utf-8-sig"])
def test_encoding_that_writes_code_back_converts(encoding: str) -> None:
    source = f"# coding: {encoding}\n{TRAIN}".encode(encoding)

    conversion = convert(source, path="enc.py")

    assert conversion.status is Status.CONVERTED, conversion.diagnostics


# ----------------------------------------------------------------------------
# Syntax of a newer Python: DDP002 naming the version it needs

RUNNING = "{}.{}".format(*sys.version_info[:2])

NEWER_SYNTAX = [
    ("type-alias", "type Vector = list[float]\n", (3, 12), "a `type` statement", 2, 6),
    ("type-parameters", "def first[T](xs: list[T]) -> T:\n    return xs[0]\n", (3, 12), "a type parameter list", 2, 10),
    ("nested-f-string", 'tag = f"{f"{1}"}"\n', (3, 12), "this f-string", 2, 12),
    ("type-parameter-default", "def first[T = int](xs: list[T]) -> T:\n    return xs[0]\n", (3, 13), None, 2, 0),
    ("template-string", 'tag = t"{1}"\n', (3, 14), "a template string", 2, 0),
]


@pytest.mark.parametrize(
    ("snippet", "version", "feature", "line", "column"),
    [case[1:] for case in NEWER_SYNTAX],
    ids=[case[0] for case in NEWER_SYNTAX],
)
def test_syntax_of_a_newer_python_names_the_version(
    snippet: str, version: tuple[int, int], feature: str | None, line: int, column: int
) -> None:
    conversion = convert("import torch\n" + snippet, path="new.py")

    if sys.version_info[:2] >= version:
        assert conversion.status is not Status.INVALID, conversion.diagnostics
        return
    assert conversion.status is Status.INVALID
    message = only(conversion)
    assert message.endswith(f" needs Python {version[0]}.{version[1]} or newer; this is {RUNNING}"), message
    assert "DDP002 " in message and "invalid Python 3" not in message
    if feature is not None:
        assert f"DDP002 {feature}" in message
    if column:
        assert message.startswith(f"new.py:{line}:{column}: ")


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="type statements compile from Python 3.12")
def test_type_alias_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text("type Batch = list[int]\n" + TRAIN)

    assert main(["train.py", "-o", "out.py"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"train.py:1:6: DDP002 a `type` statement needs Python 3.12 or newer; this is {RUNNING}"
    ]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("import torch\ndef f(:\n    pass\n", "invalid Python 3: invalid syntax"),
        ("import torch\nprint 'epoch'\n", "invalid Python 3: Missing parentheses in call to 'print'"),
        ('import torch\nx = f"{1 +}"\n', "invalid Python 3: f-string"),
    ],
    ids=["syntax-error", "python-2-print", "broken-f-string"],
)
def test_real_syntax_errors_keep_cpython_s_message(source: str, message: str) -> None:
    if sys.version_info >= (3, 12) and "f-string" in message:
        pytest.skip("CPython 3.12 words f-string errors differently")

    conversion = convert(source, path="bad.py")

    assert conversion.status is Status.INVALID
    assert only(conversion).split(": DDP002 ", 1)[1].startswith(message)


# ----------------------------------------------------------------------------
# A bug inside ddpify: one line to report


def test_an_internal_error_is_one_line_naming_where_ddpify_raised_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exception's message may print a whole syntax tree (``ValueError: If(...) is not in
    list``): the report keeps its start and names the line of ddpify that raised it."""
    from ddpify import concerns

    def crash(*args: object, **kwargs: object) -> None:
        raise ValueError("If(\n    test=Name(value='kind'),\n) is not in list")

    monkeypatch.setattr(concerns, "find", crash)
    conversion = convert(TRAIN, path="train.py")

    assert conversion.status is Status.INTERNAL_ERROR
    assert re.fullmatch(r"train\.py:1:1: DDP900 ValueError: If\( \.\.\. \(ddpify/core\.py:\d+\)", only(conversion))

"""ddpify.engine: the syntax helpers every concern shares, and positions as libcst counts them."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from ddpify.engine.collect import UNINDEXED, walk_tree
from ddpify.engine.positions import locate
from ddpify.engine.syntax import argument, dotted, imported_names, walk

EXAMPLES = sorted((Path(__file__).parents[1] / "examples").glob("*.py"))
FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*/*/input.py"))
# Every construct libcst has a node for, f-strings with and without format specs among them.
CONSTRUCTS = """
from . import a as b, c
from .m import *
import x.y as z
@decorator(1)
class A(B, metaclass=M):
    x: int = 1
    async def f(self, a, /, b=2, *args, c: "int", **kw) -> None:
        global g
        async with a as (b, c), d:
            async for i in j:
                yield from f"{x!r:>{width}} {y=} {z:{w}.{p}f}" f'{a}'
        try:
            pass
        except* ValueError as e:
            raise E from e
        finally:
            del a[1:2, ::3], b.c
    def g():
        nonlocal q
        return lambda *a, k=1: [x async for x in y if x] or {k: v for k, v in d} or {*s} or (yield)
match command:
    case [Point(x=0, y=0), *rest] | {"k": 1, **kw} if rest:
        print(~a @ b ** -c if not d else e, end="")
    case str() as s:
        assert s, "no"
type Alias[T: int = str, *Ts, **P] = list[T]
while (n := n - 1) > 0: continue
else: x += 1; y >>= 2
"""


def call(code: str) -> cst.Call:
    expr = cst.parse_expression(code)
    assert isinstance(expr, cst.Call)
    return expr


@pytest.mark.parametrize("example", EXAMPLES[:4], ids=[p.stem for p in EXAMPLES[:4]])
def test_positions_are_libcsts_syntactic_starts(example: Path) -> None:
    module = cst.parse_module(example.read_bytes())
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = set(walk(module))
    found = locate(module, nodes)
    assert {n: found[n] for n in nodes} == {n: (expected[n].start.line, expected[n].start.column + 1) for n in nodes}


class _Recorder(cst.CSTVisitor):
    """Every call libcst makes on a visitor, except on layout nodes and below them; some subtrees
    are not entered."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []
        self.layout = 0  # how deep inside layout nodes the walk is

    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in UNINDEXED or self.layout:
            self.layout += 1
            return True
        self.calls.append(("visit", id(node)))
        return not isinstance(node, cst.IndentedBlock) or len(node.body) != 2

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if self.layout:
            self.layout -= 1
            return
        self.calls.append(("leave", id(original_node)))


@pytest.mark.parametrize(
    "source",
    [CONSTRUCTS, *(path.read_bytes() for path in [*EXAMPLES, *FIXTURES])],
    ids=["constructs", *(str(path.parent.name) for path in [*EXAMPLES, *FIXTURES])],
)
def test_walk_tree_makes_the_calls_of_libcsts_visit_but_on_layout(source: str | bytes) -> None:
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        pytest.skip("libcst cannot parse it")
    expected, found = _Recorder(), _Recorder()
    module.visit(expected)
    walk_tree(module, found)
    assert found.calls == expected.calls


def test_argument_by_keyword_or_position() -> None:
    loader = call("DataLoader(ds, 32, shuffle=True)")
    assert dotted(argument(loader, "dataset", 0).value) == "ds"  # type: ignore[union-attr]
    assert argument(loader, "batch_size", 1) is loader.args[1]
    assert argument(loader, "shuffle", 2) is loader.args[2]
    assert argument(loader, "sampler", 3) is None
    assert argument(loader, "shuffle") is loader.args[2]


def test_a_star_argument_hides_the_positions_after_it() -> None:
    loader = call("DataLoader(ds, *rest, shuffle=True)")
    assert argument(loader, "dataset", 0) is loader.args[0]
    assert argument(loader, "batch_size", 1) is None
    assert argument(loader, "shuffle", 2) is loader.args[2]


def test_dotted_names_only_plain_attribute_chains() -> None:
    assert dotted(cst.parse_expression("torch.utils.data")) == "torch.utils.data"
    assert dotted(cst.parse_expression("f().x")) == ""
    assert dotted(cst.parse_expression("a[0].b")) == ""


@pytest.mark.parametrize(
    ("statement", "bound"),
    [
        ("import torch.nn as nn", [("nn", "torch.nn")]),
        ("import torch.nn", [("torch", "torch")]),
        (
            "from torch.utils.data import DataLoader as DL, Dataset",
            [("DL", "torch.utils.data.DataLoader"), ("Dataset", "torch.utils.data.Dataset")],
        ),
        ("from . import local", []),
        ("from torch import *", []),
    ],
)
def test_imported_names(statement: str, bound: list[tuple[str, str]]) -> None:
    line = cst.parse_statement(statement)
    assert isinstance(line, cst.SimpleStatementLine)
    node = line.body[0]
    assert isinstance(node, (cst.Import, cst.ImportFrom))
    assert list(imported_names(node)) == bound


def test_the_shape_tests_agree_with_libcst_matchers() -> None:
    import libcst.matchers as lm

    import ddpify.engine.match as dm

    def both(build):  # the same pattern in each library
        return build(dm), build(lm)

    patterns = [
        both(lambda m: m.Name("len")),
        both(lambda m: m.Call(func=m.Name("super"), args=[])),
        both(lambda m: m.Call(func=m.Attribute(attr=m.Name("to") | m.Name("cuda")))),
        both(lambda m: m.Call(func=m.Name("hasattr"), args=[m.Arg(m.Name("model")), m.Arg()])),
        both(lambda m: m.Subscript(slice=[m.SubscriptElement(m.Index(m.Integer()))])),
        both(lambda m: m.Comparison(comparisons=[m.ComparisonTarget(operator=m.Is(), comparator=m.Name("None"))])),
    ]
    source = "len\nsuper()\nsuper(A, self)\nx.to(d)\nx.cuda()\nx.cpu()\nhasattr(model, 'a')\nhasattr(model)\n"
    source += "out[0]\nout[i]\nout[0, 1]\nshuffle is None\nshuffle is not None\nlen(x)\n"
    module = cst.parse_module(source)
    nodes = [n for line in module.body for n in (line.body[0].value,)]
    checked = 0
    for ours, theirs in patterns:
        for node in nodes:
            assert dm.matches(node, ours) == lm.matches(node, theirs), module.code_for_node(node)
            checked += lm.matches(node, theirs)
    assert checked == 7  # each pattern matches something, and not everything
    assert [module.code_for_node(n) for n in dm.findall(module, dm.Name("len"))] == ["len", "len"]

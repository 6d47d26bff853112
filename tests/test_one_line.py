"""ddpify.engine.one_line: one-line bodies held as blocks that print as they were written."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ddpify import convert
from ddpify.engine.one_line import IndentedBlock, lowered
from ddpify.engine.positions import locate
from ddpify.engine.syntax import walk

ODD_LAYOUTS = """\
import os
if a: x = 1
if b :  y = 2 ;z=3;  # two statements, odd spacing, a trailing semicolon
else: os.remove(p)
for i in range(3): total += i
while n > 0: n -= 1
with open(p) as f: data = f.read(); f.close()
try: import fast
except ImportError: fast = None
finally: done = True
def f(x): return x + 1
class Empty: pass
def g():
    if deep: return 1
if __name__ == "__main__": main()
"""


def _blocks(tree: cst.CSTNode) -> list[IndentedBlock]:
    return [n for n in walk(tree) if isinstance(n, IndentedBlock)]


def test_the_analysed_tree_prints_the_source_byte_for_byte() -> None:
    tree = lowered(cst.parse_module(ODD_LAYOUTS))
    assert tree.code == ODD_LAYOUTS
    blocks = _blocks(tree)
    assert len(blocks) == 13
    assert not [n for n in walk(tree) if isinstance(n, cst.SimpleStatementSuite)]
    # one statement line per small statement
    assert [len(b.body) for b in blocks][:6] == [1, 2, 1, 1, 1, 2]
    assert all(isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 for b in blocks for line in b.body)


def test_a_module_without_one_line_bodies_is_kept_as_it_is() -> None:
    module = cst.parse_module("if a:\n    x = 1\n")
    assert lowered(module) is module


def test_positions_are_those_of_the_source() -> None:
    module = cst.parse_module(ODD_LAYOUTS)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    suites = [n for n in walk(module) if isinstance(n, cst.SimpleStatementSuite)]
    written = [(expected[s].start.line, expected[s].start.column + 1) for suite in suites for s in suite.body]
    tree = lowered(module)
    lines = [line for b in _blocks(tree) for line in b.body]
    found = locate(tree, {*lines, *(line.body[0] for line in lines)})
    # each statement line starts where its small statement stands in the source
    assert [found[line] for line in lines] == [found[line.body[0]] for line in lines] == written
    assert found[lines[1]] == (3, 9)


def test_an_edit_in_the_line_keeps_it_one_line_and_an_added_statement_indents_it() -> None:
    tree = lowered(cst.parse_module("for x in xs: x = x.cuda()  # move\n"))
    loop = tree.body[0]
    assert isinstance(loop, cst.For) and isinstance(loop.body, IndentedBlock)
    moved = cst.parse_statement("x = x.to(device)\n")
    assert tree.with_changes(body=[loop.with_changes(body=loop.body.with_changes(body=[moved]))]).code == (
        "for x in xs: x = x.to(device)  # move\n"
    )
    added = loop.body.with_changes(body=[*loop.body.body, cst.parse_statement("n += 1\n")])
    assert tree.with_changes(body=[loop.with_changes(body=added)]).code == (
        "for x in xs:  # move\n    x = x.cuda()\n    n += 1\n"
    )


ONE_LINE_SAVE = """\
import os
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4, shuffle=True)
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader: loss = nn.functional.mse_loss(model(x), y); optimizer.zero_grad(); loss.backward(); optimizer.step()
        if os.path.exists("last.pt"): os.remove("last.pt")
        if epoch % 1 == 0: torch.save(model.state_dict(), "last.pt")


if __name__ == "__main__": main()
"""


def test_statements_of_one_line_bodies_are_converted_like_their_indented_twins() -> None:
    result = convert(ONE_LINE_SAVE, path="train.py")
    assert result.status.name == "CONVERTED", [d.format() for d in result.diagnostics]
    code = result.code
    assert 'if os.path.exists("last.pt") and dist.get_rank() == 0: os.remove("last.pt")\n' in code
    assert 'if epoch % 1 == 0 and dist.get_rank() == 0: torch.save(model.module.state_dict(), "last.pt")\n' in code
    # the step on one line is kept as written: nothing in it changes
    assert "for x, y in loader: loss = nn.functional.mse_loss(model(x), y); optimizer.zero_grad();" in code
    assert 'if __name__ == "__main__":\n    setup_distributed()\n    try:\n        main()\n' in code
    compile(code, "train_ddp.py", "exec")

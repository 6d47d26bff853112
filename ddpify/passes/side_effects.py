"""Side effects: output happens once, on global rank 0.

Statements whose only effect is output -- ``print``, ``logging`` calls,
``plt.savefig`` / ``save_image``, ``with open(path, "w")`` blocks, calls on a
TensorBoard ``SummaryWriter`` or on ``wandb`` -- run on rank 0 only. A
consecutive run of them shares one ``if``, and an ``if`` that holds nothing
else takes the rank test into its condition::

    if batch_idx % log_interval == 0:           if batch_idx % log_interval == 0 and dist.get_rank() == 0:
        print(f"loss {loss.item():.4f}")   ->       print(f"loss {loss.item():.4f}")

Trackers are created on rank 0 only (``None`` elsewhere) so that no other rank
opens a run or a log folder; progress bars are kept on every rank but disabled
outside rank 0 (``tqdm(..., disable=dist.get_rank() != 0)``), so the loop is
untouched; ``os.makedirs`` / ``os.mkdir`` become ``os.makedirs(..., exist_ok=True)`` so
that ranks creating the same folder do not race.

Work inside an output statement -- ``print(f"acc {evaluate(model)}")`` --
must still run on every rank (it may hold collectives, such as DDP's forward),
so it is computed into a variable first and only the output is gated::

    print(f"acc {evaluate(model)}")   ->   evaluate_result = evaluate(model)
                                           if dist.get_rank() == 0:
                                               print(f"acc {evaluate_result}")

Where that cannot be done (the work is inside a lambda or comprehension, or
on a line with other statements), the statement stays on every rank and is
reported.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ddpify.analysis import Anatomy
from ddpify.edits import EditPlan, fresh, with_comma
from ddpify.result import Options


def run(anatomy: Anatomy, plan: EditPlan, options: Options) -> None:
    index = anatomy.index
    dist = anatomy.names.dist
    gated = {stmt for stmt, _ in anatomy.outputs}
    counts: dict[str, int] = {}
    for stmt, kind in anatomy.outputs:
        if any(ancestor in gated for ancestor in index.ancestors(stmt)):
            continue
        plan.on_rank_zero(stmt)
        counts[kind] = counts.get(kind, 0) + 1
        if counts[kind] == 1:
            plan.change(stmt, f"{kind} on global rank 0 only")
    taken: set[str] = set()
    for call in anatomy.hoisted:
        stmt = index.statement_of(call)
        name = fresh(f"{_callee_name(call)}_result", index.identifiers | taken)
        taken.add(name)
        hoisted = cst.parse_statement(f"{name} = {index.module.code_for_node(call)}\n")
        plan.insert_before(stmt, hoisted.with_changes(leading_lines=stmt.leading_lines))
        plan.replace(stmt, lambda n: n.with_changes(leading_lines=()))
        plan.replace(call, lambda n, name=name: cst.Name(name))
        plan.change(call, f"compute `{name}` on every rank, output it on rank 0")
    for call in anatomy.trackers:
        plan.replace(call, lambda n: cst.IfExp(test=plan.rank_zero, body=n, orelse=cst.Name("None")))
        plan.change(call, f"{index.module.code_for_node(call.func)} created on global rank 0 only (None elsewhere)")
    for call in anatomy.progress_bars:
        disable = cst.Arg(
            keyword=cst.Name("disable"),
            value=cst.parse_expression(f"{dist}.get_rank() != 0"),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        plan.replace(call, lambda n, a=disable: n.with_changes(args=[*with_comma(n.args), a]))
        plan.change(call, "progress bar shown on global rank 0 only")
    for call in anatomy.makedirs:
        if m.matches(call.func, m.Attribute(attr=m.Name("mkdir"))):
            plan.replace(call, lambda n: n.with_changes(func=n.func.with_changes(attr=cst.Name("makedirs"))))
        exist_ok = cst.Arg(
            keyword=cst.Name("exist_ok"),
            value=cst.Name("True"),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        plan.replace(call, lambda n, a=exist_ok: n.with_changes(args=[*with_comma(n.args), a]))
        plan.change(call, "os.makedirs(..., exist_ok=True): ranks creating the same folder do not race")


def _callee_name(call: cst.Call) -> str:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else "value"

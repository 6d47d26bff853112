"""Whole tensors each rank reads a shard of: full-batch steps, hand-made mini-batches, optimizer closures.

The finder decides which reads take the shard and where the shard is defined; the rewrite defines it
(``shard = slice(rank, len(x) - len(x) % world_size, world_size)``) and indexes the reads with it. (The
loss an LBFGS closure returns is averaged over the ranks by the ``closures`` concern.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify.concerns.tensors.lineage import Refused, _binds, _code, _Lineage
from ddpify.concerns.tensors.samples import RANDOM_CHOICES, _SampleFinder
from ddpify.engine.edits import EditPlan, fresh, statement
from ddpify.engine.index import Index, Ref, Scope
from ddpify.engine.syntax import assigned, straight_line


@dataclass(frozen=True)
class Closure:
    """The function that runs the training step: ``def closure(): ...; return loss`` handed to
    ``optimizer.step(closure)``, or ``def train(): ...`` called in the training loop."""

    function: cst.FunctionDef
    ret: cst.SimpleStatementLine | None  # ``return loss``, its last statement (a closure for optimizer.step)


@dataclass(frozen=True)
class FullBatch:
    """Whole tensors the training step reads every step: each rank reads its shard instead."""

    reads: tuple[cst.Name, ...]  # the reads in the training step that become ``x[shard]``
    after: cst.BaseStatement  # the shard is defined right after this statement (the tensors exist then)
    length: str  # the tensor whose number of rows is the number of samples
    names: tuple[str, ...]  # the tensors, for the report
    batched: bool = False  # the script makes mini-batches of them itself (every read in the loop is sharded)
    closure: Closure | None = None  # the reads are in an optimizer closure


class _ShardFinder(_SampleFinder):
    """Whole tensors read in the training step: which reads take each rank's shard, and where it is defined."""

    def _full_batch(
        self,
        lineage: _Lineage,
        tensors: dict[Ref, list[cst.Name]],
        first: Ref | None,
        choices: list[cst.Call],
        closure: Closure | None,
        step: cst.For | cst.While | cst.FunctionDef,
        runs: cst.For | cst.While | cst.FunctionDef,
    ) -> FullBatch | None:
        """The tensors the training step reads whole, or the batches it cuts of them itself: their shard."""
        index = self.index
        if first is None and tensors:
            names = ", ".join(f"`{ref.path}`" for ref in tensors)
            raise Refused(
                next(iter(tensors.values()))[0],
                f"the model's input is made from {names} in a way ddpify does not follow",
            )
        if first is None and lineage.step_variables:
            name = lineage.step_variables[0]
            loop = next((a for a in index.ancestors(name) if isinstance(a, cst.For)), None)
            if loop is not None and not m.matches(loop.iter, m.Call(func=m.Name("range"))):
                raise Refused(
                    name,
                    f"the batches `{name.value}` come from `{_code(index, loop.iter)}`, which ddpify cannot "
                    "follow to a DataLoader",
                )
            raise Refused(
                name,
                f"the training step makes its data from the loop variable `{name.value}` alone, the same on every rank",
            )
        if first is None:
            return None
        batched = bool(lineage.step_variables or choices)
        if batched and closure is not None:
            raise Refused(step, "the function of the training step picks part of the samples in each call")
        if batched:
            self._check_batches(lineage, choices, cast(cst.For | cst.While, step), set(tensors))
        else:
            for subscript in lineage.subscripts:
                if not _whole_rows(subscript):
                    raise Refused(
                        subscript, f"the training step uses part of the samples (`{_code(index, subscript)}`)"
                    )
        assignments = [a for ref in tensors for a in self._assignments(ref)]
        last = max(assignments, key=lambda a: index.order[a])
        after = self._statement_beside(last, runs, first.scope)
        if not index.after(runs, after):
            raise Refused(runs, f"`{first.path}` is changed after the training loop starts")
        if self.setup.runs_before_setup(index, after):
            raise Refused(after, "the tensors are made before the process group is set up (at import time)")
        made = sorted(tensors, key=lambda ref: min(index.order[a] for a in self._assignments(ref)))
        if batched:  # every read in the loop, so that the batch loop's bounds follow the shard too
            reads = [
                node
                for node in index.walk(step)
                if isinstance(node, cst.Name)
                and index.names_a_variable(node)
                and index.ref_of(node, index.scope_of(node)) in tensors
                and not self._shuffled_whole(node)
            ]
        else:
            reads = [read for ref in made for read in tensors[ref]]
            reads += self._beside_shard_results(runs, reads, set(tensors))
        return FullBatch(tuple(reads), after, first.path, tuple(ref.path for ref in made), batched, closure)

    def _beside_shard_results(self, loop: cst.CSTNode, reads: list[cst.Name], tensors: set[Ref]) -> list[cst.Name]:
        """Reads of the whole tensors next to a result computed from the shard in the same statement
        (``plt.plot(x.numpy(), prediction.numpy())`` after ``prediction = net(x[shard])``), in the
        loop or after it in the same function, and in the assignments of values read there that are
        made from the whole tensors (``target_y = y.numpy()`` for ``pred_y == target_y``): they take
        the shard too, so that the two have as many rows. Reads elsewhere stay whole."""
        index = self.index
        scope = index.scope_of(loop)
        assignments = [n for n in index.walk(scope) if isinstance(n, cst.Assign) and index.scope_of(n) is scope]
        sharded = set(reads)
        results = self._made_from(assignments, lambda n: n in sharded, tensors)
        whole = self._made_from(assignments, lambda n: index.ref_of(n, scope) in tensors and n not in sharded, tensors)
        found: list[cst.Name] = []

        def shard_in(node: cst.CSTNode) -> None:
            for n in index.walk(node):
                if (
                    isinstance(n, cst.Name)
                    and index.names_a_variable(n)
                    and n not in sharded
                    and n not in found
                    and index.ref_of(n, index.scope_of(n)) in tensors
                ):
                    found.append(n)

        for stmt in index.statements:
            if index.scope_of(stmt) is not scope or not (index.inside(stmt, loop) or index.after(stmt, loop)):
                continue
            names = [n for n in index.walk(stmt) if isinstance(n, cst.Name) and index.names_a_variable(n)]
            if not any(index.ref_of(n, scope) in results for n in names):
                continue
            shard_in(stmt)
            for name in names:  # ``target_y`` in ``pred_y == target_y``: where it is made from the whole tensors
                if (ref := index.ref_of(name, scope)) in whole - results:
                    for assignment in assignments:
                        if index.inside(assignment, loop) and any(
                            index.ref_of(t, scope) == ref
                            for target in assignment.targets
                            for t in assigned(target.target)
                            if isinstance(t, cst.Name)
                        ):
                            shard_in(assignment.value)
        return found

    def _made_from(
        self, assignments: list[cst.Assign], source: Callable[[cst.Name], bool], tensors: set[Ref]
    ) -> set[Ref]:
        """The places assigned, directly or through one another, from names for which ``source`` holds."""
        index = self.index
        made: set[Ref] = set()
        grown = True
        while grown:
            grown = False
            for assignment in assignments:
                if not any(
                    isinstance(n, cst.Name) and (source(n) or index.ref_of(n, index.scope_of(n)) in made)
                    for n in index.walk(assignment.value)
                ):
                    continue
                for target in assignment.targets:
                    for name in assigned(target.target):
                        if isinstance(name, cst.StarredElement):
                            name = name.value
                        ref = index.ref_of(name, index.scope_of(name))
                        if ref is not None and ref not in made and ref not in tensors:
                            made.add(ref)
                            grown = True
        return made

    def _closure(self, backward: cst.Call, scope: Scope) -> tuple[Closure, cst.For | cst.While]:
        """The optimizer closure that runs ``backward`` (``optimizer.step(closure)`` in a loop), and that loop."""
        index = self.index
        unfollowed = Refused(
            backward,
            "the backward pass runs in a function of its own (a training step called in the loop), whose data "
            "ddpify does not follow",
        )
        if not isinstance(scope, cst.FunctionDef):
            raise unfollowed
        name = Ref(index.scope_of(scope), scope.name.value)
        uses = [
            n
            for n in index.names.get(name.path, [])
            if n is not scope.name and index.names_a_variable(n) and index.ref_of(n, index.scope_of(n)) == name
        ]
        steps: list[cst.Call] = []  # optimizer.step(closure)
        calls: list[cst.Call] = []  # train_step(): a step of its own
        for use in uses:
            arg, call = index.parent(use), index.parent(index.parent(use))
            if isinstance(arg, cst.Call) and arg.func is use:
                calls.append(arg)
            elif (
                isinstance(arg, cst.Arg)
                and isinstance(call, cst.Call)
                and isinstance(call.func, cst.Attribute)
                and call.func.attr.value == "step"
            ):
                steps.append(call)
            else:
                raise unfollowed
        loops = [list(index.enclosing_loops(call)) for call in (*steps, *calls)]
        if not loops or not all(loops) or (steps and calls):
            raise unfollowed
        if calls:
            return Closure(scope, None), loops[0][-1]
        returns = [n for n in index.walk(scope.body) if isinstance(n, cst.Return) and index.scope_of(n) is scope]
        last = next(reversed(straight_line(scope.body)), None)
        if (
            len(returns) != 1
            or returns[0].value is None
            or not isinstance(last, cst.SimpleStatementLine)
            or last.body[0] is not returns[0]
        ):
            raise Refused(scope, "the optimizer closure does not end by returning its loss")
        return Closure(scope, last), loops[0][-1]

    def _check_batches(
        self, lineage: _Lineage, choices: list[cst.Call], step: cst.For | cst.While, data: set[Ref]
    ) -> None:
        """Hand-made batches: each rank may batch its shard as the script batches the whole data, as long as
        the number of batches and the random choices follow the data's length (so they follow the shard's)."""
        index = self.index
        variables = [name for name in lineage.step_variables if not _bound_in_comprehension(self.index, name)]
        for loop in {self._binding_loop(name, step) for name in variables}:
            if loop is None or not self._sized_by_data(loop.iter, step, data):
                header = _code(index, loop.iter) if loop is not None else "?"
                raise Refused(
                    loop or step,
                    f"the batch loop runs over `{header}`, which is not computed from the length of the data "
                    "it slices, so it would not follow each rank's shard",
                )
        for call in choices:
            if not any(self._sized_by_data(arg.value, step, data) for arg in call.args if arg.keyword is None):
                raise Refused(
                    call,
                    f"the samples are chosen with `{_code(index, call)}`, whose range is not computed from the "
                    "length of the data, so it would not follow each rank's shard",
                )
        for subscript in lineage.subscripts:
            if not _whole_rows(subscript) and not self._picks_batch(subscript, step):
                raise Refused(subscript, f"the training step uses part of the samples (`{_code(index, subscript)}`)")

    def _shuffled_whole(self, read: cst.Name) -> bool:
        """``random.shuffle(examples)``: the whole list is shuffled in place, alike on every rank (its generator
        seeded alike, or this refuses), and each rank then reads its share of it."""
        index = self.index
        arg = index.parent(read)
        call = index.parent(arg)
        if not (isinstance(arg, cst.Arg) and isinstance(call, cst.Call) and call.args[0] is arg):
            return False
        names = index.qualified_names(call.func)
        if not names & IN_PLACE_SHUFFLES:
            return False
        family = "numpy" if any(n.startswith("numpy.") for n in names) else "random"
        if not self.seeding.seeded_before(call, family):
            raise Refused(
                call,
                f"the samples are shuffled in place (`{_code(index, call.func)}`) by a generator no seed reaches "
                "first: each rank would shuffle differently, and their shares would overlap",
            )
        return True

    def _binding_loop(self, name: cst.Name, step: cst.For | cst.While) -> cst.For | None:
        """The loop of the training step whose target ``name`` reads."""
        index = self.index
        ref = index.ref_of(name, index.scope_of(name))
        for node in (step, *index.walk(step)):
            if isinstance(node, cst.For) and ref is not None and _binds(node.target, ref):
                return node
        return None

    def _sized_by_data(self, expr: cst.CSTNode, step: cst.For | cst.While, data: set[Ref]) -> bool:
        """Whether ``expr`` is computed from a data tensor (``len(x)``, ``x.size(0)``, ``len(perm)``)."""
        index = self.index
        return self._depends(
            expr,
            step,
            lambda node: isinstance(node, cst.Name) and index.ref_of(node, index.scope_of(node)) in data,
        )

    def _picks_batch(self, subscript: cst.Subscript, step: cst.For | cst.While) -> bool:
        """Whether the rows ``subscript`` picks change from step to step: ``x[i:i + bs]``, ``x[perm[i:j]]``."""
        index = self.index
        loops = {n for n in (step, *index.walk(step)) if isinstance(n, cst.For)}

        def varies(node: cst.CSTNode) -> bool:
            if isinstance(node, cst.Call) and index.qualified_names(node.func) & RANDOM_CHOICES:
                return True
            if isinstance(node, cst.Name) and index.names_a_variable(node):
                ref = index.ref_of(node, index.scope_of(node))
                return ref is not None and any(_binds(loop.target, ref) for loop in loops)
            return False

        return any(self._depends(element.slice, step, varies) for element in subscript.slice[:1])

    def _statement_beside(self, node: cst.CSTNode, other: cst.CSTNode, scope: Scope) -> cst.BaseStatement:
        """The statement that holds ``node`` in the innermost block of ``scope`` that also holds ``other``:
        in ``scope``'s body, or in the block of ``if __name__ == "__main__":`` that holds both."""
        index = self.index
        current = index.statement_of(node)
        while True:
            parent = index.parent(current)
            if parent is None or parent is scope or index.parent(parent) is scope or index.inside(other, parent):
                return current
            current = index.statement_of(parent)


IN_PLACE_SHUFFLES = frozenset({"random.shuffle", "numpy.random.shuffle"})


def _bound_in_comprehension(index: Index, name: cst.Name) -> bool:
    """``features`` in ``[features for features, _ in batch]``: an item of what the comprehension runs over."""
    for ancestor in index.ancestors(name):
        if isinstance(ancestor, cst.BaseComp):
            comp: cst.CompFor | None = ancestor.for_in
            while comp is not None:
                if any(isinstance(n, cst.Name) and n.value == name.value for n in index.walk(comp.target)):
                    return True
                comp = comp.inner_for_in
    return False


def _whole_rows(subscript: cst.Subscript) -> bool:
    """``x[:, :3]``, ``out[..., 0]``: every row kept (only columns chosen); ``x.shape[0]`` picks no rows."""
    value = subscript.value
    if (isinstance(value, cst.Attribute) and value.attr.value == "shape") or (
        isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "size"
    ):
        return True
    first = subscript.slice[0].slice if subscript.slice else None
    if isinstance(first, cst.Slice):
        return first.lower is None and first.upper is None and first.step is None
    return isinstance(first, cst.Index) and isinstance(first.value, cst.Ellipsis)


def _indexed(index: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A replacement of ``x`` by ``x[index]``."""
    return lambda node: cst.Subscript(
        value=cast(cst.BaseExpression, node), slice=[cst.SubscriptElement(cst.Index(cst.Name(index)))]
    )


def rewrite_full_batch(full: FullBatch, plan: EditPlan) -> None:
    """Define the shard after the tensors are made, and read it where the step reads them."""
    shard = fresh("shard", plan.index.identifiers)
    world = plan.world_size(full.after)
    line = cst.parse_statement(
        f"{shard} = slice({plan.rank(full.after)}, len({full.length}) - len({full.length}) % {world}, {world})\n"
    )
    if full.batched:
        comment = "# This rank's equal share of the samples, batched as before: as many steps on every rank."
    else:
        comment = (
            "# This rank's equal share of the samples: DDP averages the shards' gradients into the full-batch one."
        )
    line = statement(line).with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(comment))])
    plan.insert_after(full.after, line)
    for read in full.reads:
        plan.replace(read, _indexed(shard))
    names = ", ".join(f"`{name}`" for name in full.names)
    equal = f"equal shards, the last len({full.length}) % world_size samples left out"
    if full.batched:
        summary = (
            f"hand-made batches of {names}: each rank batches its own every world_size-th sample ({equal}) "
            "with the script's batch size, so the global batch is world_size times larger (and a pass over "
            "the data takes 1/world_size of the steps)"
        )
    else:
        summary = (
            f"full-batch training on {names}: each rank trains on every world_size-th sample ({equal}); with "
            "a mean loss DDP's averaged gradient is the full-batch one, with a summed loss it is 1/world_size of it"
        )
    plan.change(full.after, summary)

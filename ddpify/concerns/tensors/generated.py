"""Batches made by a generator of the program's own from a sequence of examples: each rank hands it its share.

``for sentences, tags in batch_iter(train_data, batch_size):``, where ``batch_iter`` is a generator of
the program that reads its parameter only as a sequence (``len(data)``, ``data[i]``) and yields the
batches, gets this rank's every ``world_size``-th example, the last ``len(train_data) % world_size``
left out so that every rank takes as many steps::

    for epoch in range(epochs):                  shard = slice(dist.get_rank(), len(train_data) - ..., world)
        for x, y in batch_iter(train_data, 32):  for epoch in range(epochs):
                                           ->        for x, y in batch_iter(train_data[shard], 32):

What the generator does with its share (shuffle it, sort a batch by length, pad it) stays as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

import ddpify.engine.match as m
from ddpify.engine.edits import EditPlan, fresh, statement
from ddpify.engine.index import Index
from ddpify.engine.syntax import assigned, parameter_names


@dataclass(frozen=True)
class GeneratedBatches:
    """``for batch in make_batches(examples, ...)``: ``examples`` is what each rank takes its share of."""

    loop: cst.For  # the loop over the generator's batches
    outer: cst.For | cst.While  # the outermost training loop around it, before which the share is made
    examples: cst.Name  # the sequence handed to the generator
    generator: str


class _GeneratedFinder:
    index: Index

    def _generated(self, loops: list[cst.For | cst.While]) -> GeneratedBatches | None:
        """The loop of the training step over a generator of the program's own that takes a sequence."""
        index = self.index
        for loop in loops:
            if not (isinstance(loop, cst.For) and isinstance(loop.iter, cst.Call)):
                continue
            scope = index.scope_of(loop)
            resolved = index.resolve_callee(loop.iter, scope)
            if resolved is None:
                continue
            function, implicit = resolved
            if not index.is_generator(function):
                continue
            names = parameter_names(function)[implicit:]
            for position, arg in enumerate(loop.iter.args):
                if arg.star or not isinstance(arg.value, cst.Name):
                    continue
                if arg.keyword is not None:
                    name = arg.keyword.value
                else:
                    name = names[position] if position < len(names) else ""
                if name and self._read_as_a_sequence(function, name) and self._made_before(arg.value, loops[-1]):
                    return GeneratedBatches(loop, loops[-1], arg.value, function.name.value)
        return None

    def _read_as_a_sequence(self, function: cst.FunctionDef, name: str) -> bool:
        """``name`` is only measured (``len(data)``) and indexed (``data[i]``) in ``function``, never bound."""
        index = self.index
        reads = [n for n in index.walk(function.body) if isinstance(n, cst.Name) and n.value == name]
        measured = indexed = False
        for read in reads:
            if any(
                isinstance(a, (cst.FunctionDef, cst.Lambda)) and a is not function for a in index.ancestors(read)
            ) or not index.inside(read, function):
                return False  # another function's own ``data``
            parent = index.parent(read)
            if isinstance(parent, cst.Subscript) and parent.value is read:
                indexed = True
            elif (
                isinstance(parent, cst.Arg)
                and isinstance(call := index.parent(parent), cst.Call)
                and m.matches(call.func, m.Name("len"))
            ):
                measured = True
            else:
                return False
        return measured and indexed

    def _made_before(self, examples: cst.Name, outer: cst.For | cst.While) -> bool:
        """Every assignment of the sequence comes before the training loops, in their scope."""
        index = self.index
        ref = index.carried_ref(examples, index.scope_of(examples))
        if ref is None or ref.scope is not index.scope_of(outer):
            return False
        scope = index.scope_of(outer)
        bindings = [
            target
            for node in index.walk(scope)
            if isinstance(node, cst.Assign) and index.scope_of(node) is scope
            for each in node.targets
            for target in assigned(each.target)
            if isinstance(target, cst.Name) and target.value == examples.value
        ]
        return bool(bindings) and all(index.after(outer, b) for b in bindings)


def rewrite_generated(found: GeneratedBatches, plan: EditPlan) -> None:
    """Make this rank's share before the training loops and hand it to the generator."""
    shard = fresh("shard", plan.index.identifiers)
    examples = found.examples.value
    world = plan.world_size(found.outer)
    line = cst.parse_statement(
        f"{shard} = slice({plan.rank(found.outer)}, len({examples}) - len({examples}) % {world}, {world})\n"
    )
    comment = "# This rank's equal share of the examples: as many batches, and steps, on every rank."
    plan.insert_before(
        found.outer, statement(line).with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(comment))])
    )
    plan.replace(
        found.examples,
        lambda n: cst.Subscript(
            value=n,  # type: ignore[arg-type]
            slice=[cst.SubscriptElement(cst.Index(cst.Name(shard)))],
        ),
    )
    plan.change(
        found.loop,
        f"batches made by `{found.generator}` from `{examples}`: each rank hands it its own every "
        f"world_size-th example (equal shares, the last len({examples}) % world_size left out), so every rank "
        "takes as many steps and the global batch is world_size times larger",
    )

"""Where a DataLoader's batches are drawn, whether they reach a backward pass, and where its dataset's length is read.

The finder (:mod:`.finder`) asks these questions of the places (``Ref``)
that hold a loader, found by the index's value flow.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify.engine.index import Index, Ref, Scope
from ddpify.engine.program import without_grad
from ddpify.engine.syntax import assigned, straight_line

_COUNTS = m.Name("len") | m.Name("range")
# Methods that show what they are given: loggers', progress bars', ``sys.stdout``'s
_REPORTING = frozenset(
    {"debug", "info", "warning", "error", "write", "set_description", "set_postfix", "set_postfix_str"}
)


_ENABLE_GRAD = frozenset({"torch.enable_grad", "torch.set_grad_enabled", "torch.autograd.enable_grad"})


class Reads:
    def __init__(self, index: Index) -> None:
        self.index = index
        self._sites: list[tuple[cst.CSTNode, tuple[Ref, ...]]] | None = None
        self._known: dict[tuple[cst.CSTNode, Scope, int], tuple[Ref, ...]] = {}
        self._following: set[Ref] = set()  # the names whose iterators are being followed back

    def iterations(self, refs: set[Ref]) -> list[tuple[cst.CSTNode, Ref]]:
        """Where batches are drawn from the loader: ``for ... in loader`` loops and ``next(it)`` calls."""
        if self._sites is None:
            self._sites = list(self._draw_sites())
        sites: list[tuple[cst.CSTNode, Ref]] = []
        for node, candidates in self._sites:
            found = next((ref for ref in candidates if ref in refs), None)
            if found is not None and not self._bound_to_another(node, found, refs):
                sites.append((node, found))
        return sites

    def _bound_to_another(self, site: cst.CSTNode, ref: Ref, refs: set[Ref]) -> bool:
        """Whether the name a loop iterates was bound anew, before the loop, to a value that holds none of
        ``refs``: ``with tqdm(valid_loader) as bar: for x, y in bar:`` after the training loop's ``with
        tqdm(train_loader) as bar:`` draws from the validation loader only."""
        index = self.index
        if not isinstance(site, cst.For):
            return False
        iterated = site.iter
        while isinstance(iterated, cst.Call) and len(iterated.args) >= 1 and not iterated.args[0].keyword:
            iterated = iterated.args[0].value  # ``enumerate(pbar)``, ``tqdm(pbar)``
        if not isinstance(iterated, cst.Name):
            return False
        scope = index.scope_of(site)
        if index.ref_of(iterated, scope) != ref:
            return False
        value = self._reaching_value(site, ref, scope)
        return value is not None and not set(self._candidates(value, scope)) & refs

    def _reaching_value(self, site: cst.For, ref: Ref, scope: Scope) -> cst.BaseExpression | None:
        """The value of the last binding of ``ref`` before ``site`` on the way to it (in a statement around
        the loop, or in a block around it), where the name has more than one binding; None otherwise."""
        index = self.index
        bindings: list[tuple[cst.CSTNode, cst.BaseExpression]] = []
        for mention in index.mentions(scope, ref):
            holder = index.parent(mention)
            if isinstance(holder, cst.AsName) and isinstance(item := index.parent(holder), cst.WithItem):
                bindings.append((cast(cst.CSTNode, index.parent(item)), item.item))
            elif isinstance(holder, cst.AssignTarget) and isinstance(assign := index.parent(holder), cst.Assign):
                bindings.append((index.statement_of(assign), assign.value))
            elif _binds_otherwise(holder, mention, site):
                return None  # bound some other way: not followed
        if len(bindings) < 2:
            return None
        start = index.order[site]
        reaching = [
            (anchor, value)
            for anchor, value in bindings
            if index.order[anchor] < start and (index.inside(site, anchor) or _block_around(index, anchor, site))
        ]
        return max(reaching, key=lambda b: index.order[b[0]])[1] if reaching else None

    def drawn_from(self, site: cst.CSTNode, refs: set[Ref]) -> list[Ref]:
        """Every place among ``refs`` whose loader ``site`` draws from: both loaders of one builder in
        ``for a, b in zip(source, target)``."""
        self.iterations(refs)
        scope = self.index.scope_of(site)
        found = [
            ref
            for node, candidates in self._sites or ()
            if node is site
            for ref in candidates
            if ref in refs
            and (ref.scope is scope or (isinstance(ref.scope, cst.ClassDef) and ref.path.startswith("self.")))
        ]
        return list(dict.fromkeys(found))

    def _draw_sites(self) -> Iterator[tuple[cst.CSTNode, tuple[Ref, ...]]]:
        """Every place batches may be drawn, with the places it may draw them from in the order they are
        tried: the first that holds the loader asked about is the one it draws from. Found once for all
        the loaders of the program."""
        index = self.index
        for loop in index.loops:
            if isinstance(loop, cst.For):
                scope = index.scope_of(loop)
                candidates = self._candidates(loop.iter, scope)
                if (held := index.carried_ref(loop.iter, scope)) is not None:
                    candidates += self._made_from(held, scope)  # ``stream = tqdm(enumerate(loader))``
                yield loop, candidates
        for comprehension in index.comprehensions:
            yield comprehension, self._candidates(comprehension.iter, index.scope_of(comprehension))
        for call in index.calls:
            if isinstance(call.func, cst.Name) and call.func.value == "next" and call.args:
                scope = index.scope_of(call)
                ref = index.carried_ref(call.args[0].value, scope)
                if ref is not None:
                    # ``batches = cycle(loader)`` then ``next(batches)``
                    yield call, (ref, *self._made_from(ref, scope))

    def _made_from(self, ref: Ref, scope: Scope, depth: int = 0) -> tuple[Ref, ...]:
        """What an iterator at ``ref`` may be made from by a call (a generator of the program's own)."""
        found: tuple[Ref, ...] = ()
        for assign in self.index.assignments_to(ref):
            if isinstance(assign.value, cst.Call):
                found += self._candidates(assign.value, scope, depth)
        return found

    def _candidates(self, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> tuple[Ref, ...]:
        """The places whose loader ``expr`` iterates, in the order they are tried: what it holds, what a call
        of the program's own returns or yields, then what its arguments iterate."""
        key = (expr, scope, depth)
        known = self._known.get(key)
        if known is not None:
            return known
        found: tuple[Ref, ...] = ()
        ref = self.index.carried_ref(expr, scope)
        if ref is not None:
            found += (ref,)
            if depth < 3 and ref not in self._following:  # ``enumerate(stream)``, ``stream = tqdm(enumerate(loader))``
                self._following.add(ref)  # ``x = f(x)`` names itself: followed once
                try:
                    found += self._made_from(ref, scope, depth + 1)
                finally:
                    self._following.discard(ref)
        if isinstance(expr, cst.Call) and depth < 3:
            found += self._returned_or_yielded(expr, depth)
        if isinstance(expr, cst.Call) and not m.matches(expr.func, _COUNTS):
            for arg in expr.args:
                if arg.keyword is None:
                    found += self._candidates(arg.value, scope)
        self._known[key] = found
        return found

    def _returned_or_yielded(self, call: cst.Call, depth: int) -> tuple[Ref, ...]:
        """The loader a call of the program's own function gives: one it returns (``self.get_loader(bs)``),
        or, for a generator, one it iterates to yield its batches (``while True: for b in make(): yield b``)."""
        index = self.index
        resolved = index.resolve_callee(call, index.scope_of(call))
        if resolved is None:
            return ()
        function = resolved[0]
        found: tuple[Ref, ...] = (Ref(function, "<return>"),)
        own = [n for n in index.walk(function.body) if index.scope_of(n) is function]
        if not any(isinstance(n, (cst.Yield)) for n in own):
            return found
        for node in own:
            if isinstance(node, cst.For) and any(isinstance(y, cst.Yield) for y in index.walk(node.body)):
                found += self._candidates(node.iter, function, depth + 1)
            if isinstance(node, cst.Yield) and isinstance(node.value, cst.From):
                found += self._candidates(node.value.item, function, depth + 1)
        return found

    def site_trains(self, node: cst.CSTNode) -> bool:
        if without_grad(self.index, node) and not any(
            isinstance(inner, cst.Call) and self.index.qualified_names(inner.func) & _ENABLE_GRAD
            for inner in self.index.walk(node)
        ):  # ``with torch.no_grad(): for x, y in loader:``: no gradient comes from these batches
            return False
        if isinstance(node, cst.CompFor):  # ``[trainer.step(x, y) for x, y in loader]``: what it makes trains
            comprehension = self.index.parent(node)
            made = getattr(comprehension, "elt", None) or getattr(comprehension, "value", None)
            return made is not None and self.index.trains(made)
        if isinstance(node, cst.For):
            return self.index.trains(node.body)
        return self.index.in_a_training_loop(node)

    def batches_train(self, site: cst.CSTNode) -> bool:
        """Whether the batches drawn at ``site`` flow into a backward pass.

        A loader drawn inside a loop that trains may still be evaluation data (``vx, vy =
        next(iter(val_loader))`` every few steps). The batch is followed through the
        function's assignments, with-items, loops and mutating calls (``losses.append(loss)``,
        :class:`_Batch`), and counts as training data when something derived from it reaches
        ``.backward()`` or is handed to a function of the script that trains.
        """
        index = self.index
        batch = _Batch(index, site)
        for node in batch.nodes:
            if not isinstance(node, cst.Call):
                continue
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "backward":
                if batch.read_by(node.func.value) or any(batch.read_by(arg.value) for arg in node.args):
                    return True
                continue
            # ``train_step(model, x, y)``, or ``trainer.step(x, y)`` on an object of the program's own class
            callee = index.runs(node, batch.scope)
            if (
                callee is not None
                and index.trains(callee[0].body)
                and (
                    batch.read_by(node.func)
                    or any(batch.read_by(arg.value) for arg in node.args)
                    or batch.closed_over(callee[0])
                )
            ):
                return True
            # ``optimizer.step(closure)``: a function of this scope, handed on, that trains on the batch
            for arg in node.args:
                passed = arg.value
                function = index.functions.get((batch.scope, passed.value)) if isinstance(passed, cst.Name) else None
                if function is not None and index.trains(function.body) and batch.closed_over(function):
                    return True
        return False

    def dataset_lengths(self, refs: set[Ref]) -> Iterator[cst.Attribute]:
        """``len(loader.dataset)``: the reads of the whole dataset through the places holding the loader."""
        index = self.index
        for ref in refs:
            for scope in index.scopes_reading(ref):
                for read in index.mentions(scope, ref):
                    attribute = index.parent(read)
                    if not (
                        isinstance(attribute, cst.Attribute)
                        and attribute.attr.value == "dataset"
                        and attribute.value is read
                    ):
                        continue
                    arg = index.parent(attribute)
                    call = index.parent(arg)
                    if isinstance(arg, cst.Arg) and isinstance(call, cst.Call) and m.matches(call.func, m.Name("len")):
                        yield attribute

    def counted_lengths(self, refs: set[Ref], keyword: str | None) -> Iterator[cst.Attribute]:
        """:meth:`dataset_lengths`, but for those only a progress line shows next to a ``batch_sampler``
        (``keyword``): what a batch sampler deals this rank is known only once drawn, and a shown total
        stays the whole data set's."""
        for attribute in self.dataset_lengths(refs):
            if keyword != "batch_sampler" or not self.reported_only(attribute):
                yield attribute

    def reported_only(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` is only shown: an argument of ``print``, a logger's or a progress bar's method
        (``"{}/{}".format(i * len(x), len(loader.dataset))`` in a progress line)."""
        index = self.index
        stmt = index.statement_of(node)
        for ancestor in index.ancestors(node):
            if ancestor is stmt:
                return False
            if isinstance(ancestor, cst.Call) and (
                m.matches(ancestor.func, m.Name("print"))
                or (isinstance(ancestor.func, cst.Attribute) and ancestor.func.attr.value in _REPORTING)
            ):
                return True
        return False

    def sampler_reads(self, refs: set[Ref]) -> Iterator[cst.Attribute]:
        """``loader.sampler.indices``: what the program reads of its own sampler through the loader (the
        sampler itself, once wrapped, sits at ``loader.sampler.sampler``)."""
        index = self.index
        for ref in sorted(refs, key=lambda r: (index.order.get(r.scope, -1), r.path)):
            for scope in index.scopes_reading(ref):
                for read in index.mentions(scope, ref):
                    sampler = index.parent(read)
                    attribute = index.parent(sampler)
                    if (
                        isinstance(sampler, cst.Attribute)
                        and sampler.value is read
                        and sampler.attr.value == "sampler"
                        and isinstance(attribute, cst.Attribute)
                        and attribute.value is sampler
                        and attribute.attr.value not in _DISTRIBUTED_SAMPLER_API
                    ):
                        yield attribute


# What a DistributedSampler answers itself (``loader.sampler.set_epoch(epoch)``).
_DISTRIBUTED_SAMPLER_API = frozenset(
    {"set_epoch", "epoch", "num_replicas", "rank", "num_samples", "total_size", "shuffle", "seed", "drop_last"}
)

# What carries a batch on (:meth:`_Batch._spread`) or uses it (:meth:`Reads.batches_train`).
_FOLLOWED = frozenset({cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For, cst.WithItem, cst.Call})


class _Batch:
    """The names of one function that hold a batch drawn at ``site``, or values derived from it."""

    def __init__(self, index: Index, site: cst.CSTNode) -> None:
        self.index = index
        self.site = site
        self.scope = index.scope_of(site)
        self.nodes = [
            n
            for n in index.walk(self.scope)
            if type(n) in _FOLLOWED and index.scope_of(n) is self.scope and n is not self.scope
        ]
        self.names: set[str] = set()
        self._shadowed: dict[cst.Name, bool] = {}
        if isinstance(site, (cst.For, cst.CompFor)):
            self._hold(site.target)
        while self._spread():
            pass

    def read_by(self, expr: cst.CSTNode | None) -> bool:
        """Whether ``expr`` reads the batch or a value derived from it."""
        if expr is None:
            return False
        for node in self.index.walk(expr):
            if node is self.site:
                return True
            if (
                isinstance(node, cst.Name)
                and node.value in self.names
                and self.index.names_a_variable(node)
                and not self.rebound_before(node)
            ):
                return True
        return False

    def rebound_before(self, read: cst.Name) -> bool:
        """Whether every way from the draw to ``read`` passes a binding of its name to something else: ``read``
        comes before the draw in a loop around both, and the loop's body binds the name first on every pass
        (``x, y = next(train_iter)`` at the top of each step, where ``x, _ = next(preview_iter)`` every few
        steps reuses the name for a preview that trains nothing)."""
        if read in self._shadowed:
            return self._shadowed[read]
        self._shadowed[read] = False
        index = self.index
        loop = next((loop for loop in index.enclosing_loops(read) if index.inside(self.site, loop)), None)
        if loop is None or not index.after(self.site, read):
            return False
        for stmt in straight_line(loop.body):
            if index.inside(read, stmt):
                break
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if (
                    isinstance(small, cst.Assign)
                    and any(m.matches(t, m.Name(read.value)) for a in small.targets for t in assigned(a.target))
                    and not any(isinstance(n, cst.Name) and n.value == read.value for n in index.walk(small.value))
                ):
                    self._shadowed[read] = True
                    return True
        return False

    def closed_over(self, function: cst.FunctionDef) -> bool:
        """Whether ``function`` reads the batch as a global (or a closure's variable)."""
        index = self.index
        return any(
            isinstance(n, cst.Name)
            and n.value in self.names
            and index.ref_of(n, index.scope_of(n)) == Ref(self.scope, n.value)
            for n in index.walk(function.body)
        )

    def _spread(self) -> bool:
        """One pass over the function's statements; whether more names now hold the batch."""
        grew = False
        for node in self.nodes:
            if isinstance(node, cst.Assign) and self.read_by(node.value):
                for target in node.targets:
                    grew |= self._hold(target.target)
            elif (isinstance(node, (cst.AugAssign, cst.AnnAssign)) and self.read_by(node.value)) or (
                isinstance(node, cst.For) and node is not self.site and self.read_by(node.iter)
            ):
                grew |= self._hold(node.target)
            elif isinstance(node, cst.WithItem) and node.asname is not None and self.read_by(node.item):
                grew |= self._hold(node.asname.name)
            elif (
                isinstance(node, cst.Call)
                and isinstance(self.index.parent(node), cst.Expr)
                and isinstance(node.func, cst.Attribute)
                and not self.index.qualified_names(node.func)
                and any(self.read_by(arg.value) for arg in node.args)
            ):
                grew |= self._hold(node.func.value)  # ``losses.append(loss)``: ``losses`` now holds it
        return grew

    def _hold(self, target: cst.BaseExpression) -> bool:
        """Mark the names ``target`` binds as holding the batch; whether any is new."""
        grew = False
        for single in assigned(target):
            while isinstance(single, (cst.Attribute, cst.Subscript)):
                single = single.value
            if isinstance(single, cst.StarredElement):
                single = single.value
            if isinstance(single, cst.Name) and single.value not in self.names:
                self.names.add(single.value)
                grew = True
        return grew


def _block_around(index: Index, stmt: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Whether the block that holds ``stmt`` also holds ``node`` (at any depth)."""
    block = index.parent(stmt)
    return block is not None and index.inside(node, block)


def _binds_otherwise(holder: cst.CSTNode | None, mention: cst.CSTNode, site: cst.For) -> bool:
    """Whether ``mention`` may bind its name other than by ``=`` or ``with ... as`` (a loop's target, ``+=``,
    ``del``, an unpacking), or is read in a display: either way, not followed."""
    if isinstance(holder, cst.For):
        return holder is not site and holder.target is mention
    if isinstance(holder, cst.AnnAssign):
        return holder.target is mention
    return isinstance(holder, (cst.AugAssign, cst.Del, cst.Element, cst.CompFor))

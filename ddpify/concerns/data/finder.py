"""The data concern's finder: the DataLoaders that feed training, their epoch loops and the new passes they start.

A DataLoader is followed by the index's value flow from where it is built
to where its batches are drawn (:mod:`.reads`); one whose batches reach a
backward pass is a training loader. Its epoch loop is
the ``for`` loop around the loop that draws its batches (through the callers
of the script's own functions), where the loader itself, not an iterator or
progress bar over it, can be named for ``sampler.set_epoch(epoch)``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.concerns.data.checks import Checks
from ddpify.concerns.data.codes import NO_EPOCH, NO_TRAINING_LOADER, OWN_SAMPLER, SHARD_EVALUATED, UNFOLLOWED_LOADER
from ddpify.concerns.data.facts import EpochLoop, Facts, Inline, Loader, Restart, is_false, is_true
from ddpify.concerns.data.reads import Reads
from ddpify.concerns.data.seeds import Seeds
from ddpify.concerns.data.streams import find_stream
from ddpify.concerns.data.switches import backward_switched_off
from ddpify.concerns.samplers import DictEntry, OwnSampler, dict_entry, entry_iterations, keys_drawn, stored_sampler
from ddpify.engine.edits import statement
from ddpify.engine.index import Flow, Index, Ref, Scope
from ddpify.engine.program import Program, is_backward
from ddpify.engine.syntax import dotted, parameter_names, single_target, straight_line, unpacked_into
from ddpify.engine.values import dict_keys, loader_argument, passed_values


def find(program: Program) -> Facts:
    loaders = tuple(LoaderFinder(program).loaders())
    seeds = Seeds(program.index)
    return Facts(loaders, tuple(seeds.unseeded_splits()), tuple(seeds.unseeded_orders(loaders)))


class LoaderFinder:
    """Every DataLoader of the program: whether it feeds training, where its epochs begin, what it needs."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.index = program.index
        self.reads = Reads(self.index)
        self.checks = Checks(program, self.reads, Seeds(self.index))
        self._loader_refs: set[Ref] = set()  # the places holding the loader being examined
        self._shard_passes: set[cst.CSTNode] = set()  # the passes DDP212 names (one loader built in several places)
        self._sources_by_statement: dict[Ref, dict[cst.CSTNode, Ref]] = {}  # see _ref_at_call()
        self._statement_of_call: dict[cst.Call, cst.BaseStatement] = {}  # see _ref_at_call()
        # ``it = iter(x)``, and ``next(iter(x))`` (a new iterator at each call: True)
        self._iter_calls: list[tuple[cst.SimpleStatementLine, cst.Call, bool]] | None = None

    def _origin(self, call: cst.Call) -> Ref | None:
        index = self.index
        parent = index.parent(call)
        scope = index.scope_of(call)
        if (target := single_target(parent)) is not None:
            return index.ref_of(target, scope)
        if isinstance(parent, cst.Return) and isinstance(scope, cst.FunctionDef):
            return Ref(scope, "<return>")
        if (
            isinstance(parent, cst.Arg)
            and _is_iter(made := index.parent(parent))
            and (target := single_target(index.parent(made))) is not None
        ):
            # ``batches = iter(DataLoader(...))``: the iterator holds the loader's batches, drawn with ``next()``
            return index.ref_of(target, scope)
        if isinstance(parent, cst.Arg):
            # ``train(DataLoader(...), epochs)``, ``cycle(DataLoader(...))``: the parameter of the program's own
            # function (or generator) that receives the loader built in its call holds it from there on
            return index.parameter_of(parent)
        if isinstance(parent, cst.Element) and isinstance(returned := index.parent(parent), cst.Tuple):
            ret = index.parent(returned)
            if isinstance(ret, cst.Return) and isinstance(scope, cst.FunctionDef):
                slot = list(returned.elements).index(parent)
                return Ref(scope, f"<return {slot}>")
        return None

    def loaders(self) -> Iterator[Loader]:
        index = self.index
        for call in index.calls:
            if not index.builds_loader(call):
                continue
            origin = self._origin(call)
            entry = dict_entry(index, call) or (self._dict_entry_by_name(origin) if origin is not None else None)
            if entry is not None:
                origin = entry.holder
            if origin is None and entry is None and (inline := self._inline(call)) is not None:
                full = self.checks.batch_size_in_shapes(call, [inline.loop], frozenset())
                yield Loader(call, True, (), full_batches=full, sites=(inline.loop,), inline=inline)
                continue
            refs = index.downstream(origin) if origin is not None else set()
            if origin is not None and entry is None:
                refs = self._reached_through_its_branch(call, refs)
            starts: dict[cst.CSTNode, cst.CSTNode] = {}  # where to look for the epoch loop around a site
            if entry is None:
                sites = [
                    site
                    for site in self.reads.iterations(refs)
                    if self.reads.site_trains(site[0])
                    and self.reads.batches_train(site[0])
                    and not self._only_evaluated_by(site[1], refs)
                ]
            else:
                sites, entry = self._entry_sites(call, entry, refs, starts)
            training = bool(sites)
            epoch_loops: list[EpochLoop] = []
            own = stream = carried = None
            self._loader_refs = self._holding_loader(origin) if origin is not None else set()
            restarts = tuple(self._restarts(refs)) if training else ()
            if training:
                epoch_loops = self._epoch_loops(call, sites, starts, entry, restarts)
                own = self.checks.check_sampling_arguments(call, refs)
                stream = find_stream(index, call)
                carried = self.checks.carried_state(call, [node for node, _ in sites])
            elif (
                origin is None or not (entry_iterations(index, refs) if entry else self.reads.iterations(refs))
            ) and not (origin is not None and self._never_read(refs)):
                self.program.report(
                    call,
                    UNFOLLOWED_LOADER,
                    "cannot follow this DataLoader to a loop: left without a DistributedSampler",
                )
            trained = {node for node, _ in sites}
            evaluated = (
                training
                and entry is None
                and (
                    any(n not in trained for n, _ in self.reads.iterations(refs))
                    or self._trains_when_shuffled(call, trained)
                )
            )
            whole_run = training and not epoch_loops and not restarts and all(self._runs_once(n) for n in trained)
            spread, keys, stored = self._spread(call, training, refs)
            own = own or stored
            if carried is not None:
                why = _not_split_in_runs(own, stream, entry, keys if spread is not None else frozenset(), evaluated)
                if why:
                    self.checks.refuse_carried_state(call, carried, origin, why)
            if training:
                self._shard_evaluated(call, sites, refs)
            lengths = tuple(self.reads.counted_lengths(refs, own.attribute if own else None)) if training else ()
            full = self.checks.batch_size_in_shapes(call, [node for node, _ in sites], keys) if training else None
            yield Loader(
                call,
                training,
                tuple(epoch_loops),
                spread,
                keys,
                lengths,
                restarts,
                full,
                tuple(node for node, _ in sites),
                frozenset(refs),
                own,
                entry,
                stream,
                evaluated,
                whole_run,
                tuple(self.reads.sampler_reads(refs)) if own is not None and own.wrapped else (),
                self._trains_when(call, sites) if evaluated else None,
                carried=carried,
                first_pass=self._first_pass(call, origin) if training else None,
            )

    def _shard_evaluated(self, call: cst.Call, sites: list[tuple[cst.CSTNode, Ref]], refs: set[Ref]) -> None:
        """DDP212 where the loader a training loop draws from is also drawn where nothing trains (embeddings
        extracted after training, the training set's accuracy): the pass sees this rank's share only. Not a
        validation loader that the same factory builds (another object than the one trained on)."""
        index = self.index
        trained = {node for node, _ in sites}
        held = {ref for _, ref in sites}
        for node, ref in self.reads.iterations(refs):
            # a pass over the data (not one batch drawn with ``next``, shown or checked)
            scope = index.scope_of(node)
            if isinstance(scope, cst.FunctionDef) and index.is_generator(scope):
                continue  # ``def cycle(dl): while True: for batch in dl: yield batch``: it hands the batches on
            if (
                node in trained
                or node in self._shard_passes
                or isinstance(node, cst.Call)
                # inside a loop that trains (``[t.to(device) for t in batch]`` after ``batch = next(it)``)
                or index.in_a_training_loop(node)
                or not (ref in held or any(place in held for place in index.upstream(ref)))
            ):
                continue
            name = next((r.path for r in [ref, *index.upstream(ref)] if r in held), ref.path)
            self._shard_passes.add(node)
            self.program.report(
                node,
                SHARD_EVALUATED,
                f"`{name}` is also drawn here, where nothing trains: it now gives this rank's share of the data "
                "(one in world size), so what is computed from it covers that share only; draw from a loader over "
                f"the whole data set here (`DataLoader({name}.dataset, ...)`) if it should see all of it",
            )
            return

    def _first_pass(self, call: cst.Call, origin: Ref | None) -> cst.Call | None:
        """``it = iter(DataLoader(...))``, and the same loader built again into ``it`` where a pass ends: the
        first of those constructions, whose sampler the others can share. None where the loader is built once,
        where the constructions differ, or where the data set may be made anew between them (a sampler made
        over the first would not fit it)."""
        index = self.index
        if origin is None or not _is_iter(index.parent(index.parent(call))):
            return None
        values = [value for _, value in index.values_assigned(origin)]
        loaders = [cast(cst.Call, cast(cst.Call, v).args[0].value) for v in values if _iter_of_a_loader(index, v)]
        if len(loaders) < 2 or len(loaders) != len(values):
            return None
        text = index.module_of(call).code_for_node(call)
        if any(index.module_of(c).code_for_node(c) != text or index.scope_of(c) is not origin.scope for c in loaders):
            return None
        first = min(loaders, key=index.order.__getitem__)
        if any(index.enclosing_loops(index.statement_of(first))):
            return None  # built in a loop itself: which construction comes first is not the order in the source
        for name in index.walk(first):
            ref = index.ref_of(name, origin.scope) if isinstance(name, cst.Name) else None
            if ref is not None and any(index.after(a, first) for a in index.assignments_to(ref)):
                return None
        return first

    def _inline(self, call: cst.Call) -> Inline | None:
        """``for x, y in DataLoader(...)`` (or through ``enumerate``/``tqdm``) that trains, inside an epoch
        loop of the same function with a plain variable; the loader's arguments leave the sampling to it (no
        sampler of its own, no ``**kwargs``) and its dataset is no stream."""
        index = self.index
        node: cst.CSTNode = call
        while isinstance(arg := index.parent(node), cst.Arg) and arg.keyword is None and not arg.star:
            wrapper = index.parent(arg)
            if not (
                isinstance(wrapper, cst.Call) and wrapper.args[0] is arg and _last_name(wrapper.func) in _PASSING_ON
            ):
                return None
            node = wrapper
        loop = index.parent(node)
        if not (isinstance(loop, cst.For) and loop.iter is node):
            return None
        if any(
            a.star or (a.keyword is not None and a.keyword.value in torch_api.DATALOADER_SAMPLING_KEYWORDS)
            for a in call.args
        ):
            return None
        if find_stream(index, call) is not None:
            return None
        if not (self.reads.site_trains(loop) and self.reads.batches_train(loop)):
            return None
        scope = index.scope_of(loop)
        outer = next(
            (
                lp
                for lp in index.enclosing_loops(loop)
                if lp is not loop and not (isinstance(lp, cst.For) and self._over_phases(lp))
            ),
            None,
        )
        if outer is None or index.scope_of(outer) is not scope:
            return None
        if isinstance(outer, cst.While):  # ``while epoch < n: ...; epoch += 1``
            counter = _pass_counter(outer)
            return Inline(loop, counter) if counter else None
        if isinstance(outer.target, cst.Name) and outer.target.value != "_":
            return Inline(loop, outer.target.value)
        return None

    def _epoch_loops(
        self,
        call: cst.Call,
        sites: list[tuple[cst.CSTNode, Ref]],
        starts: dict[cst.CSTNode, cst.CSTNode],
        entry: DictEntry | None,
        restarts: tuple[Restart, ...],
    ) -> list[EpochLoop]:
        """The epoch loops around a training loader's sites, each where its ``set_epoch`` goes (DDP203 if in a ``while``)."""
        index = self.index
        epoch_loops: list[EpochLoop] = []
        drawn = [
            (node, held)
            for node, ref in sites
            for held in [ref, *(r for r in self.reads.drawn_from(node, self._refs_of(call)) if r != ref)]
        ]
        for node, ref in drawn:
            for loop in self._epoch_loop(starts.get(node, node), ref):
                if index.inside(call, loop.loop):  # set after the statement that builds it in that loop
                    built = next(  # (or in a loop over the phases inside it)
                        a
                        for a in (call, *index.ancestors(call))
                        if isinstance(index.parent(index.parent(a)), (cst.For, cst.While))
                    )
                    loop = replace(loop, after=statement(built))
                found = [loop]
                if entry is not None:  # set_epoch on the training entries of the dict
                    found = [replace(loop, loader=held) for held in entry.indexed(loop.loader)]
                epoch_loops.extend(lp for lp in found if lp not in epoch_loops)
        # the loop over the batches repeats in a ``while``, here or in a generator that yields them
        passes = [node for node, _ in sites] + [node for node, _ in self.reads.iterations(self._refs_of(call))]
        # (``next(it)`` in a loop: that loop draws the batches, it does not repeat a pass)
        repeated = any(self._in_a_while(node, skip=1 if isinstance(node, cst.Call) else 0) for node in passes)
        if not epoch_loops and not restarts and repeated:
            self.program.report(
                call,
                NO_EPOCH,
                "the training loop repeats inside a `while` loop: call `loader.sampler.set_epoch(n)` "
                "at the start of each pass, or every pass shuffles the same way",
            )
        return epoch_loops

    def _in_a_while(self, node: cst.CSTNode, skip: int = 0, depth: int = 0) -> bool:
        """Whether ``node`` runs inside a ``while`` loop (past the ``skip`` innermost loops around it), in its
        function or around a call of that function (``while not done: train_epoch()``)."""
        index = self.index
        loops = [lp for lp in list(index.enclosing_loops(node))[skip:] if lp is not node]
        if any(isinstance(lp, cst.While) for lp in loops):
            return True
        scope = index.scope_of(node)
        if loops or not isinstance(scope, cst.FunctionDef) or depth > 4:
            return False  # (a ``for`` loop around it, or around its calls, counts the passes)
        return any(self._in_a_while(call, depth=depth + 1) for call in index.callers(scope))

    def _never_read(self, refs: set[Ref]) -> bool:
        """Whether no place holding the loader is ever read, but to be handed on by a ``return`` or an
        assignment (a validation loader a helper builds beside the training one, which the script never
        uses): there is no loop to follow it to, and nothing to say."""
        index = self.index
        for ref in refs:
            where = ref.scope if isinstance(ref.scope, cst.FunctionDef) else index.module_of(ref.scope)
            for read in index.mentions(where, ref):
                stored: cst.CSTNode = read
                while isinstance(up := index.parent(stored), (cst.Element, cst.Tuple, cst.List)):
                    stored = up
                holder = index.parent(stored)
                if isinstance(holder, cst.AssignTarget):
                    continue
                function = index.scope_of(holder) if isinstance(holder, cst.Return) else None
                if isinstance(function, cst.FunctionDef) and all(  # handed back to names its callers bind
                    isinstance(assign := index.parent(call), cst.Assign) and assign.value is call
                    for call in index.callers(function)
                ):
                    continue
                return False
        return True

    def _refs_of(self, call: cst.Call) -> set[Ref]:
        origin = self._origin(call)
        return self.index.downstream(origin) if origin is not None else set()

    def _spread(
        self, call: cst.Call, training: bool, refs: set[Ref]
    ) -> tuple[cst.Arg | None, frozenset[str] | None, OwnSampler | None]:
        """``DataLoader(ds, **kwargs)``: the ``**kwargs`` argument, the keys it may hold, and the samplers
        stored into it on request (``kwargs["sampler"] = WeightedRandomSampler(...)`` under a flag)."""
        index = self.index
        spread = next((a for a in call.args if a.star == "**"), None)
        keys = dict_keys(index, spread.value, index.scope_of(call)) if spread is not None else None
        if not training or spread is None or keys is None or not keys & torch_api.DATALOADER_SAMPLING_KEYWORDS:
            return spread, keys, None
        found = (
            stored_sampler(index, call, spread) if keys & torch_api.DATALOADER_SAMPLING_KEYWORDS == {"sampler"} else ""
        )
        if isinstance(found, OwnSampler):
            found = self.checks.seeds.unseeded_draw(found) or found
        if isinstance(found, OwnSampler) and not any(True for _ in self.reads.dataset_lengths(refs)):
            return spread, keys, found
        why = found if isinstance(found, str) and found else "a DistributedSampler would replace it"
        self.program.report(spread, OWN_SAMPLER, f"the training DataLoader already has its own sampler; {why}")
        return spread, keys, None

    def _dict_entry_by_name(self, origin: Ref) -> DictEntry | None:
        """``loaders = {"train": train_loader, "val": val_loader}`` where ``train_loader`` holds this loader and
        is drawn from nowhere else: the loader is that dict's entry (a phase loop draws ``loaders[phase]``)."""
        index = self.index
        into: list[tuple[Ref, cst.SimpleString]] = []
        places = index.downstream(origin)  # ``train_loader = make_loader(...)`` of a helper's loader too
        for place in sorted(places, key=lambda ref: ref.path):
            for flow in index.flows_from(place):
                small = flow.stmt.body[0] if isinstance(flow.stmt, cst.SimpleStatementLine) else None
                if not (
                    isinstance(small, cst.Assign) and isinstance(small.value, cst.Dict) and len(small.targets) == 1
                ):
                    continue
                holder = index.ref_of(small.targets[0].target, index.scope_of(small))
                keys = [
                    element.key
                    for element in small.value.elements
                    if isinstance(element, cst.DictElement)
                    and isinstance(element.key, cst.SimpleString)
                    and index.carried_ref(element.value, index.scope_of(small)) == place
                ]
                if holder is not None and len(keys) == 1 and isinstance(keys[0], cst.SimpleString):
                    into.append((holder, keys[0]))
        if len(into) != 1 or self.reads.iterations({ref for ref in places if "[" not in ref.path}):
            return None
        holder, key = into[0]
        return DictEntry(holder, (key,))

    def _entry_sites(
        self, call: cst.Call, entry: DictEntry, refs: set[Ref], starts: dict[cst.CSTNode, cst.CSTNode]
    ) -> tuple[list[tuple[cst.CSTNode, Ref]], DictEntry]:
        """Where the training entries of a dict of loaders are drawn for training, and the entry with its training keys.

        A loop over the keys (``for phase in ["train", "val"]``) counts as training only for the
        keys that the backward pass is guarded by (``if phase == "train":``).
        """
        sites: list[tuple[cst.CSTNode, Ref]] = []
        training: set[str] = set()
        for site, ref, key in entry_iterations(self.index, refs):
            if not (self.reads.site_trains(site) and self.reads.batches_train(site)):
                continue
            drawn = keys_drawn(self.index, site, key)
            if isinstance(drawn, str):
                self.program.report(site, NO_TRAINING_LOADER, f"{drawn}; every rank would train on the same samples")
                continue
            keys, phases = drawn
            if keys & {str(k.evaluated_value) for k in entry.keys}:
                training |= keys
                sites.append((site, ref))
                if phases is not None:
                    starts[site] = phases
        chosen = tuple(k for k in entry.keys if str(k.evaluated_value) in training)
        return sites, DictEntry(entry.holder, entry.keys, entry.variable, chosen)

    def _restarts(self, refs: set[Ref]) -> Iterator[Restart]:
        """``except StopIteration: it = iter(loader)``: the statements that start another pass."""
        index = self.index
        if self._iter_calls is None:
            self._iter_calls = []
            for stmt in index.statements:
                small = stmt.body[0]
                if len(stmt.body) != 1:
                    continue
                value = small.value if isinstance(small, cst.Assign) else None
                if isinstance(value, cst.Call) and m.matches(value.func, m.Name("iter")) and value.args:
                    self._iter_calls.append((stmt, value, False))
                    continue
                # ``x, y = next(iter(loader))`` at each step: each new iterator is a new pass
                fresh = next((n for n in index.walk(small) if _next_of_a_new_iterator(n)), None)
                if fresh is not None and any(True for _ in index.enclosing_loops(stmt)):  # (not a one-off look)
                    self._iter_calls.append((stmt, cast(cst.Call, cast(cst.Call, fresh).args[0].value), True))
        for stmt, value, each_step in self._iter_calls:
            ref = index.ref_of(value.args[0].value, index.scope_of(stmt))
            if ref in refs and (each_step or self._starts_a_pass(stmt)):
                loader = self._loader_itself(ref, index.scope_of(stmt))
                if loader is None:
                    self.program.report(
                        stmt,
                        NO_EPOCH,
                        "a new pass over the data starts here, but the DataLoader is not reachable by name: call "
                        "`loader.sampler.set_epoch(n)` before it yourself",
                    )
                    continue
                yield Restart(stmt, self.index.spelled(loader, index.scope_of(stmt)))

    def _starts_a_pass(self, stmt: cst.BaseStatement) -> bool:
        """Whether ``it = iter(loader)`` starts another pass over the data: in a handler that catches the
        end of the last one (``except StopIteration:``, ``except Exception:``, a bare ``except:``), or
        repeated by a ``while`` loop that no epoch loop encloses."""
        for ancestor in self.index.ancestors(stmt):
            if isinstance(ancestor, cst.ExceptHandler):
                if ancestor.type is None:
                    return True
                caught = {n.value for n in self.index.walk(ancestor.type) if isinstance(n, cst.Name)}
                return bool(caught & {"StopIteration", "Exception", "BaseException"})
            if isinstance(ancestor, (cst.For, cst.While, cst.FunctionDef)):
                break
        loops = list(self.index.enclosing_loops(stmt))  # innermost first, within the function
        return (
            bool(loops)
            and isinstance(loops[0], cst.While)
            and not _pass_counter(loops[0])  # (an epoch loop counted by hand sets the epoch itself)
            and not any(isinstance(lp, cst.For) for lp in loops)
        )

    def _epoch_loop(self, site: cst.CSTNode, ref: Ref, depth: int = 0, spelled: str = "") -> list[EpochLoop]:
        """The epoch loop around ``site``, where ``ref`` holds the loader; in a function, the epoch loops
        of each call that hands it this loader (``train(model, source)``, then ``train(model, target)``:
        each loader has its own). ``spelled``: how the loop's scope names the loader where no place of
        its own holds it (``trainer.train_loader`` around ``trainer.train_epoch()``)."""
        index = self.index
        loops = [lp for lp in index.enclosing_loops(site) if lp is not site]
        if depth == 0 and isinstance(site, cst.Call):  # next(it): the loop drawing batches is the innermost one
            loops = loops[1:]
        for loop in loops:
            if isinstance(loop, cst.For) and self._over_phases(loop):
                continue  # ``for split in ("train", "valid"):`` inside the epoch loop
            if spelled:
                counter = _pass_counter(loop) if isinstance(loop, cst.While) else ""
                return [EpochLoop(loop, spelled, None, counter)] if isinstance(loop, cst.For) or counter else []
            if isinstance(loop, cst.For):
                loader = self._loader_itself(ref, index.scope_of(loop))
                if loader is None:
                    self.program.report(
                        loop,
                        NO_EPOCH,
                        "the DataLoader is not reachable by name in this epoch loop: call "
                        "`loader.sampler.set_epoch(epoch)` at the start of each epoch yourself",
                    )
                    return []
                # ``loader = make_loader(...)`` inside the loop: the epoch is set once it is built
                built = [a for a in index.assignments_to(loader) if index.inside(a, loop)]
                after = index.statement_of(built[-1]) if built else None
                return [EpochLoop(loop, self.index.spelled(loader, index.scope_of(loop)), after)]
            # ``while epoch < n:`` around the pass over the data, ``epoch += 1`` in its body: an epoch loop;
            # any other ``while`` counts steps, not epochs
            counter = _pass_counter(loop)
            loader = self._loader_itself(ref, index.scope_of(loop)) if counter else None
            if loader is None:
                return []
            built = [a for a in index.assignments_to(loader) if index.inside(a, loop)]
            after = index.statement_of(built[-1]) if built else None
            return [EpochLoop(loop, self.index.spelled(loader, index.scope_of(loop)), after, counter)]
        scope = index.scope_of(site)
        if not isinstance(scope, cst.FunctionDef) or depth > 4:
            return []
        # The callers may know only the loader, not the progress bar over it (``pbar = tqdm(loader)``).
        known = [ref, *self._holding_before(ref)]
        handed: list[tuple[cst.Call, Ref]] = []
        for call in index.callers(scope):
            caller_scope = index.scope_of(call)
            caller_ref = next((r for k in known if (r := self._ref_at_call(k, call, caller_scope)) is not None), None)
            if caller_ref is not None:
                handed.append((call, caller_ref))
        carrying = [(call, caller_ref) for call, caller_ref in handed if self._carries_loader(caller_ref)]
        if not handed and isinstance(ref.scope, cst.ClassDef):
            # ``trainer.train_epoch()`` in the epoch loop, the loader a field the object set itself
            through: list[EpochLoop] = []
            for call in index.callers(scope):
                field = self._field_of_the_receiver(ref, scope, call)
                if field:
                    through.extend(lp for lp in self._epoch_loop(call, ref, depth + 1, field) if lp not in through)
            return through
        if not carrying:  # no call is seen to hand this loader: the first caller's loop says what it can
            for call, caller_ref in handed:
                first = self._epoch_loop(call, caller_ref, depth + 1)
                if first:
                    return first
            return []
        found: list[EpochLoop] = []
        for call, caller_ref in carrying:
            found.extend(lp for lp in self._epoch_loop(call, caller_ref, depth + 1) if lp not in found)
        return found

    def _trains_when(self, call: cst.Call, sites: list[tuple[cst.CSTNode, Ref]]) -> str | None:
        """``split == "train"`` for a factory ``make_loader(split)`` whose every call passes a constant for
        ``split``, the calls whose loader trains one set of values and the others another (``"val"``,
        ``"test"``): the loaders it makes for evaluation stay whole on every rank, even where they shuffle too."""
        index = self.index
        function = index.scope_of(call)
        if not isinstance(function, cst.FunctionDef):
            return None
        iterated = {ref for _, ref in sites}
        self_name = index.self_name(function)
        for name in parameter_names(function):
            if name == self_name:
                continue
            # each call that fixes the parameter, with its constant: ``get_data(flag="val")`` where
            # ``get_data(flag)`` passes its own ``flag`` on to the factory
            fixed = self._constants_passed(function, name, 0)
            if not fixed:
                continue
            training = {c for c, _ in fixed if any(index.downstream(ref) & iterated for ref in self._kept_by(c))}
            if not training or len(training) == len({c for c, _ in fixed}):
                continue
            trains = {spelled for c, spelled in fixed if c in training}
            others = {spelled for c, spelled in fixed if c not in training}
            if trains & others:
                continue
            chosen = sorted(trains)
            return f"{name} == {chosen[0]}" if len(chosen) == 1 else f"{name} in ({', '.join(chosen)})"
        return None

    def _constants_passed(self, function: cst.FunctionDef, name: str, depth: int) -> list[tuple[cst.Call, str]]:
        """The calls that decide the parameter ``name`` of ``function``, each with the constant it passes:
        its own calls, or, where a call passes on a parameter of the function it is in, that function's
        calls (to a depth of three); empty where some call passes anything else."""
        index = self.index
        if any(True for _ in index.values_assigned(Ref(function, name))):
            return []
        values = passed_values(index, Ref(function, name))
        callers = index.callers(function)
        if values is None or len(values) != len(callers):
            return []
        fixed: list[tuple[cst.Call, str]] = []
        for caller, value in zip(callers, values, strict=True):
            spelled = _constant(index, value)
            outer = index.scope_of(caller)
            if spelled is not None:
                fixed.append((caller, spelled))
            elif (
                depth < 3
                and isinstance(value, cst.Name)
                and isinstance(outer, cst.FunctionDef)
                and value.value in parameter_names(outer)
                and value.value != index.self_name(outer)
                and (passed := self._constants_passed(outer, value.value, depth + 1))
            ):
                fixed.extend(passed)
            else:
                return []
        return fixed

    def _reached_through_its_branch(self, call: cst.Call, refs: set[Ref]) -> set[Ref]:
        """The places a loader built in a branch of a factory reaches, given what each call of the factory
        passes: ``make_loader(ds, train)`` with ``if train: return DataLoader(ds, shuffle=True)`` and ``else:
        return DataLoader(ds)``: ``make_loader(val_set, False)`` never gets the first, whatever it trains on."""
        index = self.index
        function = index.scope_of(call)
        branches: list[tuple[cst.BaseExpression, bool]] = []  # each test above the call, and the arm it is in
        for _ in range(3):
            if not isinstance(function, cst.FunctionDef):
                return refs
            branches = _branches_above(index, call, function)
            callers = index.callers(function)
            if branches or len(callers) != 1:
                break
            # ``return DataLoader(...)`` of a helper that one branch of the factory calls: that call's branch
            call = callers[0]
            function = index.scope_of(call)
        if not branches or not callers or not isinstance(function, cst.FunctionDef):
            return refs
        never = [
            c
            for c in callers
            if any(_evaluated(test, self._bound_constants(function, c)) == (not arm) for test, arm in branches)
        ]
        if not never:
            return refs
        kept = {ref for c in callers if c not in never for held in self._kept_by(c) for ref in index.downstream(held)}
        elsewhere = {ref for c in never for held in self._kept_by(c) for ref in index.downstream(held)}
        # (the factory's own places, ``<return>`` among them, hand on to the calls that never get this loader)
        return {ref for ref in refs if ref in kept or not index.downstream(ref) & elsewhere}

    def _bound_constants(self, function: cst.FunctionDef, call: cst.Call) -> dict[str, object]:
        """The constant each parameter of ``function`` holds in ``call`` (passed, or its default); for a method
        called on an object built in place (``Loaders(ds, mode="val").run()``), also the fields its
        ``__init__`` sets from its own parameters (``self.mode = mode``)."""
        bound = self._passed_constants(function, call)
        index = self.index
        receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
        self_name = index.self_name(function)
        if isinstance(receiver, cst.Call) and self_name is not None:
            cls = index.local_class(receiver.func)
            init = index.method(cls, "__init__") if cls is not None else None
            if init is not None:
                given = self._passed_constants(init, receiver)
                init_self = index.self_name(init)
                for assign in index.walk(init.body):
                    if (
                        isinstance(assign, cst.Assign)
                        and len(assign.targets) == 1
                        and isinstance(field := assign.targets[0].target, cst.Attribute)
                        and m.matches(field.value, m.Name(init_self or ""))
                        and isinstance(assign.value, cst.Name)
                        and assign.value.value in given
                    ):
                        bound[f"{self_name}.{field.attr.value}"] = given[assign.value.value]
        return bound

    def _passed_constants(self, function: cst.FunctionDef, call: cst.Call) -> dict[str, object]:
        """The constant each parameter of ``function`` holds in ``call`` (passed, or its default)."""
        index = self.index
        bound: dict[str, object] = {}
        for param in function.params.params:
            if param.default is not None and (value := _literal(index, param.default)) is not _UNKNOWN:
                bound[param.name.value] = value
        for arg in call.args:
            if arg.star:
                break
            filled = index.parameter_of(arg)
            if filled is not None and filled.scope is function:
                value = _literal(index, arg.value)
                if value is _UNKNOWN and isinstance(arg.value, cst.Name):
                    value = _fixed_by_a_test(index, arg.value, call)
                bound[filled.path] = value
        return {name: value for name, value in bound.items() if value is not _UNKNOWN}

    def _kept_by(self, call: cst.Call) -> list[Ref]:
        """The places a call's value is kept in: ``loader = make(...)``, ``data, loader = make(...)``, and
        each call's own target in ``train, val = make("train"), make("val")``."""
        index = self.index
        node: cst.CSTNode = call
        parent = index.parent(node)
        if isinstance(parent, cst.Element) and isinstance(tuple_ := index.parent(parent), (cst.Tuple, cst.List)):
            assign = index.parent(tuple_)
            if not (isinstance(assign, cst.Assign) and assign.value is tuple_ and len(assign.targets) == 1):
                return []
            into = unpacked_into(assign.targets[0].target, tuple_, call)
            targets: list[cst.BaseExpression] = [into] if into is not None else []
        elif isinstance(parent, cst.Assign) and parent.value is node and len(parent.targets) == 1:
            target = parent.targets[0].target
            targets = [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else [target]
        else:
            return []
        scope = index.scope_of(call)
        return [ref for t in targets if (ref := index.ref_of(t, scope)) is not None]

    def _trains_when_shuffled(self, call: cst.Call, sites: set[cst.CSTNode]) -> bool:
        """``DataLoader(sets[split], shuffle=split == "train")`` iterated by a loop whose every backward pass
        is under ``if split == "train":``: the same loader serves evaluation, when it does not shuffle."""
        index = self.index
        shuffle = loader_argument(index, call, "shuffle")
        if shuffle is None or is_true(shuffle) or is_false(shuffle):
            return False
        test = _spelled(index.module.code_for_node(shuffle))
        for site in sites:
            if not isinstance(site, cst.For):
                return False
            backwards = [n for n in index.walk(site.body) if type(n) is cst.Call and is_backward(n)]
            if not backwards:
                return False
            for backward in backwards:
                guards = []
                for ancestor in index.ancestors(backward):
                    if ancestor is site:
                        break
                    if isinstance(ancestor, cst.If):
                        guards.append(_spelled(index.module.code_for_node(ancestor.test)))
                if test not in guards:
                    return False
        return bool(sites)

    def _runs_once(self, site: cst.CSTNode, depth: int = 0) -> bool:
        """Whether the pass over the batches at ``site`` runs once in the whole run: no loop around it
        (for ``next(it)``, none but the loop that draws the batches), nor around any call of its function."""
        index = self.index
        loops = [lp for lp in index.enclosing_loops(site) if lp is not site]
        if depth == 0 and isinstance(site, cst.Call):
            loops = loops[1:]
        scope = index.scope_of(site)
        if loops or not isinstance(scope, (cst.FunctionDef, cst.Module)):
            return False
        if isinstance(scope, cst.Module):
            return True
        callers = index.callers(scope)
        return bool(callers) and depth < 4 and all(self._runs_once(call, depth + 1) for call in callers)

    def _over_phases(self, loop: cst.For) -> bool:
        """Whether ``loop`` goes over names of phases or splits (strings), not over epochs: a display of
        strings, or a name only ever bound to one."""
        index = self.index

        def strings(expr: cst.BaseExpression, empty: bool = False) -> bool:
            """A display of strings (``["train", "valid"]``), also grown by ``+`` or chosen by a condition
            (``["train", "valid"] + (["test"] if args.test else [])``)."""
            if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
                return strings(expr.left, True) and strings(expr.right, True)
            if isinstance(expr, cst.IfExp):
                return strings(expr.body, True) and strings(expr.orelse, True)
            if not isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
                return False
            texts = [
                isinstance(e.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))
                for e in expr.elements
            ]
            return all(texts) and (bool(texts) or empty)

        iterable = loop.iter
        # ``enumerate(phases)``, ``tqdm(phases)``: the loop still goes over the phases
        while isinstance(iterable, cst.Call) and iterable.args and _last_name(iterable.func) in _PASSING_ON:
            iterable = iterable.args[0].value
        if strings(iterable):
            return True
        ref = index.ref_of(iterable, index.scope_of(loop))
        assigns = list(index.assignments_to(ref)) if ref is not None else []
        return bool(assigns) and all(strings(a.value) for a in assigns)

    def _carries_loader(self, ref: Ref) -> bool:
        """Whether the value at ``ref`` is this loader or comes from it (a progress bar over it): a call
        of a shared function that hands it another loader is that loader's business."""
        loader = self._loader_refs
        return ref in loader or any(place in loader for place in self.index.upstream(ref))

    def _only_evaluated_by(self, ref: Ref, refs: set[Ref]) -> bool:
        """Whether every call that hands this loader to the function iterating it (``ref``, a parameter)
        turns its backward pass off: ``run_epoch(net, test_loader, criterion)`` where ``run_epoch``
        steps only ``if optimizer is not None``. The same loop then trains on one loader and only
        evaluates another, which must stay whole on every rank."""
        index = self.index
        function = ref.scope
        if not isinstance(function, cst.FunctionDef):
            return False
        calls = []
        for flow in index.flows_into(ref):
            if flow.src not in refs:
                continue
            found = [
                c
                for c in index.walk(flow.stmt)
                if isinstance(c, cst.Call)
                and (callee := index.resolve_callee(c, index.scope_of(c)))
                and callee[0] is function
            ]
            if len(found) != 1:
                return False
            calls.append(found[0])
        return bool(calls) and all(backward_switched_off(index, function, call) for call in calls)

    def _holding_loader(self, origin: Ref) -> set[Ref]:
        """The places that hold the DataLoader itself, not an iterator or progress bar over it."""
        index = self.index
        seen = {origin}
        queue = [origin]
        while queue:
            current = queue.pop()
            for flow in index.flows_from(current):
                if flow.dst not in seen and self._passes_as_is(flow):
                    seen.add(flow.dst)
                    queue.append(flow.dst)
        return seen

    def _passes_as_is(self, flow: Flow) -> bool:
        """Whether ``flow`` hands its value on as it is (``a = loader``), not wrapped (``it = iter(loader)``)."""
        index = self.index
        reads = index.mentions(flow.stmt, flow.src)
        if not reads and isinstance(flow.src.scope, cst.FunctionDef):  # returned: as the function returns it
            returns = [n for n in index.walk(flow.src.scope.body) if isinstance(n, cst.Return) and n.value]
            reads = [read for ret in returns for read in index.mentions(ret, flow.src)]
        if not reads:
            return True
        for read in reads:
            arg = index.parent(read)
            call = index.parent(arg)
            wrapped = (
                isinstance(arg, cst.Arg)
                and isinstance(call, cst.Call)
                and call.args[0] is arg
                and (m.matches(call.func, m.Name("iter")) or index.is_call_to(call, torch_api.PROGRESS_BARS))
            )
            if not wrapped:
                return True
        return False

    def _holding_before(self, ref: Ref) -> list[Ref]:
        """The places holding this loader that ``ref``'s value comes from, nearest first."""
        return [place for place in self.index.upstream(ref) if place in self._loader_refs]

    def _loader_itself(self, ref: Ref, scope: Scope) -> Ref | None:
        """The place, readable in ``scope``, holding the loader that ``ref`` holds or iterates over."""
        index = self.index
        seen = {ref}
        queue = [ref]
        while queue:
            current = queue.pop(0)
            if (
                current in self._loader_refs
                and not self._wraps_a_loader(current)
                and (
                    current.scope is scope
                    or isinstance(current.scope, cst.Module)
                    or (isinstance(current.scope, cst.ClassDef) and index.method_scope(scope) is not None)
                )
            ):
                return current
            for flow in index.flows_into(current):
                if flow.src not in seen:
                    seen.add(flow.src)
                    queue.append(flow.src)
        return None

    def _wraps_a_loader(self, ref: Ref) -> bool:
        """Whether ``ref`` holds something made around the loader (``pbar = tqdm(loader)``), which has no
        sampler of its own: the loader is further up."""
        index = self.index
        values = [value for _, value in index.values_assigned(ref)]
        return bool(values) and all(
            isinstance(value, cst.Call)
            and bool(value.args)
            and value.args[0].keyword is None
            and not index.is_call_to(value, torch_api.DATALOADER)
            and index.local_class(value.func) is None
            and index.carried_ref(value.args[0].value, index.scope_of(value)) in self._loader_refs
            for value in values
        )

    def _field_of_the_receiver(self, ref: Ref, method: cst.FunctionDef, call: cst.Call) -> str:
        """``trainer.train_loader`` where ``call`` is ``trainer.train_epoch()`` and the method reads the loader as
        its object's field ``self.train_loader``: the receiver a plain name, the field the loader itself."""
        index = self.index
        receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
        caller = index.method_scope(index.scope_of(call))
        if not isinstance(receiver, cst.Name) or (caller is not None and receiver.value == index.self_name(caller)):
            return ""  # (``self.train_epoch()`` in another method reads the field as it is)
        field = self._loader_itself(ref, method)
        if field is None or field.scope is not ref.scope or not field.path.startswith("self."):
            return ""
        return f"{receiver.value}.{field.path.removeprefix('self.')}"

    def _ref_at_call(self, ref: Ref, call: cst.Call, caller: Scope) -> Ref | None:
        """How the caller names the value that the callee knows as ``ref``."""
        index = self.index
        if isinstance(ref.scope, cst.Module):
            return ref
        if isinstance(ref.scope, cst.ClassDef):
            owner = index.method_scope(caller)
            if owner is not None and index.attribute_class(owner) is ref.scope:
                return ref  # ``self.loader`` in another method of the class
            return self._handed_to_the_object(ref, call, caller)
        by_statement = self._sources_by_statement.get(ref)
        if by_statement is None:  # a function called from hundreds of places: one scan, not one per call
            by_statement = self._sources_by_statement[ref] = {}
            for flow in index.flows_into(ref):
                by_statement.setdefault(flow.stmt, flow.src)
        stmt = self._statement_of_call.get(call)
        if stmt is None:
            stmt = self._statement_of_call[call] = index.statement_of(call)
        return by_statement.get(stmt)

    def _handed_to_the_object(self, ref: Ref, call: cst.Call, caller: Scope) -> Ref | None:
        """``runner.run()`` after ``runner = Epoch(model, loader)`` (or ``Epoch(model, loader).run()``): what
        the caller handed to the object that became its field ``ref`` (``self.loader``)."""
        index = self.index
        receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
        if receiver is None:
            return None
        built: list[cst.BaseExpression] = [receiver] if isinstance(receiver, cst.Call) else []
        if (held := index.ref_of(receiver, caller)) is not None and held.scope is caller:
            built += [value for _, value in index.values_assigned(held)]
        calls = [value for value in built if isinstance(value, cst.Call)]
        made = {index.statement_of(value) for value in calls}
        # ``runner = make_runner(model, loader)``: the helper that builds the object hands the loader on
        factories = {c[0] for value in calls if (c := index.resolve_callee(value, caller)) is not None}
        seen, queue = {ref}, [ref]
        while queue:
            for flow in index.flows_into(queue.pop(0)):
                if flow.stmt in made:
                    return flow.src
                inside = (
                    flow.src.scope is ref.scope
                    or index.method_class(flow.src.scope) is ref.scope
                    or flow.src.scope in factories
                )
                if inside and flow.src not in seen and len(seen) < 20:
                    seen.add(flow.src)
                    queue.append(flow.src)
        return None


# Calls whose items are those of their first argument, in some order (or numbered, or shown with a bar)
_PASSING_ON = frozenset({"enumerate", "tqdm", "sorted", "reversed", "list", "tuple", "iter"})


def _last_name(func: cst.BaseExpression) -> str:
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""


def _spelled(code: str) -> str:
    """``code`` without its spaces and parentheses, to compare two spellings of one test."""
    return re.sub(r"[\s()]", "", code)


def _next_of_a_new_iterator(node: cst.CSTNode) -> bool:
    """``next(iter(loader))``."""
    return (
        isinstance(node, cst.Call)
        and m.matches(node.func, m.Name("next"))
        and len(node.args) >= 1
        and isinstance(inner := node.args[0].value, cst.Call)
        and m.matches(inner.func, m.Name("iter"))
        and len(inner.args) == 1
    )


def _pass_counter(loop: cst.While) -> str:
    """The one place a ``while`` loop's body advances by ``+= 1`` in the statements it runs in order on
    every pass (``epoch += 1``, ``self.epoch += 1``, ``state["epochs"] += 1``), as code, the loops inside it
    aside; '' where there is none or more than one."""
    counted = {
        code
        for statement in straight_line(loop.body)
        if isinstance(statement, cst.SimpleStatementLine)
        for small in statement.body
        if isinstance(small, cst.AugAssign)
        and isinstance(small.operator, cst.AddAssign)
        and isinstance(small.value, cst.Integer)
        and small.value.value == "1"
        and (code := _counter_code(small.target))
    }
    return counted.pop() if len(counted) == 1 else ""


def _counter_code(target: cst.BaseExpression) -> str:
    """``epoch``, ``self.epoch`` or ``state["epochs"]`` as written (a constant key), else ''."""
    if isinstance(target, cst.Subscript):
        key = target.slice[0].slice if len(target.slice) == 1 else None
        value = dotted(target.value)
        if value and isinstance(key, cst.Index) and isinstance(key.value, cst.SimpleString):
            return f"{value}[{key.value.value}]"
        return ""
    return dotted(target) or ""


_UNKNOWN = object()


def _branches_above(index: Index, call: cst.Call, function: cst.FunctionDef) -> list[tuple[cst.BaseExpression, bool]]:
    """Each ``if`` test above ``call`` in ``function``, with whether the call is in its body (else its ``else``)."""
    branches: list[tuple[cst.BaseExpression, bool]] = []
    node: cst.CSTNode = call
    for ancestor in index.ancestors(call):
        if ancestor is function:
            break
        if isinstance(ancestor, cst.If) and node is not ancestor.test:
            branches.append((ancestor.test, node is ancestor.body))
        if isinstance(ancestor, cst.Else) and isinstance(owner := index.parent(ancestor), cst.If):
            branches.append((owner.test, False))
            node = owner
            continue
        node = ancestor
    return branches


def _literal(index: Index, value: cst.BaseExpression) -> object:
    """The value of a constant argument (``"train"``, ``0``, ``True``); ``_UNKNOWN`` for anything else."""
    spelled = _constant(index, value)
    return ast.literal_eval(spelled) if spelled is not None else _UNKNOWN


def _fixed_by_a_test(index: Index, name: cst.Name, call: cst.Call) -> object:
    """The constant ``name`` holds where ``call`` runs, from an ``if name == <constant>:`` (or ``elif``) whose
    body holds the call (``if phase == "val": val_loader = make_loader(ds, phase)``); ``_UNKNOWN`` otherwise."""
    for ancestor in index.ancestors(call):
        if isinstance(ancestor, cst.FunctionDef | cst.ClassDef | cst.Lambda):
            break
        if not (isinstance(ancestor, cst.If) and index.inside(call, ancestor.body)):
            continue
        for test in _conjuncts(ancestor.test):  # ``if phase == "train" and not args.eval_only:``: each holds
            if (
                isinstance(test, cst.Comparison)
                and len(test.comparisons) == 1
                and isinstance(test.comparisons[0].operator, cst.Equal)
                and m.matches(test.left, m.Name(name.value))
            ):
                value = _literal(index, test.comparisons[0].comparator)
                rebound = any(
                    isinstance(node, cst.Name) and node.value == name.value and index.stored(node)
                    for node in index.walk(ancestor.body)
                )
                return _UNKNOWN if rebound else value
    return _UNKNOWN


def _conjuncts(test: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """The tests that all hold where ``test`` does: the operands of an ``and``, or ``test`` itself."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        yield from _conjuncts(test.left)
        yield from _conjuncts(test.right)
    else:
        yield test


def _evaluated(test: cst.BaseExpression, bound: dict[str, object]) -> object:
    """What ``test`` gives where the names of ``bound`` hold their constants (``split == "train"``, ``not
    train``, ``mode in ("val", "test")``); ``_UNKNOWN`` where that depends on anything else."""
    if isinstance(test, cst.Name):
        constants: dict[str, object] = {"True": True, "False": False, "None": None}
        return bound.get(test.value, constants.get(test.value, _UNKNOWN))
    if isinstance(test, cst.Attribute):  # ``self.mode``, set from a constructor's argument
        return bound.get(dotted(test), _UNKNOWN) if dotted(test) else _UNKNOWN
    if isinstance(test, (cst.SimpleString, cst.Integer)):
        return ast.literal_eval(test.value)
    if isinstance(test, (cst.Tuple, cst.List)):
        items = [_evaluated(e.value, bound) for e in test.elements]
        return _UNKNOWN if _UNKNOWN in items else tuple(items)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _evaluated(test.expression, bound)
        return _UNKNOWN if inner is _UNKNOWN else not inner
    if isinstance(test, cst.BooleanOperation):
        left, right = _evaluated(test.left, bound), _evaluated(test.right, bound)
        if isinstance(test.operator, cst.And):
            return False if False in (left, right) else _UNKNOWN if _UNKNOWN in (left, right) else bool(left and right)
        return True if True in (left, right) else _UNKNOWN if _UNKNOWN in (left, right) else bool(left or right)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        left, right = _evaluated(test.left, bound), _evaluated(test.comparisons[0].comparator, bound)
        if _UNKNOWN in (left, right):
            return _UNKNOWN
        compare = test.comparisons[0].operator
        try:
            if isinstance(compare, (cst.Equal, cst.Is)):
                return left == right
            if isinstance(compare, (cst.NotEqual, cst.IsNot)):
                return left != right
            if isinstance(compare, cst.In):
                return left in right  # type: ignore[operator]
            if isinstance(compare, cst.NotIn):
                return left not in right  # type: ignore[operator]
        except TypeError:
            return _UNKNOWN
    return _UNKNOWN


def _constant(index: Index, value: cst.BaseExpression) -> str | None:
    """How a constant argument is spelled (``"train"``, ``0``, ``True``); None for anything else."""
    if isinstance(value, (cst.SimpleString, cst.Integer)) or (
        isinstance(value, cst.Name) and value.value in ("True", "False", "None")
    ):
        return index.module_of(value).code_for_node(value)
    return None


def _not_split_in_runs(
    own: object, stream: object, entry: object, spread_keys: frozenset[str] | None, evaluated: bool
) -> str:
    """Why a loader whose batches carry a state cannot give each rank a run of its batches ('' where it can)."""
    if own is not None:
        return "has a sampler of its own"
    if stream is not None:
        return "reads a stream"
    if entry is not None:
        return "is one of several loaders kept together"
    if spread_keys is None:
        return "takes `**` arguments that ddpify cannot read"
    if evaluated:
        return "is built by a function that builds evaluation loaders too"
    return ""


def _is_iter(node: cst.CSTNode | None) -> bool:
    """``iter(x)``."""
    return isinstance(node, cst.Call) and m.matches(node.func, m.Name("iter")) and len(node.args) == 1


def _iter_of_a_loader(index: Index, value: cst.BaseExpression) -> bool:
    """``iter(DataLoader(...))``."""
    return (
        _is_iter(value)
        and isinstance(loader := cast(cst.Call, value).args[0].value, cst.Call)
        and index.builds_loader(loader)
    )

"""convert(): guards -> concerns (find, rewrite) -> apply -> output check -> Conversion.

The pure core: it never reads or writes files, prints or exits, and it never
raises -- every outcome, a bug included, is a :class:`~ddpify.result.Conversion`.
It never imports or runs the user's script either; it only reads its text.

Before anything is rewritten, the input guards (:mod:`ddpify.guards`) turn
away text that ddpify cannot read or reproduce faithfully, and a script that is
already distributed, or has no training step, is left alone. Then every
concern (:mod:`ddpify.concerns`) finds its facts and records its edits, and
the edits are applied in one pass.

After rewriting, the output must compile; otherwise the conversion is an
internal error and nothing is written. It must also keep the invariants of a
data-parallel script (:mod:`ddpify.invariants`, checked on the output text
alone); a violation is refused with its DDP9xx code.
"""

from __future__ import annotations

import ast
import os
import traceback
from collections.abc import Sequence
from dataclasses import replace

import libcst as cst

import ddpify.engine.match as m
from ddpify import bindings, collector, concerns, invariants, stops, torch_api
from ddpify.concerns.process_group import distributed_use
from ddpify.diagnostics import (
    ALREADY_DISTRIBUTED,
    FRAMEWORK_BESIDE_A_LOOP,
    INTERNAL_ERROR,
    TRAINING_IN_A_LIBRARY,
    TRAINING_OUT_OF_SIGHT,
    TRAINING_UNFOLLOWED,
    UNFOLLOWED_IMPORT,
    Change,
    Diagnostic,
    Severity,
    nothing_to_do,
)
from ddpify.engine import already, reach
from ddpify.engine.collect import Source
from ddpify.engine.edits import EditPlan, apply, apply_program
from ddpify.engine.index import Index
from ddpify.engine.program import Program, is_backward, read_program
from ddpify.guards import compile_quietly, parse_checked, round_trip_failure
from ddpify.result import Conversion, LocalModule, Options, Status


def convert(
    source: str | bytes,
    *,
    path: str = "<string>",
    options: Options = Options(),  # noqa: B008 (frozen)
    modules: Sequence[LocalModule] = (),
) -> Conversion:
    """Convert one training script, or the program made of ``source`` (its entry script) and the
    local ``modules`` it imports; see the module docstring for what is guaranteed."""
    with collector.paused():  # (see ddpify.collector)
        try:
            return _convert(source, path, options, modules)
        except Exception as exc:
            return _outcome(source, Status.INTERNAL_ERROR, [INTERNAL_ERROR.at(1, 1, _briefly(exc), path)])


def _briefly(exc: Exception) -> str:
    """One line for a bug report: the exception, the start of its message (which may print a whole
    syntax tree) and the line of ddpify that raised it."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if len(text) > 120 or len(lines) > 1:
        text = text[:120].rstrip() + " ..."
    package = os.path.dirname(os.path.abspath(__file__))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(package + os.sep)]
    place = os.path.relpath(frames[-1].filename, os.path.dirname(package)) if frames else ""
    where = f" ({place.replace(os.sep, '/')}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {text}{where}" if text else f"{type(exc).__name__}{where}"


def _convert(
    source: str | bytes, path: str, options: Options, modules: Sequence[LocalModule], stopping: bool = True
) -> Conversion:
    module = parse_checked(source, path, torch_only=not modules)
    if module is None:
        return _outcome(source, Status.UNCHANGED, [nothing_to_do(path)])
    if isinstance(module, Diagnostic):
        return _outcome(source, Status.INVALID, [module])
    tree = reach.parse(source)
    runs = None
    if tree is not None:
        others_ = [reach.ModuleSource(local.name, local.package, reach.parse(local.source)) for local in modules]
        runs = reach.reach(reach.ModuleSource("__main__", "", tree), others_)
    if tree is not None and runs is not None:
        early = _early_answer(source, path, tree, modules, runs)
        if early is not None:
            return early  # before libcst reads the other modules: a model library can be hundreds of them
    others: list[Source] = []
    for local in modules:
        if runs is not None and not runs.runs(local.name):
            continue  # imported only by code that never runs: Python never loads it
        # Every module counts, torch or not: a package's __init__ re-exports, a config module names.
        parsed = _PARSED.get(local.source, local.path, _checked)
        if isinstance(parsed, Diagnostic):
            return _outcome(source, Status.INVALID, [parsed])
        if parsed is not None:
            others.append(Source(parsed, local.path, local.name, local.package))
    program = read_program(module, path, others, runs)
    by_path = {local.path: local for local in modules}
    index = program.index
    # Any module but the entry may be imported by other scripts, which have no process group.
    shared = {m for m in index.modules if m is not index.module}
    planned = _plan(source, path, options, program, shared, runs.dynamic if runs is not None else ())
    if isinstance(planned, Conversion):
        if planned.status is Status.REFUSED and stopping and not options.strict:
            return _with_stops(source, path, options, modules, program, planned)
        return planned
    plan, diagnostics = planned
    if not others:
        converted = apply(plan)
        text = converted.code  # each read of ``.code`` (or ``.bytes``) prints the whole tree again
        code = text.encode(converted.encoding) if isinstance(source, bytes) else text
        compile_quietly(code, path)  # output that does not compile is a bug: an internal error, nothing written
        original = _decoded(source, plan.index.module)
        lost = bindings.lost_bindings(original, text, path)
        if lost:
            return _outcome(source, Status.INTERNAL_ERROR, [*diagnostics, *lost])
        # a safety net that does not trust the analysis above
        broken = invariants.check(text, path, original=original)
        if broken:
            return _outcome(source, Status.REFUSED, [*diagnostics, *broken])
        return Conversion(source, code, Status.CONVERTED, tuple(diagnostics), _changes(plan, path))
    return _apply_program(source, path, plan, diagnostics, by_path)


# The libcst trees of the modules that programs import: the programs of a folder share their library.
_PARSED = reach.KeptByText()


def _checked(source: str | bytes, path: str) -> cst.Module | Diagnostic | None:
    """:func:`parse_checked` of a module of the program (torch or not); whether it prints back byte
    for byte is asked where it gets edits (:func:`_apply_program`, :func:`_with_stops`)."""
    return parse_checked(source, path, torch_only=False, round_trip=False)


def _early_answer(
    source: str | bytes, path: str, tree: ast.Module, modules: Sequence[LocalModule], runs: reach.Reach
) -> Conversion | None:
    """The outcome "already distributed" or "nothing to do", from CPython's trees
    (:mod:`ddpify.engine.already`); or None where those trees do not show it."""
    found: list[tuple[already.TreeModule, str | bytes, str]] = [
        (already.TreeModule("__main__", "", tree), source, path)
    ]
    for local in modules:
        if not runs.runs(local.name):
            continue
        other = reach.parse(local.source)
        if other is None:
            return None  # a module Python cannot read: the full analysis says where, before anything else
        found.append((already.TreeModule(local.name, local.package, other), local.source, local.path))
    trees = already.Trees([m for m, _, _ in found], runs)
    use = trees.distributed_use()
    if use is not None and use.name.startswith(torch_api.LIGHTNING_TRAINERS) and trees.first_backward() is not None:
        return None  # Lightning's trainer beside a backward pass of the program's own: the full analysis tells
    if use is None:
        loaded = trees.loads_by_computed_name()
        first = trees.first_backward() if loaded is not None and not trees.reaches_backward() else None
        if loaded is not None and first is not None:
            number, backward = first
            return _outcome(
                source, Status.REFUSED, [_training_unfollowed(loaded, found[number][2], backward.lineno, path)]
            )
        return None if trees.may_train() else _outcome(source, Status.UNCHANGED, [nothing_to_do(path)])
    _, text, where = found[use.module]
    message = f"already distributed (uses {use.name}): left unchanged"
    line, column = use.call.lineno, already.column(text, use.call.lineno, use.call.col_offset)
    return _outcome(source, Status.UNCHANGED, [ALREADY_DISTRIBUTED.at(line, column, message, where)])


def _loop_beside_lightning(program: Program, use: tuple[cst.Call, str] | None) -> cst.Call | None:
    """Where ``use`` is Lightning's trainer: a backward pass of the program's own, outside its LightningModules
    (whose backward passes the trainer runs), that code which runs reaches; None otherwise."""
    if use is None or not use[1].startswith(torch_api.LIGHTNING_TRAINERS):
        return None
    index = program.index
    for call in index.calls:
        if not is_backward(call):
            continue
        owner = next((a for a in index.ancestors(call) if isinstance(a, cst.ClassDef)), None)
        if owner is None or not index.derives_from(owner, torch_api.LIGHTNING_MODULES):
            return call
    return None


def _other_overrides(index: Index, method: cst.FunctionDef) -> list[cst.FunctionDef]:
    """The other subclasses' methods of the same name where ``method`` is one subclass's version of a method
    that a base class of the program calls through ``self`` (``self._run_one_epoch(epoch)``); [] otherwise."""
    cls = index.method_class(method)
    if cls is None:
        return []
    name = method.name.value
    for base in index.ancestry(cls):
        if base is cls:
            continue
        calls_it = any(
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == name
            and m.matches(node.func.value, m.Name(index.self_name(index.scope_of(node)) or "self"))
            for node in index.walk(base)
        )
        if calls_it:
            return [
                f
                for sub in index.subclasses(base)
                if sub is not cls and (f := index.functions.get((sub, name))) is not None
            ]
    return []


def _training_unfollowed(loaded: tuple[str, int, str], trains_in: str, trains_at: int, path: str) -> Diagnostic:
    """DDP014: no training step the program's calls reach, a module loaded by a computed name
    (``loaded``: module, line, construct), and a backward pass at ``trains_in`` line ``trains_at``."""
    module, line, construct = loaded
    message = (
        f"no training step that ddpify can follow: the program loads code by a computed name "
        f"(`{construct}` in {module}, line {line}), and {trains_in} line {trains_at} "
        "trains; import that module by name so that ddpify can follow it"
    )
    return TRAINING_UNFOLLOWED.at(1, 1, message, path)


def _plan(
    source: str | bytes,
    path: str,
    options: Options,
    program: Program,
    shared: set[cst.Module],
    dynamic: tuple[tuple[str, int, str], ...] = (),
) -> tuple[EditPlan, list[Diagnostic]] | Conversion:
    """Every concern's edits and findings; or the outcome, when the program is left alone or refused."""
    already = distributed_use(program.index)
    beside = _loop_beside_lightning(program, already)
    if beside is not None and already is not None:
        call, name = already
        program.report(
            call,
            FRAMEWORK_BESIDE_A_LOOP,
            f"this path trains through `{name}`, which starts its own processes and process group, while the "
            f"program also trains in a loop of its own (the backward pass at {program.index.path_of(beside)} line "
            f"{program.index.position(beside)[0]}), which ddpify converts; run this path with Lightning's own "
            "multi-device settings",
        )
        already = None
    if already is not None:
        call, name = already
        index = program.index
        message = f"already distributed (uses {name}): left unchanged"
        where = ALREADY_DISTRIBUTED.at(*index.position(call), message, index.path_of(call))
        return _outcome(source, Status.UNCHANGED, [where])
    if not program.trains:
        loaded = [d for d in dynamic if reach.loads_code(d[2])]
        backward = program.first_backward()
        if loaded and backward is not None:
            # a computed import may load the module that trains: "nothing to do" would be a guess
            where = _training_unfollowed(
                loaded[0], program.index.path_of(backward), program.index.position(backward)[0], path
            )
            return _outcome(source, Status.REFUSED, [where])
        configured = next((d for d in loaded if d[2].removesuffix("()") in reach.CONFIG_LOADS), None)
        if configured is not None:
            # the objects a config names (``_target_: agent.SACAgent`` in a YAML file) are built from code the
            # program never imports by name: their methods may well be the training
            module, line, construct = configured
            message = (
                "no training step in the code ddpify can follow, but the program builds objects that its "
                f"configuration names (`{construct}` in {module}, line {line}), whose code may train; build them "
                "by their classes where the program picks them, so that ddpify can follow them"
            )
            return _outcome(source, Status.REFUSED, [TRAINING_UNFOLLOWED.at(1, 1, message, path)])
        handed = program.optimizer_handed_away()
        if handed is not None:
            optimizer, outer = handed
            index = program.index
            message = (
                f"no training step (`.backward()`) in the code ddpify can follow, but this optimizer is handed to "
                f"`{index.module_of(outer).code_for_node(outer.func)}(...)` (line {index.position(outer)[0]}), "
                "which it cannot follow: the training runs out of its sight (a library's loop, or code reached "
                "in a way it cannot trace); write the loop out where the script runs it, or use the library's "
                "own distributed support"
            )
            where = TRAINING_IN_A_LIBRARY.at(*index.position(optimizer), message, index.path_of(optimizer))
            return _outcome(source, Status.REFUSED, [where])
        trainer = program.called_and_trains()
        if trainer is not None:
            # a method called on an object ddpify cannot type trains: "nothing to do" would be a guess
            index = program.index
            where_defined = f"`{trainer.name.value}` ({index.path_of(trainer)} line {index.position(trainer)[0]})"
            rivals = _other_overrides(index, trainer)
            how = (
                f"is one of {len(rivals) + 1} subclasses' versions of a method that their base class calls "
                "through `self` (ddpify follows such a call into a subclass only where one subclass defines it); "
                "pick the subclass by its class name where the program builds the object"
                if rivals
                else "is called on an object ddpify cannot trace (a class taken from a dict by its name, or named "
                "by a string, `eval(args.runner)`); build that object by its class where the program picks it"
            )
            message = (
                f"no training step that the program's calls reach as ddpify follows them, but {where_defined} "
                f"trains and {how}"
            )
            return _outcome(source, Status.REFUSED, [TRAINING_OUT_OF_SIGHT.at(1, 1, message, path)])
        files = {name: program.index.paths[tree] for name, tree in program.index.module_names.items()}
        unfollowed = [
            UNFOLLOWED_IMPORT.at(
                line,
                1,
                f"`{construct}` loads a module by a computed name, which ddpify cannot follow: the training step "
                "may be there; import that module by name, or convert its own entry point",
                files.get(module, path),
            )
            for module, line, construct in loaded[:1]
        ]
        return _outcome(source, Status.UNCHANGED, [*unfollowed, nothing_to_do(path)])
    found = concerns.find(program)
    plan = EditPlan(program.index, path, program.names, shared=shared)
    concerns.rewrite(found, plan, options)
    diagnostics = _in_order([*program.diagnostics(), *plan.diagnostics()], path)
    if any(d.severity is Severity.ERROR for d in diagnostics):
        return _outcome(source, Status.REFUSED, diagnostics)
    return plan, diagnostics


def _apply_program(
    source: str | bytes,
    path: str,
    plan: EditPlan,
    diagnostics: list[Diagnostic],
    by_path: dict[str, LocalModule],
) -> Conversion:
    """The edits of a program of several modules, each module compiled and checked on its own."""
    index = plan.index
    code: str | bytes = source
    changed: list[LocalModule] = []  # in the order the modules were given
    broken: list[Diagnostic] = []
    lost: list[Diagnostic] = []
    converted_trees = apply_program(plan)
    for tree in converted_trees:
        file = index.paths[tree]
        failure = None if tree is index.module else round_trip_failure(tree, by_path[file].source, file)
        if failure is not None:
            return _outcome(source, Status.INVALID, [failure])
    for tree, converted in converted_trees.items():
        file = index.paths[tree]
        original = source if tree is index.module else by_path[file].source
        text = converted.code  # each read of ``.code`` (or ``.bytes``) prints the whole tree again
        new = text.encode(converted.encoding) if isinstance(original, bytes) else text
        compile_quietly(new, file)
        before = _decoded(original, tree)
        lost += bindings.lost_bindings(before, text, file)
        broken += invariants.check(text, file, entry=tree is index.module, original=before)
        if tree is index.module:
            code = new
            continue
        changed.append(replace(by_path[file], code=new))
    if lost:
        return _outcome(source, Status.INTERNAL_ERROR, [*diagnostics, *lost])
    if broken:
        return _outcome(source, Status.REFUSED, [*diagnostics, *broken])
    return Conversion(
        source, code, Status.CONVERTED, tuple(_in_order(diagnostics, path)), _changes(plan, path), tuple(changed)
    )


def _with_stops(
    source: str | bytes,
    path: str,
    options: Options,
    modules: Sequence[LocalModule],
    program: Program,
    refused: Conversion,
) -> Conversion:
    """The program converted with each setting's branch that cannot be converted stopped at its start
    (:mod:`ddpify.stops`); ``refused`` when that does not cover every error, or the rest does not convert."""
    errors = [d for d in refused.diagnostics if d.severity is Severity.ERROR]
    if len(errors) != sum(1 for _, code, _ in program.findings if code.severity is Severity.ERROR):
        return refused  # an error the program's code does not place (a broken invariant)
    found = stops.find_stops(program)
    if found is None:
        return refused
    chosen, warnings = found
    index = program.index
    trees = {file: tree for tree, file in index.paths.items()}
    by_path = {local.path: local for local in modules}
    for file in sorted({index.path_of(stop.branch) for stop in chosen} - {path}):
        failure = round_trip_failure(trees[file], by_path[file].source, file)
        if failure is not None:
            return _outcome(source, Status.INVALID, [failure])

    def pruned(tree: cst.Module | None, original: str | bytes) -> str | bytes:
        new = stops.pruned(tree, chosen) if tree is not None else None
        if new is None or new is tree:
            return original
        return new.bytes if isinstance(original, bytes) else new.code

    second = _convert(
        pruned(index.module, source),
        path,
        options,
        [replace(local, source=pruned(trees.get(local.path), local.source)) for local in modules],
        stopping=False,
    )
    if second.status is not Status.CONVERTED:
        return refused
    stopped_files = {index.path_of(stop.branch) for stop in chosen}
    code = stops.restored(second.code, chosen) if path in stopped_files else second.code
    lost = bindings.lost_bindings(index.module.code, _text(code), path) if path in stopped_files else []
    changed: dict[str, LocalModule] = {}
    for local in second.modules:
        original = by_path[local.path]
        new = (
            stops.restored(local.code, chosen) if local.path in stopped_files and local.code is not None else local.code
        )
        changed[local.path] = replace(local, source=original.source, code=new)
    for file in sorted(stopped_files - {path} - changed.keys()):
        original = by_path[file]
        new = stops.restored(pruned(trees[file], original.source), chosen)
        if new != original.source:
            changed[file] = replace(original, code=new)
    for file in sorted(stopped_files & changed.keys()):
        lost += bindings.lost_bindings(_text(by_path[file].source), _text(changed[file].code or ""), file)
    for file, new in [(path, code), *((f, module.code or "") for f, module in changed.items())]:
        compile_quietly(new, file)
    if lost:
        return _outcome(source, Status.INTERNAL_ERROR, [*refused.diagnostics, *lost])
    here = [
        Change(
            index.position(stop.branch.body[0])[0],
            "this path stops here, at its start: see DDP015",
            index.path_of(stop.branch),
        )
        for stop in chosen
        if stop.kept
    ]
    return Conversion(
        source,
        code,
        Status.CONVERTED,
        tuple(_in_order([*second.diagnostics, *warnings], path)),
        tuple(sorted([*second.changes, *here], key=lambda c: (c.path != path, c.path, c.line))),
        tuple(changed[local.path] for local in modules if local.path in changed),
    )


def _decoded(source: str | bytes, tree: cst.Module) -> str:
    """The text of ``source``, libcst's tree of it (which reproduces it byte for byte: ``parse_checked``)."""
    return source if isinstance(source, str) else source.decode(tree.encoding)


def _text(code: str | bytes) -> str:
    return code if isinstance(code, str) else cst.parse_module(code).code


def _in_order(diagnostics: list[Diagnostic], path: str) -> list[Diagnostic]:
    """The entry script's findings first, then each other module's, each in source order."""
    return sorted(diagnostics, key=lambda d: (d.path != path, d.path, d.line, d.column, d.code))


def _changes(plan: EditPlan, path: str) -> tuple[Change, ...]:
    return tuple(sorted(plan.changes(), key=lambda c: (c.path != path, c.path, c.line)))


def _outcome(source: str | bytes, status: Status, diagnostics: list[Diagnostic]) -> Conversion:
    return Conversion(source, source, status, tuple(diagnostics))

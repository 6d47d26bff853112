"""Downloads: a data set built with ``download=`` is fetched once, not by every rank at the same time.

N processes downloading and unpacking into one folder overwrite each other's
half-written files. The statements that build the data sets take turns
instead: global rank 0 first, then the first process of every other node (on
a file system of its own it must fetch the files too; on a shared one it finds
them in place), then all the others, which find the files in place. Each
process passes two barriers, so the turns hold on one node or many::

    train_set = MNIST("data", download=True)
    ->  if dist.get_rank() != 0:
            dist.barrier()
        if int(os.environ.get("LOCAL_RANK", 0)) != 0:
            dist.barrier()
        train_set = MNIST("data", download=True)
        if dist.get_rank() == 0:
            dist.barrier()
        if int(os.environ.get("LOCAL_RANK", 0)) == 0:
            dist.barrier()

Consecutive statements that download (a training and a test set) take their
turn together. ``download=`` is recognised on any call (torchvision,
torchaudio and torchtext data sets, or the script's own class), and any value
but ``False`` counts: ``download=args.download`` downloads on request. So is
a call into the program's own code that fetches files (``urllib``,
``requests``, ``torch.hub.download_url_to_file``, a shell command that runs
``wget``, ``curl`` or ``unzip``...): that code runs as it
is, output and writes included, since the ranks run it in turns. The same
holds for code that writes a cache file only when it is missing
(``if not os.path.exists(cache): ... torch.save(data, cache)``, often in a data
set's ``__init__``, also with the test in a method: ``if not self._prepared():``):
rank 0 writes it, and the others find it in place.

Limits: a download where the rank cannot be asked yet (before the process
group is set up), one inside a compound statement's header or in a statement
that also trains, is reported (DDP209), not changed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify.concerns import model, process_group
from ddpify.diagnostics import Code, Severity
from ddpify.engine.edits import EditPlan, Statement, fresh, statement
from ddpify.engine.index import Index
from ddpify.engine.program import Program
from ddpify.engine.syntax import argument
from ddpify.engine.uniformity import files
from ddpify.result import Options

DOWNLOAD_ON_EVERY_RANK = Code(
    "DDP209",
    Severity.WARNING,
    "downloads",
    "a data set built with download= is fetched by every rank at once, where ddpify cannot make one go first",
    "download it before launching, or build it on rank 0 first with a dist.barrier() before the others build it",
)
CODES = (DOWNLOAD_ON_EVERY_RANK,)


@dataclass(frozen=True)
class Download:
    """Consecutive statements of one block that build data sets with ``download=``."""

    first: cst.SimpleStatementLine
    last: cst.SimpleStatementLine
    fetches: bool = True  # False: the statements only build cache files (no download)


@dataclass(frozen=True)
class Facts:
    downloads: tuple[Download, ...]
    # the program's functions that fetch files from the network (and those that call them on the way):
    # they run in turns, rank 0 first, so that their output and writes stay as they are
    fetchers: frozenset[cst.FunctionDef] = frozenset()

    def in_turns(self, index: Index, node: cst.CSTNode) -> bool:
        """Whether ``node`` runs in a function that fetches files, which the ranks run in turns."""
        return any(a in self.fetchers for a in index.ancestors(node))


# Calls that fetch files from the network (a data set's own download code).
FETCHES = frozenset(
    {
        "urllib.request.urlopen",
        "urllib.request.urlretrieve",
        "six.moves.urllib.request.urlopen",
        "six.moves.urllib.request.urlretrieve",
        "requests.get",
        "wget.download",
        "gdown.download",
        "torch.hub.download_url_to_file",
        "torchvision.datasets.utils.download_url",
        "torchvision.datasets.utils.download_and_extract_archive",
    }
)

# Calls that run a shell command, and the commands among them that fetch or unpack files into a folder
SHELL_CALLS = frozenset(
    {
        "os.system",
        "os.popen",
        "subprocess.run",
        "subprocess.call",
        "subprocess.check_call",
        "subprocess.check_output",
        "subprocess.Popen",
    }
)
_SHELL_FETCH = re.compile(r"\b(wget|curl|gdown|aria2c|unzip)\b|\btar\s+-?[a-zA-Z]*x")


def _fetches_by_shell(index: Index, call: cst.Call) -> bool:
    """``os.system("wget URL; unzip ZIP")``, ``subprocess.run(["unzip", path])``: a command that downloads
    files or unpacks an archive."""
    if not call.args or not index.is_call_to(call, SHELL_CALLS):
        return False
    return _SHELL_FETCH.search(index.module_of(call).code_for_node(call.args[0].value)) is not None


PATH_CLASSES = frozenset({"pathlib.Path"})
OPENS = frozenset({"builtins.open", "io.open"})
# Calls that save to a path: the keyword and position of the path.
SAVES = {
    "torch.save": ("f", 1),
    "numpy.save": ("file", 0),
    "numpy.savez": ("file", 0),
    "numpy.savez_compressed": ("file", 0),
    "h5py.File": ("name", 0),
    "lmdb.open": ("path", 0),  # a database folder, written unless opened readonly
}


def find(program: Program, setup: process_group.Facts, models: model.Facts | None = None) -> Facts:
    index = program.index
    statements: list[cst.SimpleStatementLine] = []
    # DDP's constructor waits for every rank: a call that also wraps a model cannot run while the others wait
    # at a barrier, so the turns go around the fetch inside it
    wraps = tuple(m.insert_after for m in models.models) if models is not None else ()
    fetchers = _fetchers(index, wraps=wraps)
    downloading = [*_downloading(index), *_calling(index, _fetchers(index, caches=False, wraps=wraps))]
    fetching = {index.statement_of(call) for call in downloading}
    untaken: set[cst.FunctionDef] = set()  # fetchers some call of which cannot take its turn
    for call in [*downloading, *_calling(index, fetchers)]:
        stmt = index.statement_of(call)
        why = _why_not(index, setup, stmt)
        if why is not None and (callee := index.runs(call, index.scope_of(call))) is not None:
            untaken.add(callee[0])
        if why is not None and stmt in fetching:
            program.report(
                call,
                DOWNLOAD_ON_EVERY_RANK,
                f"every rank downloads this data set at the same time into the same folder ({why}); download it "
                "before launching, or build it on rank 0 first and on the others after a dist.barrier()",
            )
        elif why is not None:
            program.report(
                call,
                DOWNLOAD_ON_EVERY_RANK,
                f"every rank may write the same cache file at once here, the file being missing on each ({why}); "
                "build the cache before launching, or on rank 0 first and on the others after a dist.barrier()",
            )
        elif isinstance(stmt, cst.SimpleStatementLine) and stmt not in statements:
            statements.append(stmt)
    runs = [replace(run, fetches=_run_fetches(index, run, fetching)) for run in _runs(index, statements)]
    # a fetcher that runs on every rank at once keeps no exemption: its output goes to rank 0 as anywhere else
    taken = frozenset(f for f in fetchers if f not in untaken)
    if runs:
        taken |= _first_use_methods(index)
    return Facts(tuple(runs), _with_helpers(index, taken))


def _with_helpers(index: Index, fetchers: frozenset[cst.FunctionDef]) -> frozenset[cst.FunctionDef]:
    """The fetchers and the functions only they call (``self._build(cache)``): all of that runs in turns,
    so its writes stay as they are, on every rank in its turn."""
    found = set(fetchers)
    grown = True
    while grown:
        grown = False
        for function in list(found):
            for call in index.walk(function.body):
                if type(call) is not cst.Call:
                    continue
                callee = index.runs(call, index.scope_of(call))
                if callee is None or callee[0] in found:
                    continue
                callers = index.callers(callee[0])
                if callers and all(any(a in found for a in index.ancestors(c)) for c in callers):
                    found.add(callee[0])
                    grown = True
    return frozenset(found)


def _run_fetches(index: Index, run: Download, fetching: set[cst.BaseStatement]) -> bool:
    block = index.parent(run.first)
    body = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else [run.first]
    return any(stmt in fetching for stmt in body[body.index(run.first) : body.index(run.last) + 1])


def _fetchers(
    index: Index, *, caches: bool = True, wraps: tuple[cst.BaseStatement, ...] = ()
) -> frozenset[cst.FunctionDef]:
    """The program's functions that fetch files from the network or (with ``caches``) build a cache
    file on first use, and the functions that call them, but for those where a model is wrapped (``wraps``)."""
    found: set[cst.FunctionDef] = set()
    for call in index.calls:
        if (index.is_call_to(call, FETCHES) or _fetches_by_shell(index, call)) and isinstance(
            scope := index.scope_of(call), cst.FunctionDef
        ):
            found.add(scope)
    if caches:
        found.update(_cache_builders(index))
    wrapping = _wrapping(index, wraps) if wraps else frozenset()
    frontier = list(found)
    while frontier:
        for caller in index.callers(frontier.pop()):
            scope = index.scope_of(caller)
            if (
                isinstance(scope, cst.FunctionDef)
                and scope not in found
                and not index.trains(scope.body)
                and scope not in wrapping
            ):
                found.add(scope)
                frontier.append(scope)
    return frozenset(found)


def _wrapping(index: Index, wraps: tuple[cst.BaseStatement, ...]) -> frozenset[cst.FunctionDef]:
    """The functions that wrap a model (``wraps``), themselves or through the program's functions they call
    (``model = to_device(model)``, where ``to_device`` wraps): DDP's constructor waits for every rank. Found
    backwards from the wraps, each call followed once."""
    found = {f for wrap in wraps for f in index.ancestors(wrap) if isinstance(f, cst.FunctionDef)}
    frontier = sorted(found, key=lambda f: index.order[f])
    while frontier:
        function = frontier.pop()
        for call in index.callers(function):
            runs = index.runs(call, index.scope_of(call))
            if runs is None or runs[0] is not function:
                continue
            for outer in index.ancestors(call):
                if isinstance(outer, cst.FunctionDef) and outer not in found:
                    found.add(outer)
                    frontier.append(outer)
    return frozenset(found)


def _cache_builders(index: Index) -> Iterator[cst.FunctionDef]:
    """Functions that write a file only when it is missing (``if not os.path.exists(cache): ...
    pickle.dump(data, open(cache, "wb"))``) and read it after: every rank would find it missing,
    build it and write it at once, and read another rank's half-written file. (A log file appended
    to, whose header goes in first, is output: rank 0 writes it.)"""
    for node in index.nodes_of(cst.If):
        assert isinstance(node, cst.If)
        scope = index.scope_of(node)
        if not isinstance(scope, cst.FunctionDef):
            continue
        test, negated = node.test, False
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
            test = test.right  # ``rebuild or not os.path.exists(cache)``: the body runs when it is missing
            if not (isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)):
                continue
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, negated = test.expression, True
        path = _existence_query(index, test)
        missing = node.body if negated else node.orelse
        if path is None or missing is None:
            continue
        if _builds(index, missing, path) and not _appended_to(index, scope, path):
            yield scope


def _builds(index: Index, node: cst.CSTNode, path: str, depth: int = 0) -> bool:
    """Whether running ``node`` writes the file at ``path``: itself, or in a function or method of the
    program it calls (``self._create_data()``, whose ``open(path, "wb")`` names the same path)."""
    for inner in index.walk(node):
        if type(inner) is not cst.Call:
            continue
        if _writes(index, inner, path):
            return True
        callee = index.runs(inner, index.scope_of(inner)) if depth < 3 else None
        if callee is not None and _builds(index, callee[0].body, path, depth + 1):
            return True
    return False


def _appended_to(index: Index, scope: cst.FunctionDef, path: str) -> bool:
    """Whether the function opens ``path`` to append to it: a log whose header is written when it is missing,
    not a cache (no cache is appended to)."""
    for call in index.walk(scope.body):
        if type(call) is cst.Call and index.is_call_to(call, OPENS) and call.args and not call.args[0].star:
            mode = argument(call, "mode", 1)
            if (
                index.module.code_for_node(call.args[0].value) == path
                and mode is not None
                and isinstance(mode.value, cst.SimpleString)
                and "a" in str(mode.value.evaluated_value)
            ):
                return True
    return False


def _existence_query(index: Index, test: cst.BaseExpression, depth: int = 0) -> str | None:
    """The path that ``os.path.exists(p)`` (``isfile``, ``Path(p).exists()``, ``p.is_file()``) asks about; also
    through a function of the program that returns such a test (``if not self._ready():``)."""
    path = files.queried(index, test) if isinstance(test, cst.Call) else None
    if path is None and isinstance(test, cst.Call) and depth < 2:
        callee = index.runs(test, index.scope_of(test))
        returned = index.returned_values(callee[0]) if callee is not None else []
        if len(returned) == 1:
            return _existence_query(index, returned[0], depth + 1)
    if isinstance(path, cst.Call) and index.is_call_to(path, PATH_CLASSES) and path.args:
        path = path.args[0].value  # ``Path(cache).exists()`` asks about ``cache``
    return index.module.code_for_node(path) if path is not None else None


def _writes(index: Index, call: cst.Call, path: str) -> bool:
    """Whether ``call`` writes the file at ``path`` (the same expression): opened for writing, or saved to."""
    target = None
    if index.is_call_to(call, OPENS):
        mode = argument(call, "mode", 1)
        writing = mode is not None and isinstance(mode.value, cst.SimpleString) and set("wax") & set(mode.value.value)
        target = argument(call, "file", 0) if writing else None
    else:
        for name in sorted(index.qualified_names(call.func) & SAVES.keys()):
            readonly = argument(call, "readonly")
            if readonly is not None and not m.matches(readonly.value, m.Name("False")):
                continue
            target = argument(call, *SAVES[name])
    if target is None:
        return False
    written = target.value
    if index.module.code_for_node(written) == path:
        return True
    return (  # ``os.path.join(cache, "table.pt")``: a file in the folder asked about
        isinstance(written, cst.Call)
        and index.is_call_to(written, frozenset({"os.path.join"}))
        and bool(written.args)
        and not written.args[0].star
        and index.module.code_for_node(written.args[0].value) == path
    )


def _calling(index: Index, fetchers: frozenset[cst.FunctionDef]) -> Iterator[cst.Call]:
    """Calls from outside those functions into them: where the ranks take their turns."""
    for call in index.calls:
        callee = index.resolve_callee(call, index.scope_of(call)) if fetchers else None
        if callee is not None and callee[0] in fetchers and index.scope_of(call) not in fetchers:
            yield call


def _downloading(index: Index) -> Iterator[cst.Call]:
    """Calls given ``download=`` anything but ``False``, and data sets that fetch and process their files
    when they find them missing, with no ``download=`` to ask: PyTorch Geometric's and OGB's, and the
    program's own subclasses of PyTorch Geometric's ``Dataset`` (whose installed constructor runs their
    ``download()`` and ``process()``)."""
    for call in index.calls:
        download = argument(call, "download")
        if download is None:
            if _fetching_data_set(index, call) or _graph_data_sets(index, call):
                yield call
        elif not (isinstance(download.value, cst.Name) and download.value.value == "False"):
            yield call


# Data sets of installed libraries that download and process their files on first use.
GRAPH_DATASET_BASES = frozenset(
    {
        "torch_geometric.data.Dataset",
        "torch_geometric.data.InMemoryDataset",
        "torch_geometric.data.dataset.Dataset",
        "torch_geometric.data.in_memory_dataset.InMemoryDataset",
    }
)


# Calls of installed libraries that fetch files into a cache folder when they find them missing.
LIBRARY_FETCHES = frozenset(
    {
        "nltk.download",
        "gensim.downloader.load",
        "torchtext.vocab.GloVe",
        "torchtext.vocab.FastText",
        "torchtext.vocab.CharNGram",
        "torchtext.vocab.vectors.GloVe",
        "torchtext.vocab.vectors.FastText",
        "torchtext.vocab.vectors.CharNGram",
    }
)


def _fetching_data_set(index: Index, call: cst.Call) -> bool:
    """A data set (PyTorch Geometric's, OGB's, torchtext's: ``datasets.IMDB.splits(text, label)``) or word
    vectors (``GloVe(name="6B")``, ``nltk.download("punkt")``) that a library fetches on first use."""
    return any(
        q.startswith(("torch_geometric.datasets.", "torchtext.datasets.", "torchtext.legacy.datasets."))
        or (q.startswith("ogb.") and q.endswith("Dataset"))
        or q in LIBRARY_FETCHES
        for q in index.qualified_names(call.func)
    )


def _graph_data_sets(index: Index, call: cst.Call) -> list[cst.ClassDef]:
    """The program's own class that ``call`` builds, where it derives from PyTorch Geometric's ``Dataset``."""
    cls = index.local_class(call.func)
    return [cls] if cls is not None and index.derives_from(cls, GRAPH_DATASET_BASES) else []


def _first_use_methods(index: Index) -> frozenset[cst.FunctionDef]:
    """``download()`` and ``process()`` of the program's subclasses of PyTorch Geometric's ``Dataset``: the
    installed constructor runs them when the files are missing, on each rank in its turn."""
    found = set()
    for cls in index.classes.values():
        if index.derives_from(cls, GRAPH_DATASET_BASES):
            for name in ("download", "process"):
                method = index.functions.get((cls, name))
                if method is not None:
                    found.add(method)
    return frozenset(found)


def _why_not(index: Index, setup: process_group.Facts, stmt: cst.BaseStatement) -> str | None:
    """Why the statement ``stmt`` cannot take its turn behind barriers, or None when it can."""
    if not isinstance(stmt, cst.SimpleStatementLine) or not isinstance(
        index.parent(stmt), (cst.IndentedBlock, cst.Module)
    ):
        return "it is part of a compound statement"
    if setup.runs_before_setup(index, stmt):
        return "it runs before the process group is set up"
    if index.trains(stmt):
        return "the same statement trains, which every rank must do together"
    return None


def _runs(index: Index, statements: list[cst.SimpleStatementLine]) -> Iterator[Download]:
    """The statements grouped into runs of neighbours in one block."""
    position: dict[cst.CSTNode, tuple[cst.CSTNode | None, int]] = {}
    for stmt in statements:
        block = index.parent(stmt)
        body = block.body if isinstance(block, (cst.IndentedBlock, cst.Module)) else ()
        position[stmt] = (block, next(i for i, s in enumerate(body) if s is stmt))
    run: list[cst.SimpleStatementLine] = []
    for stmt in sorted(statements, key=lambda s: index.order[s]):
        if run and position[run[-1]][0] is position[stmt][0] and position[run[-1]][1] + 1 == position[stmt][1]:
            run.append(stmt)
            continue
        if run:
            yield Download(run[0], run[-1])
        run = [stmt]
    if run:
        yield Download(run[0], run[-1])


COMMENT = "# Rank 0 {what} first, then one process on each other node (its disk may not be shared), then the rest."


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    dist, os = plan.names.dist, plan.names.os
    local_rank = f'int({os}.environ.get("LOCAL_RANK", 0))'
    for download in facts.downloads:
        first = download.first
        before = [_wait(plan.with_group(first, t), dist) for t in (f"{dist}.get_rank() != 0", f"{local_rank} != 0")]
        after = [_wait(plan.with_group(first, t), dist) for t in (f"{dist}.get_rank() == 0", f"{local_rank} == 0")]
        what = "downloads" if download.fetches else "builds the cache"
        comment = cst.EmptyLine(comment=cst.Comment(COMMENT.format(what=what)))
        if not plan.before.get(download.first):  # the turns open under the statement's blank lines and comments
            leading = [*download.first.leading_lines, comment]
            plan.replace(download.first, lambda n: statement(n).with_changes(leading_lines=()))
        else:
            leading = [comment]
        before[0] = before[0].with_changes(leading_lines=leading)
        plan.insert_before(download.first, *before)
        returned = download.last.body[0]
        if isinstance(returned, cst.Return) and returned.value is not None:
            # ``return datasets.MNIST(...)`` in a factory: the value is kept while the others take their turn
            name = fresh("dataset", plan.index.identifiers)
            plan.replace(download.last, partial(_kept_in, name=name))
            after.append(statement(cst.parse_statement(f"return {name}\n")))
        plan.insert_after(download.last, *after)
        kind = "download: rank 0 builds the data set" if download.fetches else "cache file: rank 0 writes it"
        plan.change(
            download.first,
            f"{kind} first, then the first process of each other node, then the rest (dist.barrier() between "
            "the turns)",
        )


def _kept_in(node: cst.CSTNode, name: str) -> cst.CSTNode:
    """``return value`` as ``name = value``."""
    line = cast(cst.SimpleStatementLine, node)
    value = cast(cst.BaseExpression, cast(cst.Return, line.body[0]).value)
    return line.with_changes(body=[cst.Assign([cst.AssignTarget(cst.Name(name))], value)])


def _wait(test: str, dist: str) -> Statement:
    return statement(cst.parse_statement(f"if {test}:\n    {dist}.barrier()\n"))

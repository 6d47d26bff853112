"""A look at the file system that another rank may already have changed.

A file read is the same on every rank, as long as no rank changes it before
the others have read it. Set-up code often looks before it changes::

    if os.path.exists(args.log_path):
        if not args.overwrite:
            sys.exit("the folder exists")
        shutil.rmtree(args.log_path)
    os.makedirs(args.log_path)

One process looks before it makes. N processes race: rank 1 may make the
folder before rank 0 looks, and rank 0 then takes the other branch (it exits,
or removes a folder the others are using) while the others train and wait for
it. :func:`raced_checks` finds such looks; every rank then takes rank 0's
answer (``same_on_every_rank``), which rank 0 gives before any rank can go on.

A look whose ``if`` does nothing but change that path, or say so
(``if not os.path.exists(d): os.makedirs(d)``), is harmless either way and
left as it is.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ddpify import torch_api
from ddpify.engine.index import Index

# Calls that tell whether a path exists; their path is the first argument.
QUERIES = frozenset({"os.path.exists", "os.path.isdir", "os.path.isfile", "os.path.lexists"})
# ``Path(...).exists()``: the path is the receiver.
QUERY_METHODS = frozenset({"exists", "is_dir", "is_file"})
# Calls that make, remove or replace the path among their arguments.
CHANGES = frozenset(
    {
        "os.makedirs",
        "os.mkdir",
        "os.remove",
        "os.unlink",
        "os.rmdir",
        "os.rename",
        "os.replace",
        "shutil.rmtree",
        "shutil.copytree",
        "shutil.copy",
        "shutil.copyfile",
        "shutil.move",
    }
)
CHANGE_METHODS = frozenset({"mkdir", "rmdir", "unlink", "touch"})
# What an ``if`` may also do and stay harmless whichever branch a rank takes: say so.
_REPORTS = frozenset({"builtins.print"})
_LOG_METHODS = torch_api.LOGGER_METHODS - {"log"}  # (``x.log(...)`` alone may be arithmetic)


def _reports(index: Index, call: cst.BaseExpression) -> bool:
    """``print(...)``, ``logging.info(...)`` or ``logger.warning(...)``."""
    return isinstance(call, cst.Call) and (
        index.is_call_to(call, _REPORTS)
        or (isinstance(call.func, cst.Attribute) and call.func.attr.value in _LOG_METHODS)
    )


def raced_checks(index: Index) -> Iterator[cst.Call]:
    """Each look at a path in the test of an ``if`` that the program changes right after, in source order."""
    for node in index.nodes_of(cst.If):
        if not isinstance(node, cst.If):
            continue
        for call in _queries(index, node.test):
            path = _text(index, queried(index, call))
            if (
                path is not None
                and not _harmless(index, node, path)
                and not _rank_aware(index, node)
                and _changed_after(index, node, path)
            ):
                yield call


def removals_after_looks(index: Index) -> Iterator[cst.SimpleStatementLine]:
    """The lines that only remove a path under an ``if`` that looks at it (``if os.path.isdir(log_dir):
    shutil.rmtree(log_dir)``): every rank that looks before another has removed it would remove it too, and
    fail, or take what that rank has made there since."""
    for stmt in index.nodes_of(cst.If):
        if not isinstance(stmt, cst.If):
            continue
        paths = {_text(index, queried(index, call)) for call in _queries(index, stmt.test)} - {None}
        for line in index.children.get(stmt.body, ()):  # (the index's own form of a one-line body too)
            if (
                isinstance(line, cst.SimpleStatementLine)
                and len(line.body) == 1
                and isinstance(small := line.body[0], cst.Expr)
                and _removes(index, small.value)
                and any(_changes(index, small.value, path) for path in paths if path is not None)
            ):
                yield line


def _queries(index: Index, test: cst.BaseExpression) -> Iterator[cst.Call]:
    for node in index.walk(test):
        if isinstance(node, cst.Call) and queried(index, node) is not None:
            yield node


def queried(index: Index, call: cst.Call) -> cst.BaseExpression | None:
    """The path a query looks at: ``p`` in ``os.path.exists(p)`` or ``p.exists()``; None for other calls."""
    func = call.func
    if index.is_call_to(call, QUERIES):
        first = call.args[0] if call.args else None
        return first.value if first is not None and first.keyword is None and not first.star else None
    if isinstance(func, cst.Attribute) and func.attr.value in QUERY_METHODS and not call.args:
        return None if index.qualified_names(func) else func.value
    return None


_JOINS = frozenset({"os.path.join", "posixpath.join"})


def _text(index: Index, expr: cst.BaseExpression | None) -> str | None:
    """A path as one spelling, whichever way it is written: ``"runs/" + name``, ``f"runs/{name}"`` and
    ``os.path.join("runs", name)`` are all ``runs/{name}``; a name given one value in its scope is that
    value; any other expression is its source text in braces. None for what names no path."""
    text = _spelled(index, expr, 0)
    return _tidy(text) if text is not None else None


def _spelled(index: Index, expr: cst.BaseExpression | None, depth: int) -> str | None:
    if expr is None or depth > 3:
        return None
    code = index.module_of(expr).code_for_node
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    if isinstance(expr, cst.FormattedString):
        pieces = [
            part.value if isinstance(part, cst.FormattedStringText) else "{" + code(part.expression) + "}"
            for part in expr.parts
            if isinstance(part, cst.FormattedStringText | cst.FormattedStringExpression)
        ]
        return "".join(pieces) if len(pieces) == len(expr.parts) else None
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        left, right = _spelled(index, expr.left, depth + 1), _spelled(index, expr.right, depth + 1)
        return left + right if left is not None and right is not None else None
    if isinstance(expr, cst.Call) and index.is_call_to(expr, _JOINS) and not any(a.star for a in expr.args):
        parts = [text for arg in expr.args if (text := _spelled(index, arg.value, depth + 1)) is not None]
        return "/".join(parts) if parts and len(parts) == len(expr.args) else None
    if isinstance(expr, cst.Name) and (ref := index.ref_of(expr, index.scope_of(expr))) is not None:
        values = [value for _, value in index.values_assigned(ref)]
        if len(values) == 1 and (text := _spelled(index, values[0], depth + 1)) is not None:
            return text
    if isinstance(expr, cst.Name | cst.Attribute | cst.Call):
        return "{" + code(expr) + "}"
    return None


def _tidy(path: str) -> str:
    """``runs//a/`` -> ``runs/a``: the spellings of one path made one."""
    while "//" in path:
        path = path.replace("//", "/")
    return path.rstrip("/") or path


def _changes(index: Index, node: cst.CSTNode, path: str) -> bool:
    """Whether ``node`` is a call that makes, removes or replaces ``path``."""
    if not isinstance(node, cst.Call):
        return False
    if index.is_call_to(node, CHANGES):
        return any(_text(index, arg.value) == path for arg in node.args)
    func = node.func  # ``Path(...).mkdir()``: the receiver is the path
    return (
        isinstance(func, cst.Attribute)
        and func.attr.value in CHANGE_METHODS
        and not index.qualified_names(func)
        and _text(index, func.value) == path
    )


def _harmless(index: Index, stmt: cst.If, path: str) -> bool:
    """``if [not] exists(p): <changes of p, prints>`` with no other branch: the same outcome either way."""
    if stmt.orelse is not None:
        return False
    for line in stmt.body.body:
        if not isinstance(line, cst.SimpleStatementLine):
            return False
        for small in line.body:
            if not isinstance(small, cst.Expr) or not (
                _changes(index, small.value, path) or _reports(index, small.value)
            ):
                return False
    return True


# Changes that fail, or take what another rank has made, where another rank got there first.
_REMOVALS = frozenset({"os.remove", "os.unlink", "os.rmdir", "shutil.rmtree"})


def _removes(index: Index, call: cst.BaseExpression) -> bool:
    """``shutil.rmtree(p)``, ``os.remove(p)``, ``p.unlink()``: unlike making a folder, not the same whichever rank
    goes first."""
    return isinstance(call, cst.Call) and (
        index.is_call_to(call, _REMOVALS)
        or (isinstance(call.func, cst.Attribute) and call.func.attr.value in ("unlink", "rmdir"))
    )


_RANK_WORDS = ("rank", "master", "main_process", "is_main", "local_root")


def _rank_aware(index: Index, stmt: cst.If) -> bool:
    """Whether the ``if``, or one around it, already tests the rank (``if is_master and os.path.exists(d)``):
    code written for several processes, which ranks may reach apart, where no collective may be added."""
    for node in (stmt, *(a for a in index.ancestors(stmt) if isinstance(a, cst.If))):
        for name in index.walk(node.test):
            text = (
                name.value if isinstance(name, cst.Name) else name.attr.value if isinstance(name, cst.Attribute) else ""
            )
            if any(word in text.lower() for word in _RANK_WORDS):
                return True
    return False


def _changed_after(index: Index, stmt: cst.If, path: str) -> bool:
    """Whether the ``if`` or the statements after it in its block change ``path`` before training starts."""
    parent = index.parent(stmt)
    siblings = list(parent.body) if isinstance(parent, cst.IndentedBlock | cst.Module) else [stmt]
    for later in siblings[siblings.index(stmt) :]:
        if later is not stmt and index.trains(later):
            return False
        if any(_changes(index, node, path) for node in index.walk(later)):
            return True
    return False

"""Shape tests on libcst nodes: ``matches(node, Call(func=Name("len")))``.

The subset of ``libcst.matchers`` that ddpify uses, with the same meaning:
``Name("x")`` matches a ``cst.Name`` whose ``value`` is ``"x"`` (a positional
argument constrains the node's first field), a keyword constrains the field
of that name, a list constrains a sequence field element by element (same
length), ``a | b`` matches either, and a field left out matches anything.
``libcst.matchers`` is generated for every node type and costs about a
quarter of a second to import, longer than ddpify takes to convert a small
script; these few lines cost nothing.

    import ddpify.engine.match as m
    m.matches(call.func, m.Attribute(attr=m.Name("to") | m.Name("cuda")))
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import libcst as cst


class Pattern:
    """A node of one libcst type whose named fields match their own patterns or values."""

    def __init__(self, kind: type[cst.CSTNode], *positional: Any, **fields: Any) -> None:
        if positional:
            fields[_first_field(kind)] = positional[0]
        self.kind = kind
        self.fields = fields

    def __or__(self, other: Pattern) -> Pattern:
        return _OneOf(self, other)

    def test(self, node: object) -> bool:
        return isinstance(node, self.kind) and all(_value(getattr(node, k), v) for k, v in self.fields.items())


class _OneOf(Pattern):
    def __init__(self, *options: Pattern) -> None:
        self.options = options

    def test(self, node: object) -> bool:
        return any(option.test(node) for option in self.options)


def _value(actual: object, wanted: object) -> bool:
    if isinstance(wanted, Pattern):
        return wanted.test(actual)
    if isinstance(wanted, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(wanted)
            and all(_value(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    return bool(actual == wanted)


def matches(node: cst.CSTNode | None, pattern: Pattern) -> bool:
    """Whether ``node`` has the shape ``pattern`` describes."""
    return node is not None and pattern.test(node)


def findall(tree: cst.CSTNode, pattern: Pattern) -> list[cst.CSTNode]:
    """Every node of ``tree`` (``tree`` included) that matches ``pattern``, in source order."""
    return [node for node in _walk(tree) if pattern.test(node)]


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from _walk(child)


@functools.cache
def _first_field(kind: type[cst.CSTNode]) -> str:
    return dataclasses.fields(kind)[0].name


def __getattr__(name: str) -> Callable[..., Pattern]:
    """``Name``, ``Call``, ...: a pattern for the libcst node type of that name (made once, then kept)."""
    kind = getattr(cst, name, None)
    if not (isinstance(kind, type) and issubclass(kind, cst.CSTNode)):
        raise AttributeError(name)
    factory = functools.partial(Pattern, kind)
    globals()[name] = factory
    return factory

"""Helpers for the per-concern tests: read a snippet as the finders see it."""

from __future__ import annotations

import textwrap
from collections.abc import Callable

import libcst as cst
import pytest

from ddpify.engine.program import Program, read_program


@pytest.fixture
def read() -> Callable[[str], Program]:
    def read(source: str) -> Program:
        return read_program(cst.parse_module(textwrap.dedent(source)), "train.py")

    return read


def code(program: Program, node: cst.CSTNode) -> str:
    return program.index.module.code_for_node(node).strip()


def codes(program: Program) -> list[str]:
    return [diagnostic.code for diagnostic in program.diagnostics()]

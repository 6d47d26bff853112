"""Golden programs of several modules: ``tests/fixtures/projects/<case>/``.

Each case holds ``input/`` (a small project; its entry script is ``train.py``
unless ``entry.txt`` names another), an optional ``options.json``, ``diagnostics.txt`` (the status, every
diagnostic and every change with its file) and ``expected/``, which holds each
file of the program that changes, compared byte for byte. The modules of the
program are found as the command line finds them (:mod:`ddpify.cli.program`).

Regenerate after an intended change with ``DDPIFY_REGENERATE=1 pytest
tests/test_projects.py`` and review the result with ``git diff``.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
from pathlib import Path

import pytest

from ddpify import Conversion, Options, Status, convert
from ddpify.cli.program import local_modules

PROJECTS = Path(__file__).parent / "fixtures" / "projects"
CASES = sorted(p.parent for p in PROJECTS.glob("*/input"))
REGENERATE = os.environ.get("DDPIFY_REGENERATE") == "1"


def entry(case: Path) -> str:
    named = case / "entry.txt"
    return named.read_text().strip() if named.exists() else "train.py"


def options(case: Path) -> Options:
    path = case / "options.json"
    return Options(**json.loads(path.read_text())) if path.exists() else Options()


def convert_project(folder: Path, script: str, settings: Options = Options()) -> Conversion:  # noqa: B008
    """Convert the program of ``folder/script`` with paths relative to ``folder``, as the CLI run there would."""
    cwd = Path.cwd()
    os.chdir(folder)
    try:
        source = Path(script).read_bytes()
        program = local_modules(script, source, max_size=1 << 20, root=Path.cwd())
        return convert(source, path=script, options=settings, modules=program.modules)
    finally:
        os.chdir(cwd)


def report(conversion: Conversion) -> str:
    lines = [f"status: {conversion.status.value}"]
    lines += [f"{d.severity.value}: {d.format()}" for d in conversion.diagnostics]
    lines += [f"change: {c.path}:{c.line}: {c.summary}" for c in conversion.changes]
    return "\n".join(lines) + "\n"


def outputs(conversion: Conversion, script: str) -> dict[str, bytes]:
    files = {m.path: m.code for m in conversion.modules}
    if conversion.code != conversion.source:
        files[script] = conversion.code
    return {path: code for path, code in files.items() if isinstance(code, bytes)}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_project(case: Path, tmp_path: Path) -> None:
    script = entry(case)
    conversion = convert_project(case / "input", script, options(case))
    written = outputs(conversion, script)
    expected = case / "expected"
    if REGENERATE:
        (case / "diagnostics.txt").write_text(report(conversion))
        shutil.rmtree(expected, ignore_errors=True)
        for path, code in written.items():
            (expected / path).parent.mkdir(parents=True, exist_ok=True)
            (expected / path).write_bytes(code)
    assert conversion.status is not Status.INTERNAL_ERROR, report(conversion)
    assert report(conversion) == (case / "diagnostics.txt").read_text()
    want = {str(p.relative_to(expected)): p.read_bytes() for p in expected.rglob("*.py")} if expected.exists() else {}
    assert written == want
    for code in written.values():
        ast.parse(code)
    if written:  # the converted program converts to itself
        shutil.copytree(case / "input", tmp_path / "again")
        for path, code in written.items():
            (tmp_path / "again" / path).write_bytes(code)
        again = convert_project(tmp_path / "again", script, options(case))
        assert again.status is Status.UNCHANGED and not outputs(again, script), report(again)

"""The same input gives the same output bytes: under any hash seed, and with any number of workers.

Every golden input, trial script, bundled example and golden program is converted
in two fresh processes, each under its own ``PYTHONHASHSEED`` (sets of strings,
and so of names, iterate in another order under each), and the outputs, findings
and change reports must agree byte for byte. The command line's ``-j 1`` and
``-j 2`` over the trial scripts and examples must print the same diff.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).parent.parent

DIGESTS = """
import hashlib, json, sys
from pathlib import Path
sys.path.insert(0, "tests")
from ddpify import Options, convert
from test_projects import convert_project, entry, options

def digest(conversion):
    h = hashlib.sha256()
    for code in (conversion.code, *(m.code for m in conversion.modules)):
        h.update(code if isinstance(code, bytes) else b"-")
    h.update(repr([d.format() for d in conversion.diagnostics]).encode())
    h.update(repr([(c.path, c.line, c.summary) for c in conversion.changes]).encode())
    return h.hexdigest()[:16]

fixtures = Path("tests/fixtures")
for case in sorted(fixtures.glob("*/*/input.py")):
    settings = case.parent / "options.json"
    chosen = Options(**json.loads(settings.read_text())) if settings.exists() else Options()
    print(case, digest(convert(case.read_bytes(), path=str(case), options=chosen)))
for script in sorted([*Path("tests/trial").glob("s*.py"), *Path("examples").glob("*.py")]):
    print(script, digest(convert(script.read_bytes(), path=str(script))))
for program in sorted(p.parent for p in (fixtures / "projects").glob("*/input")):
    print(program, digest(convert_project(program / "input", entry(program), options(program))))
"""


def test_every_conversion_is_the_same_under_two_hash_seeds() -> None:
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", DIGESTS],
            cwd=REPOSITORY,
            env={**os.environ, "PYTHONHASHSEED": seed},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in ("0", "4242")
    ]
    outputs = [run.communicate(timeout=600) for run in runs]
    for run, (_, stderr) in zip(runs, outputs):
        assert run.returncode == 0, stderr[-3000:]
    first, other = [stdout.splitlines() for stdout, _ in outputs]
    assert len(first) > 250  # every input was converted
    differ = [a.split()[0] for a, b in zip(first, other) if a != b]
    assert not differ, f"converted differently under another hash seed: {differ}"


def test_one_worker_and_two_print_the_same_diff() -> None:
    def diff(jobs: str, seed: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "ddpify", "tests/trial", "examples", "--diff", "-j", jobs, "--no-color"],
            cwd=REPOSITORY,
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPOSITORY)},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode in (0, 3), result.stderr[-3000:]
        return result.stdout + result.stderr

    one = diff("1", "7")
    assert "+++ " in one
    assert diff("2", "8") == one

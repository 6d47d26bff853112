"""Run ``convert()`` over every ``.py`` file of the running Python's standard library.

The standard library is a large corpus of real code that is *not* training
code: ddpify must leave every file of it byte for byte as it was, and it must
never crash on one.  Each file is read as bytes and converted once; the sweep
prints how many were converted, left unchanged (nothing to do), refused,
turned away as invalid (not Python 3, not decodable, not reproducible byte for
byte), or hit an internal error, and how many files that were *not* converted
came back with different bytes (which must be none).  A converted file is
also checked to compile and to be a fixed point.

    python benchmarks/stdlib_sweep.py                   # every file
    python benchmarks/stdlib_sweep.py --jobs 4          # in 4 processes
    python benchmarks/stdlib_sweep.py --limit 150 --seed 0   # a random sample
    python benchmarks/stdlib_sweep.py --torch           # every file through the parser

A file that never mentions torch takes a quick exit in ``convert()`` (it is
compiled, not parsed by libcst); ``--torch`` appends ``import torch`` to each
file so that every one goes through libcst's round trip and the analysis.

The exit code is 1 when any file hit an internal error or had its bytes
changed, 0 otherwise.  ``tests/test_fuzz.py`` runs a bounded sample in CI.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import random
import sys
import sysconfig
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# Folders under the standard library that hold installed third-party code, not the stdlib.
SKIPPED_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
STATUSES = ("converted", "unchanged", "refused", "invalid", "internal-error")


@dataclass(frozen=True)
class Outcome:
    """What ``convert()`` did with one file."""

    path: str
    status: str
    # Bytes differ although the status says the file was not converted, or a
    # converted output does not compile or is not a fixed point.
    broken: str | None = None
    detail: str = ""


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def python_files(root: Path) -> list[Path]:
    """Every ``.py`` file under ``root``, sorted, outside site-packages and caches."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        found.extend(Path(folder, name) for name in files if name.endswith(".py"))
    return sorted(found)


def sample(files: Sequence[Path], limit: int | None, seed: int) -> list[Path]:
    """A reproducible random subset of ``limit`` files (all of them when ``limit`` is None)."""
    if limit is None or limit >= len(files):
        return list(files)
    return sorted(random.Random(seed).sample(list(files), limit))


def with_torch(source: bytes) -> bytes:
    """``source`` with ``import torch`` appended, in the file's own line ending."""
    newline = b"\r\n" if b"\r\n" in source else b"\n"
    if source and not source.endswith((b"\n", b"\r")):
        source += newline
    return source + b"import torch" + newline


def check_file(path: Path, torch: bool = False) -> Outcome:
    """Convert one file (with ``import torch`` appended if ``torch``) and classify the result; never raises."""
    from ddpify import Status, convert

    try:
        source = path.read_bytes()
    except OSError as exc:
        return Outcome(str(path), "unreadable", detail=str(exc))
    if torch:
        source = with_torch(source)
    try:
        conversion = convert(source, path=str(path))
    except BaseException as exc:
        return Outcome(str(path), "internal-error", detail=f"convert() raised {exc!r}")
    status = conversion.status.value
    detail = "; ".join(d.format() for d in conversion.errors)
    if conversion.status is not Status.CONVERTED:
        broken = "bytes changed" if conversion.code != source else None
        return Outcome(str(path), status, broken, detail)
    try:
        compile(conversion.code, str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return Outcome(str(path), status, f"output does not compile: {exc}", detail)
    again = convert(conversion.code, path=str(path))
    if again.status is not Status.UNCHANGED or again.code != conversion.code:
        return Outcome(str(path), status, f"output is not a fixed point ({again.status.value})", detail)
    return Outcome(str(path), status, None, detail)


def sweep(files: Sequence[Path], jobs: int = 1, *, torch: bool = False) -> list[Outcome]:
    check = functools.partial(check_file, torch=torch)
    if jobs <= 1:
        return [check(path) for path in files]
    with multiprocessing.Pool(jobs) as pool:
        return list(pool.imap_unordered(check, files, chunksize=8))


def summary(outcomes: Iterable[Outcome]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for outcome in outcomes:
        counts[outcome.status] += 1
        if outcome.broken is not None:
            counts["broken"] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=None, help="sweep this folder instead of the stdlib")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="a random sample of N files")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="worker processes (default 1)")
    parser.add_argument(
        "--torch",
        action="store_true",
        help="append `import torch` to every file, so that each one is parsed and analysed "
        "instead of taking the quick exit for files that never mention torch",
    )
    parser.add_argument("--show", type=int, default=10, metavar="N", help="list N files of each problem kind")
    args = parser.parse_args(argv)

    root = args.root or stdlib_root()
    files = sample(python_files(root), args.limit, args.seed)
    start = time.perf_counter()
    outcomes = sweep(files, args.jobs, torch=args.torch)
    elapsed = time.perf_counter() - start
    counts = summary(outcomes)

    print(f"root: {root}")
    appended = ", `import torch` appended" if args.torch else ""
    print(f"python: {sys.version.split()[0]}, files: {len(files)}, jobs: {args.jobs}{appended}")
    for status in (*STATUSES, "unreadable"):
        if counts[status] or status in STATUSES:
            print(f"  {status:15s} {counts[status]:6d}")
    changed = sum(1 for o in outcomes if o.broken == "bytes changed")
    print(f"  {'bytes changed':15s} {changed:6d}  (non-converted files)")
    print(
        f"  {'broken output':15s} {sum(1 for o in outcomes if o.broken and o.broken != 'bytes changed'):6d}"
        "  (converted files that do not compile or are not a fixed point)"
    )
    print(f"time: {elapsed:.1f} s, {len(files) / elapsed if elapsed else 0:.1f} files/s")

    problems = [o for o in outcomes if o.status == "internal-error" or o.broken is not None]
    for outcome in sorted(problems, key=lambda o: o.path)[: args.show]:
        print(f"PROBLEM {outcome.path}: {outcome.broken or outcome.status}: {outcome.detail}")
    for status in ("converted", "refused", "invalid"):
        for outcome in sorted((o for o in outcomes if o.status == status), key=lambda o: o.path)[: args.show]:
            print(f"{status} {outcome.path} {outcome.detail}".rstrip())
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

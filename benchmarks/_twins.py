"""What the twin sweeps (``*_twins.py``) share: the scripts, the comparison and the command line.

A twin is a program Python runs alike: the script with its assignments
annotated, its names renamed, its code split over two modules, and so on. Each
sweep converts every script and its twin and reports where the two
conversions differ; an internal error is never alike.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import libcst as cst

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddpify import convert  # noqa: E402
from ddpify.result import Conversion, Options  # noqa: E402

# What a sweep reads of one conversion: its outcome, its diagnostics and its changes, each as text
Said = tuple[str, list[str], list[str]]


def scripts() -> list[Path]:
    """The default inputs: every golden fixture's input, trial script and bundled example."""
    return [
        *sorted((ROOT / "tests" / "fixtures").glob("*/*/input.py")),
        *sorted((ROOT / "tests" / "trial").glob("*.py")),
        *sorted((ROOT / "examples").glob("*.py")),
    ]


def options_for(path: Path) -> Options:
    """A fixture's ``options.json``, which applies to the script and its twin alike."""
    options_file = path.parent / "options.json"
    return Options(**json.loads(options_file.read_text())) if options_file.exists() else Options()


_CONVERTED: dict[tuple[str, str], Conversion] = {}


def converted(text: str, options: Options) -> Conversion:
    """``convert(text)`` as ``train.py``, kept for the next sweep of the same script: each script is converted
    once per process, however many of its twins are compared with it (the test run sends a script's twins
    to one worker)."""
    key = (text, repr(options))
    if key not in _CONVERTED:
        if len(_CONVERTED) >= 64:
            _CONVERTED.pop(next(iter(_CONVERTED)))
        _CONVERTED[key] = convert(text, path="train.py", options=options)
    return _CONVERTED[key]


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from walk(child)


_SAMPLER = re.compile(r"^training DataLoader: [^;]*")
_MODULE_READS = [
    re.compile(r"^`(?P<model>[\w.\[\]\"']+?)\.module` when it is wrapped"),
    re.compile(r"^`(?P<model>[\w.\[\]\"']+?)(\.\w+|\(\.\.\.\)|\[\.\.\.\])` -> `[\w.\[\]\"']+?\.module"),
    re.compile(r"^(copy|save|pass) `(?P<model>[\w.\[\]\"']+?)\.module`"),
]
_NUMBERS = re.compile(r"\b(line )?\d+\b")
_SHARE = re.compile(r"^(each rank takes its share of (?:the batches )?what )`[^`]*`( draws)")


def kind(summary: str) -> str:
    """A change by its kind: where a twin moves code, the same edit may be written another way (a module
    other scripts may import is edited to run without a process group too; one helper may stand for
    several reads of ``.module``)."""
    summary = _SAMPLER.sub("training DataLoader: sampler", _NUMBERS.sub("N", summary))
    summary = _SHARE.sub(r"\1`a sampler`\2", summary)  # as it is written: in place, or by the twin's helper
    for pattern in _MODULE_READS:
        read = pattern.match(summary)
        if read:
            return f"`{read.group('model')}.module` read"
    return summary


def codes(diagnostics: Iterator[str] | list[str]) -> list[str]:
    """The codes of formatted diagnostics (``path:line:col: DDP201 message`` -> ``DDP201``)."""
    return sorted(d.split(": ", 1)[-1].split(" ", 1)[0] for d in diagnostics)


def compare(plain: Said, other: Said, name: str) -> list[str]:
    """How two conversions differ, the twin's called ``name`` (empty: alike)."""
    if "INTERNAL_ERROR" in (plain[0], other[0]):
        return [f"{plain[0]} -> {other[0]}: an internal error is never alike"]
    if plain == other:
        return []
    found = [f"{plain[0]} -> {other[0]}"]
    for what, a, b in (("diagnostic", plain[1], other[1]), ("change", plain[2], other[2])):
        ca, cb = Counter(a), Counter(b)
        for line in sorted(((ca - cb) + (cb - ca)).keys())[:4]:
            found.append(f"{what} {'only plain' if ca[line] > cb[line] else 'only ' + name}: {line[:160]}")
    return found


def compare_twins(path: Path, made: dict[str, str], said: Callable[[Conversion], Said]) -> list[str] | None:
    """How the conversions of ``path`` and of each of its twins (named by kind) differ, each line led by the
    twin's kind (empty: they do not); None where no twin could be made."""
    if not made:
        return None
    options = options_for(path)
    plain = said(converted(path.read_text(), options))
    found: list[str] = []
    for how, code in made.items():
        other = said(convert(code, path="train.py", options=options))
        found += [f"{how}: {line}" for line in compare(plain, other, how)]
    return found


def compare_twin(path: Path, made: str | None, said: Callable[[Conversion], Said], name: str) -> list[str] | None:
    """How the conversions of ``path`` and of its one twin, called ``name``, differ (empty: they do not);
    None where the twin could not be made."""
    if made is None:
        return None
    options = options_for(path)
    plain, other = said(converted(path.read_text(), options)), said(convert(made, path="train.py", options=options))
    return compare(plain, other, name)


def sweep(name: str, differences: Callable[[Path], list[str] | None], argv: list[str]) -> int:
    """The command line of a sweep: the scripts named (default: :func:`scripts`), each that differs with
    how, and the count; exit 1 when any differs."""
    compared = differ = 0
    for path in [Path(a) for a in argv] or scripts():
        found = differences(path)
        if found is None:
            continue
        compared += 1
        if not found:
            continue
        differ += 1
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {found[0]}")
        for line in found[1:]:
            print(f"  {line}")
    print(f"{name}: {differ} of {compared} scripts convert differently")
    return 1 if differ else 0

"""The registry of diagnostic codes: complete, documented, and every code shown by a golden fixture."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddpify import diagnostics
from ddpify.concerns import CONCERNS, name
from ddpify.diagnostics import Code, Severity, registry

ROOT = Path(__file__).parents[1]
CODE = re.compile(r"\bDDP\d{3}\b")


def documented_codes() -> str:
    """docs/diagnostics.md, where every code is documented (README links to it)."""
    return (ROOT / "docs" / "diagnostics.md").read_text(encoding="utf-8")


def fixture_diagnostics() -> dict[str, set[str]]:
    """Each code found in a golden fixture's diagnostics.txt, with the severities it is shown with."""
    found: dict[str, set[str]] = {}
    for report in (ROOT / "tests" / "fixtures").glob("*/*/diagnostics.txt"):
        for line in report.read_text().splitlines():
            match = re.match(r"(error|warning|info): \S+:\d+:\d+: (DDP\d{3}) ", line)
            if match:
                found.setdefault(match.group(2), set()).add(match.group(1))
    return found


def test_every_code_written_in_the_source_is_registered() -> None:
    registered = registry()
    for path in sorted((ROOT / "ddpify").rglob("*.py")):
        for code in CODE.findall(path.read_text()):
            assert code in registered, f"{path.relative_to(ROOT)} mentions {code}, which is not registered"


def test_every_code_a_concern_defines_is_in_its_codes() -> None:
    registered = set(registry().values())
    for concern in (*CONCERNS, diagnostics):
        for attribute, value in vars(concern).items():
            if isinstance(value, Code):
                assert value in registered, f"{concern.__name__}.{attribute} is not in a CODES tuple"


def test_codes_are_declared_by_the_concern_they_name() -> None:
    for concern in CONCERNS:
        for code in concern.CODES:
            assert code.concern == name(concern), code


def test_each_code_has_a_meaning_and_a_fix() -> None:
    for code in registry().values():
        assert re.fullmatch(r"DDP\d{3}", code.code)
        assert code.meaning and "\n" not in code.meaning, code
        assert code.fix, code


@pytest.mark.parametrize("code", sorted(registry()))
def test_every_code_is_documented(code: str) -> None:
    assert code in documented_codes()


def test_the_docs_list_only_registered_codes() -> None:
    assert set(CODE.findall(documented_codes())) <= set(registry())


@pytest.mark.parametrize(
    "code",
    sorted(c for c in registry() if not c.startswith(("DDP0", "DDP9"))),
)
def test_every_concern_code_is_shown_by_a_golden_fixture(code: str) -> None:
    shown = fixture_diagnostics()
    assert code in shown, f"no fixture under tests/fixtures reports {code}"
    assert shown[code] == {registry()[code].severity.value}, f"{code} is shown as {shown[code]}"


def test_a_diagnostic_takes_its_code_and_severity_from_the_record() -> None:
    code = Code("DDP999", Severity.WARNING, "test", "meaning", "fix")
    diagnostic = code.at(3, 4, "message", "train.py")
    assert (diagnostic.code, diagnostic.severity) == ("DDP999", Severity.WARNING)
    assert diagnostic.format() == "train.py:3:4: DDP999 message"

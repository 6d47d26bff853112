"""The repository's own promises: CI runs README's test command, and the tools it names are configured."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Try it", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section, flags=re.DOTALL)


def test_readme_has_exactly_two_setup_commands() -> None:
    commands = _readme_commands()
    assert len(commands) == 2
    assert all("\n" not in command for command in commands)
    main_job, tests = commands
    assert "torchrun" in main_job and "--diff" in main_job
    assert tests.endswith("-m pytest")


def _full_matrix_command() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Tests\n", 1)[1].split("\n## ", 1)[0]
    (command,) = re.findall(r"```bash\n(.+?)\n```", section, flags=re.DOTALL)
    return str(command)


def test_ci_runs_the_readme_test_command_then_the_full_matrix_after_lint_and_types() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    test_command = _readme_commands()[1]
    assert ci[-2:] == [test_command, _full_matrix_command()]
    assert _full_matrix_command() == ".venv/bin/python -m pytest -m exhaustive"
    steps = "\n".join(ci[:-2])
    for tool in (".venv/bin/ruff check", ".venv/bin/ruff format --check", ".venv/bin/mypy"):
        assert tool in steps


def test_the_quick_torchrun_runs_name_tests_that_exist() -> None:
    from tests.conftest import QUICK_TORCHRUN

    assert 0 < len(QUICK_TORCHRUN) <= 10, "README's test command keeps a few torchrun runs, not the matrix"
    for node in QUICK_TORCHRUN:
        path, _, test = node.partition("::")
        name = test.partition("[")[0]
        assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), node


def test_constraints_pin_what_the_readme_installs() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    run_extra = re.search(r"^run = \[(.*)\]$", pyproject, flags=re.MULTILINE)
    assert run_extra is not None
    assert '"torch>=' in run_extra.group(1), "the run extra accepts a range of torch versions"
    pins = (ROOT / "constraints.txt").read_text(encoding="utf-8")
    assert re.search(r"^torch==\d", pins, flags=re.MULTILINE)
    assert all("-c constraints.txt" in command for command in _readme_commands())


def test_readme_is_a_front_page_that_links_to_the_rest() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 200
    assert readme.index("## Try it") < readme.index("```"), "the two setup commands come first"
    for page in ("changes", "diagnostics", "usage", "files", "verify", "ci", "cluster"):
        assert f"(docs/{page}.md)" in readme, page


PAGES = ["README.md", "CONTRIBUTING.md", *sorted(f"docs/{doc.name}" for doc in (ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_reach_a_file(page: str) -> None:
    path = ROOT / page
    text = path.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (path.parent / target).exists(), f"{page} links to {target}, which does not exist"

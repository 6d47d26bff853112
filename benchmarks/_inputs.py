"""Benchmark inputs built from the bundled examples (shared by the benchmark scripts).

Every input is real example code, renamed so that copies can live side by side
in one file:

* :func:`examples` -- the single-GPU examples as they are (``examples/*.py``
  without ``*_ddp.py``);
* :func:`realistic_script` -- a ~1,000-line "multi-task" training script: every
  example's classes and functions (each example's ``main`` renamed
  ``main_<example>``; the module-level regression script and trainer's main
  guard wrapped into a ``run_<example>`` function),
  a few more renamed copies until the target length is reached, and one
  ``main()`` that dispatches on ``--task``;
* :func:`generated_script` -- a long script of many helper classes and
  functions (renamed copies of every example definition that does not train)
  followed by one training program (mnist_cnn's ``train``/``test``/``main``);
* :func:`variant` -- one example with its top-level definitions renamed, as a
  stand-alone script (for the many-files benchmark).

Renaming goes through libcst's scope analysis, so that only the references to
a top-level definition change -- never an attribute (``model.train()``), a
keyword argument or a method of the same name.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, ScopeProvider

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = ROOT / "examples"

# The example whose training program closes the generated scripts.
TRAINING_PROGRAM = "mnist_cnn"


def examples() -> dict[str, str]:
    """name -> source of every single-GPU example, sorted by name."""
    return {path.stem: path.read_text() for path in sorted(EXAMPLES_DIR.glob("*.py")) if not path.stem.endswith("_ddp")}


def line_count(source: str) -> int:
    return source.count("\n") + (not source.endswith("\n"))


class _Rename(cst.CSTTransformer):
    def __init__(self, targets: dict[cst.CSTNode, str]) -> None:
        self.targets = targets

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        new = self.targets.get(original_node)
        return updated_node.with_changes(value=new) if new else updated_node


@functools.cache
def _parsed(name: str) -> cst.Module:
    return cst.parse_module(examples()[name])


def _renamed(module: cst.Module, mapping: dict[str, str]) -> cst.Module:
    """``module`` with each top-level name in ``mapping`` (and its uses) renamed."""
    wrapper = MetadataWrapper(module)
    scopes = wrapper.resolve(ScopeProvider)
    global_scope = scopes[wrapper.module]
    targets: dict[cst.CSTNode, str] = {}
    for old, new in mapping.items():
        for assignment in global_scope[old]:
            node = getattr(assignment, "node", None)
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                targets[node.name] = new
            for reference in assignment.references:
                if isinstance(reference.node, cst.Name):
                    targets[reference.node] = new
    return wrapper.module.visit(_Rename(targets))


def _is_import(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body
    )


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString)
    )


def _is_main_guard(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.If) and "__name__" in cst.Module([]).code_for_node(statement.test)


def _code(statement: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(statement)


def _top_level_names(module: cst.Module) -> list[str]:
    return [s.name.value for s in module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef))]


# Stands for the suffix while an example is renamed once; each copy then only replaces it.
_SUFFIX = "SUFFIXPLACEHOLDER"


def _parts(name: str, suffix: str) -> tuple[list[str], list[str], str]:
    """(imports, definitions, entry function name) of one renamed example.

    The entry is the example's ``main`` (renamed ``main_<name><suffix>``) when
    its main guard only calls it; otherwise the guard's body (trainer parses
    its arguments there), or the module-level statements of a script without
    functions (regression), become the body of ``run_<name><suffix>()``.
    """
    imports, definitions, entry = _template(name)
    return imports, [d.replace(_SUFFIX, suffix) for d in definitions], entry.replace(_SUFFIX, suffix)


@functools.cache
def _template(name: str) -> tuple[list[str], list[str], str]:
    suffix = _SUFFIX
    module = _parsed(name)
    if _SUFFIX in module.code:
        raise ValueError(f"{name} contains {_SUFFIX}")
    names = _top_level_names(module)
    mapping = {n: (f"main_{name}{suffix}" if n == "main" else f"{n}{suffix}") for n in names}
    module = _renamed(module, mapping)
    imports, definitions, loose = [], [], []
    entry = None
    for statement in module.body:
        if _is_import(statement):
            imports.append(_code(statement).strip())
        elif _is_docstring(statement):
            continue
        elif _is_main_guard(statement):
            body = list(statement.body.body)
            call = f"{mapping.get('main')}()"
            if len(body) == 1 and _code(body[0]).strip() == call:
                entry = mapping["main"]
            else:
                loose.extend(body)
        elif isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            definitions.append(_code(statement).strip("\n") + "\n")
        else:
            loose.append(statement)
    if loose:
        entry = f"run_{name}{suffix}"
        body = cst.Module(loose).code.strip("\n")
        indented = "\n".join(("    " + line) if line.strip() else "" for line in body.splitlines())
        definitions.append(f"def {entry}():\n{indented}\n")
    if entry is None:
        raise ValueError(f"{name}: no entry point found")
    return imports, definitions, entry


def _merge_imports(groups: list[list[str]]) -> list[str]:
    seen: dict[str, None] = {}
    for group in groups:
        for line in group:
            seen.setdefault(line, None)
    plain = sorted(line for line in seen if line.startswith("import "))
    froms = sorted(line for line in seen if line.startswith("from "))
    return [*plain, *froms]


def realistic_script(target_lines: int = 1000) -> str:
    """A multi-task training script of about ``target_lines`` lines, built from the examples."""
    names = list(examples())
    imports: list[list[str]] = []
    chunks: list[str] = []
    tasks: dict[str, str] = {}
    copy = 0
    while True:
        for name in names:
            suffix = "" if copy == 0 else f"_v{copy}"
            parts_imports, definitions, entry = _parts(name, suffix)
            imports.append(parts_imports)
            chunks.extend(definitions)
            tasks[f"{name}{suffix}"] = entry
            source = _assemble_realistic(imports, chunks, tasks)
            if line_count(source) >= target_lines:
                return source
        copy += 1


def _assemble_realistic(imports: list[list[str]], chunks: list[str], tasks: dict[str, str]) -> str:
    table = "\n".join(f"    {task!r}: {entry}," for task, entry in tasks.items())
    dispatcher = (
        "TASKS = {\n" + table + "\n}\n\n\n"
        "def main():\n"
        "    # Each task parses the rest of the command line itself.\n"
        "    task = sys.argv.pop(1) if len(sys.argv) > 1 and sys.argv[1] in TASKS else "
        f"{next(iter(tasks))!r}\n"
        "    TASKS[task]()\n"
    )
    head = '"""Several small training tasks in one script; the first argument picks one."""\n\n'
    body = "\n\n".join(chunks)
    return (
        head
        + "\n".join(_merge_imports([*imports, ["import sys"]]))
        + "\n\n\n"
        + body
        + "\n\n"
        + dispatcher
        + '\n\nif __name__ == "__main__":\n    main()\n'
    )


def _helpers(name: str, suffix: str) -> tuple[list[str], list[str]]:
    """Imports and the definitions of one renamed example that do not train."""
    imports, definitions, _ = _parts(name, suffix)
    keep = [
        d for d in definitions if ".backward(" not in d and not d.startswith((f"def main_{name}", f"def run_{name}"))
    ]
    return imports, keep


def generated_script(target_lines: int) -> str:
    """Many helper classes and functions, then one training program; about ``target_lines`` lines."""
    program_imports, program, entry = _parts(TRAINING_PROGRAM, "")
    program_text = "\n\n".join(program) + f'\n\nif __name__ == "__main__":\n    {entry}()\n'
    head = '"""A large training script: a library of helpers, then one training program."""\n\n'
    imports: list[list[str]] = [program_imports]
    helpers: list[str] = []
    names = list(examples())
    copy = 1
    while True:
        for name in names:
            helper_imports, definitions = _helpers(name, f"_h{copy}")
            imports.append(helper_imports)
            helpers.extend(definitions)
            # Cheap length estimate; the final assembly happens once.
            estimate = sum(line_count(h) + 2 for h in helpers) + line_count(program_text) + 30
            if estimate >= target_lines:
                source = (
                    head + "\n".join(_merge_imports(imports)) + "\n\n\n" + "\n\n".join(helpers) + "\n\n" + program_text
                )
                return source
        copy += 1


def variant(name: str, index: int) -> str:
    """Example ``name`` with its top-level definitions renamed by ``index``: a stand-alone script."""
    source = examples()[name]
    if index == 0:
        return source
    module = _parsed(name)
    mapping = {n: f"{n}_{index}" for n in _top_level_names(module) if n != "main"}
    renamed = _renamed(module, mapping).code
    # Vary a literal too, so that no two files are byte-identical.
    return re.sub(r"manual_seed\(([^()]+)\)", rf"manual_seed(\1 + {index})", renamed, count=1)

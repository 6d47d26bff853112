"""The static real-code corpus: ddpify on a few hundred public training scripts, no torch.

``benchmarks/static_corpus/manifest.toml`` lists entry points by coordinates
only (repository, commit, path).  This runner extracts each repository at its
commit into a work folder outside the project (``~/.cache/ddpify-static`` by
default), runs the ddpify command on each entry as a user would
(``ddpify path/train.py -o OUT/`` from the repository root), and records:

* the outcome: converted, refused (with its error codes), nothing to do,
  already distributed, unreadable, internal error, timeout;
* the wall time of the conversion;
* checks that need no torch: no internal error (exit 123); the same output
  bytes and exit status under three ``PYTHONHASHSEED`` values; every output
  file parses and compiles; the binding check (pyflakes's undefined names of
  each output module are a subset of those of its input module); no self-check
  code (``DDP9xx``) fires.

It writes a JSON of the results and a Markdown summary (the folder's README).
See ``benchmarks/static_corpus/README.md`` for how to rebuild the corpus.

    python benchmarks/static_corpus.py                      # the whole corpus
    python benchmarks/static_corpus.py --ddpify /path/to/venv/bin/ddpify
    python benchmarks/static_corpus.py --only ID ... --keep  # a few entries
"""

from __future__ import annotations

import argparse
import ast
import collections
import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import warnings
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
CORPUS = HERE / "static_corpus"
DEFAULT_WORK = Path(os.environ.get("DDPIFY_STATIC_HOME", "~/.cache/ddpify-static")).expanduser()
SEEDS = (0, 1, 2)
CODE_RE = re.compile(r":\d+(?::\d+)?: (DDP\d{3})\b")
ANY_CODE_RE = re.compile(r"\b(DDP\d{3})\b")
OUTCOMES = (
    "converted",
    "refused",
    "nothing to do",
    "already distributed",
    "unreadable",
    "internal error",
    "timeout",
)
CHECKS = {
    "internal": "no internal error (exit 123)",
    "deterministic": "same exit status and output bytes under PYTHONHASHSEED " + "/".join(map(str, SEEDS)),
    "compiles": "every output file parses and compiles",
    "binding": "pyflakes: undefined names of each output module are a subset of its input's",
    "selfcheck": "no self-check code (DDP9xx) fires",
    "capture": "a name the output adds at module level (dist, DDP, a helper) is not read where the input binds it",
}


# --------------------------------------------------------------------------- setup


def find_mirrors(explicit: str | None) -> Path | None:
    """Where ``fetch`` put the snapshots: ``.mirror`` beside the folder holding ``shared/``."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("DDPIFY_CORPUS_MIRRORS")
    if env:
        return Path(env).expanduser()
    for parent in [PROJECT, *PROJECT.parents]:
        if (parent / ".mirror").is_dir():
            return parent / ".mirror"
    return None


def git_dir(mirrors: Path, repo: str) -> Path | None:
    base = mirrors / repo.replace("/", "+", 1) / "repo"
    for candidate in (base / ".git", base):
        if (candidate / "objects").is_dir():
            return candidate
    return None


def extract(mirrors: Path, work: Path, repo: str, commit: str) -> Path:
    """The repository's tree at ``commit`` under ``work/src`` (once), with an empty git repo as a clone has."""
    dest = work / "src" / repo.replace("/", "__") / commit[:12]
    stamp = dest / ".static-corpus-extracted"
    if stamp.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Two workers may reach the same repository at once: one extracts, the other waits.
    with open(dest.parent / f"{commit[:12]}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists():
            _extract(mirrors, repo, commit, dest)
    return dest


def _extract(mirrors: Path, repo: str, commit: str, dest: Path) -> None:
    stamp = dest / ".static-corpus-extracted"
    gd = git_dir(mirrors, repo)
    if gd is None:
        raise FileNotFoundError(f"no snapshot of {repo} under {mirrors} (fetch github:{repo})")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "--git-dir", str(gd), "archive", "--format=tar", commit], capture_output=True)
    if archive.returncode == 0:
        tar_path = dest.parent / (dest.name + ".tar")
        tar_path.write_bytes(archive.stdout)
        with tarfile.open(tar_path) as tar:
            tar.extractall(dest, filter="data")
        tar_path.unlink()
    else:  # a snapshot lacks its largest blobs (images, weights): take every blob it has
        extract_blobs(gd, commit, dest)
    # A user's clone has .git: it marks the project root for ddpify's module resolution.
    subprocess.run(["git", "init", "-q", str(dest)], check=True, capture_output=True)
    stamp.write_text(f"{repo} {commit}\n")


def extract_blobs(gd: Path, commit: str, dest: Path) -> None:
    listing = subprocess.run(
        ["git", "--git-dir", str(gd), "ls-tree", "-r", "-z", commit], capture_output=True, check=True
    ).stdout
    for item in listing.split(b"\0"):
        if not item:
            continue
        meta, name = item.split(b"\t", 1)
        mode, kind, sha = meta.split()
        if kind != b"blob" or mode == b"120000":
            continue
        blob = subprocess.run(["git", "--git-dir", str(gd), "cat-file", "blob", sha], capture_output=True)
        if blob.returncode != 0:
            continue
        target = dest / os.fsdecode(name)
        if dest.resolve() not in target.resolve().parents:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob.stdout)


def load_manifest(path: Path) -> list[dict]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    entries = data.get("entry", [])
    seen: set[str] = set()
    for e in entries:
        if e["id"] in seen:
            raise SystemExit(f"{path}: duplicate id {e['id']}")
        seen.add(e["id"])
    return entries


def ddpify_registry(cmd: list[str], python: str | None = None) -> dict[str, str]:
    """code -> severity, from ``python`` (with the ddpify under test importable), else from the interpreter
    of the ddpify command when it is a Python script or ``python -m ddpify``; {} when none is known."""
    exe = shutil.which(cmd[0]) or cmd[0]
    try:
        first = Path(exe).read_bytes()[:200].split(b"\n", 1)[0]
        if python is None and first.startswith(b"#!") and b"python" in first:
            python = first[2:].decode().strip().split()[0]
    except OSError:
        pass
    if python is None and len(cmd) >= 3 and cmd[1] == "-m":
        python = cmd[0]
    if python is None:
        return {}
    code = (
        "import json; from ddpify.diagnostics import registry; "
        "print(json.dumps({k: str(getattr(v.severity, 'value', v.severity)) for k, v in registry().items()}))"
    )
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
        return json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


# --------------------------------------------------------------------------- checks


def undefined_names(source: str, filename: str) -> set[str] | None:
    """pyflakes's undefined-name findings of a module (names only), or None when it does not parse."""
    from pyflakes import checker, messages

    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError):
        return None
    w = checker.Checker(tree, filename=filename)
    kinds = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)
    return {str(m.message_args[0]) for m in w.messages if isinstance(m, kinds)}


def tree_digest(root: Path) -> dict[str, str]:
    if not root.is_dir():
        return {}
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def read_text(path: Path) -> str:
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    return data.decode("utf-8", "replace")


FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def module_names(tree: ast.Module) -> set[str]:
    """Names bound by the module's own top-level imports, defs and classes."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def _scope_nodes(scope: ast.AST):
    """The nodes of one scope, not descending into nested functions (their defaults and decorators stay)."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, FUNCS):
            if isinstance(node, ast.Lambda):
                todo.extend(node.args.defaults + node.args.kw_defaults)
            else:
                todo.extend(node.decorator_list + node.args.defaults + [d for d in node.args.kw_defaults if d])
            continue
        if isinstance(node, ast.ClassDef):
            todo.extend(node.bases + node.decorator_list)
            todo.extend(node.body)  # class bodies are scopes too, but rarely bind these names
            continue
        todo.extend(ast.iter_child_nodes(node))


def shadowed_reads(tree: ast.Module, names: set[str]) -> collections.Counter:
    """(scope path, name) -> reads of a name in a scope that binds it itself (a local, or a module-level rebinding)."""
    counts: collections.Counter = collections.Counter()
    scopes: list[tuple[str, ast.AST]] = [("<module>", tree)]
    for node in ast.walk(tree):
        if isinstance(node, FUNCS):
            scopes.append((f"{getattr(node, 'name', 'lambda')}@{node.lineno}", node))
    for label, scope in scopes:
        nodes = list(_scope_nodes(scope))
        declared = {n for node in nodes if isinstance(node, (ast.Global, ast.Nonlocal)) for n in node.names}
        bound: set[str] = set()
        if isinstance(scope, FUNCS):
            a = scope.args
            bound |= {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
            bound |= {x.arg for x in (a.vararg, a.kwarg) if x}
        for node in nodes:
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and scope is not tree:
                bound.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and scope is not tree:
                bound.update((x.asname or x.name).split(".")[0] for x in node.names)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bound.add(node.name)
        for name in (bound - declared) & names:
            reads = sum(
                1 for node in nodes if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
            )
            if reads:
                counts[(label.split("@")[0], name)] += reads
    return counts


def capture_findings(out_src: str, in_src: str) -> list[str]:
    """Reads of a name the output adds at module level, in scopes where the program binds that name itself."""
    try:
        out_tree, in_tree = ast.parse(out_src), ast.parse(in_src)
    except (SyntaxError, ValueError):
        return []
    added = module_names(out_tree) - module_names(in_tree)
    if not added:
        return []
    before, after = shadowed_reads(in_tree, added), shadowed_reads(out_tree, added)
    return sorted(
        f"{name} in {scope} (+{n - before[(scope, name)]})"
        for (scope, name), n in after.items()
        if n > before[(scope, name)]
    )


def check_outputs(out: Path, entry_dir: Path, repo_root: Path) -> tuple[list[str], list[dict], list[str]]:
    """(files that fail to compile, binding-check failures, capture findings) of every output .py file."""
    bad_compile: list[str] = []
    binding: list[dict] = []
    capture: list[str] = []
    for p in sorted(out.rglob("*.py")):
        rel = p.relative_to(out).as_posix()
        src = read_text(p)
        try:
            with warnings.catch_warnings():  # the program's own SyntaxWarnings are not ours
                warnings.simplefilter("ignore")
                compile(src, rel, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            bad_compile.append(f"{rel}: {type(exc).__name__}: {exc}")
            continue
        after = undefined_names(src, rel) or set()
        before: set[str] = set()
        in_src = ""
        for base in (entry_dir, repo_root):
            original = base / rel
            if original.is_file():
                in_src = read_text(original)
                before = undefined_names(in_src, rel) or set()
                break
        new = sorted(after - before)
        if new:
            binding.append({"file": rel, "names": new})
        capture += [f"{rel}: {c}" for c in capture_findings(src, in_src)]
    return bad_compile, binding, capture


# --------------------------------------------------------------------------- one entry


def classify(rc: int | None, stderr: str, severity: dict[str, str]) -> tuple[str, list[str]]:
    codes = CODE_RE.findall(stderr)
    if rc is None:
        return "timeout", []
    if rc == 123 or "DDP900" in codes:
        return "internal error", sorted(set(codes))
    if rc == 2:
        return "unreadable", sorted({c for c in ANY_CODE_RE.findall(stderr) if c < "DDP100"})
    if rc == 3:
        errors = [c for c in codes if severity.get(c, "error") == "error"]
        return "refused", sorted(set(errors or codes))
    if rc == 0:
        if "DDP010" in codes:
            return "already distributed", []
        if "DDP011" in codes:
            return "nothing to do", []
        return "converted", []
    return f"exit {rc}", sorted(set(codes))


def run_entry(job: dict) -> dict:
    entry, opts = job["entry"], job["opts"]
    t_all = time.perf_counter()
    rec: dict = {k: entry[k] for k in ("id", "repo", "commit", "path")}
    try:
        root = extract(Path(opts["mirrors"]), Path(opts["work"]), entry["repo"], entry["commit"])
    except (OSError, subprocess.CalledProcessError) as exc:
        rec.update(outcome="not extracted", error=str(exc))
        return rec
    script = root / entry["path"]
    if not script.is_file():
        rec.update(outcome="not extracted", error=f"{entry['path']} is not in the tree")
        return rec
    where = entry.get("cwd", "root")
    cwd = script.parent if where == "entry" else root
    arg = os.path.relpath(script, cwd)
    out_base = Path(opts["work"]) / "out" / entry["id"]
    if out_base.exists():
        shutil.rmtree(out_base)
    out_base.mkdir(parents=True)
    runs = convert_seeds(opts, entry, root, cwd, arg, out_base, in_place=False)
    mode = "-o DIR/"
    if runs[0]["rc"] == 3 and set(CODE_RE.findall(runs[0]["stderr"])) & {"DDP013"}:
        errors = {c for c in CODE_RE.findall(runs[0]["stderr"]) if opts["severity"].get(c, "error") == "error"}
        if errors <= {"DDP013"}:
            # `-o DIR/` cannot hold a program that loads code ddpify cannot follow; the user converts it in place.
            shutil.rmtree(out_base)
            out_base.mkdir(parents=True)
            runs = convert_seeds(opts, entry, root, cwd, arg, out_base, in_place=True)
            mode = "--in-place (after DDP013)"
    rec.update(make_record(runs, mode, opts, out_base, script.parent, root))
    rec["wall_all"] = round(time.perf_counter() - t_all, 3)
    if not opts["keep"] and not rec["failures"]:
        shutil.rmtree(out_base, ignore_errors=True)
    return rec


def make_record(runs: list[dict], mode: str, opts: dict, out_base: Path, entry_dir: Path, root: Path) -> dict:
    """Outcome, codes and check failures of an entry from its conversions (one per seed)."""
    rec: dict = {}
    first = runs[0]
    outcome, codes = classify(first["rc"], first["stderr"], opts["severity"])
    all_codes = sorted(set(CODE_RE.findall(first["stderr"])))
    rec.update(
        outcome=outcome,
        mode=mode,
        codes=codes,
        warnings=[c for c in all_codes if c not in codes],
        rc=[r["rc"] for r in runs],
        wall=first["wall"],
    )
    failures: dict[str, object] = {}
    if any(r["rc"] == 123 for r in runs) or any("DDP900" in CODE_RE.findall(r["stderr"]) for r in runs):
        failures["internal"] = "exit 123" if any(r["rc"] == 123 for r in runs) else "DDP900"
    if len({(r["rc"], json.dumps(r["digest"], sort_keys=True)) for r in runs}) > 1:
        differ = sorted(
            {
                f
                for r in runs[1:]
                for f in set(r["digest"]) | set(first["digest"])
                if r["digest"].get(f) != first["digest"].get(f)
            }
        )
        failures["deterministic"] = {"rc": [r["rc"] for r in runs], "files": differ}
    self_codes = sorted(
        {c for r in runs for c in CODE_RE.findall(r["stderr"]) if c.startswith("DDP9") and c != "DDP900"}
    )
    if self_codes:
        failures["selfcheck"] = self_codes
    out0 = out_base / f"seed{opts['seeds'][0]}"
    if first["rc"] == 0 and out0.is_dir() and outcome == "converted":
        bad_compile, binding, capture = check_outputs(out0, root if mode != "-o DIR/" else entry_dir, root)
        if bad_compile:
            failures["compiles"] = bad_compile
        if binding:
            failures["binding"] = binding
        if capture:
            failures["capture"] = capture
        rec["files_out"] = len(first["digest"])
    rec["failures"] = failures
    return rec


ROOT_MARKERS = (".gitignore", "pyproject.toml", "setup.py", "setup.cfg")


def python_copy(root: Path, dest: Path) -> None:
    """The tree's Python files and root markers, for a conversion in place (ddpify reads nothing else)."""
    for p in root.rglob("*"):
        if ".git" in p.relative_to(root).parts[:1] or not p.is_file() or p.is_symlink():
            continue
        if p.suffix == ".py" or p.name in ROOT_MARKERS:
            target = dest / p.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, target)
    subprocess.run(["git", "init", "-q", str(dest)], check=True, capture_output=True)


def convert_seeds(
    opts: dict, entry: dict, root: Path, cwd: Path, arg: str, out_base: Path, *, in_place: bool
) -> list[dict]:
    """One conversion per hash seed; the output (the changed files, in place) under out_base/seed<k>/."""
    runs = []
    for seed in opts["seeds"]:
        out = out_base / f"seed{seed}"
        if out.exists():
            shutil.rmtree(out)
        env = dict(os.environ, PYTHONHASHSEED=str(seed), NO_COLOR="1")
        if in_place:
            tree = out_base / f"tree{seed}"
            python_copy(root, tree)
            where = tree / cwd.relative_to(root)
            cmd = [*opts["ddpify"], arg, "--in-place", "--no-color", *entry.get("options", [])]
        else:
            where = cwd
            cmd = [*opts["ddpify"], arg, "-o", str(out) + os.sep, "--no-color", *entry.get("options", [])]
        t0 = time.perf_counter()
        try:
            p = subprocess.run(
                cmd, cwd=where, env=env, capture_output=True, text=True, timeout=opts["timeout"], errors="replace"
            )
            rc, stdout, stderr = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            rc, stdout = None, ""
            stderr = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        wall = time.perf_counter() - t0
        if in_place:  # the output: every file the conversion changed, at its path in the repository
            for q in sorted(tree.rglob("*.py")):
                rel = q.relative_to(tree)
                original = root / rel
                if not original.is_file() or original.read_bytes() != q.read_bytes():
                    (out / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(q, out / rel)
            shutil.rmtree(tree)
        (out_base / f"seed{seed}.log").write_text(
            f"$ cd {shlex.quote(str(where))} && {shlex.join(cmd)}\nexit {rc}\nwall {wall:.3f}\n{stdout}{stderr}",
            encoding="utf-8",
        )
        runs.append({"seed": seed, "rc": rc, "wall": round(wall, 3), "stderr": stderr, "digest": tree_digest(out)})
    return runs


def _worker_init(niceness: int) -> None:
    with contextlib.suppress(OSError):
        current = os.nice(0)
        if niceness > current:  # at least this nice (not niceness more than the caller's `nice`)
            os.nice(niceness - current)


# --------------------------------------------------------------------------- report


def summarize(results: list[dict]) -> dict:
    outcomes = collections.Counter(r["outcome"] for r in results)
    codes = collections.Counter(c for r in results if r["outcome"] == "refused" for c in r.get("codes", []))
    refused_by_first = collections.Counter(r["codes"][0] for r in results if r["outcome"] == "refused" and r["codes"])
    warnings = collections.Counter(c for r in results for c in r.get("warnings", []))
    failures = {k: sorted(r["id"] for r in results if k in r.get("failures", {})) for k in CHECKS}
    walls = sorted(r["wall"] for r in results if "wall" in r)
    return {
        "entries": len(results),
        "repos": len({r["repo"] for r in results}),
        "outcomes": dict(outcomes.most_common()),
        "refusal_codes": dict(codes.most_common()),
        "refusals_single_code": dict(refused_by_first.most_common()),
        "warning_codes": dict(warnings.most_common()),
        "check_failures": failures,
        "in_place_after_ddp013": sum(1 for r in results if r.get("mode", "-o DIR/") != "-o DIR/"),
        "wall_total_s": round(sum(walls), 1),
        "wall_median_s": walls[len(walls) // 2] if walls else None,
        "wall_max_s": walls[-1] if walls else None,
    }


def markdown(summary: dict, results: list[dict], meta: dict) -> str:
    by_id = {r["id"]: r for r in results}
    lines = [
        "# Static corpus: ddpify on real training code, no torch",
        "",
        "Entry points (training scripts: files that build a model and an optimizer and call",
        "`.backward()`, directly or through the modules they import) of public, single-process",
        "PyTorch repositories, chosen as users would bring them: classification, segmentation,",
        "detection, GANs, VAEs, diffusion, flows, contrastive and few-shot learning, distillation,",
        "NLP, speech, graphs, point clouds, reinforcement learning; single files, Trainer and",
        "Solver classes, config-driven programs, programs of many modules.",
        "",
        "`manifest.toml` holds coordinates only (repository, commit, entry path). No third-party",
        "code is in the project: the runner extracts the repositories outside it, and nothing from",
        "them may be copied into tests, fixtures, examples or docs (the rules of",
        "`../shared/corpus/README.md` apply). A pattern found here gets a fixture of the project's",
        "own, written from scratch.",
        "",
        "## Rebuild and run",
        "",
        "1. Fetch every repository of the manifest (`fetch github:OWNER/NAME`, once each); the",
        "   snapshots land in `.mirror/OWNER+NAME/repo` beside the folder that holds `shared/`.",
        "   `python benchmarks/static_corpus.py --list-repos` prints the list.",
        "   Elsewhere: `--mirrors DIR` or `DDPIFY_CORPUS_MIRRORS`.",
        "2. Install pyflakes next to the runner's python (`.venv/bin/pip install pyflakes`).",
        "3. Run (about " + str(meta.get("minutes", "a few")) + " minutes on 2 cores):",
        "",
        "   ```sh",
        "   nice .venv/bin/python benchmarks/static_corpus.py                 # this venv's ddpify",
        "   nice .venv/bin/python benchmarks/static_corpus.py --ddpify /path/to/.venv/bin/ddpify",
        "   nice .venv/bin/python benchmarks/static_corpus.py --ddpify ./wrapper.sh --python /other/python",
        "   .venv/bin/python benchmarks/static_corpus.py --only ID ... --keep  # a few entries",
        "   .venv/bin/python benchmarks/static_corpus.py --only ID ... --merge # rerun them into results.json",
        "   ```",
        "",
        "   Each repository is extracted once at its commit into `~/.cache/ddpify-static/src/`",
        "   (`--work`, or `DDPIFY_STATIC_HOME`), with an empty `git init` as a clone has. Each",
        "   entry is converted from the repository root, `ddpify PATH -o OUT/` (the whole program",
        "   is written), once per hash seed; outputs and logs go to `<work>/out/<id>/` (kept for",
        "   entries that fail a check, or all with `--keep`). `--json` and `--md` choose the",
        "   result files (default: `results.json` and this README). A program that `-o DIR/`",
        "   refuses with DDP013 alone is converted again with `--in-place` in a copy of the tree's",
        "   Python files; its output is the files that changed. `--recheck` redoes the output",
        "   checks on kept outputs without converting.",
        "",
        "## Checks",
        "",
        "| check | what |",
        "| --- | --- |",
        *[f"| {k} | {v} |" for k, v in CHECKS.items()],
        "",
        "The compile and binding checks read the output of a converted entry (the first seed).",
        "The binding check maps each output file to the input file at the same path relative to",
        "the entry's folder, else to the repository root; a new file is compared with nothing.",
        "",
        "## Last run",
        "",
        f"ddpify: `{meta.get('ddpify_version', '?')}` (`{meta.get('ddpify_cmd', '?')}`), "
        f"{meta.get('date', '?')}, {meta.get('wall_s', '?')} s wall with {meta.get('jobs', '?')} jobs"
        + (f" ({meta['note']})." if meta.get("note") else "."),
        "",
        f"**{summary['entries']} entries from {summary['repos']} repositories.** Conversion time per entry "
        f"(one seed): median {summary['wall_median_s']} s, max {summary['wall_max_s']} s; all entries, one seed: "
        f"{summary['wall_total_s']} s (times {len(meta.get('seeds', SEEDS))} seeds, over {meta.get('jobs', '?')} jobs).",
        "",
        "| outcome | entries |",
        "| --- | --- |",
        *[f"| {k} | {v} |" for k, v in summary["outcomes"].items()],
        "",
        f"{summary.get('in_place_after_ddp013', 0)} entries that `-o DIR/` refuses with DDP013 alone (the program loads"
        " code ddpify cannot follow) were converted again with `--in-place` on a copy of the tree's Python files, as"
        " the message advises; their outcome is that of the conversion in place.",
        "",
        "| check | failures | entries |",
        "| --- | --- | --- |",
    ]
    for k in CHECKS:
        ids = summary["check_failures"][k]
        lines.append(f"| {k} | {len(ids)} | {', '.join(ids) if ids else '-'} |")
    lines += [
        "",
        "### Refusal codes by frequency",
        "",
        "Error codes of refused entries (an entry with several codes counts once for each).",
        "",
        "| code | entries |",
        "| --- | --- |",
        *[f"| {k} | {v} |" for k, v in summary["refusal_codes"].items()],
        "",
        "### Warning codes by frequency (all outcomes)",
        "",
        "| code | entries |",
        "| --- | --- |",
        *[f"| {k} | {v} |" for k, v in summary["warning_codes"].items()],
        "",
        "### Check failures in detail",
        "",
    ]
    any_failure = False
    for k in CHECKS:
        for eid in summary["check_failures"][k]:
            any_failure = True
            r = by_id[eid]
            detail = r["failures"][k]
            if k == "binding":
                detail = "; ".join(f"{d['file']}: {', '.join(d['names'])}" for d in detail)
            elif k == "deterministic":
                detail = f"exit {detail['rc']}, differing files: {', '.join(detail['files']) or '-'}"
            elif isinstance(detail, list):
                detail = "; ".join(map(str, detail))
            detail = str(detail).replace("|", "\\|").replace("\n", " ")
            lines.append(f"- {k}: `{eid}` ({r['repo']} `{r['path']}`): {detail}")
    if not any_failure:
        lines.append("None.")
    lines += [
        "",
        "## Entries",
        "",
        "| id | repository | entry | outcome | codes | s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        codes = " ".join(r.get("codes", []))
        flag = " **" + ",".join(r["failures"]) + "**" if r.get("failures") else ""
        how = " (in place)" if r.get("mode", "-o DIR/") != "-o DIR/" else ""
        lines.append(
            f"| {r['id']} | {r['repo']} | `{r['path']}` | {r['outcome']}{how}{flag} | {codes} | {r.get('wall', '')} |"
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- main


OUTPUT_CHECKS = ("compiles", "binding", "capture")


def recheck(json_path: Path, md: str | None, work: Path, manifest: Path) -> int:
    data = json.loads(json_path.read_text(encoding="utf-8"))
    listed = {e["id"] for e in load_manifest(manifest)}
    data["entries"] = [r for r in data["entries"] if r["id"] in listed]  # entries dropped since the run
    for r in data["entries"]:
        if r.get("outcome") != "converted":
            continue
        seed = data["meta"].get("seeds", [SEEDS[0]])[0]
        out = work / "out" / r["id"] / f"seed{seed}"
        root = work / "src" / r["repo"].replace("/", "__") / r["commit"][:12]
        if not out.is_dir():
            print(f"{r['id']}: no kept output under {out}", file=sys.stderr)
            continue
        found = dict(zip(OUTPUT_CHECKS, check_outputs(out, (root / r["path"]).parent, root), strict=True))
        failures = {k: v for k, v in r.get("failures", {}).items() if k not in OUTPUT_CHECKS}
        failures.update({k: v for k, v in found.items() if v})
        r["failures"] = failures
    data["summary"] = summarize(data["entries"])
    json_path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    if md:
        Path(md).write_text(markdown(data["summary"], data["entries"], data["meta"]), encoding="utf-8")
    print("check failures: " + ", ".join(f"{k} {len(v)}" for k, v in data["summary"]["check_failures"].items()))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", default=str(CORPUS / "manifest.toml"))
    ap.add_argument("--ddpify", default=None, help="the ddpify command (default: the one beside this python)")
    ap.add_argument(
        "--python",
        default=None,
        help="a python that imports the ddpify under test, to read which codes are errors (default: the "
        "interpreter of the --ddpify script)",
    )
    ap.add_argument("--work", default=str(DEFAULT_WORK), help="work folder, outside the project")
    ap.add_argument("--mirrors", default=None, help="folder of fetched snapshots (OWNER+NAME/repo)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--nice", type=int, default=10, help="the workers run at least this nice")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per conversion")
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    ap.add_argument("--only", nargs="*", default=None, help="entry ids (or repositories)")
    ap.add_argument("--keep", action="store_true", help="keep every output, not only failing ones")
    ap.add_argument("--json", default=str(CORPUS / "results.json"))
    ap.add_argument("--md", default=str(CORPUS / "README.md"))
    ap.add_argument("--resume", action="store_true", help="skip the entries <work>/records.jsonl already holds")
    ap.add_argument("--merge", action="store_true", help="with --only: update those entries in the existing --json")
    ap.add_argument("--list-repos", action="store_true", help="print the repositories to fetch, and stop")
    ap.add_argument(
        "--recheck",
        action="store_true",
        help="convert nothing: redo the output checks on the kept outputs (--keep) of the last run, drop entries "
        "no longer in the manifest, and rewrite --json/--md",
    )
    args = ap.parse_args(argv)
    if args.list_repos:
        print(*sorted({e["repo"] for e in load_manifest(Path(args.manifest))}, key=str.lower), sep="\n")
        return 0
    if args.recheck:
        return recheck(Path(args.json), args.md, Path(args.work).expanduser().resolve(), Path(args.manifest))

    work = Path(args.work).expanduser().resolve()
    if work == PROJECT or PROJECT in work.parents:
        ap.error("--work must be outside the project: third-party code never enters it")
    mirrors = find_mirrors(args.mirrors)
    if mirrors is None:
        ap.error("no .mirror folder found: pass --mirrors or set DDPIFY_CORPUS_MIRRORS")
    if args.ddpify:
        ddpify_cmd = shlex.split(args.ddpify)
    else:
        beside = Path(sys.executable).with_name("ddpify")
        ddpify_cmd = [str(beside)] if beside.exists() else ["ddpify"]
    entries = load_manifest(Path(args.manifest))
    if args.only:
        wanted = set(args.only)
        entries = [e for e in entries if e["id"] in wanted or e["repo"] in wanted]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    try:
        version = subprocess.run([*ddpify_cmd, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    except OSError as exc:
        ap.error(f"cannot run {ddpify_cmd}: {exc}")
    opts = {
        "mirrors": str(mirrors),
        "work": str(work),
        "ddpify": ddpify_cmd,
        "seeds": seeds,
        "timeout": args.timeout,
        "keep": args.keep,
        "severity": ddpify_registry(ddpify_cmd, args.python),
    }
    if not opts["severity"]:  # every warning would count as a reason for refusing
        ap.error(f"cannot read which codes are errors from {' '.join(ddpify_cmd)}: give --python")
    (work / "out").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results: list[dict] = []
    # Each record is also appended to <work>/records.jsonl as it comes: --resume goes on from there.
    records = work / "records.jsonl"
    tag = " ".join(ddpify_cmd)
    if args.resume and records.is_file():
        wanted_ids = {e["id"] for e in entries}
        done: dict[str, dict] = {}
        for line in records.read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            if item["ddpify"] == tag and item["record"]["id"] in wanted_ids:
                done[item["record"]["id"]] = item["record"]
        results = list(done.values())
        entries = [e for e in entries if e["id"] not in done]
        print(f"resuming: {len(done)} entries already done", flush=True)
    elif records.exists():
        records.unlink()
    jobs = [{"entry": e, "opts": opts} for e in entries]
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=args.jobs, initializer=_worker_init, initargs=(args.nice,)
    ) as pool:
        futures = {pool.submit(run_entry, j): j["entry"]["id"] for j in jobs}
        for n, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            try:
                r = fut.result()
            except Exception as exc:  # a bug of the runner: report it, keep going
                e = next(j["entry"] for j in jobs if j["entry"]["id"] == futures[fut])
                r = {k: e[k] for k in ("id", "repo", "commit", "path")}
                r.update(outcome="runner error", error=f"{type(exc).__name__}: {exc}", failures={})
            results.append(r)
            with records.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"ddpify": tag, "record": r}) + "\n")
            flag = " FAIL " + ",".join(r.get("failures", {})) if r.get("failures") else ""
            print(f"[{n}/{len(jobs)}] {r['id']}: {r['outcome']} {' '.join(r.get('codes', []))}{flag}", flush=True)
    wall = time.perf_counter() - t0
    all_entries = load_manifest(Path(args.manifest))
    order = {e["id"]: i for i, e in enumerate(all_entries)}
    previous = None
    if args.merge and Path(args.json).is_file():
        previous = json.loads(Path(args.json).read_text(encoding="utf-8"))
        fresh = {r["id"] for r in results}
        results += [r for r in previous["entries"] if r["id"] not in fresh and r["id"] in order]
    results.sort(key=lambda r: order[r["id"]])
    summary = summarize(results)
    meta = {
        "ddpify_cmd": " ".join(ddpify_cmd),
        "ddpify_version": version,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "wall_s": round(wall, 1),
        "minutes": max(1, round(wall / 60)),
        "jobs": args.jobs,
        "seeds": seeds,
    }
    if previous is not None:  # the figures of the whole run it was merged into
        meta = dict(previous["meta"], merged=f"{len(jobs)} entries rerun {meta['date']} with {meta['ddpify_cmd']}")
    Path(args.json).write_text(
        json.dumps({"meta": meta, "summary": summary, "entries": results}, indent=1) + "\n", encoding="utf-8"
    )
    if args.md:
        Path(args.md).write_text(markdown(summary, results, meta), encoding="utf-8")
    print(
        f"static corpus: {summary['entries']} entries, {summary['repos']} repos, "
        + ", ".join(f"{k} {v}" for k, v in summary["outcomes"].items())
        + "; check failures: "
        + ", ".join(f"{k} {len(v)}" for k, v in summary["check_failures"].items())
        + f" ({wall:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Merge result files of the shared harness into the run corpus's results table.

    python benchmarks/run_corpus/table.py RESULT.json [MORE.json ...]

Each file is a ``run_corpus.py --out`` result; for every entry of
manifest.toml the last file that ran a step (baseline, convert, torchrun)
gives that step's result, so a baseline-only run and a conversion run can be
combined. Prints a Markdown table and a summary line. Besides the harness's
verdicts it shows how many ``DistributedSampler``s the shim counted on rank 0:
random augmentation makes every row unique, so the harness's ``sharded`` can
hide a loader that every rank reads whole (see FINDINGS.md, F10): the
summary counts a synced program as sharded when it has a sampler and the
harness found no shared rows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent


def merged(paths: list[str]) -> dict[str, dict]:
    """entry id -> {step: result}, later files overriding earlier ones."""
    out: dict[str, dict] = {}
    for path in paths:
        for res in json.loads(Path(path).read_text())["results"]:
            entry = out.setdefault(res["id"], {})
            for step in ("baseline", "convert", "torchrun", "plain"):
                if res.get(step):
                    entry[step] = res[step]
            if res.get("convert") and not res.get("torchrun"):
                entry.pop("torchrun", None)  # a later refusal: no run of the converted program belongs to it
                entry.pop("plain", None)
    return out


def samplers(torchrun: dict) -> int | None:
    rank0 = (torchrun.get("ranks") or {}).get("0") or {}
    return rank0.get("distributed_samplers")


def convert_cell(conv: dict | None) -> str:
    if not conv:
        return "-"
    if conv.get("status") == "ok":
        # tree mode lists every changed file, the copy of the entry script (<stem>_ddp.py) included
        changed = [p for p in conv.get("changed", []) if not p.endswith("_ddp.py")]
        return f"ok ({len(changed)} files)" if changed else "unchanged"
    code = conv.get("error", "").split(" ")
    codes = [c for c in code if c.startswith("DDP")]
    return f"refused {codes[0]}" if codes else conv.get("status", "?")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    manifest = tomllib.loads((HERE / "manifest.toml").read_text())
    results = merged(argv)
    rows = [
        "| id | repo | baseline | convert | torchrun | synced | data | samplers | ckpt | plain |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    count = {"programs": 0, "baseline": 0, "converted": 0, "unchanged": 0, "refused": 0, "synced": 0, "plain": 0}
    count.update(sharded=0, replicated=0)
    for entry in manifest["script"]:
        res = results.get(entry["id"], {})
        base, conv, run = res.get("baseline") or {}, res.get("convert"), res.get("torchrun") or {}
        n = samplers(run) if run else None
        sync, data = run.get("sync", "-"), run.get("data", "-")
        count["programs"] += 1
        count["baseline"] += base.get("status") == "ok"
        cell = convert_cell(conv)
        count["plain"] += (res.get("plain") or {}).get("status") == "ok"
        count["converted"] += cell.startswith("ok")
        count["unchanged"] += cell == "unchanged"
        count["refused"] += cell.startswith("refused")
        if sync == "synced":
            count["synced"] += 1
            if n and data not in ("replicated",) and not data.startswith("overlap"):
                count["sharded"] += 1
            else:
                count["replicated"] += 1
        rows.append(
            f"| {entry['id']} | {entry['repo']} | {base.get('status', '-')} | {cell} | "
            f"{run.get('status', '-')} | {sync} | {data} | {'-' if n is None else n} | {run.get('ckpt', '-')} | {(res.get('plain') or {}).get('status', '-')} |"
        )
    print("\n".join(rows))
    print()
    print(
        f"run corpus: {count['programs']} programs, baseline ok {count['baseline']}, converted {count['converted']}, "
        f"unchanged {count['unchanged']}, refused {count['refused']}, synced {count['synced']} "
        f"(sharded {count['sharded']}, data whole on every rank {count['replicated']}), plain ok {count['plain']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

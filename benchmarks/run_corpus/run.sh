#!/usr/bin/env bash
# Run the multi-module run corpus (manifest.toml here) with the shared harness
# in tree mode: each program is converted whole by ddpify (--in-place on a
# fresh copy, then the entry script is copied to <stem>_ddp.py) and trained
# under torchrun with 2 CPU processes.
#
# usage: benchmarks/run_corpus/run.sh STEM [harness options, e.g. --only ID... --no-plain]
#   writes $DDPIFY_CORPUS_HOME/results/STEM.{json,md,log}
#
#   DDPIFY_SRC          checkout whose ddpify converts (default: this checkout),
#                       e.g. DDPIFY_SRC=/path/to/main to measure another branch
#   DDPIFY_CORPUS_HOME  work root (default ~/.cache/ddpify-corpus); its venv/
#                       runs the programs, corpus-run/ holds the extracted files
#   CONVERT             another converter command, e.g. the identity control
#                       CONVERT='cp {src} {dst}'
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
src=${DDPIFY_SRC:-$root}
home=${DDPIFY_CORPUS_HOME:-$HOME/.cache/ddpify-corpus}
shared=$(cd "$root/../shared/corpus" && pwd)
py=$home/venv/bin/python
stem=${1:?usage: run.sh STEM [harness options]}
shift
convert=${CONVERT:-"PYTHONPATH=$src $py -m ddpify {src} --in-place -q && cp {src} {dst}"}
mkdir -p "$home/results"
export DDPIFY_CORPUS_HOME=$home
cd "$home"
nice "$py" "$shared/run_corpus.py" --manifest "$here/manifest.toml" --corpus "$home/corpus-run" --tree \
    --convert "$convert" --out "results/$stem.json" --md "results/$stem.md" "$@" > "results/$stem.log" 2>&1
tail -1 "results/$stem.log"

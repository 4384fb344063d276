#!/usr/bin/env bash
# Every training of a runs file at once on one GPU (a holmes step there is launch-bound, so many runs share it
# at little cost each), each stopped after SECONDS. A runs file has one run a line: a name, then `tinygpt train`
# options; `#` starts a comment. Each run adds --device cuda --sample-tokens 0 --no-progress and lands in
# OUT_DIR/NAME/ (metrics.csv, config.json), its output in OUT_DIR/NAME.log; the last line of each log is printed.
#
#   scripts/gpu_trainings.sh RUNS_FILE OUT_DIR [SECONDS]     (SECONDS default: 190)
#
# Used by scripts/gpu_check.sh (recipes/gpu-runs/check.txt); needs TINYGPT_HOLMES_PATH and a python3 whose torch
# sees the GPU ($PYTHON, default python3).
set -uo pipefail
runs="$1" out="$2" seconds="${3:-190}"
py="${PYTHON:-python3}"
mkdir -p "$out"
pids=()
while read -r name options; do
  case "$name" in '' | '#'*) continue ;; esac
  # shellcheck disable=SC2086  # the options are separate words
  OMP_NUM_THREADS=1 timeout -k 15 "$seconds" "$py" -m tinygpt train $options --device cuda --sample-tokens 0 \
    --no-progress --out "$out/$name" < /dev/null > "$out/$name.log" 2>&1 &
  pids+=("$!")
done < "$runs"
for pid in "${pids[@]}"; do wait "$pid"; done
for log in "$out"/*.log; do
  [ -e "$log" ] && echo "$(basename "$log" .log): $(tail -n 1 "$log")"
done

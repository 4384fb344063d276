#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, record what BENCHMARKS.md and docs/ keep from a GPU:
#   1. the holmes benchmark sweep (tinygpt bench: batch 8..256 x fp32/bf16/fp16),
#   2. the launch-bound step, holmes batch 32 bf16: eager against CUDA graphs, and where an eager step's time
#      goes (benchmarks/bench_gpu_step.py),
#   3. both recipes trained to holmes 3.76 at precision auto and fp32: time to target (benchmarks/bench_speedrun.py):
#      the series eager, and the device's fast recipe (on CUDA: the series' options with CUDA graphs, the
#      recipe's CUDA variant in tinygpt/recipes.py; stopped with SIGABRT at its limit, so that Python's
#      faulthandler prints where every thread was),
#   4. the GPU-marked tests (device resolution, bf16/fp16 training, memory figures, the deferred NaN guard, CUDA
#      graphs, CPU/GPU curves within 0.02, cached sampling, OOM in a sweep), and beside them, all at once, every
#      training in recipes/gpu-runs/check.txt (seed groups, recipe candidates; scripts/gpu_trainings.sh).
# The timed parts (1-3) run alone; each part has its own time limit, so the whole ends within 10 minutes.
#
#   scripts/gpu_check.sh [OUT_DIR]      (OUT_DIR default: gpu-check/; logs, JSON and runs/NAME/ land there)
#
# Needs: a python3 whose torch sees the GPU (with regex, tqdm and pytest), as on a CUDA image; else
# it makes .venv-gpu and installs those from PyPI (the default Linux torch wheel is the CUDA build).
# Only the library (tinygpt/) runs here, from the checkout. The corpus is read from
# TINYGPT_HOLMES_PATH or ../shared/data/holmes.txt; without either a 1 MB stand-in is written (the tests
# only need text; the sweep and the step use random tokens; time to target and the trainings are skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-check}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

py="${PYTHON:-python3}"
if ! "$py" -c "import torch, regex, tqdm, pytest; assert torch.cuda.is_available()" 2>/dev/null; then
  [ -x .venv-gpu/bin/python ] || python3 -m venv .venv-gpu
  .venv-gpu/bin/pip install -q torch regex tqdm pytest
  py=.venv-gpu/bin/python
fi

standin=false
if [ -z "${TINYGPT_HOLMES_PATH:-}" ]; then
  if [ -f ../shared/data/holmes.txt ]; then
    export TINYGPT_HOLMES_PATH="$(cd ../shared/data && pwd)/holmes.txt"
  else
    standin=true
    export TINYGPT_HOLMES_PATH="$out/standin.txt"
    "$py" - "$TINYGPT_HOLMES_PATH" <<'PY'
import random, sys
random.seed(0)
words = "the of and to a in that it was he his I you with for had is as at on my not be but she her".split()
text = "\n".join(" ".join(random.choice(words) for _ in range(14)) + "." for _ in range(15_000))
open(sys.argv[1], "w").write(text)
PY
  fi
fi

"$py" - <<'PY' | tee "$out/gpu.txt"
import torch
print("torch", torch.__version__, "CUDA", torch.version.cuda)
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"cuda:{i}", p.name, f"{p.total_memory / 2**30:.1f} GiB", "bf16" if torch.cuda.is_bf16_supported() else "")
PY

set +e  # every part runs even when one fails; the exit status says whether the tests passed
echo "== holmes sweep: batch 8..256 x fp32/bf16/fp16"
timeout -k 10 50 "$py" -m tinygpt bench --preset holmes --device cuda --batch-sizes 8,32,64,128,256 --steps 10 \
  --warmup 3 --json > "$out/sweep.json"
"$py" - "$out/sweep.json" <<'PY'
import json, sys
from tinygpt.bench import Cell, format_table
print(format_table([Cell(**c) for c in json.load(open(sys.argv[1]))["cells"]]))
PY

echo "== the launch-bound step: holmes batch 32 bf16, eager and CUDA graphs"
timeout -k 10 85 "$py" -m benchmarks.bench_gpu_step --device cuda 2>&1 | tee "$out/step.txt"

echo "== time to target: the series and the device's fast recipe to holmes 3.76 (one seed), auto and fp32"
if $standin; then
  echo "skipped: needs the Holmes corpus (the stand-in has no known target)"
else
  PYTHONFAULTHANDLER=1 timeout -s ABRT -k 10 240 "$py" -m benchmarks.bench_speedrun --device cuda --seeds 1337 \
    --steps 10 2>&1 | tee "$out/speedrun.txt"
fi

echo "== GPU tests, and beside them the trainings of recipes/gpu-runs/check.txt"
trainings=
if ! $standin; then
  PYTHON="$py" scripts/gpu_trainings.sh recipes/gpu-runs/check.txt "$out/runs" 165 > "$out/runs.txt" &
  trainings=$!
fi
timeout -k 15 165 "$py" -m pytest -m gpu -q -p no:cacheprovider -o addopts="" tests/test_gpu.py 2>&1 | tee "$out/tests.txt"
tests_status=${PIPESTATUS[0]}
if [ -n "$trainings" ]; then wait "$trainings"; cat "$out/runs.txt"; fi
exit "$tests_status"

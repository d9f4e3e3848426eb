#!/usr/bin/env bash
# Shoal vs PyTorch, one local training step of the built-in MLP (forward + backward + SGD
# momentum step) and of the GPT (AdamW step), same shapes, both single-threaded, run back to back on this machine.
# Prints microseconds per step and the ratio shoal/torch (< 1: Shoal is faster).
#
#   bench/train_step_vs_torch.sh            # uses build/bin/train_step_bench
#   BUILD_DIR=build-rel bench/train_step_vs_torch.sh
#   PYTHON=/usr/bin/python3 (default; needs torch)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
BENCH=$BUILD_DIR/bin/train_step_bench
PYTHON=${PYTHON:-/usr/bin/python3}

if [ ! -x "$BENCH" ]; then
  echo "train_step_vs_torch: $BENCH not found; build it first: ninja -C $BUILD_DIR train_step_bench" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  echo "train_step_vs_torch: $PYTHON cannot import torch; install it with scripts/setup python3-torch, or set PYTHON" >&2
  exit 1
fi

# One thread everywhere, whatever BLAS each side uses.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$BENCH" --benchmark_format=json --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_min_time=0.2 >"$tmp/shoal.json"
"$PYTHON" "$ROOT/bench/torch_train_step.py" --json --min-time 0.2 --repetitions 5 >"$tmp/torch.jsonl"

"$PYTHON" - "$tmp/shoal.json" "$tmp/torch.jsonl" <<'PY'
import json, sys

shoal = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("aggregate_name") == "median":
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]
        shoal[b["run_name"]] = b["real_time"] * scale
torch = {}
version = "?"
for line in open(sys.argv[2]):
    r = json.loads(line)
    torch[r["name"]] = r["us_per_step"]
    version = r["torch"]

print(f"one training step, 1 thread, median of 5 (torch {version})")
print(f"{'benchmark':<30} {'shoal us':>10} {'torch us':>10} {'shoal/torch':>12}")
for name in torch:
    if name not in shoal:
        print(f"{name:<30} {'-':>10} {torch[name]:>10.2f} {'-':>12}")
        continue
    print(f"{name:<30} {shoal[name]:>10.2f} {torch[name]:>10.2f} {shoal[name] / torch[name]:>12.2f}")
for name in shoal:
    if name not in torch:  # Shoal-only variants (e.g. activation checkpointing)
        print(f"{name:<30} {shoal[name]:>10.2f} {'-':>10} {'-':>12}")
PY

#!/usr/bin/env bash
# The GPT's local step (forward + backward + AdamW, gpt:layers=3,dim=96,heads=4,ctx=64, 8 x 64
# byte tokens) in Shoal and in PyTorch, one thread each, run in ALTERNATING pairs so that the
# machine's drift hits both sides alike (on a shared VM a back-to-back comparison moved by
# +-20%). Prints each pair and the median ratio shoal/torch (< 1: Shoal is faster).
#
#   bench/gpt_step_vs_torch.sh [PAIRS]      # default 5; needs build/bin/train_step_bench and torch
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=${BUILD_DIR:-$ROOT/build}/bin/train_step_bench
PYTHON=${PYTHON:-/usr/bin/python3}
PAIRS=${1:-5}
[ -x "$BENCH" ] || { echo "gpt_step_vs_torch: build $BENCH first (ninja -C build train_step_bench)" >&2; exit 1; }
"$PYTHON" -c 'import torch' 2>/dev/null || { echo "gpt_step_vs_torch: $PYTHON cannot import torch" >&2; exit 1; }
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
ratios=()
for i in $(seq "$PAIRS"); do
  shoal=$("$BENCH" --benchmark_filter='gpt:layers=3,dim=96,heads=4,ctx=64/' --benchmark_min_time=1 \
    --benchmark_format=json 2>/dev/null | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["benchmarks"][0]["real_time"] / 1e3)')
  torch=$(cd "$ROOT/bench" && "$PYTHON" -c '
import sys; sys.argv = ["x"]
import torch, torch_train_step as t
torch.set_num_threads(1)
print(t.time_step(t.gpt_step(3, 96, 4, 64, 8), 1.0, 1) * 1e3)')
  ratio=$("$PYTHON" -c "print(f'{$shoal / $torch:.3f}')")
  printf 'pair %d: shoal %.2f ms, torch %.2f ms, shoal/torch %s\n' "$i" "$shoal" "$torch" "$ratio"
  ratios+=("$ratio")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{r[NR] = $1} END {printf "median shoal/torch over %d pairs: %s\n", NR, r[int((NR + 1) / 2)]}'

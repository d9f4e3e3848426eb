#!/usr/bin/env bash
# Benchmark (i): per-round wall time and bytes on the wire for 2, 4, 8 and 16 clients on
# loopback (digits, mlp:64, one local epoch, iid parts). Each client count runs ROUNDS rounds;
# the table reports the median round time and the mean bytes per round, plus the bytes per
# round divided by the dense fp32 model traffic measured in the same run (wire overhead).
#   bench/round_scaling.sh            (after scripts/build)
#   CLIENTS="2 4" bench/round_scaling.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-20}"
MODEL="${MODEL:-mlp:64}"
BIN=build/bin
OUT="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$OUT"' EXIT
export OPENBLAS_NUM_THREADS=1

printf '%-8s %-16s %-14s %-14s %-12s\n' clients median_round_s bytes_up/round bytes_down/round wire/dense
for n in ${CLIENTS:-2 4 8 16}; do
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  "$BIN/shoal-aggregator" --listen "tcp://127.0.0.1:$port" --rounds "$ROUNDS" --min-clients "$n" --model "$MODEL" \
    --dataset digits --lr 0.1 --momentum 0.9 --metrics-out "$OUT/run$n.jsonl" --log-level warn >/dev/null 2>"$OUT/agg$n.log" &
  agg=$!
  for ((i = 0; i < n; i++)); do
    "$BIN/shoal-client" --connect "tcp://127.0.0.1:$port" --partition "$i/$n" --no-progress --log-level warn 2>/dev/null &
  done
  wait "$agg"
  wait
  python3 - "$OUT/run$n.jsonl" "$n" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = rows[1:] if len(rows) > 1 else rows   # round 1 includes connection warm-up
sec = statistics.median(r["seconds"] for r in rows)
up = statistics.mean(r["bytes_up"] for r in rows)
down = statistics.mean(r["bytes_down"] for r in rows)
dense = statistics.mean(r["bytes_dense_equiv"] for r in rows)
print("%-8s %-16.4f %-14.0f %-14.0f %-12.4f" % (sys.argv[2], sec, up, down, (up + down) / dense))
PY
done

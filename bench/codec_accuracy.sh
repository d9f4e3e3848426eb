#!/usr/bin/env bash
# Benchmark: bytes on the wire against accuracy for each codec (issue "Update compression").
# Digits, mlp:512,512 (300,042 parameters), 8 clients with dirichlet:0.5 parts, the same seed,
# rounds and hyper-parameters for every row; the same codec up and down. For each row: final
# held-out accuracy (mean of the last 3 rounds, to damp round-to-round noise), its difference
# to dense fp32, mean upload and download bytes per client per round, the ratios dense/codec
# (dense = the fp32 model, 1,200,168 bytes), and the mean encode / decode time per update.
#   bench/codec_accuracy.sh                 (after scripts/build)
#   ROUNDS=30 bench/codec_accuracy.sh
#   CODEC_DOWN=int8 CODECS_OVERRIDE="none;ef|topk:ratio=0.01|int8" bench/codec_accuracy.sh
#   PLOTS=docs/img/codec bench/codec_accuracy.sh   (also shoal-report's plots of every run, into PLOTS)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-60}"
CLIENTS="${CLIENTS:-8}"
MODEL="${MODEL:-mlp:512,512}"
BIN=build/bin
OUT="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$OUT"' EXIT
export OPENBLAS_NUM_THREADS=1

CODEC_DOWN="${CODEC_DOWN:-}"   # empty: the same codec as the upload
if [ -n "${CODECS_OVERRIDE:-}" ]; then IFS=';' read -r -a CODECS <<<"$CODECS_OVERRIDE"; else
CODECS=(
  "none"
  "bf16"
  "int8"
  "qsgd:levels=16"
  "ef|topk:ratio=0.01"
  "ef|topk:ratio=0.01|int8"
  "ef|topk:ratio=0.001|int8"
  "ef|sign"
  "ef|powersgd:rank=4"
  "ef|demo:chunk=64,topk=8,bits=1"
)
fi

run() {  # $1 = codec, $2 = metrics file
  local port i
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  "$BIN/shoal-aggregator" --listen "tcp://127.0.0.1:$port" --rounds "$ROUNDS" --min-clients "$CLIENTS" \
    --model "$MODEL" --dataset digits --seed 1 --lr 0.05 --momentum 0.9 --local-epochs 1 \
    --codec "$1" ${CODEC_DOWN:+--codec-down "$CODEC_DOWN"} --metrics-out "$2" --log-level warn >/dev/null 2>"$OUT/agg.log" &
  local agg=$!
  for ((i = 0; i < CLIENTS; i++)); do
    "$BIN/shoal-client" --connect "tcp://127.0.0.1:$port" --partition "$i/$CLIENTS" \
      --partition-scheme dirichlet:0.5 --no-progress --log-level warn 2>>"$OUT/clients.log" &
  done
  wait "$agg" || { echo "aggregator failed for codec $1:"; tail -5 "$OUT/agg.log"; exit 1; }
  wait
}

i=0
for c in "${CODECS[@]}"; do
  run "$c" "$OUT/run$i.jsonl"
  i=$((i + 1))
done

python3 - "$OUT" "$MODEL" "${CODECS[@]}" <<'PY'
import json, sys, statistics
out, model, codecs = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = []
for i, c in enumerate(codecs):
    lines = [json.loads(l) for l in open(f"{out}/run{i}.jsonl")]
    acc = statistics.mean(l["test_accuracy"] for l in lines[-3:])
    per = [l for l in lines if l["clients_reported"]]
    up = statistics.mean(l["bytes_up"] / l["clients_reported"] for l in per)
    down = statistics.mean(l["bytes_down"] / l["clients_selected"] for l in per[1:])  # round 1 sends the full model
    enc = statistics.mean(l["encode_seconds"] for l in per) * 1e3
    dec = statistics.mean(l["decode_seconds"] / l["clients_reported"] for l in per) * 1e3
    dense = per[0]["bytes_dense_equiv"] / (per[0]["clients_selected"] + per[0]["clients_reported"])
    rows.append((c, acc, up, down, dense, enc, dec))
base = rows[0][1]
print(f"model {model}, {rows[0][4]:.0f} dense bytes; accuracy = mean of the last 3 rounds")
print(f"{'codec':34} {'accuracy':>8} {'delta':>7} {'up B/client':>12} {'dense/up':>9} {'down B/client':>13} {'dense/down':>10} {'enc ms':>7} {'dec ms':>7}")
for c, acc, up, down, dense, enc, dec in rows:
    print(f"{c:34} {acc:8.4f} {acc - base:+7.4f} {up:12.0f} {dense / up:9.1f} {down:13.0f} {dense / down:10.1f} {enc:7.2f} {dec:7.2f}")
PY

if [ -n "${PLOTS:-}" ]; then
  names=()
  for c in "${CODECS[@]}"; do names+=(--name "$c"); done
  files=()
  for ((i = 0; i < ${#CODECS[@]}; i++)); do files+=("$OUT/run$i.jsonl"); done
  "$BIN/shoal-report" "${files[@]}" "${names[@]}" -o "$PLOTS" >/dev/null
  echo "plots: $PLOTS"
fi

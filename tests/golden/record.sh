#!/usr/bin/env bash
# Behaviour goldens for restructuring (issue 33): runs a few short, deterministic trainings
# with real processes on 127.0.0.1 (and shoal-sim) and prints, one line per round or step,
# what must not move when code is only reshaped: the global model's hash and the losses.
# Byte counts are left out (heartbeats make them timing-dependent). Compare a run before and
# after a change:
#   tests/golden/record.sh > /tmp/after.txt && diff tests/golden/x86_64.txt /tmp/after.txt
# Hashes depend on the CPU's BLAS kernels, so the committed file holds for the machine it was
# recorded on (its first line); on another machine record a "before" of your own first.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=build/bin
OUT="${OUT:-build/golden}"
rm -rf "$OUT" && mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=1
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# fields NAME JSONL KEY...: one line per record: NAME, then each KEY's value.
fields() {
  python3 - "$@" <<'PY'
import json, sys
name, path, keys = sys.argv[1], sys.argv[2], sys.argv[3:]
for line in open(path):
    r = json.loads(line)
    print(name, " ".join(f"{k}={r.get(k)!r}" for k in keys))
PY
}

# federated NAME AGGREGATOR-FLAGS... -- CLIENT-FLAGS...: one aggregator, 4 clients.
federated() {
  local name=$1; shift
  local agg=() cli=()
  while [ "$1" != "--" ]; do agg+=("$1"); shift; done; shift
  cli=("$@")
  local ep="tcp://127.0.0.1:$(port)" pids=()
  "$BIN/shoal-aggregator" --listen "$ep" --rounds 6 --min-clients 4 --model mlp:64 --dataset digits --seed 1 \
    "${agg[@]}" --metrics-out "$OUT/$name.jsonl" --log-level warn >"$OUT/$name.out" 2>"$OUT/$name.log" &
  local a=$!
  for ((i = 0; i < 4; i++)); do
    "$BIN/shoal-client" --connect "$ep" --dataset digits --partition "$i/4" --partition-scheme dirichlet:0.5 \
      --no-progress "${cli[@]}" 2>"$OUT/$name-c$i.log" &
    pids+=("$!")
  done
  wait "$a"
  for p in "${pids[@]}"; do wait "$p"; done
  fields "$name" "$OUT/$name.jsonl" round model_hash test_loss test_accuracy train_loss client_eval_loss
}

# peers NAME FLAGS...: 3 shoal-peer processes.
peers() {
  local name=$1; shift
  local ports=() pids=()
  for ((i = 0; i < 3; i++)); do ports+=("$(port)"); done
  for ((i = 0; i < 3; i++)); do
    local boot=()
    [ "$i" -gt 0 ] && boot=(--peers "tcp://127.0.0.1:${ports[0]}")
    "$BIN/shoal-peer" --listen "tcp://127.0.0.1:${ports[$i]}" --name "p$i" --partition "$i/3" --partition-scheme iid \
      --model mlp:64 --seed 1 --min-peers 3 --eval-every 0 --device cpu "${boot[@]}" "$@" \
      --metrics-out "$OUT/$name-p$i.jsonl" 2>"$OUT/$name-p$i.log" &
    pids+=("$!")
    [ "$i" -eq 0 ] && sleep 0.3
  done
  for p in "${pids[@]}"; do wait "$p"; done
  for ((i = 0; i < 3; i++)); do fields "$name-p$i" "$OUT/$name-p$i.jsonl" step model_hash loss included; done
}

# sim NAME FLAGS...: shoal-sim, 20 clients.
sim() {
  local name=$1; shift
  "$BIN/shoal-sim" --clients 20 --rounds 4 --dataset digits --model mlp:32 --seed 1 --lr 0.1 --momentum 0.9 \
    "$@" --metrics-out "$OUT/$name.jsonl" >"$OUT/$name.out" 2>&1
  fields "$name" "$OUT/$name.jsonl" round model_hash test_loss train_loss clients_reported
}

echo "# $(uname -m) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
federated demo --
federated codec --codec 'ef|topk:ratio=0.05|int8' --codec-down int8 --
federated fedadam --strategy fedadam --local-steps 5 --
federated secagg --secagg --
peers allreduce --steps 5 --mode allreduce --lr 0.05 --momentum 0.9
peers allgather-demo --steps 5 --mode allgather --client-optimizer demo --lr 0.001 --codec demo:chunk=64,topk=8,bits=1
peers diloco --steps 2 --mode diloco --client-optimizer adamw --lr 0.001 --diloco-inner-steps 10 --codec int8
sim sim-flat
sim sim-edges --edges 2 --fraction 0.5
sim sim-secagg --secagg

#!/usr/bin/env bash
# Serverless training traffic and step time, 4 shoal-peer processes on 127.0.0.1, one model of
# 1,126,410 parameters (mlp:1024,1024 on digits): bytes each peer sends per step for
# allgather (dense fp32 and DeMo), diloco + int8 and gossip, against a dense ring all-reduce's
# 2(n-1)/n x model bytes, and the step time against PyTorch's gloo all-reduce of a tensor of
# the same size, measured in the same run (needs: scripts/setup python3-torch).
#   bench/peer_bench.sh            (STEPS=20 by default)
#   CURVE=1 bench/peer_bench.sh    (CurveZMQ and signatures on every link)
#   METHODS="allreduce-dense gloo" bench/peer_bench.sh   (some of: allgather-dense allreduce-dense
#                                  allgather-demo allgather-demo-overlap diloco-int8 gossip-dense gloo gloo-step)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bin
OUT="${OUT:-build/bench-peers}"
STEPS="${STEPS:-20}"
N=4
mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=1
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# CURVE=1: every peer with its own key pair and the others' public keys allowed (CurveZMQ on
# every link, Ed25519 signatures), as in production; the labels get a "-curve" suffix.
if [ "${CURVE:-0}" = 1 ]; then
  KEYS="$OUT/keys"
  mkdir -p "$KEYS/allow"
  for ((i = 0; i < N; i++)); do
    [ -f "$KEYS/p$i.key" ] || "$BIN/shoal-keygen" "$KEYS/p$i" >/dev/null 2>&1
    cp "$KEYS/p$i.pub" "$KEYS/allow/"
  done
fi

run() {  # label steps flags...
  local label=$1 steps=$2
  shift 2
  [ "${CURVE:-0}" = 1 ] && label="$label-curve"
  local ports=() pids=()
  for ((i = 0; i < N; i++)); do ports+=("$(port)"); done
  for ((i = 0; i < N; i++)); do
    local boot=()
    [ "$i" -gt 0 ] && boot=(--peers "tcp://127.0.0.1:${ports[0]}")
    [ "$i" -gt 0 ] && [ "${CURVE:-0}" = 1 ] && boot=(--peers "tcp://127.0.0.1:${ports[0]}@$KEYS/p0.pub")
    local keys=()
    [ "${CURVE:-0}" = 1 ] && keys=(--secret-key "$KEYS/p$i.key" --allow-keys "$KEYS/allow")
    "$BIN/shoal-peer" --listen "tcp://127.0.0.1:${ports[$i]}" --name "p$i" --partition "$i/$N" --partition-scheme iid "${keys[@]}" \
      --model mlp:1024,1024 --seed 1 --steps "$steps" --min-peers "$N" --eval-every 0 --device cpu \
      --step-timeout 30 --heartbeat-timeout 30 "${boot[@]}" "$@" --metrics-out "$OUT/$label-p$i.jsonl" \
      2>"$OUT/$label-p$i.log" &
    pids+=("$!")
    [ "$i" -eq 0 ] && sleep 0.5
  done
  for p in "${pids[@]}"; do wait "$p"; done
  python3 bench/peer_summary.py "$label" "$OUT/$label"-p*.jsonl
}

want() { [ -z "${METHODS:-}" ] || [[ " $METHODS " == *" $1 "* ]]; }
want allgather-dense && run allgather-dense "$STEPS" --mode allgather --lr 0.05 --momentum 0.9
want allreduce-dense && run allreduce-dense "$STEPS" --mode allreduce --lr 0.05 --momentum 0.9
want allgather-demo && run allgather-demo "$STEPS" --mode allgather --client-optimizer demo --lr 0.001 --codec demo:chunk=64,topk=8,bits=1
want allgather-demo-overlap && run allgather-demo-overlap "$STEPS" --mode allgather --client-optimizer demo --lr 0.001 --codec demo:chunk=64,topk=8,bits=1 --overlap
want diloco-int8 && run diloco-int8 3 --mode diloco --client-optimizer adamw --lr 0.001 --diloco-inner-steps 100 --codec int8
want gossip-dense && run gossip-dense "$STEPS" --mode gossip --lr 0.05 --momentum 0.9 --gossip-k 2
want gloo && /usr/bin/python3 bench/torch_allreduce.py --numel 1126410 --world "$N" --iters 20
# The whole data-parallel step in PyTorch (gradient, gloo all-reduce, SGD momentum), batch 32
# as shoal-peer's default, to set beside allreduce-dense's step_seconds.
want gloo-step && /usr/bin/python3 bench/torch_allreduce.py --step mlp:1024,1024 --batch 32 --world "$N" --iters 20
true  # the status of the last wanted run, not of the last test of a METHODS filter

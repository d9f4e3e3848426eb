#!/usr/bin/env bash
# Step time on the consumer link DisTrO targets, measured: 4 shoal-peer processes, each in its
# own network namespace, joined through a bridge by veth pairs shaped with tc tbf to 100 Mbit/s
# down and 10 Mbit/s up per peer (netem is absent from this kernel, so no added delay). The
# model is mlp:1024,1024 on digits (1,126,410 parameters); the runs are allgather + DeMo (with
# and without --overlap), diloco + int8 (H = 100 inner steps), a dense fp32 allgather and a
# dense ring all-reduce of
# the same model, with CurveZMQ on every link, and PyTorch gloo's all-reduce of a tensor of the
# same size between 4 processes in the same namespaces (no encryption). Needs root, iproute2
# and python3-torch. Creates and removes namespaces shoalb-*.
#   sudo bench/peer_shaped.sh
#   sudo METHODS="allgather-demo gloo" bench/peer_shaped.sh   (some of: allgather-demo
#        allgather-demo-overlap diloco-int8 allgather-dense allreduce-dense gloo)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/build/bin"
OUT="${OUT:-build/bench-shaped}"
N=4
UP="${UP:-10mbit}"
DOWN="${DOWN:-100mbit}"
mkdir -p "$OUT"
source bench/shaped_links.sh
trap shaped_cleanup EXIT
shaped_setup "$N" "$UP" "$DOWN"
export OPENBLAS_NUM_THREADS=1

run() {  # label steps flags...
  local label=$1 steps=$2
  shift 2
  local pids=()
  for ((i = 0; i < N; i++)); do
    local boot=()
    [ "$i" -gt 0 ] && boot=(--peers "tcp://10.77.0.1:7100@$KEYS/p0.pub")
    ip netns exec "shoalb-p$i" "$BIN/shoal-peer" --listen "tcp://10.77.0.$((i + 1)):7100" --name "p$i" \
      --secret-key "$KEYS/p$i.key" --allow-keys "$KEYS/allow" --partition "$i/$N" --partition-scheme iid \
      --model mlp:1024,1024 --seed 1 --steps "$steps" --min-peers "$N" --eval-every 0 --device cpu \
      --step-timeout 300 --heartbeat-interval 1 --heartbeat-timeout 120 --join-timeout 60 "${boot[@]}" "$@" \
      --metrics-out "$OUT/$label-p$i.jsonl" 2>"$OUT/$label-p$i.log" &
    pids+=("$!")
    [ "$i" -eq 0 ] && sleep 1
  done
  for p in "${pids[@]}"; do wait "$p"; done
  python3 bench/peer_summary.py "$label" "$OUT/$label"-p*.jsonl
}

gloo() {  # the 4 ranks, one per namespace; rank 0 listens on peer 0's address
  local pids=()
  for ((i = 0; i < N; i++)); do
    ip netns exec "shoalb-p$i" env GLOO_SOCKET_IFNAME="veth$i" /usr/bin/python3 bench/torch_allreduce.py --numel 1126410 --world "$N" \
      --iters "${GLOO_ITERS:-5}" --rank "$i" --master 10.77.0.1 --port 29500 >"$OUT/gloo-p$i.out" 2>&1 &
    pids+=("$!")
  done
  for p in "${pids[@]}"; do wait "$p"; done
  cat "$OUT/gloo-p0.out"
}

want() { [ -z "${METHODS:-}" ] || [[ " $METHODS " == *" $1 "* ]]; }
echo "links: $UP up, $DOWN down per peer, $N peers"
want allgather-demo && run allgather-demo "${DEMO_STEPS:-12}" --mode allgather --client-optimizer demo --lr 0.001 --codec demo:chunk=64,topk=8,bits=1
want allgather-demo-overlap && run allgather-demo-overlap "${DEMO_STEPS:-12}" --mode allgather --client-optimizer demo --lr 0.001 --codec demo:chunk=64,topk=8,bits=1 --overlap
want diloco-int8 && run diloco-int8 "${DILOCO_STEPS:-3}" --mode diloco --client-optimizer adamw --lr 0.001 --diloco-inner-steps 100 --codec int8
want allgather-dense && run allgather-dense "${DENSE_STEPS:-4}" --mode allgather --lr 0.05 --momentum 0.9
want allreduce-dense && run allreduce-dense "${DENSE_STEPS:-4}" --mode allreduce --lr 0.05 --momentum 0.9
want gloo && gloo
true

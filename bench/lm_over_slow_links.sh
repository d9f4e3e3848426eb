#!/usr/bin/env bash
# Language-model training over slow links (issue 14's experiment): 4 shoal-peer processes train
# the CPU-scale GPT (gpt: 3 layers, d = 96, 4 heads, context 64; 366,432 parameters) on the
# King James Bible, byte-level, with the same seed, data partitions (iid) and batch (8 x 64
# bytes per peer and step) for every method, and the held-out loss every EVAL steps:
#   a   allreduce          dense data-parallel AdamW, gradients summed by the ring all-reduce:
#                          the baseline every byte ratio and loss gap is measured against
#   b   demo-*             DeMo (allgather of DCT top-k components, sign step), 32-bit or 1-bit values
#   c   diloco-*           DiLoCo (H inner AdamW steps, outer Nesterov 0.7/0.9), the outer gradient
#                          through the ring all-reduce, int8 per hop
#   d   sparseloco-*       DiLoCo with a compressed outer gradient: error feedback + top-k + int8
#                          (SparseLoCo-like), all-gathered
# Steps are inner steps for DiLoCo (an outer step is H of them). Writes, under OUT:
#   lm_table.md    final held-out loss, gap to (a), bytes per worker per step, ratio to (a)
#   lm_loss.png    held-out loss against steps and against cumulative bytes per worker
# and, with SHAPED=1 (root, iproute2), a second table lm_shaped.md: seconds per step of each
# method on 10 Mbit/s up / 100 Mbit/s down links (bench/shaped_links.sh), CURVE on every link.
#   bench/lm_over_slow_links.sh                 STEPS=3000 EVAL=100 by default
#   STEPS=600 METHODS="allreduce demo-k8" bench/lm_over_slow_links.sh
#   SHAPED=1 LOOPBACK=0 bench/lm_over_slow_links.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/build/bin"
OUT="${OUT:-build/bench-lm}"
STEPS="${STEPS:-3000}"
EVAL="${EVAL:-100}"
N=4
mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=1
command -v /usr/bin/python3 >/dev/null && /usr/bin/python3 -c "import matplotlib" 2>/dev/null ||
  { echo "installing python3-matplotlib (the plot)"; apt-get install -y -q python3-matplotlib >"$OUT/apt.log" 2>&1; }
[ -s "${SHOAL_DATA_DIR:-$HOME/.cache/shoal}/kjv.txt" ] || { echo "no KJV text: run scripts/setup first" >&2; exit 1; }

# label | H (inner steps per metrics step) | flags
METHOD_TABLE=$(cat <<'T'
allreduce|1|--mode allreduce --client-optimizer adamw --lr 0.003
demo-k32|1|--mode allgather --client-optimizer demo --lr 0.003 --client-demo-chunk 64 --client-demo-topk 32 --client-demo-decay 0.999 --codec demo:chunk=64,topk=32,bits=32
demo-k8|1|--mode allgather --client-optimizer demo --lr 0.003 --client-demo-chunk 64 --client-demo-topk 8 --client-demo-decay 0.99 --codec demo:chunk=64,topk=8,bits=32
demo-k8-1bit|1|--mode allgather --client-optimizer demo --lr 0.003 --client-demo-chunk 64 --client-demo-topk 8 --client-demo-decay 0.99 --codec demo:chunk=64,topk=8,bits=1
diloco-h50-int8|50|--mode diloco --diloco-allreduce --codec int8 --client-optimizer adamw --lr 0.003 --diloco-inner-steps 50
diloco-h100-int8|100|--mode diloco --diloco-allreduce --codec int8 --client-optimizer adamw --lr 0.003 --diloco-inner-steps 100
diloco-h50-gather|50|--mode diloco --codec none --client-optimizer adamw --lr 0.003 --diloco-inner-steps 50
diloco-h50-avg|50|--mode diloco --diloco-allreduce --codec int8 --client-optimizer adamw --lr 0.003 --diloco-inner-steps 50 --diloco-outer-lr 1 --diloco-outer-momentum 0
sparseloco-h20-3pct-avg|20|--mode diloco --codec ef|topk:ratio=0.03|int8 --client-optimizer adamw --lr 0.003 --diloco-inner-steps 20 --diloco-outer-lr 1 --diloco-outer-momentum 0
sparseloco-h50-1pct-avg|50|--mode diloco --codec ef|topk:ratio=0.01|int8 --client-optimizer adamw --lr 0.003 --diloco-inner-steps 50 --diloco-outer-lr 1 --diloco-outer-momentum 0
sparseloco-h50-1pct|50|--mode diloco --codec ef|topk:ratio=0.01|int8 --client-optimizer adamw --lr 0.003 --diloco-inner-steps 50
sparseloco-h20-3pct|20|--mode diloco --codec ef|topk:ratio=0.03|int8 --client-optimizer adamw --lr 0.003 --diloco-inner-steps 20
T
)
METHODS="${METHODS:-allreduce demo-k32 demo-k8 demo-k8-1bit diloco-h50-int8 diloco-h100-int8 diloco-h50-avg sparseloco-h50-1pct sparseloco-h20-3pct sparseloco-h20-3pct-avg sparseloco-h50-1pct-avg}"

# run PREFIX LABEL STEPS HOST-OF-I KEYED flags...: N peers, waits for all.
run() {
  local prefix=$1 label=$2 steps=$3 where=$4
  shift 4
  local pids=() h
  h=$(grep "^$label|" <<<"$METHOD_TABLE" | cut -d'|' -f2)
  local outer=$(((steps + h - 1) / h)) every=$(((EVAL + h - 1) / h))
  for ((i = 0; i < N; i++)); do
    local net=() addr="tcp://127.0.0.1:$((7600 + i))" boot=() keys=()
    if [ "$where" = shaped ]; then
      net=(ip netns exec "shoalb-p$i")
      addr="tcp://10.77.0.$((i + 1)):7100"
      keys=(--secret-key "$KEYS/p$i.key" --allow-keys "$KEYS/allow")
      [ "$i" -gt 0 ] && boot=(--peers "tcp://10.77.0.1:7100@$KEYS/p0.pub")
    else
      [ "$i" -gt 0 ] && boot=(--peers "tcp://127.0.0.1:7600")
    fi
    "${net[@]}" "$BIN/shoal-peer" --listen "$addr" --name "p$i" "${keys[@]}" "${boot[@]}" \
      --model gpt --dataset kjv --partition "$i/$N" --partition-scheme iid --batch-size 8 --seed 1 \
      --steps "$outer" --eval-every "$every" --min-peers "$N" --device cpu --step-timeout 10 \
      --heartbeat-interval 0.5 --heartbeat-timeout 60 --join-timeout 60 --log-level warn "$@" \
      --metrics-out "$OUT/$prefix$label-p$i.jsonl" 2>"$OUT/$prefix$label-p$i.log" &
    pids+=("$!")
    [ "$i" -eq 0 ] && sleep 1
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  [ "$rc" -eq 0 ] || { echo "$label: a peer failed; see $OUT/$prefix$label-p*.log" >&2; return 1; }
}

flags_of() { grep "^$1|" <<<"$METHOD_TABLE" | cut -d'|' -f3-; }
# The codec spec holds '|': split the flags on spaces only.
as_array() { read -r -a FLAGS <<<"$1"; }

if [ "${LOOPBACK:-1}" = 1 ]; then
  for m in $METHODS; do
    as_array "$(flags_of "$m")"
    start=$(date +%s)
    run "" "$m" "$STEPS" loopback "${FLAGS[@]}"
    echo "loopback $m: $STEPS steps in $(($(date +%s) - start)) s"
  done
  /usr/bin/python3 bench/lm_summary.py --out "$OUT" --baseline allreduce --methods "$METHOD_TABLE" $METHODS
fi

if [ "${SHAPED:-0}" = 1 ]; then
  source bench/shaped_links.sh
  trap shaped_cleanup EXIT
  shaped_setup "$N" "${UP:-10mbit}" "${DOWN:-100mbit}"
  for m in $METHODS; do
    as_array "$(flags_of "$m")"
    h=$(grep "^$m|" <<<"$METHOD_TABLE" | cut -d'|' -f2)
    # Enough steps for a median: 6 dense steps; 3 outer steps of DiLoCo; 30 DeMo steps.
    steps=$((h > 1 ? 3 * h : 30)); [ "$m" = allreduce ] && steps=6
    EVAL=1000000 run shaped- "$m" "$steps" shaped "${FLAGS[@]}"
    echo "shaped $m: done"
  done
  /usr/bin/python3 bench/lm_summary.py --out "$OUT" --baseline allreduce --methods "$METHOD_TABLE" --shaped $METHODS
fi

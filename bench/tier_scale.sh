#!/usr/bin/env bash
# Hierarchical vs flat aggregation (issue 19): shoal-sim with CLIENTS virtual clients (default
# 10,000), --fraction 0.1 (1,000 updates a round), ROUNDS rounds (default 10), digits, default
# mlp, lr 0.1, 5 local epochs; flat (EDGES 0), then with 10 and 100 edge aggregators between the
# clients and the root (each edge samples 0.1 of its clients; the root takes every edge).
# Per setting, the median of REPS runs (default 3) of the root's figures per round, from the
# simulator's summary line (rounds after the first, which also registers everyone): CPU seconds
# of the root's service thread, and bytes it received; then per edge (or per client update, flat)
# and against flat. One line per step on stdout; the simulator's output in a log under a temp dir.
#   bench/tier_scale.sh                       (after scripts/build)
#   EDGES="0 10 100 1000" REPS=1 bench/tier_scale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bin
CLIENTS="${CLIENTS:-10000}"
ROUNDS="${ROUNDS:-10}"
EDGES="${EDGES:-0 10 100}"
REPS="${REPS:-3}"
OUT="$(mktemp -d /tmp/tier_scale.XXXXXX)"
export OPENBLAS_NUM_THREADS=1

for e in $EDGES; do
  for r in $(seq 1 "$REPS"); do
    echo "tier_scale: $CLIENTS clients, $e edges, run $r"
    cmd=("$BIN/shoal-sim" --clients "$CLIENTS" --fraction 0.1 --rounds "$ROUNDS" --dataset digits --lr 0.1
         --local-epochs 5 --edges "$e" --metrics-out "$OUT/e$e.r$r.jsonl")
    echo "+ ${cmd[*]}" >>"$OUT/log"
    timeout 600 "${cmd[@]}" >"$OUT/e$e.r$r.out" 2>&1 || { echo "tier_scale: run failed, see $OUT/e$e.r$r.out"; exit 1; }
  done
done

python3 - "$OUT" "$CLIENTS" "$EDGES" "$REPS" <<'PY'
import json, re, statistics, sys
out, clients, edges, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), int(sys.argv[4])
rows = {}
for e in edges:
    cpu, bytes_in, round_s, acc = [], [], [], []
    for r in range(1, reps + 1):
        line = [l for l in open(f"{out}/e{e}.r{r}.out") if l.startswith("shoal-sim:")][-1]
        m = re.search(r"root per round \(after the first\): ([0-9.]+) CPU s, ([0-9.]+) bytes in", line)
        cpu.append(float(m.group(1)))
        bytes_in.append(float(m.group(2)))
        lines = [json.loads(l) for l in open(f"{out}/e{e}.r{r}.jsonl") if l.strip()]
        round_s.append(statistics.mean(x["seconds"] for x in lines[1:]))
        acc.append(lines[-1]["test_accuracy"])
    rows[e] = (statistics.median(cpu), statistics.median(bytes_in), statistics.median(round_s), statistics.median(acc))
flat = rows.get("0")
print(f"| edges | root CPU s/round | root bytes in/round | per edge (flat: per update) CPU ms, KB | vs flat: CPU, bytes | mean round s | final accuracy |")
print("|---|---|---|---|---|---|---|")
for e in edges:
    cpu, b, rs, acc = rows[e]
    senders = int(e) if int(e) else clients // 10
    ratio = f"{cpu / flat[0]:.3f}, {b / flat[1]:.3f}" if flat and e != "0" else "1, 1"
    print(f"| {e} | {cpu:.4f} | {b:,.0f} | {1000 * cpu / senders:.3f}, {b / senders / 1000:.1f} | {ratio} | {rs:.3f} | {acc:.4f} |")
PY
echo "tier_scale: logs in $OUT"

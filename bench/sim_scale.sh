#!/usr/bin/env bash
# shoal-sim at scale (issue 13): the aggregator Service and N virtual clients in one process,
# digits, default mlp (4,810 parameters = 18.8 KiB fp32), lr 0.1, 5 local epochs.
#   (a) 10,000 registered clients, 1,000 per round (--fraction 0.1), 20 rounds: mean seconds per
#       round (mean of the JSONL `seconds`), total wall time, setup + registration, final
#       accuracy, peak RSS (/usr/bin/time %M and the simulator's own VmHWM);
#   (b) peak RSS at SIZES registered clients (default 1,000 10,000 100,000) with a FIXED 100
#       clients per round and 3 rounds, and the growth per registered client in KiB between the
#       smallest and the largest size that finished. A size that does not finish within
#       STEP_TIMEOUT seconds (default 300) is reported with how many clients the service dropped
#       for heartbeat silence (each comes back and registers again).
# One line per step on stdout; every command and the simulator's output go to a log under a
# temp dir (its path is printed at the end).
#   bench/sim_scale.sh                          (after scripts/build)
#   SIZES="1000 10000 20000" STEP_TIMEOUT=120 bench/sim_scale.sh
#   SIM_FLAGS="--heartbeat-interval 30 --heartbeat-timeout 600" bench/sim_scale.sh   (b only)
#   STEPS=b bench/sim_scale.sh                  (a, b or "a b")
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bin
SIZES="${SIZES:-1000 10000 100000}"
STEP_TIMEOUT="${STEP_TIMEOUT:-300}"
STEPS="${STEPS:-a b}"
SIM_FLAGS="${SIM_FLAGS:-}"
OUT="$(mktemp -d /tmp/sim_scale.XXXXXX)"
LOG="$OUT/log"
export OPENBLAS_NUM_THREADS=1
TASK=(--dataset digits --lr 0.1 --local-epochs 5)

# run NAME TIMEOUT shoal-sim-args...: runs the simulator under /usr/bin/time; leaves
# $OUT/NAME.out (stdout+stderr), $OUT/NAME.time ("seconds maxrss_KB"), $OUT/NAME.jsonl; returns rc.
run() {
  local name="$1" limit="$2"; shift 2
  echo "+ timeout $limit $BIN/shoal-sim $* --metrics-out $OUT/$name.jsonl" >>"$LOG"
  local rc=0
  timeout "$limit" /usr/bin/time -f "%e %M" -o "$OUT/$name.time" \
    "$BIN/shoal-sim" "$@" --metrics-out "$OUT/$name.jsonl" >"$OUT/$name.out" 2>&1 || rc=$?
  grep -v 'registered as id' "$OUT/$name.out" | tail -n 5 >>"$LOG" || true
  return $rc
}

# summary NAME: the simulator's summary line fields + the JSONL mean round seconds.
summary() {
  python3 - "$OUT/$1.out" "$OUT/$1.jsonl" "$OUT/$1.time" <<'PY'
import json, re, statistics, sys
out = open(sys.argv[1]).read()
line = [l for l in out.splitlines() if l.startswith("shoal-sim:")][-1]
g = lambda pat: re.search(pat, line).group(1)
rows = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
sec = statistics.mean(r["seconds"] for r in rows) if rows else float("nan")
t = open(sys.argv[3]).read().split()
wall, kb = t[-2], int(t[-1])
print("rounds=%s mean_round_s=%.4f total_s=%s setup_s=%s final_acc=%s sim_peak_rss_MiB=%s time_maxrss_KiB=%d wall_s=%s" % (
    g(r"(\d+) rounds in"), sec, g(r"rounds in ([\d.]+) s"), g(r"setup and registration ([\d.]+) s"),
    g(r"final accuracy ([\d.]+)"), g(r"peak RSS ([\d.]+) MiB"), kb, wall))
PY
}

if [[ " $STEPS " == *" a "* ]]; then
  if run a 900 --clients 10000 --max-clients 10000 --fraction 0.1 --rounds 20 "${TASK[@]}"; then
    echo "a) 10000 clients, 1000/round, 20 rounds: $(summary a)"
  else
    echo "a) 10000 clients, 1000/round, 20 rounds: FAILED rc=$? (see $LOG)"
  fi
fi

if [[ " $STEPS " == *" b "* ]]; then
  first_n="" first_kb="" last_n="" last_kb=""
  for n in $SIZES; do
    frac="$(python3 -c "print(100 / $n)")"
    # The default log level (warn): info logs every registration from the service thread,
    # which is the thread that limits the size (see docs/BENCHMARKS.md).
    # shellcheck disable=SC2086
    if run "b$n" "$STEP_TIMEOUT" --clients "$n" --max-clients "$n" --fraction "$frac" --rounds 3 \
        "${TASK[@]}" $SIM_FLAGS; then
      kb="$(awk '{print $2}' "$OUT/b$n.time")"
      echo "b) $n registered, 100/round, 3 rounds: $(summary "b$n")"
      if [ -z "$first_n" ]; then first_n=$n first_kb=$kb; fi
      last_n=$n last_kb=$kb
    else
      rc=$?
      echo "b) $n registered: did NOT finish in ${STEP_TIMEOUT}s (rc=$rc);" \
        "$(grep -c 'silent for over' "$OUT/b$n.out" || true) clients dropped for heartbeat silence and re-registering"
    fi
  done
  if [ -n "$last_n" ] && [ "$last_n" != "$first_n" ]; then
    python3 -c "print('b) growth per registered client, %d -> %d: %.2f KiB (digits mlp model = 18.8 KiB)' % ($first_n, $last_n, ($last_kb - $first_kb) / ($last_n - $first_n)))"
  fi
fi
echo "log: $LOG  (ulimit -n $(ulimit -n), threads-max $(cat /proc/sys/kernel/threads-max))"

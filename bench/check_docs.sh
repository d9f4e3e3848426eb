#!/usr/bin/env bash
# Re-runs the cheap figures of docs/BENCHMARKS.md with the commands printed there and checks
# each against its documented value and noise band; exits 1 when one has moved beyond it (the
# document then needs the new figure, or the code a look). Not part of CI's time budget
# (about a minute here); run it after scripts/build, on an otherwise idle machine:
#   bench/check_docs.sh                 every check
#   CHECKS="wire sim" bench/check_docs.sh
# Each line: the figure, what was measured, what the document says, the band, ok or MOVED.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=build/bin
CHECKS="${CHECKS:-wire sim codec transport}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
export OPENBLAS_NUM_THREADS=1
moved=0

# check NAME MEASURED DOCUMENTED BAND: |measured / documented - 1| <= BAND (a fraction).
check() {
  local verdict
  if [[ -z "$2" ]]; then
    printf '%-58s no figure came out (see the command above): MOVED\n' "$1"
    moved=1
    return
  fi
  verdict="$(python3 -c "m, d, b = float('$2'), float('$3'), float('$4'); print('ok' if abs(m / d - 1) <= b else 'MOVED')")"
  printf '%-58s measured %-10s documented %-10s band ±%-5s %s\n' "$1" "$2" "$3" "$(python3 -c "print('%g%%' % (100 * $4))")" "$verdict"
  [[ "$verdict" == ok ]] || moved=1
}

# (i) "Round time and bytes on the wire": wire/dense with 2 clients (bytes are near-exact;
# heartbeats add a little noise).
if [[ " $CHECKS " == *" wire "* ]]; then
  CLIENTS=2 bench/round_scaling.sh >"$OUT/wire.txt" 2>&1
  check "wire/dense, 2 clients, mlp:64 (bench/round_scaling.sh)" "$(awk '$1 == 2 {print $5}' "$OUT/wire.txt")" 1.0220 0.005
fi

# "Simulator at scale" (b): RSS growth per registered client from 1,000 to 10,000.
if [[ " $CHECKS " == *" sim "* ]]; then
  SIZES="1000 10000" STEP_TIMEOUT=120 STEPS=b bench/sim_scale.sh >"$OUT/sim.txt" 2>&1
  check "shoal-sim RSS per registered client, KiB (bench/sim_scale.sh b)" \
    "$(sed -n 's/.*growth per registered client.*: \([0-9.]*\) KiB.*/\1/p' "$OUT/sim.txt")" 14.1 0.15
fi

# "Update compression: throughput against memcpy": encode rates as a fraction of memcpy, at
# the document's 64M floats, AVX2 (ratios swing with the machine's load: a wide band).
if [[ " $CHECKS " == *" codec "* ]]; then
  "$BIN/codec_throughput_bench" --benchmark_filter='codec_encode/.*avx2' --benchmark_min_time=0.2 \
    --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_format=json >"$OUT/codec.json" 2>/dev/null
  ratio() {
    python3 - "$OUT/codec.json" "$1" <<'PY'
import json, sys
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b["name"] == "codec_encode/%s/avx2/real_time_median" % sys.argv[2]:
        print("%.3f" % b["x_memcpy"])
PY
  }
  while read -r spec documented; do
    check "encode x_memcpy, $spec, 64M floats" "$(ratio "$spec")" "$documented" 0.3
  done <<'EOF'
int8 1.17
bf16 1.02
ef|int8 0.59
ef|sign 0.53
ef|topk:ratio=0.01|int8 0.41
demo:chunk=64,topk=8,bits=1 0.081
EOF
fi

# "Transport security": CURVE / plain throughput with 16 MiB chunks.
if [[ " $CHECKS " == *" transport "* ]]; then
  "$BIN/transport_bench" >"$OUT/transport.txt" 2>&1
  check "CURVE / plain throughput, 16 MiB chunks (transport_bench)" \
    "$(sed -n 's/^curve\/plain throughput ratio: \([0-9.]*\)/\1/p' "$OUT/transport.txt")" 0.28 0.3
fi

exit "$moved"

#!/usr/bin/env bash
# Start-up cost of each CLI: wall time and peak resident memory of `--help`, and of one digits
# client that trains 3 federated rounds. The CUDA backend is a module (libshoal-cuda.so) that is
# loaded only when a CUDA device is asked for and a driver is present, so on a machine without a
# GPU none of these should map cuBLAS or the CUDA runtime; the last column checks that with ldd.
#   bench/startup_rss.sh            (after scripts/build)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bin
OUT="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$OUT"' EXIT
export OPENBLAS_NUM_THREADS=1

measure() {  # label, command...: prints "label seconds peak_KB"
  local label="$1"; shift
  /usr/bin/time -f "%e %M" -o "$OUT/time" "$@" >/dev/null 2>&1
  read -r sec kb <"$OUT/time"
  printf '%-28s %-8s %-10s\n' "$label" "$sec" "$kb"
}

printf '%-28s %-8s %-10s\n' run seconds peak_KB
for cli in shoal-aggregator shoal-client shoal-peer shoal-keygen; do
  measure "$cli --help" "$BIN/$cli" --help
done

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$BIN/shoal-aggregator" --listen "tcp://127.0.0.1:$port" --rounds 3 --min-clients 2 --model mlp \
  --dataset digits --log-level warn >/dev/null 2>"$OUT/agg.log" &
agg=$!
measure "digits client, 3 rounds" "$BIN/shoal-client" --connect "tcp://127.0.0.1:$port" \
  --dataset digits --partition 0/2 --no-progress --log-level warn &
"$BIN/shoal-client" --connect "tcp://127.0.0.1:$port" --dataset digits --partition 1/2 \
  --no-progress --log-level warn >/dev/null 2>&1
wait

cuda_libs=$(for cli in shoal-aggregator shoal-client shoal-peer shoal-keygen; do ldd "$BIN/$cli"; done \
  | grep -cE 'libcublas|libcudart|libcuda\.' || true)
echo "CUDA libraries linked by the CLIs: $cuda_libs"

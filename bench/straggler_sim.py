#!/usr/bin/env python3
"""Time to accuracy under stragglers (issue 16): a fixed round deadline, an adaptive one, and
asynchronous FedBuff. shoal-sim on digits, CLIENTS clients, links with a heavy-tailed one-way
latency (log-normal, median LATENCY ms, log-spread SPREAD) and a share STRAGGLERS of clients
whose updates arrive STRAGGLER_MS later. The modes (MODES, comma-separated):
  fixed     synchronous FedAvg, FRACTION of the clients a round; a round waits up to
            --round-timeout 10 s for every selected client;
  adaptive  the same, each round closed at --deadline-margin 1.5 times the 0.8-quantile of
            recent update times (runtime/server/deadline.h);
  fedbuff   --strategy fedbuff: FRACTION of the clients training at any time, commits of
            BUFFER updates weighted by 1/sqrt(1 + staleness), at most MAX_STALENESS commits old.
            It runs ROUNDS * ceil(FRACTION * CLIENTS) / BUFFER commits: as many updates as the
            synchronous modes' ROUNDS rounds take;
  lossy     fixed, with every client uploading in SLOW_CODEC;
  tiers     fixed, with a client whose measured upload rate is below SLOW_BELOW Mbit/s uploading
            in SLOW_CODEC (--codec-slow), the others dense.
Upload rates: log-normal, median UP_MBPS (0 = unlimited), log-spread BW_SPREAD; MODEL sets the
model (the bytes a client uploads).
Prints, per mode: seconds per round (commit), wall seconds until the held-out accuracy first
reaches each target (the sum of the rounds' own seconds: rounds and commits follow each other
without gaps), the final accuracy, updates per round and late updates refused.

    bench/straggler_sim.py                       (after scripts/build; 100 clients, fixed and adaptive)
    CLIENTS=1000 FRACTION=0.1 ROUNDS=100 MODES=fedbuff,adaptive,fixed TARGETS=0.8,0.85,0.9,0.93 bench/straggler_sim.py
    STRAGGLERS=0 MODEL=mlp:256 UP_MBPS=2 BW_SPREAD=1.5 MODES=fixed,lossy,tiers bench/straggler_sim.py
"""
import json
import math
import os
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM = os.path.join(ROOT, "build", "bin", "shoal-sim")
E = os.environ.get
CLIENTS, FRACTION, ROUNDS, SEED = int(E("CLIENTS", "100")), float(E("FRACTION", "0.3")), int(E("ROUNDS", "40")), E("SEED", "1")
BUFFER, MAX_STALENESS = int(E("BUFFER", "10")), E("MAX_STALENESS", "20")
TARGETS = [float(t) for t in E("TARGETS", "0.8,0.85,0.9").split(",")]
COMMITS = ROUNDS * math.ceil(FRACTION * CLIENTS) // BUFFER
MODES = {
    "fixed": ["--rounds", str(ROUNDS)],
    "adaptive": ["--rounds", str(ROUNDS), "--deadline-quantile", "0.8", "--deadline-margin", "1.5"],
    "fedbuff": ["--rounds", str(COMMITS), "--strategy", "fedbuff", "--buffer-size", str(BUFFER),
                "--max-staleness", MAX_STALENESS],
    "lossy": ["--rounds", str(ROUNDS), "--codec", E("SLOW_CODEC", "ef|topk:ratio=0.05|int8")],
    "tiers": ["--rounds", str(ROUNDS), "--codec-slow", E("SLOW_CODEC", "ef|topk:ratio=0.05|int8"),
              "--slow-below-mbps", E("SLOW_BELOW", "1")],
}


def run(extra):
    with tempfile.TemporaryDirectory() as out:
        metrics = os.path.join(out, "m.jsonl")
        subprocess.run([SIM, "--clients", str(CLIENTS), "--fraction", str(FRACTION),
                        "--dataset", "digits", "--model", E("MODEL", "mlp:64"), "--lr", "0.1", "--momentum", "0.9",
                        "--local-epochs", "2", "--min-part", "5", "--seed", SEED, "--latency-ms", E("LATENCY", "30"),
                        "--latency-spread", E("SPREAD", "1.5"), "--stragglers", E("STRAGGLERS", "0.1"),
                        "--straggler-ms", E("STRAGGLER_MS", "3000"), "--round-timeout", "10", "--threads", "2",
                        "--up-mbps", E("UP_MBPS", "0"), "--bandwidth-spread", E("BW_SPREAD", "0"),
                        "--metrics-out", metrics, "--log-level", "error"] + extra,
                       check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        return [json.loads(l) for l in open(metrics)]


def main():
    print(f"digits, {CLIENTS} clients, {FRACTION} a round (training at once), {ROUNDS} rounds or {COMMITS} commits "
          f"of {BUFFER}, seed {SEED}; latency median {E('LATENCY', '30')} ms, log-spread {E('SPREAD', '1.5')}; "
          f"{E('STRAGGLERS', '0.1')} stragglers +{E('STRAGGLER_MS', '3000')} ms; model {E('MODEL', 'mlp:64')}, "
          f"upload median {E('UP_MBPS', '0')} Mbit/s (0: unlimited), log-spread {E('BW_SPREAD', '0')}\n")
    print("| mode | s / round | " + " | ".join(f"s to {t}" for t in TARGETS) +
          " | final accuracy | updates / round | late updates | slow-codec updates / round | MB up / round |")
    print("|---|---|" + "---|" * len(TARGETS) + "---|---|---|---|---|")
    for mode in E("MODES", "fixed,adaptive").split(","):
        lines = run(MODES[mode])
        elapsed, reach = 0.0, {}
        for line in lines:
            elapsed += line["seconds"]
            for t in TARGETS:
                if t not in reach and line["test_accuracy"] >= t:
                    reach[t] = elapsed
        per_round = elapsed / len(lines)
        reported = statistics.mean(line["clients_reported"] for line in lines)
        slow = statistics.mean(line.get("updates_slow_codec", 0) for line in lines)
        mb_up = statistics.mean(line["bytes_up"] for line in lines) / 1e6
        cells = [f"{reach[t]:.1f}" if t in reach else "not reached" for t in TARGETS]
        print(f"| {mode} | {per_round:.2f} | " + " | ".join(cells) +
              f" | {lines[-1]['test_accuracy']:.3f} | {reported:.1f} | {lines[-1]['updates_late']} | {slow:.1f} | {mb_up:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Time to accuracy with a fixed and an adaptive round deadline (issue 16's straggler
benchmark): shoal-sim on digits, CLIENTS clients, FRACTION of them a round, links with a
heavy-tailed one-way latency (log-normal, median LATENCY ms, log-spread SPREAD) and a share
STRAGGLERS of clients whose updates arrive STRAGGLER_MS later. The fixed run waits up to
--round-timeout 10 s for every selected client; the adaptive one closes each round at
--deadline-margin 1.5 times the 0.8-quantile of recent update times (runtime/server/deadline.h).
Prints, per mode: seconds per round, wall seconds of rounds until the held-out accuracy first
reaches each target, the final accuracy, updates reported per round and late updates refused.

    bench/deadline_sim.py                       (after scripts/build)
    ROUNDS=60 SEED=2 bench/deadline_sim.py
"""
import json
import os
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM = os.path.join(ROOT, "build", "bin", "shoal-sim")
E = os.environ.get
ROUNDS, SEED = E("ROUNDS", "40"), E("SEED", "1")
TARGETS = [0.8, 0.85, 0.9]
MODES = {"fixed": [], "adaptive": ["--deadline-quantile", "0.8", "--deadline-margin", "1.5"]}


def run(extra):
    with tempfile.TemporaryDirectory() as out:
        metrics = os.path.join(out, "m.jsonl")
        subprocess.run([SIM, "--clients", E("CLIENTS", "100"), "--fraction", E("FRACTION", "0.3"), "--rounds", ROUNDS,
                        "--dataset", "digits", "--model", "mlp:64", "--lr", "0.1", "--momentum", "0.9",
                        "--local-epochs", "2", "--min-part", "5", "--seed", SEED, "--latency-ms", E("LATENCY", "30"),
                        "--latency-spread", E("SPREAD", "1.5"), "--stragglers", E("STRAGGLERS", "0.1"),
                        "--straggler-ms", E("STRAGGLER_MS", "3000"), "--round-timeout", "10", "--threads", "2",
                        "--metrics-out", metrics, "--log-level", "error"] + extra,
                       check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        return [json.loads(l) for l in open(metrics)]


def main():
    print(f"digits, {E('CLIENTS', '100')} clients, {E('FRACTION', '0.3')} a round, {ROUNDS} rounds, seed {SEED}; "
          f"latency median {E('LATENCY', '30')} ms, log-spread {E('SPREAD', '1.5')}; "
          f"{E('STRAGGLERS', '0.1')} stragglers +{E('STRAGGLER_MS', '3000')} ms\n")
    print("| deadline | s / round | " + " | ".join(f"s to {t}" for t in TARGETS) +
          " | final accuracy | reported / round | late updates |")
    print("|---|---|" + "---|" * len(TARGETS) + "---|---|---|")
    for mode, extra in MODES.items():
        lines = run(extra)
        elapsed, reach = 0.0, {}
        for line in lines:
            elapsed += line["seconds"]
            for t in TARGETS:
                if t not in reach and line["test_accuracy"] >= t:
                    reach[t] = elapsed
        per_round = elapsed / len(lines)
        reported = statistics.mean(line["clients_reported"] for line in lines)
        cells = [f"{reach[t]:.1f}" if t in reach else "not reached" for t in TARGETS]
        print(f"| {mode} | {per_round:.2f} | " + " | ".join(cells) +
              f" | {lines[-1]['test_accuracy']:.3f} | {reported:.1f} | {lines[-1]['updates_late']} |", flush=True)


if __name__ == "__main__":
    main()

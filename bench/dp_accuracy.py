#!/usr/bin/env python3
"""Accuracy against the privacy budget on digits (issue 15's benchmark): shoal-sim with 1,000
clients Poisson-sampled at q = 0.1, ROUNDS rounds, clip C, delta = 1e-5; for each target
epsilon the noise multiplier is the smallest that spends it over the run
(--dp-target-epsilon), with central DP (the aggregator clips and adds Gaussian noise) and
with distributed DP (under SecAgg+, each client clips and adds its share of discrete Gaussian
noise). epsilon = inf is the same run without DP. Each cell is the mean over SEEDS seeds of the
final held-out accuracy; the accountant's epsilon is printed after rounds 1, ROUNDS/2 and ROUNDS.

    bench/dp_accuracy.py                        (after scripts/build)
    ROUNDS=40 SEEDS="1 2 3" CLIP=1 bench/dp_accuracy.py
"""
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM = os.path.join(ROOT, "build", "bin", "shoal-sim")
ROUNDS = int(os.environ.get("ROUNDS", "30"))
SEEDS = os.environ.get("SEEDS", "1 2").split()
CLIP = os.environ.get("CLIP", "1")
EPSILONS = [float(e) for e in os.environ.get("EPSILONS", "inf 8 3 1").split()]
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")


def run(seed, extra):
    with tempfile.TemporaryDirectory() as out:
        metrics = os.path.join(out, "m.jsonl")
        args = [SIM, "--clients", "1000", "--fraction", "0.1", "--rounds", str(ROUNDS), "--dataset", "digits",
                "--model", "mlp:64", "--lr", "0.1", "--momentum", "0.9", "--local-epochs", "5", "--seed", seed,
                "--threads", "2", "--metrics-out", metrics, "--log-level", "error"] + extra
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL, env=ENV)
        return [json.loads(l) for l in open(metrics)]


def main():
    print(f"digits, 1000 clients, q = 0.1 (Poisson), {ROUNDS} rounds, clip {CLIP}, delta 1e-5, "
          f"seeds {' '.join(SEEDS)}")
    print("%-6s %-12s %6s %9s %26s" % ("target", "mode", "z", "accuracy", "epsilon after 1 / mid / last"))
    for eps in EPSILONS:
        modes = [("none", [])] if math.isinf(eps) else [
            ("central", ["--dp-clip", CLIP, "--dp-target-epsilon", str(eps)]),
            ("distributed", ["--secagg", "--secagg-range", CLIP, "--dp-clip", CLIP, "--dp-target-epsilon", str(eps)])]
        for mode, extra in modes:
            runs = [run(seed, extra) for seed in SEEDS]
            acc = statistics.mean(r[-1]["test_accuracy"] for r in runs)
            first = runs[0]
            z = first[-1].get("dp_noise_multiplier", 0.0)
            trail = " / ".join("%.3f" % first[i].get("epsilon", 0.0) for i in (0, ROUNDS // 2 - 1, ROUNDS - 1))
            aborted = sum(1 for r in runs for row in r if row.get("secagg_aborted"))
            print("%-6s %-12s %6.3f %9.4f %26s%s" % (eps, mode, z, acc, trail,
                                                     f"  ({aborted} rounds aborted)" if aborted else ""), flush=True)


if __name__ == "__main__":
    sys.exit(main())

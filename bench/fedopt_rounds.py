#!/usr/bin/env python3
"""Rounds to an accuracy target with server optimizers (issue 16's FedOpt benchmark): shoal-sim
on digits, CLIENTS clients all taking part each round, label-skewed parts (PARTITION,
default dirichlet:0.1), 1 local epoch of SGD (lr 0.05, momentum 0.9), up to ROUNDS rounds. For
FedAvg and each FedOpt strategy (Reddi et al. 2021) over a small grid of server learning rates,
the first round whose held-out accuracy reaches TARGET (default 0.9), for each seed in SEEDS,
and the final accuracy. "-" = not reached within ROUNDS.

    bench/fedopt_rounds.py                        (after scripts/build; a Markdown table)
    SEEDS="1 2" TARGET=0.93 bench/fedopt_rounds.py
"""
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM = os.path.join(ROOT, "build", "bin", "shoal-sim")
E = os.environ.get
ROUNDS, TARGET, SEEDS = E("ROUNDS", "60"), float(E("TARGET", "0.9")), E("SEEDS", "1 2 3").split()
GRID = [("fedavg", ["1"]), ("fedavgm", ["0.3", "1"]), ("fedadam", ["0.003", "0.01", "0.03"]),
        ("fedyogi", ["0.003", "0.01", "0.03"]), ("fedadagrad", ["0.03", "0.1", "0.3"])]


def run(strategy, server_lr, seed):
    with tempfile.TemporaryDirectory() as out:
        metrics = os.path.join(out, "m.jsonl")
        subprocess.run([SIM, "--clients", E("CLIENTS", "20"), "--fraction", "1", "--rounds", ROUNDS, "--dataset",
                        "digits", "--model", "mlp:64", "--lr", "0.05", "--momentum", "0.9", "--local-epochs", "1",
                        "--partition-scheme", E("PARTITION", "dirichlet:0.1"), "--min-part", "2", "--seed", seed,
                        "--strategy", strategy, "--server-lr", server_lr, "--threads", "2", "--metrics-out", metrics,
                        "--log-level", "error"], check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        lines = [json.loads(l) for l in open(metrics)]
        first = next((l["round"] for l in lines if l["test_accuracy"] >= TARGET), None)
        return first, lines[-1]["test_accuracy"]


def main():
    print(f"digits, {E('CLIENTS', '20')} clients, {E('PARTITION', 'dirichlet:0.1')}, up to {ROUNDS} rounds, "
          f"seeds {' '.join(SEEDS)}: rounds to {TARGET} (per seed) and final accuracy (mean)\n")
    print(f"| strategy | --server-lr | rounds to {TARGET} | accuracy after {ROUNDS} rounds |")
    print("|---|---|---|---|")
    for strategy, lrs in GRID:
        for lr in lrs:
            results = [run(strategy, lr, s) for s in SEEDS]
            rounds = " / ".join(str(r) if r else "-" for r, _ in results)
            acc = sum(a for _, a in results) / len(results)
            print(f"| {strategy} | {lr} | {rounds} | {acc:.3f} |", flush=True)


if __name__ == "__main__":
    main()

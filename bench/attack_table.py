#!/usr/bin/env python3
"""Accuracy under attack (issue 16's benchmark): shoal-sim on digits with CLIENTS clients, all
selected each round, ROUNDS rounds of 5 local epochs, iid parts (PARTITION=dirichlet:0.5 for
non-iid), and for each aggregation rule and attack, a share of the clients attacking (10% and
20%). Each cell is the final held-out accuracy, the mean over SEEDS seeds; the first column is
the same rule with no attacker. Attacks and rules: runtime/sim/attack.h, aggregate/robust.h.

    bench/attack_table.py                            (after scripts/build; a Markdown table)
    SEEDS="1 2 3" PARTITION=dirichlet:0.5 bench/attack_table.py
"""
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM = os.path.join(ROOT, "build", "bin", "shoal-sim")
CLIENTS = os.environ.get("CLIENTS", "100")
ROUNDS = os.environ.get("ROUNDS", "20")
SEEDS = os.environ.get("SEEDS", "1 2").split()
PARTITION = os.environ.get("PARTITION", "iid")
RULES = os.environ.get("RULES", "fedavg median trimmed_mean krum multi_krum centered_clip").split()
ATTACKS = os.environ.get("ATTACKS", "sign-flip scale noise label-flip alie ipm").split()
SHARES = os.environ.get("SHARES", "0.1 0.2").split()
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")


def accuracy(rule, extra):
    runs = []
    for seed in SEEDS:
        args = [SIM, "--clients", CLIENTS, "--fraction", "1", "--rounds", ROUNDS, "--dataset", "digits",
                "--model", "mlp:64", "--lr", "0.1", "--momentum", "0.9", "--local-epochs", "5", "--seed", seed,
                "--partition-scheme", PARTITION, "--min-part", "5", "--threads", "2", "--strategy", rule,
                "--log-level", "error"] + extra
        out = subprocess.run(args, check=True, capture_output=True, text=True, env=ENV).stdout
        runs.append(float(re.search(r"final accuracy ([\d.]+)", out).group(1)))
    return statistics.mean(runs)


def main():
    print(f"digits, {CLIENTS} clients, {ROUNDS} rounds, partition {PARTITION}, seeds {' '.join(SEEDS)}; "
          f"final accuracy (mean over seeds)\n")
    head = ["rule", "no attack"] + [f"{a} {float(s):.0%}" for a in ATTACKS for s in SHARES]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for rule in RULES:
        cells = [f"{accuracy(rule, []):.3f}"]
        for attack in ATTACKS:
            for share in SHARES:
                cells.append(f"{accuracy(rule, ['--attack', attack, '--attackers', share]):.3f}")
        print(f"| {rule} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Secure aggregation against plain rounds of the same federation (issue 15's benchmark).

Real processes on 127.0.0.1: one aggregator and N clients (N = 10, 50, 100 by default), a
model of ~1M parameters (mlp:13500 on digits: 1,012,510 floats), ROUNDS rounds each of plain
FedAvg and of --secagg (and, with CODECS, --secagg with other codecs). Every process is reaped
with os.wait4, which gives its CPU seconds and peak RSS without any extra tool. Reported per
configuration:
  round_s     median round time, round 1 left out (it includes registration)
  client_cpu  CPU seconds per client per round (all clients' CPU / N / rounds)
  up/client   bytes a client sends per round (the metrics' bytes_up / N, round 1 left out)
  down/client bytes a client receives per round
  agg_cpu     the aggregator's CPU seconds per round;  agg_rss  its peak RSS (MiB)
and for each SecAgg row the ratio to the plain row of the same N.

All processes share this machine's cores: the round time of N co-located clients measures
their total CPU, not what N machines would see; client_cpu is the per-client cost.

    bench/secagg_rounds.py                       (after scripts/build)
    NS="10 50" ROUNDS=3 MODEL=mlp:13500 CODECS="int8 randk:ratio=0.01" bench/secagg_rounds.py
    NS=100 EXTRA="--local-epochs 10" bench/secagg_rounds.py   (more local work per round)
    SIM=1 bench/secagg_rounds.py                 (shoal-sim at 1,000 clients instead)
"""
import json
import os
from netutil import free_port
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "bin")
ROUNDS = int(os.environ.get("ROUNDS", "4"))
MODEL = os.environ.get("MODEL", "mlp:13500")
NS = [int(n) for n in os.environ.get("NS", "10 50 100").split()]
CODECS = os.environ.get("CODECS", "").split()  # extra --secagg codecs, e.g. "int8 randk:ratio=0.01"
EXTRA = os.environ.get("EXTRA", "").split()    # more aggregator flags for every row, e.g. "--local-epochs 10"
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")


def reap(pid):
    _, status, ru = os.wait4(pid, 0)
    return status, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0


def run(n, extra, out):
    port = free_port()
    metrics = os.path.join(out, "run.jsonl")
    agg = subprocess.Popen([os.path.join(BIN, "shoal-aggregator"), "--listen", f"tcp://127.0.0.1:{port}",
                            "--rounds", str(ROUNDS), "--min-clients", str(n), "--model", MODEL, "--dataset", "digits",
                            "--lr", "0.1", "--momentum", "0.9", "--round-timeout", "600", "--heartbeat-timeout", "60",
                            "--secagg-stage-timeout", "120", "--metrics-out", metrics, "--log-level", "warn"] + EXTRA + extra,
                           stdout=subprocess.DEVNULL, stderr=open(os.path.join(out, "agg.log"), "w"), env=ENV)
    clients = [subprocess.Popen([os.path.join(BIN, "shoal-client"), "--connect", f"tcp://127.0.0.1:{port}",
                                 "--partition", f"{i}/{n}", "--no-progress", "--log-level", "warn",
                                 "--connect-timeout", "120"],
                                stdout=subprocess.DEVNULL, stderr=open(os.path.join(out, f"c{i}.log"), "w"), env=ENV)
               for i in range(n)]
    status, agg_cpu, agg_rss = reap(agg.pid)
    client_cpu = 0.0
    for c in clients:
        _, cpu, _ = reap(c.pid)
        client_cpu += cpu
    if status != 0:
        sys.exit(f"aggregator failed ({status}); see {out}/agg.log")
    rows = [json.loads(l) for l in open(metrics)]
    later = rows[1:] if len(rows) > 1 else rows
    for r in rows:
        if r.get("secagg_aborted"):
            sys.exit(f"round {r['round']} aborted its secure aggregation: {r['secagg_aborted']}")
    return {
        "round_s": statistics.median(r["seconds"] for r in later),
        "client_cpu": client_cpu / n / ROUNDS,
        "up": statistics.mean(r["bytes_up"] for r in later) / n,
        "down": statistics.mean(r["bytes_down"] for r in later) / n,
        "agg_cpu": agg_cpu / ROUNDS,
        "agg_rss": agg_rss,
        "acc": rows[-1]["test_accuracy"],
    }


def sim(extra, out, clients=1000):
    metrics = os.path.join(out, "sim.jsonl")
    p = subprocess.Popen([os.path.join(BIN, "shoal-sim"), "--clients", str(clients), "--fraction", "1",
                          "--rounds", str(ROUNDS), "--model", MODEL, "--dataset", "digits", "--lr", "0.1",
                          "--threads", "2", "--round-timeout", "3600", "--heartbeat-timeout", "600",
                          "--secagg-stage-timeout", "1800", "--metrics-out", metrics, "--log-level", "warn"] + EXTRA + extra,
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(out, "sim.log"), "w"), env=ENV)
    status, cpu, rss = reap(p.pid)
    if status != 0:
        sys.exit(f"shoal-sim failed ({status}); see {out}/sim.log")
    rows = [json.loads(l) for l in open(metrics)]
    later = rows[1:] if len(rows) > 1 else rows
    return {"round_s": statistics.median(r["seconds"] for r in later), "client_cpu": cpu / clients / ROUNDS,
            "up": statistics.mean(r["bytes_up"] for r in later) / clients,
            "down": statistics.mean(r["bytes_down"] for r in later) / clients, "agg_cpu": float("nan"),
            "agg_rss": rss, "acc": rows[-1]["test_accuracy"]}


def main():
    configs = [("plain", [])] + [("secagg" + ("" if c == "none" else f" {c}"), ["--secagg", "--codec", c])
                                 for c in ["none"] + CODECS]
    print(f"model {MODEL}, {ROUNDS} rounds per row (round 1 left out of the per-round medians and means)"
          + (f", aggregator flags {' '.join(EXTRA)}" if EXTRA else ""))
    print("%-6s %-26s %9s %11s %12s %12s %9s %9s %7s   %s" % ("n", "mode", "round_s", "client_cpu", "up/client",
                                                             "down/client", "agg_cpu", "agg_rss", "acc",
                                                             "vs plain: round, client cpu, up"))
    ns = [1000] if os.environ.get("SIM") else NS
    for n in ns:
        base = None
        for name, extra in configs:
            with tempfile.TemporaryDirectory() as out:
                started = time.time()
                r = sim(extra, out, n) if os.environ.get("SIM") else run(n, extra, out)
            ratio = "" if base is None else "%.2fx, %.2fx, %.2fx" % (r["round_s"] / base["round_s"],
                                                                    r["client_cpu"] / base["client_cpu"],
                                                                    r["up"] / base["up"])
            print("%-6d %-26s %9.3f %11.3f %12.0f %12.0f %9.3f %9.1f %7.4f   %s" % (
                n, name, r["round_s"], r["client_cpu"], r["up"], r["down"], r["agg_cpu"], r["agg_rss"], r["acc"], ratio),
                flush=True)
            if base is None:
                base = r
            print(f"  ({time.time() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()

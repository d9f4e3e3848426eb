#!/usr/bin/env python3
"""Tables and the plot of bench/lm_over_slow_links.sh from the peers' metrics (one JSON line
per step, OUT/[shaped-]LABEL-pI.jsonl). Steps are inner steps: a metrics step of a method with
H inner steps (DiLoCo) counts H.
  loopback: OUT/lm_table.md (final held-out loss, gap to the baseline, bytes per worker per
            step, ratio to the baseline's bytes, seconds per step) and OUT/lm_loss.png
  --shaped: OUT/lm_shaped.md (seconds per step on the shaped links, speed-up over the baseline)
"""
import argparse
import glob
import json
import math
import statistics

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--baseline", required=True)
ap.add_argument("--methods", required=True, help="the script's METHOD_TABLE: label|H|flags lines")
ap.add_argument("--shaped", action="store_true")
ap.add_argument("labels", nargs="+")
a = ap.parse_args()
inner = {l.split("|")[0]: int(l.split("|")[1]) for l in a.methods.splitlines() if l.strip()}
flags = {l.split("|")[0]: l.split("|", 2)[2] for l in a.methods.splitlines() if l.strip()}
prefix = "shaped-" if a.shaped else ""


def load(label):
    peers = []
    for f in sorted(glob.glob(f"{a.out}/{prefix}{label}-p*.jsonl")):
        peers.append([json.loads(l) for l in open(f) if l.strip()])
    if not peers or not peers[0]:
        raise SystemExit(f"no metrics for {label} under {a.out}")
    h = inner[label]
    steps = peers[0][-1]["step"] * h
    sent = statistics.mean(sum(l["bytes_sent"] for l in p) for p in peers) / steps
    curve = [(l["step"] * h, l["test_loss"]) for l in peers[0] if "test_loss" in l]
    secs = statistics.median(l["seconds"] for p in peers for l in (p[1:] or p)) / h  # the first step waits for the members
    hashes = all(len({p[i]["model_hash"] for p in peers if i < len(p)}) == 1 for i in range(len(peers[0])))
    # Modes that all-gather send each payload to the N - 1 others; the ring modes do not.
    gathered = "--mode allgather" in flags[label] or ("--mode diloco" in flags[label] and "--diloco-allreduce" not in flags[label])
    copy = sent / (len(peers) - 1) if gathered else sent
    return dict(steps=steps, sent=sent, copy=copy, curve=curve, secs=secs, final=curve[-1][1] if curve else math.nan,
                same=hashes, h=h)


runs = {l: load(l) for l in a.labels}
base = runs[a.baseline] if a.baseline in runs else load(a.baseline)  # from an earlier run in OUT
if a.shaped:
    rows = ["| method | steps | seconds per step | faster than allreduce | bytes per worker per step |",
            "|---|---|---|---|---|"]
    for l, r in runs.items():
        rows.append(f"| {l} | {r['steps']} | {r['secs']:.3f} | {base['secs'] / r['secs']:.1f}x | {r['sent']:,.0f} |")
    open(f"{a.out}/lm_shaped.md", "w").write("\n".join(rows) + "\n")
    print("\n".join(rows))
    raise SystemExit(0)

rows = ["| method | steps | held-out loss (nats/byte) | gap to allreduce | bytes sent per worker per step | "
        "ratio to allreduce | one copy of the payload | its ratio | replicas identical | seconds per step (loopback) |",
        "|---|---|---|---|---|---|---|---|---|---|"]
for l, r in runs.items():
    gap = 100 * (r["final"] - base["final"]) / base["final"]
    rows.append(f"| {l} | {r['steps']} | {r['final']:.4f} | {gap:+.1f}% | {r['sent']:,.0f} | "
                f"{base['sent'] / r['sent']:,.0f}x | {r['copy']:,.0f} | {base['sent'] / r['copy']:,.0f}x | "
                f"{'yes' if r['same'] else 'NO'} | {r['secs']:.3f} |")
open(f"{a.out}/lm_table.md", "w").write("\n".join(rows) + "\n")
print("\n".join(rows))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
for l, r in runs.items():
    xs = [s for s, _ in r["curve"]]
    ys = [v for _, v in r["curve"]]
    left.plot(xs, ys, label=l, lw=1.5 if l == a.baseline else 1)
    right.plot([s * r["sent"] / 1e6 for s in xs], ys, label=l, lw=1.5 if l == a.baseline else 1)
left.set_xlabel("step (inner steps for DiLoCo)")
right.set_xlabel("cumulative MB sent per worker")
right.set_xscale("log")
for ax in (left, right):
    ax.set_ylabel("held-out loss (nats/byte)")
    ax.grid(alpha=0.3)
left.legend(fontsize=8)
fig.suptitle("GPT (366k parameters) on the KJV, 4 peers: held-out loss")
fig.tight_layout()
fig.savefig(f"{a.out}/lm_loss.png", dpi=110)
print(f"wrote {a.out}/lm_table.md and {a.out}/lm_loss.png")

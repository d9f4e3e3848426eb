#!/usr/bin/env python3
"""Summarizes shoal-peer metrics files (one JSON line per step) for the peer benchmarks:
median seconds per step (steps after the first two), of which compute, apply and (ring modes)
the all-reduce, mean bytes sent per peer per step, and the final held-out accuracy.  peer_summary.py LABEL FILE...  ->  one line of key=value."""
import json
import statistics
import sys

label, files = sys.argv[1], sys.argv[2:]
# ring_seconds: per step, the shortest of the members' rings (the member that started last
# waited for nobody's compute: its ring time is the all-reduce's own), median over steps.
secs, sent, acc, comp, appl, by_step = [], [], None, [], [], {}
for f in files:
    lines = [json.loads(l) for l in open(f) if l.strip()]
    secs += [l["seconds"] for l in lines[2:]]
    comp += [l.get("compute_seconds", 0) for l in lines[2:]]
    appl += [l.get("apply_seconds", 0) for l in lines[2:]]
    for l in lines[2:]:
        if "ring_seconds" in l:
            by_step.setdefault(l["step"], []).append(l["ring_seconds"])
    sent += [l["bytes_sent"] for l in lines[1:]]
    acc = lines[-1].get("test_accuracy", acc)
print(f"{label} step_seconds={statistics.median(secs):.4f} compute_seconds={statistics.median(comp):.4f} "
      f"apply_seconds={statistics.median(appl):.4f} "
      + (f"ring_seconds={statistics.median(min(v) for v in by_step.values()):.4f} " if by_step else "")
      + f"bytes_sent_per_step={statistics.mean(sent):.0f} "
      f"steps={len(lines)} accuracy={acc}")

#!/usr/bin/env python3
"""Golden values for the RDP accountant (tests/unit/privacy/rdp_test.cc): the Poisson-subsampled
Gaussian mechanism's RDP per order and (epsilon, order) at delta, from Opacus and from Google's
dp-accounting, for Opacus's docstring example and 24 seeded random cases.

    python3 -m venv --system-site-packages /tmp/dpvenv
    /tmp/dpvenv/bin/pip install dp-accounting && /tmp/dpvenv/bin/pip install --no-deps opacus
    /tmp/dpvenv/bin/python tests/data/gen_rdp_ref.py > tests/data/rdp_ref.json

Opacus's accountant module is loaded by path: its package __init__ imports torch, which the
accountant does not need."""
import importlib.util
import json
import random
import sys

import importlib.metadata

import dp_accounting

OPACUS_DIR = importlib.util.find_spec("opacus").submodule_search_locations[0]
spec = importlib.util.spec_from_file_location("opacus_rdp", OPACUS_DIR + "/accountants/analysis/rdp.py")
rdp_mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rdp_mod)

ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))


def opacus_case(parts, delta, orders):
    rdp = sum(rdp_mod.compute_rdp(q=q, noise_multiplier=z, steps=s, orders=orders) for q, z, s in parts)
    eps, order = rdp_mod.get_privacy_spent(orders=orders, rdp=rdp, delta=delta)
    return [float(r) for r in rdp], float(eps), float(order)


def google_case(parts, delta, orders):
    acc = dp_accounting.rdp.RdpAccountant(orders)
    for q, z, s in parts:
        acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), s)
    eps, order = acc.get_epsilon_and_optimal_order(delta)
    return float(eps), float(order)


cases = []
# Opacus's docstring: two mechanisms composed, integer orders 2..32 -> epsilon 0.336 at 23.
doc = [(1e-5, 1.0, 10), (1e-4, 3.0, 4)]
rdp, eps, order = opacus_case(doc, 1e-5, list(range(2, 33)))
cases.append({"name": "opacus_docstring", "parts": doc, "delta": 1e-5, "orders": list(range(2, 33)),
              "rdp": rdp, "epsilon": eps, "order": order})

rng = random.Random(20261204)
while len(cases) < 25:
    q = rng.choice([0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0])
    z = round(rng.uniform(0.5, 8.0), 3)
    steps = rng.choice([1, 3, 10, 30, 100, 300, 1000, 5000])
    delta = rng.choice([1e-3, 1e-5, 1e-6])
    parts = [(q, z, steps)]
    rdp, eps, order = opacus_case(parts, delta, ORDERS)
    geps, gorder = google_case(parts, delta, ORDERS)
    if not (0.01 < eps < 200) or abs(geps - eps) > 1e-9 * max(1.0, eps):
        continue  # outside the useful range, or the libraries' conversions differ (clamping)
    cases.append({"name": f"q{q}_z{z}_T{steps}_d{delta}", "parts": parts, "delta": delta, "orders": ORDERS,
                  "rdp": rdp, "epsilon": eps, "order": order, "dp_accounting_epsilon": geps})

json.dump({"generator": "tests/data/gen_rdp_ref.py", "opacus": importlib.metadata.version("opacus"),
           "dp_accounting": importlib.metadata.version("dp-accounting"),
           "cases": cases}, sys.stdout, indent=1)
sys.stdout.write("\n")

#!/usr/bin/python3
"""Writes optim_ref.json: reference trajectories of torch.optim.SGD and torch.optim.AdamW.

The Shoal optimizer tests (tests/unit/nn/optimizer_test.cc) replay the same initial weights
and gradient sequences through shoal::nn::MakeOptimizer and compare every step with these
numbers. Run with the system Python that has PyTorch:

    /usr/bin/python3 tests/data/gen_optim_ref.py      # rewrites tests/data/optim_ref.json

All tensors are float32; every value is written as the exact decimal of its float32 value,
so parsing it as a double and casting to float gives back the same bits.
"""
import json
import os

import torch

N = 7       # parameters per case (odd on purpose: no vector-width assumptions)
STEPS = 5   # optimizer steps per case

# name, optimizer class name, constructor kwargs (Shoal's OptimizerConfig fields follow).
CASES = [
    ("sgd_plain", "sgd", dict(lr=0.1)),
    ("sgd_momentum", "sgd", dict(lr=0.1, momentum=0.9)),
    ("sgd_nesterov", "sgd", dict(lr=0.05, momentum=0.8, nesterov=True)),
    ("sgd_weight_decay", "sgd", dict(lr=0.1, weight_decay=0.05)),
    ("sgd_momentum_weight_decay", "sgd", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("sgd_nesterov_weight_decay", "sgd", dict(lr=0.03, momentum=0.95, nesterov=True, weight_decay=0.1)),
    ("adamw", "adamw", dict(lr=0.01, weight_decay=0.0)),
    ("adamw_weight_decay", "adamw", dict(lr=0.01, weight_decay=0.1)),
    ("adamw_betas_eps", "adamw", dict(lr=0.05, betas=(0.8, 0.95), eps=1e-3, weight_decay=0.5)),
]


def floats(t):
    return [float(v) for v in t.detach().to(torch.float32).reshape(-1).tolist()]


def run_case(kind, kwargs, w0, grads):
    w = torch.nn.Parameter(w0.clone())
    if kind == "sgd":
        opt = torch.optim.SGD([w], **kwargs)
    else:
        opt = torch.optim.AdamW([w], **kwargs)
    traj = []
    for g in grads:
        w.grad = g.clone()
        opt.step()
        traj.append(floats(w))
    return traj


def shoal_config(kind, kwargs):
    """The OptimizerConfig a Shoal test must build for this case (all fields explicit)."""
    betas = kwargs.get("betas", (0.9, 0.999))
    return {
        "name": kind,
        "learning_rate": kwargs["lr"],
        "momentum": kwargs.get("momentum", 0.0),
        "nesterov": kwargs.get("nesterov", False),
        "weight_decay": kwargs.get("weight_decay", 0.0 if kind == "sgd" else 0.01),
        "beta1": betas[0],
        "beta2": betas[1],
        "eps": kwargs.get("eps", 1e-8),
    }


def main():
    gen = torch.Generator().manual_seed(20240611)
    cases = []
    for i, (name, kind, kwargs) in enumerate(CASES):
        w0 = torch.randn(N, generator=gen, dtype=torch.float32)
        grads = [torch.randn(N, generator=gen, dtype=torch.float32) for _ in range(STEPS)]
        # Mix scales so AdamW's eps and the moments' bias correction both matter.
        scale = torch.tensor([1.0, 3.0, 1e-4, 0.5, 10.0, 1e-2, 1.0], dtype=torch.float32)
        grads = [g * scale for g in grads]
        cases.append({
            "name": name,
            "config": shoal_config(kind, kwargs),
            "w0": floats(w0),
            "grads": [floats(g) for g in grads],
            "w": run_case(kind, kwargs, w0, grads),
        })
    out = {
        "generator": "tests/data/gen_optim_ref.py",
        "torch_version": torch.__version__,
        "cases": cases,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_ref.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {path}: {len(cases)} cases x {STEPS} steps")


if __name__ == "__main__":
    main()

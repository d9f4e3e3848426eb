#!/usr/bin/python3
"""Writes gpt_ref.json: a small GPT's loss and gradients computed by PyTorch.

tests/unit/nn/gpt_test.cc builds shoal::nn::Gpt with the same spec, loads these parameters
(flattened in Shoal's arena order, weights as [in, out]) and compares its loss and every
gradient with these values. The model (torch_gpt.py) is written from torch primitives (nn.Linear,
nn.LayerNorm, exact GELU, a causal softmax), independently of Shoal's code. Run with the
system Python that has PyTorch (Debian's python3-torch):

    /usr/bin/python3 tests/data/gen_gpt_ref.py      # rewrites tests/data/gpt_ref.json

Every value is written as the exact decimal of its float32 value.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import Gpt  # noqa: E402

LAYERS, DIM, HEADS, CTX, VOCAB = 2, 8, 2, 6, 11
ROWS, SEQ = 3, 5  # SEQ < CTX: the last position row of pos_emb gets no gradient


def main():
    torch.manual_seed(20261204)
    model = Gpt(LAYERS, DIM, HEADS, CTX, VOCAB, embedding_std=0.5)
    with torch.no_grad():  # non-trivial LayerNorm affine parameters
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.add_(0.3 * torch.randn(DIM))
                m.bias.add_(0.2 * torch.randn(DIM))
    tokens = torch.randint(0, VOCAB, (ROWS, SEQ + 1))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    loss = model(inputs, targets)
    loss.backward()
    ref = {
        "spec": f"gpt:layers={LAYERS},dim={DIM},heads={HEADS},ctx={CTX}",
        "vocab": VOCAB,
        "rows": ROWS,
        "seq": SEQ,
        "tokens": inputs.reshape(-1).tolist(),
        "targets": targets.reshape(-1).tolist(),
        "params": model.in_shoal_order(grad=False),
        "loss": float(loss),
        "grads": model.in_shoal_order(grad=True),
        "torch": torch.__version__,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt_ref.json")
    with open(path, "w") as f:
        json.dump(ref, f)
        f.write("\n")
    print(f"wrote {path}: loss {ref['loss']:.6f}, {len(ref['params'])} parameters")


if __name__ == "__main__":
    main()

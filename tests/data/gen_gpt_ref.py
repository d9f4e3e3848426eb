#!/usr/bin/python3
"""Writes gpt_ref.json: a small GPT's loss and gradients computed by PyTorch.

tests/unit/nn/gpt_test.cc builds shoal::nn::Gpt with the same spec, loads these parameters
(flattened in Shoal's arena order, weights as [in, out]) and compares its loss and every
gradient with these values. The model here is written from torch primitives (nn.Linear,
nn.LayerNorm, exact GELU, a causal softmax), independently of Shoal's code. Run with the
system Python that has PyTorch (Debian's python3-torch):

    /usr/bin/python3 tests/data/gen_gpt_ref.py      # rewrites tests/data/gpt_ref.json

Every value is written as the exact decimal of its float32 value.
"""
import json
import math
import os

import torch

LAYERS, DIM, HEADS, CTX, VOCAB = 2, 8, 2, 6, 11
ROWS, SEQ = 3, 5  # SEQ < CTX: the last position row of pos_emb gets no gradient


def floats(t):
    return [float(v) for v in t.detach().to(torch.float32).reshape(-1).tolist()]


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(DIM)
        self.qkv = torch.nn.Linear(DIM, 3 * DIM)
        self.proj = torch.nn.Linear(DIM, DIM)
        self.ln2 = torch.nn.LayerNorm(DIM)
        self.fc = torch.nn.Linear(DIM, 4 * DIM)
        self.mlp_proj = torch.nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // HEADS
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, HEADS, hd).transpose(1, 2)
        k = k.view(b, t, HEADS, hd).transpose(1, 2)
        v = v.view(b, t, HEADS, hd).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp_proj(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class Gpt(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Parameter(torch.randn(VOCAB, DIM) * 0.5)
        self.pos = torch.nn.Parameter(torch.randn(CTX, DIM) * 0.5)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(LAYERS)])
        self.lnf = torch.nn.LayerNorm(DIM)

    def forward(self, tokens, targets):
        x = self.tok[tokens] + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.tok.t()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def in_shoal_order(model, grad):
    """The parameters (or their gradients) in Shoal's arena order, weights [in, out]."""
    pick = (lambda p: p.grad) if grad else (lambda p: p)
    out = []
    out += floats(pick(model.tok))
    out += floats(pick(model.pos))
    for b in model.blocks:
        for ln_or_lin in (b.ln1, b.qkv, b.proj, b.ln2, b.fc, b.mlp_proj):
            w, bias = pick(ln_or_lin.weight), pick(ln_or_lin.bias)
            out += floats(w.t() if isinstance(ln_or_lin, torch.nn.Linear) else w)
            out += floats(bias)
    out += floats(pick(model.lnf.weight)) + floats(pick(model.lnf.bias))
    return out


def main():
    torch.manual_seed(20261204)
    model = Gpt()
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
        "params": in_shoal_order(model, grad=False),
        "loss": float(loss),
        "grads": in_shoal_order(model, grad=True),
        "torch": torch.__version__,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt_ref.json")
    with open(path, "w") as f:
        json.dump(ref, f)
        f.write("\n")
    print(f"wrote {path}: loss {ref['loss']:.6f}, {len(ref['params'])} parameters")


if __name__ == "__main__":
    main()

"""The GPT of shoal::nn::Gpt (sdk/src/nn/gpt.h) written from PyTorch primitives: the
reference tests/data/gen_gpt_ref.py computes gradients with, and the model
bench/torch_train_step.py times. Pre-LayerNorm blocks, causal multi-head attention from one
fused qkv projection, exact GELU MLP 4*dim wide, output tied to the token embedding.
"""
import math

import torch


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.fc = torch.nn.Linear(dim, 4 * dim)
        self.mlp_proj = torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device))
        att = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp_proj(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class Gpt(torch.nn.Module):
    def __init__(self, layers, dim, heads, ctx, vocab, embedding_std=0.02):
        super().__init__()
        self.vocab = vocab
        self.tok = torch.nn.Parameter(torch.randn(vocab, dim) * embedding_std)
        self.pos = torch.nn.Parameter(torch.randn(ctx, dim) * embedding_std)
        self.blocks = torch.nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.lnf = torch.nn.LayerNorm(dim)

    def forward(self, tokens, targets):
        x = self.tok[tokens] + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.tok.t()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, self.vocab), targets.reshape(-1))

    def in_shoal_order(self, grad):
        """Parameters (or gradients) flattened in Shoal's arena order, Linear weights as [in, out]."""
        pick = (lambda p: p.grad) if grad else (lambda p: p)
        parts = [pick(self.tok), pick(self.pos)]
        for b in self.blocks:
            for m in (b.ln1, b.qkv, b.proj, b.ln2, b.fc, b.mlp_proj):
                w = pick(m.weight)
                parts += [w.t() if isinstance(m, torch.nn.Linear) else w, pick(m.bias)]
        parts += [pick(self.lnf.weight), pick(self.lnf.bias)]
        return [float(v) for p in parts for v in p.detach().to(torch.float32).reshape(-1).tolist()]

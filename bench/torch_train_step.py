#!/usr/bin/python3
"""PyTorch's time for the step that bench/train_step_bench.cc times in Shoal.

One local training step of an MLP on digits-shaped data (64 features, 10 classes):
zero_grad + forward + CrossEntropyLoss + backward + SGD(lr=0.01, momentum=0.9) step; and of
the GPT (tests/data/torch_gpt.py, Shoal's nn::Gpt in PyTorch) on random byte tokens with an
AdamW step. float32, single-threaded (torch.set_num_threads(1)). Same model specs and batch
sizes as Shoal's bench.

    /usr/bin/python3 bench/torch_train_step.py          # a table
    /usr/bin/python3 bench/torch_train_step.py --json   # one JSON object per line (for the .sh)
    python3 bench/torch_train_step.py --device cuda      # the GPT steps train_step_bench's
                                                         # TrainStepGpu times (bench/gpu_check.sh)

On a GPU: the CPU-scale GPT and the 113M-parameter one (16 layers, dim 768, ctx 1024) at
batch 8, fp32 (TF32 off, PyTorch's default for matrix products) and bf16 (autocast), AdamW;
each timed step ends in torch.cuda.synchronize().
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data"))
from torch_gpt import Gpt  # noqa: E402

INPUT_DIM = 64
CLASSES = 10
CASES = [("mlp:64", [64]), ("mlp:256,256", [256, 256])]
BATCHES = [32, 256]
# (name, layers, dim, heads, ctx, batch): the CPU-scale language model of issue 14, byte tokens.
GPT_CASES = [("gpt:layers=3,dim=96,heads=4,ctx=64", 3, 96, 4, 64, 8)]
GPU_GPT_CASES = GPT_CASES + [("gpt:layers=16,dim=768,heads=12,ctx=1024", 16, 768, 12, 1024, 8)]
VOCAB = 256


def make_model(hidden):
    layers, width = [], INPUT_DIM
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    layers.append(torch.nn.Linear(width, CLASSES))
    return torch.nn.Sequential(*layers)


def mlp_step(hidden, batch):
    torch.manual_seed(1)
    model = make_model(hidden)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.rand(batch, INPUT_DIM)
    y = torch.randint(0, CLASSES, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    return step


def gpt_step(layers, dim, heads, ctx, batch, device="cpu", bf16=False):
    torch.manual_seed(1)
    model = Gpt(layers, dim, heads, ctx, VOCAB).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    tokens = torch.randint(0, VOCAB, (batch, ctx + 1), device=device)
    x, y = tokens[:, :-1], tokens[:, 1:]

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            loss = model(x, y)
        loss.backward()
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()

    step.params = sum(p.numel() for p in model.parameters())
    return step


def time_step(step, min_time, repetitions):
    for _ in range(50):  # warm-up: allocator, momentum buffers
        step()
    # Like Google Benchmark: grow the iteration count until one run lasts min_time, then
    # repeat and report the median time per step.
    iters = 10
    while True:
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time:
            break
        iters = max(iters * 2, int(iters * min_time / max(elapsed, 1e-9) * 1.2))
    runs = []
    for _ in range(repetitions):
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        runs.append((time.perf_counter() - t0) / iters)
    runs.sort()
    return runs[len(runs) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds per timed run")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()

    torch.set_num_threads(1)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("torch_train_step: PyTorch sees no CUDA device")
        name = torch.cuda.get_device_name()
        if not args.json:
            print(f"torch {torch.__version__}, {name}")
            print(f"{'benchmark':<60} {'ms/step':>10} {'tokens/s':>12} {'model TFLOP/s':>14}")
        for spec, layers, dim, heads, ctx, batch in GPU_GPT_CASES:
            for precision in ("fp32", "bf16"):
                step = gpt_step(layers, dim, heads, ctx, batch, "cuda", precision == "bf16")
                params = step.params
                seconds = time_step(step, args.min_time, args.repetitions)
                tokens = batch * ctx / seconds
                row = {"name": f"TrainStepGpu/{spec}/batch:{batch}/{precision}", "ms_per_step": seconds * 1e3,
                       "tokens_per_s": tokens, "model_flops": 6.0 * params * tokens, "params": params,
                       "torch": torch.__version__, "device": name}
                if args.json:
                    print(json.dumps(row))
                else:
                    print(f"{row['name']:<60} {seconds * 1e3:>10.2f} {tokens:>12.0f} {row['model_flops'] / 1e12:>14.2f}")
        return
    if not args.json:
        print(f"torch {torch.__version__}, 1 thread")
        print(f"{'benchmark':<32} {'us/step':>10}")
    cases = [(f"TrainStep/{spec}/batch:{batch}", mlp_step(hidden, batch)) for spec, hidden in CASES for batch in BATCHES]
    cases += [(f"TrainStep/{spec}/batch:{batch}", gpt_step(*shape, batch)) for spec, *shape, batch in GPT_CASES]
    for name, step in cases:
        seconds = time_step(step, args.min_time, args.repetitions)
        if args.json:
            print(json.dumps({"name": name, "us_per_step": seconds * 1e6, "torch": torch.__version__}))
        else:
            print(f"{name:<32} {seconds * 1e6:>10.2f}")


if __name__ == "__main__":
    main()

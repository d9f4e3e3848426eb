#!/usr/bin/env python3
"""PyTorch gloo all-reduce baseline for bench/peer_bench.sh: WORLD processes on 127.0.0.1
all-reduce one float32 tensor of NUMEL values ITERS times; prints the median seconds per
all-reduce (rank 0's view, after 2 warm-up calls) and the bytes a ring all-reduce sends per
rank, 2 (n - 1) / n x tensor bytes.
   /usr/bin/python3 bench/torch_allreduce.py --numel 1126410 --world 4 --iters 20
With --step mlp:1024,1024 it times the whole data-parallel step instead, as shoal-peer's
--mode allreduce takes it: forward and backward of that MLP (input 64, 10 classes, ReLU,
cross-entropy) on a batch of --batch random rows, the flattened gradient all-reduced and
averaged, and an SGD momentum step; prints the median step and its all-reduce part.
With --rank R --master ADDR --port P it runs one rank only (each in its own network namespace,
bench/peer_shaped.sh); rank 0 prints.
"""
import argparse
import os
from netutil import free_port
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def mlp(spec):
    hidden = [int(h) for h in spec.split(":", 1)[1].split(",")]
    layers, width = [], 64
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))


def step_worker(rank, world, spec, batch, iters):
    """Whole data-parallel steps; returns (median step, median all-reduce) in seconds."""
    torch.manual_seed(1)
    model = mlp(spec)
    params = list(model.parameters())
    flat = torch.zeros(sum(p.numel() for p in params))
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(rank)
    steps, rings = [], []
    for i in range(iters + 2):
        x, y = torch.randn(batch, 64, generator=g), torch.randint(0, 10, (batch,), generator=g)
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        offset = 0
        for p in params:
            flat[offset:offset + p.numel()].copy_(p.grad.view(-1))
            offset += p.numel()
        t1 = time.perf_counter()
        dist.all_reduce(flat)
        rings.append(time.perf_counter() - t1)
        flat.div_(world)
        offset = 0
        for p in params:
            p.grad.view(-1).copy_(flat[offset:offset + p.numel()])
            offset += p.numel()
        opt.step()
        steps.append(time.perf_counter() - t0)
    return statistics.median(steps[2:]), statistics.median(rings[2:]), flat.numel()


def worker(rank, world, numel, iters, port, out, master="127.0.0.1", step=None, batch=32):
    os.environ["MASTER_ADDR"] = master
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if step:
        result = step_worker(rank, world, step, batch, iters)
        if rank == 0:
            out.put(result)
        dist.destroy_process_group()
        return
    t = torch.ones(numel, dtype=torch.float32)
    times = []
    for i in range(iters + 2):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        times.append(time.perf_counter() - t0)
    if rank == 0 and out is not None:
        out.put(statistics.median(times[2:]))
    elif rank == 0:
        print_result(statistics.median(times[2:]), world, numel)
    dist.destroy_process_group()


def print_result(median, world, numel):
    ring = 2 * (world - 1) / world * numel * 4
    print(f"gloo_allreduce_seconds {median:.6f} ring_bytes_per_rank {ring:.0f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--numel", type=int)
    p.add_argument("--step", help="time whole data-parallel steps of this MLP (mlp:H1,H2,...) instead")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--master", default="127.0.0.1")
    p.add_argument("--port", type=int, default=29500)
    a = p.parse_args()
    if (a.numel is None) == (a.step is None):
        p.error("give one of --numel N (the all-reduce alone) and --step mlp:H1,H2,... (whole steps)")
    if a.step and a.rank >= 0:
        p.error("--step runs every rank on this machine; leave out --rank")
    if a.rank >= 0:
        worker(a.rank, a.world, a.numel, a.iters, a.port, None, a.master)
        return
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, a.world, a.numel, a.iters, port, out, "127.0.0.1", a.step, a.batch))
             for r in range(a.world)]
    for pr in procs:
        pr.start()
    result = out.get(timeout=600)
    for pr in procs:
        pr.join()
    if a.step:
        step, ring, numel = result
        print(f"gloo_step_seconds {step:.6f} gloo_step_allreduce_seconds {ring:.6f} model {a.step} "
              f"parameters {numel} batch {a.batch}", flush=True)
    else:
        print_result(result, a.world, a.numel)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch gloo all-reduce baseline for bench/peer_bench.sh: WORLD processes on 127.0.0.1
all-reduce one float32 tensor of NUMEL values ITERS times; prints the median seconds per
all-reduce (rank 0's view, after 2 warm-up calls) and the bytes a ring all-reduce sends per
rank, 2 (n - 1) / n x tensor bytes.
   /usr/bin/python3 bench/torch_allreduce.py --numel 1126410 --world 4 --iters 20
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


def worker(rank, world, numel, iters, port, out, master="127.0.0.1"):
    os.environ["MASTER_ADDR"] = master
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
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
    p.add_argument("--numel", type=int, required=True)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--master", default="127.0.0.1")
    p.add_argument("--port", type=int, default=29500)
    a = p.parse_args()
    if a.rank >= 0:
        worker(a.rank, a.world, a.numel, a.iters, a.port, None, a.master)
        return
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, a.world, a.numel, a.iters, port, out)) for r in range(a.world)]
    for pr in procs:
        pr.start()
    median = out.get(timeout=600)
    for pr in procs:
        pr.join()
    print_result(median, a.world, a.numel)


if __name__ == "__main__":
    main()

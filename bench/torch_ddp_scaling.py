#!/usr/bin/python3
"""PyTorch DDP's data-parallel scaling for the GPT that bench/dp_scaling.cc trains in Shoal.

The same model (tests/data/torch_gpt.py, Shoal's nn::Gpt in PyTorch), AdamW, `--batch` windows
of ctx byte tokens per rank per step (weak scaling), `--steps` steps after 3 of warm-up, for each
rank count: ranks are processes (torch.multiprocessing), DDP over gloo on the CPU (one thread
each, as Shoal's CPU ranks) or NCCL on GPUs (one GPU each). Prints one line per rank count:
tokens per second over all ranks and the scaling efficiency against the first count.

    /usr/bin/python3 bench/torch_ddp_scaling.py --ranks 1,2 --layers 2 --dim 64 --heads 4 --ctx 64 --batch 4
    python3 bench/torch_ddp_scaling.py --device cuda --ranks 1,2,4,8 --layers 16 --dim 768 --heads 12 --ctx 1024
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data"))
from torch_gpt import Gpt  # noqa: E402

VOCAB = 256


def worker(rank, world, args, port, results):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    cuda = args.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    device = torch.device(f"cuda:{rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(1)
    model = Gpt(args.layers, args.dim, args.heads, args.ctx, VOCAB).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank] if cuda else None)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    gen = torch.Generator(device="cpu").manual_seed(rank)

    def step():
        tokens = torch.randint(0, VOCAB, (args.batch, args.ctx + 1), generator=gen).to(device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=args.device, dtype=torch.bfloat16, enabled=args.bf16):
            loss = ddp(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()

    for _ in range(3):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    dist.barrier()
    seconds = time.perf_counter() - t0
    if rank == 0:
        results.put(seconds)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--bf16", action="store_true")
    args = p.parse_args()
    base = None
    for i, world in enumerate(int(r) for r in args.ranks.split(",")):
        results = mp.get_context("spawn").SimpleQueue()
        mp.start_processes(worker, args=(world, args, 29500 + i + os.getpid() % 1000, results), nprocs=world,
                           start_method="spawn")
        seconds = results.get()
        tokens = args.steps * args.batch * args.ctx * world / seconds
        if base is None:
            base = (tokens, world)
        eff = tokens / (base[0] * world / base[1])
        print(f"torch_ddp_scaling: gpt layers={args.layers} dim={args.dim} heads={args.heads} ctx={args.ctx}, "
              f"{args.device} x {world} ranks, {args.batch} windows per rank per step, {args.steps} steps: "
              f"{tokens:.0f} tokens/s, {1000 * seconds / args.steps:.2f} ms per step, scaling efficiency {eff:.3f}",
              flush=True)


if __name__ == "__main__":
    main()

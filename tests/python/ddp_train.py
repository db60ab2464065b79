"""Distributed data parallel training on the CPU (gloo), for memstep's
multi-rank test: run it under torchrun with two ranks. Nothing of memstep's:
the steps come from the zero-code hooks of python/startup in each rank.
The rank given by --leak-rank keeps an 8 KiB tensor a step (LEAK_LINE).
Each rank ends with os._exit(0) once its result is printed: pip torch 2.13's
DDP on gloo sometimes aborts in the interpreter's teardown ("terminate called
without an active exception", SIGABRT, after destroy_process_group and the
RESULT line), with or without memstep: 1 of 12 runs without it beside a busy
loop, 1 of 10 under it (and one CI run of python_torch_ddp). memstep writes
its trace to the end at _exit too.

usage: torchrun --standalone --nproc_per_node=2 ddp_train.py STEPS [--leak-rank R]
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("steps", type=int)
    p.add_argument("--leak-rank", type=int, default=-1)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(256, 512), nn.ReLU(),
                                                  nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    for _ in range(args.steps):
        x = torch.randn(64, 256)
        y = torch.randint(0, 10, (64,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == args.leak_rank:
            kept.append(torch.randn(8, 256))  # LEAK_LINE: 8 KiB a step
    dist.destroy_process_group()
    print("RESULT rank=%d steps=%d kept=%d" % (rank, args.steps, len(kept)))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

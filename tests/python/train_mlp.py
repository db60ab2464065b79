"""A small PyTorch CPU training loop for memstep's Python tests.

No memstep code unless --explicit: the steps, stages and epochs are found by
the zero-code hooks of python/startup (under `memstep run`). The classic leak,
keeping tensors with their autograd graph across steps: `--leak loss` appends
each step's loss tensor (after backward() its graph nodes stay alive, a few
KiB per step); `--leak features` appends the hidden features (batch x hidden
float32 plus their graph); `--leak small` keeps seven new 2 KiB tensors per
step, 14 KiB of data (the leak hunt's test); `--leak history` grows one tensor by
concatenation, `hist = torch.cat([hist, ...])`, 32 KiB a step: each step's copy
replaces the last (a buffer that grows by replacement); `--leak log` appends 64
lines of per-sample losses to a text log held in a local string, `log += ...`,
896 B a step: CPython resizes the string in place (realloc), one block that
grows; `--leak log-copy` keeps the same log on an object's attribute, where
`+=` builds a new string each step and frees the last (a block replaced by a
larger one, which the leak hunt finds by its screens' sizes). Without --leak only
Python floats are kept. `--leak-from STEP` starts the leak at that step (a leak
that begins mid-run: after an epoch, an evaluation, a schedule change).

`--fake-cuda-stats` replaces torch.cuda, for memstep's statistics collector
only, with tests/python/fake_torch_cuda.py (round = step number), since CI
has no GPU; `--nvtx-steps` wraps each iteration in an NVTX range
"train_step N" (tests/python/nvtx_client.py).

`--malloc-stats PATH` writes glibc's own view of its heap after each step
(mallinfo2: the free bytes less the top chunk, and the bytes in use), one line
"step free in_use" per step: the truth a test holds memstep's RSS split to.

Prints one line `RESULT steps=N epochs=E kept=K cuda_init=0|1` at the end.
"""

import argparse
import ctypes
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Mlp(nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(),
                                  nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        features = self.body(x)
        return self.head(features), features


class MallocStats:
    """glibc's mallinfo2() per step, through ctypes (glibc 2.33 and newer)."""

    class _Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    def __init__(self, path):
        self._call = ctypes.CDLL(None).mallinfo2
        self._call.restype = self._Mallinfo2
        self._out = open(path, "w")

    def record(self, step):
        mi = self._call()
        self._out.write("%d %d %d\n" % (step, mi.fordblks - mi.keepcost, mi.uordblks))
        self._out.flush()


class MySgd(torch.optim.SGD):
    """A user subclass whose step calls super().step() (nested wrapped steps)."""

    def step(self, closure=None):
        return super().step(closure)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batches", type=int, default=25, help="batches per epoch")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--optimizer", choices=["sgd", "adam", "mysgd"], default="adam")
    p.add_argument("--leak", choices=["none", "loss", "features", "small", "history", "log", "log-copy"], default="none")
    p.add_argument("--leak-from", type=int, default=0, metavar="STEP",
                   help="leak from this step on (before it, as without --leak)")
    p.add_argument("--explicit", action="store_true", help="mark steps with memstep.step()")
    p.add_argument("--eval", action="store_true", help="a no_grad evaluation pass per epoch")
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    p.add_argument("--fake-cuda-stats", action="store_true",
                   help="planted torch.cuda statistics (tests/python/fake_torch_cuda.py)")
    p.add_argument("--malloc-stats", metavar="PATH",
                   help="write glibc's free and in-use bytes after each step to PATH")
    p.add_argument("--nvtx-steps", action="store_true", help='NVTX range "train_step N" per step')
    args = p.parse_args()
    if args.fake_cuda_stats or args.nvtx_steps:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    fake = nvtx = None
    if args.nvtx_steps:
        import nvtx_client as nvtx

    torch.manual_seed(0)
    torch.set_num_threads(1)
    n = args.batches * args.batch
    data = TensorDataset(torch.randn(n, args.width), torch.randn(n, 1))
    loader = DataLoader(data, batch_size=args.batch, shuffle=True, num_workers=args.workers)
    model = Mlp(args.width, args.hidden)
    params = model.parameters()
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=1e-3)
    elif args.optimizer == "mysgd":
        opt = MySgd(params, lr=1e-3)
    else:
        opt = torch.optim.Adam(params, lr=1e-3)
    if args.explicit:
        import memstep
    if args.fake_cuda_stats:
        from fake_torch_cuda import FakeCuda
        fake = FakeCuda().install()
    stats = MallocStats(args.malloc_stats) if args.malloc_stats else None
    kept = []
    hist = torch.empty(0, 128)
    log = ""
    record = argparse.Namespace(log="")
    steps = 0
    for _ in range(args.epochs):
        for x, y in loader:
            if nvtx is not None:
                nvtx.range_push("train_step %d" % steps)
            if args.explicit:
                memstep.step(steps)
            opt.zero_grad()
            pred, features = model(x)
            loss = nn.functional.mse_loss(pred, y)
            loss.backward()
            if fake is not None:
                fake.round = steps
            opt.step()
            if nvtx is not None:
                nvtx.range_pop()
            leak = args.leak if steps >= args.leak_from else "none"
            if leak == "loss":
                kept.append(loss)
            elif leak == "features":
                kept.append(features)
            elif leak == "small":
                kept.extend([torch.randn(512) * 1.0 for _ in range(7)])  # LEAK_SMALL_LINE
            elif leak == "history":
                hist = torch.cat([hist, features[:64, :128].detach()])  # LEAK_HISTORY_LINE
            elif leak == "log":
                per_sample = (pred.detach() - y).pow(2).flatten()[:64].tolist()
                log += "".join("%4d %8.5f\n" % (j, v) for j, v in enumerate(per_sample))  # LEAK_LOG_LINE
            elif leak == "log-copy":
                per_sample = (pred.detach() - y).pow(2).flatten()[:64].tolist()
                record.log += "".join("%4d %8.5f\n" % (j, v)  # LEAK_LOG_COPY_LINE
                                      for j, v in enumerate(per_sample))
            else:
                kept.append(loss.item())
            if stats is not None:
                stats.record(steps)
            steps += 1
        if args.eval:
            with torch.no_grad():
                for x, _ in DataLoader(data, batch_size=args.batch):
                    model(x)
    if args.explicit:
        memstep.step_end(steps - 1)
    if fake is not None:
        fake.uninstall()
        resets = [c for c in fake.calls if c[0] == "reset_peak_memory_stats"]
        print("FAKE resets=%s" % ",".join(str(c[1]) for c in resets))
    if nvtx is not None:
        print("NVTX attached=%d" % nvtx.attached())
    print("RESULT steps=%d epochs=%d kept=%d cuda_init=%d"
          % (steps, args.epochs, len(kept), torch.cuda.is_initialized()))
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""Measures the cost of memstep's Python start-up hook (not a ctest test).

usage: bench_startup.py BUILD_DIR [RUNS]
       bench_startup.py --loop BUILD_DIR    (per-step overhead, in process)

Prints the median wall time of `python3 -c pass`, `python3 -c 'import torch'`
and of tests/python/train_mlp.py, each without the hook and with it
(PYTHONPATH and MEMSTEP_PYTHON_HOOKS=1 as `memstep run` sets them), both
without and with libmemstep.so preloaded.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    build = os.path.abspath(sys.argv[1])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    pydir = os.path.join(build, "python")
    lib = os.path.join(build, "lib", "libmemstep.so")
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("MEMSTEP_") and k not in ("LD_PRELOAD", "PYTHONPATH")}
    base["PYTHONDONTWRITEBYTECODE"] = "1"
    hooked = dict(base, PYTHONPATH=os.pathsep.join([os.path.join(pydir, "startup"), pydir]),
                  MEMSTEP_PYTHON_HOOKS="1")
    tmp = tempfile.mkdtemp(prefix="memstep-bench-")
    configs = [("bare", base), ("hook", hooked),
               ("preload", dict(base, LD_PRELOAD=lib, MEMSTEP_DIR=tmp)),
               ("preload+hook", dict(hooked, LD_PRELOAD=lib, MEMSTEP_DIR=tmp))]
    train = [os.path.join(HERE, "train_mlp.py"), "--epochs", "2", "--batches", "50"]
    programs = [("python -c pass", ["-c", "pass"], runs),
                ("python -c 'import torch'", ["-c", "import torch"], max(3, runs // 4)),
                ("train_mlp.py (100 steps)", train, max(3, runs // 6))]
    for title, argv, n in programs:
        print(title)
        for name, env in configs:
            times = []
            for i in range(n + 1):
                t0 = time.perf_counter()
                subprocess.run([sys.executable] + argv, env=env, check=True,
                               stdout=subprocess.DEVNULL)
                if i:  # the first run warms the page cache
                    times.append(time.perf_counter() - t0)
            print("  %-13s median %8.1f ms  min %8.1f ms  (%d runs)" % (
                name, 1e3 * statistics.median(times), 1e3 * min(times), n))
    subprocess.run(["rm", "-rf", tmp])


LOOP = r"""
import sys, time, torch
from torch import nn
sys.path.insert(0, sys.argv[1])
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                      nn.Linear(512, 1))
opt = torch.optim.Adam(model.parameters())
x, y = torch.randn(128, 256), torch.randn(128, 1)
def block(n=100):
    t = time.perf_counter()
    for _ in range(n):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return (time.perf_counter() - t) / n
block(20)
bare = min(block() for _ in range(3))
import memstep._torch_hooks as h
assert h.install(torch)
opt = torch.optim.Adam(model.parameters())  # construction wraps Adam.step
hooked = min(block() for _ in range(3))
print("%.3f %.3f" % (bare * 1e3, hooked * 1e3))
"""


def loop_overhead(build, runs=3):
    """Per-step time of a small MLP step, before and after install(), under
    libmemstep.so, in one process (min of 3 blocks of 100 steps), `runs` times."""
    pydir = os.path.join(build, "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTEP_")}
    env.update(LD_PRELOAD=os.path.join(build, "lib", "libmemstep.so"),
               MEMSTEP_DIR=tempfile.mkdtemp(prefix="memstep-bench-"))
    print("training step (5 modules, Adam), ms/step: without hooks -> with hooks")
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", LOOP, pydir], env=env, check=True,
                             capture_output=True, text=True).stdout.split()
        print("  %s -> %s  (%+.1f%%)" % (out[0], out[1],
                                        100 * (float(out[1]) / float(out[0]) - 1)))
    subprocess.run(["rm", "-rf", env["MEMSTEP_DIR"]])


if __name__ == "__main__":
    if "--loop" in sys.argv:
        sys.argv.remove("--loop")
        loop_overhead(os.path.abspath(sys.argv[1]))
    else:
        main()

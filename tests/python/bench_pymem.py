"""Cost of hooking Python's own allocator (docs/python.md, "Overhead").

Runs two workloads, each N times in a fresh process, in three modes:
  bare       no memstep
  pymem=0    memstep run, MEMSTEP_PYMEM=0 (everything else as usual)
  pymem=1    memstep run (default: pymalloc hooked)
and prints the minimum in-process time of each mode (the timed part only,
not start-up) and the ratios pymem=1 / pymem=0 and pymem=1 / bare.

Workloads:
  alloc   a pure-Python allocation-heavy loop: 2e6 iterations making and
          dropping a dict, a list, a tuple and a string (all pymalloc blocks)
  mlp     tests/python/train_mlp.py (PyTorch CPU, Adam, 3 x 20 steps of batch
          128, hidden 512), timed from the first to the last step

Usage: bench_pymem.py BUILD_DIR [N]  (default N = 5)
"""

import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

ALLOC = r"""
import time
t0 = time.perf_counter()
for i in range(2000000):
    d = {"a": i, "b": (i, i + 1)}
    l = [i, d, "x"]
    s = "k%d" % (i & 1023)
    del d, l, s
print("TIME %.6f" % (time.perf_counter() - t0))
"""

MLP_WRAPPER = r"""
import runpy, sys, time
sys.argv = [%(train)r, "--epochs", "3", "--batches", "20", "--batch", "128",
            "--hidden", "512", "--optimizer", "adam"]
import torch  # imported (and hooked) before the clock starts
t0 = time.perf_counter()
runpy.run_path(%(train)r, run_name="__main__")
print("TIME %%.6f" %% (time.perf_counter() - t0))
"""


def run(build, code, mode, tmp):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTEP_")}
    cmd = [sys.executable, "-c", code]
    if mode != "bare":
        env["MEMSTEP_PYMEM"] = "0" if mode == "pymem=0" else "1"
        cmd = [os.path.join(build, "bin", "memstep"), "run", "--out",
               tempfile.mkdtemp(dir=tmp)] + ["--"] + cmd
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit("%s failed: %s" % (mode, r.stderr))
    line = [l for l in r.stdout.splitlines() if l.startswith("TIME ")][-1]
    return float(line.split()[1])


def main():
    build = os.path.abspath(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    train = os.path.join(HERE, "train_mlp.py")
    workloads = [("alloc", ALLOC), ("mlp", MLP_WRAPPER % {"train": train})]
    modes = ["bare", "pymem=0", "pymem=1"]
    with tempfile.TemporaryDirectory(prefix="memstep-bench-pymem-") as tmp:
        for name, code in workloads:
            times = {m: [] for m in modes}
            for _ in range(n):
                for m in modes:  # interleaved: load changes hit every mode alike
                    times[m].append(run(build, code, m, tmp))
            best = {m: min(v) for m, v in times.items()}
            print("%-5s  bare %.3f s  pymem=0 %.3f s  pymem=1 %.3f s  "
                  "pymem=1/pymem=0 %.3f  pymem=1/bare %.3f  (min of %d)"
                  % (name, best["bare"], best["pymem=0"], best["pymem=1"],
                     best["pymem=1"] / best["pymem=0"], best["pymem=1"] / best["bare"], n))
            sys.stdout.flush()


if __name__ == "__main__":
    main()

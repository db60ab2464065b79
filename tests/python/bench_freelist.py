"""The workload behind the reference tracer's cost (docs/python.md "Cost of
hooking Python's allocator"): a loop that only makes tuples and floats from
CPython's free lists, 20,000 a step, and keeps 48 small tuples a step, so a
leak hunt runs. Prints the median time of the churn during steps 10-24 (the
hunt) and 45 to the end (usually after it). Measured with callgrind, as
deterministic instruction counts on a noisy VM (CPython 3.13, where the
tracer exists):

  valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=cg.%p \\
      build/bin/memstep run -- python3.13 tests/python/bench_freelist.py 40
  callgrind_annotate --inclusive=yes cg.<python's pid> | grep RefTrace
"""
import statistics
import sys
import time

import memstep

kept = []


def churn(i):
    s = 0.0
    for j in range(20000):
        t = (j, j * 0.5, i)  # a tuple and a float from the free lists
        s += t[1]
    return s


def main(steps):
    ts = []
    for step in range(steps):
        memstep.step(step)
        t0 = time.perf_counter()
        churn(step)
        ts.append(time.perf_counter() - t0)
        for j in range(48):
            kept.append((step * 0.25, j * 0.5))
    print("median churn: hunt %.3f ms, after %.3f ms" %
          (1e3 * statistics.median(ts[10:25]), 1e3 * statistics.median(ts[45:] or ts[-5:])))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 70)

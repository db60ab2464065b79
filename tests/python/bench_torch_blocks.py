"""Cost of memstep's tensor-block recording (python/memstep/_torch_blocks.py),
measured with the caching-allocator double (fake_torch_blocks.py).

Run under libmemstep.so (docs/gpu.md "Tensor blocks inside the caching
allocator" gives the command and the figures):

    LD_PRELOAD=build/lib/libmemstep.so MEMSTEP_DIR=/tmp/msb PYTHONPATH=python \\
        python3 tests/python/bench_torch_blocks.py

It prints, each as the median of 5 runs:
  * event_ns: our cost per block event (N = 2000 blocks of 256 KiB, each
    allocated 10 Python frames deep): one step end that finds N new blocks
    and one that finds them gone, less the same step ends without changes,
    divided by 2N; at the default device sampling (T_dev 8 MiB: a 256 KiB
    block is sampled with p = 3 %) and with every block sampled;
  * walk_ns_per_block: one step end with N + 1 live, unchanged blocks (the
    snapshot diff alone), per block.
  PyTorch's own costs (capturing the stack of each allocation; building the
  snapshot's dicts in _snapshot()) are not in these figures. Times are the
  calling thread's CPU time (time.thread_time_ns), so that a loaded machine
  inflates them less; memstep's writer thread, which compresses and writes
  the records, is not counted.
Without libmemstep.so loaded (the C functions absent) it exits 1.
"""

import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_torch_blocks as fb  # noqa: E402

N = 2000
RUNS = 5


def api_with_interval(lib, interval):
    class Api:
        pass

    api = Api()
    api.torch_block = lib.memstep_torch_block
    api.torch_block.argtypes = [ctypes.c_int, ctypes.c_int32, ctypes.c_uint64, ctypes.c_uint64,
                                ctypes.c_int64, ctypes.c_char_p, ctypes.c_uint64]
    api.torch_block.restype = None
    sample = lib.memstep_torch_block_sample
    sample.argtypes = [ctypes.c_uint64]
    sample.restype = ctypes.c_int64
    api.torch_block_sample = sample
    return api


def one_run(api, fake, _torch_blocks):
    """(ns per block event, ns per unchanged live block) of one run. The
    double's _snapshot() is called outside the timed part: push() reads a
    snapshot prepared beforehand, so only memstep's side is timed."""
    c = _torch_blocks.Collector(_torch_blocks.ON)
    c.install(fake.torch)
    keep = [fake.empty(256 * 1024)]  # initialises the double
    base = fake._snapshot()
    new = [deep(fake, 8) for _ in range(N)]
    grown = fake._snapshot()
    current = [base]
    fake.memory._snapshot = lambda device=None, augment_with_fx_traces=False: current[0]
    c.push(api)  # the base blocks
    t0 = time.thread_time_ns()
    c.push(api)  # nothing new
    idle = time.thread_time_ns() - t0
    current[0] = grown
    t0 = time.thread_time_ns()
    c.push(api)  # N new blocks
    c.push(api)  # N + 1 unchanged blocks
    t1 = time.thread_time_ns()
    current[0] = base
    c.push(api)  # N gone
    t2 = time.thread_time_ns()
    current[0] = grown
    c.push(api)  # N new again
    current[0] = grown
    t3 = time.thread_time_ns()
    c.push(api)  # N + 1 unchanged
    walk = time.thread_time_ns() - t3
    del new, keep
    events = (t1 - t0 - walk) + (t2 - t1 - idle)
    return events / (2.0 * N), walk / float(N + 1)


def deep(fake, depth):
    if depth == 0:
        return fake.empty(256 * 1024, depth=2)
    return deep(fake, depth - 1)


def main():
    lib = ctypes.CDLL(None)
    if not hasattr(lib, "memstep_torch_block"):
        sys.stderr.write("libmemstep.so is not loaded (LD_PRELOAD)\n")
        return 1
    sys.path.insert(0, os.environ.get("MEMSTEP_PYDIR", "python"))
    from memstep import _torch_blocks
    for label, interval in (("default sampling", None), ("every block sampled", 1)):
        events, walks = [], []
        for _ in range(RUNS):
            fake = fb.FakeTorch().install()
            api = api_with_interval(lib, interval)
            if interval is not None:
                api.torch_block_sample = lambda size: 0  # p = 1: frames for every block
            e, w = one_run(api, fake, _torch_blocks)
            fake.uninstall()
            events.append(e)
            walks.append(w)
        print("%-20s event_ns=%.0f walk_ns_per_block=%.0f" %
              (label, statistics.median(events), statistics.median(walks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/bin/sh
# The cost of tensor-block attribution (issue 10 item 6; docs/gpu.md "Tensor
# blocks inside the caching allocator"), printed for scripts/bench_doc.py.
#
# usage: tests/bench/torch_blocks_bench.sh BUILD [PYTHON]
#
# Two parts:
#  1. memstep's capture, per block event (a block new or gone at a step end)
#     and per live block at each step end, measured on the caching-allocator
#     double (tests/python/bench_torch_blocks.py: 2000 blocks of 256 KiB, 10
#     Python frames deep, the calling thread's CPU time, median of 5 runs),
#     with the default device sampling (T_dev 8 MiB: 3 % of 256 KiB blocks
#     carry frames) and with every block sampled;
#  2. PyTorch's own capture (`_record_memory_history(enabled="state",
#     stacks="python")`, what memstep turns on), per torch.empty + del of a
#     256 KiB CUDA tensor, 20 frames deep, against the same loop without
#     history: only where PYTHON has a CUDA torch and a GPU; otherwise the
#     line says why it was not measured (a CPU build of PyTorch has no
#     `_cuda_record_memory_history`).
# Save the output as tests/bench/torch_blocks_last_run.txt and run
# scripts/bench_doc.py to update docs/benchmarks.md.
set -u
build=${1:?usage: torch_blocks_bench.sh BUILD [PYTHON]}
py=${2:-python3}
cd "$(dirname "$0")/../.."
lib="$build/lib/libmemstep.so"
[ -f "$lib" ] || { echo "torch_blocks_bench: no $lib" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "memstep tensor-block capture benchmark"
echo "command: tests/bench/torch_blocks_bench.sh $*"
echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "commit: $(git log -1 --format='%h %s' 2>/dev/null | cut -c1-100)$(git diff --quiet HEAD 2>/dev/null || echo ' (plus uncommitted changes)')"
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "nproc: $(nproc)"
echo "python: $("$py" -c 'import sys; print(sys.version.split()[0])')"
echo "loadavg before: $(cat /proc/loadavg)"
echo "memstep side (the allocator double; ns of the calling thread's CPU time, median of 5 runs):"
LD_PRELOAD="$lib" MEMSTEP_DIR="$work" MEMSTEP_PYDIR=python PYTHONPATH=python \
  "$py" tests/python/bench_torch_blocks.py >"$work/out" 2>"$work/err" ||
  { cat "$work/err" >&2; echo "torch_blocks_bench: bench_torch_blocks.py failed" >&2; exit 1; }
sed 's/^/  /' "$work/out"
"$py" - <<'PY'
import time
try:
    import torch
except Exception as e:  # no torch at all
    print("pytorch side: not measured: no torch (%s)" % type(e).__name__)
    raise SystemExit(0)
if not hasattr(torch._C, "_cuda_record_memory_history"):
    print("pytorch side: not measured: torch %s is a CPU build (no _cuda_record_memory_history)"
          % torch.__version__)
    raise SystemExit(0)
if not torch.cuda.is_available():
    print("pytorch side: not measured: torch %s sees no GPU" % torch.__version__)
    raise SystemExit(0)
N = 20000

def deep(d):
    if d == 0:
        for _ in range(N):
            t = torch.empty(256 * 1024, dtype=torch.uint8, device="cuda")
            del t
        return
    deep(d - 1)

def timed():
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    deep(20)
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t0) / N

deep(0)  # warm the cache
plain, hist = [], []
for _ in range(5):
    plain.append(timed())
    torch.cuda.memory._record_memory_history(enabled="state", context="alloc", stacks="python")
    hist.append(timed())
    torch.cuda.memory._record_memory_history(enabled=None)
plain.sort(), hist.sort()
print("pytorch side: torch %s, per alloc+free pair: %.0f ns without history, %.0f ns with "
      "enabled=\"state\" stacks=\"python\" (+%.0f ns)" % (torch.__version__, plain[2], hist[2],
                                                       hist[2] - plain[2]))
PY
echo "loadavg after: $(cat /proc/loadavg)"

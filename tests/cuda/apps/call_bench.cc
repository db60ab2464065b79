// call_bench: the cost memstep adds to a CUDA allocation call, the cost the
// cudaMallocAsync backend of PyTorch pays per tensor (call_bench.sh runs it
// with every device allocation unwound and with the default device
// sampling). Runs against the fake runtime (tests/cuda/fake).
//
//   cuda_call_bench N    N cudaMallocAsync/cudaFreeAsync pairs, then N
//                        cudaMalloc/cudaFree pairs, from a 12-frame-deep
//                        call stack; prints "RESULT <api> ns_per_pair <x>"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <initializer_list>

#include "tests/cuda/fake/cuda_decls.h"

namespace {

double NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

__attribute__((noinline)) int Pairs(int depth, long n, bool async) {
  if (depth > 0) return Pairs(depth - 1, n, async) + 1;
  for (long i = 0; i < n; ++i) {
    void* p = nullptr;
    const size_t size = static_cast<size_t>(256 << 10) + static_cast<size_t>(i % 7) * 512;
    if (async) {
      if (cudaMallocAsync(&p, size, nullptr) != 0 || cudaFreeAsync(p, nullptr) != 0) return -1000;
    } else {
      if (cudaMalloc(&p, size) != 0 || cudaFree(p) != 0) return -1000;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 100000;
  void* warm = nullptr;
  if (cudaMalloc(&warm, 1 << 20) != 0) {
    fprintf(stderr, "call_bench: no (fake) CUDA runtime\n");
    return 1;
  }
  cudaFree(warm);
  for (bool async : {true, false}) {
    Pairs(12, n / 10 + 1, async);  // warm the unwinder's caches
    const double t0 = NowNs();
    if (Pairs(12, n, async) < 0) {
      fprintf(stderr, "call_bench: a call failed\n");
      return 1;
    }
    printf("RESULT %s ns_per_pair %.1f\n",
           async ? "cudaMallocAsync+cudaFreeAsync" : "cudaMalloc+cudaFree",
           (NowNs() - t0) / static_cast<double>(n));
  }
  return 0;
}

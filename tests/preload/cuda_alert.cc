// cuda_alert: the online device-peak alert (MEMSTEP_ALERT_DEVICE_PEAK,
// `memstep run --alert-device-peak`), run against the fake libcudart.so.13 of
// tests/cuda (memory backed by mmap; its libcuda.so.1 must be on
// LD_LIBRARY_PATH).
//
// Planted facts: 16 MiB of device memory and 64 MiB of pinned host memory
// stay live across steps 0..7; steps 3 and 6 also hold 32 MiB for a moment.
// Device peaks per step: 48 MiB at steps 3 and 6, 16 MiB otherwise. Pinned
// host memory is not device-resident: counted, it would put every step over
// a 40 MiB threshold. With warm-up 1 and threshold 40 MiB the alert fires
// exactly twice (once per crossing), at steps 3 and 6, value 48 MiB.
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "memstep/memstep.h"

extern "C" {
int cudaMalloc(void** p, size_t n);
int cudaFree(void* p);
int cudaMallocHost(void** p, size_t n);
int cudaFreeHost(void* p);
}

namespace {

constexpr size_t kMiB = size_t{1} << 20;

void Check(int rc, const char* what) {
  if (rc != 0) {
    fprintf(stderr, "FAIL: %s returned %d\n", what, rc);
    exit(1);
  }
}

__attribute__((noinline)) void PlantedStepPeak() {
  void* t = nullptr;
  Check(cudaMalloc(&t, 32 * kMiB), "cudaMalloc 32 MiB");
  Check(cudaFree(t), "cudaFree 32 MiB");
}

}  // namespace

int main() {
  void* base = nullptr;
  void* pinned = nullptr;
  Check(cudaMalloc(&base, 16 * kMiB), "cudaMalloc 16 MiB");
  Check(cudaMallocHost(&pinned, 64 * kMiB), "cudaMallocHost 64 MiB");
  for (uint64_t step = 0; step < 8; ++step) {
    MEMSTEP_STEP_BEGIN(step);
    if (step == 3 || step == 6) PlantedStepPeak();
    MEMSTEP_STEP_END(step);
  }
  Check(cudaFree(base), "cudaFree 16 MiB");
  Check(cudaFreeHost(pinned), "cudaFreeHost 64 MiB");
  printf("cuda_alert done\n");
  return 0;
}

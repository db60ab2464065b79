// app_second: run with a second interposer of cudaMalloc preloaded after
// memstep (second_interposer.c). Neither may recurse and both must see every
// call: memstep records each allocation once, the other tool counts it.
//
// Planted facts, step 0: cudaMalloc 1 MiB+1, 2 MiB+3, 3 MiB+5; the first two
// are freed. Live at end: device 3 MiB+5.
#include <dlfcn.h>

#include <cstdint>

#include "tests/cuda/apps/app_common.h"
#include "tests/cuda/apps/rt_util.h"

using namespace cudatest;

PLANTED void* planted_second_malloc(uint64_t size) {
  void* p = nullptr;
  CheckRc(cudaMalloc(&p, size), 0, "cudaMalloc (777: the interposers recursed)");
  Alloc(kDevice, Lowest("cudaMalloc"), 0, (uint64_t)p, size, __func__);
  return p;
}

int main(int argc, char** argv) {
  Init(argc, argv, "app_second");
  auto calls = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "second_interposer_calls"));
  Check(calls != nullptr, "run with LD_PRELOAD=<libcuda_second_interposer.so>");
  constexpr uint64_t MiB = 1024 * 1024;
  StepBegin(0);
  void* a = planted_second_malloc(MiB + 1);
  void* b = planted_second_malloc(2 * MiB + 3);
  planted_second_malloc(3 * MiB + 5);
  CheckRc(cudaFree(a), 0, "cudaFree");
  Free(kDevice, Lowest("cudaFree"), (uint64_t)a);
  CheckRc(cudaFree(b), 0, "cudaFree");
  Free(kDevice, Lowest("cudaFree"), (uint64_t)b);
  StepEnd(0);
  CheckRc(calls(), 3, "cudaMalloc calls the second interposer saw");
  Finish();
  return 0;
}

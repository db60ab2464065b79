// app12: a program linked against libcudart.so.12, which also dlopens
// (RTLD_LOCAL) a module linked against libcudart.so.13: two runtime majors in
// one process, as with a cu13 framework next to a package built for cu12.
// Each call must reach the wrapper for its own runtime and, through it, that
// runtime (the fake records which runtime made each block).
//
// Planted facts, all in step 0 stage "forward":
//   via .12: cudaMalloc 1 MiB+3, cudaMallocHost 16 KiB+5, cudaMallocAsync
//            512 KiB+7; cudaFree and cudaFreeAsync of the first and third
//   via .13 (module): cudaMalloc 2 MiB+9, freed in step 0 by the module
//   live at end: pinned 16 KiB+5.
#include <dlfcn.h>

#include <cstdint>

#include "tests/cuda/apps/app_common.h"
#include "tests/cuda/apps/rt_util.h"

using namespace cudatest;

namespace {
constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;
void *g_malloc, *g_host, *g_async;
int Owner(int rt) { return ViaDriver() ? FC_OWNER_DRIVER : rt; }
}  // namespace

PLANTED void planted_12_malloc() {
  CheckRc(cudaMalloc(&g_malloc, MiB + 3), 0, "cudaMalloc@libcudart.so.12");
  Alloc(kDevice, Lowest("cudaMalloc"), 0, (uint64_t)g_malloc, MiB + 3, __func__);
  CheckMadeBy((uint64_t)g_malloc, Lowest("cudaMalloc"), Owner(FC_OWNER_RT12));
}

PLANTED void planted_12_host() {
  CheckRc(cudaMallocHost(&g_host, 16 * KiB + 5), 0, "cudaMallocHost@libcudart.so.12");
  Alloc(kPinned, "cudaMallocHost", -1, (uint64_t)g_host, 16 * KiB + 5, __func__);
  CheckMadeBy((uint64_t)g_host, "cudaMallocHost", FC_OWNER_RT12);
}

PLANTED void planted_12_async() {
  CheckRc(cudaMallocAsync(&g_async, 512 * KiB + 7, nullptr), 0, "cudaMallocAsync@libcudart.so.12");
  Alloc(kPool, Lowest("cudaMallocAsync"), 0, (uint64_t)g_async, 512 * KiB + 7, __func__);
}

int main(int argc, char** argv) {
  Init(argc, argv, "app12");
  int v = 0;
  CheckRc(cudaRuntimeGetVersion(&v), 0, "cudaRuntimeGetVersion");
  CheckRc(v, 12080, "runtime version of libcudart.so.12");
  StepBegin(0);
  StageBegin("forward");
  planted_12_malloc();
  planted_12_host();
  planted_12_async();
  CheckRc(cudaFree(g_malloc), 0, "cudaFree@libcudart.so.12");
  Free(kDevice, Lowest("cudaFree"), (uint64_t)g_malloc);
  CheckRc(cudaFreeAsync(g_async, nullptr), 0, "cudaFreeAsync@libcudart.so.12");
  Free(kPool, Lowest("cudaFreeAsync"), (uint64_t)g_async);

  void* m = dlopen(MEMSTEP_CUDA_MOD13, RTLD_NOW | RTLD_LOCAL);
  Check(m != nullptr, "dlopen %s: %s", MEMSTEP_CUDA_MOD13, dlerror());
  auto alloc = reinterpret_cast<int (*)(void**, size_t)>(dlsym(m, "planted_mod13_malloc"));
  auto release = reinterpret_cast<int (*)(void*)>(dlsym(m, "planted_mod13_free"));
  Check(alloc && release, "the module's functions");
  void* p = nullptr;
  CheckRc(alloc(&p, 2 * MiB + 9), 0, "cudaMalloc@libcudart.so.13 (module)");
  Alloc(kDevice, Lowest("cudaMalloc"), 0, (uint64_t)p, 2 * MiB + 9, "planted_mod13_malloc");
  CheckMadeBy((uint64_t)p, Lowest("cudaMalloc"), Owner(FC_OWNER_RT13));
  CheckRc(release(p), 0, "cudaFree@libcudart.so.13 (module)");
  Free(kDevice, Lowest("cudaFree"), (uint64_t)p);
  StageEnd("forward");
  StepEnd(0);
  Finish();
  return 0;
}

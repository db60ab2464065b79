// app_local: the runtime is not in the global scope. The program does not
// link libcudart; it reaches it three ways:
//  A) a module loaded RTLD_LOCAL whose PLT calls cudaMalloc: the preloaded
//     wrapper is reached (preloads head the global scope), but its
//     dlsym(RTLD_NEXT) finds nothing, so it must find the real function
//     another way (brief section 1.4, pitfall 2);
//  B) dlopen("libcudart.so.13", RTLD_LOCAL) + dlsym(handle, "cudaMalloc") and
//     dlvsym(handle, "cudaMalloc", "libcudart.so.13"): this bypasses
//     LD_PRELOAD; only a dlsym/dlvsym override sees it (pitfall 3);
//  C) a module loaded RTLD_DEEPBIND: its calls bind to libcudart directly and
//     no interposer sees them (pitfall 4, a documented miss). With
//     FAKECUDA_RT_VIA_DRIVER=1 the runtime's driver call is still caught,
//     through the cuGetProcAddress chain, like a static runtime's.
//
// Planted facts, step 0 stage "forward": A cudaMalloc 1 MiB+41; B dlsym
// cudaMalloc 2 MiB+43, dlvsym cudaMalloc 3 MiB+47 (freed through dlsym'd
// cudaFree); C cudaMalloc 4 MiB+53 (a miss, or cuMemAlloc_v2 via the driver),
// freed by the module. Live at end: device 1 MiB+41 + 3 MiB+47.
#include <dlfcn.h>

#include <cstdint>

#include "tests/cuda/apps/app_common.h"

using namespace cudatest;

namespace {
constexpr uint64_t MiB = 1024 * 1024;
using MallocFn = int (*)(void**, size_t);
using FreeFn = int (*)(void*);
void* g_cudart;  // dlopen("libcudart.so.13") handle

void* Open(const char* path, int flags) {
  void* h = dlopen(path, flags);
  Check(h != nullptr, "dlopen %s: %s", path, dlerror());
  return h;
}

template <typename F>
F Sym(void* h, const char* name) {
  F f = reinterpret_cast<F>(dlsym(h, name));
  Check(f != nullptr, "dlsym %s: %s", name, dlerror());
  return f;
}

void CheckOwner(uint64_t addr) {
  int owner = 0;
  Check(fakecuda_block_info(addr, nullptr, nullptr, nullptr, nullptr, &owner) == 1 &&
            owner == (ViaDriver() ? FC_OWNER_DRIVER : FC_OWNER_RT13),
        "0x%llx: made by owner %d", (unsigned long long)addr, owner);
}
}  // namespace

PLANTED void planted_local_module_call() {
  void* m = Open(MEMSTEP_CUDA_MOD_LOCAL, RTLD_NOW | RTLD_LOCAL);
  void* p = nullptr;
  CheckRc(Sym<MallocFn>(m, "planted_local_module_malloc")(&p, MiB + 41), 0,
          "cudaMalloc from an RTLD_LOCAL module");
  Alloc(kDevice, Lowest("cudaMalloc"), 0, (uint64_t)p, MiB + 41, "planted_local_module_malloc");
  CheckOwner((uint64_t)p);
}

PLANTED void planted_local_dlsym_malloc() {
  g_cudart = Open("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
  void* p = nullptr;
  CheckRc(Sym<MallocFn>(g_cudart, "cudaMalloc")(&p, 2 * MiB + 43), 0, "dlsym(handle, cudaMalloc)");
  Alloc(kDevice, Lowest("cudaMalloc"), 0, (uint64_t)p, 2 * MiB + 43, __func__);
  CheckOwner((uint64_t)p);
  CheckRc(Sym<FreeFn>(g_cudart, "cudaFree")(p), 0, "dlsym(handle, cudaFree)");
  Free(kDevice, Lowest("cudaFree"), (uint64_t)p);
}

PLANTED void planted_local_dlvsym_malloc() {
  auto f = reinterpret_cast<MallocFn>(dlvsym(g_cudart, "cudaMalloc", "libcudart.so.13"));
  Check(f != nullptr, "dlvsym(handle, cudaMalloc, libcudart.so.13): %s", dlerror());
  void* p = nullptr;
  CheckRc(f(&p, 3 * MiB + 47), 0, "dlvsym(handle, cudaMalloc)");
  Alloc(kDevice, Lowest("cudaMalloc"), 0, (uint64_t)p, 3 * MiB + 47, __func__);
}

PLANTED void planted_deep_module_call() {
  void* m = Open(MEMSTEP_CUDA_MOD_DEEP, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  void* p = nullptr;
  CheckRc(Sym<MallocFn>(m, "planted_deep_module_malloc")(&p, 4 * MiB + 53), 0,
          "cudaMalloc from an RTLD_DEEPBIND module");
  if (ViaDriver()) {
    Alloc(kDevice, "cuMemAlloc_v2", 0, (uint64_t)p, 4 * MiB + 53, "planted_deep_module_malloc");
  } else {
    Miss(kDevice, "cudaMalloc", (uint64_t)p, 4 * MiB + 53, "deepbind");
  }
  CheckRc(Sym<FreeFn>(m, "planted_deep_module_free")(p), 0, "cudaFree from the deepbind module");
  if (ViaDriver()) {
    Free(kDevice, "cuMemFree_v2", (uint64_t)p);
  } else {
    MissFree((uint64_t)p);
  }
}

int main(int argc, char** argv) {
  Init(argc, argv, "app_local");
  StepBegin(0);
  StageBegin("forward");
  planted_local_module_call();
  planted_local_dlsym_malloc();
  planted_local_dlvsym_malloc();
  planted_deep_module_call();
  StageEnd("forward");
  StepEnd(0);
  Finish();
  return 0;
}

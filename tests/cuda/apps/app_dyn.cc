// app_dyn: a program linked against libcudart.so.13 (dynamic runtime) that
// calls every runtime allocation entry point, the _ptsz forms, a driver
// function obtained through cudaGetDriverEntryPoint, an out-of-memory and an
// injected N-th-call failure, across three steps and two devices.
//
// Planted facts (sizes are distinctive; KiB = 1024):
//   step 0 forward : cudaMalloc 3 MiB+123, cudaMallocManaged 1 MiB+7,
//                    cudaMallocHost 64 KiB+3, cudaHostAlloc 128 KiB+5,
//                    cudaMallocPitch 1000x300 (pitch 1024: 307200 bytes),
//                    cudaMalloc3D 700x20x5 (pitch 1024: 102400 bytes)
//          backward: cudaMallocAsync 2 MiB+11, cudaMallocAsync_ptsz 1 MiB+13,
//                    cudaMallocFromPoolAsync 512 KiB+17 and _ptsz 256 KiB+19
//                    (a created pool), then frees the cudaMalloc, the
//                    cudaMallocHost and both async blocks
//   step 1 forward : on device 1, cudaMalloc 5 MiB+29; cudaMalloc 1 GiB fails
//                    (out of memory, limit 512 MiB); the 13th allocation call
//                    (cudaMalloc 4 MiB+31) fails with the injected error 46;
//                    cudaFree(NULL) = 0, cudaFree/cudaFreeHost of a bogus
//                    pointer = 1. The step ends on device 1: memstep's step-end
//                    queries must leave the current device and the last error alone.
//   step 2 optimizer: frees managed, pitch and 3D blocks; cuMemAlloc_v2 6 MiB+37
//                    and cuMemFree_v2 through cudaGetDriverEntryPoint.
//   live at end: pinned 128 KiB+5, pool 768 KiB+36, device (dev 1) 5 MiB+29.
#include <cstdint>
#include <cstring>

#include "tests/cuda/apps/app_common.h"
#include "tests/cuda/apps/rt_util.h"

using namespace cudatest;

namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;
const char* const kKnobs[] = {"FAKECUDA_MEM_LIMIT=536870912", "FAKECUDA_FAIL_CALL=13",
                              "FAKECUDA_FAIL_ERR=46", nullptr};

struct Blocks {
  void *malloc_, *managed, *host, *hostalloc, *pitch, *p3d, *async, *async_ptsz, *frompool,
      *frompool_ptsz, *dev1;
  cudaMemPool_t pool;
} b;

int Owner() { return ViaDriver() ? FC_OWNER_DRIVER : FC_OWNER_RT13; }

}  // namespace

PLANTED void planted_dyn_malloc() {
  CheckRc(cudaMalloc(&b.malloc_, 3 * MiB + 123), 0, "cudaMalloc");
  Alloc(kDevice, Lowest("cudaMalloc"), 0, (uint64_t)b.malloc_, 3 * MiB + 123, __func__);
  CheckMadeBy((uint64_t)b.malloc_, Lowest("cudaMalloc"), Owner());
}

PLANTED void planted_dyn_managed() {
  CheckRc(cudaMallocManaged(&b.managed, MiB + 7, cudaMemAttachGlobal), 0, "cudaMallocManaged");
  Alloc(kManaged, "cudaMallocManaged", 0, (uint64_t)b.managed, MiB + 7, __func__);
}

PLANTED void planted_dyn_host() {
  CheckRc(cudaMallocHost(&b.host, 64 * KiB + 3), 0, "cudaMallocHost");
  memset(b.host, 1, 64 * KiB + 3);  // pinned host memory is usable host memory
  Alloc(kPinned, "cudaMallocHost", -1, (uint64_t)b.host, 64 * KiB + 3, __func__);
}

PLANTED void planted_dyn_hostalloc() {
  CheckRc(cudaHostAlloc(&b.hostalloc, 128 * KiB + 5, cudaHostAllocDefault), 0, "cudaHostAlloc");
  Alloc(kPinned, "cudaHostAlloc", -1, (uint64_t)b.hostalloc, 128 * KiB + 5, __func__);
}

PLANTED void planted_dyn_pitch() {
  size_t pitch = 0;
  CheckRc(cudaMallocPitch(&b.pitch, &pitch, 1000, 300), 0, "cudaMallocPitch");
  CheckRc((long)pitch, 1024, "cudaMallocPitch's pitch");
  Alloc(kDevice, "cudaMallocPitch", 0, (uint64_t)b.pitch, 1024 * 300, __func__);
}

PLANTED void planted_dyn_3d() {
  cudaPitchedPtr pp = {};
  CheckRc(cudaMalloc3D(&pp, cudaExtent{700, 20, 5}), 0, "cudaMalloc3D");
  Check(pp.pitch == 1024 && pp.xsize == 700 && pp.ysize == 20, "cudaMalloc3D's pitched pointer");
  b.p3d = pp.ptr;
  Alloc(kDevice, "cudaMalloc3D", 0, (uint64_t)b.p3d, 1024 * 20 * 5, __func__);
}

PLANTED void planted_dyn_async() {
  CheckRc(cudaMallocAsync(&b.async, 2 * MiB + 11, nullptr), 0, "cudaMallocAsync");
  Alloc(kPool, Lowest("cudaMallocAsync"), 0, (uint64_t)b.async, 2 * MiB + 11, __func__);
}

PLANTED void planted_dyn_async_ptsz() {
  CheckRc(cudaMallocAsync_ptsz(&b.async_ptsz, MiB + 13, nullptr), 0, "cudaMallocAsync_ptsz");
  Alloc(kPool, Lowest("cudaMallocAsync"), 0, (uint64_t)b.async_ptsz, MiB + 13, __func__);
  // The per-thread form must reach the per-thread function, at every layer.
  CheckMadeBy((uint64_t)b.async_ptsz, ViaDriver() ? "cuMemAllocAsync_ptsz" : "cudaMallocAsync_ptsz",
              Owner());
}

PLANTED void planted_dyn_frompool() {
  cudaMemPoolProps props = {};
  props.allocType = 1;
  props.location.type = 1;
  props.location.id = 0;
  CheckRc(cudaMemPoolCreate(&b.pool, &props), 0, "cudaMemPoolCreate");
  CheckRc(cudaMallocFromPoolAsync(&b.frompool, 512 * KiB + 17, b.pool, nullptr), 0,
          "cudaMallocFromPoolAsync");
  Alloc(kPool, Lowest("cudaMallocFromPoolAsync"), 0, (uint64_t)b.frompool, 512 * KiB + 17, __func__,
        (uint64_t)b.pool);
}

PLANTED void planted_dyn_frompool_ptsz() {
  CheckRc(cudaMallocFromPoolAsync_ptsz(&b.frompool_ptsz, 256 * KiB + 19, b.pool, nullptr), 0,
          "cudaMallocFromPoolAsync_ptsz");
  Alloc(kPool, Lowest("cudaMallocFromPoolAsync"), 0, (uint64_t)b.frompool_ptsz, 256 * KiB + 19,
        __func__, (uint64_t)b.pool);
}

PLANTED void planted_dyn_malloc_dev1() {
  CheckRc(cudaMalloc(&b.dev1, 5 * MiB + 29), 0, "cudaMalloc on device 1");
  Alloc(kDevice, Lowest("cudaMalloc"), 1, (uint64_t)b.dev1, 5 * MiB + 29, __func__);
}

PLANTED void planted_dyn_oom() {
  void* p = (void*)0x77;
  CheckRc(cudaMalloc(&p, 1024 * MiB), cudaErrorMemoryAllocation, "cudaMalloc(1 GiB)");
  Check(p == (void*)0x77, "cudaMalloc wrote its out-parameter on failure");
  Fail(kDevice, Lowest("cudaMalloc"), 1, 1024 * MiB, cudaErrorMemoryAllocation, __func__);
}

PLANTED void planted_dyn_failcall() {
  CheckRc((long)fakecuda_alloc_calls(), 12, "allocation calls before the injected failure");
  void* p = (void*)0x77;
  CheckRc(cudaMalloc(&p, 4 * MiB + 31), 46, "cudaMalloc (13th allocation call)");
  Check(p == (void*)0x77, "cudaMalloc wrote its out-parameter on failure");
  Fail(kDevice, Lowest("cudaMalloc"), 1, 4 * MiB + 31, 46, __func__);
}

PLANTED void planted_dyn_entry_alloc() {
  void* fn = nullptr;
  int q = -1;
  CheckRc(cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &q), 0,
          "cudaGetDriverEntryPoint(cuMemAlloc)");
  Check(fn != nullptr && q == cudaDriverEntryPointSuccess, "cuMemAlloc entry point");
  CUdeviceptr d = 0;
  CheckRc(reinterpret_cast<PFN_cuMemAlloc_v2>(fn)(&d, 6 * MiB + 37), 0, "cuMemAlloc_v2 (entry)");
  Alloc(kDevice, "cuMemAlloc_v2", 0, d, 6 * MiB + 37, __func__);
  CheckRc(cudaGetDriverEntryPoint("cuMemFree", &fn, cudaEnableDefault, &q), 0,
          "cudaGetDriverEntryPoint(cuMemFree)");
  CheckRc(reinterpret_cast<PFN_cuMemFree_v2>(fn)(d), 0, "cuMemFree_v2 (entry)");
  Free(kDevice, "cuMemFree_v2", d);
}

int main(int argc, char** argv) {
  Init(argc, argv, "app_dyn", kKnobs);
  int v = 0;
  CheckRc(cudaRuntimeGetVersion(&v), 0, "cudaRuntimeGetVersion");
  CheckRc(v, 13000, "runtime version");
  CheckRc(cudaDriverGetVersion(&v), 0, "cudaDriverGetVersion");
  CheckRc(v, 13000, "driver version");
  CheckRc(cudaGetDeviceCount(&v), 0, "cudaGetDeviceCount");
  CheckRc(v, 2, "device count");

  StepBegin(0);
  StageBegin("forward");
  planted_dyn_malloc();
  planted_dyn_managed();
  planted_dyn_host();
  planted_dyn_hostalloc();
  planted_dyn_pitch();
  planted_dyn_3d();
  StageEnd("forward");
  StageBegin("backward");
  planted_dyn_async();
  planted_dyn_async_ptsz();
  planted_dyn_frompool();
  planted_dyn_frompool_ptsz();
  CheckRc(cudaFree(b.malloc_), 0, "cudaFree");
  Free(kDevice, Lowest("cudaFree"), (uint64_t)b.malloc_);
  CheckRc(cudaFreeHost(b.host), 0, "cudaFreeHost");
  Free(kPinned, "cudaFreeHost", (uint64_t)b.host);
  CheckRc(cudaFreeAsync(b.async, nullptr), 0, "cudaFreeAsync");
  Free(kPool, Lowest("cudaFreeAsync"), (uint64_t)b.async);
  CheckRc(cudaFreeAsync_ptsz(b.async_ptsz, nullptr), 0, "cudaFreeAsync_ptsz");
  Free(kPool, Lowest("cudaFreeAsync"), (uint64_t)b.async_ptsz);
  StageEnd("backward");
  // Device 0 holds the pitch and 3D blocks, the default pool's 4 MiB reserve
  // (3 MiB + 24 at its high point) and the created pool's 2 MiB.
  PlantDevInfo(0, 1024 * 300 + 1024 * 100 + 6 * MiB, 4 * MiB, 0);
  StepEnd(0);

  StepBegin(1);
  StageBegin("forward");
  CheckRc(cudaSetDevice(1), 0, "cudaSetDevice(1)");
  planted_dyn_malloc_dev1();
  planted_dyn_oom();
  planted_dyn_failcall();
  CheckRc(cudaFree(nullptr), 0, "cudaFree(NULL)");
  CheckRc(cudaFree((void*)0x1234), cudaErrorInvalidValue, "cudaFree(bogus)");
  CheckRc(cudaFreeHost((void*)0x1234), cudaErrorInvalidValue, "cudaFreeHost(bogus)");
  StageEnd("forward");
  PlantDevInfo(1, 5 * MiB + 29, 0, 0);
  StepEnd(1);
  CheckRc(CurrentDevice(), 1, "current device after the step end");
  CheckRc(cudaGetLastError(), cudaErrorInvalidValue, "cudaGetLastError after the step end");
  CheckRc(cudaGetLastError(), cudaSuccess, "cudaGetLastError (reset)");
  CheckRc(cudaSetDevice(0), 0, "cudaSetDevice(0)");

  StepBegin(2);
  StageBegin("optimizer");
  CheckRc(cudaFree(b.managed), 0, "cudaFree(managed)");
  Free(kManaged, Lowest("cudaFree"), (uint64_t)b.managed);
  CheckRc(cudaFree(b.pitch), 0, "cudaFree(pitch)");
  Free(kDevice, Lowest("cudaFree"), (uint64_t)b.pitch);
  CheckRc(cudaFree(b.p3d), 0, "cudaFree(3D)");
  Free(kDevice, Lowest("cudaFree"), (uint64_t)b.p3d);
  planted_dyn_entry_alloc();
  void* fn = (void*)0x77;
  int q = -1;
  CheckRc(cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 13000, 0, &q), 0,
          "cudaGetDriverEntryPointByVersion(unknown)");
  Check(fn == nullptr && q == cudaDriverEntryPointSymbolNotFound, "unknown entry point");
  StageEnd("optimizer");
  StepEnd(2);
  Finish();
  return 0;
}

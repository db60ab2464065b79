// app_drv: a driver-API program linked with -lcuda (libcuda.so.1, no
// runtime): every allocation function reached through its PLT, which only
// exported definitions in the preloaded library can intercept.
//
// Planted facts:
//   step 0 forward : cuMemAlloc_v2 8 MiB+3, cuMemAllocPitch_v2 3000x10 (pitch
//                    3072: 30720 bytes), cuMemAllocManaged 1 MiB+5,
//                    cuMemAllocHost_v2 64 KiB+7, cuMemHostAlloc 32 KiB+9,
//                    cuMemAllocAsync 2 MiB+11, cuMemAllocAsync_ptsz 1 MiB+13,
//                    cuMemAllocFromPoolAsync 512 KiB+15 and _ptsz 256 KiB+17
//          backward: frees the first, the pitch, the host and both async
//                    blocks; cuMemAlloc_v2 1 GiB fails (out of memory, limit
//                    256 MiB); the 11th allocation call (cuMemAllocHost_v2
//                    128 KiB+19) fails with 46; a thread with no current
//                    context gets CUDA_ERROR_INVALID_CONTEXT (201) from
//                    cuMemAlloc_v2 4 KiB+21 (device unknown: -1);
//                    cuMemFree_v2 of a bogus pointer = 1
//   step 1 optimizer: frees the managed block.
//   live at end: pinned 32 KiB+9, pool 768 KiB+32.
#include <cstdint>
#include <thread>

#include "tests/cuda/apps/app_common.h"
#include "tests/cuda/fake/cuda_decls.h"

using namespace cudatest;

namespace {
constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;
const char* const kKnobs[] = {"FAKECUDA_MEM_LIMIT=268435456", "FAKECUDA_FAIL_CALL=11",
                              "FAKECUDA_FAIL_ERR=46", nullptr};
struct {
  CUdeviceptr alloc, pitch, managed, async, async_ptsz, frompool, frompool_ptsz;
  void *host, *hostalloc;
  CUmemoryPool pool;
} b;
}  // namespace

PLANTED void planted_drv_alloc() {
  CheckRc(cuMemAlloc_v2(&b.alloc, 8 * MiB + 3), 0, "cuMemAlloc_v2");
  Alloc(kDevice, "cuMemAlloc_v2", 0, b.alloc, 8 * MiB + 3, __func__);
}

PLANTED void planted_drv_pitch() {
  size_t pitch = 0;
  CheckRc(cuMemAllocPitch_v2(&b.pitch, &pitch, 3000, 10, 4), 0, "cuMemAllocPitch_v2");
  CheckRc((long)pitch, 3072, "cuMemAllocPitch_v2's pitch");
  Alloc(kDevice, "cuMemAllocPitch_v2", 0, b.pitch, 3072 * 10, __func__);
}

PLANTED void planted_drv_managed() {
  CheckRc(cuMemAllocManaged(&b.managed, MiB + 5, 1), 0, "cuMemAllocManaged");
  Alloc(kManaged, "cuMemAllocManaged", 0, b.managed, MiB + 5, __func__);
}

PLANTED void planted_drv_host() {
  CheckRc(cuMemAllocHost_v2(&b.host, 64 * KiB + 7), 0, "cuMemAllocHost_v2");
  Alloc(kPinned, "cuMemAllocHost_v2", -1, (uint64_t)b.host, 64 * KiB + 7, __func__);
}

PLANTED void planted_drv_hostalloc() {
  CheckRc(cuMemHostAlloc(&b.hostalloc, 32 * KiB + 9, 0), 0, "cuMemHostAlloc");
  Alloc(kPinned, "cuMemHostAlloc", -1, (uint64_t)b.hostalloc, 32 * KiB + 9, __func__);
}

PLANTED void planted_drv_async() {
  CheckRc(cuMemAllocAsync(&b.async, 2 * MiB + 11, nullptr), 0, "cuMemAllocAsync");
  Alloc(kPool, "cuMemAllocAsync", 0, b.async, 2 * MiB + 11, __func__);
}

PLANTED void planted_drv_async_ptsz() {
  CheckRc(cuMemAllocAsync_ptsz(&b.async_ptsz, MiB + 13, nullptr), 0, "cuMemAllocAsync_ptsz");
  Alloc(kPool, "cuMemAllocAsync", 0, b.async_ptsz, MiB + 13, __func__);
}

PLANTED void planted_drv_frompool() {
  CUmemPoolProps props = {};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CheckRc(cuMemPoolCreate(&b.pool, &props), 0, "cuMemPoolCreate");
  CheckRc(cuMemAllocFromPoolAsync(&b.frompool, 512 * KiB + 15, b.pool, nullptr), 0,
          "cuMemAllocFromPoolAsync");
  Alloc(kPool, "cuMemAllocFromPoolAsync", 0, b.frompool, 512 * KiB + 15, __func__,
        (uint64_t)b.pool);
}

PLANTED void planted_drv_frompool_ptsz() {
  CheckRc(cuMemAllocFromPoolAsync_ptsz(&b.frompool_ptsz, 256 * KiB + 17, b.pool, nullptr), 0,
          "cuMemAllocFromPoolAsync_ptsz");
  Alloc(kPool, "cuMemAllocFromPoolAsync", 0, b.frompool_ptsz, 256 * KiB + 17, __func__,
        (uint64_t)b.pool);
}

PLANTED void planted_drv_oom() {
  CUdeviceptr d = 0x77;
  CheckRc(cuMemAlloc_v2(&d, 1024 * MiB), CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc_v2(1 GiB)");
  Check(d == 0x77, "cuMemAlloc_v2 wrote its out-parameter on failure");
  Fail(kDevice, "cuMemAlloc_v2", 0, 1024 * MiB, CUDA_ERROR_OUT_OF_MEMORY, __func__);
}

PLANTED void planted_drv_failcall() {
  CheckRc((long)fakecuda_alloc_calls(), 10, "allocation calls before the injected failure");
  void* p = (void*)0x77;
  CheckRc(cuMemAllocHost_v2(&p, 128 * KiB + 19), 46, "cuMemAllocHost_v2 (11th allocation call)");
  Check(p == (void*)0x77, "cuMemAllocHost_v2 wrote its out-parameter on failure");
  Fail(kPinned, "cuMemAllocHost_v2", -1, 128 * KiB + 19, 46, __func__);
}

// A thread that never made a context current (HAMi-core PR #172's pattern).
PLANTED void planted_drv_noctx() {
  CUdeviceptr d = 0x77;
  CheckRc(cuMemAlloc_v2(&d, 4 * KiB + 21), CUDA_ERROR_INVALID_CONTEXT,
          "cuMemAlloc_v2 without a context");
  Check(d == 0x77, "cuMemAlloc_v2 wrote its out-parameter on failure");
  Fail(kDevice, "cuMemAlloc_v2", -1, 4 * KiB + 21, CUDA_ERROR_INVALID_CONTEXT, __func__);
  CUdevice dev = -5;
  CheckRc(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT,
          "cuCtxGetDevice afterwards (the profiler must not make a context current)");
}

int main(int argc, char** argv) {
  Init(argc, argv, "app_drv", kKnobs);
  CUdevice dev = -1;
  CUcontext ctx = nullptr;
  CheckRc(cuInit(0), 0, "cuInit");
  CheckRc(cuDeviceGet(&dev, 0), 0, "cuDeviceGet");
  CheckRc(cuDevicePrimaryCtxRetain(&ctx, dev), 0, "cuDevicePrimaryCtxRetain");
  CheckRc(cuCtxSetCurrent(ctx), 0, "cuCtxSetCurrent");

  StepBegin(0);
  StageBegin("forward");
  planted_drv_alloc();
  planted_drv_pitch();
  planted_drv_managed();
  planted_drv_host();
  planted_drv_hostalloc();
  planted_drv_async();
  planted_drv_async_ptsz();
  planted_drv_frompool();
  planted_drv_frompool_ptsz();
  StageEnd("forward");
  StageBegin("backward");
  CheckRc(cuMemFree_v2(b.alloc), 0, "cuMemFree_v2");
  Free(kDevice, "cuMemFree_v2", b.alloc);
  CheckRc(cuMemFree_v2(b.pitch), 0, "cuMemFree_v2(pitch)");
  Free(kDevice, "cuMemFree_v2", b.pitch);
  CheckRc(cuMemFreeHost(b.host), 0, "cuMemFreeHost");
  Free(kPinned, "cuMemFreeHost", (uint64_t)b.host);
  CheckRc(cuMemFreeAsync(b.async, nullptr), 0, "cuMemFreeAsync");
  Free(kPool, "cuMemFreeAsync", b.async);
  CheckRc(cuMemFreeAsync_ptsz(b.async_ptsz, nullptr), 0, "cuMemFreeAsync_ptsz");
  Free(kPool, "cuMemFreeAsync", b.async_ptsz);
  planted_drv_oom();
  planted_drv_failcall();
  std::thread(planted_drv_noctx).join();
  CheckRc(cuMemFree_v2(0x1234), CUDA_ERROR_INVALID_VALUE, "cuMemFree_v2(bogus)");
  StageEnd("backward");
  StepEnd(0);

  StepBegin(1);
  StageBegin("optimizer");
  CheckRc(cuMemFree_v2(b.managed), 0, "cuMemFree_v2(managed)");
  Free(kManaged, "cuMemFree_v2", b.managed);
  StageEnd("optimizer");
  StepEnd(1);
  Finish();
  return 0;
}

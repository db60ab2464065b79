// app_pool: stream-ordered allocation (PyTorch's backend:cudaMallocAsync,
// JAX's cuda_async): the default pool, a created pool with
// cudaMallocFromPoolAsync, the _ptsz forms, cudaMemPoolTrimTo, and the pool
// attributes memstep reads at every step end (DEV_INFO).
//
// The fake pool reserves in 2 MiB units up to its high point and keeps the
// reserve until trimmed (release threshold "infinite", as PyTorch sets it).
//
// Planted facts:
//   step 0 forward : cudaMallocAsync A 1 MiB+1, B 3 MiB+3, cudaMallocAsync_ptsz
//                    C 512 KiB+5; cudaFreeAsync B. Default pool: reserved
//                    6 MiB, used 1.5 MiB+6
//   step 1 backward: pool P created; cudaMallocFromPoolAsync E 2 MiB+7,
//                    _ptsz F 1 MiB+9; cudaMallocAsync 1 GiB fails (limit
//                    256 MiB); the 7th allocation call
//                    (cudaMallocFromPoolAsync_ptsz 64 KiB+11) fails with 46;
//                    cudaFreeAsync_ptsz E. P reserves 4 MiB
//   step 2 optimizer: trim, free A and C, trim, free F, destroy P; on device 1,
//                    cudaMallocAsync G 256 KiB+13 (kept)
//   live at end: device_pool 256 KiB+13 (device 1).
#include <cstdint>

#include "tests/cuda/apps/app_common.h"
#include "tests/cuda/apps/rt_util.h"

using namespace cudatest;

namespace {
constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;
const char* const kKnobs[] = {"FAKECUDA_MEM_LIMIT=268435456", "FAKECUDA_FAIL_CALL=7",
                              "FAKECUDA_FAIL_ERR=46", nullptr};
cudaMemPool_t g_pool;
void *g_a, *g_b, *g_c, *g_e, *g_f, *g_g;

void* Async(bool ptsz, uint64_t size, int dev, const char* func) {
  void* p = nullptr;
  CheckRc(ptsz ? cudaMallocAsync_ptsz(&p, size, nullptr) : cudaMallocAsync(&p, size, nullptr), 0,
          func);
  Alloc(kPool, Lowest("cudaMallocAsync"), dev, (uint64_t)p, size, func);
  return p;
}

void* FromPool(bool ptsz, uint64_t size, const char* func) {
  void* p = nullptr;
  CheckRc(ptsz ? cudaMallocFromPoolAsync_ptsz(&p, size, g_pool, nullptr)
               : cudaMallocFromPoolAsync(&p, size, g_pool, nullptr),
          0, func);
  Alloc(kPool, Lowest("cudaMallocFromPoolAsync"), 0, (uint64_t)p, size, func, (uint64_t)g_pool);
  return p;
}

void FreeAsync(bool ptsz, void* p) {
  CheckRc(ptsz ? cudaFreeAsync_ptsz(p, nullptr) : cudaFreeAsync(p, nullptr), 0, "cudaFreeAsync");
  Free(kPool, Lowest("cudaFreeAsync"), (uint64_t)p);
}

void Trim() {
  cudaMemPool_t dp = nullptr;
  CheckRc(cudaDeviceGetDefaultMemPool(&dp, 0), 0, "cudaDeviceGetDefaultMemPool");
  CheckRc(cudaMemPoolTrimTo(dp, 0), 0, "cudaMemPoolTrimTo");
}
}  // namespace

PLANTED void planted_pool_async_a() { g_a = Async(false, MiB + 1, 0, __func__); }
PLANTED void planted_pool_async_b() { g_b = Async(false, 3 * MiB + 3, 0, __func__); }
PLANTED void planted_pool_async_c_ptsz() { g_c = Async(true, 512 * KiB + 5, 0, __func__); }
PLANTED void planted_pool_from_e() { g_e = FromPool(false, 2 * MiB + 7, __func__); }
PLANTED void planted_pool_from_f_ptsz() { g_f = FromPool(true, MiB + 9, __func__); }
PLANTED void planted_pool_async_g_dev1() { g_g = Async(false, 256 * KiB + 13, 1, __func__); }

PLANTED void planted_pool_oom() {
  void* p = (void*)0x77;
  CheckRc(cudaMallocAsync(&p, 1024 * MiB, nullptr), cudaErrorMemoryAllocation,
          "cudaMallocAsync(1 GiB)");
  Check(p == (void*)0x77, "cudaMallocAsync wrote its out-parameter on failure");
  Fail(kPool, Lowest("cudaMallocAsync"), 0, 1024 * MiB, cudaErrorMemoryAllocation, __func__);
}

PLANTED void planted_pool_failcall() {
  CheckRc((long)fakecuda_alloc_calls(), 6, "allocation calls before the injected failure");
  void* p = (void*)0x77;
  CheckRc(cudaMallocFromPoolAsync_ptsz(&p, 64 * KiB + 11, g_pool, nullptr), 46,
          "cudaMallocFromPoolAsync_ptsz (7th allocation call)");
  Check(p == (void*)0x77, "cudaMallocFromPoolAsync_ptsz wrote its out-parameter on failure");
  Fail(kPool, Lowest("cudaMallocFromPoolAsync"), 0, 64 * KiB + 11, 46, __func__);
}

int main(int argc, char** argv) {
  Init(argc, argv, "app_pool", kKnobs);
  CheckRc(cudaSetDevice(0), 0, "cudaSetDevice(0)");

  StepBegin(0);
  StageBegin("forward");
  planted_pool_async_a();
  planted_pool_async_b();
  planted_pool_async_c_ptsz();
  FreeAsync(false, g_b);
  StageEnd("forward");
  PlantDevInfo(0, 6 * MiB, 6 * MiB, MiB + 512 * KiB + 6);
  StepEnd(0);

  StepBegin(1);
  StageBegin("backward");
  cudaMemPoolProps props = {};
  props.allocType = 1;
  props.location.type = 1;
  props.location.id = 0;
  CheckRc(cudaMemPoolCreate(&g_pool, &props), 0, "cudaMemPoolCreate");
  planted_pool_from_e();
  planted_pool_from_f_ptsz();
  planted_pool_oom();
  planted_pool_failcall();
  FreeAsync(true, g_e);
  StageEnd("backward");
  PlantDevInfo(1, 10 * MiB, 6 * MiB, MiB + 512 * KiB + 6);
  StepEnd(1);

  StepBegin(2);
  StageBegin("optimizer");
  Trim();
  FreeAsync(false, g_a);
  FreeAsync(true, g_c);
  Trim();
  FreeAsync(false, g_f);
  CheckRc(cudaMemPoolDestroy(g_pool), 0, "cudaMemPoolDestroy");
  CheckRc(cudaSetDevice(1), 0, "cudaSetDevice(1)");
  planted_pool_async_g_dev1();
  CheckRc(cudaSetDevice(0), 0, "cudaSetDevice(0)");
  StageEnd("optimizer");
  PlantDevInfo(2, 0, 0, 0);
  StepEnd(2);
  Finish();
  return 0;
}

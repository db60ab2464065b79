// app_threads: 32 threads allocate and free at once (started together by a
// barrier), plus one worker that never made a CUDA context current (the
// HAMi-core PR #172 pattern: a weight-loading thread pool under expandable
// segments). Totals and live bytes are exact; peaks depend on the
// interleaving and are not planted.
//
// Planted facts, step 0 stage "threads":
//   thread t (0..31), j (0..7): cudaMalloc of 4096*(8t+j+1) + t + 1 bytes;
//   the even j are freed by the same thread; each thread also makes one
//   cudaMallocAsync of 8192 + t and frees it.
//   the context-less worker: cuMemCreate 2 MiB on device 1 (by
//   prop->location) succeeds and is released; cuMemAlloc_v2 4 KiB+7 fails
//   with CUDA_ERROR_INVALID_CONTEXT (device -1), and afterwards the thread
//   still has no context (a profiler must not make one current).
//   live at end: the 128 odd-j device blocks.
#include <pthread.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "tests/cuda/apps/app_common.h"
#include "tests/cuda/apps/rt_util.h"

using namespace cudatest;

namespace {
constexpr int kThreads = 32, kPerThread = 8;
pthread_barrier_t g_barrier;
PFN_cuMemCreate g_create;
PFN_cuMemRelease g_release;
PFN_cuMemAlloc_v2 g_alloc;
CUresult (*g_ctx_get_device)(CUdevice*);

void* EntryPoint(const char* name) {
  void* fn = nullptr;
  int q = -1;
  CheckRc(cudaGetDriverEntryPointByVersion(name, &fn, 12000, 0, &q), 0, name);
  Check(fn != nullptr && q == 0, "entry point %s", name);
  return fn;
}
}  // namespace

PLANTED void* planted_thread_malloc(int t, int j) {
  uint64_t size = 4096 * (uint64_t)(t * kPerThread + j + 1) + t + 1;
  void* p = nullptr;
  CheckRc(cudaMalloc(&p, size), 0, "cudaMalloc (thread)");
  Alloc(kDevice, Lowest("cudaMalloc"), 0, (uint64_t)p, size, __func__);
  return p;
}

PLANTED void planted_thread_async(int t) {
  void* p = nullptr;
  CheckRc(cudaMallocAsync(&p, 8192 + t, nullptr), 0, "cudaMallocAsync (thread)");
  Alloc(kPool, Lowest("cudaMallocAsync"), 0, (uint64_t)p, 8192 + t, __func__);
  CheckRc(cudaFreeAsync(p, nullptr), 0, "cudaFreeAsync (thread)");
  Free(kPool, Lowest("cudaFreeAsync"), (uint64_t)p);
}

void Worker(int t) {
  pthread_barrier_wait(&g_barrier);
  for (int j = 0; j < kPerThread; ++j) {
    void* p = planted_thread_malloc(t, j);
    if (j % 2 == 0) {
      CheckRc(cudaFree(p), 0, "cudaFree (thread)");
      Free(kDevice, Lowest("cudaFree"), (uint64_t)p);
    }
  }
  planted_thread_async(t);
}

PLANTED void planted_thread_noctx_vmm() {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 1;
  CUmemGenericAllocationHandle h = 0;
  CheckRc(g_create(&h, 2 << 20, &prop, 0), 0, "cuMemCreate on a thread without a context");
  Alloc(kVmm, "cuMemCreate", 1, h, 2 << 20, __func__);
  CheckRc(g_release(h), 0, "cuMemRelease");
  Free(kVmm, "cuMemRelease", h);
}

PLANTED void planted_thread_noctx_alloc() {
  CUdeviceptr d = 0x77;
  CheckRc(g_alloc(&d, 4096 + 7), CUDA_ERROR_INVALID_CONTEXT, "cuMemAlloc_v2 without a context");
  Check(d == 0x77, "cuMemAlloc_v2 wrote its out-parameter on failure");
  Fail(kDevice, "cuMemAlloc_v2", -1, 4096 + 7, CUDA_ERROR_INVALID_CONTEXT, __func__);
  CUdevice dev = -5;
  CheckRc(g_ctx_get_device(&dev), CUDA_ERROR_INVALID_CONTEXT,
          "cuCtxGetDevice afterwards (the profiler must not make a context current)");
}

void NoContextWorker() {
  pthread_barrier_wait(&g_barrier);
  planted_thread_noctx_vmm();
  planted_thread_noctx_alloc();
}

int main(int argc, char** argv) {
  Init(argc, argv, "app_threads");
  NoPeaks();
  CheckRc(cudaSetDevice(0), 0, "cudaSetDevice(0)");
  g_create = reinterpret_cast<PFN_cuMemCreate>(EntryPoint("cuMemCreate"));
  g_release = reinterpret_cast<PFN_cuMemRelease>(EntryPoint("cuMemRelease"));
  g_alloc = reinterpret_cast<PFN_cuMemAlloc_v2>(EntryPoint("cuMemAlloc"));
  g_ctx_get_device = reinterpret_cast<CUresult (*)(CUdevice*)>(EntryPoint("cuCtxGetDevice"));

  StepBegin(0);
  StageBegin("threads");
  pthread_barrier_init(&g_barrier, nullptr, kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(Worker, t);
  threads.emplace_back(NoContextWorker);
  for (std::thread& th : threads) th.join();
  StageEnd("threads");
  StepEnd(0);
  Finish();
  return 0;
}

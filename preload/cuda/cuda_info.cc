// Device counters at a step end: one DEV_INFO record with what the driver
// reports for the current device (free/total, and the default memory pool's
// reserved/used bytes once a stream-ordered allocation was seen), and the
// step's device-resident peak for the online alert.
//
// Never initialises CUDA: nothing happens before the program's own first
// device allocation, and the driver is asked only from a thread that has a
// current context (a time-window step ends in memstep's writer thread, which
// has none; asking the runtime there would create a context on device 0).

#include "preload/cuda/cuda.h"
#include "preload/cuda/cuda_internal.h"
#include "preload/host/recorder.h"
#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

namespace cuda {
namespace {

struct DevInfo {
  int device;
  uint64_t free, total, pool_reserved, pool_used;
};

// Through the driver, only from a thread with a current context (never
// creates one: a time-window step ends in memstep's writer thread).
bool DriverInfo(DevInfo* d) {
  auto get_current = reinterpret_cast<CUresult (*)(void**)>(DrHelper(kSym_cuCtxGetCurrent));
  auto mem_info = reinterpret_cast<CUresult (*)(size_t*, size_t*)>(DrHelper(kSym_cuMemGetInfo_v2));
  if (get_current == nullptr || mem_info == nullptr) return false;
  void* ctx = nullptr;
  if (get_current(&ctx) != 0 || ctx == nullptr) return false;
  d->device = DriverDevice();
  size_t free = 0, total = 0;
  if (mem_info(&free, &total) != 0) return false;
  d->free = free;
  d->total = total;
  auto get_pool =
      reinterpret_cast<CUresult (*)(void**, int)>(DrHelper(kSym_cuDeviceGetDefaultMemPool));
  auto get_attr =
      reinterpret_cast<CUresult (*)(void*, int, void*)>(DrHelper(kSym_cuMemPoolGetAttribute));
  void* pool = nullptr;
  if (PoolSeen() && get_pool != nullptr && get_attr != nullptr && d->device >= 0 &&
      get_pool(&pool, d->device) == 0) {
    get_attr(pool, kPoolAttrReservedMemCurrent, &d->pool_reserved);
    get_attr(pool, kPoolAttrUsedMemCurrent, &d->pool_used);
  }
  return true;
}

// Without libcuda.so.1 (a runtime that does not load it: test doubles):
// through the runtime this thread used.
bool RuntimeInfo(DevInfo* d) {
  int major = ThreadRuntimeMajor();
  if (major == 0) return false;
  auto get_device = reinterpret_cast<cudaError_t (*)(int*)>(RtReal(major, kSym_cudaGetDevice));
  auto mem_info =
      reinterpret_cast<cudaError_t (*)(size_t*, size_t*)>(RtReal(major, kSym_cudaMemGetInfo));
  if (get_device == nullptr || mem_info == nullptr || get_device(&d->device) != 0) return false;
  size_t free = 0, total = 0;
  if (mem_info(&free, &total) != 0) return false;
  d->free = free;
  d->total = total;
  auto get_pool = reinterpret_cast<cudaError_t (*)(void**, int)>(
      RtReal(major, kSym_cudaDeviceGetDefaultMemPool));
  auto get_attr = reinterpret_cast<cudaError_t (*)(void*, int, void*)>(
      RtReal(major, kSym_cudaMemPoolGetAttribute));
  void* pool = nullptr;
  if (PoolSeen() && get_pool != nullptr && get_attr != nullptr && get_pool(&pool, d->device) == 0) {
    get_attr(pool, kPoolAttrReservedMemCurrent, &d->pool_reserved);
    get_attr(pool, kPoolAttrUsedMemCurrent, &d->pool_used);
  }
  return true;
}

void EmitDevInfo(ThreadState& t, uint64_t step, const DevInfo& d) {
  uint8_t buf[fmt::kMaxEncodedSize<fmt::DevInfoRecord>];
  fmt::DevInfoRecord rec;
  rec.ts = NowRel();
  rec.seq = NextSeq();
  rec.step = step;
  rec.device = d.device;
  rec.free = d.free;
  rec.total = d.total;
  rec.pool_reserved = d.pool_reserved;
  rec.pool_used = d.pool_used;
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
}

}  // namespace
}  // namespace cuda

namespace {
std::atomic<uint64_t> g_last_step_peak{0};
}  // namespace

void CudaStepEnd(ThreadState& t, uint64_t step) {
  using namespace cuda;  // NOLINT
  if (!DeviceSeen()) {   // also a fork child, whose parent's peaks are not its own
    g_last_step_peak.store(0, std::memory_order_relaxed);
    return;
  }
  g_last_step_peak.store(CloseStepPeak(), std::memory_order_relaxed);
  if (!Recording()) return;
  DevInfo d = {-1, 0, 0, 0, 0};
  bool have = DriverLoaded() ? DriverInfo(&d) : RuntimeInfo(&d);
  if (have) {
    EnsureThread(t);
    EmitDevInfo(t, step, d);
    CoverageStepEnd();  // non-default pools and graph memory (cuda_coverage.cc)
  }
}

uint64_t CudaLastStepPeak() { return g_last_step_peak.load(std::memory_order_relaxed); }

bool CudaMemInfo(ThreadState& t, int* device, uint64_t* free, uint64_t* total) {
  using namespace cuda;                      // NOLINT
  if (!DeviceSeen() || t.own) return false;  // never initialise CUDA; not the writer thread
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  DevInfo d = {-1, 0, 0, 0, 0};
  if (!(DriverLoaded() ? DriverInfo(&d) : RuntimeInfo(&d))) return false;
  *device = d.device;
  *free = d.free;
  *total = d.total;
  return true;
}

}  // namespace memstep::preload

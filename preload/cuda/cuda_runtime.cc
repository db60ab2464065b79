// CUDA runtime API (libcudart) wrappers.
//
// Each wrapped function is exported twice, once per libcudart major, as
// name@@libcudart.so.13 and name@libcudart.so.12 (memstep.map defines the two
// version nodes): a program linked against either runtime binds the wrapper of
// its own major (its references are versioned), which calls the real function
// of that major (RtReal). An unversioned reference binds the .13 default.
// The same implementations serve pointers handed out by dlsym/dlvsym (slot
// wrappers, cuda_dl.cc), e.g. XLA's cudart stub.
//
// Counting: a driver wrapper reached inside the real call records the
// operation itself (the lowest layer that fired); otherwise the runtime
// wrapper records it. cudaGetDriverEntryPoint[ByVersion][_ptsz] record
// nothing: they swap in driver wrappers for the cuMem* names they return.

#include "preload/cuda/cuda_internal.h"
#include "preload/host/runtime.h"
#include "src/format/format.h"

namespace memstep::preload::cuda {
namespace {

namespace fmt = ::memstep::format;

template <typename Fn>
Fn Real(const Target& tg) {
  return reinterpret_cast<Fn>(tg.real);
}

// After a real allocation call (marks taken before it): records it unless a
// driver wrapper inside already did.
void AfterAlloc(const Target& tg, const LayerMark& m, cudaError_t r, uint64_t addr, uint64_t size,
                uint8_t kind, uint8_t api, uint64_t aux) {
  const bool host = kind == fmt::kDevPinnedHost;
  if (r == kCudaSuccess) {
    if (addr == 0 || LowerRecordedAlloc(m, addr)) return;
    RecordAlloc(kind, host ? -1 : RuntimeDevice(tg), addr, size, api, aux);
    return;
  }
  if (LowerRecordedFail(m)) return;
  // cudaGetDevice after a failure: where the runtime works it succeeds (and
  // leaves the last error alone); without a driver it fails with the same 35.
  RecordFail(kind, host ? -1 : RuntimeDevice(tg), size, api, r);
}

// Shared shape of the simple allocators: (void** p, size_t n, extra...).
template <typename... Extra>
cudaError_t AllocPtr(const Target& tg, uint8_t kind, uint8_t api, uint64_t aux, void** p, size_t n,
                     Extra... extra) {
  auto real = Real<cudaError_t (*)(void**, size_t, Extra...)>(tg);
  if (!Active()) return real(p, n, extra...);
  NoteRuntimeThread(tg.major);
  LayerMark m = Mark();
  cudaError_t r = real(p, n, extra...);
  AfterAlloc(tg, m, r, r == kCudaSuccess ? reinterpret_cast<uintptr_t>(*p) : 0, n, kind, api, aux);
  return r;
}

template <typename... Extra>
cudaError_t FreePtr(const Target& tg, uint8_t api, void* p, Extra... extra) {
  auto real = Real<cudaError_t (*)(void*, Extra...)>(tg);
  if (!Active() || p == nullptr) return real(p, extra...);
  PendingFree f;
  PendingFree* saved;
  BeginRuntimeFree(reinterpret_cast<uintptr_t>(p), &f, &saved);
  cudaError_t r = real(p, extra...);
  EndRuntimeFree(&f, saved, r == kCudaSuccess, api);
  return r;
}

cudaError_t Malloc(const Target& tg, void** p, size_t n) {
  return AllocPtr(tg, fmt::kDevDevice, fmt::kApiCudaMalloc, 0, p, n);
}
cudaError_t Free(const Target& tg, void* p) { return FreePtr(tg, fmt::kApiCudaFree, p); }
cudaError_t MallocManaged(const Target& tg, void** p, size_t n, unsigned flags) {
  return AllocPtr(tg, fmt::kDevManaged, fmt::kApiCudaMallocManaged, 0, p, n, flags);
}
cudaError_t MallocHost(const Target& tg, void** p, size_t n) {
  return AllocPtr(tg, fmt::kDevPinnedHost, fmt::kApiCudaMallocHost, 0, p, n);
}
cudaError_t HostAlloc(const Target& tg, void** p, size_t n, unsigned flags) {
  return AllocPtr(tg, fmt::kDevPinnedHost, fmt::kApiCudaHostAlloc, 0, p, n, flags);
}
cudaError_t FreeHost(const Target& tg, void* p) { return FreePtr(tg, fmt::kApiCudaFreeHost, p); }
cudaError_t MallocAsync(const Target& tg, void** p, size_t n, void* stream) {
  return AllocPtr(tg, fmt::kDevPool, fmt::kApiCudaMallocAsync, 0, p, n, stream);
}
cudaError_t FreeAsync(const Target& tg, void* p, void* stream) {
  return FreePtr(tg, fmt::kApiCudaFreeAsync, p, stream);
}
cudaError_t MallocFromPoolAsync(const Target& tg, void** p, size_t n, void* pool, void* stream) {
  cudaError_t r = AllocPtr(tg, fmt::kDevPool, fmt::kApiCudaMallocFromPoolAsync,
                           reinterpret_cast<uintptr_t>(pool), p, n, pool, stream);
  if (r == kCudaSuccess && Active()) PoolSeenHandle(reinterpret_cast<uintptr_t>(pool), -1);
  return r;
}

cudaError_t MallocPitch(const Target& tg, void** p, size_t* pitch, size_t width, size_t height) {
  auto real = Real<cudaError_t (*)(void**, size_t*, size_t, size_t)>(tg);
  if (!Active()) return real(p, pitch, width, height);
  NoteRuntimeThread(tg.major);
  LayerMark m = Mark();
  cudaError_t r = real(p, pitch, width, height);
  bool ok = r == kCudaSuccess;
  AfterAlloc(tg, m, r, ok ? reinterpret_cast<uintptr_t>(*p) : 0,
             ok ? uint64_t{*pitch} * height : uint64_t{width} * height, fmt::kDevDevice,
             fmt::kApiCudaMallocPitch, 0);
  return r;
}

cudaError_t Malloc3D(const Target& tg, cudaPitchedPtr* pp, cudaExtent extent) {
  auto real = Real<cudaError_t (*)(cudaPitchedPtr*, cudaExtent)>(tg);
  if (!Active()) return real(pp, extent);
  NoteRuntimeThread(tg.major);
  LayerMark m = Mark();
  cudaError_t r = real(pp, extent);
  bool ok = r == kCudaSuccess;
  uint64_t rows = uint64_t{extent.height} * extent.depth;
  AfterAlloc(tg, m, r, ok ? reinterpret_cast<uintptr_t>(pp->ptr) : 0,
             ok ? uint64_t{pp->pitch} * rows : uint64_t{extent.width} * rows, fmt::kDevDevice,
             fmt::kApiCudaMalloc3D, 0);
  return r;
}

// ---- issue 10 coverage: registered host memory, arrays, IPC, pools, graphs ----

// cudaHostRegister pins memory the program already has: pinned_host, never
// device; its bytes are also in the host heap or mappings.
cudaError_t HostRegister(const Target& tg, void* p, size_t n, unsigned flags) {
  auto real = Real<cudaError_t (*)(void*, size_t, unsigned)>(tg);
  if (!Active()) return real(p, n, flags);
  NoteRuntimeThread(tg.major);
  LayerMark m = Mark();
  cudaError_t r = real(p, n, flags);
  AfterAlloc(tg, m, r, reinterpret_cast<uintptr_t>(p), n, fmt::kDevPinnedHost,
             fmt::kApiCudaHostRegister, 0);
  return r;
}
cudaError_t HostUnregister(const Target& tg, void* p) {
  return FreePtr(tg, fmt::kApiCudaHostUnregister, p);
}

// Arrays: `addr` is the cudaArray_t handle, the size an estimate (ArrayBytes).
template <typename... Args>
cudaError_t ArrayAlloc(const Target& tg, uint8_t api, uint64_t size, void** out, Args... args) {
  auto real = Real<cudaError_t (*)(void**, Args...)>(tg);
  if (!Active()) return real(out, args...);
  NoteRuntimeThread(tg.major);
  LayerMark m = Mark();
  cudaError_t r = real(out, args...);
  AfterAlloc(tg, m, r, r == kCudaSuccess ? reinterpret_cast<uintptr_t>(*out) : 0, size,
             fmt::kDevDevice, api, 0);
  return r;
}
cudaError_t MallocArray(const Target& tg, void** a, const cudaChannelFormatDesc* d, size_t w,
                        size_t h, unsigned f) {
  return ArrayAlloc(tg, fmt::kApiCudaMallocArray, ArrayBytes(ChannelBytes(d), w, h, 0, 1), a, d, w,
                    h, f);
}
cudaError_t Malloc3DArray(const Target& tg, void** a, const cudaChannelFormatDesc* d, cudaExtent e,
                          unsigned f) {
  return ArrayAlloc(tg, fmt::kApiCudaMalloc3DArray,
                    ArrayBytes(ChannelBytes(d), e.width, e.height, e.depth, 1), a, d, e, f);
}
cudaError_t MallocMipmappedArray(const Target& tg, void** a, const cudaChannelFormatDesc* d,
                                 cudaExtent e, unsigned levels, unsigned f) {
  return ArrayAlloc(tg, fmt::kApiCudaMallocMipmappedArray,
                    ArrayBytes(ChannelBytes(d), e.width, e.height, e.depth, levels), a, d, e,
                    levels, f);
}
cudaError_t FreeArray(const Target& tg, void* a) { return FreePtr(tg, fmt::kApiCudaFreeArray, a); }
cudaError_t FreeMipmappedArray(const Target& tg, void* a) {
  return FreePtr(tg, fmt::kApiCudaFreeMipmappedArray, a);
}

cudaError_t IpcOpenMemHandle(const Target& tg, void** p, IpcMemHandle handle, unsigned flags) {
  auto real = Real<cudaError_t (*)(void**, IpcMemHandle, unsigned)>(tg);
  if (!Active()) return real(p, handle, flags);
  NoteRuntimeThread(tg.major);
  uint32_t mark = IpcMark();
  LayerMark m = Mark();
  cudaError_t r = real(p, handle, flags);
  if (r == kCudaSuccess) {
    if (IpcMark() == mark) {  // no driver wrapper inside counted it
      IpcOpened(RuntimeDevice(tg), reinterpret_cast<uintptr_t>(*p), fmt::kApiCudaIpcOpenMemHandle);
    }
  } else if (!LowerRecordedFail(m)) {
    RecordFail(fmt::kDevDevice, RuntimeDevice(tg), 0, fmt::kApiCudaIpcOpenMemHandle, r);
  }
  return r;
}

cudaError_t IpcCloseMemHandle(const Target& tg, void* p) {
  auto real = Real<cudaError_t (*)(void*)>(tg);
  if (!Active() || p == nullptr) return real(p);
  const uint64_t addr = reinterpret_cast<uintptr_t>(p);
  IpcClose c;
  IpcBeginClose(addr, &c);
  PendingFree f;
  PendingFree* saved = nullptr;
  if (c.last) BeginRuntimeFree(addr, &f, &saved);
  const IpcClose* outer = SetIpcRuntimeClose(&c);
  cudaError_t r = real(p);
  SetIpcRuntimeClose(outer);
  if (c.last) EndRuntimeFree(&f, saved, r == kCudaSuccess, fmt::kApiCudaIpcCloseMemHandle);
  IpcEndClose(c, r == kCudaSuccess);
  return r;
}

// Pools: remembered so that their reserved/used bytes are read at step ends.
cudaError_t MemPoolCreate(const Target& tg, void** pool, const MemPoolProps* props) {
  cudaError_t r = Real<cudaError_t (*)(void**, const MemPoolProps*)>(tg)(pool, props);
  if (r == kCudaSuccess && Active()) {
    NoteRuntimeThread(tg.major);
    PoolSeenHandle(
        reinterpret_cast<uintptr_t>(*pool),
        props != nullptr && props->location.type == kMemLocationDevice ? props->location.id : -1);
  }
  return r;
}
cudaError_t MemPoolDestroy(const Target& tg, void* pool) {
  cudaError_t r = Real<cudaError_t (*)(void*)>(tg)(pool);
  if (r == kCudaSuccess) PoolGone(reinterpret_cast<uintptr_t>(pool));
  return r;
}
cudaError_t MemPoolTrimTo(const Target& tg, void* pool, size_t keep) {
  cudaError_t r = Real<cudaError_t (*)(void*, size_t)>(tg)(pool, keep);
  if (r == kCudaSuccess && Active()) {
    NoteRuntimeThread(tg.major);
    EmitPoolCounters(reinterpret_cast<uintptr_t>(pool), static_cast<int64_t>(keep));
  }
  return r;
}
// A release threshold: recorded, so that a pool that keeps freed memory up
// to its threshold (caching) reads differently from a leak.
cudaError_t MemPoolSetAttribute(const Target& tg, void* pool, int attr, void* value) {
  cudaError_t r = Real<cudaError_t (*)(void*, int, void*)>(tg)(pool, attr, value);
  if (r == kCudaSuccess && attr == kPoolAttrReleaseThreshold && value != nullptr && Active()) {
    NoteRuntimeThread(tg.major);
    uint64_t threshold;
    __builtin_memcpy(&threshold, value, sizeof threshold);
    PoolThresholdSet(reinterpret_cast<uintptr_t>(pool), threshold);
  }
  return r;
}

// Graph memory nodes: the node's virtual range, a logical pool allocation
// (aux = the graph) from the node's creation until a free node or a free
// call; the physical memory is the device's graph reserve (step-end counters).
cudaError_t GraphAddMemAllocNode(const Target& tg, void** node, void* graph, void* const* deps,
                                 size_t n, MemAllocNodeParams* params) {
  auto real = Real<cudaError_t (*)(void**, void*, void* const*, size_t, MemAllocNodeParams*)>(tg);
  if (!Active() || params == nullptr) return real(node, graph, deps, n, params);
  NoteRuntimeThread(tg.major);
  LayerMark m = Mark();
  cudaError_t r = real(node, graph, deps, n, params);
  const CUmemLocation& loc = params->pool_props.location;
  const int dev = loc.type == kMemLocationDevice ? loc.id : -1;
  if (r == kCudaSuccess) {
    GraphMemSeen(dev);
    if (params->dptr != 0 && !LowerRecordedAlloc(m, params->dptr)) {
      RecordAlloc(fmt::kDevPool, dev, params->dptr, params->bytesize,
                  fmt::kApiCudaGraphAddMemAllocNode, reinterpret_cast<uintptr_t>(graph));
    }
  } else if (!LowerRecordedFail(m)) {
    RecordFail(fmt::kDevPool, dev, params->bytesize, fmt::kApiCudaGraphAddMemAllocNode, r);
  }
  return r;
}

cudaError_t GraphAddMemFreeNode(const Target& tg, void** node, void* graph, void* const* deps,
                                size_t n, void* dptr) {
  auto real = Real<cudaError_t (*)(void**, void*, void* const*, size_t, void*)>(tg);
  if (!Active() || dptr == nullptr) return real(node, graph, deps, n, dptr);
  PendingFree f;
  PendingFree* saved;
  BeginRuntimeFree(reinterpret_cast<uintptr_t>(dptr), &f, &saved);
  cudaError_t r = real(node, graph, deps, n, dptr);
  EndRuntimeFree(&f, saved, r == kCudaSuccess, fmt::kApiCudaGraphAddMemFreeNode);
  return r;
}

cudaError_t DeviceGraphMemTrim(const Target& tg, int device) {
  cudaError_t r = Real<cudaError_t (*)(int)>(tg)(device);
  if (r == kCudaSuccess && Active()) {
    NoteRuntimeThread(tg.major);
    GraphMemSeen(device);
    EmitGraphCounters(device);
  }
  return r;
}

// cudaGetDriverEntryPoint[_ptsz] looks names up at the runtime's own CUDA
// version, which it does not tell: the major's first version classifies the
// name (the ABIs memstep wraps are the same from 12.0 to 13.0; a later 13.x
// that changed one would need a ByVersion-style check here).
cudaError_t GetDriverEntryPoint(const Target& tg, const char* symbol, void** fn, cuuint64_t flags,
                                int* status) {
  auto real = Real<cudaError_t (*)(const char*, void**, cuuint64_t, int*)>(tg);
  cudaError_t r = real(symbol, fn, flags, status);
  if (r == kCudaSuccess) {
    WrapLookup(symbol, fn, tg.major >= 12 ? tg.major * 1000 : 12000, nullptr, nullptr);
  }
  return r;
}

struct ByVersionLookup {
  void* real;
  const char* symbol;
  cuuint64_t flags;
};

void* ByVersionAgain(const void* ctx, int version) {
  const auto* l = static_cast<const ByVersionLookup*>(ctx);
  auto real =
      reinterpret_cast<cudaError_t (*)(const char*, void**, unsigned, cuuint64_t, int*)>(l->real);
  void* p = nullptr;
  int status = 0;
  return real(l->symbol, &p, static_cast<unsigned>(version), l->flags, &status) == kCudaSuccess
             ? p
             : nullptr;
}

cudaError_t GetDriverEntryPointByVersion(const Target& tg, const char* symbol, void** fn,
                                         unsigned version, cuuint64_t flags, int* status) {
  auto real = Real<cudaError_t (*)(const char*, void**, unsigned, cuuint64_t, int*)>(tg);
  cudaError_t r = real(symbol, fn, version, flags, status);
  if (r == kCudaSuccess) {
    ByVersionLookup again = {tg.real, symbol, flags};
    WrapLookup(symbol, fn, static_cast<int>(version), ByVersionAgain, &again);
  }
  return r;
}

// ---- slot wrappers: X(abi, impl, params, args) ----
#define MEMSTEP_RT_COVERAGE_ABIS(X)                                                              \
  X(kRtHostRegister, HostRegister, (void* p, size_t n, unsigned f), (p, n, f))                   \
  X(kRtHostUnregister, HostUnregister, (void* p), (p))                                           \
  X(kRtMallocArray, MallocArray,                                                                 \
    (void** a, const cudaChannelFormatDesc* d, size_t w, size_t h, unsigned f), (a, d, w, h, f)) \
  X(kRtMalloc3DArray, Malloc3DArray,                                                             \
    (void** a, const cudaChannelFormatDesc* d, cudaExtent e, unsigned f), (a, d, e, f))          \
  X(kRtMallocMipmappedArray, MallocMipmappedArray,                                               \
    (void** a, const cudaChannelFormatDesc* d, cudaExtent e, unsigned l, unsigned f),            \
    (a, d, e, l, f))                                                                             \
  X(kRtFreeArray, FreeArray, (void* a), (a))                                                     \
  X(kRtFreeMipmappedArray, FreeMipmappedArray, (void* a), (a))                                   \
  X(kRtIpcOpenMemHandle, IpcOpenMemHandle, (void** p, IpcMemHandle h, unsigned f), (p, h, f))    \
  X(kRtIpcCloseMemHandle, IpcCloseMemHandle, (void* p), (p))                                     \
  X(kRtMemPoolCreate, MemPoolCreate, (void** pool, const MemPoolProps* props), (pool, props))    \
  X(kRtMemPoolDestroy, MemPoolDestroy, (void* pool), (pool))                                     \
  X(kRtMemPoolTrimTo, MemPoolTrimTo, (void* pool, size_t keep), (pool, keep))                    \
  X(kRtGraphAddMemAllocNode, GraphAddMemAllocNode,                                               \
    (void** node, void* g, void* const* deps, size_t n, MemAllocNodeParams* params),             \
    (node, g, deps, n, params))                                                                  \
  X(kRtGraphAddMemFreeNode, GraphAddMemFreeNode,                                                 \
    (void** node, void* g, void* const* deps, size_t n, void* dptr), (node, g, deps, n, dptr))   \
  X(kRtDeviceGraphMemTrim, DeviceGraphMemTrim, (int device), (device))                           \
  X(kRtMemPoolSetAttribute, MemPoolSetAttribute, (void* pool, int attr, void* value),            \
    (pool, attr, value))
#define MEMSTEP_RT_ABIS(X)                                                                        \
  X(kRtMalloc, Malloc, (void** p, size_t n), (p, n))                                              \
  X(kRtFree, Free, (void* p), (p))                                                                \
  X(kRtMallocManaged, MallocManaged, (void** p, size_t n, unsigned f), (p, n, f))                 \
  X(kRtMallocHost, MallocHost, (void** p, size_t n), (p, n))                                      \
  X(kRtHostAlloc, HostAlloc, (void** p, size_t n, unsigned f), (p, n, f))                         \
  X(kRtFreeHost, FreeHost, (void* p), (p))                                                        \
  X(kRtMallocPitch, MallocPitch, (void** p, size_t* pitch, size_t w, size_t h), (p, pitch, w, h)) \
  X(kRtMalloc3D, Malloc3D, (cudaPitchedPtr * pp, cudaExtent e), (pp, e))                          \
  X(kRtMallocAsync, MallocAsync, (void** p, size_t n, void* s), (p, n, s))                        \
  X(kRtFreeAsync, FreeAsync, (void* p, void* s), (p, s))                                          \
  X(kRtMallocFromPoolAsync, MallocFromPoolAsync, (void** p, size_t n, void* pool, void* s),       \
    (p, n, pool, s))                                                                              \
  X(kRtGetDriverEntryPoint, GetDriverEntryPoint,                                                  \
    (const char* sym, void** fn, cuuint64_t f, int* st), (sym, fn, f, st))                        \
  X(kRtGetDriverEntryPointByVersion, GetDriverEntryPointByVersion,                                \
    (const char* sym, void** fn, unsigned v, cuuint64_t f, int* st), (sym, fn, v, f, st))         \
  MEMSTEP_RT_COVERAGE_ABIS(X)

#define MEMSTEP_RT_SLOT(abi, impl, params, args) \
  MEMSTEP_CUDA_SLOTS(cudaError_t, abi, impl, params, args)
MEMSTEP_RT_ABIS(MEMSTEP_RT_SLOT)
#undef MEMSTEP_RT_SLOT
static_assert(kSlots == 8, "the slot tables above list 8 wrappers");

}  // namespace

void* RuntimeSlotWrapper(int abi, int s) {
  switch (abi) {
    MEMSTEP_RT_ABIS(MEMSTEP_CUDA_SLOT_CASE)
    default:
      return nullptr;
  }
}

}  // namespace memstep::preload::cuda

// ---- the exported wrappers, one per major ----
using namespace memstep::preload::cuda;  // NOLINT: the C ABI

#define MEMSTEP_RT_EXPORT_MAJOR(major, name, impl, params, args) \
  MEMSTEP_EXPORT cudaError_t ms_rt##major##_##name params {      \
    Target tg = {RtReal(major, kSym_##name), nullptr, major};    \
    if (tg.real == nullptr) return kCudaErrorInsufficientDriver; \
    return impl(tg, MEMSTEP_UNPAREN args);                       \
  }
#define MEMSTEP_RT_EXPORT(name, impl, params, args)                 \
  MEMSTEP_RT_EXPORT_MAJOR(13, name, impl, params, args)             \
  MEMSTEP_RT_EXPORT_MAJOR(12, name, impl, params, args)             \
  __asm__(".symver ms_rt13_" #name ", " #name "@@libcudart.so.13"); \
  __asm__(".symver ms_rt12_" #name ", " #name "@libcudart.so.12");

MEMSTEP_RT_EXPORT(cudaMalloc, Malloc, (void** p, size_t n), (p, n))
MEMSTEP_RT_EXPORT(cudaFree, Free, (void* p), (p))
MEMSTEP_RT_EXPORT(cudaMallocManaged, MallocManaged, (void** p, size_t n, unsigned f), (p, n, f))
MEMSTEP_RT_EXPORT(cudaMallocHost, MallocHost, (void** p, size_t n), (p, n))
MEMSTEP_RT_EXPORT(cudaHostAlloc, HostAlloc, (void** p, size_t n, unsigned f), (p, n, f))
MEMSTEP_RT_EXPORT(cudaFreeHost, FreeHost, (void* p), (p))
MEMSTEP_RT_EXPORT(cudaMallocPitch, MallocPitch, (void** p, size_t* pitch, size_t w, size_t h),
                  (p, pitch, w, h))
MEMSTEP_RT_EXPORT(cudaMalloc3D, Malloc3D, (cudaPitchedPtr * pp, cudaExtent e), (pp, e))
MEMSTEP_RT_EXPORT(cudaMallocAsync, MallocAsync, (void** p, size_t n, void* s), (p, n, s))
MEMSTEP_RT_EXPORT(cudaMallocAsync_ptsz, MallocAsync, (void** p, size_t n, void* s), (p, n, s))
MEMSTEP_RT_EXPORT(cudaFreeAsync, FreeAsync, (void* p, void* s), (p, s))
MEMSTEP_RT_EXPORT(cudaFreeAsync_ptsz, FreeAsync, (void* p, void* s), (p, s))
MEMSTEP_RT_EXPORT(cudaMallocFromPoolAsync, MallocFromPoolAsync,
                  (void** p, size_t n, void* pool, void* s), (p, n, pool, s))
MEMSTEP_RT_EXPORT(cudaMallocFromPoolAsync_ptsz, MallocFromPoolAsync,
                  (void** p, size_t n, void* pool, void* s), (p, n, pool, s))
MEMSTEP_RT_EXPORT(cudaGetDriverEntryPoint, GetDriverEntryPoint,
                  (const char* sym, void** fn, cuuint64_t f, int* st), (sym, fn, f, st))
MEMSTEP_RT_EXPORT(cudaGetDriverEntryPoint_ptsz, GetDriverEntryPoint,
                  (const char* sym, void** fn, cuuint64_t f, int* st), (sym, fn, f, st))
MEMSTEP_RT_EXPORT(cudaGetDriverEntryPointByVersion, GetDriverEntryPointByVersion,
                  (const char* sym, void** fn, unsigned v, cuuint64_t f, int* st),
                  (sym, fn, v, f, st))
MEMSTEP_RT_EXPORT(cudaGetDriverEntryPointByVersion_ptsz, GetDriverEntryPointByVersion,
                  (const char* sym, void** fn, unsigned v, cuuint64_t f, int* st),
                  (sym, fn, v, f, st))

// Issue 10 coverage: registered host memory, arrays, IPC, pools, graph memory nodes.
// Each exported name is "cuda" + the implementation's name.
#define MEMSTEP_RT_EXPORT_COVERAGE(abi, impl, params, args) \
  MEMSTEP_RT_EXPORT(cuda##impl, impl, params, args)
MEMSTEP_RT_COVERAGE_ABIS(MEMSTEP_RT_EXPORT_COVERAGE)

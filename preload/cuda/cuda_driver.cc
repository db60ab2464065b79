// CUDA driver API (libcuda.so.1) wrappers and the cuGetProcAddress chain.
//
// Programs reach driver functions three ways (research/cuda-interception.md
// section 2.2), and each is caught here:
//  - PLT calls of `-lcuda` programs bind the unversioned exports below
//    (libcuda has no symbol versions); each calls the next definition
//    (DrReal).
//  - dlsym/dlvsym(handle, "cuMemAlloc_v2"...) get a slot wrapper (cuda_dl.cc).
//  - cuGetProcAddress[_v2] (how libcudart, PyTorch through
//    cudaGetDriverEntryPoint*, NCCL and static cudart reach the driver): the
//    real lookup runs FIRST, then the pointer it returned is replaced by a
//    slot wrapper, only for the (name, version) whose ABI memstep implements
//    (ClassifyProc); unknown names and older ABIs pass through untouched, and
//    a returned cuGetProcAddress is wrapped too, so the chain continues.
//
// Accounting: cuMemAlloc/Pitch (device), cuMemAllocManaged (managed),
// cuMemAllocHost/cuMemHostAlloc (pinned host), cuMemAllocAsync/FromPoolAsync
// (pool, logical), cuMemCreate (VMM physical memory, addr = the handle,
// device from prop->location, never from the current context), freed after
// cuMemRelease AND its last cuMemUnmap. cuMemMap only counts mappings;
// cuMemAddressReserve/Free reserve address space and are not wrapped.

#include <string.h>

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

uint64_t AsAddr(CUdeviceptr d) { return d; }
uint64_t AsAddr(void* p) { return reinterpret_cast<uintptr_t>(p); }

void AfterAlloc(CUresult r, uint64_t addr, uint64_t size, uint8_t kind, uint8_t api, uint64_t aux) {
  const bool host = kind == fmt::kDevPinnedHost;
  if (r == 0) {
    if (addr != 0) RecordAlloc(kind, host ? -1 : DriverDevice(), addr, size, api, aux);
    return;
  }
  RecordFail(kind, host ? -1 : DriverDevice(), size, api, r);
}

// (CUdeviceptr* or void**, size_t, extra...)
template <typename Out, typename... Extra>
CUresult AllocOut(const Target& tg, uint8_t kind, uint8_t api, uint64_t aux, Out* out, size_t n,
                  Extra... extra) {
  auto real = Real<CUresult (*)(Out*, size_t, Extra...)>(tg);
  if (!Active()) return real(out, n, extra...);
  CUresult r = real(out, n, extra...);
  AfterAlloc(r, r == 0 ? AsAddr(*out) : 0, n, kind, api, aux);
  return r;
}

template <typename Ptr, typename... Extra>
CUresult FreeOut(const Target& tg, uint8_t api, Ptr p, Extra... extra) {
  auto real = Real<CUresult (*)(Ptr, Extra...)>(tg);
  if (!Active() || p == 0) return real(p, extra...);
  PendingFree f;
  BeginDriverFree(AsAddr(p), &f);
  CUresult r = real(p, extra...);
  EndDriverFree(&f, r == 0, api);
  return r;
}

CUresult MemAlloc(const Target& tg, CUdeviceptr* d, size_t n) {
  return AllocOut(tg, fmt::kDevDevice, fmt::kApiCuMemAlloc, 0, d, n);
}
CUresult MemFree(const Target& tg, CUdeviceptr d) { return FreeOut(tg, fmt::kApiCuMemFree, d); }
CUresult MemAllocManaged(const Target& tg, CUdeviceptr* d, size_t n, unsigned flags) {
  return AllocOut(tg, fmt::kDevManaged, fmt::kApiCuMemAllocManaged, 0, d, n, flags);
}
CUresult MemAllocHost(const Target& tg, void** p, size_t n) {
  return AllocOut(tg, fmt::kDevPinnedHost, fmt::kApiCuMemAllocHost, 0, p, n);
}
CUresult MemHostAlloc(const Target& tg, void** p, size_t n, unsigned flags) {
  return AllocOut(tg, fmt::kDevPinnedHost, fmt::kApiCuMemHostAlloc, 0, p, n, flags);
}
CUresult MemFreeHost(const Target& tg, void* p) { return FreeOut(tg, fmt::kApiCuMemFreeHost, p); }
CUresult MemAllocAsync(const Target& tg, CUdeviceptr* d, size_t n, void* stream) {
  return AllocOut(tg, fmt::kDevPool, fmt::kApiCuMemAllocAsync, 0, d, n, stream);
}
CUresult MemFreeAsync(const Target& tg, CUdeviceptr d, void* stream) {
  return FreeOut(tg, fmt::kApiCuMemFreeAsync, d, stream);
}
CUresult MemAllocFromPoolAsync(const Target& tg, CUdeviceptr* d, size_t n, void* pool,
                               void* stream) {
  CUresult r = AllocOut(tg, fmt::kDevPool, fmt::kApiCuMemAllocFromPoolAsync,
                        reinterpret_cast<uintptr_t>(pool), d, n, pool, stream);
  if (r == 0 && Active()) PoolSeenHandle(reinterpret_cast<uintptr_t>(pool), -1);
  return r;
}

CUresult MemAllocPitch(const Target& tg, CUdeviceptr* d, size_t* pitch, size_t width, size_t height,
                       unsigned element) {
  auto real = Real<CUresult (*)(CUdeviceptr*, size_t*, size_t, size_t, unsigned)>(tg);
  if (!Active()) return real(d, pitch, width, height, element);
  CUresult r = real(d, pitch, width, height, element);
  bool ok = r == 0;
  AfterAlloc(r, ok ? *d : 0, ok ? uint64_t{*pitch} * height : uint64_t{width} * height,
             fmt::kDevDevice, fmt::kApiCuMemAllocPitch, 0);
  return r;
}

// ---- VMM ----
int PropDevice(const CUmemAllocationProp* prop) {
  return prop != nullptr && prop->location.type == kMemLocationDevice ? prop->location.id : -1;
}

CUresult MemCreate(const Target& tg, CUmemHandle* handle, size_t size,
                   const CUmemAllocationProp* prop, cuuint64_t flags) {
  auto real = Real<CUresult (*)(CUmemHandle*, size_t, const CUmemAllocationProp*, cuuint64_t)>(tg);
  if (!Active()) return real(handle, size, prop, flags);
  CUresult r = real(handle, size, prop, flags);
  if (r == 0) {
    VmmCreated(*handle, size, PropDevice(prop));
  } else {
    RecordFail(fmt::kDevVmm, PropDevice(prop), size, fmt::kApiCuMemCreate, r);
  }
  return r;
}

CUresult MemRelease(const Target& tg, CUmemHandle handle) {
  auto real = Real<CUresult (*)(CUmemHandle)>(tg);
  if (!Active()) return real(handle);
  VmmUndo u;
  VmmBeginRelease(handle, &u);
  CUresult r = real(handle);
  VmmEnd(&u, r == 0, fmt::kApiCuMemRelease);
  if (r == 0) MulticastReleased(handle);  // multicast objects are released here too
  return r;
}

// The device of a VMM handle as the driver describes it (-1 unknown): for an
// imported handle (its exporter chose the location) and bound memory.
int HandleDevice(CUmemHandle handle) {
  auto props = reinterpret_cast<CUresult (*)(CUmemAllocationProp*, CUmemHandle)>(
      DrHelper(kSym_cuMemGetAllocationPropertiesFromHandle));
  CUmemAllocationProp prop{};
  return props != nullptr && props(&prop, handle) == 0 ? PropDevice(&prop) : -1;
}

constexpr int kHandleTypePosixFd = 1;  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR

// Another process's VMM memory (NCCL's peer buffers with cuMem): counted for
// this process once per handle (cuda_account.cc): at the import when the
// export registry knows its size (its exporter ran under memstep in the same
// run), else at its first mapping.
CUresult MemImportFromShareableHandle(const Target& tg, CUmemHandle* handle, void* os_handle,
                                      int type) {
  auto real = Real<CUresult (*)(CUmemHandle*, void*, int)>(tg);
  if (!Active()) return real(handle, os_handle, type);
  CUresult r = real(handle, os_handle, type);
  if (r == 0 && handle != nullptr) {
    uint64_t size = 0;
    int exported_device = -1;
    bool own = false;
    if (type == kHandleTypePosixFd &&
        !ExportLookup(static_cast<int>(reinterpret_cast<intptr_t>(os_handle)), &size,
                      &exported_device, &own)) {
      size = 0;
    }
    int device = HandleDevice(*handle);
    if (device < 0) device = exported_device;
    VmmImported(*handle, device, size, own);
  }
  return r;
}

// The exporting side: lists a POSIX descriptor export in the run's registry
// (cuda_coverage.cc), so that an importer in the run learns the size.
CUresult MemExportToShareableHandle(const Target& tg, void* os_handle, CUmemHandle handle, int type,
                                    unsigned long long flags) {
  CUresult r = Real<CUresult (*)(void*, CUmemHandle, int, unsigned long long)>(tg)(
      os_handle, handle, type, flags);
  if (r == 0 && os_handle != nullptr && type == kHandleTypePosixFd && Active()) {
    int fd;
    memcpy(&fd, os_handle, sizeof fd);
    VmmExported(handle, fd);
  }
  return r;
}

// Multicast objects: their memory is the device memory bound to them
// (allocated, and counted, by cuMemCreate); the object and its bindings are
// COUNTER records (cuda_coverage.cc).
CUresult MulticastCreate(const Target& tg, CUmemHandle* mc, const MulticastProp* prop) {
  CUresult r = Real<CUresult (*)(CUmemHandle*, const MulticastProp*)>(tg)(mc, prop);
  if (r == 0 && mc != nullptr && Active()) MulticastCreated(*mc, prop != nullptr ? prop->size : 0);
  return r;
}
CUresult MulticastBindMem(const Target& tg, CUmemHandle mc, size_t mc_offset, CUmemHandle mem,
                          size_t mem_offset, size_t size, cuuint64_t flags) {
  CUresult r = Real<CUresult (*)(CUmemHandle, size_t, CUmemHandle, size_t, size_t, cuuint64_t)>(tg)(
      mc, mc_offset, mem, mem_offset, size, flags);
  if (r == 0 && Active()) MulticastBound(mc, HandleDevice(mem), size);
  return r;
}
CUresult MulticastBindAddr(const Target& tg, CUmemHandle mc, size_t mc_offset, CUdeviceptr ptr,
                           size_t size, cuuint64_t flags) {
  CUresult r = Real<CUresult (*)(CUmemHandle, size_t, CUdeviceptr, size_t, cuuint64_t)>(tg)(
      mc, mc_offset, ptr, size, flags);
  if (r == 0 && Active()) MulticastBound(mc, DriverDevice(), size);
  return r;
}
CUresult MulticastUnbind(const Target& tg, CUmemHandle mc, int device, size_t mc_offset,
                         size_t size) {
  CUresult r =
      Real<CUresult (*)(CUmemHandle, int, size_t, size_t)>(tg)(mc, device, mc_offset, size);
  if (r == 0 && Active()) MulticastUnbound(mc, device, size);
  return r;
}

CUresult MemMap(const Target& tg, CUdeviceptr va, size_t size, size_t offset, CUmemHandle handle,
                cuuint64_t flags) {
  auto real = Real<CUresult (*)(CUdeviceptr, size_t, size_t, CUmemHandle, cuuint64_t)>(tg);
  if (!Active()) return real(va, size, offset, handle, flags);
  CUresult r = real(va, size, offset, handle, flags);
  if (r == 0) VmmMapped(va, size, offset, handle);
  return r;
}

CUresult MemUnmap(const Target& tg, CUdeviceptr va, size_t size) {
  auto real = Real<CUresult (*)(CUdeviceptr, size_t)>(tg);
  if (!Active()) return real(va, size);
  VmmUndo u;
  VmmBeginUnmap(va, size, &u);
  CUresult r = real(va, size);
  VmmEnd(&u, r == 0, fmt::kApiCuMemUnmap);
  return r;
}

// ---- issue 10 coverage: registered host memory, arrays, IPC, pools, graphs ----

CUresult MemHostRegister(const Target& tg, void* p, size_t n, unsigned flags) {
  auto real = Real<CUresult (*)(void*, size_t, unsigned)>(tg);
  if (!Active()) return real(p, n, flags);
  CUresult r = real(p, n, flags);
  AfterAlloc(r, AsAddr(p), n, fmt::kDevPinnedHost, fmt::kApiCuMemHostRegister, 0);
  return r;
}
CUresult MemHostUnregister(const Target& tg, void* p) {
  return FreeOut(tg, fmt::kApiCuMemHostUnregister, p);
}

// Arrays: `addr` is the CUarray / CUmipmappedArray handle, the size an estimate.
template <typename Desc, typename... Extra>
CUresult ArrayCreate(const Target& tg, uint8_t api, uint64_t size, void** out, const Desc* desc,
                     Extra... extra) {
  auto real = Real<CUresult (*)(void**, const Desc*, Extra...)>(tg);
  if (!Active()) return real(out, desc, extra...);
  CUresult r = real(out, desc, extra...);
  AfterAlloc(r, r == 0 ? AsAddr(*out) : 0, size, fmt::kDevDevice, api, 0);
  return r;
}
CUresult CuArrayCreate(const Target& tg, void** a, const CuArrayDesc* d) {
  uint64_t size = d == nullptr ? 0
                               : ArrayBytes(CuFormatBytes(d->format, d->num_channels), d->width,
                                            d->height, 0, 1);
  return ArrayCreate(tg, fmt::kApiCuArrayCreate, size, a, d);
}
CUresult CuArray3DCreate(const Target& tg, void** a, const CuArray3DDesc* d) {
  uint64_t size = d == nullptr ? 0
                               : ArrayBytes(CuFormatBytes(d->format, d->num_channels), d->width,
                                            d->height, d->depth, 1);
  return ArrayCreate(tg, fmt::kApiCuArray3DCreate, size, a, d);
}
CUresult CuMipmappedArrayCreate(const Target& tg, void** a, const CuArray3DDesc* d,
                                unsigned levels) {
  uint64_t size = d == nullptr ? 0
                               : ArrayBytes(CuFormatBytes(d->format, d->num_channels), d->width,
                                            d->height, d->depth, levels);
  return ArrayCreate(tg, fmt::kApiCuMipmappedArrayCreate, size, a, d, levels);
}
CUresult CuArrayDestroy(const Target& tg, void* a) {
  return FreeOut(tg, fmt::kApiCuArrayDestroy, a);
}
CUresult CuMipmappedArrayDestroy(const Target& tg, void* a) {
  return FreeOut(tg, fmt::kApiCuMipmappedArrayDestroy, a);
}

CUresult IpcOpenMemHandle(const Target& tg, CUdeviceptr* d, IpcMemHandle handle, unsigned flags) {
  auto real = Real<CUresult (*)(CUdeviceptr*, IpcMemHandle, unsigned)>(tg);
  if (!Active()) return real(d, handle, flags);
  CUresult r = real(d, handle, flags);
  if (r == 0) {
    IpcOpened(DriverDevice(), *d, fmt::kApiCuIpcOpenMemHandle);
  } else {
    RecordFail(fmt::kDevDevice, DriverDevice(), 0, fmt::kApiCuIpcOpenMemHandle, r);
  }
  return r;
}

CUresult IpcCloseMemHandle(const Target& tg, CUdeviceptr d) {
  auto real = Real<CUresult (*)(CUdeviceptr)>(tg);
  if (!Active() || d == 0) return real(d);
  const IpcClose* outer = IpcRuntimeClose(d);
  IpcClose c;
  if (outer != nullptr) {  // the runtime wrapper counted the reference
    c = *outer;
    c.known = false;  // ... and restores it if the call fails
  } else {
    IpcBeginClose(d, &c);
  }
  PendingFree f;
  if (c.last) BeginDriverFree(d, &f);  // takes a runtime pending free over
  CUresult r = real(d);
  if (c.last) EndDriverFree(&f, r == 0, fmt::kApiCuIpcCloseMemHandle);
  IpcEndClose(c, r == 0);
  return r;
}

CUresult MemPoolCreate(const Target& tg, void** pool, const MemPoolProps* props) {
  CUresult r = Real<CUresult (*)(void**, const MemPoolProps*)>(tg)(pool, props);
  if (r == 0 && Active()) {
    PoolSeenHandle(AsAddr(*pool), props != nullptr && props->location.type == kMemLocationDevice
                                      ? props->location.id
                                      : -1);
  }
  return r;
}
CUresult MemPoolDestroy(const Target& tg, void* pool) {
  CUresult r = Real<CUresult (*)(void*)>(tg)(pool);
  if (r == 0) PoolGone(AsAddr(pool));
  return r;
}
CUresult MemPoolTrimTo(const Target& tg, void* pool, size_t keep) {
  CUresult r = Real<CUresult (*)(void*, size_t)>(tg)(pool, keep);
  if (r == 0 && Active()) EmitPoolCounters(AsAddr(pool), static_cast<int64_t>(keep));
  return r;
}
CUresult MemPoolSetAttribute(const Target& tg, void* pool, int attr, void* value) {
  CUresult r = Real<CUresult (*)(void*, int, void*)>(tg)(pool, attr, value);
  if (r == 0 && attr == kPoolAttrReleaseThreshold && value != nullptr && Active()) {
    uint64_t threshold;
    __builtin_memcpy(&threshold, value, sizeof threshold);
    PoolThresholdSet(AsAddr(pool), threshold);
  }
  return r;
}

CUresult GraphAddMemAllocNode(const Target& tg, void** node, void* graph, void* const* deps,
                              size_t n, MemAllocNodeParams* params) {
  auto real = Real<CUresult (*)(void**, void*, void* const*, size_t, MemAllocNodeParams*)>(tg);
  if (!Active() || params == nullptr) return real(node, graph, deps, n, params);
  CUresult r = real(node, graph, deps, n, params);
  const CUmemLocation& loc = params->pool_props.location;
  const int dev = loc.type == kMemLocationDevice ? loc.id : -1;
  if (r == 0) {
    GraphMemSeen(dev);
    if (params->dptr != 0) {
      RecordAlloc(fmt::kDevPool, dev, params->dptr, params->bytesize,
                  fmt::kApiCuGraphAddMemAllocNode, AsAddr(graph));
    }
  } else {
    RecordFail(fmt::kDevPool, dev, params->bytesize, fmt::kApiCuGraphAddMemAllocNode, r);
  }
  return r;
}

CUresult GraphAddMemFreeNode(const Target& tg, void** node, void* graph, void* const* deps,
                             size_t n, CUdeviceptr dptr) {
  auto real = Real<CUresult (*)(void**, void*, void* const*, size_t, CUdeviceptr)>(tg);
  if (!Active() || dptr == 0) return real(node, graph, deps, n, dptr);
  PendingFree f;
  BeginDriverFree(dptr, &f);
  CUresult r = real(node, graph, deps, n, dptr);
  EndDriverFree(&f, r == 0, fmt::kApiCuGraphAddMemFreeNode);
  return r;
}

CUresult DeviceGraphMemTrim(const Target& tg, int device) {
  CUresult r = Real<CUresult (*)(int)>(tg)(device);
  if (r == 0 && Active()) {
    GraphMemSeen(device);
    EmitGraphCounters(device);
  }
  return r;
}

// ---- the cuGetProcAddress chain ----
struct GpaLookup {
  void* real;
  const char* symbol;
  cuuint64_t flags;
  bool v2;
};

void* GpaAgain(const void* ctx, int version) {
  const auto* l = static_cast<const GpaLookup*>(ctx);
  void* p = nullptr;
  CUresult r;
  if (l->v2) {
    int status = 0;
    r = reinterpret_cast<CUresult (*)(const char*, void**, int, cuuint64_t, int*)>(l->real)(
        l->symbol, &p, version, l->flags, &status);
  } else {
    r = reinterpret_cast<CUresult (*)(const char*, void**, int, cuuint64_t)>(l->real)(
        l->symbol, &p, version, l->flags);
  }
  return r == 0 ? p : nullptr;
}

CUresult GetProcAddress(const Target& tg, const char* symbol, void** pfn, int version,
                        cuuint64_t flags) {
  CUresult r =
      Real<CUresult (*)(const char*, void**, int, cuuint64_t)>(tg)(symbol, pfn, version, flags);
  if (r == 0) {
    GpaLookup again = {tg.real, symbol, flags, false};
    WrapLookup(symbol, pfn, version, GpaAgain, &again);
  }
  return r;
}

CUresult GetProcAddressV2(const Target& tg, const char* symbol, void** pfn, int version,
                          cuuint64_t flags, int* status) {
  CUresult r = Real<CUresult (*)(const char*, void**, int, cuuint64_t, int*)>(tg)(
      symbol, pfn, version, flags, status);
  if (r == 0) {
    GpaLookup again = {tg.real, symbol, flags, true};
    WrapLookup(symbol, pfn, version, GpaAgain, &again);
  }
  return r;
}

// Base names as cuGetProcAddress takes them, the first CUDA version of the
// ABI memstep implements (cudaTypedefs.h PFN_*_vNNNN), newest ABI first.
struct ProcAbi {
  const char* name;
  int since;
  uint8_t abi;
};
constexpr ProcAbi kProcAbis[] = {
    {"cuMemAlloc", 3020, kDrMemAlloc},
    {"cuMemFree", 3020, kDrMemFree},
    {"cuMemAllocPitch", 3020, kDrMemAllocPitch},
    {"cuMemAllocManaged", 6000, kDrMemAllocManaged},
    {"cuMemAllocHost", 3020, kDrMemAllocHost},
    {"cuMemHostAlloc", 2020, kDrMemHostAlloc},
    {"cuMemFreeHost", 2000, kDrMemFreeHost},
    {"cuMemCreate", 10020, kDrMemCreate},
    {"cuMemRelease", 10020, kDrMemRelease},
    {"cuMemMap", 10020, kDrMemMap},
    {"cuMemUnmap", 10020, kDrMemUnmap},
    {"cuMemAllocAsync", 11020, kDrMemAllocAsync},
    {"cuMemFreeAsync", 11020, kDrMemFreeAsync},
    {"cuMemAllocFromPoolAsync", 11020, kDrMemAllocFromPoolAsync},
    {"cuMemHostRegister", 6050, kDrMemHostRegister},
    {"cuMemHostUnregister", 4000, kDrMemHostUnregister},
    {"cuArrayCreate", 3020, kDrArrayCreate},
    {"cuArray3DCreate", 3020, kDrArray3DCreate},
    {"cuMipmappedArrayCreate", 5000, kDrMipmappedArrayCreate},
    {"cuArrayDestroy", 2000, kDrArrayDestroy},
    {"cuMipmappedArrayDestroy", 5000, kDrMipmappedArrayDestroy},
    {"cuIpcOpenMemHandle", 4010, kDrIpcOpenMemHandle},  // _v2 (11000) has the same ABI
    {"cuIpcCloseMemHandle", 4010, kDrIpcCloseMemHandle},
    {"cuMemPoolCreate", 11020, kDrMemPoolCreate},
    {"cuMemPoolDestroy", 11020, kDrMemPoolDestroy},
    {"cuMemPoolTrimTo", 11020, kDrMemPoolTrimTo},
    {"cuGraphAddMemAllocNode", 11040, kDrGraphAddMemAllocNode},
    {"cuGraphAddMemFreeNode", 11040, kDrGraphAddMemFreeNode},
    {"cuDeviceGraphMemTrim", 11040, kDrDeviceGraphMemTrim},
    {"cuMemImportFromShareableHandle", 10020, kDrMemImportFromShareableHandle},
    {"cuMulticastCreate", 12010, kDrMulticastCreate},
    {"cuMulticastBindMem", 12010, kDrMulticastBindMem},
    {"cuMulticastBindAddr", 12010, kDrMulticastBindAddr},
    {"cuMulticastUnbind", 12010, kDrMulticastUnbind},
    {"cuMemPoolSetAttribute", 11020, kDrMemPoolSetAttribute},
    {"cuMemExportToShareableHandle", 10020, kDrMemExportToShareableHandle},
    {"cuGetProcAddress", 12000, kDrGetProcAddressV2},
    {"cuGetProcAddress", 11030, kDrGetProcAddress},
};

bool SameName(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) ++a, ++b;
  return *a == *b;
}

// ---- slot wrappers: X(abi, impl, params, args) ----
// Issue 10 coverage (their exports are listed at the end).
#define MEMSTEP_DR_COVERAGE_ABIS(X)                                                           \
  X(kDrMemHostRegister, MemHostRegister, (void* p, size_t n, unsigned f), (p, n, f))          \
  X(kDrMemHostUnregister, MemHostUnregister, (void* p), (p))                                  \
  X(kDrArrayCreate, CuArrayCreate, (void** a, const CuArrayDesc* d), (a, d))                  \
  X(kDrArray3DCreate, CuArray3DCreate, (void** a, const CuArray3DDesc* d), (a, d))            \
  X(kDrMipmappedArrayCreate, CuMipmappedArrayCreate,                                          \
    (void** a, const CuArray3DDesc* d, unsigned l), (a, d, l))                                \
  X(kDrArrayDestroy, CuArrayDestroy, (void* a), (a))                                          \
  X(kDrMipmappedArrayDestroy, CuMipmappedArrayDestroy, (void* a), (a))                        \
  X(kDrIpcOpenMemHandle, IpcOpenMemHandle, (CUdeviceptr * d, IpcMemHandle h, unsigned f),     \
    (d, h, f))                                                                                \
  X(kDrIpcCloseMemHandle, IpcCloseMemHandle, (CUdeviceptr d), (d))                            \
  X(kDrMemPoolCreate, MemPoolCreate, (void** pool, const MemPoolProps* props), (pool, props)) \
  X(kDrMemPoolDestroy, MemPoolDestroy, (void* pool), (pool))                                  \
  X(kDrMemPoolTrimTo, MemPoolTrimTo, (void* pool, size_t keep), (pool, keep))                 \
  X(kDrGraphAddMemAllocNode, GraphAddMemAllocNode,                                            \
    (void** node, void* g, void* const* deps, size_t n, MemAllocNodeParams* params),          \
    (node, g, deps, n, params))                                                               \
  X(kDrGraphAddMemFreeNode, GraphAddMemFreeNode,                                              \
    (void** node, void* g, void* const* deps, size_t n, CUdeviceptr dptr),                    \
    (node, g, deps, n, dptr))                                                                 \
  X(kDrDeviceGraphMemTrim, DeviceGraphMemTrim, (int device), (device))                        \
  X(kDrMemImportFromShareableHandle, MemImportFromShareableHandle,                            \
    (CUmemHandle * h, void* os, int type), (h, os, type))                                     \
  X(kDrMulticastCreate, MulticastCreate, (CUmemHandle * mc, const MulticastProp* prop),       \
    (mc, prop))                                                                               \
  X(kDrMulticastBindMem, MulticastBindMem,                                                    \
    (CUmemHandle mc, size_t mco, CUmemHandle mem, size_t memo, size_t n, cuuint64_t f),       \
    (mc, mco, mem, memo, n, f))                                                               \
  X(kDrMulticastBindAddr, MulticastBindAddr,                                                  \
    (CUmemHandle mc, size_t mco, CUdeviceptr p, size_t n, cuuint64_t f), (mc, mco, p, n, f))  \
  X(kDrMulticastUnbind, MulticastUnbind, (CUmemHandle mc, int dev, size_t mco, size_t n),     \
    (mc, dev, mco, n))                                                                        \
  X(kDrMemPoolSetAttribute, MemPoolSetAttribute, (void* pool, int attr, void* value),         \
    (pool, attr, value))                                                                      \
  X(kDrMemExportToShareableHandle, MemExportToShareableHandle,                                \
    (void* os, CUmemHandle h, int type, unsigned long long f), (os, h, type, f))
#define MEMSTEP_DR_ABIS(X)                                                                       \
  X(kDrMemAlloc, MemAlloc, (CUdeviceptr * d, size_t n), (d, n))                                  \
  X(kDrMemFree, MemFree, (CUdeviceptr d), (d))                                                   \
  X(kDrMemAllocPitch, MemAllocPitch,                                                             \
    (CUdeviceptr * d, size_t * pitch, size_t w, size_t h, unsigned e), (d, pitch, w, h, e))      \
  X(kDrMemAllocManaged, MemAllocManaged, (CUdeviceptr * d, size_t n, unsigned f), (d, n, f))     \
  X(kDrMemAllocHost, MemAllocHost, (void** p, size_t n), (p, n))                                 \
  X(kDrMemHostAlloc, MemHostAlloc, (void** p, size_t n, unsigned f), (p, n, f))                  \
  X(kDrMemFreeHost, MemFreeHost, (void* p), (p))                                                 \
  X(kDrMemCreate, MemCreate,                                                                     \
    (CUmemHandle * h, size_t n, const CUmemAllocationProp* prop, cuuint64_t f), (h, n, prop, f)) \
  X(kDrMemRelease, MemRelease, (CUmemHandle h), (h))                                             \
  X(kDrMemMap, MemMap, (CUdeviceptr va, size_t n, size_t off, CUmemHandle h, cuuint64_t f),      \
    (va, n, off, h, f))                                                                          \
  X(kDrMemUnmap, MemUnmap, (CUdeviceptr va, size_t n), (va, n))                                  \
  X(kDrMemAllocAsync, MemAllocAsync, (CUdeviceptr * d, size_t n, void* s), (d, n, s))            \
  X(kDrMemFreeAsync, MemFreeAsync, (CUdeviceptr d, void* s), (d, s))                             \
  X(kDrMemAllocFromPoolAsync, MemAllocFromPoolAsync,                                             \
    (CUdeviceptr * d, size_t n, void* pool, void* s), (d, n, pool, s))                           \
  X(kDrGetProcAddress, GetProcAddress, (const char* sym, void** pfn, int v, cuuint64_t f),       \
    (sym, pfn, v, f))                                                                            \
  X(kDrGetProcAddressV2, GetProcAddressV2,                                                       \
    (const char* sym, void** pfn, int v, cuuint64_t f, int* st), (sym, pfn, v, f, st))           \
  MEMSTEP_DR_COVERAGE_ABIS(X)

#define MEMSTEP_DR_SLOT(abi, impl, params, args) \
  MEMSTEP_CUDA_SLOTS(CUresult, abi, impl, params, args)
MEMSTEP_DR_ABIS(MEMSTEP_DR_SLOT)
#undef MEMSTEP_DR_SLOT
static_assert(kSlots == 8, "the slot tables above list 8 wrappers");

}  // namespace

void* DriverSlotWrapper(int abi, int s) {
  switch (abi) {
    MEMSTEP_DR_ABIS(MEMSTEP_CUDA_SLOT_CASE)
    default:
      return nullptr;
  }
}

int ClassifyProc(const char* symbol, int version, int* abi_version) {
  for (const ProcAbi& p : kProcAbis) {
    if (SameName(p.name, symbol) && version >= p.since) {
      *abi_version = p.since;
      return p.abi;
    }
  }
  return kAbiNone;
}

void WrapLookup(const char* symbol, void** pfn, int version, LookupAgainFn again, const void* ctx) {
  if (symbol == nullptr || pfn == nullptr || *pfn == nullptr ||
      g_state.load(std::memory_order_relaxed) == kDisabled) {
    return;
  }
  int abi_version = 0;
  int abi = ClassifyProc(symbol, version, &abi_version);
  if (abi == kAbiNone) return;
  if (version > kNewestKnownVersion) {
    // A newer version may return a function with another ABI: wrap only if
    // it is the very function the known version gives.
    if (again == nullptr || again(ctx, abi_version) != *pfn) return;
  }
  *pfn = WrapPointer(abi, *pfn, nullptr, 0);
}

}  // namespace memstep::preload::cuda

// ---- exported driver functions (PLT-linked -lcuda programs) ----
using namespace memstep::preload::cuda;  // NOLINT: the C ABI

#define MEMSTEP_DR_EXPORT(name, impl, params, args)     \
  MEMSTEP_EXPORT CUresult name params {                 \
    Target tg = {DrReal(kSym_##name), nullptr, 0};      \
    if (tg.real == nullptr) return kCuErrorStubLibrary; \
    return impl(tg, MEMSTEP_UNPAREN args);              \
  }

MEMSTEP_DR_EXPORT(cuMemAlloc_v2, MemAlloc, (CUdeviceptr * d, size_t n), (d, n))
MEMSTEP_DR_EXPORT(cuMemFree_v2, MemFree, (CUdeviceptr d), (d))
MEMSTEP_DR_EXPORT(cuMemAllocPitch_v2, MemAllocPitch,
                  (CUdeviceptr * d, size_t* pitch, size_t w, size_t h, unsigned e),
                  (d, pitch, w, h, e))
MEMSTEP_DR_EXPORT(cuMemAllocManaged, MemAllocManaged, (CUdeviceptr * d, size_t n, unsigned f),
                  (d, n, f))
MEMSTEP_DR_EXPORT(cuMemAllocHost_v2, MemAllocHost, (void** p, size_t n), (p, n))
MEMSTEP_DR_EXPORT(cuMemHostAlloc, MemHostAlloc, (void** p, size_t n, unsigned f), (p, n, f))
MEMSTEP_DR_EXPORT(cuMemFreeHost, MemFreeHost, (void* p), (p))
MEMSTEP_DR_EXPORT(cuMemCreate, MemCreate,
                  (CUmemHandle * h, size_t n, const CUmemAllocationProp* prop, cuuint64_t f),
                  (h, n, prop, f))
MEMSTEP_DR_EXPORT(cuMemRelease, MemRelease, (CUmemHandle h), (h))
MEMSTEP_DR_EXPORT(cuMemMap, MemMap,
                  (CUdeviceptr va, size_t n, size_t off, CUmemHandle h, cuuint64_t f),
                  (va, n, off, h, f))
MEMSTEP_DR_EXPORT(cuMemUnmap, MemUnmap, (CUdeviceptr va, size_t n), (va, n))
MEMSTEP_DR_EXPORT(cuMemAllocAsync, MemAllocAsync, (CUdeviceptr * d, size_t n, void* s), (d, n, s))
MEMSTEP_DR_EXPORT(cuMemAllocAsync_ptsz, MemAllocAsync, (CUdeviceptr * d, size_t n, void* s),
                  (d, n, s))
MEMSTEP_DR_EXPORT(cuMemFreeAsync, MemFreeAsync, (CUdeviceptr d, void* s), (d, s))
MEMSTEP_DR_EXPORT(cuMemFreeAsync_ptsz, MemFreeAsync, (CUdeviceptr d, void* s), (d, s))
MEMSTEP_DR_EXPORT(cuMemAllocFromPoolAsync, MemAllocFromPoolAsync,
                  (CUdeviceptr * d, size_t n, void* pool, void* s), (d, n, pool, s))
MEMSTEP_DR_EXPORT(cuMemAllocFromPoolAsync_ptsz, MemAllocFromPoolAsync,
                  (CUdeviceptr * d, size_t n, void* pool, void* s), (d, n, pool, s))
MEMSTEP_DR_EXPORT(cuGetProcAddress, GetProcAddress,
                  (const char* sym, void** pfn, int v, cuuint64_t f), (sym, pfn, v, f))
MEMSTEP_DR_EXPORT(cuGetProcAddress_v2, GetProcAddressV2,
                  (const char* sym, void** pfn, int v, cuuint64_t f, int* st), (sym, pfn, v, f, st))

// Issue 10 coverage.
MEMSTEP_DR_EXPORT(cuMemHostRegister_v2, MemHostRegister, (void* p, size_t n, unsigned f), (p, n, f))
MEMSTEP_DR_EXPORT(cuMemHostUnregister, MemHostUnregister, (void* p), (p))
MEMSTEP_DR_EXPORT(cuArrayCreate_v2, CuArrayCreate, (void** a, const CuArrayDesc* d), (a, d))
MEMSTEP_DR_EXPORT(cuArray3DCreate_v2, CuArray3DCreate, (void** a, const CuArray3DDesc* d), (a, d))
MEMSTEP_DR_EXPORT(cuMipmappedArrayCreate, CuMipmappedArrayCreate,
                  (void** a, const CuArray3DDesc* d, unsigned l), (a, d, l))
MEMSTEP_DR_EXPORT(cuArrayDestroy, CuArrayDestroy, (void* a), (a))
MEMSTEP_DR_EXPORT(cuMipmappedArrayDestroy, CuMipmappedArrayDestroy, (void* a), (a))
MEMSTEP_DR_EXPORT(cuIpcOpenMemHandle_v2, IpcOpenMemHandle,
                  (CUdeviceptr * d, IpcMemHandle h, unsigned f), (d, h, f))
MEMSTEP_DR_EXPORT(cuIpcOpenMemHandle, IpcOpenMemHandle,
                  (CUdeviceptr * d, IpcMemHandle h, unsigned f), (d, h, f))
MEMSTEP_DR_EXPORT(cuIpcCloseMemHandle, IpcCloseMemHandle, (CUdeviceptr d), (d))
MEMSTEP_DR_EXPORT(cuMemPoolCreate, MemPoolCreate, (void** pool, const MemPoolProps* props),
                  (pool, props))
MEMSTEP_DR_EXPORT(cuMemPoolDestroy, MemPoolDestroy, (void* pool), (pool))
MEMSTEP_DR_EXPORT(cuMemPoolTrimTo, MemPoolTrimTo, (void* pool, size_t keep), (pool, keep))
MEMSTEP_DR_EXPORT(cuGraphAddMemAllocNode, GraphAddMemAllocNode,
                  (void** node, void* g, void* const* deps, size_t n, MemAllocNodeParams* params),
                  (node, g, deps, n, params))
MEMSTEP_DR_EXPORT(cuGraphAddMemFreeNode, GraphAddMemFreeNode,
                  (void** node, void* g, void* const* deps, size_t n, CUdeviceptr dptr),
                  (node, g, deps, n, dptr))
MEMSTEP_DR_EXPORT(cuDeviceGraphMemTrim, DeviceGraphMemTrim, (int device), (device))
MEMSTEP_DR_EXPORT(cuMemImportFromShareableHandle, MemImportFromShareableHandle,
                  (CUmemHandle * h, void* os, int type), (h, os, type))
MEMSTEP_DR_EXPORT(cuMulticastCreate, MulticastCreate, (CUmemHandle * mc, const MulticastProp* prop),
                  (mc, prop))
MEMSTEP_DR_EXPORT(cuMulticastBindMem, MulticastBindMem,
                  (CUmemHandle mc, size_t mco, CUmemHandle mem, size_t memo, size_t n,
                   cuuint64_t f),
                  (mc, mco, mem, memo, n, f))
MEMSTEP_DR_EXPORT(cuMulticastBindAddr, MulticastBindAddr,
                  (CUmemHandle mc, size_t mco, CUdeviceptr p, size_t n, cuuint64_t f),
                  (mc, mco, p, n, f))
MEMSTEP_DR_EXPORT(cuMulticastUnbind, MulticastUnbind,
                  (CUmemHandle mc, int dev, size_t mco, size_t n), (mc, dev, mco, n))
MEMSTEP_DR_EXPORT(cuMemPoolSetAttribute, MemPoolSetAttribute, (void* pool, int attr, void* value),
                  (pool, attr, value))
MEMSTEP_DR_EXPORT(cuMemExportToShareableHandle, MemExportToShareableHandle,
                  (void* os, CUmemHandle h, int type, unsigned long long f), (os, h, type, f))

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
  return AllocOut(tg, fmt::kDevPool, fmt::kApiCuMemAllocFromPoolAsync,
                  reinterpret_cast<uintptr_t>(pool), d, n, pool, stream);
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
  return r;
}

CUresult MemMap(const Target& tg, CUdeviceptr va, size_t size, size_t offset, CUmemHandle handle,
                cuuint64_t flags) {
  auto real = Real<CUresult (*)(CUdeviceptr, size_t, size_t, CUmemHandle, cuuint64_t)>(tg);
  if (!Active()) return real(va, size, offset, handle, flags);
  CUresult r = real(va, size, offset, handle, flags);
  if (r == 0) VmmMapped(va, size, handle);
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
    {"cuGetProcAddress", 12000, kDrGetProcAddressV2},
    {"cuGetProcAddress", 11030, kDrGetProcAddress},
};

bool SameName(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) ++a, ++b;
  return *a == *b;
}

// ---- slot wrappers: X(abi, impl, params, args) ----
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
    (const char* sym, void** pfn, int v, cuuint64_t f, int* st), (sym, pfn, v, f, st))

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

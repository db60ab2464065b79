// Internals of the CUDA interception (cuda_*.cc), shared by its files:
//   cuda_dl.cc       the dlsym/dlvsym override, finding real functions, wrapper slots
//   cuda_account.cc  accounting tables, counters, DEV_* records, VMM, fork
//   cuda_info.cc     step-end device counters (DEV_INFO), the step's device peak
//   cuda_runtime.cc  libcudart wrappers (one per major: 12 and 13) and their slots
//   cuda_driver.cc   libcuda wrappers, the cuGetProcAddress chain and their slots
// docs/gpu.md explains the design; research/cuda-interception.md has the facts.
//
// Contract (every function here):
//  - No CUDA headers and no link-time CUDA dependency: the few ABI types below
//    are restated from cuda.h / cuda_runtime_api.h (toolkit 13.0), and every
//    real function is found at run time.
//  - Never allocates from the hooked heap (tables come from RawMmap), never
//    blocks: the address tables use short spinlocks (leaves: no other memstep
//    lock is taken while one is held), everything on the call path of a
//    wrapper that does not record is a few atomic loads.
//  - Errors and out-parameters pass through unchanged: a wrapper reads an
//    out-parameter only after the real call succeeded, writes one only to
//    swap a function pointer it was asked to look up, and never initialises
//    CUDA itself (device queries only after the program's own successful
//    allocation, or from a thread that has a current context).

#ifndef MEMSTEP_PRELOAD_CUDA_INTERNAL_H_
#define MEMSTEP_PRELOAD_CUDA_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "preload/core/base.h"

namespace memstep::preload::cuda {

// ---- ABI (cuda.h, driver_types.h, cuda_runtime_api.h) ----
using CUresult = int;
using cudaError_t = int;
// unsigned long long in the headers: the same 64-bit integer in the LP64 ABIs
// (x86-64, aarch64).
using CUdeviceptr = uint64_t;
using CUmemHandle = uint64_t;  // CUmemGenericAllocationHandle
using cuuint64_t = uint64_t;
struct CUmemLocation {
  int type;  // CU_MEM_LOCATION_TYPE_DEVICE = 1
  int id;
};
struct CUmemAllocationProp {
  int type;
  int requested_handle_types;
  CUmemLocation location;
  void* win32_handle_meta_data;
  unsigned char alloc_flags[8];
};
struct cudaPitchedPtr {
  void* ptr;
  size_t pitch;
  size_t xsize;
  size_t ysize;
};
struct cudaExtent {
  size_t width;
  size_t height;
  size_t depth;
};
// CUmulticastObjectProp (cuda.h, CUDA 12.1 to 13.0).
struct MulticastProp {
  unsigned num_devices;
  size_t size;  // per device: the most memory each device can bind
  unsigned long long handle_types;
  unsigned long long flags;
};
static_assert(sizeof(MulticastProp) == 32, "CUmulticastObjectProp is 32 bytes");
struct cudaChannelFormatDesc {
  int x, y, z, w;  // bits per channel
  int f;           // cudaChannelFormatKind
};
// CUDA_ARRAY_DESCRIPTOR_v2 and CUDA_ARRAY3D_DESCRIPTOR_v2.
struct CuArrayDesc {
  size_t width;
  size_t height;
  int format;  // CUarray_format
  unsigned num_channels;
};
struct CuArray3DDesc {
  size_t width;
  size_t height;
  size_t depth;
  int format;
  unsigned num_channels;
  unsigned flags;
};
// cudaIpcMemHandle_t / CUipcMemHandle: 64 opaque bytes, passed by value.
struct IpcMemHandle {
  char reserved[64];
};
// cudaMemPoolProps / CUmemPoolProps (88 bytes in CUDA 11.2 to 13.0).
struct MemPoolProps {
  int alloc_type;
  int handle_types;
  CUmemLocation location;
  void* win32_security_attributes;
  size_t max_size;
  unsigned short usage;
  unsigned char reserved[54];
};
// cudaMemAllocNodeParams / CUDA_MEM_ALLOC_NODE_PARAMS_v1: dptr is written.
struct MemAllocNodeParams {
  MemPoolProps pool_props;
  const void* access_descs;
  size_t access_desc_count;
  size_t bytesize;
  uint64_t dptr;  // void* (runtime) or CUdeviceptr (driver): 64 bits either way
};
static_assert(sizeof(MemPoolProps) == 88, "cudaMemPoolProps is 88 bytes");
static_assert(sizeof(MemAllocNodeParams) == 120, "cudaMemAllocNodeParams is 120 bytes");
static_assert(sizeof(IpcMemHandle) == 64, "cudaIpcMemHandle_t is 64 bytes");
inline constexpr int kCudaSuccess = 0;
inline constexpr int kCudaErrorMemoryAllocation = 2;     // = CUDA_ERROR_OUT_OF_MEMORY
inline constexpr int kCudaErrorInsufficientDriver = 35;  // what cudart returns without a driver
inline constexpr int kCuErrorStubLibrary = 34;           // the driver library is missing
inline constexpr int kMemLocationDevice = 1;
inline constexpr int kPoolAttrReleaseThreshold = 4;  // CU_MEMPOOL_ATTR_ / cudaMemPoolAttr
inline constexpr int kPoolAttrReservedMemCurrent = 5;
inline constexpr int kPoolAttrUsedMemCurrent = 7;
inline constexpr int kGraphMemAttrUsedMemCurrent = 0;  // cudaGraphMemAttributeType
inline constexpr int kGraphMemAttrReservedMemCurrent = 2;
// Newest CUDA version whose entry-point ABIs we have read (toolkit 13.0).
// Lookups for newer versions are wrapped only if they return the same
// function as the version whose ABI the wrapper implements.
inline constexpr int kNewestKnownVersion = 13000;

#define MEMSTEP_UNPAREN(...) __VA_ARGS__

// ---- ABIs memstep wraps: one wrapper implementation each ----
enum Abi : uint8_t {
  kRtMalloc,
  kRtFree,
  kRtMallocManaged,
  kRtMallocHost,
  kRtHostAlloc,
  kRtFreeHost,
  kRtMallocPitch,
  kRtMalloc3D,
  kRtMallocAsync,  // also _ptsz (same ABI, another real function)
  kRtFreeAsync,
  kRtMallocFromPoolAsync,
  kRtGetDriverEntryPoint,
  kRtGetDriverEntryPointByVersion,
  kRtHostRegister,
  kRtHostUnregister,
  kRtMallocArray,
  kRtMalloc3DArray,
  kRtMallocMipmappedArray,
  kRtFreeArray,
  kRtFreeMipmappedArray,
  kRtIpcOpenMemHandle,
  kRtIpcCloseMemHandle,
  kRtMemPoolCreate,
  kRtMemPoolDestroy,
  kRtMemPoolTrimTo,
  kRtGraphAddMemAllocNode,
  kRtGraphAddMemFreeNode,
  kRtDeviceGraphMemTrim,
  kRtMemPoolSetAttribute,
  kDrMemAlloc,       // cuMemAlloc_v2
  kDrMemFree,        // cuMemFree_v2
  kDrMemAllocPitch,  // cuMemAllocPitch_v2
  kDrMemAllocManaged,
  kDrMemAllocHost,  // cuMemAllocHost_v2
  kDrMemHostAlloc,
  kDrMemFreeHost,
  kDrMemCreate,
  kDrMemRelease,
  kDrMemMap,
  kDrMemUnmap,
  kDrMemAllocAsync,  // also _ptsz
  kDrMemFreeAsync,
  kDrMemAllocFromPoolAsync,
  kDrGetProcAddress,    // the CUDA 11.3 ABI (4 parameters)
  kDrGetProcAddressV2,  // cuGetProcAddress_v2 (5 parameters)
  kDrMemHostRegister,   // cuMemHostRegister_v2
  kDrMemHostUnregister,
  kDrArrayCreate,    // cuArrayCreate_v2
  kDrArray3DCreate,  // cuArray3DCreate_v2
  kDrMipmappedArrayCreate,
  kDrArrayDestroy,
  kDrMipmappedArrayDestroy,
  kDrIpcOpenMemHandle,  // cuIpcOpenMemHandle_v2 (and the 4010 ABI, the same)
  kDrIpcCloseMemHandle,
  kDrMemPoolCreate,
  kDrMemPoolDestroy,
  kDrMemPoolTrimTo,
  kDrGraphAddMemAllocNode,
  kDrGraphAddMemFreeNode,
  kDrDeviceGraphMemTrim,
  kDrMemImportFromShareableHandle,
  kDrMulticastCreate,
  kDrMulticastBindMem,
  kDrMulticastBindAddr,
  kDrMulticastUnbind,
  kDrMemPoolSetAttribute,
  kDrMemExportToShareableHandle,
  kAbiCount,
  kAbiNone = 0xFF,
};
inline bool IsRuntimeAbi(int abi) { return abi < kDrMemAlloc; }

// Exported names of libcudart that memstep wraps, then the helpers it only
// calls (X(name, abi)); the enum gives each an index.
#define MEMSTEP_CUDART_SYMBOLS(X)                                           \
  X(cudaMalloc, kRtMalloc)                                                  \
  X(cudaFree, kRtFree)                                                      \
  X(cudaMallocManaged, kRtMallocManaged)                                    \
  X(cudaMallocHost, kRtMallocHost)                                          \
  X(cudaHostAlloc, kRtHostAlloc)                                            \
  X(cudaFreeHost, kRtFreeHost)                                              \
  X(cudaMallocPitch, kRtMallocPitch)                                        \
  X(cudaMalloc3D, kRtMalloc3D)                                              \
  X(cudaMallocAsync, kRtMallocAsync)                                        \
  X(cudaMallocAsync_ptsz, kRtMallocAsync)                                   \
  X(cudaFreeAsync, kRtFreeAsync)                                            \
  X(cudaFreeAsync_ptsz, kRtFreeAsync)                                       \
  X(cudaMallocFromPoolAsync, kRtMallocFromPoolAsync)                        \
  X(cudaMallocFromPoolAsync_ptsz, kRtMallocFromPoolAsync)                   \
  X(cudaGetDriverEntryPoint, kRtGetDriverEntryPoint)                        \
  X(cudaGetDriverEntryPoint_ptsz, kRtGetDriverEntryPoint)                   \
  X(cudaGetDriverEntryPointByVersion, kRtGetDriverEntryPointByVersion)      \
  X(cudaGetDriverEntryPointByVersion_ptsz, kRtGetDriverEntryPointByVersion) \
  X(cudaHostRegister, kRtHostRegister)                                      \
  X(cudaHostUnregister, kRtHostUnregister)                                  \
  X(cudaMallocArray, kRtMallocArray)                                        \
  X(cudaMalloc3DArray, kRtMalloc3DArray)                                    \
  X(cudaMallocMipmappedArray, kRtMallocMipmappedArray)                      \
  X(cudaFreeArray, kRtFreeArray)                                            \
  X(cudaFreeMipmappedArray, kRtFreeMipmappedArray)                          \
  X(cudaIpcOpenMemHandle, kRtIpcOpenMemHandle)                              \
  X(cudaIpcCloseMemHandle, kRtIpcCloseMemHandle)                            \
  X(cudaMemPoolCreate, kRtMemPoolCreate)                                    \
  X(cudaMemPoolDestroy, kRtMemPoolDestroy)                                  \
  X(cudaMemPoolTrimTo, kRtMemPoolTrimTo)                                    \
  X(cudaGraphAddMemAllocNode, kRtGraphAddMemAllocNode)                      \
  X(cudaGraphAddMemFreeNode, kRtGraphAddMemFreeNode)                        \
  X(cudaDeviceGraphMemTrim, kRtDeviceGraphMemTrim)                          \
  X(cudaMemPoolSetAttribute, kRtMemPoolSetAttribute)
#define MEMSTEP_CUDART_HELPERS(X)          \
  X(cudaGetDevice, kAbiNone)               \
  X(cudaMemGetInfo, kAbiNone)              \
  X(cudaDeviceGetDefaultMemPool, kAbiNone) \
  X(cudaMemPoolGetAttribute, kAbiNone)     \
  X(cudaDeviceGetGraphMemAttribute, kAbiNone)

#define MEMSTEP_CUDA_DRIVER_SYMBOLS(X)                               \
  X(cuMemAlloc_v2, kDrMemAlloc)                                      \
  X(cuMemFree_v2, kDrMemFree)                                        \
  X(cuMemAllocPitch_v2, kDrMemAllocPitch)                            \
  X(cuMemAllocManaged, kDrMemAllocManaged)                           \
  X(cuMemAllocHost_v2, kDrMemAllocHost)                              \
  X(cuMemHostAlloc, kDrMemHostAlloc)                                 \
  X(cuMemFreeHost, kDrMemFreeHost)                                   \
  X(cuMemCreate, kDrMemCreate)                                       \
  X(cuMemRelease, kDrMemRelease)                                     \
  X(cuMemMap, kDrMemMap)                                             \
  X(cuMemUnmap, kDrMemUnmap)                                         \
  X(cuMemAllocAsync, kDrMemAllocAsync)                               \
  X(cuMemAllocAsync_ptsz, kDrMemAllocAsync)                          \
  X(cuMemFreeAsync, kDrMemFreeAsync)                                 \
  X(cuMemFreeAsync_ptsz, kDrMemFreeAsync)                            \
  X(cuMemAllocFromPoolAsync, kDrMemAllocFromPoolAsync)               \
  X(cuMemAllocFromPoolAsync_ptsz, kDrMemAllocFromPoolAsync)          \
  X(cuGetProcAddress, kDrGetProcAddress)                             \
  X(cuGetProcAddress_v2, kDrGetProcAddressV2)                        \
  X(cuMemHostRegister_v2, kDrMemHostRegister)                        \
  X(cuMemHostUnregister, kDrMemHostUnregister)                       \
  X(cuArrayCreate_v2, kDrArrayCreate)                                \
  X(cuArray3DCreate_v2, kDrArray3DCreate)                            \
  X(cuMipmappedArrayCreate, kDrMipmappedArrayCreate)                 \
  X(cuArrayDestroy, kDrArrayDestroy)                                 \
  X(cuMipmappedArrayDestroy, kDrMipmappedArrayDestroy)               \
  X(cuIpcOpenMemHandle_v2, kDrIpcOpenMemHandle)                      \
  X(cuIpcOpenMemHandle, kDrIpcOpenMemHandle)                         \
  X(cuIpcCloseMemHandle, kDrIpcCloseMemHandle)                       \
  X(cuMemPoolCreate, kDrMemPoolCreate)                               \
  X(cuMemPoolDestroy, kDrMemPoolDestroy)                             \
  X(cuMemPoolTrimTo, kDrMemPoolTrimTo)                               \
  X(cuGraphAddMemAllocNode, kDrGraphAddMemAllocNode)                 \
  X(cuGraphAddMemFreeNode, kDrGraphAddMemFreeNode)                   \
  X(cuDeviceGraphMemTrim, kDrDeviceGraphMemTrim)                     \
  X(cuMemImportFromShareableHandle, kDrMemImportFromShareableHandle) \
  X(cuMulticastCreate, kDrMulticastCreate)                           \
  X(cuMulticastBindMem, kDrMulticastBindMem)                         \
  X(cuMulticastBindAddr, kDrMulticastBindAddr)                       \
  X(cuMulticastUnbind, kDrMulticastUnbind)                           \
  X(cuMemPoolSetAttribute, kDrMemPoolSetAttribute)                   \
  X(cuMemExportToShareableHandle, kDrMemExportToShareableHandle)
#define MEMSTEP_CUDA_DRIVER_HELPERS(X)      \
  X(cuCtxGetCurrent, kAbiNone)              \
  X(cuCtxGetDevice, kAbiNone)               \
  X(cuMemGetInfo_v2, kAbiNone)              \
  X(cuDeviceGetDefaultMemPool, kAbiNone)    \
  X(cuMemPoolGetAttribute, kAbiNone)        \
  X(cuMemGetAddressRange_v2, kAbiNone)      \
  X(cuDeviceGetGraphMemAttribute, kAbiNone) \
  X(cuMemGetAllocationPropertiesFromHandle, kAbiNone)

#define MEMSTEP_CUDA_ENUM(name, abi) kSym_##name,
enum RtSym : int {
  MEMSTEP_CUDART_SYMBOLS(MEMSTEP_CUDA_ENUM) MEMSTEP_CUDART_HELPERS(MEMSTEP_CUDA_ENUM) kRtSymCount
};
enum DrSym : int {
  MEMSTEP_CUDA_DRIVER_SYMBOLS(MEMSTEP_CUDA_ENUM) MEMSTEP_CUDA_DRIVER_HELPERS(MEMSTEP_CUDA_ENUM)
      kDrSymCount
};
#undef MEMSTEP_CUDA_ENUM
inline constexpr int kRtHooked = kSym_cudaGetDevice;  // [0, kRtHooked) are wrapped
inline constexpr int kDrHooked = kSym_cuCtxGetCurrent;
extern const char* const kRtSymName[kRtSymCount];
extern const char* const kDrSymName[kDrSymCount];

// ---- real functions (cuda_dl.cc) ----
// The libcudart majors memstep has versioned wrappers for.
inline constexpr int kNumMajors = 2;  // index 0: libcudart.so.12, 1: libcudart.so.13
inline int MajorIndex(int major) { return major == 12 ? 0 : major == 13 ? 1 : -1; }

// Real function `sym` of libcudart.so.<major> (12 or 13): the versioned
// definition next in the global scope, else the one in the loaded
// libcudart.so.<major> (RTLD_LOCAL), else any loaded libcudart's. Cached;
// nullptr if there is none.
void* RtReal(int major, int sym);
// Real driver function `sym` for the exported wrappers: the next definition
// in the global scope, else libcuda.so.1's if it is loaded. Cached.
void* DrReal(int sym);
// A driver helper of the loaded libcuda.so.1 (never loads it). Cached.
void* DrHelper(int sym);
// libcuda.so.1 is loaded (never loads it).
bool DriverLoaded();
// True if p lies in libmemstep.so (a real function must never be one of ours).
bool IsOurs(const void* p);

// ---- wrapper slots: a wrapper per (ABI, real function) ----
// Pointers handed out by dlsym, cuGetProcAddress and cudaGetDriverEntryPoint
// are replaced by the wrapper of a slot that remembers the real pointer (two
// libraries, or a _ptsz variant, give two real functions of one ABI). Slots
// are never freed; when an ABI's slots are used up the real pointer is
// returned unwrapped (one notice).
inline constexpr int kSlots = 8;
struct Target {
  void* real;        // the function to call
  void* get_device;  // runtime: cudaGetDevice of the same libcudart (may be null)
  int major;         // runtime: libcudart major (12, 13), 0 if unknown
};
// Wrapper of slot s of abi (tables in cuda_runtime.cc / cuda_driver.cc).
void* RuntimeSlotWrapper(int abi, int s);
void* DriverSlotWrapper(int abi, int s);

// The kSlots wrappers of one ABI returning `ret`: Slot_<abi><S> calls
// impl(SlotTarget(abi, S), args...) (SlotTarget is the including file's), and
// kSlot_<abi> lists them. Expanded once per ABI by the X-macro tables.
#define MEMSTEP_CUDA_SLOTS(ret, abi, impl, params, args)                                    \
  template <int S>                                                                          \
  ret Slot_##abi params {                                                                   \
    return impl(SlotTarget(abi, S), MEMSTEP_UNPAREN args);                                  \
  }                                                                                         \
  using Fn_##abi = ret(*) params;                                                           \
  constexpr Fn_##abi kSlot_##abi[kSlots] = {&Slot_##abi<0>, &Slot_##abi<1>, &Slot_##abi<2>, \
                                            &Slot_##abi<3>, &Slot_##abi<4>, &Slot_##abi<5>, \
                                            &Slot_##abi<6>, &Slot_##abi<7>};
// A `case abi:` returning slot s's wrapper (in a switch over the ABIs).
#define MEMSTEP_CUDA_SLOT_CASE(abi, impl, params, args) \
  case abi:                                             \
    return reinterpret_cast<void*>(kSlot_##abi[s]);
inline void* SlotWrapper(int abi, int s) {
  return IsRuntimeAbi(abi) ? RuntimeSlotWrapper(abi, s) : DriverSlotWrapper(abi, s);
}
Target SlotTarget(int abi, int s);
// Returns the wrapper for `real` (claiming a slot), or `real` itself when it
// is null, one of ours, or no slot is left.
void* WrapPointer(int abi, void* real, void* get_device, int major);

// cuGetProcAddress-style lookups (cuda_driver.cc): the ABI memstep wraps for
// the base name `symbol` at `version`, with the version whose ABI it is
// (kAbiNone: leave the pointer alone).
int ClassifyProc(const char* symbol, int version, int* abi_version);
// After a successful lookup of `symbol` that wrote *pfn: swaps in the wrapper.
// `again(version)` repeats the lookup at another version (for versions newer
// than kNewestKnownVersion: wrap only if the ABI's version gives the same
// pointer); it returns nullptr when it cannot.
using LookupAgainFn = void* (*)(const void* ctx, int version);
void WrapLookup(const char* symbol, void** pfn, int version, LookupAgainFn again, const void* ctx);

// ---- accounting (cuda_account.cc) ----
// Whether this call records: not nested in memstep's own code and recording.
bool Active();
// The driver's current device ordinal (cuCtxGetDevice), -1 if unknown.
int DriverDevice();
// cudaGetDevice of `t`'s libcudart, -1 if unknown.
int RuntimeDevice(const Target& t);

// A successful allocation (not VMM): counted, entered in the address table,
// a DEV_ALLOC; the caller's stack only when the device sampler picks it
// (cuda_account.cc "Sampling").
void RecordAlloc(uint8_t kind, int device, uint64_t addr, uint64_t size, uint8_t api, uint64_t aux);
// A failed allocation call: DEV_FAIL with the requested size, error, stack;
// out of memory (error 2 in both APIs) also writes a MEM_SNAPSHOT with the
// driver's free/total memory (docs/gpu.md "Out of memory").
void RecordFail(uint8_t kind, int device, uint64_t size, uint8_t api, int error);
// Whether a lower layer (a driver wrapper) already recorded the allocation
// at addr during the runtime call whose marks are given.
struct LayerMark {
  uint32_t allocs;
  uint32_t fails;
};
LayerMark Mark();
bool LowerRecordedAlloc(const LayerMark& m, uint64_t addr);
bool LowerRecordedFail(const LayerMark& m);

// The values of the device tables (cuda_account.cc, preload/core/addr_map.h).
// A recorded allocation in the pointer table; its address is the key.
struct DevBlock {
  uint64_t size;
  int32_t device;     // CUDA ordinal, -1 unknown
  uint8_t kind;       // format::DeviceKind
  uint16_t hunt_gen;  // the hunt tally it counts in (CudaHuntCheckpoint)
  uint64_t hunt_est;  // a sample of the device leak hunt: its estimated bytes (else 0)
};
// A cuMemCreate handle in the handle table; the handle is the key.
struct VmmHandle {
  uint64_t size;
  int32_t device;
  uint32_t mappings;  // live cuMemMap mappings of it
  bool released;      // cuMemRelease was called (freed when no mapping is left)
  uint16_t hunt_gen;  // as DevBlock's
  uint64_t hunt_est;
  // Imported (cuMemImportFromShareableHandle): another process's memory.
  // `refs` imports returned this handle (each needs its own cuMemRelease);
  // `counted`: its DEV_ALLOC is written (at its first mapping, whose extent
  // is the size: the driver does not tell an imported handle's size).
  bool imported;
  bool counted;
  uint32_t refs;
};
// A cuMemMap mapping in the mapping table; its VA is the key.
struct VmmMapping {
  uint64_t size;
  uint64_t handle;
};

// Frees are two-phase: the table entry is removed (and the sequence number
// taken) before the real call, so another thread that gets the same address
// next cannot lose its entry; the entry goes back if the call fails.
struct PendingFree {
  uint64_t addr;
  DevBlock block;  // the entry removed (found)
  uint64_t seq;
  bool found;
  bool taken;  // a driver wrapper inside the runtime call took it over
};
// Runtime free wrappers: Begin, call the real function, End. A driver free
// wrapper reached inside takes the pending free over (counted once, at the
// lowest layer).
void BeginRuntimeFree(uint64_t addr, PendingFree* f, PendingFree** saved);
void EndRuntimeFree(PendingFree* f, PendingFree* saved, bool ok, uint8_t api);
void BeginDriverFree(uint64_t addr, PendingFree* f);
void EndDriverFree(PendingFree* f, bool ok, uint8_t api);

// VMM (cuMemCreate/Map/Unmap/Release): physical memory per handle.
void VmmCreated(uint64_t handle, uint64_t size, int device);
// An imported handle (cuMemImportFromShareableHandle) on `device`: counted
// once per handle; at the import when its exporter's size is known
// (`exported_size` > 0: the export registry), else at its first mapping with
// that mapping's extent. `own`: this process exported it (its cuMemCreate
// already counts the memory): not counted again. docs/gpu.md "Imported VMM
// memory".
void VmmImported(uint64_t handle, int device, uint64_t exported_size, bool own);
// Size and device of a cuMemCreate (or imported and counted) handle memstep
// tracks; false for an unknown one.
bool VmmHandleSize(uint64_t handle, uint64_t* size, int* device);
void VmmMapped(uint64_t va, uint64_t size, uint64_t offset, uint64_t handle);
// Release and unmap free physical memory: the table is updated before the
// real call (a handle the driver frees can be reused at once by another
// thread) and restored from this log if the call fails.
struct VmmUndo {
  static constexpr int kMax = 32;
  enum What : uint8_t { kMappingRemoved, kHandleChanged, kHandleRemoved /* freed */ };
  struct Op {
    uint64_t key;        // the mapping's VA or the handle
    VmmMapping mapping;  // kMappingRemoved: the mapping as it was
    VmmHandle handle;    // otherwise: the handle as it was
    uint64_t seq;        // kHandleRemoved: its DEV_FREE's sequence number
    What what;
  };
  Op ops[kMax];
  int n;
  uint64_t cursor, end;  // unmap: the part of the range not walked yet (log full)
};
void VmmBeginRelease(uint64_t handle, VmmUndo* u);
void VmmBeginUnmap(uint64_t va, uint64_t size, VmmUndo* u);
// ok: the real call succeeded (write the DEV_FREEs); otherwise undo.
void VmmEnd(VmmUndo* u, bool ok, uint8_t api);

// PyTorch tensor blocks (torch_blocks.cc, docs/gpu.md "Tensor blocks inside
// the caching allocator"): the device sampler's decision for a block of
// `size` bytes (*interval: the T its gap was drawn with, 0: p = 1), and the
// DEV_ALLOC / DEV_FREE of kind tensor_block. The caller holds the guard and
// made the thread known (EnsureThread).
bool TorchBlockSample(uint64_t size, uint64_t* interval);
void RecordTorchBlock(bool alloc, int device, uint64_t addr, uint64_t size, uint32_t stack,
                      bool sampled, uint64_t interval);

// State behind the step-end counters (cuda_info.cc).
bool DeviceSeen();         // a device allocation succeeded (CUDA is initialised)
bool PoolSeen();           // ... a stream-ordered one
int ThreadRuntimeMajor();  // libcudart major this thread allocated through, 0 if none
uint64_t CloseStepPeak();  // the step's device-resident peak; restarts it from live

// One line on stderr (unless MEMSTEP_QUIET) and a NOTICE record: something
// memstep cannot track from now on; the program is not affected.
void Notice(const char* message);

// Runtime wrappers note the libcudart major this thread used (step-end
// device counters use it when libcuda.so.1 is not loaded).
void NoteRuntimeThread(int major);

// ---- issue 10 coverage (cuda_coverage.cc) ----
// The export registry of a run (docs/gpu.md "Imported VMM memory"): a VMM
// handle this process exported as a POSIX file descriptor is listed in
// MEMSTEP_DIR/cuda-exports (pid, descriptor, size, device); an importer
// profiled in the same run finds the entry whose descriptor is the same open
// file as its own (kcmp) and so learns the size the driver does not tell.
void VmmExported(uint64_t handle, int fd);
// The entry for `fd` (the last one listed): size, device, and whether this
// process made it; false when none matches or the registry cannot be read.
bool ExportLookup(int fd, uint64_t* size, int* device, bool* own);
// Estimated bytes of a CUDA array (the exact size is driver-internal):
// element bytes x width x max(height, 1) x max(depth, 1), summed over
// `levels` mipmap levels (each halving every non-zero extent, down to 1).
// 0 when the element size is unknown.
uint64_t ArrayBytes(uint64_t element_bytes, uint64_t width, uint64_t height, uint64_t depth,
                    unsigned levels);
uint64_t ChannelBytes(const cudaChannelFormatDesc* desc);  // 0 if unknown
uint64_t CuFormatBytes(int format, unsigned channels);     // 0 if unknown

// IPC: memory opened from another process's handle. The first open of an
// address records DEV_ALLOC (kind device; size from cuMemGetAddressRange,
// 0 if the driver does not say); opening it again only counts a reference
// (the driver returns the same pointer for a handle it has open); the close
// that drops the last reference frees it.
void IpcOpened(int device, uint64_t addr, uint8_t api);
uint32_t IpcMark();  // opens seen on this thread (a runtime wrapper's layer check)
// Closes are two-phase like frees: the reference is dropped before the real
// call and restored if it fails. `last`: this close frees the memory (the
// caller frees it through Begin/End*Free).
struct IpcClose {
  uint64_t addr;
  bool known;  // memstep saw the open
  bool last;
};
void IpcBeginClose(uint64_t addr, IpcClose* c);
void IpcEndClose(const IpcClose& c, bool ok);
// A runtime close in progress on this thread: a driver close of the same
// address inside it leaves the reference count to the runtime wrapper and
// only takes the free over.
const IpcClose* IpcRuntimeClose(uint64_t addr);
const IpcClose* SetIpcRuntimeClose(const IpcClose* c);  // returns the previous one

// Pools and graph memory read at step ends (COUNTER records).
void PoolSeenHandle(uint64_t pool, int device);  // created, or allocated from
void PoolGone(uint64_t pool);                    // destroyed
void GraphMemSeen(int device);                   // a graph memory node on `device`
// After a trim: the counters of that pool / device's graph memory, now;
// `trim_to`: also a `.trim_to_bytes` COUNTER with the trim's minimum (the
// program's own request), -1 for none.
void EmitPoolCounters(uint64_t pool, int64_t trim_to = -1);
// A pool's release threshold was set (cudaMemPoolSetAttribute /
// cuMemPoolSetAttribute): the pool is read at step ends from now on (device
// -1 if it was never seen before) and a `.release_threshold_bytes` COUNTER
// is written at once.
void PoolThresholdSet(uint64_t pool, uint64_t threshold);
// Multicast objects (cuMulticastCreate, NVLink SHARP): COUNTER records
// `cuda.multicast:-1.0x<mc>.size_bytes` at the create and at the release
// (0), and `cuda.multicast:<dev>.0x<mc>.bound_bytes` (the device memory of
// `dev` bound to it, already counted where it was allocated) at each bind and
// unbind. At most 64 objects at a time (one notice beyond).
void MulticastCreated(uint64_t mc, uint64_t size);
void MulticastBound(uint64_t mc, int device, uint64_t bytes);  // device -1: unknown
void MulticastUnbound(uint64_t mc, int device, uint64_t bytes);
bool MulticastReleased(uint64_t mc);  // false: not a multicast object memstep saw
void EmitGraphCounters(int device);
// At a step end, from a thread with a current context: every pool's and
// device's counters (through the driver if it is loaded, else the runtime
// this thread used).
void CoverageStepEnd();

}  // namespace memstep::preload::cuda

#endif  // MEMSTEP_PRELOAD_CUDA_INTERNAL_H_

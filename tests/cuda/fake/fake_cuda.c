/* Fake CUDA driver: libcuda.so.1 (unversioned, like the real one and its
 * toolkit stub). Test double for memstep's driver-API interception; see
 * tests/cuda/README.md.
 *
 * - cuGetProcAddress_v2 maps (name, cudaVersion, flags) to the concrete
 *   export the way the real driver does: "cuMemAlloc" at >= 3020 is
 *   cuMemAlloc_v2 (below, the 32-bit cuMemAlloc), flags & 2 selects the _ptsz
 *   form, too old a version gives CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
 *   and an unknown name CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND (both with
 *   CUDA_ERROR_NOT_FOUND and *pfn = NULL). It returns this library's own
 *   functions from a table (linked -Bsymbolic, so never an interposer's).
 * - Allocations need a current context (cuCtxSetCurrent, or any runtime call
 *   on the thread) and fail with CUDA_ERROR_INVALID_CONTEXT without one,
 *   except the VMM calls, which take the device from prop->location.
 * - VMM with real semantics: cuMemAddressReserve reserves address space
 *   (PROT_NONE), cuMemCreate returns a handle and takes physical memory,
 *   cuMemMap/cuMemSetAccess make a range usable, and the physical memory
 *   returns when the handle is released and its last mapping is unmapped.
 *   (Two mappings of one handle do not alias; no test needs it.)
 * - Sharing VMM memory: cuMemExportToShareableHandle (POSIX file descriptor
 *   only) gives a memfd that names (pid, handle, size, device);
 *   cuMemImportFromShareableHandle in another process takes fresh memory of
 *   that size, and importing the same exported allocation again returns the
 *   same handle with one more reference (each import needs its cuMemRelease;
 *   the last one, with no mapping left, returns the memory). Importing in
 *   the exporting process itself is refused (invalid value): no test needs it.
 * - Multicast objects: cuMulticastCreate returns a handle of no memory of its
 *   own; cuMulticastBindMem/BindAddr/Unbind check their ranges against the
 *   object's size (per device) and the bound memory; cuMemRelease releases
 *   the object (refused while memory is bound to it, which the real driver
 *   leaves undefined).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_types.h"
#include "fakecuda_core.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_RESERVATIONS 64
#define MAX_MAPPINGS 256

static char g_contexts[8]; /* CUcontext of device d is &g_contexts[d] */

/* ---------------------------------------------------------------- init, devices, contexts */

EXPORT CUresult cuInit(unsigned int flags) {
  fc_init();
  fc_log("cuInit", "none", 0, -1, flags, 0, 0, 0);
  return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuDriverGetVersion(int* v) {
  if (v == NULL) return CUDA_ERROR_INVALID_VALUE;
  *v = 13000;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int* n) {
  if (n == NULL) return CUDA_ERROR_INVALID_VALUE;
  *n = fc_device_count();
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (d == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= fc_device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  if (ctx == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= fc_device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *ctx = (CUcontext)&g_contexts[dev];
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return dev >= 0 && dev < fc_device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (ctx == NULL) {
    fc_set_ctx_device(-1);
    return CUDA_SUCCESS;
  }
  long d = (char*)ctx - g_contexts;
  if (d < 0 || d >= fc_device_count()) return CUDA_ERROR_INVALID_CONTEXT;
  fc_set_ctx_device((int)d);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (ctx == NULL) return CUDA_ERROR_INVALID_VALUE;
  int d = fc_ctx_device();
  *ctx = d < 0 ? NULL : (CUcontext)&g_contexts[d];
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice* dev) {
  if (dev == NULL) return CUDA_ERROR_INVALID_VALUE;
  int d = fc_ctx_device();
  if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *dev = d;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  if (free_bytes == NULL || total == NULL) return CUDA_ERROR_INVALID_VALUE;
  int d = fc_ctx_device();
  if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *total = fc_budget_total();
  *free_bytes = *total - fc_budget_used(d);
  fc_log("cuMemGetInfo_v2", "none", 0, d, *free_bytes, 0, 0, 0);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult e, const char** s) {
  if (s == NULL) return CUDA_ERROR_INVALID_VALUE;
  *s = e == CUDA_SUCCESS ? "no error" : "fake driver error";
  return CUDA_SUCCESS;
}

EXPORT CUresult cuGetExportTable(const void** table, const CUuuid* id) {
  (void)table;
  (void)id;
  return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---------------------------------------------------------------- classic allocations */

/* Allocation in the current context's device. */
static CUresult CtxAlloc(const char* call, int kind, uint64_t size, fc_pool* pool, uint64_t aux,
                         void* out) {
  int dev = fc_ctx_device();
  if (dev < 0) {
    fc_log(call, "fail", kind, -1, size, 0, aux, CUDA_ERROR_INVALID_CONTEXT);
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (kind == FC_POOL && pool == NULL) pool = fc_default_pool(dev);
  uint64_t addr = 0;
  int err =
      fc_alloc(call, kind, kind == FC_PINNED ? -1 : dev, size, pool, aux, FC_OWNER_DRIVER, &addr);
  if (err == 0) memcpy(out, &addr, sizeof addr); /* a CUdeviceptr or a void* */
  return err;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t size) {
  if (dptr == NULL) return CUDA_ERROR_INVALID_VALUE;
  return CtxAlloc("cuMemAlloc_v2", FC_DEVICE, size, NULL, 0, dptr);
}

/* The CUDA 2.0 ABI: a 32-bit device pointer. Not an allocation the fakes
 * account; it exists so that a lookup at version < 3020 has a distinct target. */
EXPORT CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int size) {
  if (dptr == NULL) return CUDA_ERROR_INVALID_VALUE;
  *dptr = 0x5EED0000u;
  fc_log("cuMemAlloc", "none", 0, -1, size, *dptr, 0, 0);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (dptr == 0) return CUDA_SUCCESS;
  return fc_free("cuMemFree_v2", dptr, FC_MASK(FC_DEVICE) | FC_MASK(FC_MANAGED));
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t width, size_t height,
                                   unsigned int elementSize) {
  if (dptr == NULL || pPitch == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (elementSize != 4 && elementSize != 8 && elementSize != 16) return CUDA_ERROR_INVALID_VALUE;
  uint64_t pitch = (width + 511) & ~(uint64_t)511;
  CUresult r = CtxAlloc("cuMemAllocPitch_v2", FC_DEVICE, pitch * height, NULL, 0, dptr);
  if (r == CUDA_SUCCESS) *pPitch = pitch;
  return r;
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t size, unsigned int flags) {
  if (dptr == NULL || (flags != 1 && flags != 2)) return CUDA_ERROR_INVALID_VALUE;
  return CtxAlloc("cuMemAllocManaged", FC_MANAGED, size, NULL, 0, dptr);
}

EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t size) {
  if (pp == NULL) return CUDA_ERROR_INVALID_VALUE;
  return CtxAlloc("cuMemAllocHost_v2", FC_PINNED, size, NULL, 0, pp);
}

EXPORT CUresult cuMemHostAlloc(void** pp, size_t size, unsigned int flags) {
  if (pp == NULL || flags > 0xF) return CUDA_ERROR_INVALID_VALUE;
  return CtxAlloc("cuMemHostAlloc", FC_PINNED, size, NULL, 0, pp);
}

EXPORT CUresult cuMemFreeHost(void* p) {
  return fc_free("cuMemFreeHost", (uint64_t)p, FC_MASK(FC_PINNED));
}

/* ---------------------------------------------------------------- stream-ordered */

static CUresult AllocAsync(const char* call, CUdeviceptr* dptr, size_t size) {
  if (dptr == NULL) return CUDA_ERROR_INVALID_VALUE;
  return CtxAlloc(call, FC_POOL, size, NULL, 0, dptr);
}

static CUresult AllocFromPool(const char* call, CUdeviceptr* dptr, size_t size, CUmemoryPool pool) {
  if (dptr == NULL || !fc_pool_valid((fc_pool*)pool)) return CUDA_ERROR_INVALID_VALUE;
  return CtxAlloc(call, FC_POOL, size, (fc_pool*)pool, (uint64_t)pool, dptr);
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr* d, size_t n, CUstream s) {
  (void)s;
  return AllocAsync("cuMemAllocAsync", d, n);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* d, size_t n, CUstream s) {
  (void)s;
  return AllocAsync("cuMemAllocAsync_ptsz", d, n);
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* d, size_t n, CUmemoryPool p, CUstream s) {
  (void)s;
  return AllocFromPool("cuMemAllocFromPoolAsync", d, n, p);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* d, size_t n, CUmemoryPool p, CUstream s) {
  (void)s;
  return AllocFromPool("cuMemAllocFromPoolAsync_ptsz", d, n, p);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr d, CUstream s) {
  (void)s;
  return fc_free("cuMemFreeAsync", d, FC_MASK(FC_POOL));
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream s) {
  (void)s;
  return fc_free("cuMemFreeAsync_ptsz", d, FC_MASK(FC_POOL));
}

EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  fc_pool* p = fc_default_pool(dev);
  if (pool == NULL || p == NULL) return CUDA_ERROR_INVALID_DEVICE;
  *pool = (CUmemoryPool)p;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (pool == NULL || props == NULL || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  fc_pool* p = fc_pool_create(props->location.id);
  if (p == NULL) return CUDA_ERROR_INVALID_VALUE;
  *pool = (CUmemoryPool)p;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  return fc_pool_destroy((fc_pool*)pool) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  if (!fc_pool_valid((fc_pool*)pool)) return CUDA_ERROR_INVALID_VALUE;
  fc_pool_trim((fc_pool*)pool, keep);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void* value) {
  uint64_t v = 0;
  if (value == NULL || !fc_pool_valid((fc_pool*)pool) || fc_pool_attr((fc_pool*)pool, attr, &v)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  memcpy(value, &v, sizeof v);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void* value) {
  uint64_t v = 0;
  if (value == NULL || !fc_pool_valid((fc_pool*)pool)) return CUDA_ERROR_INVALID_VALUE;
  memcpy(&v, value, sizeof v);
  return fc_pool_set_attr((fc_pool*)pool, attr, v) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---------------------------------------------------------------- VMM */

/* Protected by g_vmm_mu. A handle's physical memory is the registry block
 * (FC_VMM, addr = handle); these tables add what VMM needs on top. */
static pthread_mutex_t g_vmm_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { uint64_t base, size; } g_res[MAX_RESERVATIONS];
static struct { uint64_t va, size, handle; } g_maps[MAX_MAPPINGS];
static struct {
  uint64_t handle;
  int maps;
  int released;
  int refs; /* imports of it not released yet (0: created here, one release) */
  /* an import: the exporter's pid and handle */
  int64_t src_pid;
  uint64_t src_handle;
  /* a multicast object: its size per device and bytes bound per device */
  int mc;
  uint64_t mc_size;
  uint64_t mc_bound[8];
} g_handles[MAX_MAPPINGS];
static uint64_t g_next_mc = 0x6d630000; /* multicast handles; protected by g_vmm_mu */

static int HandleSlot(uint64_t h, int create) {
  int free_slot = -1;
  for (int i = 0; i < MAX_MAPPINGS; ++i) {
    if (g_handles[i].handle == h) return i;
    if (g_handles[i].handle == 0 && free_slot < 0) free_slot = i;
  }
  if (create && free_slot >= 0) {
    memset(&g_handles[free_slot], 0, sizeof g_handles[free_slot]);
    g_handles[free_slot].handle = h;
  }
  return create ? free_slot : -1;
}

/* Returns the physical memory of handle slot `i` once released and unmapped. */
static void MaybeReturn(const char* call, int i) {
  if (!g_handles[i].released || g_handles[i].maps > 0) return;
  fc_free(call, g_handles[i].handle, FC_MASK(FC_VMM));
  g_handles[i].handle = 0;
}

static int InReservation(uint64_t va, uint64_t size) {
  for (int i = 0; i < MAX_RESERVATIONS; ++i) {
    if (g_res[i].size && va >= g_res[i].base && va + size <= g_res[i].base + g_res[i].size)
      return 1;
  }
  return 0;
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t* g, const CUmemAllocationProp* prop, int opt) {
  (void)opt;
  if (g == NULL || prop == NULL) return CUDA_ERROR_INVALID_VALUE;
  *g = FC_GRANULARITY;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                    CUdeviceptr addr, unsigned long long flags) {
  (void)addr;
  (void)flags;
  if (ptr == NULL || size == 0 || size % FC_GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
  void* base = fc_reserve(size, alignment);
  if (base == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&g_vmm_mu);
  for (int i = 0; i < MAX_RESERVATIONS; ++i) {
    if (g_res[i].size == 0) {
      g_res[i].base = (uint64_t)base;
      g_res[i].size = size;
      r = CUDA_SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&g_vmm_mu);
  if (r != CUDA_SUCCESS)
    fc_unreserve(base, size);
  else
    *ptr = (CUdeviceptr)base;
  fc_log("cuMemAddressReserve", "none", 0, -1, size, r ? 0 : (uint64_t)base, 0, r);
  return r;
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_vmm_mu);
  int mapped = 0;
  for (int i = 0; i < MAX_MAPPINGS; ++i) {
    if (g_maps[i].size && g_maps[i].va >= ptr && g_maps[i].va < ptr + size) mapped = 1;
  }
  for (int i = 0; i < MAX_RESERVATIONS && !mapped; ++i) {
    if (g_res[i].size && g_res[i].base == ptr && g_res[i].size == size) {
      g_res[i].size = 0;
      fc_unreserve((void*)ptr, size);
      r = CUDA_SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&g_vmm_mu);
  fc_log("cuMemAddressFree", "none", 0, -1, size, ptr, 0, r);
  return r;
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                            const CUmemAllocationProp* prop, unsigned long long flags) {
  (void)flags;
  if (handle == NULL || prop == NULL || size == 0 || size % FC_GRANULARITY ||
      prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int dev = prop->location.id;
  if (dev < 0 || dev >= fc_device_count()) return CUDA_ERROR_INVALID_DEVICE;
  uint64_t h = 0;
  CUresult r = fc_alloc("cuMemCreate", FC_VMM, dev, size, NULL, 0, FC_OWNER_DRIVER, &h);
  if (r != CUDA_SUCCESS) return r;
  pthread_mutex_lock(&g_vmm_mu);
  HandleSlot(h, 1);
  pthread_mutex_unlock(&g_vmm_mu);
  *handle = h;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_vmm_mu);
  int i = HandleSlot(handle, 0);
  if (i >= 0 && g_handles[i].mc) {
    uint64_t bound = 0;
    for (int d = 0; d < 8; ++d) bound += g_handles[i].mc_bound[d];
    if (bound == 0 && g_handles[i].maps == 0) {
      g_handles[i].handle = 0;
      r = CUDA_SUCCESS;
    }
    fc_log("cuMemRelease", "none", 0, -1, 0, handle, 0, r);
  } else if (i >= 0 && g_handles[i].refs > 1) {
    g_handles[i].refs--; /* another import of it is still held */
    r = CUDA_SUCCESS;
    fc_log("cuMemRelease", "none", FC_VMM, -1, 0, handle, 0, r);
  } else if (i >= 0 && !g_handles[i].released) {
    g_handles[i].released = 1;
    r = CUDA_SUCCESS;
    fc_log("cuMemRelease", "none", FC_VMM, -1, 0, handle, 0, r);
    MaybeReturn("cuMemRelease", i);
  } else {
    fc_log("cuMemRelease", "none", FC_VMM, -1, 0, handle, 0, r);
  }
  pthread_mutex_unlock(&g_vmm_mu);
  return r;
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle handle, unsigned long long flags) {
  (void)flags;
  fc_block b;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_vmm_mu);
  int h = HandleSlot(handle, 0);
  int ok = h >= 0 && !g_handles[h].released && fc_block_find(handle, &b) && size &&
           size % FC_GRANULARITY == 0 && offset + size <= b.size && InReservation(ptr, size);
  for (int i = 0; i < MAX_MAPPINGS && ok; ++i) {
    if (g_maps[i].size && g_maps[i].va < ptr + size && ptr < g_maps[i].va + g_maps[i].size) ok = 0;
  }
  for (int i = 0; i < MAX_MAPPINGS && ok; ++i) {
    if (g_maps[i].size == 0) {
      g_maps[i].va = ptr;
      g_maps[i].size = size;
      g_maps[i].handle = handle;
      g_handles[h].maps++;
      fc_remap_none((void*)ptr, size);
      r = CUDA_SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&g_vmm_mu);
  fc_log("cuMemMap", "none", FC_VMM, -1, size, handle, ptr, r);
  return r;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_vmm_mu);
  for (int i = 0; i < MAX_MAPPINGS; ++i) {
    if (g_maps[i].size && g_maps[i].va >= ptr && g_maps[i].va + g_maps[i].size <= ptr + size) {
      uint64_t handle = g_maps[i].handle;
      fc_remap_none((void*)g_maps[i].va, g_maps[i].size);
      g_maps[i].size = 0;
      r = CUDA_SUCCESS;
      fc_log("cuMemUnmap", "none", FC_VMM, -1, size, handle, ptr, r);
      int h = HandleSlot(handle, 0);
      if (h >= 0) {
        g_handles[h].maps--;
        MaybeReturn("cuMemUnmap", h);
      }
    }
  }
  pthread_mutex_unlock(&g_vmm_mu);
  if (r != CUDA_SUCCESS) fc_log("cuMemUnmap", "none", FC_VMM, -1, size, 0, ptr, r);
  return r;
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                               size_t count) {
  if (desc == NULL || count == 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_vmm_mu);
  for (int i = 0; i < MAX_MAPPINGS; ++i) {
    if (g_maps[i].size && g_maps[i].va >= ptr && g_maps[i].va + g_maps[i].size <= ptr + size &&
        desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      r = fc_protect_rw((void*)g_maps[i].va, g_maps[i].size) == 0 ? CUDA_SUCCESS : r;
    }
  }
  pthread_mutex_unlock(&g_vmm_mu);
  return r;
}

/* ---------------------------------------------------------------- sharing VMM memory */

typedef struct {
  char magic[8]; /* "FCVMM01" */
  int64_t pid;
  uint64_t handle, size;
  int64_t dev;
} ShareDesc;

EXPORT CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                             int type, unsigned long long flags) {
  fc_block b;
  if (shareable == NULL || flags != 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
      !fc_block_find(handle, &b) || b.kind != FC_VMM) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ShareDesc d;
  memset(&d, 0, sizeof d);
  memcpy(d.magic, "FCVMM01", 8);
  d.pid = getpid();
  d.handle = handle;
  d.size = b.size;
  d.dev = b.dev;
  int fd = memfd_create("fakecuda-vmm-export", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (pwrite(fd, &d, sizeof d, 0) != (ssize_t)sizeof d) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  memcpy(shareable, &fd, sizeof fd);
  fc_log("cuMemExportToShareableHandle", "none", FC_VMM, b.dev, b.size, handle, 0, 0);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os,
                                               int type) {
  static const char kCall[] = "cuMemImportFromShareableHandle";
  ShareDesc d;
  int fd = (int)(intptr_t)os;
  if (handle == NULL || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
      pread(fd, &d, sizeof d, 0) != (ssize_t)sizeof d || memcmp(d.magic, "FCVMM01", 8) != 0 ||
      d.pid == getpid() || d.size == 0) {
    fc_log(kCall, "fail", FC_VMM, -1, 0, 0, 0, CUDA_ERROR_INVALID_VALUE);
    return CUDA_ERROR_INVALID_VALUE;
  }
  pthread_mutex_lock(&g_vmm_mu);
  for (int i = 0; i < MAX_MAPPINGS; ++i) {
    if (g_handles[i].handle && g_handles[i].refs > 0 && !g_handles[i].released &&
        g_handles[i].src_pid == d.pid && g_handles[i].src_handle == d.handle) {
      g_handles[i].refs++;
      *handle = g_handles[i].handle;
      pthread_mutex_unlock(&g_vmm_mu);
      fc_log(kCall, "none", FC_VMM, (int)d.dev, d.size, *handle, 0, 0);
      return CUDA_SUCCESS;
    }
  }
  pthread_mutex_unlock(&g_vmm_mu);
  uint64_t h = 0;
  CUresult r = fc_alloc(kCall, FC_VMM, (int)d.dev, d.size, NULL, 0, FC_OWNER_DRIVER, &h);
  if (r != CUDA_SUCCESS) return r;
  pthread_mutex_lock(&g_vmm_mu);
  int i = HandleSlot(h, 1);
  if (i >= 0) {
    g_handles[i].refs = 1;
    g_handles[i].src_pid = d.pid;
    g_handles[i].src_handle = d.handle;
  }
  pthread_mutex_unlock(&g_vmm_mu);
  *handle = h;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                       CUmemGenericAllocationHandle handle) {
  fc_block b;
  if (prop == NULL || !fc_block_find(handle, &b) || b.kind != FC_VMM) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  memset(prop, 0, sizeof *prop);
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = b.dev;
  return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- multicast */

EXPORT CUresult cuMulticastGetGranularity(size_t* g, const CUmulticastObjectProp* prop, int opt) {
  (void)opt;
  if (g == NULL || prop == NULL) return CUDA_ERROR_INVALID_VALUE;
  *g = FC_GRANULARITY;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMulticastCreate(CUmemGenericAllocationHandle* mc,
                                  const CUmulticastObjectProp* prop) {
  if (mc == NULL || prop == NULL || prop->numDevices == 0 || prop->size == 0 ||
      prop->size % FC_GRANULARITY || prop->flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&g_vmm_mu);
  uint64_t h = ++g_next_mc;
  int i = HandleSlot(h, 1);
  if (i >= 0) {
    g_handles[i].mc = 1;
    g_handles[i].mc_size = prop->size;
    *mc = h;
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&g_vmm_mu);
  fc_log("cuMulticastCreate", "none", 0, -1, prop->size, r ? 0 : h, 0, r);
  return r;
}

EXPORT CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mc, CUdevice dev) {
  if (dev < 0 || dev >= fc_device_count()) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&g_vmm_mu);
  int i = HandleSlot(mc, 0);
  CUresult r = i >= 0 && g_handles[i].mc ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_unlock(&g_vmm_mu);
  return r;
}

/* Binds (size > 0) `size` bytes of device `dev`'s memory to the object. */
static CUresult McBind(const char* call, uint64_t mc, size_t mc_offset, int dev, size_t size) {
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_vmm_mu);
  int i = HandleSlot(mc, 0);
  if (i >= 0 && g_handles[i].mc && dev >= 0 && dev < 8 && size && size % FC_GRANULARITY == 0 &&
      mc_offset % FC_GRANULARITY == 0 && mc_offset + size <= g_handles[i].mc_size &&
      g_handles[i].mc_bound[dev] + size <= g_handles[i].mc_size) {
    g_handles[i].mc_bound[dev] += size;
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&g_vmm_mu);
  fc_log(call, "none", 0, dev, size, mc, 0, r);
  return r;
}

EXPORT CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mc, size_t mc_offset,
                                   CUmemGenericAllocationHandle mem, size_t mem_offset, size_t size,
                                   unsigned long long flags) {
  fc_block b;
  if (flags != 0 || !fc_block_find(mem, &b) || b.kind != FC_VMM || mem_offset + size > b.size) {
    fc_log("cuMulticastBindMem", "none", 0, -1, size, mc, 0, CUDA_ERROR_INVALID_VALUE);
    return CUDA_ERROR_INVALID_VALUE;
  }
  return McBind("cuMulticastBindMem", mc, mc_offset, b.dev, size);
}

EXPORT CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mc, size_t mc_offset,
                                    CUdeviceptr ptr, size_t size, unsigned long long flags) {
  int dev = -1;
  pthread_mutex_lock(&g_vmm_mu);
  for (int i = 0; i < MAX_MAPPINGS && dev < 0; ++i) {
    if (g_maps[i].size && ptr >= g_maps[i].va && ptr + size <= g_maps[i].va + g_maps[i].size) {
      fc_block b;
      if (fc_block_find(g_maps[i].handle, &b)) dev = b.dev;
    }
  }
  pthread_mutex_unlock(&g_vmm_mu);
  if (flags != 0 || dev < 0) {
    fc_log("cuMulticastBindAddr", "none", 0, -1, size, mc, 0, CUDA_ERROR_INVALID_VALUE);
    return CUDA_ERROR_INVALID_VALUE;
  }
  return McBind("cuMulticastBindAddr", mc, mc_offset, dev, size);
}

EXPORT CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mc, CUdevice dev, size_t mc_offset,
                                  size_t size) {
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_vmm_mu);
  int i = HandleSlot(mc, 0);
  if (i >= 0 && g_handles[i].mc && dev >= 0 && dev < 8 &&
      mc_offset + size <= g_handles[i].mc_size && size <= g_handles[i].mc_bound[dev]) {
    g_handles[i].mc_bound[dev] -= size;
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&g_vmm_mu);
  fc_log("cuMulticastUnbind", "none", 0, dev, size, mc, 0, r);
  return r;
}

/* ---------------------------------------------------------------- issue 10 coverage */

EXPORT CUresult cuMemHostRegister_v2(void* p, size_t size, unsigned int flags) {
  if (flags > 0xF) return CUDA_ERROR_INVALID_VALUE;
  if (fc_ctx_device() < 0) return CUDA_ERROR_INVALID_CONTEXT;
  return fc_host_register("cuMemHostRegister_v2", p, size);
}

EXPORT CUresult cuMemHostUnregister(void* p) {
  return fc_host_unregister("cuMemHostUnregister", p);
}

/* Bytes per element of a CUarray_format x channels (0: not supported here). */
static uint64_t FormatBytes(int format, unsigned channels) {
  uint64_t b = format == 0x01 || format == 0x08                     ? 1
               : format == 0x02 || format == 0x09 || format == 0x10 ? 2
               : format == 0x03 || format == 0x0a || format == 0x20 ? 4
                                                                    : 0;
  return channels >= 1 && channels <= 4 ? b * channels : 0;
}

static uint64_t ArrayBytes(uint64_t elem, uint64_t w, uint64_t h, uint64_t d, unsigned levels) {
  uint64_t total = 0;
  if (levels == 0) levels = 1;
  for (unsigned l = 0; l < levels; ++l) {
    total += elem * w * (h ? h : 1) * (d ? d : 1);
    if (w <= 1 && h <= 1 && d <= 1) break;
    w = w > 1 ? w / 2 : w;
    h = h > 1 ? h / 2 : h;
    d = d > 1 ? d / 2 : d;
  }
  return total;
}

static CUresult ArrayCreate(const char* call, CUarray* out, uint64_t bytes) {
  if (out == NULL || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  int dev = fc_ctx_device();
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  uint64_t h = 0;
  CUresult r = fc_array_create(call, dev, bytes, FC_OWNER_DRIVER, &h);
  if (r == CUDA_SUCCESS) *out = (CUarray)h;
  return r;
}

EXPORT CUresult cuArrayCreate_v2(CUarray* a, const CUDA_ARRAY_DESCRIPTOR* d) {
  if (d == NULL) return CUDA_ERROR_INVALID_VALUE;
  return ArrayCreate("cuArrayCreate_v2", a,
                     ArrayBytes(FormatBytes(d->Format, d->NumChannels), d->Width, d->Height, 0, 1));
}

EXPORT CUresult cuArray3DCreate_v2(CUarray* a, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  if (d == NULL) return CUDA_ERROR_INVALID_VALUE;
  return ArrayCreate(
      "cuArray3DCreate_v2", a,
      ArrayBytes(FormatBytes(d->Format, d->NumChannels), d->Width, d->Height, d->Depth, 1));
}

EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* a, const CUDA_ARRAY3D_DESCRIPTOR* d,
                                       unsigned int levels) {
  if (d == NULL || levels == 0) return CUDA_ERROR_INVALID_VALUE;
  return ArrayCreate(
      "cuMipmappedArrayCreate", (CUarray*)a,
      ArrayBytes(FormatBytes(d->Format, d->NumChannels), d->Width, d->Height, d->Depth, levels));
}

EXPORT CUresult cuArrayDestroy(CUarray a) {
  return fc_array_destroy("cuArrayDestroy", (uint64_t)a) ? CUDA_ERROR_INVALID_HANDLE : 0;
}

EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a) {
  return fc_array_destroy("cuMipmappedArrayDestroy", (uint64_t)a) ? CUDA_ERROR_INVALID_HANDLE : 0;
}

EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* h, CUdeviceptr d) {
  if (h == NULL) return CUDA_ERROR_INVALID_VALUE;
  return fc_ipc_get(d, (fc_ipc_handle*)h) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* d, CUipcMemHandle h, unsigned int flags) {
  if (d == NULL || flags > 1) return CUDA_ERROR_INVALID_VALUE;
  if (fc_ctx_device() < 0) return CUDA_ERROR_INVALID_CONTEXT;
  uint64_t addr = 0;
  CUresult r =
      fc_ipc_open("cuIpcOpenMemHandle_v2", (const fc_ipc_handle*)&h, FC_OWNER_DRIVER, &addr);
  if (r == CUDA_SUCCESS) *d = addr;
  return r;
}

EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr d) {
  return fc_ipc_close("cuIpcCloseMemHandle", d) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr d) {
  uint64_t b = 0, n = 0;
  if (fc_address_range(d, &b, &n)) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = b;
  if (size) *size = n;
  return CUDA_SUCCESS;
}

/* Graphs: a handle per cuGraphCreate; memory nodes only (no execution). */
static char g_graphs[64];
static int g_graph_next;

EXPORT CUresult cuGraphCreate(CUgraph* g, unsigned int flags) {
  if (g == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  int i = __atomic_fetch_add(&g_graph_next, 1, __ATOMIC_RELAXED);
  if (i >= 64) return CUDA_ERROR_OUT_OF_MEMORY;
  *g = (CUgraph)&g_graphs[i];
  return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphDestroy(CUgraph g) { return g == NULL ? CUDA_ERROR_INVALID_VALUE : 0; }

static char g_nodes[1];

EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph g, const CUgraphNode* deps,
                                       size_t n, CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  (void)deps;
  (void)n;
  if (node == NULL || g == NULL || p == NULL ||
      p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t addr = 0;
  CUresult r = fc_graph_alloc("cuGraphAddMemAllocNode", p->poolProps.location.id, p->bytesize,
                              (uint64_t)g, FC_OWNER_DRIVER, &addr);
  if (r == CUDA_SUCCESS) {
    p->dptr = addr;
    *node = (CUgraphNode)g_nodes;
  }
  return r;
}

EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph g, const CUgraphNode* deps,
                                      size_t n, CUdeviceptr d) {
  (void)deps;
  (void)n;
  if (node == NULL || g == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (fc_graph_free("cuGraphAddMemFreeNode", d)) return CUDA_ERROR_INVALID_VALUE;
  *node = (CUgraphNode)g_nodes;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev) {
  if (dev < 0 || dev >= fc_device_count()) return CUDA_ERROR_INVALID_DEVICE;
  fc_graph_trim(dev);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, int attr, void* value) {
  uint64_t v = 0;
  if (value == NULL || fc_graph_attr(dev, attr, &v)) return CUDA_ERROR_INVALID_VALUE;
  memcpy(value, &v, sizeof v);
  return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- cuGetProcAddress */

struct Entry {
  const char* name; /* what callers ask for */
  int min_version;  /* below: VERSION_NOT_SUFFICIENT */
  int v2_from;      /* from this version on, `v2` is returned (0: never) */
  void* fn;
  void* v2;
  void* ptsz; /* flags & 2 */
};

EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                    cuuint64_t flags, int* symbolStatus);
EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);

#define E(name, minv) \
  { #name, minv, 0, (void*)name, NULL, NULL }
#define EV2(name, minv, from, v2) \
  { #name, minv, from, (void*)name, (void*)v2, NULL }
#define EPT(name, minv) \
  { #name, minv, 0, (void*)name, NULL, (void*)name##_ptsz }
static const struct Entry kEntries[] = {
    EV2(cuGetProcAddress, 11030, 12000, cuGetProcAddress_v2),
    E(cuInit, 2000),
    E(cuDriverGetVersion, 2020),
    E(cuDeviceGet, 2000),
    E(cuDeviceGetCount, 2000),
    E(cuDevicePrimaryCtxRetain, 7000),
    E(cuDevicePrimaryCtxRelease, 7000),
    E(cuCtxSetCurrent, 4000),
    E(cuCtxGetCurrent, 4000),
    E(cuCtxGetDevice, 2000),
    E(cuGetExportTable, 3000),
    E(cuGetErrorString, 6000),
    {"cuMemGetInfo", 2000, 3020, NULL, (void*)cuMemGetInfo_v2, NULL},
    EV2(cuMemAlloc, 2000, 3020, cuMemAlloc_v2),
    {"cuMemFree", 2000, 3020, NULL, (void*)cuMemFree_v2, NULL},
    {"cuMemAllocPitch", 2000, 3020, NULL, (void*)cuMemAllocPitch_v2, NULL},
    {"cuMemAllocHost", 2000, 3020, NULL, (void*)cuMemAllocHost_v2, NULL},
    E(cuMemHostAlloc, 2020),
    E(cuMemFreeHost, 2000),
    E(cuMemAllocManaged, 6000),
    EPT(cuMemAllocAsync, 11020),
    EPT(cuMemFreeAsync, 11020),
    EPT(cuMemAllocFromPoolAsync, 11020),
    E(cuDeviceGetDefaultMemPool, 11020),
    E(cuMemPoolCreate, 11020),
    E(cuMemPoolDestroy, 11020),
    E(cuMemPoolTrimTo, 11020),
    E(cuMemPoolGetAttribute, 11020),
    E(cuMemPoolSetAttribute, 11020),
    E(cuMemAddressReserve, 10020),
    E(cuMemAddressFree, 10020),
    E(cuMemCreate, 10020),
    E(cuMemRelease, 10020),
    E(cuMemMap, 10020),
    E(cuMemUnmap, 10020),
    E(cuMemSetAccess, 10020),
    E(cuMemGetAllocationGranularity, 10020),
    E(cuMemExportToShareableHandle, 10020),
    E(cuMemImportFromShareableHandle, 10020),
    E(cuMemGetAllocationPropertiesFromHandle, 10020),
    E(cuMulticastGetGranularity, 12010),
    E(cuMulticastCreate, 12010),
    E(cuMulticastAddDevice, 12010),
    E(cuMulticastBindMem, 12010),
    E(cuMulticastBindAddr, 12010),
    E(cuMulticastUnbind, 12010),
    {"cuMemHostRegister", 4000, 6050, NULL, (void*)cuMemHostRegister_v2, NULL},
    E(cuMemHostUnregister, 4000),
    {"cuArrayCreate", 2000, 3020, NULL, (void*)cuArrayCreate_v2, NULL},
    {"cuArray3DCreate", 2000, 3020, NULL, (void*)cuArray3DCreate_v2, NULL},
    E(cuMipmappedArrayCreate, 5000),
    E(cuArrayDestroy, 2000),
    E(cuMipmappedArrayDestroy, 5000),
    E(cuIpcGetMemHandle, 4010),
    {"cuIpcOpenMemHandle", 4010, 4010, NULL, (void*)cuIpcOpenMemHandle_v2, NULL},
    E(cuIpcCloseMemHandle, 4010),
    {"cuMemGetAddressRange", 2000, 3020, NULL, (void*)cuMemGetAddressRange_v2, NULL},
    E(cuGraphCreate, 10000),
    E(cuGraphDestroy, 10000),
    E(cuGraphAddMemAllocNode, 11040),
    E(cuGraphAddMemFreeNode, 11040),
    E(cuDeviceGraphMemTrim, 11040),
    E(cuDeviceGetGraphMemAttribute, 11040),
};

EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                    cuuint64_t flags, int* symbolStatus) {
  if (symbol == NULL || pfn == NULL) return CUDA_ERROR_INVALID_VALUE;
  const struct Entry* e = NULL;
  for (size_t i = 0; i < sizeof kEntries / sizeof kEntries[0] && e == NULL; ++i) {
    if (strcmp(kEntries[i].name, symbol) == 0) e = &kEntries[i];
  }
  int status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  void* fn = NULL;
  if (e != NULL && cudaVersion < e->min_version) {
    status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
  } else if (e != NULL) {
    fn = e->v2_from && cudaVersion >= e->v2_from ? e->v2 : e->fn;
    if (e->ptsz && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) fn = e->ptsz;
    if (fn != NULL) status = CU_GET_PROC_ADDRESS_SUCCESS;
  }
  *pfn = fn;
  if (symbolStatus) *symbolStatus = status;
  CUresult r = fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
  fc_log_lookup("cuGetProcAddress_v2", symbol, cudaVersion, flags, fn, r);
  return r;
}

EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                 cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}

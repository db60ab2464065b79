/* Fake CUDA runtime: libcudart.so.13, or libcudart.so.12 when built with
 * -DFAKECUDA_RT_MAJOR=12. Test double for memstep's runtime-API interception;
 * see tests/cuda/README.md.
 *
 * Like the real runtime it
 *  - exports every symbol under the version node libcudart.so.N and is linked
 *    -Bsymbolic, so calls inside it never reach an interposer;
 *  - finds the driver with dlopen("libcuda.so.1") + dlsym(h,
 *    "cuGetProcAddress_v2"), asks that for the driver's own cuGetProcAddress
 *    (12000) and resolves every driver entry point through it, then calls
 *    cuGetExportTable (it accepts only CUDA_ERROR_NOT_SUPPORTED, the fake
 *    driver's answer) and cuInit;
 *  - returns 35 (cudaErrorInsufficientDriver) from every call when that
 *    fails, without touching out-parameters, except the version queries.
 * With FAKECUDA_RT_VIA_DRIVER=1, cudaMalloc/cudaFree/cudaMallocAsync/
 * cudaFreeAsync/cudaMallocFromPoolAsync (and _ptsz) call the driver functions
 * resolved that way; otherwise the runtime allocates through the shared core
 * itself. Errors: 1 invalid value, 2 out of memory, 101 invalid device, or
 * the driver's CUresult unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "fake_types.h"
#include "fakecuda_core.h"

#ifndef FAKECUDA_RT_MAJOR
#define FAKECUDA_RT_MAJOR 13
#endif
#if FAKECUDA_RT_MAJOR == 13
#define RT_VERSION 13000
#define RT_OWNER FC_OWNER_RT13
#else
#define RT_VERSION 12080
#define RT_OWNER FC_OWNER_RT12
#endif
#define EXPORT __attribute__((visibility("default")))

typedef CUresult (*AllocFn)(CUdeviceptr*, size_t);
typedef CUresult (*FreeFn)(CUdeviceptr);
typedef CUresult (*AllocAsyncFn)(CUdeviceptr*, size_t, CUstream);
typedef CUresult (*FreeAsyncFn)(CUdeviceptr, CUstream);
typedef CUresult (*AllocPoolFn)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);

/* Written once under `once`, read-only afterwards. [0] legacy stream, [1] per-thread. */
static struct {
  pthread_once_t once;
  int ok;
  int driver_version;
  PFN_cuGetProcAddress_v2 gpa;
  AllocFn mem_alloc;
  FreeFn mem_free;
  AllocAsyncFn alloc_async[2];
  FreeAsyncFn free_async[2];
  AllocPoolFn alloc_pool[2];
  /* issue 10 coverage (FAKECUDA_RT_VIA_DRIVER=1) */
  CUresult (*host_register)(void*, size_t, unsigned);
  CUresult (*host_unregister)(void*);
  CUresult (*array3d_create)(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*);
  CUresult (*mipmapped_create)(CUmipmappedArray*, const CUDA_ARRAY3D_DESCRIPTOR*, unsigned);
  CUresult (*array_destroy)(CUarray);
  CUresult (*mipmapped_destroy)(CUmipmappedArray);
  CUresult (*ipc_open)(CUdeviceptr*, CUipcMemHandle, unsigned);
  CUresult (*ipc_close)(CUdeviceptr);
  CUresult (*graph_alloc)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                          CUDA_MEM_ALLOC_NODE_PARAMS*);
  CUresult (*graph_free)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUdeviceptr);
} g_drv = {PTHREAD_ONCE_INIT};

static __thread cudaError_t t_last_error;

static int Resolve(const char* name, int version, int per_thread, void* out) {
  int status = -1;
  void* fn = NULL;
  CUresult r = g_drv.gpa(name, &fn, version, per_thread ? 2 : 0, &status);
  if (r != CUDA_SUCCESS || fn == NULL || status != CU_GET_PROC_ADDRESS_SUCCESS) return 0;
  memcpy(out, &fn, sizeof fn);
  return 1;
}

static void LoadDriver(void) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) return;
  PFN_cuGetProcAddress_v2 first = (PFN_cuGetProcAddress_v2)dlsym(h, "cuGetProcAddress_v2");
  if (first == NULL) return;
  void* gpa = NULL;
  int status = -1;
  if (first("cuGetProcAddress", &gpa, 12000, 0, &status) != CUDA_SUCCESS || gpa == NULL) return;
  g_drv.gpa = (PFN_cuGetProcAddress_v2)gpa;
  CUresult (*init)(unsigned) = NULL;
  CUresult (*version)(int*) = NULL;
  CUresult (*export_table)(const void**, const CUuuid*) = NULL;
  int ok = Resolve("cuInit", 2000, 0, &init) && Resolve("cuDriverGetVersion", 2020, 0, &version) &&
           Resolve("cuGetExportTable", 3000, 0, &export_table) &&
           Resolve("cuMemAlloc", 3020, 0, &g_drv.mem_alloc) &&
           Resolve("cuMemFree", 3020, 0, &g_drv.mem_free);
  for (int pt = 0; pt < 2 && ok; ++pt) {
    ok = Resolve("cuMemAllocAsync", 11020, pt, &g_drv.alloc_async[pt]) &&
         Resolve("cuMemFreeAsync", 11020, pt, &g_drv.free_async[pt]) &&
         Resolve("cuMemAllocFromPoolAsync", 11020, pt, &g_drv.alloc_pool[pt]);
  }
  ok = ok && Resolve("cuMemHostRegister", 6050, 0, &g_drv.host_register) &&
       Resolve("cuMemHostUnregister", 4000, 0, &g_drv.host_unregister) &&
       Resolve("cuArray3DCreate", 3020, 0, &g_drv.array3d_create) &&
       Resolve("cuMipmappedArrayCreate", 5000, 0, &g_drv.mipmapped_create) &&
       Resolve("cuArrayDestroy", 2000, 0, &g_drv.array_destroy) &&
       Resolve("cuMipmappedArrayDestroy", 5000, 0, &g_drv.mipmapped_destroy) &&
       Resolve("cuIpcOpenMemHandle", 11000, 0, &g_drv.ipc_open) &&
       Resolve("cuIpcCloseMemHandle", 4010, 0, &g_drv.ipc_close) &&
       Resolve("cuGraphAddMemAllocNode", 11040, 0, &g_drv.graph_alloc) &&
       Resolve("cuGraphAddMemFreeNode", 11040, 0, &g_drv.graph_free);
  if (!ok) return;
  const void* table = NULL;
  CUuuid uuid = {{'m', 'e', 'm', 's', 't', 'e', 'p'}};
  if (export_table(&table, &uuid) != CUDA_ERROR_NOT_SUPPORTED) return;
  if (init(0) != CUDA_SUCCESS || version(&g_drv.driver_version) != CUDA_SUCCESS) return;
  g_drv.ok = 1;
}

static cudaError_t Ret(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

/* Every API entry: the driver is loaded and this thread's context is current. */
static int Ready(void) {
  pthread_once(&g_drv.once, LoadDriver);
  if (!g_drv.ok) {
    t_last_error = cudaErrorInsufficientDriver;
    return 0;
  }
  fc_set_ctx_device(fc_rt_device());
  return 1;
}

#define NO_DRIVER_FAIL(call, kind, size)                                \
  do {                                                                  \
    if (!Ready()) {                                                     \
      fc_log(call, (kind) ? "fail" : "none", kind, -1, size, 0, 0, 35); \
      return cudaErrorInsufficientDriver;                               \
    }                                                                   \
  } while (0)

static cudaError_t Alloc(const char* call, int kind, int dev, uint64_t size, fc_pool* pool,
                         uint64_t aux, void** out) {
  uint64_t addr = 0;
  int err = fc_alloc(call, kind, dev, size, pool, aux, RT_OWNER, &addr);
  if (err == 0) *out = (void*)addr;
  return Ret(err);
}

/* A runtime call handed to the driver: the driver's line carries the event. */
static cudaError_t Delegated(const char* call, int kind, uint64_t size, CUresult r, uint64_t addr,
                             uint64_t aux) {
  fc_log(call, "none", kind, fc_rt_device(), size, addr, aux, r);
  return Ret(r);
}

static cudaError_t DelegatedAlloc(const char* call, int kind, size_t size, CUresult r,
                                  CUdeviceptr d, void** out, uint64_t aux) {
  if (r == CUDA_SUCCESS) *out = (void*)d;
  return Delegated(call, kind, size, r, r == CUDA_SUCCESS ? d : 0, aux);
}

static cudaError_t Free(const char* call, void* p, unsigned mask) {
  if (p == NULL) {
    fc_log(call, "none", 0, -1, 0, 0, 0, 0);
    return cudaSuccess;
  }
  return Ret(fc_free(call, (uint64_t)p, mask));
}

static uint64_t PitchOf(size_t width) { return (width + 511) & ~(uint64_t)511; }

/* ---------------------------------------------------------------- device memory */

EXPORT cudaError_t cudaMalloc(void** devPtr, size_t size) {
  NO_DRIVER_FAIL("cudaMalloc", FC_DEVICE, size);
  if (devPtr == NULL) return Ret(cudaErrorInvalidValue);
  if (fc_via_driver()) {
    CUdeviceptr d = 0;
    fc_enter_runtime();
    CUresult r = g_drv.mem_alloc(&d, size);
    fc_leave_runtime();
    return DelegatedAlloc("cudaMalloc", FC_DEVICE, size, r, d, devPtr, 0);
  }
  return Alloc("cudaMalloc", FC_DEVICE, fc_rt_device(), size, NULL, 0, devPtr);
}

EXPORT cudaError_t cudaFree(void* devPtr) {
  NO_DRIVER_FAIL("cudaFree", 0, 0);
  if (devPtr != NULL && fc_via_driver()) {
    fc_enter_runtime();
    CUresult r = g_drv.mem_free((CUdeviceptr)devPtr);
    fc_leave_runtime();
    return Delegated("cudaFree", 0, 0, r, (uint64_t)devPtr, 0);
  }
  return Free("cudaFree", devPtr, FC_MASK(FC_DEVICE) | FC_MASK(FC_MANAGED));
}

EXPORT cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  NO_DRIVER_FAIL("cudaMallocManaged", FC_MANAGED, size);
  if (devPtr == NULL || (flags != 1 && flags != 2)) return Ret(cudaErrorInvalidValue);
  return Alloc("cudaMallocManaged", FC_MANAGED, fc_rt_device(), size, NULL, 0, devPtr);
}

EXPORT cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) {
  NO_DRIVER_FAIL("cudaMallocPitch", FC_DEVICE, 0);
  if (devPtr == NULL || pitch == NULL) return Ret(cudaErrorInvalidValue);
  uint64_t p = PitchOf(width);
  cudaError_t e = Alloc("cudaMallocPitch", FC_DEVICE, fc_rt_device(), p * height, NULL, 0, devPtr);
  if (e == cudaSuccess) *pitch = p;
  return e;
}

EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr* pitchedDevPtr, struct cudaExtent extent) {
  NO_DRIVER_FAIL("cudaMalloc3D", FC_DEVICE, 0);
  if (pitchedDevPtr == NULL) return Ret(cudaErrorInvalidValue);
  uint64_t p = PitchOf(extent.width);
  void* ptr = NULL;
  cudaError_t e = Alloc("cudaMalloc3D", FC_DEVICE, fc_rt_device(), p * extent.height * extent.depth,
                        NULL, 0, &ptr);
  if (e == cudaSuccess) {
    pitchedDevPtr->ptr = ptr;
    pitchedDevPtr->pitch = p;
    pitchedDevPtr->xsize = extent.width;
    pitchedDevPtr->ysize = extent.height;
  }
  return e;
}

/* ---------------------------------------------------------------- pinned host memory */

EXPORT cudaError_t cudaMallocHost(void** ptr, size_t size) {
  NO_DRIVER_FAIL("cudaMallocHost", FC_PINNED, size);
  if (ptr == NULL) return Ret(cudaErrorInvalidValue);
  return Alloc("cudaMallocHost", FC_PINNED, -1, size, NULL, 0, ptr);
}

EXPORT cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  NO_DRIVER_FAIL("cudaHostAlloc", FC_PINNED, size);
  if (pHost == NULL || flags > 0xF) return Ret(cudaErrorInvalidValue);
  return Alloc("cudaHostAlloc", FC_PINNED, -1, size, NULL, 0, pHost);
}

EXPORT cudaError_t cudaFreeHost(void* ptr) {
  NO_DRIVER_FAIL("cudaFreeHost", 0, 0);
  return Free("cudaFreeHost", ptr, FC_MASK(FC_PINNED));
}

/* ---------------------------------------------------------------- stream-ordered */

static cudaError_t MallocAsync(const char* call, int pt, void** devPtr, size_t size) {
  NO_DRIVER_FAIL(call, FC_POOL, size);
  if (devPtr == NULL) return Ret(cudaErrorInvalidValue);
  if (fc_via_driver()) {
    CUdeviceptr d = 0;
    fc_enter_runtime();
    CUresult r = g_drv.alloc_async[pt](&d, size, NULL);
    fc_leave_runtime();
    return DelegatedAlloc(call, FC_POOL, size, r, d, devPtr, 0);
  }
  int dev = fc_rt_device();
  return Alloc(call, FC_POOL, dev, size, fc_default_pool(dev), 0, devPtr);
}

static cudaError_t MallocFromPool(const char* call, int pt, void** ptr, size_t size,
                                  cudaMemPool_t memPool) {
  NO_DRIVER_FAIL(call, FC_POOL, size);
  fc_pool* pool = (fc_pool*)memPool;
  if (ptr == NULL || !fc_pool_valid(pool)) return Ret(cudaErrorInvalidValue);
  if (fc_via_driver()) {
    CUdeviceptr d = 0;
    fc_enter_runtime();
    CUresult r = g_drv.alloc_pool[pt](&d, size, (CUmemoryPool)memPool, NULL);
    fc_leave_runtime();
    return DelegatedAlloc(call, FC_POOL, size, r, d, ptr, (uint64_t)memPool);
  }
  return Alloc(call, FC_POOL, fc_pool_dev(pool), size, pool, (uint64_t)memPool, ptr);
}

static cudaError_t FreeAsync(const char* call, int pt, void* devPtr) {
  NO_DRIVER_FAIL(call, 0, 0);
  if (devPtr != NULL && fc_via_driver()) {
    fc_enter_runtime();
    CUresult r = g_drv.free_async[pt]((CUdeviceptr)devPtr, NULL);
    fc_leave_runtime();
    return Delegated(call, 0, 0, r, (uint64_t)devPtr, 0);
  }
  return Free(call, devPtr, FC_MASK(FC_POOL));
}

EXPORT cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t s) {
  (void)s;
  return MallocAsync("cudaMallocAsync", 0, devPtr, size);
}
EXPORT cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t s) {
  (void)s;
  return MallocAsync("cudaMallocAsync_ptsz", 1, devPtr, size);
}
EXPORT cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool,
                                           cudaStream_t s) {
  (void)s;
  return MallocFromPool("cudaMallocFromPoolAsync", 0, ptr, size, pool);
}
EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t pool,
                                                cudaStream_t s) {
  (void)s;
  return MallocFromPool("cudaMallocFromPoolAsync_ptsz", 1, ptr, size, pool);
}
EXPORT cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t s) {
  (void)s;
  return FreeAsync("cudaFreeAsync", 0, devPtr);
}
EXPORT cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t s) {
  (void)s;
  return FreeAsync("cudaFreeAsync_ptsz", 1, devPtr);
}

/* ---------------------------------------------------------------- pools */

EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  NO_DRIVER_FAIL("cudaDeviceGetDefaultMemPool", 0, 0);
  fc_pool* p = fc_default_pool(device);
  if (memPool == NULL || p == NULL) return Ret(cudaErrorInvalidDevice);
  *memPool = (cudaMemPool_t)p;
  return cudaSuccess;
}

EXPORT cudaError_t cudaMemPoolCreate(cudaMemPool_t* memPool, const struct cudaMemPoolProps* props) {
  NO_DRIVER_FAIL("cudaMemPoolCreate", 0, 0);
  if (memPool == NULL || props == NULL || props->allocType != 1 || props->location.type != 1) {
    return Ret(cudaErrorInvalidValue);
  }
  fc_pool* p = fc_pool_create(props->location.id);
  if (p == NULL) return Ret(cudaErrorInvalidValue);
  *memPool = (cudaMemPool_t)p;
  return cudaSuccess;
}

EXPORT cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool) {
  NO_DRIVER_FAIL("cudaMemPoolDestroy", 0, 0);
  return Ret(fc_pool_destroy((fc_pool*)memPool) == 0 ? cudaSuccess : cudaErrorInvalidValue);
}

EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) {
  NO_DRIVER_FAIL("cudaMemPoolTrimTo", 0, 0);
  if (!fc_pool_valid((fc_pool*)memPool)) return Ret(cudaErrorInvalidValue);
  fc_pool_trim((fc_pool*)memPool, minBytesToKeep);
  return cudaSuccess;
}

EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, int attr, void* value) {
  NO_DRIVER_FAIL("cudaMemPoolGetAttribute", 0, 0);
  uint64_t v = 0;
  if (value == NULL || !fc_pool_valid((fc_pool*)memPool) ||
      fc_pool_attr((fc_pool*)memPool, attr, &v)) {
    return Ret(cudaErrorInvalidValue);
  }
  memcpy(value, &v, sizeof v);
  return cudaSuccess;
}

EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, int attr, void* value) {
  NO_DRIVER_FAIL("cudaMemPoolSetAttribute", 0, 0);
  uint64_t v = 0;
  if (value == NULL || !fc_pool_valid((fc_pool*)memPool)) return Ret(cudaErrorInvalidValue);
  memcpy(&v, value, sizeof v);
  return Ret(fc_pool_set_attr((fc_pool*)memPool, attr, v) == 0 ? cudaSuccess
                                                               : cudaErrorInvalidValue);
}

/* ---------------------------------------------------------------- devices */

EXPORT cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  NO_DRIVER_FAIL("cudaMemGetInfo", 0, 0);
  if (free_bytes == NULL || total == NULL) return Ret(cudaErrorInvalidValue);
  uint64_t t = fc_budget_total();
  *total = t;
  *free_bytes = t - fc_budget_used(fc_rt_device());
  fc_log("cudaMemGetInfo", "none", 0, fc_rt_device(), *free_bytes, 0, 0, 0);
  return cudaSuccess;
}

EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  NO_DRIVER_FAIL("cudaGetDeviceCount", 0, 0);
  if (count == NULL) return Ret(cudaErrorInvalidValue);
  *count = fc_device_count();
  return cudaSuccess;
}

EXPORT cudaError_t cudaGetDevice(int* device) {
  NO_DRIVER_FAIL("cudaGetDevice", 0, 0);
  if (device == NULL) return Ret(cudaErrorInvalidValue);
  *device = fc_rt_device();
  return cudaSuccess;
}

EXPORT cudaError_t cudaSetDevice(int device) {
  NO_DRIVER_FAIL("cudaSetDevice", 0, 0);
  if (device < 0 || device >= fc_device_count()) return Ret(cudaErrorInvalidDevice);
  fc_set_rt_device(device);
  return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceSynchronize(void) {
  NO_DRIVER_FAIL("cudaDeviceSynchronize", 0, 0);
  return cudaSuccess;
}

EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  (void)s;
  NO_DRIVER_FAIL("cudaStreamSynchronize", 0, 0);
  return cudaSuccess;
}

/* ---------------------------------------------------------------- issue 10 coverage
 * Like cudaMalloc: with FAKECUDA_RT_VIA_DRIVER=1 each of these calls the
 * driver function the real runtime would (arrays through cuArray3DCreate). */

static cudaError_t ViaDriver(const char* call, int kind, CUresult r, uint64_t addr) {
  return Delegated(call, kind, 0, r, addr, 0);
}

EXPORT cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  NO_DRIVER_FAIL("cudaHostRegister", FC_PINNED, size);
  if (flags > 0xF) return Ret(cudaErrorInvalidValue);
  if (fc_via_driver()) {
    fc_enter_runtime();
    CUresult r = g_drv.host_register(ptr, size, flags);
    fc_leave_runtime();
    return ViaDriver("cudaHostRegister", FC_PINNED, r, (uint64_t)ptr);
  }
  return Ret(fc_host_register("cudaHostRegister", ptr, size));
}

EXPORT cudaError_t cudaHostUnregister(void* ptr) {
  NO_DRIVER_FAIL("cudaHostUnregister", 0, 0);
  if (fc_via_driver()) {
    fc_enter_runtime();
    CUresult r = g_drv.host_unregister(ptr);
    fc_leave_runtime();
    return ViaDriver("cudaHostUnregister", 0, r, (uint64_t)ptr);
  }
  return Ret(fc_host_unregister("cudaHostUnregister", ptr));
}

/* A channel description as a CUarray_format and channel count (0: unsupported). */
static int ChannelFormat(const struct cudaChannelFormatDesc* d, unsigned* channels) {
  int bits = d->x;
  *channels = (d->x > 0) + (d->y > 0) + (d->z > 0) + (d->w > 0);
  if ((d->y && d->y != bits) || (d->z && d->z != bits) || (d->w && d->w != bits)) return 0;
  switch (d->f) {
    case cudaChannelFormatKindFloat:
      return bits == 32 ? 0x20 : bits == 16 ? 0x10 : 0;
    case cudaChannelFormatKindUnsigned:
      return bits == 8 ? 0x01 : bits == 16 ? 0x02 : bits == 32 ? 0x03 : 0;
    case cudaChannelFormatKindSigned:
      return bits == 8 ? 0x08 : bits == 16 ? 0x09 : bits == 32 ? 0x0a : 0;
  }
  return 0;
}

static uint64_t RtArrayBytes(uint64_t elem, uint64_t w, uint64_t h, uint64_t d, unsigned levels) {
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

static cudaError_t MallocArrayCommon(const char* call, void** out,
                                     const struct cudaChannelFormatDesc* desc, size_t w, size_t h,
                                     size_t d, unsigned levels, unsigned flags) {
  NO_DRIVER_FAIL(call, FC_DEVICE, 0);
  if (out == NULL || desc == NULL) return Ret(cudaErrorInvalidValue);
  unsigned channels = 0;
  int format = ChannelFormat(desc, &channels);
  if (format == 0 || w == 0) return Ret(cudaErrorInvalidValue);
  if (fc_via_driver()) {
    CUDA_ARRAY3D_DESCRIPTOR ad = {w, h, d, format, channels, flags};
    CUarray a = NULL;
    fc_enter_runtime();
    CUresult r = levels ? g_drv.mipmapped_create((CUmipmappedArray*)&a, &ad, levels)
                        : g_drv.array3d_create(&a, &ad);
    fc_leave_runtime();
    if (r == CUDA_SUCCESS) *out = a;
    return ViaDriver(call, FC_DEVICE, r, r == CUDA_SUCCESS ? (uint64_t)a : 0);
  }
  uint64_t bytes = RtArrayBytes((uint64_t)desc->x / 8 * channels, w, h, d, levels ? levels : 1);
  uint64_t handle = 0;
  cudaError_t e = fc_array_create(call, fc_rt_device(), bytes, RT_OWNER, &handle);
  if (e == cudaSuccess) *out = (void*)handle;
  return Ret(e);
}

EXPORT cudaError_t cudaMallocArray(cudaArray_t* array, const struct cudaChannelFormatDesc* desc,
                                   size_t width, size_t height, unsigned int flags) {
  return MallocArrayCommon("cudaMallocArray", (void**)array, desc, width, height, 0, 0, flags);
}

EXPORT cudaError_t cudaMalloc3DArray(cudaArray_t* array, const struct cudaChannelFormatDesc* desc,
                                     struct cudaExtent extent, unsigned int flags) {
  return MallocArrayCommon("cudaMalloc3DArray", (void**)array, desc, extent.width, extent.height,
                           extent.depth, 0, flags);
}

EXPORT cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t* array,
                                            const struct cudaChannelFormatDesc* desc,
                                            struct cudaExtent extent, unsigned int levels,
                                            unsigned int flags) {
  if (levels == 0) return Ret(cudaErrorInvalidValue);
  return MallocArrayCommon("cudaMallocMipmappedArray", (void**)array, desc, extent.width,
                           extent.height, extent.depth, levels, flags);
}

static cudaError_t FreeArrayCommon(const char* call, void* a, int mipmapped) {
  NO_DRIVER_FAIL(call, 0, 0);
  if (a == NULL) return cudaSuccess;
  if (fc_via_driver()) {
    fc_enter_runtime();
    CUresult r =
        mipmapped ? g_drv.mipmapped_destroy((CUmipmappedArray)a) : g_drv.array_destroy((CUarray)a);
    fc_leave_runtime();
    return ViaDriver(call, 0, r, (uint64_t)a);
  }
  return Ret(fc_array_destroy(call, (uint64_t)a) ? cudaErrorInvalidValue : cudaSuccess);
}

EXPORT cudaError_t cudaFreeArray(cudaArray_t a) { return FreeArrayCommon("cudaFreeArray", a, 0); }
EXPORT cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t a) {
  return FreeArrayCommon("cudaFreeMipmappedArray", a, 1);
}

EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* h, void* devPtr) {
  NO_DRIVER_FAIL("cudaIpcGetMemHandle", 0, 0);
  if (h == NULL) return Ret(cudaErrorInvalidValue);
  return Ret(fc_ipc_get((uint64_t)devPtr, (fc_ipc_handle*)h) ? cudaErrorInvalidValue : cudaSuccess);
}

EXPORT cudaError_t cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t h, unsigned int flags) {
  NO_DRIVER_FAIL("cudaIpcOpenMemHandle", FC_DEVICE, 0);
  if (devPtr == NULL || flags > 1) return Ret(cudaErrorInvalidValue);
  if (fc_via_driver()) {
    CUdeviceptr d = 0;
    CUipcMemHandle dh;
    memcpy(&dh, &h, sizeof dh);
    fc_enter_runtime();
    CUresult r = g_drv.ipc_open(&d, dh, flags);
    fc_leave_runtime();
    if (r == CUDA_SUCCESS) *devPtr = (void*)d;
    return ViaDriver("cudaIpcOpenMemHandle", FC_DEVICE, r, d);
  }
  uint64_t addr = 0;
  cudaError_t e = fc_ipc_open("cudaIpcOpenMemHandle", (const fc_ipc_handle*)&h, RT_OWNER, &addr);
  if (e == cudaSuccess) *devPtr = (void*)addr;
  return Ret(e);
}

EXPORT cudaError_t cudaIpcCloseMemHandle(void* devPtr) {
  NO_DRIVER_FAIL("cudaIpcCloseMemHandle", 0, 0);
  if (fc_via_driver()) {
    fc_enter_runtime();
    CUresult r = g_drv.ipc_close((CUdeviceptr)devPtr);
    fc_leave_runtime();
    return ViaDriver("cudaIpcCloseMemHandle", 0, r, (uint64_t)devPtr);
  }
  return Ret(fc_ipc_close("cudaIpcCloseMemHandle", (uint64_t)devPtr) ? cudaErrorInvalidValue
                                                                     : cudaSuccess);
}

static char g_rt_graphs[64];
static int g_rt_graph_next;
static char g_rt_node[1];

EXPORT cudaError_t cudaGraphCreate(cudaGraph_t* g, unsigned int flags) {
  NO_DRIVER_FAIL("cudaGraphCreate", 0, 0);
  if (g == NULL || flags != 0) return Ret(cudaErrorInvalidValue);
  int i = __atomic_fetch_add(&g_rt_graph_next, 1, __ATOMIC_RELAXED);
  if (i >= 64) return Ret(cudaErrorMemoryAllocation);
  *g = (cudaGraph_t)&g_rt_graphs[i];
  return cudaSuccess;
}

EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  NO_DRIVER_FAIL("cudaGraphDestroy", 0, 0);
  return g == NULL ? Ret(cudaErrorInvalidValue) : cudaSuccess;
}

EXPORT cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t* node, cudaGraph_t g,
                                            const cudaGraphNode_t* deps, size_t n,
                                            struct cudaMemAllocNodeParams* p) {
  NO_DRIVER_FAIL("cudaGraphAddMemAllocNode", FC_POOL, 0);
  if (node == NULL || g == NULL || p == NULL || p->poolProps.allocType != 1 ||
      p->poolProps.location.type != 1) {
    return Ret(cudaErrorInvalidValue);
  }
  if (fc_via_driver()) {
    fc_enter_runtime();
    CUresult r = g_drv.graph_alloc((CUgraphNode*)node, (CUgraph)g, (const CUgraphNode*)deps, n,
                                   (CUDA_MEM_ALLOC_NODE_PARAMS*)p);
    fc_leave_runtime();
    return Delegated("cudaGraphAddMemAllocNode", FC_POOL, p->bytesize, r,
                     r == CUDA_SUCCESS ? (uint64_t)p->dptr : 0, (uint64_t)g);
  }
  uint64_t addr = 0;
  cudaError_t e = fc_graph_alloc("cudaGraphAddMemAllocNode", p->poolProps.location.id, p->bytesize,
                                 (uint64_t)g, RT_OWNER, &addr);
  if (e == cudaSuccess) {
    p->dptr = (void*)addr;
    *node = (cudaGraphNode_t)g_rt_node;
  }
  return Ret(e);
}

EXPORT cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t* node, cudaGraph_t g,
                                           const cudaGraphNode_t* deps, size_t n, void* dptr) {
  NO_DRIVER_FAIL("cudaGraphAddMemFreeNode", 0, 0);
  if (node == NULL || g == NULL) return Ret(cudaErrorInvalidValue);
  if (fc_via_driver()) {
    fc_enter_runtime();
    CUresult r = g_drv.graph_free((CUgraphNode*)node, (CUgraph)g, (const CUgraphNode*)deps, n,
                                  (CUdeviceptr)dptr);
    fc_leave_runtime();
    return ViaDriver("cudaGraphAddMemFreeNode", 0, r, (uint64_t)dptr);
  }
  if (fc_graph_free("cudaGraphAddMemFreeNode", (uint64_t)dptr)) return Ret(cudaErrorInvalidValue);
  *node = (cudaGraphNode_t)g_rt_node;
  return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceGraphMemTrim(int device) {
  NO_DRIVER_FAIL("cudaDeviceGraphMemTrim", 0, 0);
  if (device < 0 || device >= fc_device_count()) return Ret(cudaErrorInvalidDevice);
  fc_graph_trim(device);
  return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceGetGraphMemAttribute(int device, int attr, void* value) {
  NO_DRIVER_FAIL("cudaDeviceGetGraphMemAttribute", 0, 0);
  uint64_t v = 0;
  if (value == NULL || fc_graph_attr(device, attr, &v)) return Ret(cudaErrorInvalidValue);
  memcpy(value, &v, sizeof v);
  return cudaSuccess;
}

/* ---------------------------------------------------------------- driver entry points */

static cudaError_t EntryPoint(const char* call, const char* symbol, void** funcPtr, int version,
                              unsigned long long flags, int* status) {
  NO_DRIVER_FAIL(call, 0, 0);
  if (symbol == NULL || funcPtr == NULL) return Ret(cudaErrorInvalidValue);
  int st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = g_drv.gpa(symbol, funcPtr, version, flags, &st);
  if (status) *status = st;
  fc_log_lookup(call, symbol, version, flags, *funcPtr, r);
  /* A symbol the driver lacks is reported through *status, not as an error. */
  return r == CUDA_ERROR_NOT_FOUND ? cudaSuccess : Ret(r);
}

/* cudaEnableDefault means the per-thread default stream in the _ptsz forms. */
static unsigned long long PtszFlags(unsigned long long flags) { return flags == 0 ? 2 : flags; }

EXPORT cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr,
                                           unsigned long long flags, int* driverStatus) {
  return EntryPoint("cudaGetDriverEntryPoint", symbol, funcPtr, RT_VERSION, flags, driverStatus);
}
EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr,
                                                unsigned long long flags, int* driverStatus) {
  return EntryPoint("cudaGetDriverEntryPoint_ptsz", symbol, funcPtr, RT_VERSION, PtszFlags(flags),
                    driverStatus);
}
EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                                    unsigned int cudaVersion,
                                                    unsigned long long flags, int* driverStatus) {
  return EntryPoint("cudaGetDriverEntryPointByVersion", symbol, funcPtr, (int)cudaVersion, flags,
                    driverStatus);
}
EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr,
                                                         unsigned int cudaVersion,
                                                         unsigned long long flags,
                                                         int* driverStatus) {
  return EntryPoint("cudaGetDriverEntryPointByVersion_ptsz", symbol, funcPtr, (int)cudaVersion,
                    PtszFlags(flags), driverStatus);
}

/* ---------------------------------------------------------------- versions, errors */

EXPORT cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  if (runtimeVersion == NULL) return Ret(cudaErrorInvalidValue);
  *runtimeVersion = RT_VERSION;
  return cudaSuccess;
}

EXPORT cudaError_t cudaDriverGetVersion(int* driverVersion) {
  if (driverVersion == NULL) return Ret(cudaErrorInvalidValue);
  pthread_once(&g_drv.once, LoadDriver);
  *driverVersion = g_drv.ok ? g_drv.driver_version : 0;
  return cudaSuccess;
}

EXPORT cudaError_t cudaGetLastError(void) {
  if (!Ready()) return cudaErrorInsufficientDriver;
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

EXPORT cudaError_t cudaPeekAtLastError(void) {
  if (!Ready()) return cudaErrorInsufficientDriver;
  return t_last_error;
}

EXPORT const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorSymbolNotFound:
      return "cudaErrorSymbolNotFound";
    default:
      return "cudaErrorUnknown";
  }
}

EXPORT const char* cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }

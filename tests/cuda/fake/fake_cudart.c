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

#define NO_DRIVER_FAIL(call, kind, size)                                           \
  do {                                                                             \
    if (!Ready()) {                                                                \
      fc_log(call, (kind) ? "fail" : "none", kind, -1, size, 0, 0, 35);            \
      return cudaErrorInsufficientDriver;                                          \
    }                                                                              \
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
  if (value == NULL || !fc_pool_valid((fc_pool*)memPool) || fc_pool_attr((fc_pool*)memPool, attr, &v)) {
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
  return Ret(fc_pool_set_attr((fc_pool*)memPool, attr, v) == 0 ? cudaSuccess : cudaErrorInvalidValue);
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
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorSymbolNotFound: return "cudaErrorSymbolNotFound";
    default: return "cudaErrorUnknown";
  }
}

EXPORT const char* cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }

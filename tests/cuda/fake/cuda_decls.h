/* Prototypes of the CUDA runtime and driver functions the test programs call,
 * as the CUDA 13 headers declare them (the C symbols; the C++ overloads of
 * cuda_runtime.h are inline wrappers of these). The fakes define them; the
 * real libcudart.so.13 exports the runtime ones. C99 and C++.
 */
#ifndef MEMSTEP_TESTS_CUDA_FAKE_CUDA_DECLS_H_
#define MEMSTEP_TESTS_CUDA_FAKE_CUDA_DECLS_H_

#include "fake_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- runtime */
cudaError_t cudaMalloc(void** devPtr, size_t size);
cudaError_t cudaFree(void* devPtr);
cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags);
cudaError_t cudaMallocHost(void** ptr, size_t size);
cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height);
cudaError_t cudaMalloc3D(struct cudaPitchedPtr* pitchedDevPtr, struct cudaExtent extent);
cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool,
                                    cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t pool,
                                         cudaStream_t stream);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device);
cudaError_t cudaMemPoolCreate(cudaMemPool_t* memPool, const struct cudaMemPoolProps* props);
cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep);
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, int attr, void* value);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    int* driverStatus);
cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr,
                                         unsigned long long flags, int* driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             int* driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr,
                                                  unsigned int cudaVersion,
                                                  unsigned long long flags, int* driverStatus);
cudaError_t cudaRuntimeGetVersion(int* runtimeVersion);
cudaError_t cudaDriverGetVersion(int* driverVersion);
cudaError_t cudaGetLastError(void);
const char* cudaGetErrorString(cudaError_t error);

/* ---- driver (linked with -lcuda; other programs resolve them at run time) */
CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice* device, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetDevice(CUdevice* device);
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes);
CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags);
CUresult cuMemAllocHost_v2(void** pp, size_t bytesize);
CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags);
CUresult cuMemFreeHost(void* p);
CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev);
CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps);
CUresult cuMemPoolDestroy(CUmemoryPool pool);
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total);

/* ---- VMM function types, as PyTorch resolves them (cudaTypedefs.h) */
typedef CUresult (*PFN_cuMemAddressReserve)(CUdeviceptr* ptr, size_t size, size_t alignment,
                                            CUdeviceptr addr, unsigned long long flags);
typedef CUresult (*PFN_cuMemAddressFree)(CUdeviceptr ptr, size_t size);
typedef CUresult (*PFN_cuMemCreate)(CUmemGenericAllocationHandle* handle, size_t size,
                                    const CUmemAllocationProp* prop, unsigned long long flags);
typedef CUresult (*PFN_cuMemRelease)(CUmemGenericAllocationHandle handle);
typedef CUresult (*PFN_cuMemMap)(CUdeviceptr ptr, size_t size, size_t offset,
                                 CUmemGenericAllocationHandle handle, unsigned long long flags);
typedef CUresult (*PFN_cuMemUnmap)(CUdeviceptr ptr, size_t size);
typedef CUresult (*PFN_cuMemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                       size_t count);
typedef CUresult (*PFN_cuMemGetAllocationGranularity)(size_t* granularity,
                                                      const CUmemAllocationProp* prop, int option);
typedef CUresult (*PFN_cuMemAlloc_v2)(CUdeviceptr* dptr, size_t bytesize);
/* Sharing and multicast (cudaTypedefs.h: _v10020, _v11020 and _v12010 ABIs). */
typedef CUresult (*PFN_cuMemExportToShareableHandle)(void* shareableHandle,
                                                     CUmemGenericAllocationHandle handle,
                                                     int handleType, unsigned long long flags);
typedef CUresult (*PFN_cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle* handle,
                                                       void* osHandle, int shHandleType);
typedef CUresult (*PFN_cuMemPoolSetAttribute)(CUmemoryPool pool, int attr, void* value);
typedef CUresult (*PFN_cuMemPoolTrimTo)(CUmemoryPool pool, size_t minBytesToKeep);
typedef CUresult (*PFN_cuMulticastCreate)(CUmemGenericAllocationHandle* mcHandle,
                                          const CUmulticastObjectProp* prop);
typedef CUresult (*PFN_cuMulticastAddDevice)(CUmemGenericAllocationHandle mcHandle, CUdevice dev);
typedef CUresult (*PFN_cuMulticastBindMem)(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                           CUmemGenericAllocationHandle memHandle, size_t memOffset,
                                           size_t size, unsigned long long flags);
typedef CUresult (*PFN_cuMulticastBindAddr)(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                            CUdeviceptr memptr, size_t size,
                                            unsigned long long flags);
typedef CUresult (*PFN_cuMulticastUnbind)(CUmemGenericAllocationHandle mcHandle, CUdevice dev,
                                          size_t mcOffset, size_t size);
typedef CUresult (*PFN_cuMemFree_v2)(CUdeviceptr dptr);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MEMSTEP_TESTS_CUDA_FAKE_CUDA_DECLS_H_ */

/* CUDA types and constants used by the test doubles and the test programs.
 *
 * Declared here from the CUDA 13 headers' documented ABI (cuda_runtime_api.h,
 * driver_types.h, cuda.h), so that nothing in tests/cuda needs the toolkit:
 * CI has none. Only what the fakes implement is declared. C99 and C++.
 */
#ifndef MEMSTEP_TESTS_CUDA_FAKE_FAKE_TYPES_H_
#define MEMSTEP_TESTS_CUDA_FAKE_FAKE_TYPES_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- runtime (driver_types.h) */
typedef int cudaError_t;
enum {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInsufficientDriver = 35,
  cudaErrorInvalidDevice = 101,
  cudaErrorSymbolNotFound = 500,
};
typedef struct CUstream_st* cudaStream_t;
typedef struct CUmemPoolHandle_st* cudaMemPool_t;

struct cudaPitchedPtr {
  void* ptr;
  size_t pitch;
  size_t xsize;
  size_t ysize;
};
struct cudaExtent {
  size_t width; /* bytes for linear memory */
  size_t height;
  size_t depth;
};
struct cudaMemLocation {
  int type; /* cudaMemLocationTypeDevice = 1 */
  int id;
};
struct cudaMemPoolProps {
  int allocType; /* cudaMemAllocationTypePinned = 1 */
  int handleTypes;
  struct cudaMemLocation location;
  void* win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
};
enum {
  cudaMemPoolAttrReleaseThreshold = 4,
  cudaMemPoolAttrReservedMemCurrent = 5,
  cudaMemPoolAttrReservedMemHigh = 6,
  cudaMemPoolAttrUsedMemCurrent = 7,
  cudaMemPoolAttrUsedMemHigh = 8,
};
/* cudaGetDriverEntryPoint flags (same values as CU_GET_PROC_ADDRESS_*). */
enum {
  cudaEnableDefault = 0,
  cudaEnableLegacyStream = 1,
  cudaEnablePerThreadDefaultStream = 2,
};
/* enum cudaDriverEntryPointQueryResult, same values as CUdriverProcAddressQueryResult. */
enum {
  cudaDriverEntryPointSuccess = 0,
  cudaDriverEntryPointSymbolNotFound = 1,
  cudaDriverEntryPointVersionNotSufficent = 2,
};
enum { cudaHostAllocDefault = 0, cudaMemAttachGlobal = 1 };

/* ---- driver (cuda.h) */
typedef int CUresult;
enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_SUPPORTED = 801,
};
typedef unsigned long long CUdeviceptr;
typedef unsigned int CUdeviceptr_v1; /* cuMemAlloc before 3020: 32-bit pointers */
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUmemPoolHandle_st* CUmemoryPool;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef uint64_t cuuint64_t;

typedef struct CUmemLocation_st {
  int type; /* CU_MEM_LOCATION_TYPE_DEVICE = 1, HOST = 2 */
  int id;
} CUmemLocation;
typedef struct CUmemAllocationProp_st {
  int type; /* CU_MEM_ALLOCATION_TYPE_PINNED = 1 */
  int requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;
typedef struct CUmemAccessDesc_st {
  CUmemLocation location;
  int flags; /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 */
} CUmemAccessDesc;
typedef struct CUmemPoolProps_st {
  int allocType;
  int handleTypes;
  CUmemLocation location;
  void* win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
} CUmemPoolProps;
typedef struct CUuuid_st {
  char bytes[16];
} CUuuid;

enum { CU_MEM_LOCATION_TYPE_DEVICE = 1, CU_MEM_ALLOCATION_TYPE_PINNED = 1 };
enum { CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 };
enum { CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2 };
enum {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

/* ---- issue 10 coverage */
typedef struct CUarray_st* CUarray;
typedef struct CUmipmappedArray_st* CUmipmappedArray;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphNode_st* CUgraphNode;
typedef struct CUarray_st* cudaArray_t;
typedef struct CUmipmappedArray_st* cudaMipmappedArray_t;
typedef struct CUgraph_st* cudaGraph_t;
typedef struct CUgraphNode_st* cudaGraphNode_t;
enum { CU_AD_FORMAT_UNSIGNED_INT8 = 0x01, CU_AD_FORMAT_HALF = 0x10, CU_AD_FORMAT_FLOAT = 0x20 };
typedef struct CUDA_ARRAY_DESCRIPTOR_st {
  size_t Width;
  size_t Height;
  int Format;
  unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;
typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
  size_t Width;
  size_t Height;
  size_t Depth;
  int Format;
  unsigned int NumChannels;
  unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;
enum cudaChannelFormatKind {
  cudaChannelFormatKindSigned = 0,
  cudaChannelFormatKindUnsigned = 1,
  cudaChannelFormatKindFloat = 2,
};
struct cudaChannelFormatDesc {
  int x, y, z, w;
  enum cudaChannelFormatKind f;
};
typedef struct CUipcMemHandle_st {
  char reserved[64];
} CUipcMemHandle;
typedef struct cudaIpcMemHandle_st {
  char reserved[64];
} cudaIpcMemHandle_t;
enum { cudaIpcMemLazyEnablePeerAccess = 1 };
typedef struct CUDA_MEM_ALLOC_NODE_PARAMS_st {
  CUmemPoolProps poolProps;
  const CUmemAccessDesc* accessDescs;
  size_t accessDescCount;
  size_t bytesize;
  CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS;
struct cudaMemAllocNodeParams {
  struct cudaMemPoolProps poolProps;
  const void* accessDescs; /* const struct cudaMemAccessDesc* */
  size_t accessDescCount;
  size_t bytesize;
  void* dptr;
};
enum {
  cudaGraphMemAttrUsedMemCurrent = 0,
  cudaGraphMemAttrUsedMemHigh = 1,
  cudaGraphMemAttrReservedMemCurrent = 2,
  cudaGraphMemAttrReservedMemHigh = 3,
};
enum { cudaErrorHostMemoryAlreadyRegistered = 712, cudaErrorHostMemoryNotRegistered = 713 };
/* Sharing VMM memory (cuMemExportToShareableHandle / ...Import...) and
 * multicast objects (cuda.h of CUDA 13.0: CUmemAllocationHandleType,
 * CUmulticastObjectProp). */
enum { CU_MEM_HANDLE_TYPE_NONE = 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1 };
typedef struct CUmulticastObjectProp_st {
  unsigned int numDevices;
  size_t size;
  unsigned long long handleTypes;
  unsigned long long flags;
} CUmulticastObjectProp;

/* cuGetProcAddress (CUDA 11.3-11.8 ABI) and cuGetProcAddress_v2 (12.0+). */
typedef CUresult (*PFN_cuGetProcAddress_v1)(const char* symbol, void** pfn, int cudaVersion,
                                            cuuint64_t flags);
typedef CUresult (*PFN_cuGetProcAddress_v2)(const char* symbol, void** pfn, int cudaVersion,
                                            cuuint64_t flags, int* symbolStatus);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MEMSTEP_TESTS_CUDA_FAKE_FAKE_TYPES_H_ */

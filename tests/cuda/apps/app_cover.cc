// app_cover: the APIs of issue 10 item 3 (docs/gpu.md "What is counted
// where"): registered host memory, CUDA arrays, IPC-opened memory, a
// non-default pool's reserved/used bytes and graph memory nodes. In the
// via_driver mode the fake runtime hands each call to the driver function the
// real runtime uses, so memstep must count the driver call, once.
//
// Planted facts (sizes in bytes):
//   step 0 register: cudaHostRegister R 64 KiB+0 (pinned_host, device -1);
//                    registering R again fails with 712; cudaHostUnregister R;
//                    unregistering it again fails (713) and records nothing
//   step 1 arrays  : cudaMallocArray float4 100 x 30 = 48000 (freed),
//                    cudaMalloc3DArray float 64 x 32 x 8 = 65536 (kept),
//                    cudaMallocMipmappedArray uchar 256 x 256, 3 levels =
//                    65536 + 16384 + 4096 = 86016 (freed)
//   step 2 ipc     : a fork child allocates C 1 MiB+17 and sends its IPC
//                    handle; the parent opens it twice (one DEV_ALLOC: the
//                    same pointer, counted once), closes it twice (the second
//                    close frees it). The child's trace has C only.
//   step 3 pools   : pool P created; cudaMallocFromPoolAsync 3 MiB+1 (kept
//                    to step 4) and 1 MiB (freed): at the step end P has
//                    reserved 6 MiB, used 3 MiB+1 (COUNTER records)
//   step 4 pools   : cudaMemPoolTrimTo(P, 0): reserved 4 MiB (COUNTERs at the
//                    trim); the block freed, P destroyed
//   step 5 graphs  : graph G; alloc nodes N1 5 MiB+3 and N2 1 MiB, a free
//                    node for N2: the device's graph memory has reserved
//                    8 MiB, used 5 MiB+3 at the step end
//   step 6 graphs  : cudaDeviceGraphMemTrim(0): reserved 6 MiB; free node
//                    for N1; trim again: reserved 0, used 0
//   live at end    : device 65536 (the 3D array).
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/cuda/apps/app_common.h"
#include "tests/cuda/apps/rt_util.h"

extern "C" {
cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags);
cudaError_t cudaHostUnregister(void* ptr);
cudaError_t cudaMallocArray(cudaArray_t* array, const struct cudaChannelFormatDesc* desc,
                            size_t width, size_t height, unsigned int flags);
cudaError_t cudaMalloc3DArray(cudaArray_t* array, const struct cudaChannelFormatDesc* desc,
                              struct cudaExtent extent, unsigned int flags);
cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t* array,
                                     const struct cudaChannelFormatDesc* desc,
                                     struct cudaExtent extent, unsigned int levels,
                                     unsigned int flags);
cudaError_t cudaFreeArray(cudaArray_t array);
cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t array);
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr);
cudaError_t cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle, unsigned int flags);
cudaError_t cudaIpcCloseMemHandle(void* devPtr);
cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool);
cudaError_t cudaGraphCreate(cudaGraph_t* graph, unsigned int flags);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                     const cudaGraphNode_t* deps, size_t n,
                                     struct cudaMemAllocNodeParams* params);
cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                    const cudaGraphNode_t* deps, size_t n, void* dptr);
cudaError_t cudaDeviceGraphMemTrim(int device);
cudaError_t cudaDeviceGetGraphMemAttribute(int device, int attr, void* value);
}

using namespace cudatest;

namespace {
constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;

std::string HexName(const char* prefix, uint64_t pool, const char* suffix) {
  char b[128];
  snprintf(b, sizeof b, "%s0x%llx.%s", prefix, static_cast<unsigned long long>(pool), suffix);
  return b;
}

cudaChannelFormatDesc Desc(int bits, int channels, cudaChannelFormatKind kind) {
  cudaChannelFormatDesc d = {bits, channels > 1 ? bits : 0, channels > 2 ? bits : 0,
                             channels > 3 ? bits : 0, kind};
  return d;
}

void* g_host;
cudaArray_t g_array2d, g_array3d;
cudaMipmappedArray_t g_mip;
cudaMemPool_t g_pool;
void *g_pool_a, *g_pool_b;
cudaGraph_t g_graph;
void *g_n1, *g_n2;
}  // namespace

PLANTED void planted_cover_register() {
  CheckRc(cudaHostRegister(g_host, 64 * KiB, 0), 0, "cudaHostRegister");
  Alloc(kPinned, Lowest("cudaHostRegister"), -1, (uint64_t)g_host, 64 * KiB, __func__);
}

PLANTED void planted_cover_register_twice() {
  CheckRc(cudaHostRegister(g_host, 64 * KiB, 0), cudaErrorHostMemoryAlreadyRegistered,
          "cudaHostRegister (again)");
  Fail(kPinned, Lowest("cudaHostRegister"), -1, 64 * KiB, cudaErrorHostMemoryAlreadyRegistered,
       __func__);
}

PLANTED void planted_cover_array2d() {
  cudaChannelFormatDesc d = Desc(32, 4, cudaChannelFormatKindFloat);
  CheckRc(cudaMallocArray(&g_array2d, &d, 100, 30, 0), 0, "cudaMallocArray");
  Alloc(kDevice, Lowest("cudaMallocArray"), 0, (uint64_t)g_array2d, 48000, __func__);
}

PLANTED void planted_cover_array3d() {
  cudaChannelFormatDesc d = Desc(32, 1, cudaChannelFormatKindFloat);
  CheckRc(cudaMalloc3DArray(&g_array3d, &d, cudaExtent{64, 32, 8}, 0), 0, "cudaMalloc3DArray");
  Alloc(kDevice, Lowest("cudaMalloc3DArray"), 0, (uint64_t)g_array3d, 65536, __func__);
}

PLANTED void planted_cover_mipmapped() {
  cudaChannelFormatDesc d = Desc(8, 1, cudaChannelFormatKindUnsigned);
  CheckRc(cudaMallocMipmappedArray(&g_mip, &d, cudaExtent{256, 256, 0}, 3, 0), 0,
          "cudaMallocMipmappedArray");
  Alloc(kDevice, Lowest("cudaMallocMipmappedArray"), 0, (uint64_t)g_mip, 86016, __func__);
}

PLANTED void* planted_cover_ipc_child_alloc() {
  void* p = nullptr;
  CheckRc(cudaMalloc(&p, MiB + 17), 0, "cudaMalloc (IPC child)");
  Alloc(kDevice, Lowest("cudaMalloc"), 0, (uint64_t)p, MiB + 17, __func__);
  return p;
}

PLANTED void* planted_cover_ipc_open(const cudaIpcMemHandle_t& h) {
  void* p = nullptr;
  CheckRc(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), 0, "cudaIpcOpenMemHandle");
  Alloc(kDevice, Lowest("cudaIpcOpenMemHandle"), 0, (uint64_t)p, MiB + 17, __func__);
  return p;
}

PLANTED void planted_cover_pool_a() {
  CheckRc(cudaMallocFromPoolAsync(&g_pool_a, 3 * MiB + 1, g_pool, nullptr), 0,
          "cudaMallocFromPoolAsync");
  Alloc(kPool, Lowest("cudaMallocFromPoolAsync"), 0, (uint64_t)g_pool_a, 3 * MiB + 1, __func__,
        (uint64_t)g_pool);
}

PLANTED void planted_cover_pool_b() {
  CheckRc(cudaMallocFromPoolAsync(&g_pool_b, MiB, g_pool, nullptr), 0, "cudaMallocFromPoolAsync");
  Alloc(kPool, Lowest("cudaMallocFromPoolAsync"), 0, (uint64_t)g_pool_b, MiB, __func__,
        (uint64_t)g_pool);
}

void* GraphNode(uint64_t size, const char* func) {
  cudaMemAllocNodeParams p = {};
  p.poolProps.allocType = 1;
  p.poolProps.location.type = 1;
  p.poolProps.location.id = 0;
  p.bytesize = size;
  cudaGraphNode_t node = nullptr;
  CheckRc(cudaGraphAddMemAllocNode(&node, g_graph, nullptr, 0, &p), 0, "cudaGraphAddMemAllocNode");
  Check(node != nullptr && p.dptr != nullptr, "cudaGraphAddMemAllocNode gave no node or pointer");
  Alloc(kPool, Lowest("cudaGraphAddMemAllocNode"), 0, (uint64_t)p.dptr, size, func,
        (uint64_t)g_graph);
  return p.dptr;
}

PLANTED void planted_cover_graph_n1() { g_n1 = GraphNode(5 * MiB + 3, __func__); }
PLANTED void planted_cover_graph_n2() { g_n2 = GraphNode(MiB, __func__); }

namespace {

void FreeNode(void* p) {
  cudaGraphNode_t node = nullptr;
  CheckRc(cudaGraphAddMemFreeNode(&node, g_graph, nullptr, 0, p), 0, "cudaGraphAddMemFreeNode");
  Free(kPool, Lowest("cudaGraphAddMemFreeNode"), (uint64_t)p);
}

void CheckGraphMem(uint64_t reserved, uint64_t used) {
  uint64_t r = 0, u = 0;
  CheckRc(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &r), 0,
          "cudaDeviceGetGraphMemAttribute(ReservedMemCurrent)");
  CheckRc(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &u), 0,
          "cudaDeviceGetGraphMemAttribute(UsedMemCurrent)");
  Check(r == reserved && u == used, "graph memory reserved %llu used %llu, expected %llu %llu",
        (unsigned long long)r, (unsigned long long)u, (unsigned long long)reserved,
        (unsigned long long)used);
  Counter("cuda.graph:0.reserved_bytes", r);
  Counter("cuda.graph:0.used_bytes", u);
}

void CheckPool(uint64_t reserved, uint64_t used) {
  uint64_t r = 0, u = 0;
  CheckRc(cudaMemPoolGetAttribute(g_pool, cudaMemPoolAttrReservedMemCurrent, &r), 0,
          "cudaMemPoolGetAttribute(ReservedMemCurrent)");
  CheckRc(cudaMemPoolGetAttribute(g_pool, cudaMemPoolAttrUsedMemCurrent, &u), 0,
          "cudaMemPoolGetAttribute(UsedMemCurrent)");
  Check(r == reserved && u == used, "pool reserved %llu used %llu, expected %llu %llu",
        (unsigned long long)r, (unsigned long long)u, (unsigned long long)reserved,
        (unsigned long long)used);
  Counter(HexName("cuda.pool:0.", (uint64_t)g_pool, "reserved_bytes"), r);
  Counter(HexName("cuda.pool:0.", (uint64_t)g_pool, "used_bytes"), u);
}

// Step 2: the child exports C, the parent opens it twice and closes it twice.
void Ipc() {
  int to_parent[2], to_child[2];
  Check(pipe(to_parent) == 0 && pipe(to_child) == 0, "pipe");
  pid_t pid = fork();
  Check(pid >= 0, "fork");
  if (pid == 0) {
    ForkChild();
    void* c = planted_cover_ipc_child_alloc();
    cudaIpcMemHandle_t h;
    CheckRc(cudaIpcGetMemHandle(&h, c), 0, "cudaIpcGetMemHandle");
    Check(write(to_parent[1], &h, sizeof h) == sizeof h, "write the handle");
    char done = 0;
    Check(read(to_child[0], &done, 1) == 1, "wait for the parent");
    CheckRc(cudaFree(c), 0, "cudaFree (IPC child)");
    Free(kDevice, Lowest("cudaFree"), (uint64_t)c);
    Finish();
    exit(0);
  }
  cudaIpcMemHandle_t h;
  Check(read(to_parent[0], &h, sizeof h) == sizeof h, "read the handle");
  void* p = planted_cover_ipc_open(h);
  void* again = nullptr;
  CheckRc(cudaIpcOpenMemHandle(&again, h, cudaIpcMemLazyEnablePeerAccess), 0,
          "cudaIpcOpenMemHandle (again)");
  Check(again == p, "the second open gave another pointer");
  CheckRc(cudaIpcCloseMemHandle(p), 0, "cudaIpcCloseMemHandle (first)");
  Check(fakecuda_block_info((uint64_t)p, nullptr, nullptr, nullptr, nullptr, nullptr) == 1,
        "the first close unmapped the memory");
  CheckRc(cudaIpcCloseMemHandle(p), 0, "cudaIpcCloseMemHandle (last)");
  Free(kDevice, Lowest("cudaIpcCloseMemHandle"), (uint64_t)p);
  Check(write(to_child[1], "x", 1) == 1, "release the child");
  int status = 0;
  Check(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "the IPC child failed (status 0x%x)", status);
}

}  // namespace

int main(int argc, char** argv) {
  Init(argc, argv, "app_cover");
  CheckRc(cudaSetDevice(0), 0, "cudaSetDevice(0)");
  g_host = mmap(nullptr, 64 * KiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  Check(g_host != MAP_FAILED, "mmap");

  StepBegin(0);
  StageBegin("register");
  planted_cover_register();
  planted_cover_register_twice();
  CheckRc(cudaHostUnregister(g_host), 0, "cudaHostUnregister");
  Free(kPinned, Lowest("cudaHostUnregister"), (uint64_t)g_host);
  CheckRc(cudaHostUnregister(g_host), cudaErrorHostMemoryNotRegistered,
          "cudaHostUnregister (again)");
  StageEnd("register");
  StepEnd(0);

  StepBegin(1);
  StageBegin("arrays");
  planted_cover_array2d();
  planted_cover_array3d();
  planted_cover_mipmapped();
  CheckRc(cudaFreeArray(g_array2d), 0, "cudaFreeArray");
  Free(kDevice, Lowest("cudaFreeArray"), (uint64_t)g_array2d);
  CheckRc(cudaFreeMipmappedArray(g_mip), 0, "cudaFreeMipmappedArray");
  Free(kDevice, Lowest("cudaFreeMipmappedArray"), (uint64_t)g_mip);
  StageEnd("arrays");
  StepEnd(1);

  StepBegin(2);
  StageBegin("ipc");
  Ipc();
  StageEnd("ipc");
  StepEnd(2);

  StepBegin(3);
  StageBegin("pools");
  cudaMemPoolProps props = {};
  props.allocType = 1;
  props.location.type = 1;
  props.location.id = 0;
  CheckRc(cudaMemPoolCreate(&g_pool, &props), 0, "cudaMemPoolCreate");
  planted_cover_pool_a();
  planted_cover_pool_b();
  CheckRc(cudaFreeAsync(g_pool_b, nullptr), 0, "cudaFreeAsync");
  Free(kPool, Lowest("cudaFreeAsync"), (uint64_t)g_pool_b);
  StageEnd("pools");
  CheckPool(6 * MiB, 3 * MiB + 1);
  StepEnd(3);

  StepBegin(4);
  StageBegin("pools");
  CheckRc(cudaMemPoolTrimTo(g_pool, 0), 0, "cudaMemPoolTrimTo");
  CheckPool(4 * MiB, 3 * MiB + 1);
  CheckRc(cudaFreeAsync(g_pool_a, nullptr), 0, "cudaFreeAsync");
  Free(kPool, Lowest("cudaFreeAsync"), (uint64_t)g_pool_a);
  CheckRc(cudaMemPoolDestroy(g_pool), 0, "cudaMemPoolDestroy");
  StageEnd("pools");
  StepEnd(4);

  StepBegin(5);
  StageBegin("graphs");
  CheckRc(cudaGraphCreate(&g_graph, 0), 0, "cudaGraphCreate");
  planted_cover_graph_n1();
  planted_cover_graph_n2();
  FreeNode(g_n2);
  StageEnd("graphs");
  CheckGraphMem(8 * MiB, 5 * MiB + 3);
  StepEnd(5);

  StepBegin(6);
  StageBegin("graphs");
  CheckRc(cudaDeviceGraphMemTrim(0), 0, "cudaDeviceGraphMemTrim");
  CheckGraphMem(6 * MiB, 5 * MiB + 3);
  FreeNode(g_n1);
  CheckRc(cudaDeviceGraphMemTrim(0), 0, "cudaDeviceGraphMemTrim");
  CheckGraphMem(0, 0);
  CheckRc(cudaGraphDestroy(g_graph), 0, "cudaGraphDestroy");
  StageEnd("graphs");
  StepEnd(6);
  Finish();
  return 0;
}

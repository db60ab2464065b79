// app_share: the rest of issue 10 item 3 (docs/gpu.md "Imported VMM handles,
// multicast objects and release thresholds"): VMM memory imported from another
// process, multicast objects, and pools' release thresholds and trims. The
// driver functions are resolved through the runtime, as NCCL's static runtime
// and PyTorch do (cudaGetDriverEntryPointByVersion, version 12010).
//
// Planted facts (granularity 2 MiB):
//   step 0 import   : a fork child creates E 4 MiB (device 1) and F 2 MiB
//                     (device 0) with cuMemCreate and exports both as file
//                     descriptors (sent over a socket). The parent imports E
//                     twice (the same handle: counted once) and maps all of it:
//                     one DEV_ALLOC, api cuMemImportFromShareableHandle,
//                     device 1, 4 MiB, at the import (the child's export is in
//                     the run's export registry, the descriptor the same open
//                     file); it unmaps it and releases it twice: the second
//                     release frees it. F is imported and released without a
//                     mapping: a DEV_ALLOC of 2 MiB, device 0, at the import,
//                     and a DEV_FREE (cuMemRelease) at the release. The
//                     child's trace has E and F only.
//   step 1 multicast: cuMulticastCreate of 4 MiB per device
//                     (cuda.multicast:-1.0x<mc>.size_bytes = 4 MiB); M 4 MiB
//                     created on device 0 (device_vmm) and bound
//                     (cuda.multicast:0.0x<mc>.bound_bytes = 4 MiB), unbound
//                     (= 0); the object released (size_bytes = 0); M released.
//   step 2 pools    : pool P created; cudaMemPoolSetAttribute(P,
//                     ReleaseThreshold, 8 MiB) and, through the driver, the
//                     default pool of device 0 to 1 GiB: COUNTERs
//                     `.release_threshold_bytes` (P's with device 0, the
//                     default pool's with device -1: memstep did not see it
//                     created); cudaMallocFromPoolAsync 3 MiB+5 freed: at the
//                     step end P has reserved 4 MiB, used 0
//   step 3 pools    : cudaMemPoolTrimTo(P, 1 MiB): `.trim_to_bytes` = 1 MiB
//                     and reserved 2 MiB at the trim; P destroyed.
//   live at end     : nothing.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "tests/cuda/apps/app_common.h"
#include "tests/cuda/apps/rt_util.h"

extern "C" {
cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, int attr, void* value);
}

using namespace cudatest;

namespace {
constexpr uint64_t MiB = 1024 * 1024;

typedef CUresult (*PFN_cuDeviceGetDefaultMemPool)(CUmemoryPool* pool, CUdevice dev);

struct {
  PFN_cuMemAddressReserve reserve;
  PFN_cuMemCreate create;
  PFN_cuMemRelease release;
  PFN_cuMemMap map;
  PFN_cuMemUnmap unmap;
  PFN_cuMemSetAccess set_access;
  PFN_cuMemExportToShareableHandle export_handle;
  PFN_cuMemImportFromShareableHandle import_handle;
  PFN_cuMulticastCreate mc_create;
  PFN_cuMulticastAddDevice mc_add;
  PFN_cuMulticastBindMem mc_bind;
  PFN_cuMulticastUnbind mc_unbind;
  PFN_cuMemPoolSetAttribute pool_set;
  PFN_cuDeviceGetDefaultMemPool default_pool;
} drv;

CUdeviceptr g_va;
CUmemGenericAllocationHandle g_imported;
cudaMemPool_t g_pool;
void* g_pool_block;

template <typename F>
void Resolve(const char* name, F* out) {
  void* fn = nullptr;
  int q = -1;
  CheckRc(cudaGetDriverEntryPointByVersion(name, &fn, 12010, 0, &q), 0, name);
  Check(fn != nullptr && q == cudaDriverEntryPointSuccess, "entry point %s: q=%d", name, q);
  *out = reinterpret_cast<F>(fn);
}

CUmemGenericAllocationHandle Create(uint64_t size, int dev, const char* func) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  CUmemGenericAllocationHandle h = 0;
  CheckRc(drv.create(&h, size, &prop, 0), 0, "cuMemCreate");
  Alloc(kVmm, "cuMemCreate", dev, h, size, func);
  return h;
}

std::string Hex(const char* prefix, uint64_t v, const char* suffix) {
  char b[128];
  snprintf(b, sizeof b, "%s0x%llx.%s", prefix, static_cast<unsigned long long>(v), suffix);
  return b;
}

// File descriptors over a Unix socket (SCM_RIGHTS), as NCCL passes them.
void SendFds(int sock, const int* fds, int n) {
  char byte = 'f';
  iovec iov = {&byte, 1};
  char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(n * sizeof(int));
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(n * sizeof(int));
  memcpy(CMSG_DATA(c), fds, n * sizeof(int));
  Check(sendmsg(sock, &msg, 0) == 1, "sendmsg");
}

void RecvFds(int sock, int* fds, int n) {
  char byte = 0;
  iovec iov = {&byte, 1};
  char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  Check(recvmsg(sock, &msg, 0) == 1, "recvmsg");
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  Check(c != nullptr && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(n * sizeof(int)),
        "no descriptors received");
  memcpy(fds, CMSG_DATA(c), n * sizeof(int));
}

void* Os(int fd) { return reinterpret_cast<void*>(static_cast<intptr_t>(fd)); }
}  // namespace

PLANTED void planted_share_child_create_e(CUmemGenericAllocationHandle* e) {
  *e = Create(4 * MiB, 1, __func__);
}
PLANTED void planted_share_child_create_f(CUmemGenericAllocationHandle* f) {
  *f = Create(2 * MiB, 0, __func__);
}

// The import and its first mapping: under memstep the DEV_ALLOC is written
// at the import, with the size the exporting child listed in the export
// registry (docs/gpu.md "Imported VMM memory").
PLANTED void planted_share_import(int fd) {
  CheckRc(drv.import_handle(&g_imported, Os(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), 0,
          "cuMemImportFromShareableHandle(E)");
  Alloc(kVmm, "cuMemImportFromShareableHandle", 1, g_imported, 4 * MiB, __func__);
  CheckRc(drv.map(g_va, 4 * MiB, 0, g_imported, 0), 0, "cuMemMap(E)");
  CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CheckRc(drv.set_access(g_va, 4 * MiB, &access, 1), 0, "cuMemSetAccess(E)");
  memset(reinterpret_cast<void*>(g_va), 0x5A, 4 * MiB);  // the mapping is usable
}

// F: imported and released without a mapping; counted at the import all the
// same (its size from the registry), freed by its release.
PLANTED void planted_share_import_unmapped(int fd, CUmemGenericAllocationHandle* f) {
  CheckRc(drv.import_handle(f, Os(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), 0,
          "cuMemImportFromShareableHandle(F)");
  Alloc(kVmm, "cuMemImportFromShareableHandle", 0, *f, 2 * MiB, __func__);
}

PLANTED void planted_share_multicast_mem(CUmemGenericAllocationHandle* m) {
  *m = Create(4 * MiB, 0, __func__);
}

PLANTED void planted_share_pool_block() {
  CheckRc(cudaMallocFromPoolAsync(&g_pool_block, 3 * MiB + 5, g_pool, nullptr), 0,
          "cudaMallocFromPoolAsync");
  Alloc(kPool, Lowest("cudaMallocFromPoolAsync"), 0, (uint64_t)g_pool_block, 3 * MiB + 5, __func__,
        (uint64_t)g_pool);
}

namespace {

void Import() {
  int sv[2];
  Check(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
  pid_t pid = fork();
  Check(pid >= 0, "fork");
  if (pid == 0) {
    ForkChild();
    close(sv[0]);
    CUmemGenericAllocationHandle e = 0, f = 0;
    planted_share_child_create_e(&e);
    planted_share_child_create_f(&f);
    int fds[2] = {-1, -1};
    CheckRc(drv.export_handle(&fds[0], e, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), 0,
            "cuMemExportToShareableHandle(E)");
    CheckRc(drv.export_handle(&fds[1], f, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), 0,
            "cuMemExportToShareableHandle(F)");
    SendFds(sv[1], fds, 2);
    char done = 0;
    Check(read(sv[1], &done, 1) == 1, "wait for the parent");
    CheckRc(drv.release(e), 0, "cuMemRelease(E) in the child");
    Free(kVmm, "cuMemRelease", e);
    CheckRc(drv.release(f), 0, "cuMemRelease(F) in the child");
    Free(kVmm, "cuMemRelease", f);
    Finish();
    _exit(0);
  }
  close(sv[1]);
  int fds[2];
  RecvFds(sv[0], fds, 2);
  planted_share_import(fds[0]);
  CUmemGenericAllocationHandle again = 0;
  CheckRc(drv.import_handle(&again, Os(fds[0]), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), 0,
          "cuMemImportFromShareableHandle(E again)");
  Check(again == g_imported, "the second import gave another handle");
  CheckRc(drv.unmap(g_va, 4 * MiB), 0, "cuMemUnmap(E)");
  CheckRc(drv.release(g_imported), 0, "cuMemRelease(E, first)");
  Check(fakecuda_block_info(g_imported, nullptr, nullptr, nullptr, nullptr, nullptr) == 1,
        "the first release of a handle imported twice returned its memory");
  CheckRc(drv.release(g_imported), 0, "cuMemRelease(E, last)");
  Free(kVmm, "cuMemRelease", g_imported);
  // F: imported, never mapped, released.
  CUmemGenericAllocationHandle f = 0;
  planted_share_import_unmapped(fds[1], &f);
  CheckRc(drv.release(f), 0, "cuMemRelease(F)");
  Free(kVmm, "cuMemRelease", f);
  close(fds[0]);
  close(fds[1]);
  Check(write(sv[0], "x", 1) == 1, "release the child");
  int status = 0;
  Check(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "the exporting child failed (status 0x%x)", status);
  close(sv[0]);
}

void Multicast() {
  CUmulticastObjectProp prop = {};
  prop.numDevices = 1;
  prop.size = 4 * MiB;
  prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle mc = 0;
  CheckRc(drv.mc_create(&mc, &prop), 0, "cuMulticastCreate");
  Counter(Hex("cuda.multicast:-1.", mc, "size_bytes"), 4 * MiB);
  CheckRc(drv.mc_add(mc, 0), 0, "cuMulticastAddDevice");
  CUmemGenericAllocationHandle m = 0;
  planted_share_multicast_mem(&m);
  CheckRc(drv.mc_bind(mc, 0, m, 0, 4 * MiB, 0), 0, "cuMulticastBindMem");
  Counter(Hex("cuda.multicast:0.", mc, "bound_bytes"), 4 * MiB);
  CheckRc(drv.mc_bind(mc, 0, m, 0, 4 * MiB, 0), CUDA_ERROR_INVALID_VALUE,
          "cuMulticastBindMem beyond the object's size");
  CheckRc(drv.release(mc), CUDA_ERROR_INVALID_VALUE, "cuMemRelease(multicast) while bound");
  CheckRc(drv.mc_unbind(mc, 0, 0, 4 * MiB), 0, "cuMulticastUnbind");
  Counter(Hex("cuda.multicast:0.", mc, "bound_bytes"), 0);
  CheckRc(drv.release(mc), 0, "cuMemRelease(multicast)");
  Counter(Hex("cuda.multicast:-1.", mc, "size_bytes"), 0);
  CheckRc(drv.release(m), 0, "cuMemRelease(M)");
  Free(kVmm, "cuMemRelease", m);
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
  Counter(Hex("cuda.pool:0.", (uint64_t)g_pool, "reserved_bytes"), r);
  Counter(Hex("cuda.pool:0.", (uint64_t)g_pool, "used_bytes"), u);
}

}  // namespace

int main(int argc, char** argv) {
  Init(argc, argv, "app_share");
  CheckRc(cudaSetDevice(0), 0, "cudaSetDevice");
  Resolve("cuMemAddressReserve", &drv.reserve);
  Resolve("cuMemCreate", &drv.create);
  Resolve("cuMemRelease", &drv.release);
  Resolve("cuMemMap", &drv.map);
  Resolve("cuMemUnmap", &drv.unmap);
  Resolve("cuMemSetAccess", &drv.set_access);
  Resolve("cuMemExportToShareableHandle", &drv.export_handle);
  Resolve("cuMemImportFromShareableHandle", &drv.import_handle);
  Resolve("cuMulticastCreate", &drv.mc_create);
  Resolve("cuMulticastAddDevice", &drv.mc_add);
  Resolve("cuMulticastBindMem", &drv.mc_bind);
  Resolve("cuMulticastUnbind", &drv.mc_unbind);
  Resolve("cuMemPoolSetAttribute", &drv.pool_set);
  Resolve("cuDeviceGetDefaultMemPool", &drv.default_pool);
  CheckRc(drv.reserve(&g_va, 16 * MiB, 0, 0, 0), 0, "cuMemAddressReserve");

  StepBegin(0);
  StageBegin("import");
  Import();
  StageEnd("import");
  StepEnd(0);

  StepBegin(1);
  StageBegin("multicast");
  Multicast();
  StageEnd("multicast");
  StepEnd(1);

  StepBegin(2);
  StageBegin("pools");
  cudaMemPoolProps props = {};
  props.allocType = 1;
  props.location.type = 1;
  props.location.id = 0;
  CheckRc(cudaMemPoolCreate(&g_pool, &props), 0, "cudaMemPoolCreate");
  uint64_t threshold = 8 * MiB;
  CheckRc(cudaMemPoolSetAttribute(g_pool, cudaMemPoolAttrReleaseThreshold, &threshold), 0,
          "cudaMemPoolSetAttribute(ReleaseThreshold)");
  Counter(Hex("cuda.pool:0.", (uint64_t)g_pool, "release_threshold_bytes"), 8 * MiB);
  CUmemoryPool def = nullptr;
  CheckRc(drv.default_pool(&def, 0), 0, "cuDeviceGetDefaultMemPool");
  uint64_t big = 1024 * MiB;
  CheckRc(drv.pool_set(def, cudaMemPoolAttrReleaseThreshold, &big), 0,
          "cuMemPoolSetAttribute(default, ReleaseThreshold)");
  Counter(Hex("cuda.pool:-1.", (uint64_t)def, "release_threshold_bytes"), 1024 * MiB);
  uint64_t unknown_attr = 1;
  CheckRc(drv.pool_set(def, 99, &unknown_attr), CUDA_ERROR_INVALID_VALUE,
          "cuMemPoolSetAttribute(an unknown attribute)");
  planted_share_pool_block();
  CheckRc(cudaFreeAsync(g_pool_block, nullptr), 0, "cudaFreeAsync");
  Free(kPool, Lowest("cudaFreeAsync"), (uint64_t)g_pool_block);
  StageEnd("pools");
  CheckPool(4 * MiB, 0);
  StepEnd(2);

  StepBegin(3);
  StageBegin("pools");
  CheckRc(cudaMemPoolTrimTo(g_pool, MiB), 0, "cudaMemPoolTrimTo");
  Counter(Hex("cuda.pool:0.", (uint64_t)g_pool, "trim_to_bytes"), MiB);
  CheckPool(2 * MiB, 0);
  CheckRc(cudaMemPoolDestroy(g_pool), 0, "cudaMemPoolDestroy");
  StageEnd("pools");
  StepEnd(3);
  Finish();
  return 0;
}

// app_drv_dlsym: programs that never link the driver.
//  - The XLA/TF pattern (xla/tsl/cuda/cuda_stub.cc): dlopen("libcuda.so.1")
//    and dlsym(handle, name) for every function: only a dlsym override sees
//    these calls.
//  - The static-cudart pattern (nvcc's default): no libcudart at all, only
//    dlsym(handle, "cuGetProcAddress_v2"), which is asked for the driver's
//    cuGetProcAddress (12000) and then for everything else, with versions
//    and per-thread flags; also the 11.3-11.8 cuGetProcAddress (v1).
//  - Lookups a wrapper must pass through untouched: an unknown name (500,
//    status 1), a version too old (500, status 2) and cuMemAlloc at 2000,
//    the 32-bit ABI (not an allocation the fakes or memstep count).
//
// Planted facts, step 0 stage "load":
//   dlsym'd cuMemAlloc_v2 4 MiB+3 (freed with dlsym'd cuMemFree_v2),
//   dlsym'd cuMemHostAlloc 64 KiB+5;
//   through cuGetProcAddress: cuMemAlloc@3020 3 MiB+7, cuMemAllocAsync@11020
//   per-thread 1 MiB+9 (freed, per-thread), cuMemAllocManaged@6000
//   512 KiB+11, and through the v1 cuGetProcAddress cuMemAlloc@11030
//   2 MiB+13 (freed). Live at end: pinned 64 KiB+5, device 3 MiB+7,
//   managed 512 KiB+11.
#include <dlfcn.h>

#include <cstdint>

#include "tests/cuda/apps/app_common.h"
#include "tests/cuda/fake/cuda_decls.h"

using namespace cudatest;

namespace {
constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;
void* g_drv;
PFN_cuGetProcAddress_v2 g_gpa;  // the driver's own, as cudart uses it

template <typename F>
F Sym(const char* name) {
  F f = reinterpret_cast<F>(dlsym(g_drv, name));
  Check(f != nullptr, "dlsym(libcuda, %s): %s", name, dlerror());
  return f;
}

void* Proc(const char* name, int version, int flags) {
  void* fn = nullptr;
  int status = -1;
  CheckRc(g_gpa(name, &fn, version, flags, &status), 0, name);
  Check(fn != nullptr && status == CU_GET_PROC_ADDRESS_SUCCESS, "cuGetProcAddress(%s)", name);
  return fn;
}

void ExpectNotFound(const char* name, int version, int want_status) {
  void* fn = (void*)0x77;
  int status = -1;
  CheckRc(g_gpa(name, &fn, version, 0, &status), CUDA_ERROR_NOT_FOUND, name);
  Check(fn == nullptr && status == want_status, "cuGetProcAddress(%s, %d): fn %p status %d", name,
        version, fn, status);
}
}  // namespace

PLANTED void planted_xla_alloc() {
  CUdeviceptr d = 0;
  CheckRc(Sym<PFN_cuMemAlloc_v2>("cuMemAlloc_v2")(&d, 4 * MiB + 3), 0, "dlsym'd cuMemAlloc_v2");
  Alloc(kDevice, "cuMemAlloc_v2", 0, d, 4 * MiB + 3, __func__);
  CheckRc(Sym<PFN_cuMemFree_v2>("cuMemFree_v2")(d), 0, "dlsym'd cuMemFree_v2");
  Free(kDevice, "cuMemFree_v2", d);
}

PLANTED void planted_xla_hostalloc() {
  void* p = nullptr;
  auto f = Sym<CUresult (*)(void**, size_t, unsigned)>("cuMemHostAlloc");
  CheckRc(f(&p, 64 * KiB + 5, 0), 0, "dlsym'd cuMemHostAlloc");
  Alloc(kPinned, "cuMemHostAlloc", -1, (uint64_t)p, 64 * KiB + 5, __func__);
}

PLANTED void planted_static_alloc() {
  CUdeviceptr d = 0;
  CheckRc(reinterpret_cast<PFN_cuMemAlloc_v2>(Proc("cuMemAlloc", 3020, 0))(&d, 3 * MiB + 7), 0,
          "cuMemAlloc@3020");
  Alloc(kDevice, "cuMemAlloc_v2", 0, d, 3 * MiB + 7, __func__);
}

PLANTED void planted_static_async_ptsz() {
  using AllocAsync = CUresult (*)(CUdeviceptr*, size_t, CUstream);
  using FreeAsync = CUresult (*)(CUdeviceptr, CUstream);
  CUdeviceptr d = 0;
  CheckRc(reinterpret_cast<AllocAsync>(Proc("cuMemAllocAsync", 11020, 2))(&d, MiB + 9, nullptr), 0,
          "cuMemAllocAsync@11020 per-thread");
  Alloc(kPool, "cuMemAllocAsync", 0, d, MiB + 9, __func__);
  CheckMadeBy(d, "cuMemAllocAsync_ptsz", FC_OWNER_DRIVER);
  CheckRc(reinterpret_cast<FreeAsync>(Proc("cuMemFreeAsync", 11020, 2))(d, nullptr), 0,
          "cuMemFreeAsync@11020 per-thread");
  Free(kPool, "cuMemFreeAsync", d);
}

PLANTED void planted_static_managed() {
  using AllocManaged = CUresult (*)(CUdeviceptr*, size_t, unsigned);
  CUdeviceptr d = 0;
  CheckRc(reinterpret_cast<AllocManaged>(Proc("cuMemAllocManaged", 6000, 0))(&d, 512 * KiB + 11, 1),
          0, "cuMemAllocManaged@6000");
  Alloc(kManaged, "cuMemAllocManaged", 0, d, 512 * KiB + 11, __func__);
}

PLANTED void planted_static_v1gpa_alloc() {
  auto gpa1 = reinterpret_cast<PFN_cuGetProcAddress_v1>(Proc("cuGetProcAddress", 11030, 0));
  void* fn = nullptr;
  CheckRc(gpa1("cuMemAlloc", &fn, 11030, 0), 0, "cuGetProcAddress(v1)(cuMemAlloc)");
  CUdeviceptr d = 0;
  CheckRc(reinterpret_cast<PFN_cuMemAlloc_v2>(fn)(&d, 2 * MiB + 13), 0, "cuMemAlloc@11030 (v1)");
  Alloc(kDevice, "cuMemAlloc_v2", 0, d, 2 * MiB + 13, __func__);
  CheckRc(gpa1("cuMemFree", &fn, 11030, 0), 0, "cuGetProcAddress(v1)(cuMemFree)");
  CheckRc(reinterpret_cast<PFN_cuMemFree_v2>(fn)(d), 0, "cuMemFree@11030 (v1)");
  Free(kDevice, "cuMemFree_v2", d);
}

// cuMemAlloc below 3020 is the 32-bit ABI: a wrapper assuming the 64-bit
// one would write 8 bytes into this 4-byte slot.
PLANTED void planted_static_v2000_lookup() {
  struct {
    CUdeviceptr_v1 ptr;
    uint32_t guard;
  } slot = {0, 0xFEEDFACEu};
  auto f = reinterpret_cast<CUresult (*)(CUdeviceptr_v1*, unsigned)>(Proc("cuMemAlloc", 2000, 0));
  CheckRc(f(&slot.ptr, 4096), 0, "cuMemAlloc@2000");
  Check(slot.ptr == 0x5EED0000u && slot.guard == 0xFEEDFACEu,
        "cuMemAlloc@2000 wrote 0x%x, guard 0x%x", slot.ptr, slot.guard);
}

int main(int argc, char** argv) {
  Init(argc, argv, "app_drv_dlsym");
  g_drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  Check(g_drv != nullptr, "dlopen(libcuda.so.1): %s", dlerror());
  CheckRc(Sym<CUresult (*)(unsigned)>("cuInit")(0), 0, "cuInit");
  CUcontext ctx = nullptr;
  CheckRc(Sym<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain")(&ctx, 0), 0,
          "cuDevicePrimaryCtxRetain");
  CheckRc(Sym<CUresult (*)(CUcontext)>("cuCtxSetCurrent")(ctx), 0, "cuCtxSetCurrent");
  auto first = Sym<PFN_cuGetProcAddress_v2>("cuGetProcAddress_v2");
  void* fn = nullptr;
  int status = -1;
  CheckRc(first("cuGetProcAddress", &fn, 12000, 0, &status), 0,
          "cuGetProcAddress(cuGetProcAddress)");
  g_gpa = reinterpret_cast<PFN_cuGetProcAddress_v2>(fn);
  Check(g_gpa != nullptr && status == 0, "the driver's cuGetProcAddress");

  StepBegin(0);
  StageBegin("load");
  planted_xla_alloc();
  planted_xla_hostalloc();
  planted_static_alloc();
  planted_static_async_ptsz();
  planted_static_managed();
  planted_static_v1gpa_alloc();
  planted_static_v2000_lookup();
  ExpectNotFound("cuNoSuchFunction", 13000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  ExpectNotFound("cuMemAllocAsync", 11000, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  StageEnd("load");
  StepEnd(0);
  Finish();
  return 0;
}

// app_vmm: PyTorch's expandable segments. The VMM functions are resolved the
// way c10/cuda/driver_api.cpp does, through the runtime:
// cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q)
// (cuMemCreate through the _ptsz form, cuMemRelease through the deprecated
// cudaGetDriverEntryPoint). Physical memory (kind device_vmm, the handle as
// address) is taken by cuMemCreate and returned when the handle is released
// AND its last mapping is unmapped, in either order.
//
// Planted facts (granularity 2 MiB, 64 MiB of address space reserved):
//   step 0 grow  : cuMemCreate A 4 MiB (dev 0), B 2 MiB (dev 0), C 6 MiB on
//                  device 1 by prop->location while device 0 is current;
//                  each mapped, made read-write and written
//   step 1 shrink: A released while mapped (still live), then unmapped: freed
//                  by cuMemUnmap; B unmapped (still live), then released:
//                  freed by cuMemRelease; D 2 MiB created and released
//                  unmapped: freed by cuMemRelease
//   step 2 oom   : cuMemCreate 1 GiB fails (limit 512 MiB); the 6th
//                  allocation call (cuMemCreate 2 MiB) fails with 46; a second
//                  reservation is made and freed; cuMemAddressFree of the
//                  first while C is mapped fails with 1
//   live at end: device_vmm 6 MiB (C, device 1).
#include <cstdint>
#include <cstring>

#include "tests/cuda/apps/app_common.h"
#include "tests/cuda/apps/rt_util.h"

using namespace cudatest;

namespace {
constexpr uint64_t MiB = 1024 * 1024;
const char* const kKnobs[] = {"FAKECUDA_MEM_LIMIT=536870912", "FAKECUDA_FAIL_CALL=6",
                              "FAKECUDA_FAIL_ERR=46", nullptr};

struct {
  PFN_cuMemAddressReserve reserve;
  PFN_cuMemAddressFree address_free;
  PFN_cuMemCreate create;
  PFN_cuMemRelease release;
  PFN_cuMemMap map;
  PFN_cuMemUnmap unmap;
  PFN_cuMemSetAccess set_access;
  PFN_cuMemGetAllocationGranularity granularity;
} drv;

CUdeviceptr g_va;

template <typename F>
void Resolve(const char* name, F* out, bool ptsz = false) {
  void* fn = nullptr;
  int q = -1;
  cudaError_t e = ptsz ? cudaGetDriverEntryPointByVersion_ptsz(name, &fn, 12000, 0, &q)
                       : cudaGetDriverEntryPointByVersion(name, &fn, 12000, 0, &q);
  CheckRc(e, 0, name);
  Check(fn != nullptr && q == cudaDriverEntryPointSuccess, "entry point %s: q=%d", name, q);
  *out = reinterpret_cast<F>(fn);
}

CUmemAllocationProp Prop(int dev) {
  CUmemAllocationProp p = {};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  return p;
}

CUmemGenericAllocationHandle Create(uint64_t size, int dev, const char* func) {
  CUmemAllocationProp prop = Prop(dev);
  CUmemGenericAllocationHandle h = 0;
  CheckRc(drv.create(&h, size, &prop, 0), 0, "cuMemCreate");
  Alloc(kVmm, "cuMemCreate", dev, h, size, func);
  return h;
}

void MapRw(CUmemGenericAllocationHandle h, uint64_t offset, uint64_t size, int dev) {
  CheckRc(drv.map(g_va + offset, size, 0, h, 0), 0, "cuMemMap");
  CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CheckRc(drv.set_access(g_va + offset, size, &access, 1), 0, "cuMemSetAccess");
  memset(reinterpret_cast<void*>(g_va + offset), 0xAB, size);  // the mapping is usable
}
}  // namespace

CUmemGenericAllocationHandle g_a, g_b, g_c;

PLANTED void planted_vmm_create_a() { g_a = Create(4 * MiB, 0, __func__); }
PLANTED void planted_vmm_create_b() { g_b = Create(2 * MiB, 0, __func__); }
PLANTED void planted_vmm_create_dev1() { g_c = Create(6 * MiB, 1, __func__); }

PLANTED void planted_vmm_create_d() {
  CUmemGenericAllocationHandle d = Create(2 * MiB, 0, __func__);
  CheckRc(drv.release(d), 0, "cuMemRelease(D)");
  Free(kVmm, "cuMemRelease", d);
}

PLANTED void planted_vmm_oom() {
  CUmemAllocationProp prop = Prop(0);
  CUmemGenericAllocationHandle h = 0x77;
  CheckRc(drv.create(&h, 1024 * MiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate(1 GiB)");
  Check(h == 0x77, "cuMemCreate wrote its out-parameter on failure");
  Fail(kVmm, "cuMemCreate", 0, 1024 * MiB, CUDA_ERROR_OUT_OF_MEMORY, __func__);
}

PLANTED void planted_vmm_failcall() {
  CheckRc((long)fakecuda_alloc_calls(), 5, "allocation calls before the injected failure");
  CUmemAllocationProp prop = Prop(0);
  CUmemGenericAllocationHandle h = 0x77;
  CheckRc(drv.create(&h, 2 * MiB, &prop, 0), 46, "cuMemCreate (6th allocation call)");
  Check(h == 0x77, "cuMemCreate wrote its out-parameter on failure");
  Fail(kVmm, "cuMemCreate", 0, 2 * MiB, 46, __func__);
}

int main(int argc, char** argv) {
  Init(argc, argv, "app_vmm", kKnobs);
  CheckRc(cudaSetDevice(0), 0, "cudaSetDevice");
  Resolve("cuMemAddressReserve", &drv.reserve);
  Resolve("cuMemAddressFree", &drv.address_free);
  Resolve("cuMemCreate", &drv.create, /*ptsz=*/true);
  Resolve("cuMemMap", &drv.map);
  Resolve("cuMemUnmap", &drv.unmap);
  Resolve("cuMemSetAccess", &drv.set_access);
  Resolve("cuMemGetAllocationGranularity", &drv.granularity);
  void* fn = nullptr;
  int q = -1;
  CheckRc(cudaGetDriverEntryPoint("cuMemRelease", &fn, cudaEnableDefault, &q), 0,
          "cudaGetDriverEntryPoint(cuMemRelease)");
  drv.release = reinterpret_cast<PFN_cuMemRelease>(fn);
  Check(fn != nullptr && q == 0, "cuMemRelease entry point");
  CUmemAllocationProp prop = Prop(0);
  size_t gran = 0;
  CheckRc(drv.granularity(&gran, &prop, 0), 0, "cuMemGetAllocationGranularity");
  CheckRc((long)gran, 2 * MiB, "granularity");
  CheckRc(drv.reserve(&g_va, 64 * MiB, 0, 0, 0), 0, "cuMemAddressReserve");

  StepBegin(0);
  StageBegin("grow");
  planted_vmm_create_a();
  MapRw(g_a, 0, 4 * MiB, 0);
  planted_vmm_create_b();
  MapRw(g_b, 4 * MiB, 2 * MiB, 0);
  planted_vmm_create_dev1();
  MapRw(g_c, 6 * MiB, 6 * MiB, 1);
  StageEnd("grow");
  PlantDevInfo(0, 6 * MiB, 0, 0);
  StepEnd(0);

  StepBegin(1);
  StageBegin("shrink");
  CheckRc(drv.release(g_a), 0, "cuMemRelease(A) while mapped");
  CheckRc(drv.unmap(g_va, 4 * MiB), 0, "cuMemUnmap(A)");
  Free(kVmm, "cuMemUnmap", g_a);
  CheckRc(drv.unmap(g_va + 4 * MiB, 2 * MiB), 0, "cuMemUnmap(B)");
  CheckRc(drv.release(g_b), 0, "cuMemRelease(B) after its unmap");
  Free(kVmm, "cuMemRelease", g_b);
  planted_vmm_create_d();
  StageEnd("shrink");
  PlantDevInfo(1, 0, 0, 0);
  StepEnd(1);

  StepBegin(2);
  StageBegin("oom");
  planted_vmm_oom();
  planted_vmm_failcall();
  CUdeviceptr va2 = 0;
  CheckRc(drv.reserve(&va2, 4 * MiB, 0, 0, 0), 0, "cuMemAddressReserve (2nd)");
  CheckRc(drv.address_free(va2, 4 * MiB), 0, "cuMemAddressFree (2nd)");
  CheckRc(drv.address_free(g_va, 64 * MiB), CUDA_ERROR_INVALID_VALUE,
          "cuMemAddressFree while C is mapped");
  StageEnd("oom");
  StepEnd(2);
  Finish();
  return 0;
}

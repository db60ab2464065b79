// Helpers for the programs that use the CUDA runtime (they link libcudart).
#ifndef MEMSTEP_TESTS_CUDA_APPS_RT_UTIL_H_
#define MEMSTEP_TESTS_CUDA_APPS_RT_UTIL_H_

#include "tests/cuda/apps/app_common.h"
#include "tests/cuda/fake/cuda_decls.h"

namespace cudatest {

inline int CurrentDevice() {
  int dev = -1;
  CheckRc(cudaGetDevice(&dev), 0, "cudaGetDevice");
  return dev;
}

// Reads what memstep must record at the end of `step` (cudaMemGetInfo on the
// current device, its default pool's ReservedMemCurrent/UsedMemCurrent),
// checks it against the fake's expected state and plants it.
inline void PlantDevInfo(uint64_t step, uint64_t want_used_budget, uint64_t want_reserved,
                         uint64_t want_used) {
  int dev = CurrentDevice();
  size_t free_bytes = 0, total = 0;
  CheckRc(cudaMemGetInfo(&free_bytes, &total), 0, "cudaMemGetInfo");
  cudaMemPool_t pool = nullptr;
  CheckRc(cudaDeviceGetDefaultMemPool(&pool, dev), 0, "cudaDeviceGetDefaultMemPool");
  uint64_t reserved = 0, used = 0;
  CheckRc(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved), 0,
          "cudaMemPoolGetAttribute(ReservedMemCurrent)");
  CheckRc(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used), 0,
          "cudaMemPoolGetAttribute(UsedMemCurrent)");
  Check(total - free_bytes == want_used_budget && reserved == want_reserved && used == want_used,
        "device %d: used %llu reserved %llu pool-used %llu, expected %llu %llu %llu", dev,
        (unsigned long long)(total - free_bytes), (unsigned long long)reserved,
        (unsigned long long)used, (unsigned long long)want_used_budget,
        (unsigned long long)want_reserved, (unsigned long long)want_used);
  DevInfo(step, dev, free_bytes, total, reserved, used);
}

}  // namespace cudatest

#endif  // MEMSTEP_TESTS_CUDA_APPS_RT_UTIL_H_

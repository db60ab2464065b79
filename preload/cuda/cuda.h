// CUDA device-memory interception in libmemstep.so: what the rest of the
// library calls. The wrappers themselves (runtime API per libcudart major,
// driver API, dlsym/dlvsym, cuGetProcAddress and cudaGetDriverEntryPoint
// chains) are the exported symbols of cuda_runtime.cc, cuda_driver.cc and
// cuda_dl.cc; docs/gpu.md describes what is counted where.
//
// Contract: both functions run at a step end, with the caller's reentrancy
// guard set and g_api_lock not held; they never allocate from the hooked heap
// and never initialise CUDA (nothing happens until the program itself made a
// device allocation; the driver is asked only from a thread with a current
// context).

#ifndef MEMSTEP_PRELOAD_CUDA_H_
#define MEMSTEP_PRELOAD_CUDA_H_

#include <stdint.h>

#include "preload/host/runtime.h"

namespace memstep::preload {

// Closes the step for device memory: remembers the step's device peak and
// writes a DEV_INFO record (cudaMemGetInfo-equivalent of the current device,
// default-pool reserved/used once a stream-ordered allocation was seen).
void CudaStepEnd(ThreadState& t, uint64_t step);

// Peak of device-resident bytes (device + managed + VMM physical + pool
// logical) between the previous two CudaStepEnd calls; 0 if none was seen.
uint64_t CudaLastStepPeak();

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_CUDA_H_

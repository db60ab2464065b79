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

// ---- device sampling (cuda_account.cc; docs/gpu.md "Sampling") ----
// Default mean sampling interval of device allocations (MEMSTEP_DEVICE_SAMPLE_
// INTERVAL): 8 MiB. docs/gpu.md justifies it.
inline constexpr uint64_t kDefaultDeviceInterval = uint64_t{8} << 20;
// Every device allocation is counted exactly and written as a DEV_ALLOC;
// only sampled ones (a per-thread Poisson byte countdown with mean T) carry
// a stack. T is set at step ends by progressive.cc; <= 1: every allocation.
void CudaSetSampleInterval(uint64_t interval);
// Exact device-resident bytes now, summed over devices, and resident bytes
// allocated since the start (what the progressive schedule and the device
// leak hunt read at step ends).
uint64_t CudaResidentBytes();
uint64_t CudaResidentAllocated();
// The device leak hunt's tally: sampled allocations made since the last
// checkpoint while hunting, still live; their estimated bytes (Horvitz-
// Thompson) and count. CudaHuntOn(true) starts marking new samples;
// CudaHuntCheckpoint() starts a new tally (older samples no longer count).
void CudaHuntOn(bool on);
void CudaHuntCheckpoint();
void CudaHuntTally(uint64_t* est_bytes, uint64_t* samples);

// The driver's free/total memory of the current device, asked from the
// calling thread only if it has a current context (never creates one; never
// through a wrapper). False when unknown.
bool CudaMemInfo(ThreadState& t, int* device, uint64_t* free, uint64_t* total);

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_CUDA_H_

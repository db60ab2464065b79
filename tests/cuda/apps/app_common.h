// Shared by the planted-fact programs of tests/cuda: every program makes CUDA
// calls against the fakes (or the real runtime), checks each result on the
// spot, and tallies what a profiler that counts at the lowest layer must
// record. At the end it writes those facts to DIR/facts.<pid>, the input of
// cuda_check (format in tests/cuda/README.md).
//
// Contract:
//  - A failed check prints "FAIL: ..." on stderr and exits 1, so a program
//    that exits 0 got exactly the planted results, with or without memstep.
//  - The tally is thread-safe (one mutex); the current step and stage are
//    process-global, as in memstep.
//  - Step and stage markers go to memstep through the weak symbols of
//    include/memstep/memstep.h: without memstep they do nothing.

#ifndef MEMSTEP_TESTS_CUDA_APPS_APP_COMMON_H_
#define MEMSTEP_TESTS_CUDA_APPS_APP_COMMON_H_

#include <cstdint>
#include <string>

#include "tests/cuda/fake/fake_types.h"
#include "tests/cuda/fake/fakecuda_core.h"

// A function whose name must appear in the recorded stack of its allocations.
#define PLANTED extern "C" __attribute__((noinline, used))

namespace cudatest {

enum Kind { kDevice = 1, kManaged = 2, kPinned = 3, kVmm = 4, kPool = 5 };

// argv[1] is the facts directory. Sets the fake's knobs given as
// "NAME=value" (before the first CUDA call, which reads them).
void Init(int argc, char** argv, const char* app, const char* const* knobs = nullptr);
bool ViaDriver();  // FAKECUDA_RT_VIA_DRIVER=1
// The API a lowest-layer profiler records for runtime call `api` (no _ptsz):
// the driver function the fake runtime calls when ViaDriver().
const char* Lowest(const char* api);

[[noreturn]] void Die(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Check(bool ok, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void CheckRc(long got, long want, const char* what);

// The facts. Alloc and Free also check the fake's registry: the block exists
// (or is gone) with that kind, device, size and (lowest-layer) API.
void Alloc(Kind kind, const char* api, int dev, uint64_t addr, uint64_t size, const char* func,
           uint64_t aux = 0);
void Free(Kind kind, const char* api, uint64_t addr);
void Fail(Kind kind, const char* api, int dev, uint64_t size, int err, const char* func);
// An allocation memstep cannot see (documented limitation): it is in the
// fake's log but must not be in the trace; its free must not be either.
void Miss(Kind kind, const char* api, uint64_t addr, uint64_t size, const char* why);
void MissFree(uint64_t addr);
// Device memory as memstep must report it at the end of `step`.
void DevInfo(uint64_t step, int dev, uint64_t free_bytes, uint64_t total, uint64_t pool_reserved,
             uint64_t pool_used);
// A COUNTER record `name` with `value` must be in the trace (pool and graph
// memory counters: at least one such record, whenever it was written).
void Counter(const std::string& name, uint64_t value);
void StepBegin(uint64_t step);
void StepEnd(uint64_t step);
void StageBegin(const char* name);
void StageEnd(const char* name);
// The fake's record of who made the live block `addr`: the exported function
// (with its _ptsz suffix, if any) and the owner (FC_OWNER_*).
void CheckMadeBy(uint64_t addr, const char* api, int owner);
// Peaks depend on the interleaving of threads: do not plant them.
void NoPeaks();
// In a fork child: the tally restarts empty (the child has its own trace).
void ForkChild();
// Checks the fake's live bytes per kind against the tally and writes the facts.
void Finish();

}  // namespace cudatest

#endif  // MEMSTEP_TESTS_CUDA_APPS_APP_COMMON_H_

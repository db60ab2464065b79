// Memory snapshots (MEM_SNAPSHOT records; docs/gpu.md "Out of memory"): what
// was live by site at the moment of an out-of-memory error or of a request,
// rebuilt by replaying the trace up to each record. Internal to src/analysis.
//
// Worked example (one device, MiB; device samples with p = 1 for clarity):
//   DEV_ALLOC device 600 stack 1 (weights)          resident 600
//   ALLOC host 4 KiB stack 7, T 512 KiB             host site 7: 4 KiB / p = 514 KiB
//   STEP 3 begin, STAGE forward begin
//   DEV_ALLOC device 300 stack 2 (activations)      resident 900
//   DEV_FAIL cudaMalloc 200, error 2
//   MEM_SNAPSHOT cause 1, step 3, stage forward, requested 200, free 100, total 1000
// gives "out of memory at step 3, stage forward, requested 200 MiB, free 100 MiB
// of 1000 MiB; device 0 resident 900 MiB: stack 1 600 MiB, stack 2 300 MiB;
// host: stack 7 514 KiB". A snapshot without the driver's figures (the
// signal's, taken in memstep's writer thread) shows the last DEV_INFO's.

#ifndef MEMSTEP_SRC_ANALYSIS_MEM_SNAPSHOT_H_
#define MEMSTEP_SRC_ANALYSIS_MEM_SNAPSHOT_H_

#include <cstddef>
#include <vector>

#include "src/analysis/analysis.h"
#include "src/analysis/events.h"
#include "src/reader/reader.h"

namespace memstep::analysis {

// Appends one MemorySnapshot per MEM_SNAPSHOT record of `t`. Host sites are
// `sites` indices [0, device_base) in HeapReplay order, device sites
// device_base + DeviceReplay index (as AnalyzeTrace and AnalyzeDevices lay
// them out); site ids are local (index + 1). `interval_max`: the largest host
// T of the trace (the intervals' one-sample term).
void AnalyzeMemSnapshots(const reader::Trace& t, const TraceEvents& events, size_t device_base,
                         double interval_max, const Options& options,
                         std::vector<MemorySnapshot>& out);

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_MEM_SNAPSHOT_H_

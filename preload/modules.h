// Module-map refresh for the trace (see modules.cc).
//
// Contract: called only by the holder of the writer role (writer thread or
// final flush), outside every memstep lock; allocations it triggers (the
// loader's) only forward, because that thread's guard is set.

#ifndef MEMSTEP_PRELOAD_MODULES_H_
#define MEMSTEP_PRELOAD_MODULES_H_

#include <stdint.h>

namespace memstep::preload {

// If g_maps_dirty is set, re-reads the loaded objects and appends MAPPING /
// MAPPING_GONE records (timestamps relative to `start_mono`) to g_dict.
void RefreshMappings(uint64_t start_mono);

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_MODULES_H_

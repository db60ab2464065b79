// Module-map refresh for the trace (see modules.cc).
//
// Contract: called by the writer thread, the final flush, or a thread around
// its outermost dlclose; never under another memstep lock nor the
// loader lock; the caller's reentrancy guard is set, so allocations it
// triggers (the loader's, realpath's) only forward.

#ifndef MEMSTEP_PRELOAD_MODULES_H_
#define MEMSTEP_PRELOAD_MODULES_H_

#include <stdint.h>

namespace memstep::preload {

// If g_maps_dirty is set (or the loader's list changed since the last
// refresh), re-reads the loaded objects and appends MAPPING /
// MAPPING_GONE records (timestamps relative to the trace start) to g_dict.
void RefreshMappings();
void RefreshMappingsLocked();  // g_maps_mu held (by RefreshMappings)

// pthread_atfork handlers for g_maps_mu.
void ModulesForkPrepare();
void ModulesForkParent();
void ModulesForkChild();

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_MODULES_H_

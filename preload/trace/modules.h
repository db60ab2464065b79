// Module-map refresh for the trace (see modules.cc).
//
// Contract: called by the writer thread, the final flush, or a thread around
// its outermost dlclose; never under another memstep lock nor the
// loader lock; the caller's reentrancy guard is set, so allocations it
// triggers (the loader's, realpath's) only forward.

#ifndef MEMSTEP_PRELOAD_MODULES_H_
#define MEMSTEP_PRELOAD_MODULES_H_

#include <link.h>
#include <stdint.h>

namespace memstep::preload {

// Copies the GNU build-id note of a loaded object into out (at most cap
// bytes) and returns its length, 0 when it has none (or a longer one).
uint32_t ReadGnuBuildId(const struct dl_phdr_info* info, uint8_t* out, uint32_t cap);

// libmemstep.so's own build-id, read by the constructor (lifecycle.cc) with
// its mapped range (g_self_lo, g_self_hi): the trace header names the
// profiler's object with both (format.h kTlvProfiler), so the offline side
// recognises memstep's frames even in a renamed copy of the library.
extern uint8_t g_self_build_id[64];
extern uint32_t g_self_build_id_len;

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

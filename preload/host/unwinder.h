// libunwind, loaded at run time (see unwinder.cc for how it is kept away
// from the program's descriptors).

#ifndef MEMSTEP_PRELOAD_UNWINDER_H_
#define MEMSTEP_PRELOAD_UNWINDER_H_

namespace memstep::preload {

// Loads libunwind.so.8 and sets g_unw_backtrace (recorder.h); nothing when it
// is missing or MEMSTEP_NO_UNWIND is set. Constructor only (single-threaded).
void LoadUnwinder();

// Forgets the pages the unwinder has validated (after dlclose unmapped some).
void UnwinderForgetPages();

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_UNWINDER_H_

// libunwind, loaded at run time (see unwinder.cc for how it is kept away
// from the program's descriptors).

#ifndef MEMSTEP_PRELOAD_UNWINDER_H_
#define MEMSTEP_PRELOAD_UNWINDER_H_

namespace memstep::preload {

// Sets g_unw_backtrace (recorder.h): libunwind.so.8's unw_backtrace, or
// glibc's backtrace() where libunwind is missing or MEMSTEP_UNWINDER=backtrace
// asks for it; nothing when MEMSTEP_NO_UNWIND is set. Returns what the trace
// and stderr should say (the fallback, or no stacks at all), else nullptr.
// Constructor only (single-threaded).
const char* LoadUnwinder();

// Forgets the pages the unwinder has validated (after dlclose unmapped some).
void UnwinderForgetPages();

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_UNWINDER_H_

// Descriptors inside the profiled process, and what memstep reads from
// /proc/self/stat.
//
// Contract: memstep keeps no descriptor open between uses. A program may list
// every descriptor it has (CPython's tests fstat() them all and expect only
// their own), close them all (close-all loops, close_range, daemons) or dup2
// its own files over any number. The trace is opened by path for each write
// (trace/writer.cc), /proc/self/stat for each read (below), and libunwind's
// validation pipe is closed once its accessor is replaced (host/unwinder.cc).
// Every descriptor memstep opens is close-on-exec.

#ifndef MEMSTEP_PRELOAD_CORE_FDS_H_
#define MEMSTEP_PRELOAD_CORE_FDS_H_

#include <stdint.h>

namespace memstep::preload {

// A number the constructor keeps descriptors it cannot close at once above:
// 512, or half the soft RLIMIT_NOFILE when that is lower (at least 3).
int FdFloor();

// Occupies every free descriptor below FdFloor() (with duplicates of
// `with`) so that descriptors opened until ReleaseLowFds() land high; used
// around code that opens descriptors we cannot renumber (libunwind's pipe).
// Single-threaded callers only (the library constructor). Returns the count.
int HoldLowFds(int with);
void ReleaseLowFds();

// Fields of /proc/self/stat: the thread-group leader's state, the number of
// threads (a zombie leader is still counted), and the resident set.
struct ProcStat {
  char state;
  int64_t num_threads;
  uint64_t rss_bytes;
};

// Reads /proc/self/stat (opened, read and closed: ~10 us). False when
// unreadable.
bool ReadProcStat(ProcStat* out);

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_CORE_FDS_H_

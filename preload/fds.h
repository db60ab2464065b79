// Descriptors memstep holds inside the profiled process, and what it reads
// from /proc/self/stat.
//
// Contract: every descriptor memstep keeps open (the trace file, the
// /proc/self/stat reader, libunwind's validation pipe) is close-on-exec and
// numbered at or above FdFloor(), out of the low numbers programs expect to
// own (a program may list its descriptors, expect open() to return 3, or
// pass some to a child and check that no other one is inherited). A program
// may close them (close-all loops, close_range, daemons) or dup2 its own
// files over them: users re-check the descriptor's identity before use and
// reopen, and never close a number they no longer own.

#ifndef MEMSTEP_PRELOAD_FDS_H_
#define MEMSTEP_PRELOAD_FDS_H_

#include <stdint.h>

namespace memstep::preload {

// The lowest number memstep's descriptors take: 512, or half the soft
// RLIMIT_NOFILE when that is lower (at least 3).
int FdFloor();

// Moves `fd` to the lowest free number >= FdFloor(), close-on-exec, and
// closes the original. Returns the new number, or `fd` itself (made
// close-on-exec) when no high number is free. -1 stays -1.
int MoveFdHigh(int fd);

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

// Reads /proc/self/stat through one persistent high descriptor (pread: no
// descriptor is opened per call). Reopens it when the program closed or
// replaced it, and after fork (ProcStatForkChild). False when unreadable.
bool ReadProcStat(ProcStat* out);
void ProcStatForkChild();

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_FDS_H_

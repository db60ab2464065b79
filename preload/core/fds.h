// Descriptors inside the profiled process, and what memstep reads from
// /proc/self/stat.
//
// Contract: memstep keeps no descriptor open between uses in the program's
// descriptor table. A program may list every descriptor it has (CPython's
// tests fstat() them all and expect only their own), close them all
// (close-all loops, close_range, daemons) or dup2 its own files over any
// number, at any time. The trace is opened by path for each write
// (trace/writer.cc), /proc/self/stat for each read (below), and libunwind's
// validation pipe is closed once its accessor is replaced (host/unwinder.cc).
// Every descriptor memstep opens is close-on-exec.
//
// The writer thread works in a descriptor table of its own
// (TakePrivateFdTable): its opens run while the program's threads run, and in
// the shared table a file it opened would take the lowest free number, which
// the program may be about to dup2 onto (a program that closed its stdout and
// restores it: the trace chunk would go to the program's file, and the
// writer's close would close the program's stdout). memstep's own opens on a
// program thread happen inside a call into memstep (a step mark, exit, exec,
// a hook), as glibc's own do, and are moved above FdFloor() at once (OpenOwn).

#ifndef MEMSTEP_PRELOAD_CORE_FDS_H_
#define MEMSTEP_PRELOAD_CORE_FDS_H_

#include <stddef.h>
#include <stdint.h>

#include <atomic>

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

// Gives the calling thread a descriptor table of its own (unshare(2)
// CLONE_FILES) and closes every descriptor copied into it, so that what the
// thread opens later never takes a number the program can see, dup2 over or
// close, and the thread holds none of the program's files open (a pipe's
// reader still sees end-of-file when the program closes its end). False,
// with the thread still sharing the program's table, where the system
// refuses (a seccomp filter) or fails.
bool TakePrivateFdTable();
// Whether the calling thread has done so.
bool HasPrivateFdTable();

// Opens `path` for memstep's own short use; O_CLOEXEC is always added. In
// the program's table, a descriptor below FdFloor() is renumbered at once to
// FdFloor() or above: while memstep holds it, it is not one of the low
// numbers a program closes and dup2s onto (0-2 above all). -1 with errno
// set on failure.
int OpenOwn(const char* path, int flags, unsigned mode = 0);

// A copy, close-on-exec and numbered `lowest` or above in the caller's
// table, of the program's descriptor `fd`: borrowed with pidfd_getfd(2) on a
// thread with a private table (-1 where the system refuses or the main
// thread has exited), duplicated otherwise. The caller closes it.
int BorrowProgramFd(int fd, int lowest);

// memstep's messages to the program's standard error (descriptor 2 of the
// program's table). On a thread with a private table the program's
// descriptor 2 is borrowed with pidfd_getfd(2); where that fails (the main
// thread has exited, a seccomp filter), the message is queued (4 KiB, the
// rest dropped) and written by the next program thread that calls
// FlushQueuedStderr (a sampled allocation, a step mark, exec and _exit, and
// the library's destructor: never the unsampled fast path).
void SayOnStderr(const char* p, size_t n);
extern std::atomic<uint32_t> g_stderr_queued;
inline bool StderrQueued() { return g_stderr_queued.load(std::memory_order_relaxed) != 0; }
void FlushQueuedStderr();
// Fork child: the queue's lock freed, the parent's messages dropped.
void FdsForkChild();

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

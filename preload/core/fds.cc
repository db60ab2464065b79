#include "preload/core/fds.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "preload/core/base.h"

namespace memstep::preload {

namespace {

constexpr int kPreferredFloor = 512;

std::atomic<int> g_floor{0};

// HoldLowFds' descriptors (constructor only: single-threaded).
int g_held[kPreferredFloor];
int g_nheld = 0;

int Getpid() { return static_cast<int>(syscall(SYS_getpid)); }

// Linux's numbers, the same on x86-64 and aarch64 (headers older than the
// calls may lack the names).
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

__thread bool t_private_fds __attribute__((tls_model("initial-exec")));

void WriteAllFd(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Closes every descriptor of the calling thread's table, where close_range
// is missing (kernels before 5.9): by listing /proc/thread-self/fd, else
// every number below the descriptor limit.
void CloseEveryFdListed() {
  struct LinuxDirent64 {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[1];
  };
  int dir = static_cast<int>(
      syscall(SYS_openat, AT_FDCWD, "/proc/thread-self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir < 0) {
    struct rlimit rl;
    rlim_t top = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
    if (top == RLIM_INFINITY || top > (1u << 20)) top = 1u << 20;
    for (rlim_t fd = 0; fd < top; ++fd) close(static_cast<int>(fd));
    return;
  }
  alignas(8) char buf[4096];
  // Closing while listing may hide entries from the listing: again from the
  // start until a pass closes nothing.
  for (bool closed = true; closed;) {
    closed = false;
    lseek(dir, 0, SEEK_SET);
    for (;;) {
      long n = syscall(SYS_getdents64, dir, buf, sizeof(buf));
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        const auto* d = reinterpret_cast<const LinuxDirent64*>(buf + off);
        off += d->reclen;
        int fd = 0;
        const char* c = d->name;
        if (*c < '0' || *c > '9') continue;
        while (*c >= '0' && *c <= '9') fd = fd * 10 + (*c++ - '0');
        if (fd != dir && close(fd) == 0) closed = true;
      }
    }
  }
  close(dir);
}

// The queue of SayOnStderr (g_stderr_lock).
SpinLock g_stderr_lock;
char g_stderr_buf[4096];

// Parses "<pid> (comm) S f4 f5 ...": the state (field 3), num_threads (20)
// and rss in pages (24). comm may hold spaces and parentheses: the last ')'
// ends it. False unless the line is the stat line of `pid`.
bool ParseStat(const char* buf, size_t n, int pid, ProcStat* out) {
  int64_t lead = 0;
  size_t i = 0;
  while (i < n && buf[i] >= '0' && buf[i] <= '9') lead = lead * 10 + (buf[i++] - '0');
  if (i == 0 || lead != pid || i + 1 >= n || buf[i] != ' ' || buf[i + 1] != '(') return false;
  size_t close = n;
  for (size_t j = n; j > i; --j) {
    if (buf[j - 1] == ')') {
      close = j - 1;
      break;
    }
  }
  if (close >= n || close + 3 >= n) return false;
  out->state = buf[close + 2];
  // Fields from 4 on, space-separated non-negative or negative integers.
  size_t p = close + 3;
  int field = 3;
  int64_t rss_pages = -1;
  out->num_threads = -1;
  while (p < n && field < 24) {
    while (p < n && buf[p] == ' ') ++p;
    ++field;
    bool neg = p < n && buf[p] == '-';
    if (neg) ++p;
    int64_t v = 0;
    while (p < n && buf[p] >= '0' && buf[p] <= '9') v = v * 10 + (buf[p++] - '0');
    if (neg) v = -v;
    if (field == 20) out->num_threads = v;
    if (field == 24) rss_pages = v;
  }
  if (out->num_threads < 0 || rss_pages < 0) return false;
  out->rss_bytes = static_cast<uint64_t>(rss_pages) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return true;
}

}  // namespace

std::atomic<uint32_t> g_stderr_queued{0};

bool TakePrivateFdTable() {
  ErrnoSaver errno_saver;
  // close_range(CLOSE_RANGE_UNSHARE) over every number: the thread gets a new,
  // empty table in one call, which container seccomp profiles allow (Docker's
  // refuses unshare(2) without CAP_SYS_ADMIN). Kernels before 5.9: unshare.
  constexpr unsigned kCloseRangeUnshare = 1u << 1;
  if (syscall(SYS_close_range, 0u, ~0u, kCloseRangeUnshare) != 0) {
    if (syscall(SYS_unshare, CLONE_FILES) != 0) return false;
    CloseEveryFdListed();
  }
  t_private_fds = true;
  return true;
}

bool HasPrivateFdTable() { return t_private_fds; }

int OpenOwn(const char* path, int flags, unsigned mode) {
  int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, flags | O_CLOEXEC, mode));
  if (fd < 0 || t_private_fds) return fd;
  const int floor = FdFloor();
  if (fd >= floor) return fd;
  ErrnoSaver errno_saver;
  int high = fcntl(fd, F_DUPFD_CLOEXEC, floor);
  if (high < 0) return fd;  // every number above is taken: keep the low one
  close(fd);
  return high;
}

int BorrowProgramFd(int fd, int lowest) {
  if (!t_private_fds) return fcntl(fd, F_DUPFD_CLOEXEC, lowest);
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, Getpid(), 0u));
  if (pidfd < 0) return -1;
  int got = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0u));  // close-on-exec
  ErrnoSaver errno_saver;
  close(pidfd);
  if (got < 0 || got >= lowest) return got;
  int high = fcntl(got, F_DUPFD_CLOEXEC, lowest);
  close(got);
  return high;
}

void SayOnStderr(const char* p, size_t n) {
  ErrnoSaver errno_saver;
  if (!t_private_fds) {
    WriteAllFd(2, p, n);
    return;
  }
  int err = BorrowProgramFd(2, 0);
  if (err >= 0) {
    WriteAllFd(err, p, n);
    close(err);
    return;
  }
  SpinLockHolder lock(&g_stderr_lock);
  uint32_t have = g_stderr_queued.load(std::memory_order_relaxed);
  size_t room = sizeof(g_stderr_buf) - have;
  if (n > room) n = room;
  memcpy(g_stderr_buf + have, p, n);
  g_stderr_queued.store(have + static_cast<uint32_t>(n), std::memory_order_relaxed);
}

void FlushQueuedStderr() {
  if (!StderrQueued() || t_private_fds) return;
  char copy[sizeof(g_stderr_buf)];
  size_t n;
  {
    SpinLockHolder lock(&g_stderr_lock);
    n = g_stderr_queued.load(std::memory_order_relaxed);
    memcpy(copy, g_stderr_buf, n);
    g_stderr_queued.store(0, std::memory_order_relaxed);
  }
  ErrnoSaver errno_saver;
  WriteAllFd(2, copy, n);
}

void FdsForkChild() {
  g_stderr_lock.Reset();  // its holder may have been the parent's writer
  g_stderr_queued.store(0, std::memory_order_relaxed);  // the parent's messages
}

int FdFloor() {
  int f = g_floor.load(std::memory_order_relaxed);
  if (f != 0) return f;
  f = kPreferredFloor;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      rl.rlim_cur / 2 < static_cast<rlim_t>(f)) {
    f = static_cast<int>(rl.rlim_cur / 2);
  }
  if (f < 3) f = 3;
  g_floor.store(f, std::memory_order_relaxed);
  return f;
}

int HoldLowFds(int with) {
  int floor = FdFloor();
  while (g_nheld < kPreferredFloor) {
    int fd = fcntl(with, F_DUPFD_CLOEXEC, 0);  // the lowest free number
    if (fd < 0) break;
    if (fd >= floor) {
      close(fd);
      break;
    }
    g_held[g_nheld++] = fd;
  }
  return g_nheld;
}

void ReleaseLowFds() {
  while (g_nheld > 0) close(g_held[--g_nheld]);
}

bool ReadProcStat(ProcStat* out) {
  ErrnoSaver errno_saver;
  int fd = OpenOwn("/proc/self/stat", O_RDONLY);
  if (fd < 0) return false;
  char buf[1536];
  ssize_t r;
  do {
    r = read(fd, buf, sizeof(buf));
  } while (r < 0 && errno == EINTR);
  close(fd);
  return r > 0 && ParseStat(buf, static_cast<size_t>(r), Getpid(), out);
}

}  // namespace memstep::preload

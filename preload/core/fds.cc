#include "preload/core/fds.h"

#include <errno.h>
#include <fcntl.h>
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
  int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, "/proc/self/stat", O_RDONLY | O_CLOEXEC));
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

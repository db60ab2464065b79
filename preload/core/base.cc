#include "preload/core/base.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace memstep::preload {

namespace internal {
OwnMapping g_own_mappings[kOwnMappingsMax];
std::atomic<size_t> g_own_mappings_n{0};
}  // namespace internal

namespace {
SpinLock g_own_lock;  // serializes changes to the list
}  // namespace

bool RawPopulate(void* p, size_t len) {
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE (Linux 5.14)
  return syscall(SYS_madvise, p, len, kPopulateWrite) == 0;
}

void* RawMmap(size_t len) {
  long r = syscall(SYS_mmap, nullptr, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == -1) return nullptr;  // syscall() returns -1 and sets errno
  {
    SpinLockHolder h(&g_own_lock);
    const size_t n = internal::g_own_mappings_n.load(std::memory_order_relaxed);
    if (n < kOwnMappingsMax) {
      internal::g_own_mappings[n].start.store(static_cast<uintptr_t>(r), std::memory_order_relaxed);
      internal::g_own_mappings[n].len.store(len, std::memory_order_relaxed);
      internal::g_own_mappings_n.store(n + 1, std::memory_order_release);
    }
  }
  return reinterpret_cast<void*>(r);
}

void RawMunmap(void* p, size_t len) {
  syscall(SYS_munmap, p, len);
  SpinLockHolder h(&g_own_lock);
  const size_t n = internal::g_own_mappings_n.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    internal::OwnMapping& m = internal::g_own_mappings[i];
    if (m.start.load(std::memory_order_relaxed) != reinterpret_cast<uintptr_t>(p)) continue;
    // Move the last entry here; a reader racing with this sees either.
    internal::OwnMapping& last = internal::g_own_mappings[n - 1];
    m.len.store(0, std::memory_order_relaxed);
    m.start.store(last.start.load(std::memory_order_relaxed), std::memory_order_relaxed);
    m.len.store(last.len.load(std::memory_order_relaxed), std::memory_order_relaxed);
    internal::g_own_mappings_n.store(n - 1, std::memory_order_release);
    return;
  }
}

void OwnMappingsForkChild() { g_own_lock.Reset(); }

uint64_t ResidentBytes(uintptr_t start, size_t len, bool prefix) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t a = start & ~(page - 1);
  const uintptr_t end = start + len;
  unsigned char vec[4096];
  // Prefix scans go by 1 MiB and stop after 4 MiB without a resident page.
  const uintptr_t piece_pages = prefix ? (uintptr_t{1} << 20) / page : sizeof(vec);
  uint64_t pages = 0;
  int empty = 0;  // pieces in a row without a resident page
  while (a < end && !(prefix && empty >= 4)) {
    const uintptr_t piece_end = end - a > piece_pages * page ? a + piece_pages * page : end;
    const size_t n = static_cast<size_t>((piece_end - a + page - 1) / page);
    if (syscall(SYS_mincore, a, piece_end - a, vec) != 0) return pages * page;
    const uint64_t before = pages;
    for (size_t i = 0; i < n; ++i) pages += vec[i] & 1;
    empty = pages == before ? empty + 1 : 0;
    a += n * page;
  }
  return pages * page;
}

uint64_t MonoNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t ThreadCpuNs() {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return MonoNs();
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t RealNs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint32_t GetTid() { return static_cast<uint32_t>(syscall(SYS_gettid)); }

bool ParseU64(const char* s, uint64_t* out) {
  if (s == nullptr || *s == '\0') return false;
  uint64_t v = 0;
  for (; *s != '\0'; ++s) {
    if (*s < '0' || *s > '9') return false;
    uint64_t d = static_cast<uint64_t>(*s - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

}  // namespace memstep::preload

// Small freestanding building blocks of libmemstep.so.
//
// Contract: nothing here allocates from the hooked heap, throws, or needs the
// C++ runtime. Memory comes from raw mmap system calls (never the interposed
// mmap), locks are spinlocks (a few instructions, held for short critical
// sections only, never across an unwind or a system call that can block), and
// all of it is usable before main, after static destructors, and inside the
// fork handlers (a SpinLock is reset in the child by Reset()).

#ifndef MEMSTEP_PRELOAD_BASE_H_
#define MEMSTEP_PRELOAD_BASE_H_

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>

#define MEMSTEP_ALWAYS_INLINE inline __attribute__((always_inline))
#define MEMSTEP_NOINLINE __attribute__((noinline))
#define MEMSTEP_LIKELY(x) __builtin_expect(!!(x), 1)
#define MEMSTEP_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define MEMSTEP_EXPORT extern "C" __attribute__((visibility("default")))

// Supported: x86-64 and aarch64 Linux, both little-endian LP64. The few
// instruction-set-specific pieces (the dlopen/dlsym/dlvsym trampolines, the
// frame walk of InLoader, the libunwind symbol names, glibc's base symbol
// version, this spin hint) have one branch per architecture; the trace format
// is little-endian and written with memcpy of native integers.
#if defined(__x86_64__)
#define MEMSTEP_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
// isb rather than yield: yield is a no-op on Neoverse cores, isb waits a few
// tens of cycles, like x86's pause.
#define MEMSTEP_CPU_RELAX() __asm__ __volatile__("isb" ::: "memory")
#else
#error "libmemstep.so supports x86-64 and aarch64 Linux only"
#endif
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the trace format is little-endian");

namespace memstep::preload {

// Anonymous private mapping made with the raw system call, so that memstep's
// own memory never appears as an application mmap. MAP_NORESERVE: pages are
// committed on first touch. Returns nullptr on failure.
// Every such mapping is listed (up to kOwnMappingsMax; more are not, and
// their pages are missing from memstep's own memory) so that memstep's own
// resident memory can be measured.
void* RawMmap(size_t len);
void RawMunmap(void* p, size_t len);
// Commits the pages of [p, p + len) without changing their contents
// (madvise MADV_POPULATE_WRITE); false where the kernel lacks it.
bool RawPopulate(void* p, size_t len);

// memstep's own memory (docs/analysis.md "RSS growth explained"): calls
// f(start, len) for each listed RawMmap mapping. Lock-free reads of a list
// that RawMmap/RawMunmap change under a spinlock: a mapping made or removed
// meanwhile may be seen or missed (a statistic; mincore on a range that is
// gone fails and counts nothing).
inline constexpr size_t kOwnMappingsMax = 2048;
template <typename F>
void ForEachOwnMapping(F f);
// Resident bytes of [start, start + len) by mincore(2), in pieces of 16 MiB
// (a 4 KiB vector on the stack); 0 for a range that is not mapped. With
// `prefix`, in pieces of 1 MiB, stopping after 4 MiB without a resident page:
// for reservations filled from their start (the dictionary's 1 GiB log and
// pool), whose untouched rest would cost a few ns a page to scan; hash
// tables that sparse are nearly empty (a page or two missed).
uint64_t ResidentBytes(uintptr_t start, size_t len, bool prefix = false);
// Fork child: the list's lock may have been held by another thread.
void OwnMappingsForkChild();

namespace internal {
struct OwnMapping {
  std::atomic<uintptr_t> start{0};
  std::atomic<size_t> len{0};
};
extern OwnMapping g_own_mappings[kOwnMappingsMax];
extern std::atomic<size_t> g_own_mappings_n;
}  // namespace internal

template <typename F>
void ForEachOwnMapping(F f) {
  const size_t n = internal::g_own_mappings_n.load(std::memory_order_acquire);
  for (size_t i = 0; i < n && i < kOwnMappingsMax; ++i) {
    const uintptr_t start = internal::g_own_mappings[i].start.load(std::memory_order_relaxed);
    const size_t len = internal::g_own_mappings[i].len.load(std::memory_order_relaxed);
    if (start != 0 && len != 0) f(start, len);
  }
}

// CLOCK_MONOTONIC in nanoseconds.
uint64_t MonoNs();
// CPU time of the calling thread, ns (CLOCK_THREAD_CPUTIME_ID; MonoNs where
// that clock fails): a cost that a preemption does not inflate.
uint64_t ThreadCpuNs();
uint64_t RealNs();

// Kernel thread id of the caller (a system call; cache it).
uint32_t GetTid();

// Test-and-test-and-set spinlock. Protects short critical sections only.
class SpinLock {
 public:
  void Lock() {
    while (v_.exchange(1, std::memory_order_acquire) != 0) {
      while (v_.load(std::memory_order_relaxed) != 0) MEMSTEP_CPU_RELAX();
    }
  }
  // Takes the lock only if it is free right now (never spins).
  bool TryLock() {
    return v_.load(std::memory_order_relaxed) == 0 &&
           v_.exchange(1, std::memory_order_acquire) == 0;
  }
  void Unlock() { v_.store(0, std::memory_order_release); }
  // Fork child only: the owner may have been another thread of the parent.
  void Reset() { v_.store(0, std::memory_order_relaxed); }

 private:
  std::atomic<int> v_{0};
};

class SpinLockHolder {
 public:
  explicit SpinLockHolder(SpinLock* l) : l_(l) { l_->Lock(); }
  ~SpinLockHolder() { l_->Unlock(); }
  SpinLockHolder(const SpinLockHolder&) = delete;
  SpinLockHolder& operator=(const SpinLockHolder&) = delete;

 private:
  SpinLock* l_;
};

// Restores errno on scope exit (every hook passes errno through unchanged).
class ErrnoSaver {
 public:
  ErrnoSaver() : saved_(errno) {}
  ~ErrnoSaver() { errno = saved_; }
  ErrnoSaver(const ErrnoSaver&) = delete;
  ErrnoSaver& operator=(const ErrnoSaver&) = delete;

 private:
  int saved_;
};

// CAS-max: raises *a to at least v.
inline void AtomicMax(std::atomic<uint64_t>* a, uint64_t v) {
  uint64_t cur = a->load(std::memory_order_relaxed);
  while (cur < v && !a->compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

inline uint64_t HashBytes(const void* data, size_t n, uint64_t seed = 0) {
  // FNV-1a over 8-byte words with a final avalanche; good enough for interning.
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t h = 0xcbf29ce484222325ull ^ seed;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

// Parses a plain non-negative decimal integer; returns false on anything else.
bool ParseU64(const char* s, uint64_t* out);

// Length of a NUL-terminated string (no libc call, usable anywhere).
inline size_t StrLen(const char* s) {
  size_t n = 0;
  while (s[n] != '\0') ++n;
  return n;
}

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_BASE_H_

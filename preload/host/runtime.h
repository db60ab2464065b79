// Process-wide and per-thread state of libmemstep.so, shared by the hooks
// (hooks.cc: fast paths), the recorder (recorder.cc: slow paths, the public
// API, fork and thread exit) and the writer (writer.cc: the trace file).
//
// Contract:
//  - ThreadState lives in initial-exec TLS: reading it is one %fs-relative
//    access, no call. `guard` is THE reentrancy guard: when set, hooks only
//    forward and count; it is set around every slow path, permanently in
//    memstep's own threads, and in the fork handlers.
//  - g_hot is written only during ResolveReal() (before any fast path can use
//    the fields it changes) and read without synchronisation afterwards. Its
//    fast-path bounds start out routing every call to the out-of-line paths
//    (hooks.cc), and keep doing so when the real allocator is not glibc's, so
//    the fast paths need no test of the allocator's kind.
//  - g_real holds the real functions; until they are resolved every pointer
//    is a stub that resolves them first (so the fast path never tests for
//    null).
//  - Exact counters: per-thread pending deltas, flushed to g_counters (relaxed
//    atomics) when 1 MiB has been allocated or freed since the last flush, at
//    every step/stage boundary and at thread exit. Live bytes are therefore
//    exact up to threads x 1 MiB. The fast paths keep the pending bytes as
//    what is left before the next flush (`alloc_left`, `free_left`: one
//    subtraction and a sign test), and charge each block 8 bytes more than
//    its usable size: for a glibc heap chunk that is its size field less the
//    flag bits, as the fast path reads it; the flush takes the 8 bytes per
//    block back out. A flush sets both to g_hot.flush_left, which is below
//    the charge of any block of S_always or more, so the fast `free` needs no
//    test for big blocks: freeing one always runs into the flush tail, which
//    makes it. A thread starts (zeroed TLS) with nothing left: its first
//    count flushes, and sets it up.
#ifndef MEMSTEP_PRELOAD_RUNTIME_H_
#define MEMSTEP_PRELOAD_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <atomic>

#include "preload/core/addr_map.h"
#include "preload/core/base.h"
#include "preload/core/dictionary.h"
#include "preload/core/glibc_chunk.h"
#include "preload/core/region.h"
#include "preload/core/ring.h"
#include "preload/core/sampler.h"
#include "src/format/format.h"

namespace memstep::preload {

// The one table of hooked functions: X(name, return type, (params), (args)).
// All are required except reallocarray, pvalloc and mmap64, which memstep
// emulates with realloc, memalign and mmap when the next library lacks them.
#define MEMSTEP_HOOKED_FUNCTIONS(X)                                                             \
  X(malloc, void*, (size_t n), (n))                                                             \
  X(free, void, (void* p), (p))                                                                 \
  X(calloc, void*, (size_t m, size_t n), (m, n))                                                \
  X(realloc, void*, (void* p, size_t n), (p, n))                                                \
  X(reallocarray, void*, (void* p, size_t m, size_t n), (p, m, n))                              \
  X(posix_memalign, int, (void** out, size_t a, size_t n), (out, a, n))                         \
  X(aligned_alloc, void*, (size_t a, size_t n), (a, n))                                         \
  X(memalign, void*, (size_t a, size_t n), (a, n))                                              \
  X(valloc, void*, (size_t n), (n))                                                             \
  X(pvalloc, void*, (size_t n), (n))                                                            \
  X(malloc_usable_size, size_t, (void* p), (p))                                                 \
  X(mmap, void*, (void* a, size_t l, int pr, int fl, int fd, off_t o), (a, l, pr, fl, fd, o))   \
  X(mmap64, void*, (void* a, size_t l, int pr, int fl, int fd, off_t o), (a, l, pr, fl, fd, o)) \
  X(munmap, int, (void* a, size_t l), (a, l))                                                   \
  X(mremap, void*, (void* o, size_t ol, size_t nl, int fl, void* na), (o, ol, nl, fl, na))      \
  X(mprotect, int, (void* a, size_t l, int pr), (a, l, pr))                                     \
  X(dlopen, void*, (const char* f, int m), (f, m))                                              \
  X(dlclose, int, (void* h), (h))

struct RealFns {
#define MEMSTEP_REAL_FIELD(name, ret, params, args) ret(*name) params;
  MEMSTEP_HOOKED_FUNCTIONS(MEMSTEP_REAL_FIELD)
#undef MEMSTEP_REAL_FIELD
};
extern RealFns g_real;

struct alignas(64) Hot {
  uintptr_t region_base;  // sampled-block region (see region.h)
  size_t region_size;
  size_t always_bytes;  // S_always
  bool glibc;           // the real malloc is glibc's: read chunk headers
  // The fast paths' bounds. With glibc's allocator, once resolved:
  // fast_below = always_bytes and [free_slow_base, +free_slow_size) = the
  // region. Before resolution, and for any other allocator, fast_below = 0
  // and the free range covers every address (base + 2^64 - 1 wraps around):
  // every call takes the out-of-line generic paths, which test the rest.
  size_t fast_below;         // malloc family: requests below this take the fast path
  uintptr_t free_slow_base;  // free: p - base < size takes the out-of-line path
  size_t free_slow_size;
  uint64_t big_chunk;  // always_bytes + 8: glibc heap chunks from this size are big
  // What a counter flush leaves a thread (ThreadState::alloc_left/free_left):
  // min(1 MiB, big_chunk) - 1, 0 until resolved (every count flushes).
  int64_t flush_left;
};
extern Hot g_hot;

struct ThreadState {
  int64_t bytes_until_sample;  // Poisson countdown; < 0 -> sample
  int64_t alloc_left;          // left_base - charged bytes pending (see above); < 0: flush
  uint64_t alloc_count;        // pending allocations
  int64_t free_left;           // the same for frees
  uint64_t free_count;         // pending frees
  int64_t left_base;           // what the last flush set both *_left to
  uint8_t guard;               // reentrancy guard
  uint8_t in_dl;               // inside our dlclose wrapper (dlopen: dl_sp); see InLoader
  uint8_t seeded;
  uint8_t key_armed;  // thread-exit destructor armed
  uint8_t own;        // memstep's own thread (the writer): its allocations are not the program's
  uint8_t py_depth;   // native frames the next Python-thread unwind asks for (recorder.cc)
  uint32_t tid;
  Ring* ring;
  Sampler sampler;
  uint64_t gap_interval;   // the T the current gap was drawn with (stamped on its sample)
  int64_t gap_rest;        // the current gap's bytes beyond the countdown's piece (DecideSample)
  uintptr_t dl_sp;         // sp at the entry of the outermost dlopen running (0: none)
  uintptr_t dl_ret;        // its caller's return address (x86-64: left at dl_sp)
  uintptr_t guarded_mmap;  // the last anonymous mmap made with the guard set (pymem.cc: arenas)
  uintptr_t pymem_fresh;   // the pymalloc block this thread sampled last (pymem.cc: re-stamps)
};
extern __thread ThreadState t_state __attribute__((tls_model("initial-exec")));

// Whether this thread is inside the loader, where it may hold the loader
// lock: no lossless waits (the writer may need that lock), no module refresh
// (it takes it). dlclose has a C++ wrapper that counts itself in in_dl. dlopen
// has none: it jumps to the real dlopen, which returns straight to its caller
// (hooks.cc), so ms_dlopen_enter only records the stack slot that holds the
// caller's return address (dl_sp) and that address (dl_ret). While the dlopen
// runs, every frame is deeper than dl_sp and the slot is untouched; once it has
// returned, the caller's next call overwrites the slot with another return
// address, and any deeper code was reached through such a call. A stale record
// is cleared. A wrong "inside" needs the caller to call from the same site
// again (a call through one function pointer); it only drops a record in
// lossless mode or leaves a module refresh to the writer thread.
// aarch64 has no such slot (the return address arrives in x30): there the
// frame-record chain is walked instead (InDlopenFrames, recorder.cc).
#if defined(__aarch64__)
bool InDlopenFrames(uintptr_t dl_sp, uintptr_t dl_ret);
#endif
MEMSTEP_ALWAYS_INLINE bool InLoader(ThreadState& t) {
  if (t.in_dl > 0) return true;
  if (t.dl_sp == 0) return false;
#if defined(__aarch64__)
  if (InDlopenFrames(t.dl_sp, t.dl_ret)) return true;
#else
  const uintptr_t sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (sp < t.dl_sp && *reinterpret_cast<const uintptr_t*>(t.dl_sp) == t.dl_ret) return true;
#endif
  t.dl_sp = 0;
  return false;
}

enum RunState : int { kNotYet = 0, kRecording = 1, kStopped = 2, kDisabled = 3 };
extern std::atomic<int> g_state;

struct Config {
  uint64_t sample_interval;  // T_steady, bytes; <= 1: every allocation
  uint64_t warm_interval;    // T_warm: warm-up and boosts (progressive sampling)
  bool progressive;          // T changes at step boundaries (progressive.cc)
  double hunt_budget;        // leak hunt: samples' share of wall time, 0..1 (0 = no hunt)
  bool hunt_screen;          // the leak hunt screens Python contexts (MEMSTEP_HUNT_SCREEN)
  uint64_t seed;             // MEMSTEP_SEED: reproducible sampling gaps (0 = from the clock)
  uint64_t always_bytes;
  uint64_t flush_ms;
  bool lossless;  // a full ring makes the producer wait (bounded) instead of dropping
  bool disabled;
  bool quiet;
  char dir[1024];
  uint64_t test_writer_stall_ms;  // MEMSTEP_TEST_WRITER_STALL_MS: tests only (writer.cc)
};
extern Config g_config;

struct GlobalCounters {
  std::atomic<uint64_t> alloc_bytes{0};
  std::atomic<uint64_t> alloc_count{0};
  std::atomic<uint64_t> free_bytes{0};
  std::atomic<uint64_t> free_count{0};
  std::atomic<uint64_t> mmap_live{0};
  std::atomic<uint64_t> run_max{0};
  std::atomic<uint64_t> step_max{0};
};
extern GlobalCounters g_counters;

extern Region g_region;
// Address -> usable size of the always-recorded big blocks (size >= S_always)
// and of sampled blocks from the real allocator (the region was exhausted).
// free() consults it only for blocks of usable size >= S_always.
extern ShardedAddrMap<uint64_t, 6> g_big;  // 64 shards
extern Dictionary g_dict;
extern std::atomic<uint64_t> g_seq;
extern std::atomic<uint64_t> g_cur_step;
extern std::atomic<uint32_t> g_cur_stage;  // string id of the innermost open stage
extern std::atomic<int> g_maps_dirty;
// The mean sampling interval T in force for new gaps (progressive.cc changes
// it at step boundaries). Read on the sampling slow path only.
extern std::atomic<uint64_t> g_interval;

inline constexpr uint64_t kFlushBytes = uint64_t{1} << 20;
// A thread's pending counts are flushed once the bytes charged for them (the
// usable sizes plus kChargePad per block) exceed what the last flush left it.
inline constexpr uint64_t kChargePad = 8;
MEMSTEP_ALWAYS_INLINE uint64_t PendingAllocBytes(const ThreadState& t) {
  return static_cast<uint64_t>(t.left_base - t.alloc_left) - kChargePad * t.alloc_count;
}
MEMSTEP_ALWAYS_INLINE uint64_t PendingFreeBytes(const ThreadState& t) {
  return static_cast<uint64_t>(t.left_base - t.free_left) - kChargePad * t.free_count;
}
MEMSTEP_ALWAYS_INLINE void ClearPending(ThreadState& t) {
  t.left_base = t.alloc_left = t.free_left = g_hot.flush_left;
  t.alloc_count = t.free_count = 0;
}

// ---- slow paths (recorder.cc) ----
void ResolveReal();
void FlushCounters(ThreadState* t);

enum AllocFn : uint8_t {
  kFnMalloc,
  kFnCalloc,
  kFnPosixMemalign,
  kFnAlignedAlloc,
  kFnMemalign,
  kFnValloc,
  kFnPvalloc,
  kFnReallocNull,  // realloc(NULL, n)
};
struct AllocReq {
  AllocFn fn;
  size_t size;   // bytes requested (calloc: m * n)
  size_t m, n;   // calloc operands
  size_t align;  // 0 = default
  int ret;       // posix_memalign's result
};
void* AllocSlow(AllocReq* r, bool countdown_hit);
void* AllocSlowArgs(AllocFn fn, size_t size, size_t m, size_t n, size_t align, bool countdown_hit,
                    int* ret);
void FreeRegionSlow(void* p);
void FreeBigSlow(void* p, size_t usable);
void* ReallocSlow(void* p, size_t n, bool countdown_hit);
void RecordMmap(void* p, size_t len, int prot, int flags);
// Takes [a, a + len) out of the anonymous mappings (counter and a MUNMAP
// record) while it stays mapped: memory another counter now holds (the
// pymalloc arenas memstep adopts at install, pymem.cc).
void ForgetMapping(uintptr_t a, size_t len);
int MunmapSlow(void* p, size_t len);
void* MremapSlow(void* old, size_t old_len, size_t new_len, int flags, void* new_addr);
int MprotectSlow(void* p, size_t len, int prot);
// dlopen's entry (hooks.cc: nothing runs after the real one): marks the
// module maps dirty and the thread inside the loader (InLoader). entry_sp is
// the stack pointer at dlopen's entry (x86-64: the slot holding the caller's
// return address), ret that return address.
void EnterDlopen(uintptr_t entry_sp, uintptr_t ret);
// Around the real dlclose: the library's mappings are recorded before it is
// unmapped; afterwards the unwinder's cache is flushed.
void BeforeDlclose();
void AfterDlclose();
// glibc's dlsym for memstep's own lookups (cuda_dl.cc): RTLD_NEXT is relative
// to libmemstep, and no other interposer of dlsym answers in glibc's place.
void* OwnDlsym(void* handle, const char* name);

// The real allocation call of a request (constant-folded in the fast paths).
MEMSTEP_ALWAYS_INLINE void* RealAlloc(AllocReq& r) {
  switch (r.fn) {
    case kFnMalloc:
      return g_real.malloc(r.size);
    case kFnCalloc:
      return g_real.calloc(r.m, r.n);
    case kFnPosixMemalign: {
      void* p = nullptr;
      r.ret = g_real.posix_memalign(&p, r.align, r.size);
      return r.ret == 0 ? p : nullptr;
    }
    case kFnAlignedAlloc:
      return g_real.aligned_alloc(r.align, r.size);
    case kFnMemalign:
      return g_real.memalign(r.align, r.size);
    case kFnValloc:
      return g_real.valloc(r.size);
    case kFnPvalloc:
      return g_real.pvalloc(r.size);
    case kFnReallocNull:
      return g_real.realloc(nullptr, r.size);
  }
  return nullptr;
}

MEMSTEP_ALWAYS_INLINE size_t RealUsable(void* p) {
  return MEMSTEP_LIKELY(g_hot.glibc) ? GlibcUsableSize(p) : g_real.malloc_usable_size(p);
}

// What a sampled block of memstep's region (`size` requested bytes) counts
// in the exact counters: the usable size glibc would have given the request
// (its chunk less the 8-byte header, at least 24 bytes), as the block would
// have counted unsampled; the analysis weights each sample by the same usable
// size (src/analysis/replay.h UsableBytes). With another allocator: the
// request.
MEMSTEP_ALWAYS_INLINE size_t RegionCharge(size_t size) {
  return g_hot.glibc ? static_cast<size_t>(format::GlibcUsable(size)) : size;
}

// What a sample's block holds beyond its `size` requested bytes, as the
// analysis counts it (src/analysis/replay.h UsableBytes): pymalloc's 16-byte
// classes; glibc's usable size below 128 KiB; else 0 (another allocator, or a
// block glibc may have mmapped). The site tally weighs samples by it.
MEMSTEP_ALWAYS_INLINE size_t SampleSlack(size_t size, bool pymalloc) {
  if (pymalloc) return static_cast<size_t>(format::PymallocUsable(size)) - size;
  if (!g_hot.glibc || size >= format::kGlibcMmapFloor) return 0;
  return static_cast<size_t>(format::GlibcUsable(size)) - size;
}

// Counts one block of `charge` = usable size + kChargePad bytes (a glibc
// heap chunk's size); true when the thread's pending counts are due for a
// flush (the caller flushes).
MEMSTEP_ALWAYS_INLINE bool ChargeAlloc(ThreadState& t, size_t charge) {
  t.alloc_count += 1;
  t.alloc_left -= static_cast<int64_t>(charge);
  return t.alloc_left < 0;
}
MEMSTEP_ALWAYS_INLINE bool ChargeFree(ThreadState& t, size_t charge) {
  t.free_count += 1;
  t.free_left -= static_cast<int64_t>(charge);
  return t.free_left < 0;
}
MEMSTEP_ALWAYS_INLINE bool CountAllocNoFlush(ThreadState& t, size_t sz) {
  return ChargeAlloc(t, sz + kChargePad);
}
MEMSTEP_ALWAYS_INLINE bool CountFreeNoFlush(ThreadState& t, size_t sz) {
  return ChargeFree(t, sz + kChargePad);
}
MEMSTEP_ALWAYS_INLINE void CountAlloc(ThreadState& t, size_t sz) {
  if (MEMSTEP_UNLIKELY(CountAllocNoFlush(t, sz))) FlushCounters(&t);
}
MEMSTEP_ALWAYS_INLINE void CountFree(ThreadState& t, size_t sz) {
  if (MEMSTEP_UNLIKELY(CountFreeNoFlush(t, sz))) FlushCounters(&t);
}

// ---- the writer (writer.cc) ----
// Opens the trace file and writes its header; false (after Degrade) on error.
bool WriterOpen(bool fork_child, const char* parent_path);
void WriterStartThread();
// Starts one of memstep's own threads, detached, with every signal blocked.
bool StartOwnThread(void* (*main)(void*));
// memstep's own threads: each adds 1 at its first instruction, -1 at its last.
void OwnThreadsAdd(int n);
// Wakes the writer before its period ends (a ring is half full).
void WakeWriter();
// Wakes the writer to collect the allocator's statistics (AllocStatsRequest);
// no flush cycle unless one is due.
void WakeWriterForStats();
// The pid whose trace is open (set by WriterOpen, also in fork children). A
// vfork child shares our memory but has another pid: it must not flush.
extern std::atomic<int> g_trace_pid;
// One flush cycle; `final` also writes the trailer and stops recording.
void WriterCycle(bool final);
Ring* AcquireRing(uint32_t tid);
// The kept lane (ring.h): records that must not be dropped, when their
// thread's ring is full. Its lock is the innermost: held for a copy only.
extern KeptLane g_kept;
void RetireRing(Ring* r);
// Fork protocol: prepare takes every lock, parent releases them, child resets
// them and starts a fresh trace. Lock order (outermost first), which every
// nesting in the library follows: flush_mu, g_api_lock, ring registry,
// dictionary, address-table shards, region classes, mmap intervals.
void WriterForkPrepare();  // flush_mu
void RegistryLock();
void RegistryUnlock();
void WriterForkParent();
void WriterForkChild();
// Prints one line on stderr, writes a kTagNotice if possible, stops recording.
void Degrade(const char* what, const char* detail, int err);
uint64_t StartMonoNs();
uint64_t ReadRssBytes();
// The RSS of the latest ReadRssBytes (a step boundary or a writer cycle, so at
// most one flush period old): stage boundaries use it instead of reading
// /proc/self/statm, which costs ~10 us a time.
uint64_t LastRssBytes();

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_RUNTIME_H_

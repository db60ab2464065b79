// The interposed functions (fast paths) and the resolution of the real ones.
//
// Every hook reads the thread state first (one initial-exec TLS access), does
// the few instructions of exact accounting and the sampling countdown inline,
// calls the real function through a cached pointer (no PLT), and branches to a
// NOINLINE slow path (recorder.cc) only for sampled, always-recorded or
// region-owned blocks. Return values, out-parameters and errno pass through
// unchanged: the fast path makes no system call, and every slow path saves
// and restores errno around its own work.

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/host/runtime.h"

namespace memstep::preload {

__thread ThreadState t_state __attribute__((tls_model("initial-exec")));
static __thread bool t_resolving __attribute__((tls_model("initial-exec")));

// Until ResolveReal() sets them, the fast-path bounds send every call to the
// out-of-line paths (fast_below 0, the free range all addresses).
Hot g_hot = {0, 0, size_t{1} << 20, false, 0, 0, ~size_t{0}, (uint64_t{1} << 20) + 8, 0};
Region g_region;

namespace {

SpinLock g_resolve_lock;
std::atomic<bool> g_resolved{false};
alignas(4096) char g_static_arena[Region::kBootstrapBytes];

void* BootAlloc(size_t n, size_t align) {
  void* p = g_region.BootstrapAlloc(n, align);
  if (p == nullptr) {
    static const char kMsg[] = "memstep: bootstrap arena exhausted\n";
    (void)!write(2, kMsg, sizeof(kMsg) - 1);
    abort();
  }
  return p;
}

// Stubs: the initial value of every g_real pointer. They resolve the real
// functions, or serve from the bootstrap arena while resolution is under way
// on this thread (dlsym may allocate).
void* StubMalloc(size_t n) {
  if (t_resolving) return BootAlloc(n, 16);
  ResolveReal();
  return g_real.malloc(n);
}
void StubFree(void* p) {
  if (g_region.Contains(p) || t_resolving) return;
  ResolveReal();
  g_real.free(p);
}
void* StubCalloc(size_t m, size_t n) {
  if (t_resolving) {
    size_t total;
    if (__builtin_mul_overflow(m, n, &total)) return nullptr;
    return BootAlloc(total, 16);  // fresh mapping: already zero
  }
  ResolveReal();
  return g_real.calloc(m, n);
}
void* StubRealloc(void* p, size_t n) {
  if (t_resolving) {
    void* q = BootAlloc(n, 16);
    if (p != nullptr) {
      size_t old = g_region.RequestedSize(p);
      memcpy(q, p, old < n ? old : n);
    }
    return q;
  }
  ResolveReal();
  return g_real.realloc(p, n);
}
void* StubReallocarray(void* p, size_t m, size_t n) {
  size_t total;
  if (__builtin_mul_overflow(m, n, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return StubRealloc(p, total);
}
int StubPosixMemalign(void** out, size_t a, size_t n) {
  if (t_resolving) {
    *out = BootAlloc(n, a);
    return 0;
  }
  ResolveReal();
  return g_real.posix_memalign(out, a, n);
}
void* StubAlignedAlloc(size_t a, size_t n) {
  if (t_resolving) return BootAlloc(n, a);
  ResolveReal();
  return g_real.aligned_alloc(a, n);
}
void* StubMemalign(size_t a, size_t n) {
  if (t_resolving) return BootAlloc(n, a);
  ResolveReal();
  return g_real.memalign(a, n);
}
void* StubValloc(size_t n) {
  if (t_resolving) return BootAlloc(n, 4096);
  ResolveReal();
  return g_real.valloc(n);
}
void* StubPvalloc(size_t n) {
  if (t_resolving) return BootAlloc((n + 4095) & ~size_t{4095}, 4096);
  ResolveReal();
  return g_real.pvalloc(n);
}
size_t StubMallocUsableSize(void* p) {
  if (g_region.Contains(p)) return g_region.IsBootstrap(p) ? 0 : g_region.RequestedSize(p);
  if (t_resolving) return 0;
  ResolveReal();
  return g_real.malloc_usable_size(p);
}
void* RawMmapCall(void* a, size_t l, int pr, int fl, int fd, off_t o) {
  long r = syscall(SYS_mmap, a, l, pr, fl, fd, o);
  return r == -1 ? MAP_FAILED : reinterpret_cast<void*>(r);
}
void* StubMmap(void* a, size_t l, int pr, int fl, int fd, off_t o) {
  if (t_resolving) return RawMmapCall(a, l, pr, fl, fd, o);
  ResolveReal();
  return g_real.mmap(a, l, pr, fl, fd, o);
}
void* StubMmap64(void* a, size_t l, int pr, int fl, int fd, off_t o) {
  return StubMmap(a, l, pr, fl, fd, o);
}
int StubMunmap(void* a, size_t l) {
  if (t_resolving) return static_cast<int>(syscall(SYS_munmap, a, l));
  ResolveReal();
  return g_real.munmap(a, l);
}
void* StubMremap(void* o, size_t ol, size_t nl, int fl, void* na) {
  if (t_resolving) {
    long r = syscall(SYS_mremap, o, ol, nl, fl, na);
    return r == -1 ? MAP_FAILED : reinterpret_cast<void*>(r);
  }
  ResolveReal();
  return g_real.mremap(o, ol, nl, fl, na);
}
int StubMprotect(void* a, size_t l, int pr) {
  if (t_resolving) return static_cast<int>(syscall(SYS_mprotect, a, l, pr));
  ResolveReal();
  return g_real.mprotect(a, l, pr);
}
void* StubDlopen(const char* f, int m) {
  ResolveReal();
  return g_real.dlopen(f, m);
}
int StubDlclose(void* h) {
  ResolveReal();
  return g_real.dlclose(h);
}

// Emulations for optional functions the next library may lack.
void* EmulatedPvalloc(size_t n) {
  size_t page = 4096;
  size_t rounded = n == 0 ? page : (n + page - 1) & ~(page - 1);
  if (rounded < n) {
    errno = ENOMEM;
    return nullptr;
  }
  return g_real.memalign(page, rounded);
}
void* EmulatedReallocarray(void* p, size_t m, size_t n) {
  size_t total;
  if (__builtin_mul_overflow(m, n, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return g_real.realloc(p, total);
}

void ReserveRegion() {
  // 17 class spans of 2 GiB + metadata + bootstrap: about 36 GiB of address
  // space, committed on touch. Halve on failure (e.g. a ulimit -v).
  size_t want = (size_t{36} << 30) + Region::kAlign;
  while (want >= (size_t{64} << 20)) {
    void* mem = RawMmap(want + Region::kAlign);
    if (mem != nullptr) {
      uintptr_t a = reinterpret_cast<uintptr_t>(mem);
      uintptr_t aligned = (a + Region::kAlign - 1) & ~(Region::kAlign - 1);
      g_region.Init(reinterpret_cast<char*>(aligned), want);
      return;
    }
    want /= 2;
  }
  g_region.Init(g_static_arena, sizeof(g_static_arena));
}

}  // namespace

RealFns g_real = {
    StubMalloc,           StubFree,         StubCalloc,   StubRealloc, StubReallocarray,
    StubPosixMemalign,    StubAlignedAlloc, StubMemalign, StubValloc,  StubPvalloc,
    StubMallocUsableSize, StubMmap,         StubMmap64,   StubMunmap,  StubMremap,
    StubMprotect,         StubDlopen,       StubDlclose,
};

void ReadConfig();  // recorder.cc

// The fast paths' rare tails (kept out of line so the fast paths need no
// frame to survive a call).
namespace {
MEMSTEP_NOINLINE void* CountAllocMmapped(void* p) {
  CountAlloc(t_state, GlibcUsableSize(p));
  return p;
}
MEMSTEP_NOINLINE void* FlushAfterAlloc(void* p) {
  FlushCounters(&t_state);
  return p;
}
// Counts and frees a block of the real allocator whose usable size is sz.
MEMSTEP_NOINLINE void FreeCounted(void* p, size_t sz) {
  ThreadState& t = t_state;
  if (MEMSTEP_UNLIKELY(sz >= g_hot.always_bytes) && !t.guard) return FreeBigSlow(p, sz);
  CountFree(t, sz);
  g_real.free(p);
}
MEMSTEP_NOINLINE void FreeMmapped(void* p) { FreeCounted(p, GlibcUsableSize(p)); }
// The fast free's tail when the chunk's charge ran out what was left: a big
// block (it always does, runtime.h) is recorded, anything else flushes.
MEMSTEP_NOINLINE void FreeChargedOut(void* p, uint64_t chunk) {
  ThreadState& t = t_state;
  if (chunk >= g_hot.big_chunk && !t.guard) {
    t.free_count -= 1;  // FreeBigSlow counts it
    t.free_left += static_cast<int64_t>(chunk);
    return FreeBigSlow(p, chunk - 8);
  }
  FlushCounters(&t);
  g_real.free(p);
}
}  // namespace

void ResolveReal() {
  if (g_resolved.load(std::memory_order_acquire) || t_resolving) return;
  SpinLockHolder lock(&g_resolve_lock);
  if (g_resolved.load(std::memory_order_acquire)) return;
  ErrnoSaver errno_saver;
  uint8_t saved_guard = t_state.guard;
  t_state.guard = 1;
  t_resolving = true;
  ReserveRegion();
  g_hot.region_base = g_region.base();
  g_hot.region_size = g_region.size();
  // Still every address (but region_base - 1, never a block's): the range
  // moves onto the region in one store once the allocator is known.
  g_hot.free_slow_base = g_region.base();
  ReadConfig();
  g_hot.always_bytes = g_config.always_bytes;
  g_hot.big_chunk =
      g_config.always_bytes <= ~uint64_t{0} - 8 ? g_config.always_bytes + 8 : ~uint64_t{0};
  // Below any big block's charge (runtime.h): freeing one always flushes.
  g_hot.flush_left =
      static_cast<int64_t>((g_hot.big_chunk < kFlushBytes ? g_hot.big_chunk : kFlushBytes) - 1);

  RealFns r;
#define MEMSTEP_RESOLVE(name, ret, params, args) \
  r.name = reinterpret_cast<ret(*) params>(OwnDlsym(RTLD_NEXT, #name));
  MEMSTEP_HOOKED_FUNCTIONS(MEMSTEP_RESOLVE)
#undef MEMSTEP_RESOLVE
  if (r.pvalloc == nullptr) r.pvalloc = EmulatedPvalloc;
  if (r.reallocarray == nullptr) r.reallocarray = EmulatedReallocarray;
  if (r.mmap64 == nullptr) r.mmap64 = r.mmap;
  if (r.mmap == nullptr) r.mmap = r.mmap64 != nullptr ? r.mmap64 : RawMmapCall;
  if (r.mmap64 == nullptr) r.mmap64 = r.mmap;
  if (r.malloc == nullptr || r.free == nullptr || r.calloc == nullptr || r.realloc == nullptr ||
      r.posix_memalign == nullptr || r.aligned_alloc == nullptr || r.memalign == nullptr ||
      r.valloc == nullptr || r.malloc_usable_size == nullptr || r.munmap == nullptr ||
      r.mremap == nullptr || r.mprotect == nullptr || r.dlopen == nullptr || r.dlclose == nullptr) {
    static const char kMsg[] = "memstep: a required allocator function is missing\n";
    (void)!write(2, kMsg, sizeof(kMsg) - 1);
    abort();
  }
  // Publish: every pointer is word-sized, so a racing reader sees either the
  // stub (which waits on g_resolve_lock) or the real function.
#define MEMSTEP_PUBLISH(name, ret, params, args) \
  __atomic_store_n(&g_real.name, r.name, __ATOMIC_RELEASE);
  MEMSTEP_HOOKED_FUNCTIONS(MEMSTEP_PUBLISH)
#undef MEMSTEP_PUBLISH
  t_resolving = false;
  // The real malloc is glibc's if it is libc.so.6's own malloc.
  void* libc = g_real.dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (libc != nullptr) {
    g_hot.glibc = OwnDlsym(libc, "malloc") == reinterpret_cast<void*>(r.malloc);
    g_real.dlclose(libc);
  }
  if (g_hot.glibc) {
    // The fast paths read glibc's chunk headers from here on. Any other
    // allocator keeps every call on the out-of-line paths.
    __atomic_store_n(&g_hot.free_slow_size, g_hot.region_size, __ATOMIC_RELEASE);
    __atomic_store_n(&g_hot.fast_below, g_hot.always_bytes, __ATOMIC_RELEASE);
  }
  g_resolved.store(true, std::memory_order_release);
  t_state.guard = saved_guard;
}

namespace {

// The malloc family off its fast path: a request of S_always or more, or any
// request before the real functions are known or when the real allocator is
// not glibc's (g_hot.fast_below is 0 then). Same countdown, generic size.
MEMSTEP_NOINLINE void* AllocNotFast(AllocFn fn, size_t size, size_t m, size_t n, size_t align,
                                    int* ret) {
  if (size >= g_hot.always_bytes) return AllocSlowArgs(fn, size, m, n, align, false, ret);
  ThreadState& t = t_state;
  t.bytes_until_sample -= static_cast<int64_t>(size + 1);
  if (t.bytes_until_sample < 0) return AllocSlowArgs(fn, size, m, n, align, true, ret);
  AllocReq r{fn, size, m, n, align, 0};
  void* p = RealAlloc(r);
  if (ret != nullptr) *ret = r.ret;
  if (p != nullptr) CountAlloc(t_state, RealUsable(p));
  return p;
}

// The request struct is built only on the slow branch (AllocSlowArgs), so the
// fast path keeps everything in registers.
MEMSTEP_ALWAYS_INLINE void* AllocFast(AllocFn fn, size_t size, size_t m, size_t n, size_t align,
                                      int* ret) {
  // No reentrancy test here: the slow path makes it (a nested allocation
  // from memstep's own code only forwards and counts there). No test of the
  // allocator's kind either: g_hot.fast_below is 0 unless it is glibc's.
  ThreadState& t = t_state;
  if (MEMSTEP_UNLIKELY(size >= g_hot.fast_below)) {
    return AllocNotFast(fn, size, m, n, align, ret);
  }
  // size + 1 in a register (one lea) and one subtraction from the countdown:
  // left alone, gcc spends a mov and a not on it (adds ~size).
  int64_t draw = static_cast<int64_t>(size + 1);
  __asm__("" : "+r"(draw));
  t.bytes_until_sample -= draw;
  if (MEMSTEP_UNLIKELY(t.bytes_until_sample < 0)) {
    return AllocSlowArgs(fn, size, m, n, align, true, ret);
  }
  AllocReq r{fn, size, m, n, align, 0};
  void* p = RealAlloc(r);
  if (ret != nullptr) *ret = r.ret;
  if (MEMSTEP_UNLIKELY(p == nullptr)) return p;
  // Every call out of here is a tail call (the count's rare tails return p),
  // so p stays in the return register and the frame holds one saved register.
  // glibc's chunk header: an mmapped chunk (usable size chunk - 16) takes an
  // out-of-line tail; any other chunk's usable size is chunk - 8.
  // The charge is the chunk's size: usable size + 8 (runtime.h).
  const uint64_t field = GlibcSizeField(p);
  if (MEMSTEP_UNLIKELY((field & kGlibcIsMmapped) != 0)) return CountAllocMmapped(p);
  ThreadState& u = t_state;
  if (MEMSTEP_UNLIKELY(ChargeAlloc(u, GlibcHeapChunk(field)))) return FlushAfterAlloc(p);
  return p;
}

MEMSTEP_ALWAYS_INLINE bool InRegion(const void* p) {
  return reinterpret_cast<uintptr_t>(p) - g_hot.region_base < g_hot.region_size;
}

}  // namespace
}  // namespace memstep::preload

using namespace memstep::preload;  // NOLINT: the hooks are the C ABI

MEMSTEP_EXPORT void* malloc(size_t n) noexcept { return AllocFast(kFnMalloc, n, 0, 0, 0, nullptr); }

namespace memstep::preload {
namespace {

// free off its fast path: a region block, or any block before the real
// functions are known or when the real allocator is not glibc's (the free
// range covers every address then).
MEMSTEP_NOINLINE void FreeNotFast(void* p) {
  if (InRegion(p)) return FreeRegionSlow(p);
  if (p == nullptr) return;
  FreeCounted(p, RealUsable(p));
}

// No call but tail calls: no frame at all.
MEMSTEP_ALWAYS_INLINE void FreeFast(void* p) {
  if (MEMSTEP_UNLIKELY(reinterpret_cast<uintptr_t>(p) - g_hot.free_slow_base <
                       g_hot.free_slow_size)) {
    return FreeNotFast(p);
  }
  if (p == nullptr) return;
  const uint64_t field = GlibcSizeField(p);
  if (MEMSTEP_UNLIKELY((field & kGlibcIsMmapped) != 0)) return FreeMmapped(p);
  // The charge is the chunk's size: usable size + 8. A block of S_always or
  // more always runs out what is left (runtime.h): the tail records it.
  const uint64_t chunk = GlibcHeapChunk(field);
  if (MEMSTEP_UNLIKELY(ChargeFree(t_state, chunk))) return FreeChargedOut(p, chunk);
  g_real.free(p);
}

}  // namespace
}  // namespace memstep::preload

MEMSTEP_EXPORT void free(void* p) noexcept { FreeFast(p); }

MEMSTEP_EXPORT void* calloc(size_t m, size_t n) noexcept {
  size_t total;
  if (__builtin_mul_overflow(m, n, &total)) return g_real.calloc(m, n);  // ENOMEM
  return AllocFast(kFnCalloc, total, m, n, 0, nullptr);
}

// The new block of a realloc that takes the slow path for another reason (old
// block sampled or big, n == 0) still draws on the sampling countdown like any
// allocation of n bytes; returns whether the countdown ran out.
MEMSTEP_ALWAYS_INLINE bool ReallocCountdown(ThreadState& t, size_t n) {
  if (t.guard || n == 0 || n >= g_hot.always_bytes) return false;
  t.bytes_until_sample -= static_cast<int64_t>(n + 1);
  return t.bytes_until_sample < 0;
}

MEMSTEP_EXPORT void* realloc(void* p, size_t n) noexcept {
  if (p == nullptr) {
    return AllocFast(kFnReallocNull, n, 0, 0, 0, nullptr);
  }
  ThreadState& t = t_state;
  if (MEMSTEP_UNLIKELY(InRegion(p))) return ReallocSlow(p, n, ReallocCountdown(t, n));
  size_t old = RealUsable(p);
  if (MEMSTEP_LIKELY(!t.guard)) {
    if (MEMSTEP_UNLIKELY(n == 0 || old >= g_hot.always_bytes || n >= g_hot.always_bytes)) {
      return ReallocSlow(p, n, ReallocCountdown(t, n));
    }
    t.bytes_until_sample -= static_cast<int64_t>(n + 1);
    if (MEMSTEP_UNLIKELY(t.bytes_until_sample < 0)) return ReallocSlow(p, n, true);
  }
  void* q = g_real.realloc(p, n);
  if (q != nullptr) {
    CountFree(t, old);
    CountAlloc(t, RealUsable(q));
  } else if (n == 0) {
    CountFree(t, old);  // glibc: realloc(p, 0) frees p
  }
  return q;
}

MEMSTEP_EXPORT void* reallocarray(void* p, size_t m, size_t n) noexcept {
  size_t total;
  if (__builtin_mul_overflow(m, n, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(p, total);
}

MEMSTEP_EXPORT int posix_memalign(void** out, size_t a, size_t n) noexcept {
  int ret = 0;
  void* p = AllocFast(kFnPosixMemalign, n, 0, 0, a, &ret);
  if (p != nullptr) *out = p;
  return ret;
}

MEMSTEP_EXPORT void* aligned_alloc(size_t a, size_t n) noexcept {
  return AllocFast(kFnAlignedAlloc, n, 0, 0, a, nullptr);
}

MEMSTEP_EXPORT void* memalign(size_t a, size_t n) noexcept {
  return AllocFast(kFnMemalign, n, 0, 0, a, nullptr);
}

MEMSTEP_EXPORT void* valloc(size_t n) noexcept {
  return AllocFast(kFnValloc, n, 0, 0, 4096, nullptr);
}

MEMSTEP_EXPORT void* pvalloc(size_t n) noexcept {
  return AllocFast(kFnPvalloc, n, 0, 0, 4096, nullptr);
}

MEMSTEP_EXPORT size_t malloc_usable_size(void* p) noexcept {
  if (p == nullptr) return 0;
  if (InRegion(p)) return g_region.IsBootstrap(p) ? 0 : g_region.RequestedSize(p);
  return g_real.malloc_usable_size(p);
}

MEMSTEP_EXPORT void* mmap(void* a, size_t l, int pr, int fl, int fd, off_t o) noexcept {
  void* p = g_real.mmap(a, l, pr, fl, fd, o);
  if (p != MAP_FAILED && (fl & MAP_ANONYMOUS) != 0) {
    if (t_state.guard) {
      t_state.guarded_mmap = reinterpret_cast<uintptr_t>(p);  // not recorded (pymem.cc)
    } else if (g_state.load(std::memory_order_relaxed) == kRecording) {
      RecordMmap(p, l, pr, fl);
    }
  }
  return p;
}

MEMSTEP_EXPORT void* mmap64(void* a, size_t l, int pr, int fl, int fd, off_t o) noexcept {
  return mmap(a, l, pr, fl, fd, o);
}

MEMSTEP_EXPORT int munmap(void* a, size_t l) noexcept {
  if (!t_state.guard && g_state.load(std::memory_order_relaxed) == kRecording) {
    return MunmapSlow(a, l);
  }
  return g_real.munmap(a, l);
}

MEMSTEP_EXPORT void* mremap(void* o, size_t ol, size_t nl, int fl, ...) noexcept {
  void* na = nullptr;
  if ((fl & MREMAP_FIXED) != 0) {
    va_list ap;
    va_start(ap, fl);
    na = va_arg(ap, void*);
    va_end(ap);
  }
  if (!t_state.guard && g_state.load(std::memory_order_relaxed) == kRecording) {
    return MremapSlow(o, ol, nl, fl, na);
  }
  return g_real.mremap(o, ol, nl, fl, na);
}

// PROT_NONE anonymous mappings are address space, not memory, until mprotect
// gives them access (recorder.cc MprotectSlow).
MEMSTEP_EXPORT int mprotect(void* a, size_t l, int pr) noexcept {
  if (!t_state.guard && g_state.load(std::memory_order_relaxed) == kRecording) {
    return MprotectSlow(a, l, pr);
  }
  return g_real.mprotect(a, l, pr);
}

// ---- dlopen and dlclose ------------------------------------------------------
//
// glibc's dlopen takes the calling object from its own return address: a bare
// name (no '/') is searched in that object's DT_RPATH/DT_RUNPATH ($ORIGIN is
// the caller's directory), and the library joins the caller's namespace. A
// wrapper that calls the real dlopen makes libmemstep the caller, and the
// libraries that open their siblings through their own $ORIGIN RUNPATH
// (cuDNN 9, the pip-installed NVIDIA libraries) fail to load. So dlopen is an
// assembly trampoline, like dlsym (cuda_dl.cc; gcc 12 has no musttail): it
// saves the arguments, calls ms_dlopen_enter (stack aligned to 16), restores
// them and JUMPS to the real dlopen, which returns straight to the caller
// (one version for x86-64, one for aarch64).
// Nothing of memstep runs after the load: ms_dlopen_enter marks the thread as
// inside the loader (InLoader, runtime.h) and the maps as dirty; the writer
// thread and the next dlclose record the new mappings.
//
// dlclose stays a C++ wrapper: the caller of dlclose does not matter.

extern "C" {
// Called by the trampoline; returns the real dlopen, which it jumps to.
#if defined(__aarch64__)
__attribute__((visibility("hidden"))) void* ms_dlopen_enter(const char* file, int mode,
                                                            uintptr_t entry_sp, uintptr_t ret) {
#else
__attribute__((visibility("hidden"))) void* ms_dlopen_enter(const char* file, int mode,
                                                            uintptr_t entry_sp) {
  const uintptr_t ret = *reinterpret_cast<const uintptr_t*>(entry_sp);
#endif
  // Resolved first: the target must be the real dlopen, never StubDlopen
  // (which would call it from here).
  ResolveReal();
  EnterDlopen(entry_sp, ret);
  return reinterpret_cast<void*>(g_real.dlopen);
}
}

#if defined(__x86_64__)
// %rdx = %rsp at entry: the slot that holds the caller's return address.
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".globl dlopen\n"
    ".type dlopen, @function\n"
    "dlopen:\n"
    ".cfi_startproc\n"
    "  endbr64\n"
    "  pushq %rdi\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  pushq %rsi\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  leaq 16(%rsp), %rdx\n"
    "  subq $8, %rsp\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  call ms_dlopen_enter\n"
    "  addq $8, %rsp\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  popq %rsi\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  popq %rdi\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  jmp *%rax\n"
    ".cfi_endproc\n"
    ".size dlopen, .-dlopen\n");
#elif defined(__aarch64__)
// x2 = sp at entry (the caller's), x3 = x30 at entry (the caller's return
// address, which the real dlopen must find in x30 again: glibc reads it
// there). The frame (x29/x30, then x0/x1) is popped before the branch, so
// the real dlopen starts with the caller's sp and x30.
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".globl dlopen\n"
    ".type dlopen, %function\n"
    "dlopen:\n"
    ".cfi_startproc\n"
    "  hint #34\n"  // bti c
    "  stp x29, x30, [sp, #-32]!\n"
    ".cfi_def_cfa_offset 32\n"
    ".cfi_offset 29, -32\n"
    ".cfi_offset 30, -24\n"
    "  mov x29, sp\n"
    "  stp x0, x1, [sp, #16]\n"
    "  add x2, sp, #32\n"
    "  mov x3, x30\n"
    "  bl ms_dlopen_enter\n"
    "  mov x16, x0\n"
    "  ldp x0, x1, [sp, #16]\n"
    "  ldp x29, x30, [sp], #32\n"
    ".cfi_def_cfa_offset 0\n"
    ".cfi_restore 29\n"
    ".cfi_restore 30\n"
    "  br x16\n"
    ".cfi_endproc\n"
    ".size dlopen, .-dlopen\n");
#else
#error "the dlopen trampoline is written for x86-64 and aarch64 only"
#endif

MEMSTEP_EXPORT int dlclose(void* h) noexcept {
  ThreadState& t = t_state;
  BeforeDlclose();
  ++t.in_dl;
  int rc = g_real.dlclose(h);
  --t.in_dl;
  AfterDlclose();
  return rc;
}

// ---- C++ operator new/delete ------------------------------------------------
//
// libstdc++'s operators call malloc/free through the PLT, so memstep would see
// them anyway; but jemalloc and tcmalloc, preloaded after memstep, define
// their own operators that never call malloc, and every C++ allocation would
// go unseen. So memstep defines them too, on the same fast paths. Nothing here
// may throw (no C++ runtime in this library): when the allocation fails, the
// next definition (libstdc++'s or the allocator's) is called to retry, run
// the new_handler and throw std::bad_alloc as the standard requires.

namespace memstep::preload {
namespace {

using NewFn = void* (*)(size_t);
using NewAlignedFn = void* (*)(size_t, size_t);

MEMSTEP_NOINLINE void* NewFailed(const char* name, size_t n) {
  auto next = reinterpret_cast<NewFn>(OwnDlsym(RTLD_NEXT, name));
  if (next == nullptr) abort();
  return next(n);
}

MEMSTEP_NOINLINE void* NewAlignedFailed(const char* name, size_t n, size_t al) {
  auto next = reinterpret_cast<NewAlignedFn>(OwnDlsym(RTLD_NEXT, name));
  if (next == nullptr) abort();
  return next(n, al);
}

// operator new(0) allocates 1 byte (cmp + adc, no branch or cmov).
MEMSTEP_ALWAYS_INLINE size_t NonZero(size_t n) { return n + (n == 0); }

MEMSTEP_ALWAYS_INLINE void* NewAligned(size_t n, size_t al) {
  int ret = 0;
  void* p = AllocFast(kFnPosixMemalign, NonZero(n), 0, 0, al, &ret);
  return ret == 0 ? p : nullptr;
}

}  // namespace
}  // namespace memstep::preload

// operator new(size_t), new[](size_t)
MEMSTEP_EXPORT void* _Znwm(size_t n) {
  void* p = AllocFast(kFnMalloc, NonZero(n), 0, 0, 0, nullptr);
  return MEMSTEP_LIKELY(p != nullptr) ? p : NewFailed("_Znwm", n);
}
MEMSTEP_EXPORT void* _Znam(size_t n) {
  void* p = AllocFast(kFnMalloc, NonZero(n), 0, 0, 0, nullptr);
  return MEMSTEP_LIKELY(p != nullptr) ? p : NewFailed("_Znam", n);
}
// nothrow forms: NULL on failure.
MEMSTEP_EXPORT void* _ZnwmRKSt9nothrow_t(size_t n, const void*) noexcept {
  return AllocFast(kFnMalloc, NonZero(n), 0, 0, 0, nullptr);
}
MEMSTEP_EXPORT void* _ZnamRKSt9nothrow_t(size_t n, const void*) noexcept {
  return AllocFast(kFnMalloc, NonZero(n), 0, 0, 0, nullptr);
}
// align_val_t forms (C++17).
MEMSTEP_EXPORT void* _ZnwmSt11align_val_t(size_t n, size_t al) {
  void* p = NewAligned(n, al);
  return MEMSTEP_LIKELY(p != nullptr) ? p : NewAlignedFailed("_ZnwmSt11align_val_t", n, al);
}
MEMSTEP_EXPORT void* _ZnamSt11align_val_t(size_t n, size_t al) {
  void* p = NewAligned(n, al);
  return MEMSTEP_LIKELY(p != nullptr) ? p : NewAlignedFailed("_ZnamSt11align_val_t", n, al);
}
MEMSTEP_EXPORT void* _ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void*) noexcept {
  return NewAligned(n, al);
}
MEMSTEP_EXPORT void* _ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void*) noexcept {
  return NewAligned(n, al);
}

// Every delete form frees (sizes and alignments are not needed: the block's
// size comes from the allocator, as for free).
MEMSTEP_EXPORT void _ZdlPv(void* p) noexcept { FreeFast(p); }
MEMSTEP_EXPORT void _ZdaPv(void* p) noexcept { FreeFast(p); }
MEMSTEP_EXPORT void _ZdlPvm(void* p, size_t) noexcept { FreeFast(p); }
MEMSTEP_EXPORT void _ZdaPvm(void* p, size_t) noexcept { FreeFast(p); }
MEMSTEP_EXPORT void _ZdlPvRKSt9nothrow_t(void* p, const void*) noexcept { FreeFast(p); }
MEMSTEP_EXPORT void _ZdaPvRKSt9nothrow_t(void* p, const void*) noexcept { FreeFast(p); }
MEMSTEP_EXPORT void _ZdlPvSt11align_val_t(void* p, size_t) noexcept { FreeFast(p); }
MEMSTEP_EXPORT void _ZdaPvSt11align_val_t(void* p, size_t) noexcept { FreeFast(p); }
MEMSTEP_EXPORT void _ZdlPvmSt11align_val_t(void* p, size_t, size_t) noexcept { FreeFast(p); }
MEMSTEP_EXPORT void _ZdaPvmSt11align_val_t(void* p, size_t, size_t) noexcept { FreeFast(p); }
MEMSTEP_EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void* p, size_t, const void*) noexcept {
  FreeFast(p);
}
MEMSTEP_EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void* p, size_t, const void*) noexcept {
  FreeFast(p);
}

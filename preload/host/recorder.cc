// Slow paths of the hooks: sampled, always-recorded and region-owned blocks,
// realloc's four cases, and the mmap family.
//
// Every entry point sets the reentrancy guard for its whole duration
// (restoring the previous value), so whatever it calls (libunwind, the
// loader, pthread) only forwards. Order of work in a sampled allocation:
// unwind first (no lock held), then take at most one short spinlock (region
// class, address-table shard or dictionary), then take the sequence number
// (after the block is obtained; for frees, before it is released), then encode
// the record into the thread's ring (never blocks).

#include "preload/host/recorder.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "preload/core/fds.h"
#include "preload/host/runtime.h"
#include "preload/host/unwinder.h"
#include "preload/steps/config.h"
#include "preload/trace/modules.h"
#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

std::atomic<int> g_state{kNotYet};
Config g_config = {uint64_t{512} << 10,
                   uint64_t{128} << 10,
                   true,
                   0.10,
                   true,
                   0,
                   uint64_t{1} << 20,
                   100,
                   false,
                   false,
                   false,
                   "./memstep-out",
                   0};
std::atomic<uint64_t> g_interval{uint64_t{512} << 10};
GlobalCounters g_counters;
ShardedAddrMap<uint64_t, 6> g_big;
Dictionary g_dict;
std::atomic<uint64_t> g_seq{1};
std::atomic<uint64_t> g_cur_step{0};
std::atomic<uint32_t> g_cur_stage{0};
std::atomic<int> g_maps_dirty{1};

IntervalSet g_mmaps;
IntervalSet g_reserved;
pthread_key_t g_key;
bool g_key_ok = false;
UnwBacktraceFn g_unw_backtrace = nullptr;
UnwFlushCacheFn g_unw_flush_cache = nullptr;
void** g_unw_local_as = nullptr;
uintptr_t g_self_lo = 0, g_self_hi = 0;

bool Recording() { return g_state.load(std::memory_order_relaxed) == kRecording; }

uint64_t NowRel() { return MonoNs() - StartMonoNs(); }

uint64_t LiveBytes() {
  uint64_t a = g_counters.alloc_bytes.load(std::memory_order_relaxed);
  uint64_t f = g_counters.free_bytes.load(std::memory_order_relaxed);
  return a > f ? a - f : 0;
}

void EnsureThread(ThreadState& t) {
  if (t.tid == 0) t.tid = GetTid();
  if (!t.key_armed && g_key_ok && Recording()) {
    t.key_armed = 1;
    pthread_setspecific(g_key, reinterpret_cast<void*>(1));
  }
}

namespace {

// Lossless mode: waits for the writer to drain the ring, at most kMaxWaitNs per
// record, then drops and counts as usual. Never waits inside dlopen/dlclose
// (InLoader): the writer may need the loader lock that this thread holds.
constexpr uint64_t kMaxWaitNs = 2000000000u;

// `kept`: a record that may also go to the kept lane (and is counted there
// when it is lost).
MEMSTEP_NOINLINE void PushWaiting(ThreadState& t, const uint8_t* rec, size_t n, bool kept) {
  if (!InLoader(t)) {
    uint64_t deadline = MonoNs() + kMaxWaitNs;
    do {
      WakeWriter();
      struct timespec pause = {0, 50000};
      syscall(SYS_nanosleep, &pause, nullptr);
      if (t.ring != nullptr && t.ring->TryPush(rec, n)) return;
      if (kept && g_kept.TryPush(rec, n)) return;
    } while (Recording() && MonoNs() < deadline);
  }
  if (kept) {
    g_kept.CountLost(n);
  } else {
    t.ring->CountLost(n);
  }
}

}  // namespace

void PushSample(ThreadState& t, const uint8_t* rec, size_t n) {
  if (t.ring == nullptr) {
    t.ring = AcquireRing(t.tid);
    if (t.ring == nullptr) return;
  }
  if (MEMSTEP_LIKELY(t.ring->TryPush(rec, n))) {
    if (MEMSTEP_UNLIKELY(t.ring->Used() > Ring::kCap / 2)) WakeWriter();
    return;
  }
  if (g_config.lossless) {
    PushWaiting(t, rec, n, false);
  } else {
    t.ring->CountLost(n);
  }
}

namespace {

// The ring, else the kept lane; false when neither has room.
bool PushRingOrLane(ThreadState& t, const uint8_t* rec, size_t n) {
  if (t.ring == nullptr) t.ring = AcquireRing(t.tid);
  if (MEMSTEP_LIKELY(t.ring != nullptr && t.ring->TryPush(rec, n))) {
    if (MEMSTEP_UNLIKELY(t.ring->Used() > Ring::kCap / 2)) WakeWriter();
    return true;
  }
  const bool ok = g_kept.TryPush(rec, n);
  WakeWriter();
  return ok;
}

}  // namespace

// Never waits: the caller may hold g_api_lock, which the writer's time
// windows take, or the loader lock.
void Push(ThreadState& t, const uint8_t* rec, size_t n) {
  if (!PushRingOrLane(t, rec, n)) g_kept.CountLost(n);
}

void PushFromHook(ThreadState& t, const uint8_t* rec, size_t n) {
  if (PushRingOrLane(t, rec, n)) return;
  if (g_config.lossless) {
    PushWaiting(t, rec, n, true);
  } else {
    g_kept.CountLost(n);
  }
}

// Unwinds inside dlopen/dlclose too: library constructors (libtorch's
// operator registrations: ~100 MB at `import torch`) allocate there, and a
// stackless sample is useless. That is safe with our lock order: this thread
// holds the loader's dl_load_lock but no memstep lock; a cache miss in
// libunwind takes dl_load_write_lock (a different lock, as a C++ exception in
// a constructor does); the dictionary lock, taken after unwinding, is never
// held while calling into the loader (modules.cc collects before interning).
std::atomic<uint64_t> g_capture_ns{0};
std::atomic<uint64_t> g_capture_count{0};
std::atomic<uint64_t> g_screen_ns{0};
std::atomic<uint64_t> g_screen_count{0};
std::atomic<uint64_t> g_full_interval{0};

namespace {

// The stack of the current call, interned. CaptureStack times it: the leak
// hunt (progressive.cc) sizes its sampling rate from this cost.
//
// On a thread running Python, only the native frames above the first
// interpreter-loop frame are kept (pyframes.cc: the Python frames replace the
// rest), so the unwind asks for no more frames than are likely to reach that
// frame: a few more than it was found at in this thread's recent samples (it
// is about 5-10 frames down in pure Python, 20-50 under PyTorch's operators),
// and unwinds again, deep, only when it was not reached. The stack is the one
// a deep unwind gives.
constexpr int kNativeDepth = static_cast<int>(fmt::kMaxFrames) + 16;
constexpr int kPyDeep = 192;
constexpr int kPyFirstDepth = 32, kPyMinDepth = 16, kPyMargin = 8;

int FirstEval(void* const* buf, int n) {
  for (int i = 0; i < n; ++i) {
    if (PyFramesInEval(reinterpret_cast<uintptr_t>(buf[i]))) return i;
  }
  return -1;
}

// Unwinds a Python thread's native stack down to the interpreter loop (or
// all of it, up to kPyDeep, when the loop is not on it); returns the count.
int UnwindToEval(ThreadState& t, void** buf) {
  const int depth = t.py_depth != 0 ? t.py_depth : kPyFirstDepth;
  int n = g_unw_backtrace(buf, depth);
  int at = FirstEval(buf, n);
  if (at < 0 && n == depth) {
    n = g_unw_backtrace(buf, kPyDeep);
    at = FirstEval(buf, n);
  }
  if (at >= 0) {
    // Up at once to reach it next time; down by one a sample, so one deep
    // stack does not make every later unwind deep.
    const int want = at + kPyMargin < kPyMinDepth ? kPyMinDepth : at + kPyMargin;
    const int next = want >= depth ? want : depth - 1;
    t.py_depth = static_cast<uint8_t>(next < kPyDeep ? next : kPyDeep);
  }
  return n;
}

uint32_t Unwind(ThreadState& t) {
  void* buf[kPyDeep];
  const bool py = PyFramesOnThread();
  const int n = py ? UnwindToEval(t, buf) : g_unw_backtrace(buf, kNativeDepth);
  int i = 0;
  while (i < n && reinterpret_cast<uintptr_t>(buf[i]) - g_self_lo < g_self_hi - g_self_lo) ++i;
  uint64_t ips[fmt::kMaxFrames];
  uint32_t m = 0;
  if (py) {
    uint64_t native[kPyDeep];
    uint32_t k = 0;
    for (; i < n; ++i) native[k++] = reinterpret_cast<uintptr_t>(buf[i]);
    m = PyFramesMerge(native, k, ips, fmt::kMaxFrames);
    return g_dict.InternStack(ips, m);
  }
  for (; i < n && m < fmt::kMaxFrames; ++i) ips[m++] = reinterpret_cast<uintptr_t>(buf[i]);
  return g_dict.InternStack(ips, m);
}

}  // namespace

uint32_t CaptureStackUntimed(ThreadState& t) {
  if (g_unw_backtrace == nullptr || !Recording()) return 0;
  return Unwind(t);
}

uint32_t CaptureStack(ThreadState& t) {
  if (g_unw_backtrace == nullptr || !Recording()) return 0;
  SampleCost cost(true);
  return CaptureStackUntimed(t);
}

uint64_t NextSeq() { return g_seq.fetch_add(1, std::memory_order_relaxed); }

namespace {

// A gap is counted down in pieces of at most kGapPiece bytes. At the end of a
// piece that is not the gap's end, the thread looks at T again: unchanged, it
// goes on with the gap; changed, it draws a new gap at the new T (the rest of
// an exponential gap that has not ended is again exponential, and the switch
// falls between two allocations, so each allocation is tested under one T,
// the T its sample is stamped with: unbiased). Without pieces a thread
// finished its gap at the old T: a thread that allocates 4 KiB a step kept a
// gap drawn at 512 KiB for 100 steps or more after a leak hunt lowered T to
// 2 KiB, and a leak on it was never sampled (a worker thread keeping 100
// floats a step: its hunt ran to the end, UNATTRIBUTED). A piece's end costs
// one slow-path call with no sample, once per kGapPiece bytes allocated.
constexpr int64_t kGapPiece = 32 << 10;

// Adds the first piece of a gap of `gap` bytes to the countdown (0, or minus
// the bytes the allocation being decided overshot by) and keeps the rest.
void ArmGap(ThreadState& t, int64_t gap) {
  const int64_t piece = gap < kGapPiece ? gap : kGapPiece;
  t.gap_rest = gap - piece;
  t.bytes_until_sample += piece;
}

// Decides whether the allocation whose countdown went negative is sampled.
// Draws the thread's first gap lazily (memoryless: unbiased).
bool DecideSampleImpl(ThreadState& t, uint64_t* interval) {
  int st = g_state.load(std::memory_order_relaxed);
  if (st == kNotYet) {
    t.bytes_until_sample = 0;  // ask again on the next allocation
    t.gap_rest = 0;
    return false;
  }
  if (st != kRecording) {
    t.bytes_until_sample = INT64_MAX / 2;
    t.gap_rest = 0;
    return false;
  }
  // Progressive sampling: a gap keeps the T it was drawn with, and its
  // sample is stamped with that T, so a rate change between two samples of a
  // thread keeps every weight exact (docs/preload.md "Progressive sampling").
  uint64_t T = g_interval.load(std::memory_order_relaxed);
  if (!t.seeded) {
    t.seeded = 1;
    if (g_config.seed != 0) {
      // MEMSTEP_SEED: reproducible gaps, one stream per thread in the order
      // the threads drew their first gap.
      static std::atomic<uint64_t> ordinal{0};
      uint64_t k = ordinal.fetch_add(1, std::memory_order_relaxed);
      t.sampler.Seed(g_config.seed * 0x9E3779B97F4A7C15ull + k * 0xBF58476D1CE4E5B9ull + 1);
    } else {
      t.sampler.Seed(t.tid ^ (MonoNs() << 20) ^ reinterpret_cast<uintptr_t>(&t));
    }
    t.gap_interval = T;
    ArmGap(t, t.sampler.NextGap(T));
    if (t.bytes_until_sample >= 0) return false;
  }
  // The countdown ran out: at the end of a piece, or of the gap.
  const int64_t over = -t.bytes_until_sample;  // this allocation's bytes past the piece
  if (t.gap_rest > 0 && over <= t.gap_rest) {  // else the gap ends inside it: a sample
    const int64_t rest = t.gap_rest - over;
    t.bytes_until_sample = 0;
    if (T == t.gap_interval) {
      ArmGap(t, rest);  // the same gap goes on
    } else {
      t.gap_interval = T;  // a new gap at the new T, from the next allocation
      ArmGap(t, t.sampler.NextGap(T));
    }
    return false;
  }
  uint64_t drawn_with = t.gap_interval;
  t.bytes_until_sample = 0;
  t.gap_interval = T;
  ArmGap(t, t.sampler.NextGap(T));
  *interval = drawn_with <= 1 ? 0 : drawn_with;
  return true;
}

uint8_t KindOf(AllocFn fn) {
  switch (fn) {
    case kFnMalloc:
      return fmt::kKindMalloc;
    case kFnCalloc:
      return fmt::kKindCalloc;
    case kFnReallocNull:
      return fmt::kKindRealloc;
    default:
      return fmt::kKindAligned;
  }
}

}  // namespace

bool DecideSample(ThreadState& t, uint64_t* interval) { return DecideSampleImpl(t, interval); }

SampleKind ChooseSample(ThreadState& t, size_t size, bool may_screen, uint64_t* interval,
                        uint32_t* key) {
  const uint64_t full = g_full_interval.load(std::memory_order_relaxed);
  if (full == 0 || *interval == 0 || *interval >= full) return kSampleFull;
  const uint32_t ctx = PyFramesContext();
  if (ctx != 0 && SitesIsTarget(ctx)) return kSampleFull;
  const double s1 = static_cast<double>(size) + 1.0;
  const double p_drawn = -expm1(-s1 / static_cast<double>(*interval));
  const double p_full = -expm1(-s1 / static_cast<double>(full));
  if (t.sampler.NextUniform() * p_drawn <= p_full) {
    *interval = full;
    return kSampleFull;
  }
  if (ctx == 0 || !may_screen) return kSampleNone;
  *key = ctx;
  return kSampleScreen;
}

void EmitAlloc(ThreadState& t, const void* p, size_t size, uint64_t interval, uint8_t kind,
               uint32_t stack) {
  if (!Recording()) return;
  uint64_t seq = g_seq.fetch_add(1, std::memory_order_relaxed);
  uint8_t buf[fmt::kMaxEncodedSize<fmt::AllocRecord>];
  fmt::AllocRecord rec;
  rec.ts = NowRel();
  rec.seq = seq;
  rec.tid = t.tid;
  rec.stack = stack;
  rec.addr = reinterpret_cast<uintptr_t>(p);
  rec.size = size;
  rec.interval = interval;
  rec.kind = kind;
  rec.step = g_cur_step.load(std::memory_order_relaxed);
  rec.stage_str = g_cur_stage.load(std::memory_order_relaxed);
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) {
    // A sample may be dropped when the ring is full (counted: the report says
    // how many); a block recorded with p = 1 never is.
    if (interval != 0) {
      PushSample(t, buf, e.size());
    } else {
      PushFromHook(t, buf, e.size());
    }
  }
  SitesOnAlloc(reinterpret_cast<uintptr_t>(p), size, SampleSlack(size, kind == fmt::kKindPymalloc),
               interval, stack);
}

void EmitFree(ThreadState& t, const void* p, uint64_t seq) {
  if (!Recording()) return;
  uint8_t buf[fmt::kMaxEncodedSize<fmt::FreeRecord>];
  fmt::FreeRecord rec;
  rec.ts = NowRel();
  rec.seq = seq;
  rec.tid = t.tid;
  rec.addr = reinterpret_cast<uintptr_t>(p);
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) PushFromHook(t, buf, e.size());
}

namespace {

bool IsPow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }

// Alignment memstep must honour for a sampled request, or 0 if it must not
// sample it (invalid alignment: the real function reports the error).
size_t SampleAlign(const AllocReq& r) {
  switch (r.fn) {
    case kFnPosixMemalign:
      return IsPow2(r.align) && r.align % sizeof(void*) == 0 ? r.align : 0;
    case kFnAlignedAlloc:
    case kFnMemalign:
      return IsPow2(r.align) ? r.align : 0;
    case kFnValloc:
    case kFnPvalloc:
      return 4096;
    default:
      return 16;
  }
}

// A sampled block from the real allocator, when the region cannot serve it:
// at least S_always bytes, so free() looks it up in the address table.
void* RealSampledBlock(size_t size, size_t align) {
  size_t n = size > g_hot.always_bytes ? size : g_hot.always_bytes;
  return g_real.memalign(align < 16 ? 16 : align, n);
}

// The real allocator's block, counted and not recorded.
void* ForwardCounted(ThreadState& t, AllocReq* r) {
  void* p = RealAlloc(*r);
  if (p != nullptr) CountAlloc(t, RealUsable(p));
  return p;
}

// An always-recorded big block (size >= S_always) from the real allocator.
void* RecordBigBlock(ThreadState& t, AllocReq* r) {
  void* p = RealAlloc(*r);
  if (p == nullptr) return p;
  int saved_errno = errno;
  size_t usable = RealUsable(p);
  CountAlloc(t, usable);
  uint32_t stack = CaptureStack(t);
  if (g_big.Insert(reinterpret_cast<uintptr_t>(p), usable)) {
    EmitAlloc(t, p, r->size, 0, KindOf(r->fn), stack);
  }
  errno = saved_errno;
  return p;
}

// A sampled block of `interval`: from the region when it fits a class, else
// from the real allocator via the address table.
void* SampleBlock(ThreadState& t, AllocReq* r, size_t align, uint64_t interval) {
  int saved_errno = errno;
  size_t size = r->size;
  if (r->fn == kFnPvalloc) size = size == 0 ? 4096 : (size + 4095) & ~size_t{4095};
  if (size < r->size || align > Region::kMaxBlock) {
    errno = saved_errno;
    return ForwardCounted(t, r);  // alignment cannot be honoured: count only
  }
  // The whole sample is its cost (the hunt's budget), not just its stack.
  SampleCost cost(true);
  uint32_t stack = CaptureStackUntimed(t);
  void* p = g_region.Alloc(size, align);
  if (p != nullptr) {
    if (r->fn == kFnCalloc) memset(p, 0, size);
    CountAlloc(t, RegionCharge(size));
    r->ret = 0;
    EmitAlloc(t, p, size, interval, KindOf(r->fn), stack);
    errno = saved_errno;
    return p;
  }
  // Region exhausted, or a size above the largest class (S_always > 1 MiB).
  p = RealSampledBlock(size, align);
  if (p == nullptr) return ForwardCounted(t, r);
  if (r->fn == kFnCalloc) memset(p, 0, size);
  size_t usable = RealUsable(p);
  CountAlloc(t, usable);
  r->ret = 0;
  if (g_big.Insert(reinterpret_cast<uintptr_t>(p), usable)) {
    EmitAlloc(t, p, size, interval, KindOf(r->fn), stack);
  }
  errno = saved_errno;
  return p;
}

// A screen (ChooseSample): a region block tallied under its Python context
// `key`, with no stack and no record; a request the region cannot serve is
// only counted.
void* ScreenBlock(ThreadState& t, AllocReq* r, size_t align, uint64_t interval, uint32_t key) {
  int saved_errno = errno;
  size_t size = r->size;
  if (r->fn == kFnPvalloc) size = size == 0 ? 4096 : (size + 4095) & ~size_t{4095};
  if (size < r->size || align > Region::kMaxBlock) {
    errno = saved_errno;
    return ForwardCounted(t, r);
  }
  SampleCost cost(true);
  cost.set_screen();
  void* p = g_region.Alloc(size, align);
  if (p == nullptr) {
    errno = saved_errno;
    return ForwardCounted(t, r);
  }
  // Untracked, its free would write a FREE record of an ALLOC never written.
  if (!Recording() || !SitesOnAlloc(reinterpret_cast<uintptr_t>(p), size, SampleSlack(size, false),
                                    interval, key)) {
    size_t unused;
    g_region.Free(p, &unused);
    errno = saved_errno;
    return ForwardCounted(t, r);
  }
  if (r->fn == kFnCalloc) memset(p, 0, size);
  CountAlloc(t, RegionCharge(size));
  r->ret = 0;
  errno = saved_errno;
  return p;
}

}  // namespace

void* AllocSlow(AllocReq* r, bool countdown_hit) {
  ThreadState& t = t_state;
  if (t.guard) {
    // Nested in memstep's own code, or in the resolution of the real
    // functions (the fast path does not test the guard): forward and count;
    // give back the countdown so the program's next allocation draws the
    // sample instead.
    if (countdown_hit) t.bytes_until_sample += static_cast<int64_t>(r->size + 1);
    return ForwardCounted(t, r);
  }
  ResolveReal();
  GuardScope guard(t);
  EnsureThread(t);
  FlushQueuedStderr();  // the writer's messages it could not write itself (core/fds.h)
  uint64_t interval = 0;
  bool sample;
  if (countdown_hit) {
    sample = DecideSample(t, &interval);
  } else {
    sample = Recording();  // size >= S_always: always recorded, p = 1
  }
  size_t align = sample ? SampleAlign(*r) : 0;
  if (!sample || align == 0) return ForwardCounted(t, r);
  if (!countdown_hit) return RecordBigBlock(t, r);
  uint32_t key = 0;
  switch (ChooseSample(t, r->size, true, &interval, &key)) {
    case kSampleNone:
      return ForwardCounted(t, r);
    case kSampleScreen:
      return ScreenBlock(t, r, align, interval, key);
    case kSampleFull:
      break;
  }
  return SampleBlock(t, r, align, interval);
}

void* AllocSlowArgs(AllocFn fn, size_t size, size_t m, size_t n, size_t align, bool countdown_hit,
                    int* ret) {
  AllocReq r{fn, size, m, n, align, 0};
  void* p = AllocSlow(&r, countdown_hit);
  if (ret != nullptr) *ret = r.ret;
  return p;
}

void FreeRegionSlow(void* p) {
  if (g_region.IsBootstrap(p)) return;
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  if (guard.was_set()) {
    // Nested in memstep's own code (a signal handler interrupted a slow path
    // that may hold this class's lock): count the free but keep the block
    // (a rare leak of one sampled block beats a self-deadlock).
    CountFree(t, RegionCharge(g_region.RequestedSize(p)));
    return;
  }
  EnsureThread(t);
  SampleCost cost(false);    // a sample's cost goes on to its free
  uint64_t seq = NextSeq();  // before the block is released
  const bool recorded = SitesOnFree(reinterpret_cast<uintptr_t>(p));
  if (!recorded) cost.set_screen();
  size_t req;
  if (!g_region.Free(p, &req)) return;
  if (recorded) EmitFree(t, p, seq);
  CountFree(t, RegionCharge(req));
}

void FreeBigSlow(void* p, size_t usable) {
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  uint64_t value;
  if (g_big.Remove(reinterpret_cast<uintptr_t>(p), &value) &&
      SitesOnFree(reinterpret_cast<uintptr_t>(p))) {
    EmitFree(t, p, NextSeq());
  }
  CountFree(t, usable);
  g_real.free(p);
}

// Releases realloc's old block once its contents are no longer needed: a
// region block goes back to its class (a nested call keeps it, see
// FreeRegionSlow), a big recorded block leaves the table, and the FREE record
// takes its sequence number before the block can be reused.
static void ReleaseOld(ThreadState& t, void* p, size_t old_len, bool old_region, bool old_boot,
                       bool old_big, bool nested, bool rec) {
  if (old_region) {
    if (old_boot) return;
    if (nested) {
      CountFree(t, RegionCharge(old_len));
      return;
    }
    uint64_t seq = NextSeq();
    const bool recorded = SitesOnFree(reinterpret_cast<uintptr_t>(p));
    size_t req;
    if (g_region.Free(p, &req)) {
      if (rec && recorded) EmitFree(t, p, seq);
      CountFree(t, RegionCharge(req));
    }
    return;
  }
  uint64_t v;
  if (old_big && g_big.Remove(reinterpret_cast<uintptr_t>(p), &v) &&
      SitesOnFree(reinterpret_cast<uintptr_t>(p))) {
    if (rec) EmitFree(t, p, NextSeq());
  }
  CountFree(t, old_len);
  g_real.free(p);
}

namespace {

// The block a realloc replaces.
struct OldBlock {
  void* p;
  size_t len;   // its requested (region) or usable (real) size
  bool region;  // in memstep's sampled-block region
  bool boot;    // a region block handed out before the real allocator was known
  bool big;     // a real block large enough to be in the table of recorded blocks
};

// Where realloc's new block goes.
enum ReallocTarget { kPlain, kRegion, kRealSampled };

}  // namespace

// The new block of `n` bytes: recorded always (kRealSampled) from
// S_always, sampled into the region when the countdown ran out and the draw
// says so (*interval: the T it was drawn with), else plain. A countdown that
// ran out while not recording still draws the next gap.
static ReallocTarget ChooseReallocTarget(ThreadState& t, size_t n, bool rec, bool countdown_hit,
                                         uint64_t* interval) {
  if (rec) {
    if (n >= g_hot.always_bytes) return kRealSampled;
    uint32_t unused_key;
    if (countdown_hit && DecideSample(t, interval) &&
        ChooseSample(t, n, false, interval, &unused_key) == kSampleFull) {
      return kRegion;
    }
  } else if (countdown_hit) {
    uint64_t unused;
    DecideSample(t, &unused);
  }
  return kPlain;
}

// Real -> real (plain or big): keeps the allocator's in-place realloc.
static void* ReallocReal(ThreadState& t, const OldBlock& old, size_t n, ReallocTarget target,
                         uint32_t stack, bool rec, int saved_errno) {
  void* p = old.p;
  uint64_t v = 0;
  bool had_big = old.big && g_big.Remove(reinterpret_cast<uintptr_t>(p), &v);
  uint64_t free_seq = had_big ? NextSeq() : 0;
  // Off the site table before the real realloc can hand p to another thread
  // (restored if the realloc fails).
  uint64_t site_packed = had_big ? SitesRemove(reinterpret_cast<uintptr_t>(p)) : 0;
  errno = saved_errno;
  void* q = g_real.realloc(p, n);
  if (q == nullptr) {
    if (had_big) g_big.Insert(reinterpret_cast<uintptr_t>(p), v);
    SitesRestore(reinterpret_cast<uintptr_t>(p), site_packed);
    return nullptr;  // errno from the real realloc
  }
  int e = errno;
  if (had_big && rec) EmitFree(t, p, free_seq);
  CountFree(t, old.len);
  size_t usable = RealUsable(q);
  CountAlloc(t, usable);
  if (target == kRealSampled && g_big.Insert(reinterpret_cast<uintptr_t>(q), usable)) {
    EmitAlloc(t, q, n, 0, fmt::kKindRealloc, stack);
  }
  errno = e;
  return q;
}

// Otherwise: a new block (in the region, or a real one), the contents
// copied, the old block released.
static void* ReallocMove(ThreadState& t, const OldBlock& old, size_t n, ReallocTarget target,
                         uint64_t interval, uint32_t stack, bool nested, bool rec,
                         int saved_errno) {
  void* p = old.p;
  void* q = nullptr;
  size_t new_count = 0;
  bool in_table = false;
  if (target == kRegion) {
    q = g_region.Alloc(n, 16);
    new_count = RegionCharge(n);
    if (q == nullptr) {  // region exhausted
      q = RealSampledBlock(n, 16);
      if (q != nullptr) {
        new_count = RealUsable(q);
        in_table = g_big.Insert(reinterpret_cast<uintptr_t>(q), new_count);
      }
    }
  } else {
    errno = saved_errno;
    q = g_real.malloc(n);
    if (q == nullptr) return nullptr;  // ENOMEM from the real malloc; p untouched
    new_count = RealUsable(q);
    if (target == kRealSampled) in_table = g_big.Insert(reinterpret_cast<uintptr_t>(q), new_count);
  }
  if (q == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  memcpy(q, p, old.len < n ? old.len : n);
  CountAlloc(t, new_count);
  if (target == kRegion && (in_table || g_region.Contains(q))) {
    EmitAlloc(t, q, n, interval, fmt::kKindRealloc, stack);
  } else if (target == kRealSampled && in_table) {
    EmitAlloc(t, q, n, 0, fmt::kKindRealloc, stack);
  }
  ReleaseOld(t, p, old.len, old.region, old.boot, old.big, nested, rec);
  errno = saved_errno;
  return q;
}

void* ReallocSlow(void* p, size_t n, bool countdown_hit) {
  ResolveReal();
  ThreadState& t = t_state;
  GuardScope guard(t);
  EnsureThread(t);
  const bool rec = !guard.was_set() && Recording();
  OldBlock old;
  old.p = p;
  old.region = g_region.Contains(p);
  old.boot = old.region && g_region.IsBootstrap(p);
  old.len = old.region ? g_region.RequestedSize(p) : RealUsable(p);
  old.big = !old.region && old.len >= g_hot.always_bytes;
  int saved_errno = errno;

  // glibc: realloc(p, 0) frees p and returns NULL.
  if (n == 0 && g_hot.glibc) {
    ReleaseOld(t, p, old.len, old.region, old.boot, old.big, guard.was_set(), rec);
    errno = saved_errno;
    return nullptr;
  }
  uint64_t interval = 0;
  const ReallocTarget target = ChooseReallocTarget(t, n, rec, countdown_hit, &interval);
  uint32_t stack = target != kPlain ? CaptureStack(t) : 0;
  if (!old.region && target != kRegion) {
    return ReallocReal(t, old, n, target, stack, rec, saved_errno);
  }
  return ReallocMove(t, old, n, target, interval, stack, guard.was_set(), rec, saved_errno);
}

// Anonymous mappings. One with access (any prot but PROT_NONE) is memory:
// counted in mmap_live (g_mmaps). A PROT_NONE one is address space reserved
// for later (CUDA's driver reserves gigabytes so at cuInit; allocators
// reserve, then commit): kept apart (g_reserved), counted only once
// mprotect gives it access, when an MMAP record for the committed part is
// written with the caller's stack. Every range is rounded out to pages.
namespace {

uintptr_t PageEnd(uintptr_t a, size_t len) { return a + ((len + 4095) & ~size_t{4095}); }

// MAP_FIXED over memory with PROT_NONE decommits it; anything else commits.
void AccountMapping(uintptr_t a, uintptr_t end, bool reserved) {
  if (reserved) {
    const uint64_t removed = g_mmaps.Remove(a, end);
    g_counters.mmap_live.fetch_sub(removed, std::memory_order_relaxed);
    g_reserved.Add(a, end);
  } else {
    g_reserved.Remove(a, end);
    const int64_t delta = g_mmaps.Add(a, end);
    g_counters.mmap_live.fetch_add(static_cast<uint64_t>(delta), std::memory_order_relaxed);
  }
}

void EmitMmap(ThreadState& t, uint32_t stack, uintptr_t a, size_t len, int prot, int flags) {
  uint8_t buf[fmt::kMaxEncodedSize<fmt::MmapRecord>];
  fmt::MmapRecord rec;
  rec.ts = NowRel();
  rec.seq = NextSeq();
  rec.tid = t.tid;
  rec.stack = stack;
  rec.addr = a;
  rec.len = len;
  rec.prot = static_cast<uint32_t>(prot);
  rec.flags = static_cast<uint32_t>(flags);
  rec.step = g_cur_step.load(std::memory_order_relaxed);
  rec.stage_str = g_cur_stage.load(std::memory_order_relaxed);
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec) && Recording()) PushFromHook(t, buf, e.size());
}

}  // namespace

void RecordMmap(void* p, size_t len, int prot, int flags) {
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  uint32_t stack = CaptureStack(t);
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  AccountMapping(a, PageEnd(a, len), prot == PROT_NONE);
  EmitMmap(t, stack, a, len, prot, flags);
}

namespace {

// A MUNMAP record for [a, a + len), numbered `seq`.
void EmitMunmap(ThreadState& t, uintptr_t a, size_t len, uint64_t seq) {
  uint8_t buf[fmt::kMaxEncodedSize<fmt::MunmapRecord>];
  fmt::MunmapRecord rec;
  rec.ts = NowRel();
  rec.seq = seq;
  rec.tid = t.tid;
  rec.addr = a;
  rec.len = len;
  fmt::RecordEncoder enc(buf, sizeof(buf));
  if (fmt::Encode(enc, rec) && Recording()) PushFromHook(t, buf, enc.size());
}

}  // namespace

void ForgetMapping(uintptr_t a, size_t len) {
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  const uint64_t removed = g_mmaps.Remove(a, PageEnd(a, len));
  if (removed == 0) return;
  g_counters.mmap_live.fetch_sub(removed, std::memory_order_relaxed);
  EmitMunmap(t, a, len, NextSeq());
}

int MunmapSlow(void* p, size_t len) {
  ThreadState& t = t_state;
  GuardScope guard(t);
  EnsureThread(t);
  uint64_t seq = NextSeq();  // before the range can be reused
  int rc = g_real.munmap(p, len);
  int e = errno;
  if (rc == 0) {
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    uint64_t removed = g_mmaps.Remove(a, PageEnd(a, len));
    g_counters.mmap_live.fetch_sub(removed, std::memory_order_relaxed);
    g_reserved.Remove(a, PageEnd(a, len));
    EmitMunmap(t, a, len, seq);
  }
  errno = e;
  return rc;
}

void* MremapSlow(void* old, size_t old_len, size_t new_len, int flags, void* new_addr) {
  ThreadState& t = t_state;
  GuardScope guard(t);
  EnsureThread(t);
  void* q = g_real.mremap(old, old_len, new_len, flags, new_addr);
  int e = errno;
  if (q != MAP_FAILED) {
    uint32_t stack = CaptureStack(t);
    uintptr_t o = reinterpret_cast<uintptr_t>(old);
    uintptr_t n = reinterpret_cast<uintptr_t>(q);
    uint64_t removed = g_mmaps.Remove(o, PageEnd(o, old_len));
    g_counters.mmap_live.fetch_sub(removed, std::memory_order_relaxed);
    if (removed != 0) {
      int64_t d = g_mmaps.Add(n, PageEnd(n, new_len));
      g_counters.mmap_live.fetch_add(static_cast<uint64_t>(d), std::memory_order_relaxed);
    } else if (g_reserved.Remove(o, PageEnd(o, old_len)) != 0) {
      g_reserved.Add(n, PageEnd(n, new_len));  // reserved space moved: still no memory
    }
    uint8_t buf[fmt::kMaxEncodedSize<fmt::MremapRecord>];
    fmt::MremapRecord rec;
    rec.ts = NowRel();
    rec.seq = NextSeq();
    rec.tid = t.tid;
    rec.stack = stack;
    rec.old_addr = o;
    rec.old_len = old_len;
    rec.new_addr = n;
    rec.new_len = new_len;
    rec.step = g_cur_step.load(std::memory_order_relaxed);
    rec.stage_str = g_cur_stage.load(std::memory_order_relaxed);
    fmt::RecordEncoder enc(buf, sizeof(buf));
    if (fmt::Encode(enc, rec) && Recording()) PushFromHook(t, buf, enc.size());
  }
  errno = e;
  return q;
}

// mprotect: access given to reserved space commits it (an MMAP record for
// each reserved part, with this caller's stack and `prot`); PROT_NONE over
// memory decommits it (an MMAP record with prot 0 for each part: the reader
// takes it out of the live bytes). Other ranges (file mappings, the loader's
// RELRO, memory whose access only changes) write nothing and capture no
// stack.
int MprotectSlow(void* p, size_t len, int prot) {
  ThreadState& t = t_state;
  GuardScope guard(t);
  int rc = g_real.mprotect(p, len, prot);
  if (rc != 0) return rc;  // errno as the call left it
  ErrnoSaver errno_saver;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = PageEnd(a, len);
  const bool reserve = prot == PROT_NONE;
  IntervalSet& from = reserve ? g_mmaps : g_reserved;
  constexpr size_t kParts = 16;
  uintptr_t parts[2 * kParts];
  uint32_t stack = 0;
  bool captured = false;
  for (uintptr_t at = a; at < end;) {
    const size_t n = from.Overlaps(at, end, parts, kParts);
    if (n == 0) break;
    if (!captured) {
      EnsureThread(t);
      stack = CaptureStack(t);
      captured = true;
    }
    for (size_t k = 0; k < n; ++k) {
      AccountMapping(parts[2 * k], parts[2 * k + 1], reserve);
      EmitMmap(t, stack, parts[2 * k], parts[2 * k + 1] - parts[2 * k], prot,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED);
    }
    at = parts[2 * n - 1];
  }
  return rc;
}

void EnterDlopen(uintptr_t entry_sp, uintptr_t ret) {
  g_maps_dirty.store(1, std::memory_order_release);
  PyFramesRecheck();
  ThreadState& t = t_state;
  // A dlopen from a library constructor runs inside the outer one, which
  // spans it: keep the outer record.
  if (InLoader(t)) return;
  t.dl_ret = ret;
  t.dl_sp = entry_sp;
}

#if defined(__aarch64__)
namespace {
// A saved return address without its pointer-authentication code, if any
// (a glibc built with -mbranch-protection signs x30 before saving it).
// xpaclri is in the hint space: a no-op on cores without PAC.
uintptr_t StripPac(uintptr_t a) {
  register uintptr_t lr __asm__("x30") = a;
  __asm__("hint #7" : "+r"(lr));  // xpaclri
  return lr;
}
}  // namespace

// aarch64's InLoader. The caller's return address arrives in x30, so no stack
// slot keeps it the way x86-64's call does. But glibc's dlopen, as every
// non-leaf function GCC and clang build for aarch64 Linux (frame pointers are
// their default there), saves x29 and x30 as a frame record below its
// caller's sp, and the records chain through x29. So walk the chain from this
// frame towards dl_sp: a record whose saved x30 is dl_ret is that dlopen,
// still running (the x86-64 caveat holds: a call from the same site looks the
// same); reaching dl_sp without one means it has returned. A chain that does
// not rise within [this frame, dl_sp) (a frame that uses x29 as a general
// register) proves nothing and counts as inside, the harmless side. Only
// addresses in that range are read: this thread's live stack.
MEMSTEP_NOINLINE bool InDlopenFrames(uintptr_t dl_sp, uintptr_t dl_ret) {
  uintptr_t fp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (fp >= dl_sp) return false;
  for (int i = 0; i < 4096; ++i) {
    const uintptr_t* rec = reinterpret_cast<const uintptr_t*>(fp);
    if (StripPac(rec[1]) == dl_ret) return true;
    const uintptr_t next = rec[0];
    if (next >= dl_sp) return false;
    if (next <= fp || (next & 7) != 0) return true;
    fp = next;
  }
  return true;
}
#endif

// So that a library loaded and unloaded between two writer cycles still gets
// its MAPPING record (the dlopen has nothing after it to record it). Outermost
// dlclose only: a nested one (from a library constructor or destructor) may
// still be inside the loader lock, which RefreshMappings takes.
void BeforeDlclose() {
  ThreadState& t = t_state;
  if (t.guard || InLoader(t) || !Recording()) return;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  RefreshMappings();
}

void AfterDlclose() {
  g_maps_dirty.store(1, std::memory_order_release);
  UnwinderForgetPages();  // some were the unloaded library's
  ThreadState& t = t_state;
  if (t.guard) return;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  if (g_unw_flush_cache != nullptr && g_unw_local_as != nullptr) {
    g_unw_flush_cache(*g_unw_local_as, 0, 0);
  }
  // The MAPPING_GONE record at once, before another library can be mapped
  // at the same addresses (outermost only, as above).
  if (!InLoader(t) && Recording()) RefreshMappings();
}

}  // namespace memstep::preload

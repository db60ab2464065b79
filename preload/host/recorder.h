// Internals shared by the slow paths (recorder.cc), the step/stage API
// (api.cc) and the library's lifecycle (lifecycle.cc: init, fini, thread
// exit, fork). Not part of the hot path: nothing here is inlined into hooks.
//
// Contract: every function may be called only with the caller's reentrancy
// guard set (GuardScope), never allocates from the hooked heap, and never
// blocks except on the spinlocks named here (held briefly).

#ifndef MEMSTEP_PRELOAD_RECORDER_H_
#define MEMSTEP_PRELOAD_RECORDER_H_

#include <pthread.h>
#include <stdint.h>

#include <atomic>

#include "preload/core/interval_set.h"
#include "preload/host/runtime.h"

namespace memstep::preload {

extern IntervalSet g_mmaps;     // live anonymous mappings with access: memory
extern IntervalSet g_reserved;  // live anonymous PROT_NONE ones: address space only
extern pthread_key_t g_key;     // thread-exit destructor (ThreadExit)
extern bool g_key_ok;

// libunwind, loaded at run time (RTLD_LOCAL keeps its _Unwind_* symbols off
// the C++ exception path). Null when it is missing.
using UnwBacktraceFn = int (*)(void**, int);
using UnwFlushCacheFn = void (*)(void*, uintptr_t, uintptr_t);
extern UnwBacktraceFn g_unw_backtrace;
extern UnwFlushCacheFn g_unw_flush_cache;
extern void** g_unw_local_as;
extern uintptr_t g_self_lo, g_self_hi;  // libmemstep.so's mapped range (skipped frames)

// Step/stage state. g_api_lock protects it and orders boundary records; it is
// never held while unwinding or doing I/O.
extern SpinLock g_api_lock;
extern bool g_step_open;  // protected by g_api_lock
inline constexpr int kMaxStageDepth = 16;
struct StageLevel {
  uint32_t id;                // protected by g_api_lock
  std::atomic<uint64_t> max;  // CAS-max from FlushCounters
};
extern StageLevel g_stages[kMaxStageDepth];  // [0, g_stage_depth) are open
extern std::atomic<int> g_stage_depth;

bool Recording();
uint64_t NowRel();     // ns since the trace's start_mono_ns
uint64_t LiveBytes();  // exact global live heap bytes (flushed part)
uint64_t NextSeq();
// Thread id, thread-exit key armed.
void EnsureThread(ThreadState& t);
// Pushes a complete record that must reach the trace: to the thread's ring
// (acquired on first use), or when it is full to the kept lane (ring.h); never
// waits. Every record but a sampled ALLOC goes this way.
void Push(ThreadState& t, const uint8_t* rec, size_t n);
// Pushes a sampled ALLOC record: to the thread's ring; when it is full the
// record is dropped and counted (LOST cause 1), or in lossless mode the thread
// waits for the writer (bounded, never inside the loader).
void PushSample(ThreadState& t, const uint8_t* rec, size_t n);
// Push, for the records an allocation hook writes with no memstep lock held
// (FREE, MMAP, MUNMAP, MREMAP, an ALLOC recorded with p = 1): in lossless
// mode, when the ring and the lane are both full, waits for the writer
// (bounded, never inside the loader) rather than drop the record.
void PushFromHook(ThreadState& t, const uint8_t* rec, size_t n);
// Interned stack of the caller (0 when unwinding is not possible), timed
// into g_capture_ns / g_capture_count.
uint32_t CaptureStack(ThreadState& t);
// The same, untimed: for a caller that times the whole sample (SampleCost).
uint32_t CaptureStackUntimed(ThreadState& t);
// The cost of samples, which the leak hunt's CPU budget is measured in: time
// spent (ns) and samples taken, since start. A sampled small block is timed
// whole, from its stack to its record, and again when it is freed (the
// region and the site table's work, the FREE record); any other stack
// (big blocks, mappings, device memory) counts its capture.
extern std::atomic<uint64_t> g_capture_ns;
extern std::atomic<uint64_t> g_capture_count;
// The same for screens (ChooseSample): their time and count, apart, since
// the hunt budgets screens and samples with stacks apart.
extern std::atomic<uint64_t> g_screen_ns;
extern std::atomic<uint64_t> g_screen_count;
// Adds the time from construction to destruction to g_capture_ns (or, once
// set_screen() was called, to g_screen_ns), and one sample (screen) to the
// count if `sample`.
class SampleCost {
 public:
  explicit SampleCost(bool sample) : t0_(MonoNs()), sample_(sample) {}
  ~SampleCost() {
    (screen_ ? g_screen_ns : g_capture_ns).fetch_add(MonoNs() - t0_, std::memory_order_relaxed);
    if (sample_)
      (screen_ ? g_screen_count : g_capture_count).fetch_add(1, std::memory_order_relaxed);
  }
  void set_screen() { screen_ = true; }
  SampleCost(const SampleCost&) = delete;
  SampleCost& operator=(const SampleCost&) = delete;

 private:
  uint64_t t0_;
  bool sample_;
  bool screen_ = false;
};
void ThreadExit(void*);
// The sampling decision of an allocation whose countdown ran out: draws the
// next gap; true with *interval (the T the gap was drawn with, 0 for T <= 1)
// when it is sampled.
bool DecideSample(ThreadState& t, uint64_t* interval);
// Screening (docs/analysis.md "Leak hunt"): while a host leak hunt screens, the
// countdown runs at the screening T and g_full_interval holds the T of the
// samples with stacks (the schedule's, or the hunt's for stacks; what RATE
// records say); 0 when not screening.
extern std::atomic<uint64_t> g_full_interval;
enum SampleKind : uint8_t { kSampleNone, kSampleFull, kSampleScreen };
// What a drawn sample of `size` bytes at *interval becomes. Not screening, or
// a gap drawn at g_full_interval or above: a sample with a stack. Else an
// allocation of a targeted Python context (SitesIsTarget): a sample with a
// stack at *interval. Else thinned to g_full_interval: with probability
// p(full) / p(*interval) a sample with a stack at *interval = full, so that
// every untargeted allocation is sampled with p(full) as RATE says;
// otherwise, on a thread running Python and `may_screen`, a screen (a
// sampled block without a stack or a record, tallied under *key), else
// nothing.
SampleKind ChooseSample(ThreadState& t, size_t size, bool may_screen, uint64_t* interval,
                        uint32_t* key);
// ALLOC record (and the in-process site estimate) of a sampled block; FREE
// record with the sequence number taken before the block was released.
void EmitAlloc(ThreadState& t, const void* p, size_t size, uint64_t interval, uint8_t kind,
               uint32_t stack);
void EmitFree(ThreadState& t, const void* p, uint64_t seq);

// Python frames in stacks (pyframes.cc).
void PyFramesPoll();     // writer thread: finds CPython 3.10-3.13 (once, again after dlopen)
void PyMemPoll();        // writer thread: hooks pymalloc where no sitecustomize did (pymem.cc)
void PyFramesRecheck();  // after a dlopen while Python was not found
bool PyFramesActive();
// native[0..n) innermost first -> out: native frames up to the interpreter
// loop, then the thread's Python frames; returns the count (<= cap).
uint32_t PyFramesMerge(const uint64_t* native, uint32_t n, uint64_t* out, uint32_t cap);
// The calling thread's Python context: its innermost shown frame's line
// (the frame string id of its function, file and line) as a screen key
// (config.h kScreenKeyBit); 0 when the thread runs no Python (or Python
// frames are not read). A few loads and a cache lookup, no unwinding: what a
// screen is tallied under.
uint32_t PyFramesContext();
// A 64-bit hash of the code objects and instructions of the calling thread's
// first `frames` shown Python frames (0: none), without unwinding.
uint64_t PyFramesKey(int frames);
// Whether `ip` is in the interpreter loop (_PyEval_EvalFrameDefault).
bool PyFramesInEval(uintptr_t ip);
// Whether the calling thread has a Python thread state (Python frames are
// read; not while the interpreter finalizes).
bool PyFramesOnThread();

// Progressive sampling (progressive.cc).
void ProgressiveInit();  // after ReadConfig: sets g_interval
// At every step end (not under g_api_lock): may change T and write a RATE record.
void ProgressiveStepEnd(ThreadState& t, uint64_t live, uint64_t peak, bool user_steps);
// The program marked its first step: its warm-up steps are sampled densely.
void ProgressiveStepsBegin(ThreadState& t);
// memstep_boost(): T_warm for the next `steps` steps.
void ProgressiveBoost(ThreadState& t, uint32_t steps);
void ProgressiveForkChild();

// The allocator's statistics at step ends (steps/alloc_stats.cc).
constexpr int kAllocStatsMax = 24;
constexpr int kArenaStatsMax = 64;  // format::kMaxArenaStats
struct AllocStats {
  int64_t values[kAllocStatsMax];  // -1: not collected
  // glibc's arenas (malloc_info): n rows of (system, free, top, free_chunks);
  // arenas beyond the last row are summed into it. 2 KiB on the stack.
  uint32_t arenas;
  uint64_t arena[kArenaStatsMax][4];
};
// Two parts (steps/alloc_stats.cc). The heap allocator's statistics change
// within a step (freed blocks are reused at once), so the program's thread
// reads them at the step end itself: outside every lock, before a STEP end
// record; true when a collection was due (rate-limited to 1 % of wall time
// by its own measured cost) and *s is filled.
bool AllocStatsCollectHeap(AllocStats* s);
// g_api_lock held, just before the STEP end record: COUNTER records of *s and
// an ARENA_STATS record when it has arenas.
void AllocStatsEmit(ThreadState& t, const AllocStats& s);
// The resident split (smaps_rollup or statm) and memstep's own resident
// memory change slowly, so the writer thread reads them: at a step end (after
// its STEP end record, any thread) AllocStatsRequest asks for them when due
// (one clock read; when due, one futex wake), and AllocStatsWriterPoll, on
// the writer thread, reads them for the latest requested step and writes a
// `stats.step` COUNTER naming it, then their COUNTER records.
void AllocStatsRequest(uint64_t step);
void AllocStatsWriterPoll(ThreadState& t);
void AllocStatsForkChild();

// Sets the reentrancy guard for a scope and restores the previous value.
class GuardScope {
 public:
  explicit GuardScope(ThreadState& t) : t_(t), saved_(t.guard) { t.guard = 1; }
  ~GuardScope() { t_.guard = saved_; }
  bool was_set() const { return saved_ != 0; }

 private:
  ThreadState& t_;
  uint8_t saved_;
};

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_RECORDER_H_

// The public C API (include/memstep/memstep.h): step and stage boundaries
// with exact counters, epochs, user counters; the counter flush that maintains
// the run/step/stage maxima (and drives peak-composition snapshots); and the
// internal boundaries used by time windows and NVTX ranges.

#include <stdint.h>

#include "memstep/memstep.h"
#include "preload/core/fds.h"
#include "preload/cuda/cuda.h"
#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "preload/steps/config.h"
#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

SpinLock g_api_lock;
bool g_step_open = false;
StageLevel g_stages[kMaxStageDepth];
std::atomic<int> g_stage_depth{0};

void FlushCounters(ThreadState* t) {
  if ((t->alloc_count | t->free_count) == 0) return;
  if (t->own) {
    // memstep's writer thread: zstd allocates and frees a context per chunk.
    // Counted, it would add up to a chunk's context to the program's live
    // bytes between two flushes (a 0.5 MiB step in the "exact" series).
    ClearPending(*t);
    return;
  }
  g_counters.alloc_bytes.fetch_add(PendingAllocBytes(*t), std::memory_order_relaxed);
  g_counters.alloc_count.fetch_add(t->alloc_count, std::memory_order_relaxed);
  g_counters.free_bytes.fetch_add(PendingFreeBytes(*t), std::memory_order_relaxed);
  g_counters.free_count.fetch_add(t->free_count, std::memory_order_relaxed);
  ClearPending(*t);
  uint64_t live = LiveBytes();
  AtomicMax(&g_counters.run_max, live);
  AtomicMax(&g_counters.step_max, live);
  int depth = g_stage_depth.load(std::memory_order_relaxed);
  if (depth > 0 && depth <= kMaxStageDepth) AtomicMax(&g_stages[depth - 1].max, live);
  SitesOnLive(live);
}

namespace {

fmt::Counters Snapshot(uint64_t peak, uint64_t rss) {
  fmt::Counters c;
  c.alloc_bytes = g_counters.alloc_bytes.load(std::memory_order_relaxed);
  c.alloc_count = g_counters.alloc_count.load(std::memory_order_relaxed);
  c.free_bytes = g_counters.free_bytes.load(std::memory_order_relaxed);
  c.free_count = g_counters.free_count.load(std::memory_order_relaxed);
  c.live_bytes = c.alloc_bytes > c.free_bytes ? c.alloc_bytes - c.free_bytes : 0;
  c.peak_bytes = peak > c.live_bytes ? peak : c.live_bytes;
  c.mmap_live_bytes = g_counters.mmap_live.load(std::memory_order_relaxed);
  c.rss_bytes = rss;
  return c;
}

// g_api_lock held.
void EmitStep(ThreadState& t, uint64_t step, int phase, const fmt::Counters& c) {
  uint8_t buf[fmt::kMaxEncodedSize<fmt::StepRecord>];
  fmt::StepRecord rec;
  rec.ts = NowRel();
  rec.seq = NextSeq();
  rec.tid = t.tid;
  rec.step = step;
  rec.phase = static_cast<uint8_t>(phase);
  rec.counters = c;
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
}

void EmitStage(ThreadState& t, uint32_t name, int phase, const fmt::Counters& c) {
  uint8_t buf[fmt::kMaxEncodedSize<fmt::StageRecord>];
  fmt::StageRecord rec;
  rec.ts = NowRel();
  rec.seq = NextSeq();
  rec.tid = t.tid;
  rec.stage_str = name;
  rec.step = g_cur_step.load(std::memory_order_relaxed);
  rec.phase = static_cast<uint8_t>(phase);
  rec.counters = c;
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
}

// Whether the open step is a time window (g_api_lock).
bool g_window_active = false;
uint64_t g_steps_ended = 0;  // g_api_lock

// `user`: a program marker (ends time windows); otherwise a time window from
// the writer thread, ignored once the program marks steps.
void StepCore(ThreadState& t, uint64_t step, bool begin, bool user) {
  FlushQueuedStderr();  // the writer's messages it could not write itself
  FlushCounters(&t);
  bool rec = Recording();
  uint64_t rss = rec ? ReadRssBytes() : 0;
  // The heap allocator's statistics, when this call ends a step (a hint read
  // without the lock: at worst one collection is wasted or one step lacks it).
  AllocStats stats;
  const bool have_stats = rec && (!begin || g_step_open) && AllocStatsCollectHeap(&stats);
  bool notice = false;
  bool first_user_step = false;
  bool ended = false;
  uint64_t ended_step = 0, ended_live = 0, ended_peak = 0;
  {
    SpinLockHolder lock(&g_api_lock);
    // Beginning the step the program already has open (the same number, say
    // an explicit memstep.step(0) just after the PyTorch hooks opened step 0)
    // continues it: a second step of the same number would be an artifact.
    if (user && begin && g_step_open && !g_window_active &&
        g_cur_step.load(std::memory_order_relaxed) == step) {
      return;
    }
    if (user) {
      if (!g_user_steps.load(std::memory_order_relaxed)) {
        g_user_steps.store(true, std::memory_order_release);
        notice = g_window_active;
        first_user_step = true;
      }
      g_window_active = false;
    } else {
      if (g_user_steps.load(std::memory_order_relaxed)) return;
      g_window_active = true;
    }
    uint64_t live = LiveBytes();
    if (begin) {
      if (g_step_open) {
        uint64_t peak = g_counters.step_max.load(std::memory_order_relaxed);
        ended = true;
        ended_step = g_cur_step.load();
        ended_live = live;
        ended_peak = peak > live ? peak : live;
        if (rec && have_stats) AllocStatsEmit(t, stats);
        if (rec) EmitStep(t, ended_step, 1, Snapshot(peak, rss));
        g_counters.step_max.store(live, std::memory_order_relaxed);
      }
      uint64_t peak = g_counters.step_max.load(std::memory_order_relaxed);
      g_counters.step_max.store(live, std::memory_order_relaxed);
      g_cur_step.store(step, std::memory_order_relaxed);
      g_step_open = true;
      if (rec) EmitStep(t, step, 0, Snapshot(peak, rss));
    } else {
      uint64_t peak = g_counters.step_max.load(std::memory_order_relaxed);
      g_counters.step_max.store(live, std::memory_order_relaxed);
      g_step_open = false;
      ended = true;
      ended_step = step;
      ended_live = live;
      ended_peak = peak > live ? peak : live;
      if (rec && have_stats) AllocStatsEmit(t, stats);
      if (rec) EmitStep(t, step, 1, Snapshot(peak, rss));
    }
    if (ended) ++g_steps_ended;
  }
  if (notice && rec) {
    EmitNoticeRecord(t, "time windows stopped: the program marks its own steps");
  }
  if (first_user_step && rec) ProgressiveStepsBegin(t);
  if (ended && rec) {
    AllocStatsRequest(ended_step);  // the resident split, by the writer thread
    CudaStepEnd(t, ended_step);     // device counters and the step's device peak (alerts use it)
    AlertsStepEnd(t, ended_step, ended_live, ended_peak);
    ProgressiveStepEnd(t, ended_live, ended_peak, g_user_steps.load(std::memory_order_relaxed));
  }
}

void StepBoundary(uint64_t step, bool begin) {
  ThreadState& t = t_state;
  if (t.guard) return;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  StepCore(t, step, begin, true);
}

void StageBoundary(const char* name, bool begin) {
  ThreadState& t = t_state;
  if (t.guard) return;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  StageBoundaryById(t, InternStage(name), begin);
}

}  // namespace

uint32_t InternStage(const char* name) {
  return name != nullptr && Recording() ? g_dict.InternString(name, StrLen(name)) : 0;
}

void StepBoundaryInternal(ThreadState& t, uint64_t step, bool begin) {
  StepCore(t, step, begin, false);
}

void UserStepBoundary(ThreadState& t, uint64_t step, bool begin) { StepCore(t, step, begin, true); }

void StageBoundaryById(ThreadState& t, uint32_t id, bool begin) {
  FlushCounters(&t);
  bool rec = Recording();
  uint64_t rss = rec ? LastRssBytes() : 0;
  uint8_t snap[2048];
  size_t snap_len = 0;
  {
    SpinLockHolder lock(&g_api_lock);
    uint64_t live = LiveBytes();
    int depth = g_stage_depth.load(std::memory_order_relaxed);
    if (begin) {
      uint64_t enclosing = depth > 0 ? g_stages[depth - 1].max.load(std::memory_order_relaxed)
                                     : g_counters.step_max.load(std::memory_order_relaxed);
      if (depth < kMaxStageDepth) {
        g_stages[depth].id = id;
        g_stages[depth].max.store(live, std::memory_order_relaxed);
        SitesStageBegin(depth, live);
        g_stage_depth.store(depth + 1, std::memory_order_relaxed);
      }
      g_cur_stage.store(id, std::memory_order_relaxed);
      if (rec) EmitStage(t, id, 0, Snapshot(enclosing, rss));
      return;
    }
    int k = depth - 1;
    while (k >= 0 && g_stages[k].id != id) --k;
    uint64_t peak = live;
    if (k >= 0) {
      for (int i = k; i < depth; ++i) {
        uint64_t m = g_stages[i].max.load(std::memory_order_relaxed);
        if (m > peak) peak = m;
      }
      uint64_t step = g_cur_step.load(std::memory_order_relaxed);
      for (int i = depth - 1; i >= k; --i) {
        size_t n = SitesStageEnd(i, g_stages[i].id, step, snap, sizeof(snap));
        if (i == k) snap_len = n;
      }
      g_stage_depth.store(k, std::memory_order_relaxed);
      if (k > 0) AtomicMax(&g_stages[k - 1].max, peak);
      g_cur_stage.store(k > 0 ? g_stages[k - 1].id : 0, std::memory_order_relaxed);
      AlertsStageEnd(id, peak);
    }
    if (rec) {
      EmitStage(t, id, 1, Snapshot(peak, rss));
      if (snap_len > 0) Push(t, snap, snap_len);
    }
  }
}

}  // namespace memstep::preload

using namespace memstep::preload;  // NOLINT: the C API

MEMSTEP_EXPORT void memstep_step_begin(uint64_t step) { StepBoundary(step, true); }
MEMSTEP_EXPORT void memstep_step_end(uint64_t step) { StepBoundary(step, false); }
MEMSTEP_EXPORT void memstep_stage_begin(const char* name) { StageBoundary(name, true); }
MEMSTEP_EXPORT void memstep_stage_end(const char* name) { StageBoundary(name, false); }

MEMSTEP_EXPORT void memstep_epoch_begin(uint64_t epoch) {
  ThreadState& t = t_state;
  if (t.guard || !Recording()) return;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  uint8_t buf[fmt::kMaxEncodedSize<fmt::EpochRecord>];
  SpinLockHolder lock(&g_api_lock);  // orders it with the step records
  fmt::EpochRecord rec;
  rec.ts = NowRel();
  rec.seq = NextSeq();
  rec.tid = t.tid;
  rec.epoch = epoch;
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
}

MEMSTEP_EXPORT void memstep_boost(uint32_t steps) {
  ThreadState& t = t_state;
  if (t.guard || !Recording()) return;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  ProgressiveBoost(t, steps);
}

MEMSTEP_EXPORT void memstep_counter(const char* name, int64_t value) {
  ThreadState& t = t_state;
  if (t.guard || !Recording() || name == nullptr) return;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  uint32_t id = g_dict.InternString(name, StrLen(name));
  uint8_t buf[fmt::kMaxEncodedSize<fmt::CounterRecord>];
  fmt::CounterRecord rec;
  rec.ts = NowRel();
  rec.seq = NextSeq();
  rec.tid = t.tid;
  rec.name_str = id;
  rec.value = value;
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
}

// The public C API (include/memstep/memstep.h): step and stage boundaries
// with exact counters, user counters; and the counter flush that maintains
// the run/step/stage maxima.

#include <stdint.h>

#include "memstep/memstep.h"
#include "preload/recorder.h"
#include "preload/runtime.h"
#include "src/format/format.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

SpinLock g_api_lock;
bool g_step_open = false;
StageLevel g_stages[kMaxStageDepth];
std::atomic<int> g_stage_depth{0};

void FlushCounters(ThreadState* t) {
  if ((t->alloc_count | t->free_count) == 0) return;
  g_counters.alloc_bytes.fetch_add(t->alloc_bytes, std::memory_order_relaxed);
  g_counters.alloc_count.fetch_add(t->alloc_count, std::memory_order_relaxed);
  g_counters.free_bytes.fetch_add(t->free_bytes, std::memory_order_relaxed);
  g_counters.free_count.fetch_add(t->free_count, std::memory_order_relaxed);
  t->alloc_bytes = t->alloc_count = t->free_bytes = t->free_count = 0;
  uint64_t live = LiveBytes();
  AtomicMax(&g_counters.run_max, live);
  AtomicMax(&g_counters.step_max, live);
  int depth = g_stage_depth.load(std::memory_order_relaxed);
  if (depth > 0 && depth <= kMaxStageDepth) AtomicMax(&g_stages[depth - 1].max, live);
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
  uint8_t buf[160];
  fmt::RecordEncoder e(buf, sizeof(buf));
  e.Begin(fmt::kTagStep);
  e.U(NowRel());
  e.U(NextSeq());
  e.U(t.tid);
  e.U(step);
  e.U(phase);
  e.PutCounters(c);
  if (e.End()) Push(t, buf, e.size());
}

void EmitStage(ThreadState& t, uint32_t name, int phase, const fmt::Counters& c) {
  uint8_t buf[160];
  fmt::RecordEncoder e(buf, sizeof(buf));
  e.Begin(fmt::kTagStage);
  e.U(NowRel());
  e.U(NextSeq());
  e.U(t.tid);
  e.U(name);
  e.U(g_cur_step.load(std::memory_order_relaxed));
  e.U(phase);
  e.PutCounters(c);
  if (e.End()) Push(t, buf, e.size());
}

void StepBoundary(uint64_t step, bool begin) {
  ThreadState& t = t_state;
  if (t.guard) return;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  FlushCounters(&t);
  bool rec = Recording();
  uint64_t rss = rec ? ReadRssBytes() : 0;
  SpinLockHolder lock(&g_api_lock);
  uint64_t live = LiveBytes();
  if (begin) {
    if (g_step_open && rec) {
      EmitStep(t, g_cur_step.load(), 1,
               Snapshot(g_counters.step_max.load(std::memory_order_relaxed), rss));
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
    if (rec) EmitStep(t, step, 1, Snapshot(peak, rss));
  }
}

void StageBoundary(const char* name, bool begin) {
  ThreadState& t = t_state;
  if (t.guard) return;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  FlushCounters(&t);
  bool rec = Recording();
  uint32_t id = name != nullptr && rec ? g_dict.InternString(name, StrLen(name)) : 0;
  uint64_t rss = rec ? ReadRssBytes() : 0;
  SpinLockHolder lock(&g_api_lock);
  uint64_t live = LiveBytes();
  int depth = g_stage_depth.load(std::memory_order_relaxed);
  if (begin) {
    uint64_t enclosing = depth > 0 ? g_stages[depth - 1].max.load(std::memory_order_relaxed)
                                   : g_counters.step_max.load(std::memory_order_relaxed);
    if (depth < kMaxStageDepth) {
      g_stages[depth].id = id;
      g_stages[depth].max.store(live, std::memory_order_relaxed);
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
    g_stage_depth.store(k, std::memory_order_relaxed);
    if (k > 0) AtomicMax(&g_stages[k - 1].max, peak);
    g_cur_stage.store(k > 0 ? g_stages[k - 1].id : 0, std::memory_order_relaxed);
  }
  if (rec) EmitStage(t, id, 1, Snapshot(peak, rss));
}

}  // namespace
}  // namespace memstep::preload

using namespace memstep::preload;  // NOLINT: the C API

MEMSTEP_EXPORT void memstep_step_begin(uint64_t step) { StepBoundary(step, true); }
MEMSTEP_EXPORT void memstep_step_end(uint64_t step) { StepBoundary(step, false); }
MEMSTEP_EXPORT void memstep_stage_begin(const char* name) { StageBoundary(name, true); }
MEMSTEP_EXPORT void memstep_stage_end(const char* name) { StageBoundary(name, false); }

MEMSTEP_EXPORT void memstep_counter(const char* name, int64_t value) {
  ThreadState& t = t_state;
  if (t.guard || !Recording() || name == nullptr) return;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  uint32_t id = g_dict.InternString(name, StrLen(name));
  uint8_t buf[64];
  fmt::RecordEncoder e(buf, sizeof(buf));
  e.Begin(fmt::kTagCounter);
  e.U(NowRel());
  e.U(NextSeq());
  e.U(t.tid);
  e.U(id);
  e.S(value);
  if (e.End()) Push(t, buf, e.size());
}

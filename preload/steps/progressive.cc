// Progressive sampling (design.md "Progressive sampling"; sampling-and-format.md
// 1.6 and 6.2): the mean sampling interval T changes at step boundaries.
//
//  - warm-up: T_warm from the program's first step marker for its first
//    kWarmSteps steps. Time windows (no markers) have no warm-up: T starts at
//    T_steady, since nothing tells where a warm-up would end, and a program
//    that allocates fast without markers (a benchmark) would pay the dense
//    rate for as long as any time limit chosen here;
//  - then T doubles every kDecaySteps steps up to T_steady;
//  - a boost sets T_warm for kBoostSteps steps and then restores the T it
//    found (the decay goes on), at most once every kBoostGap steps, when the
//    step's exact heap peak exceeds the run's
//    maximum by 5 %, when the exact heap live at step end has risen in at
//    least 15 of the last 19 steps (a growth alarm), or on memstep_boost().
//
// Estimates stay unbiased because every sample carries the T its gap was
// drawn with (recorder.cc DecideSample); a thread finishes its current gap
// at the old T, which keeps the hot path free of any rate check. Each change
// writes a RATE record.

#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

namespace {

constexpr uint64_t kWarmSteps = 20;
constexpr uint64_t kDecaySteps = 10;
constexpr uint32_t kBoostSteps = 3;
constexpr uint64_t kBoostGap = 50;
constexpr uint32_t kHist = 20;          // step-end live bytes kept for the alarm
constexpr uint32_t kAlarmRises = 15;    // of the kHist - 1 step-to-step changes

struct State {
  uint64_t steps = 0;        // steps ended
  uint64_t warm_until = 0;   // `steps` value that ends the warm-up (0: none)
  uint64_t run_max = 0;      // max step peak so far
  uint64_t last_boost = 0;   // `steps` when the last boost began; 0 = never
  uint32_t boost_left = 0;   // steps of the current boost still to run
  uint64_t resume = 0;       // T to go back to when the boost ends
  uint64_t since_change = 0; // steps since T last changed
  uint64_t live[kHist] = {};
  uint32_t nlive = 0;        // valid entries (<= kHist); newest at (steps - 1) % kHist
};

SpinLock g_prog_lock;  // after g_api_lock in the lock order; never held while pushing
State g_prog;

bool GrowthAlarm(const State& s) {
  if (s.nlive < kHist) return false;
  uint32_t rises = 0;
  uint64_t first = s.live[s.steps % kHist];             // oldest
  uint64_t last = s.live[(s.steps + kHist - 1) % kHist];  // newest
  for (uint32_t i = 1; i < kHist; ++i) {
    uint64_t a = s.live[(s.steps + i - 1) % kHist];
    uint64_t b = s.live[(s.steps + i) % kHist];
    rises += b > a;
  }
  return rises >= kAlarmRises && last > first;
}

void EmitRate(ThreadState& t, uint64_t interval) {
  uint8_t buf[32];
  fmt::RateRecord rec;
  rec.ts = NowRel();
  rec.interval = interval;
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
}

// Sets T; returns whether it changed.
bool SetInterval(uint64_t T) {
  if (g_interval.load(std::memory_order_relaxed) == T) return false;
  g_interval.store(T, std::memory_order_relaxed);
  return true;
}

}  // namespace

void ProgressiveInit() {
  uint64_t steady = g_config.sample_interval;
  if (steady <= 1) g_config.progressive = false;
  if (g_config.warm_interval == 0 || g_config.warm_interval > steady) {
    g_config.warm_interval = steady / 4 > 1 ? steady / 4 : steady;
  }
  g_interval.store(steady, std::memory_order_relaxed);
}

void ProgressiveStepsBegin(ThreadState& t) {
  if (!g_config.progressive) return;
  bool changed;
  {
    SpinLockHolder lock(&g_prog_lock);
    g_prog.warm_until = g_prog.steps + kWarmSteps;
    g_prog.since_change = 0;
    changed = SetInterval(g_config.warm_interval);
  }
  if (changed && Recording()) EmitRate(t, g_config.warm_interval);
}

void ProgressiveStepEnd(ThreadState& t, uint64_t live, uint64_t peak, bool user_steps) {
  if (!g_config.progressive) return;
  const uint64_t steady = g_config.sample_interval;
  const uint64_t warm = g_config.warm_interval;
  uint64_t changed_to = 0;
  {
    SpinLockHolder lock(&g_prog_lock);
    State& s = g_prog;
    s.live[s.steps % kHist] = live;
    ++s.steps;
    if (s.nlive < kHist) ++s.nlive;
    ++s.since_change;
    bool warming = user_steps && s.steps < s.warm_until;
    bool new_peak = !warming && s.run_max > 0 && peak > s.run_max + s.run_max / 20;
    if (peak > s.run_max) s.run_max = peak;
    uint64_t T = g_interval.load(std::memory_order_relaxed);
    if (warming) {
      T = warm;
    } else if (s.boost_left > 0) {
      // A boost is a short dense window: when it ends, T is what it was.
      --s.boost_left;
      T = s.boost_left > 0 ? warm : s.resume;
    } else if ((new_peak || GrowthAlarm(s)) &&
               (s.last_boost == 0 || s.steps - s.last_boost >= kBoostGap)) {
      s.last_boost = s.steps;
      s.boost_left = kBoostSteps;
      s.resume = T;
      T = warm;
    } else if (T < steady && s.since_change >= kDecaySteps) {
      T = T * 2 < steady ? T * 2 : steady;
      s.since_change = 0;
    } else if (T > steady) {
      T = steady;
    }
    if (SetInterval(T)) changed_to = T;
  }
  if (changed_to != 0 && Recording()) EmitRate(t, changed_to);
}

void ProgressiveBoost(ThreadState& t, uint32_t steps) {
  if (!g_config.progressive || steps == 0) return;
  bool changed;
  {
    SpinLockHolder lock(&g_prog_lock);
    if (g_prog.boost_left == 0) g_prog.resume = g_interval.load(std::memory_order_relaxed);
    if (steps > g_prog.boost_left) g_prog.boost_left = steps;
    changed = SetInterval(g_config.warm_interval);
  }
  if (changed && Recording()) EmitRate(t, g_config.warm_interval);
}

void ProgressiveForkChild() {
  g_prog_lock.Reset();
}

}  // namespace memstep::preload

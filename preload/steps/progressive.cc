// Progressive sampling (docs/preload.md "Progressive sampling", docs/analysis.md
// for the weights): the mean sampling interval T changes at step boundaries.
//
// The schedule:
//  - warm-up: T_warm from the program's first step marker for its first
//    kWarmSteps steps. Time windows (no markers) have no warm-up: T starts at
//    T_steady, since nothing tells where a warm-up would end, and a program
//    that allocates fast without markers (a benchmark) would pay the dense
//    rate for as long as any time limit chosen here;
//  - then T doubles every kDecaySteps steps up to T_steady;
//  - a boost sets T_warm for kBoostSteps steps and then restores the T it
//    found (the decay goes on), at most once every kBoostGap steps, when the
//    step's exact heap peak exceeds the run's maximum by 5 %, when the exact
//    heap live at step end has risen in at least 15 of the last 19 steps (a
//    growth alarm), or on memstep_boost().
//
// The leak hunt (docs/analysis.md "Leak hunt") overrides the schedule with a
// smaller T while the exact heap live bytes at step end grow significantly
// (one-sided Mann-Kendall, p < 0.001, over the last 8..24 step ends, Theil-
// Sen slope g >= 256 B/step) and the sampled sites do not explain it:
//  - T_hunt aims at g/2 rounded down to a power of two (about two long-lived
//    samples per step of a leak of small objects) within a CPU budget: the
//    share of the step's wall time spent on samples (their stacks, records
//    and frees: recorder.h SampleCost) stays under MEMSTEP_HUNT_BUDGET
//    percent (default 10).
//    The first T assumes every sampled byte costs a stack of its own (an
//    upper bound on the cost); then T halves, step by step, towards g/2
//    while the measured share is below 40 % of the budget, and doubles when
//    it is above it. Never larger than the schedule's T;
//  - kHuntSettle steps after the begin, a checkpoint (by then objects that
//    live a few steps have reached their level); kHuntWindow steps after it,
//    at every step end, the growth of the exact live bytes since the
//    checkpoint is compared with the growth of the sites' long-lived
//    hunt-born samples (sites.cc): the hunt ends "explained" when
//    the sites that grew most (each by 3 standard deviations of its own
//    sampling noise) cover >= 75 % of it with >= 24 long-lived samples,
//    "stopped" when the exact growth stopped (no rise over the last
//    kHuntWindow steps, p > 0.1), and "gave up" after kHuntMaxSteps;
//  - an explained hunt whose sites leave >= 1 KiB/step of the growth where
//    a leak could hide (unexplained, or within one standard deviation of
//    their sampling noise) goes on as a residual hunt aimed at half that
//    rate (Unexplained, ResidualBegins);
//  - then T doubles every step back to the schedule's; a new hunt may begin
//    kHuntCooldown steps later, if the growth rises beyond what the last
//    explained hunt found (by kHuntKnownShare of it; Hunt::known): the
//    growth it explained, going on, is not hunted again.
// Each begin and end writes a HUNT record.
//
// Screening (docs/analysis.md "Screening Python lines"): in a process running
// Python a host hunt has two T: its T for samples with stacks (what RATE
// records say) and a smaller screening T S that the countdown runs at. A
// draw at S is thinned back to T (recorder.cc ChooseSample); what is not
// kept becomes a screen (a sampled block without a stack or a record, tallied
// under its Python line, sites.cc), and lines whose screens outlive their
// step become targets, sampled with stacks at S. Screens may spend
// kScreenShare of the budget, samples with stacks what they leave; each T
// halves and doubles by its own share as above. A COUNTER
// (memstep.screen_interval) gives S at each change, 0 when screening stops.
//
// Device memory (docs/gpu.md "Sampling") has a schedule of its own with the
// same rules, on T_dev (MEMSTEP_DEVICE_SAMPLE_INTERVAL) and the exact device-
// resident bytes: warm-up at T_dev_warm, decay, a boost when the step's device
// peak exceeds the run's by 5 % or the device live bytes rise in 15 of 19
// steps, and a device leak hunt on the trend of the device live bytes at step
// ends (from kDevHuntMinRate = 1 MiB/step: device allocations are large), with
// T_dev aimed at g/2 within the same CPU budget (the device bytes allocated
// per step stand for the heap's), explained when the hunt's live samples
// since the checkpoint (cuda_account.cc's tally, Horvitz-Thompson bytes)
// cover 75 % of the exact growth with >= kDevHuntMinSamples samples. Its
// HUNT records have `memory` 1; T_dev changes write no RATE record (each
// DEV_ALLOC carries its own T).
//
// Estimates stay unbiased because every sample carries the T its gap was
// drawn with (recorder.cc DecideSample); a thread looks at T again at the
// end of each 32 KiB piece of its gap (kGapPiece), in the slow path, which
// keeps the hot path free of any rate check. Each change writes a RATE
// record.

#include <math.h>

#include <algorithm>

#include "preload/cuda/cuda.h"
#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "preload/steps/config.h"
#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

namespace {

constexpr uint64_t kWarmSteps = 20;
constexpr uint64_t kDecaySteps = 10;
constexpr uint32_t kBoostSteps = 3;
constexpr uint64_t kBoostGap = 50;
constexpr uint32_t kHist = 20;        // step-end live bytes kept for the alarm
constexpr uint32_t kAlarmRises = 15;  // of the kHist - 1 step-to-step changes

constexpr uint32_t kHuntHist = 24;            // step-end live bytes for the trend test
constexpr uint32_t kHuntMinSteps = 8;         // fewest step ends the test runs on
constexpr double kHuntZ = 3.09;               // one-sided p = 0.001
constexpr double kHuntGoneZ = 1.28;           // growth "stopped": not even p = 0.1
constexpr uint64_t kHuntMinRate = 256;        // bytes/step below which growth is ignored
constexpr uint64_t kHuntResidualRate = 1024;  // the least a residual hunt hunts, bytes/step
constexpr uint64_t kHuntSettle = 4;           // steps from the begin to the checkpoint
constexpr uint64_t kHuntWindow = 16;          // steps after it before the first check
constexpr uint64_t kHuntMaxSteps = 64;        // then the hunt gives up
constexpr int64_t kHuntMinSamples = 24;       // new long-lived samples an explanation needs
constexpr double kHuntCover = 0.75;           // share of the exact growth the sites must cover
constexpr uint64_t kHuntCooldown = 32;        // steps after a hunt before the next may begin
// After an explained hunt, a new one begins only on a rise beyond the growth
// it found (Hunt::known) by this share of it at least: a steady leak's rate,
// measured again, moves by less (a few % where its objects come in lumps of
// several steps' worth).
constexpr double kHuntKnownShare = 0.125;
// A residual hunt (the growth an explained hunt left, Unexplained): the
// standard deviations of the sites' sampling noise that may hide growth
// (which begins one), that the unexplained growth must stand out of (which
// keeps one going), and its longest run (it hunts a part of a growth that
// goes on).
constexpr double kResidualHideZ = 1.0;
constexpr double kResidualZ = 0.5;
constexpr uint64_t kResidualMaxSteps = 32;
constexpr uint64_t kHuntMinT = 256;
constexpr uint64_t kDefaultCaptureNs = 20000;  // cost of one sample before any was timed
constexpr uint64_t kDefaultScreenNs = 1000;    // cost of one screen before any was timed
// The share of the hunt's budget screens may spend (the rest: samples with
// stacks, the targets' among them). Screens find a Python leak's line for a
// tenth of a stack's cost, so they get most of it.
constexpr double kScreenShare = 2.0 / 3.0;

struct Hunt {
  enum Phase : uint8_t { kIdle, kHunting, kDecaying };
  Phase phase = kIdle;
  uint64_t hist[kHuntHist] = {};
  uint32_t n = 0;           // valid entries; newest at (steps - 1) % kHuntHist
  uint64_t began = 0;       // `steps` at the begin
  uint64_t chk_live = 0;    // at the checkpoint, kHuntSettle steps later
  uint64_t T = 0;           // the hunt's T, or the decaying T
  uint64_t rate = 0;        // growth at the begin (a residual's: what may hide), bytes/step
  uint64_t stack_rate = 0;  // the rate T is aimed at (a screening residual's: the begin's)
  bool residual = false;    // hunting what an explained hunt left
  uint64_t known = 0;       // growth the last explained hunt found, bytes/step (0: none)
  uint64_t next_ok = 0;     // `steps` from which a hunt may begin
  uint64_t prev_ns = 0;     // at the previous step end: time, allocated bytes,
  uint64_t prev_alloc = 0;  // and the samples' time and count
  uint64_t prev_cap_ns = 0;
  uint64_t prev_cap_n = 0;
  double cap_ns_avg = 0;  // the samples' time and count, decayed by half each step
  double cap_n_avg = 0;
  // Screening (host hunts in a process running Python): the screening T
  // (0: not screening) and the screens' time and count, as above.
  uint64_t S = 0;
  uint64_t prev_scr_ns = 0;
  uint64_t prev_scr_n = 0;
  double scr_ns_avg = 0;
  double scr_n_avg = 0;
};

struct State {
  uint64_t steps = 0;         // steps ended
  uint64_t warm_until = 0;    // `steps` value that ends the warm-up (0: none)
  uint64_t run_max = 0;       // max step peak so far
  uint64_t last_boost = 0;    // `steps` when the last boost began; 0 = never
  uint32_t boost_left = 0;    // steps of the current boost still to run
  uint64_t resume = 0;        // T to go back to when the boost ends
  uint64_t since_change = 0;  // steps since the schedule's T last changed
  uint64_t sched = 0;         // the schedule's T (the hunt may use a smaller one)
  uint64_t live[kHist] = {};
  uint32_t nlive = 0;  // valid entries (<= kHist); newest at (steps - 1) % kHist
  Hunt hunt;
};

constexpr uint64_t kDevHuntMinRate = uint64_t{1} << 20;  // bytes/step
constexpr uint64_t kDevHuntMinT = uint64_t{64} << 10;
constexpr uint64_t kDevHuntMinSamples = 4;  // device samples are large and few

SpinLock g_prog_lock;  // after g_api_lock in the lock order; never held while pushing
State g_prog;
State g_dev;            // the device schedule (protected by g_prog_lock)
bool g_dev_on = false;  // device sampling is progressive (T_dev > 1)

bool GrowthAlarm(const State& s) {
  if (s.nlive < kHist) return false;
  uint32_t rises = 0;
  uint64_t first = s.live[s.steps % kHist];               // oldest
  uint64_t last = s.live[(s.steps + kHist - 1) % kHist];  // newest
  for (uint32_t i = 1; i < kHist; ++i) {
    uint64_t a = s.live[(s.steps + i - 1) % kHist];
    uint64_t b = s.live[(s.steps + i) % kHist];
    rises += b > a;
  }
  return rises >= kAlarmRises && last > first;
}

// Mann-Kendall z (no tie correction: ties only make it more cautious) and
// the Theil-Sen slope of the newest m step-end values.
struct Trend {
  double z = 0;
  double slope = 0;
};

// The trend of the last m step-end live bytes, less `known` bytes a step
// (the growth an explained hunt found): a rise beyond it.
Trend TrendOf(const Hunt& h, uint64_t steps, uint32_t m, double known = 0) {
  Trend out;
  if (m < 3 || m > h.n) return out;
  double x[kHuntHist];
  for (uint32_t i = 0; i < m; ++i) {
    x[i] = static_cast<double>(h.hist[(steps - m + i) % kHuntHist]) - known * i;
  }
  double slopes[kHuntHist * (kHuntHist - 1) / 2] = {};
  uint32_t k = 0;
  long s = 0;
  for (uint32_t i = 0; i < m; ++i) {
    for (uint32_t j = i + 1; j < m; ++j) {
      s += (x[j] > x[i]) - (x[j] < x[i]);
      slopes[k++] = (x[j] - x[i]) / (j - i);
    }
  }
  std::nth_element(slopes, slopes + k / 2, slopes + k);
  out.slope = slopes[k / 2];
  double var = m * (m - 1.0) * (2.0 * m + 5.0) / 18.0;
  out.z = s > 0 ? (s - 1) / sqrt(var) : (s < 0 ? (s + 1) / sqrt(var) : 0.0);
  return out;
}

uint64_t Pow2Floor(uint64_t v) { return v < 2 ? 1 : uint64_t{1} << (63 - __builtin_clzll(v)); }
uint64_t Pow2Ceil(uint64_t v) { return v < 2 ? 1 : Pow2Floor(v - 1) << 1; }

// The cost of one sample (ns; recorder.h SampleCost): an average over recent steps, which
// leaves out the cold unwinds of start-up; the all-time average before that.
double CaptureCost(const Hunt& h) {
  if (h.cap_n_avg >= 8) return h.cap_ns_avg / h.cap_n_avg;
  uint64_t all_n = g_capture_count.load(std::memory_order_relaxed);
  if (all_n >= 16) {
    return static_cast<double>(g_capture_ns.load(std::memory_order_relaxed)) / all_n;
  }
  return kDefaultCaptureNs;
}

// The cost of one screen (ns): as CaptureCost, for screens.
double ScreenCost(const Hunt& h) {
  if (h.scr_n_avg >= 8) return h.scr_ns_avg / h.scr_n_avg;
  uint64_t all_n = g_screen_count.load(std::memory_order_relaxed);
  if (all_n >= 16) return static_cast<double>(g_screen_ns.load(std::memory_order_relaxed)) / all_n;
  return kDefaultScreenNs;
}

// The first T of a hunt: g/2 (rounded down to a power of two), but not so
// small that sampling would exceed the CPU budget if every sampled byte were
// a sample of its own (da/T samples of the step's da allocated bytes: an
// upper bound), and at most the schedule's T.
uint64_t HuntFirstInterval(const Hunt& h, uint64_t sched, uint64_t dt_ns, uint64_t da,
                           uint64_t min_T, double cost_ns, double budget) {
  uint64_t T = Pow2Floor(h.rate / 2 > min_T ? h.rate / 2 : min_T);
  if (dt_ns > 0) {
    double floor = static_cast<double>(da) * cost_ns / (budget * static_cast<double>(dt_ns));
    if (floor >= static_cast<double>(sched)) return sched;
    uint64_t f = Pow2Ceil(static_cast<uint64_t>(floor) + 1);
    if (f > T) T = f;
  }
  return T < sched ? T : sched;
}

// A hunt's T for the next step, from the measured share of the last step's
// wall time spent on samples: doubled above the budget, halved (down
// to rate/2) below 40 % of it.
uint64_t HuntNextInterval(uint64_t rate, uint64_t T, uint64_t sched, double spent, uint64_t min_T,
                          double budget) {
  const uint64_t target = Pow2Floor(rate / 2 > min_T ? rate / 2 : min_T);
  if (spent > budget) {
    T *= 2;
  } else if (spent < 0.4 * budget && T / 2 >= target) {
    T /= 2;
  }
  return T < sched ? T : sched;
}

void EmitRate(ThreadState& t, uint64_t interval) {
  uint8_t buf[fmt::kMaxEncodedSize<fmt::RateRecord>];
  fmt::RateRecord rec;
  rec.ts = NowRel();
  rec.interval = interval;
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
}

void EmitHunt(ThreadState& t, const fmt::HuntRecord& h) {
  uint8_t buf[fmt::kMaxEncodedSize<fmt::HuntRecord>];
  fmt::HuntRecord rec = h;
  rec.ts = NowRel();
  rec.seq = NextSeq();
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
}

// The T of samples with stacks that the last RATE record gave, and the
// screening T that the last screen-interval COUNTER gave (0: none); both
// protected by g_prog_lock.
uint64_t g_rate_T = 0;
uint64_t g_screen_T = 0;

// What SetInterval changed: a RATE record and a COUNTER are due.
struct IntervalChange {
  bool rate = false;
  bool screen = false;
  uint64_t rate_T = 0;  // the values they give
  uint64_t screen_T = 0;
};

// Sets the sampling T: `T` for samples with stacks (the schedule's, or the
// hunt's), and, while the host hunt screens at a smaller T, the countdown to
// the screening T (recorder.cc ChooseSample thins what it draws back to T).
// g_prog_lock held.
IntervalChange SetInterval(uint64_t T) {
  const Hunt& h = g_prog.hunt;
  const uint64_t screen = h.phase == Hunt::kHunting && h.S != 0 && h.S < T ? h.S : 0;
  g_full_interval.store(screen != 0 ? T : 0, std::memory_order_relaxed);
  g_interval.store(screen != 0 ? screen : T, std::memory_order_relaxed);
  IntervalChange c;
  c.rate = g_rate_T != T;
  c.screen = g_screen_T != screen;
  g_rate_T = c.rate_T = T;
  g_screen_T = c.screen_T = screen;
  return c;
}

// The RATE record and the screening COUNTER (docs/format.md) of a change.
void EmitIntervals(ThreadState& t, const IntervalChange& c) {
  if (!Recording()) return;
  if (c.rate) EmitRate(t, c.rate_T);
  if (!c.screen) return;
  static constexpr char kName[] = "memstep.screen_interval";
  uint8_t buf[fmt::kMaxEncodedSize<fmt::CounterRecord>];
  fmt::CounterRecord rec;
  rec.ts = NowRel();
  rec.seq = NextSeq();
  rec.tid = t.tid;
  rec.name_str = g_dict.InternString(kName, sizeof(kName) - 1);
  rec.value = static_cast<int64_t>(c.screen_T);
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
}

// The finest T a hunt samples at: its screening T, or its T.
uint64_t HuntFinest(const Hunt& h) { return h.S != 0 && h.S < h.T ? h.S : h.T; }

// The schedule's T after this step end (warm-up, boosts, decay).
uint64_t ScheduleStep(State& s, uint64_t peak, bool user_steps, uint64_t steady, uint64_t warm) {
  bool warming = user_steps && s.steps < s.warm_until;
  bool new_peak = !warming && s.run_max > 0 && peak > s.run_max + s.run_max / 20;
  if (peak > s.run_max) s.run_max = peak;
  uint64_t T = s.sched;
  if (warming) {
    T = warm;
  } else if (s.boost_left > 0) {
    // A boost is a short dense window: when it ends, T is what it was.
    --s.boost_left;
    T = s.boost_left > 0 ? warm : s.resume;
  } else if (s.hunt.phase == Hunt::kIdle && (new_peak || GrowthAlarm(s)) &&
             (s.last_boost == 0 || s.steps - s.last_boost >= kBoostGap)) {
    s.last_boost = s.steps;
    s.boost_left = kBoostSteps;
    s.resume = T;
    T = warm;
  } else if (T < steady && s.since_change >= kDecaySteps) {
    T = T * 2 < steady ? T * 2 : steady;
  } else if (T > steady) {
    T = steady;
  }
  if (T != s.sched) s.since_change = 0;
  s.sched = T;
  return T;
}

// What differs between the host hunt and the device hunt: where the tally of
// hunt-born samples lives (sites.cc for the host, cuda_account.cc for the
// device), the smallest growth and T, and how many samples an explanation
// needs.
struct HuntKind {
  uint64_t (*allocated)();  // cumulative bytes allocated (the first T's cost bound)
  bool (*enabled)();        // the hunt may run at all
  uint64_t min_rate;        // bytes/step below which growth is ignored
  uint64_t residual_rate;   // unexplained bytes/step a residual hunt needs
  uint64_t min_T;
  int64_t min_samples;  // new long-lived samples an explanation needs
  void (*checkpoint)();
  void (*on)(bool);
  HuntTally (*tally)(int64_t growth);
  bool (*screens)();  // the hunt may screen (else null)
};

uint64_t HostAllocated() { return g_counters.alloc_bytes.load(std::memory_order_relaxed); }
bool HostHuntEnabled() { return g_features.sites; }
bool Always() { return true; }
HuntTally DeviceTally(int64_t) {
  uint64_t explained = 0, samples = 0;
  CudaHuntTally(&explained, &samples);
  HuntTally t;
  t.explained = static_cast<int64_t>(explained);
  t.samples = static_cast<int64_t>(samples);
  return t;
}

// Screening needs Python frames (its contexts are Python lines).
bool HostScreens() { return g_config.hunt_screen && PyFramesActive(); }

constexpr HuntKind kHostHunt = {
    HostAllocated,   HostHuntEnabled,     kHuntMinRate, kHuntResidualRate, kHuntMinT,
    kHuntMinSamples, SitesHuntCheckpoint, SitesHuntOn,  SitesHuntExplain,  HostScreens};
constexpr HuntKind kDeviceHunt = {CudaResidentAllocated, Always,
                                  kDevHuntMinRate,       kDevHuntMinRate,
                                  kDevHuntMinT,          kDevHuntMinSamples,
                                  CudaHuntCheckpoint,    CudaHuntOn,
                                  DeviceTally,           nullptr};

// The HUNT records of a step end: an end, a begin, or both (a residual hunt
// follows the hunt it continues).
struct HuntRecords {
  fmt::HuntRecord rec[2];
  int n = 0;
  fmt::HuntRecord* Add() { return &rec[n++]; }
};

// The last step as the hunt sees it: its wall time, the bytes allocated in
// it and the share of that time spent on samples.
struct HuntStepCost {
  uint64_t dt = 0;
  uint64_t da = 0;
  double spent = 0;         // samples with stacks
  double spent_screen = 0;  // screens
};

// Records the step's live bytes in the history and measures the step.
HuntStepCost MeasureHuntStep(State& s, uint64_t live, const HuntKind& k) {
  Hunt& h = s.hunt;
  h.hist[(s.steps - 1) % kHuntHist] = live;
  if (h.n < kHuntHist) ++h.n;
  const uint64_t now = NowRel();
  const uint64_t alloc = k.allocated();
  const uint64_t cap_ns = g_capture_ns.load(std::memory_order_relaxed);
  const uint64_t cap_n = g_capture_count.load(std::memory_order_relaxed);
  HuntStepCost c;
  c.dt = h.prev_ns == 0 ? 0 : now - h.prev_ns;
  c.da = alloc - h.prev_alloc;
  const uint64_t dcap_ns = cap_ns - h.prev_cap_ns, dcap_n = cap_n - h.prev_cap_n;
  h.prev_ns = now;
  h.prev_alloc = alloc;
  h.prev_cap_ns = cap_ns;
  h.prev_cap_n = cap_n;
  h.cap_ns_avg = h.cap_ns_avg / 2 + static_cast<double>(dcap_ns);
  h.cap_n_avg = h.cap_n_avg / 2 + static_cast<double>(dcap_n);
  c.spent = c.dt > 0 ? static_cast<double>(dcap_ns) / static_cast<double>(c.dt) : 0;
  const uint64_t scr_ns = g_screen_ns.load(std::memory_order_relaxed);
  const uint64_t scr_n = g_screen_count.load(std::memory_order_relaxed);
  const uint64_t dscr_ns = scr_ns - h.prev_scr_ns, dscr_n = scr_n - h.prev_scr_n;
  h.prev_scr_ns = scr_ns;
  h.prev_scr_n = scr_n;
  h.scr_ns_avg = h.scr_ns_avg / 2 + static_cast<double>(dscr_ns);
  h.scr_n_avg = h.scr_n_avg / 2 + static_cast<double>(dscr_n);
  c.spent_screen = c.dt > 0 ? static_cast<double>(dscr_ns) / static_cast<double>(c.dt) : 0;
  return c;
}

// A hunt's begin record (a hunt's or a residual hunt's): its finest T and
// the rate it hunts.
void AddBeginRecord(const Hunt& h, HuntRecords* out) {
  fmt::HuntRecord* rec = out->Add();
  rec->phase = 0;
  rec->outcome = 0;
  rec->interval = HuntFinest(h);
  rec->rate = h.rate;
}

// Idle: a hunt begins when the live bytes rise significantly and fast
// enough (after the cooldown); its first T, and the begin record.
uint64_t HuntBegin(State& s, const HuntKind& k, const HuntStepCost& c, HuntRecords* out) {
  Hunt& h = s.hunt;
  if (s.steps < h.next_ok || h.n < kHuntMinSteps) return 0;
  Trend tr = TrendOf(h, s.steps, h.n);
  // A growth an explained hunt found, going on at its rate, is not hunted
  // again (its sites are named; a hunt every kHuntCooldown steps would cost
  // an hour-long run a share of its budget for nothing new): only a rise
  // beyond it, by kHuntKnownShare of it at least. Once the growth falls
  // below half of it, the leak has stopped or slowed, and is forgotten.
  if (h.known > 0 && tr.slope < static_cast<double>(h.known) / 2) h.known = 0;
  if (h.known > 0) {
    const Trend beyond = TrendOf(h, s.steps, h.n, static_cast<double>(h.known));
    const double least =
        std::max(static_cast<double>(k.min_rate), kHuntKnownShare * static_cast<double>(h.known));
    if (beyond.z < kHuntZ || beyond.slope < least) return 0;
  }
  if (tr.z < kHuntZ || tr.slope < k.min_rate) return 0;
  h.phase = Hunt::kHunting;
  h.began = s.steps;
  h.rate = h.stack_rate = static_cast<uint64_t>(tr.slope);
  h.residual = false;
  const double budget = g_config.hunt_budget;
  if (k.screens != nullptr && k.screens()) {
    // Screening: screens may spend kScreenShare of the budget.
    h.T = HuntFirstInterval(h, s.sched, c.dt, c.da, k.min_T, CaptureCost(h),
                            budget * (1 - kScreenShare));
    h.S = HuntFirstInterval(h, h.T, c.dt, c.da, k.min_T, ScreenCost(h), budget * kScreenShare);
  } else {
    h.T = HuntFirstInterval(h, s.sched, c.dt, c.da, k.min_T, CaptureCost(h), budget);
    h.S = 0;
  }
  k.checkpoint();
  k.on(true);
  AddBeginRecord(h, out);
  return h.T;
}

// What an explained hunt's sites may leave unexplained, in bytes a step
// since the checkpoint (0: nothing worth a residual hunt). `hidden`: what
// could hide there (the unexplained growth plus kResidualHideZ standard
// deviations of the sites' own sampling noise), which begins a residual
// hunt; else what the point estimate leaves (at least kResidualZ standard
// deviations), which keeps one going. Either counts from k.residual_rate.
double Unexplained(const State& s, const HuntKind& k, int64_t growth, const HuntTally& tally,
                   bool hidden) {
  const uint64_t steps = s.steps - s.hunt.began - kHuntSettle;
  if (steps == 0) return 0;
  const double missing = static_cast<double>(growth - tally.explained);
  const double sd = 1024.0 * sqrt(tally.var_kib2);
  const double v = hidden ? std::max(missing, 0.0) + kResidualHideZ * sd
                          : (missing >= kResidualZ * sd ? missing : 0.0);
  const double rate = v / static_cast<double>(steps);
  return rate >= static_cast<double>(k.residual_rate) ? rate : 0;
}

// An explained hunt goes on as a residual hunt when its sites leave growth
// unexplained (Unexplained): the sites that explain most of a growth need
// not be all of it, and a second, smaller leak beside a larger one has few
// samples at the T the whole growth set. The residual hunt aims at half the
// unexplained rate: its screening T, and its T too where it does not screen
// (screens find a line's leak for a tenth of a stack's cost, and targets
// are sampled with stacks at the screening T), within the same budget. It
// settles, checkpoints and checks as a hunt does, ends "explained" only once
// nothing is Unexplained, gives up after kResidualMaxSteps, and is not
// followed by another. Writes its begin record (after the end record of the
// hunt it follows).
bool ResidualBegins(State& s, const HuntKind& k, double rate, HuntRecords* out) {
  Hunt& h = s.hunt;
  if (h.residual || !(rate > 0)) return false;
  h.residual = true;
  h.rate = static_cast<uint64_t>(rate);
  if (h.S == 0) h.stack_rate = h.rate;
  h.began = s.steps;
  AddBeginRecord(h, out);
  return true;
}

// Hunting: the next T within the budget; after the settling steps and the
// window, the outcome (explained, stopped or gave up) ends the hunt with its
// end record.
uint64_t HuntGoOn(State& s, uint64_t live, const HuntKind& k, const HuntStepCost& c,
                  HuntRecords* out) {
  Hunt& h = s.hunt;
  const double budget = g_config.hunt_budget;
  if (h.S != 0) {
    // Stacks get what the screens leave of the budget (their targets' too:
    // once a target is hot, fewer untargeted samples), screens up to
    // kScreenShare of it.
    const double screens = budget * kScreenShare;
    const double left = budget - std::min(c.spent_screen, screens);
    h.T = HuntNextInterval(h.stack_rate, h.T, s.sched, c.spent, k.min_T, left);
    h.S = HuntNextInterval(h.rate, h.S, h.T, c.spent_screen, k.min_T, screens);
    SitesHuntTargets();
  } else {
    h.T = HuntNextInterval(h.stack_rate, h.T, s.sched, c.spent, k.min_T, budget);
  }
  const uint64_t in_hunt = s.steps - h.began;
  if (in_hunt == kHuntSettle) {
    // Objects that live a few steps (hunt-born, long-lived at a step end
    // or two) have reached their level: growth counts from here.
    k.checkpoint();
    h.chk_live = live;
  }
  if (in_hunt < kHuntSettle + kHuntWindow) return h.T;
  // Since the checkpoint: the exact growth against the growth of the
  // long-lived hunt-born samples.
  const int64_t growth = static_cast<int64_t>(live) - static_cast<int64_t>(h.chk_live);
  const HuntTally tally = k.tally(growth > 0 ? growth : 0);
  const bool covered =
      growth > 0 && tally.samples >= k.min_samples &&
      static_cast<double>(tally.explained) >= kHuntCover * static_cast<double>(growth);
  const double unexplained = covered ? Unexplained(s, k, growth, tally, !h.residual) : 0;
  uint8_t outcome = 0;
  if (covered && (!h.residual || unexplained == 0)) {
    outcome = fmt::kHuntExplained;
  } else if (growth <= 0 ||
             TrendOf(h, s.steps, static_cast<uint32_t>(kHuntWindow + 1)).z < kHuntGoneZ) {
    outcome = fmt::kHuntStopped;
  } else if (in_hunt >= (h.residual ? kResidualMaxSteps : kHuntMaxSteps)) {
    outcome = fmt::kHuntGaveUp;
  }
  if (outcome == 0) return h.T;
  if (outcome == fmt::kHuntExplained) {
    // What it found: the exact growth's robust rate over the recent steps
    // (kHuntHist), which a later hunt must rise beyond (HuntBegin).
    const Trend found = TrendOf(h, s.steps, h.n);
    h.known = found.slope > 0 ? static_cast<uint64_t>(found.slope) : 0;
  } else if (outcome == fmt::kHuntStopped) {
    h.known = 0;
  }
  fmt::HuntRecord* rec = out->Add();
  rec->interval = HuntFinest(h);
  rec->phase = 1;
  rec->outcome = outcome;
  rec->rate = h.rate;
  rec->growth = growth > 0 ? static_cast<uint64_t>(growth) : 0;
  rec->explained = tally.explained > 0 ? static_cast<uint64_t>(tally.explained) : 0;
  rec->samples = static_cast<uint64_t>(tally.samples);
  rec->sites = tally.sites;
  if (outcome == fmt::kHuntExplained && ResidualBegins(s, k, unexplained, out)) return h.T;
  k.on(false);
  h.S = 0;
  h.phase = Hunt::kDecaying;
  h.next_ok = s.steps + kHuntCooldown;
  return h.T;
}

// A hunt's part of a step end (host or device: `k`). Returns the T the hunt
// asks for (0: none) and fills `rec` (phase 0 or 1) when a hunt begins or
// ends. `spent`, the share of the last step's wall time spent capturing
// stacks, counts host and device stacks together.
uint64_t HuntStep(State& s, uint64_t live, const HuntKind& k, HuntRecords* out) {
  const HuntStepCost c = MeasureHuntStep(s, live, k);
  if (!(g_config.hunt_budget > 0) || !k.enabled()) return 0;
  Hunt& h = s.hunt;
  switch (h.phase) {
    case Hunt::kIdle:
      return HuntBegin(s, k, c, out);
    case Hunt::kHunting:
      return HuntGoOn(s, live, k, c, out);
    case Hunt::kDecaying:
      // After a hunt: T doubles back up to the schedule's.
      h.T *= 2;
      if (h.T < s.sched) return h.T;
      h.phase = Hunt::kIdle;
      return 0;
  }
  return 0;
}

// The device schedule's step end (g_prog_lock held): T_dev to set, and a
// HUNT record to write when the device hunt began or ended.
uint64_t DevStepEnd(bool user_steps, HuntRecords* out) {
  State& s = g_dev;
  const uint64_t live = CudaResidentBytes();
  s.live[s.steps % kHist] = live;
  ++s.steps;
  if (s.nlive < kHist) ++s.nlive;
  ++s.since_change;
  uint64_t T = ScheduleStep(s, CudaLastStepPeak(), user_steps, g_features.device_interval,
                            g_features.device_warm_interval);
  uint64_t hunt_T = HuntStep(s, live, kDeviceHunt, out);
  if (hunt_T != 0 && hunt_T < T) T = hunt_T;
  for (int i = 0; i < out->n; ++i) {
    out->rec[i].memory = fmt::kHuntDevice;
    out->rec[i].stack_ns = static_cast<uint64_t>(CaptureCost(g_prog.hunt));
  }
  return T;
}

}  // namespace

void ProgressiveInit() {
  uint64_t steady = g_config.sample_interval;
  if (steady <= 1) g_config.progressive = false;
  if (g_config.warm_interval == 0 || g_config.warm_interval > steady) {
    g_config.warm_interval = steady / 4 > 1 ? steady / 4 : steady;
  }
  g_prog.sched = steady;
  g_interval.store(steady, std::memory_order_relaxed);
  g_rate_T = steady;
  // Device: the same, on T_dev.
  const uint64_t dev = g_features.device_interval;
  if (g_features.device_warm_interval == 0 || g_features.device_warm_interval > dev) {
    g_features.device_warm_interval = dev / 4 > 1 ? dev / 4 : dev;
  }
  g_dev_on = g_config.progressive && dev > 1;
  g_dev.sched = dev;
  CudaSetSampleInterval(dev);
}

void ProgressiveStepsBegin(ThreadState& t) {
  if (!g_config.progressive) return;
  IntervalChange changed;
  {
    SpinLockHolder lock(&g_prog_lock);
    g_prog.warm_until = g_prog.steps + kWarmSteps;
    g_prog.since_change = 0;
    g_prog.sched = g_config.warm_interval;
    uint64_t T = g_prog.sched;
    if (g_prog.hunt.phase != Hunt::kIdle && g_prog.hunt.T < T) T = g_prog.hunt.T;
    changed = SetInterval(T);
    if (g_dev_on) {
      g_dev.warm_until = g_dev.steps + kWarmSteps;
      g_dev.since_change = 0;
      g_dev.sched = g_features.device_warm_interval;
      uint64_t D = g_dev.sched;
      if (g_dev.hunt.phase != Hunt::kIdle && g_dev.hunt.T < D) D = g_dev.hunt.T;
      CudaSetSampleInterval(D);
    }
  }
  EmitIntervals(t, changed);
}

void ProgressiveStepEnd(ThreadState& t, uint64_t live, uint64_t peak, bool user_steps) {
  if (!g_config.progressive) return;
  IntervalChange changed;
  HuntRecords hunts, dev_hunts;
  {
    SpinLockHolder lock(&g_prog_lock);
    State& s = g_prog;
    s.live[s.steps % kHist] = live;
    ++s.steps;
    if (s.nlive < kHist) ++s.nlive;
    ++s.since_change;
    uint64_t T =
        ScheduleStep(s, peak, user_steps, g_config.sample_interval, g_config.warm_interval);
    uint64_t hunt_T = HuntStep(s, live, kHostHunt, &hunts);
    if (hunt_T != 0 && hunt_T < T) T = hunt_T;
    const uint64_t step = g_cur_step.load(std::memory_order_relaxed);
    for (int i = 0; i < hunts.n; ++i) {
      hunts.rec[i].step = step;
      hunts.rec[i].stack_ns = static_cast<uint64_t>(CaptureCost(s.hunt));
    }
    changed = SetInterval(T);
    if (g_dev_on) {
      CudaSetSampleInterval(DevStepEnd(user_steps, &dev_hunts));
      for (int i = 0; i < dev_hunts.n; ++i) dev_hunts.rec[i].step = step;
    }
  }
  // This step's hunt-born samples become long-lived (after HuntStep read
  // the long-lived tallies of this step end).
  SitesHuntStepEnd();
  if (!Recording()) return;
  for (int i = 0; i < hunts.n; ++i) EmitHunt(t, hunts.rec[i]);
  for (int i = 0; i < dev_hunts.n; ++i) EmitHunt(t, dev_hunts.rec[i]);
  EmitIntervals(t, changed);
}

void ProgressiveBoost(ThreadState& t, uint32_t steps) {
  if (!g_config.progressive || steps == 0) return;
  IntervalChange changed;
  {
    SpinLockHolder lock(&g_prog_lock);
    if (g_prog.boost_left == 0) g_prog.resume = g_prog.sched;
    if (steps > g_prog.boost_left) g_prog.boost_left = steps;
    g_prog.sched = g_config.warm_interval;
    uint64_t T = g_prog.sched;
    if (g_prog.hunt.phase != Hunt::kIdle && g_prog.hunt.T < T) T = g_prog.hunt.T;
    changed = SetInterval(T);
    if (g_dev_on) {
      if (g_dev.boost_left == 0) g_dev.resume = g_dev.sched;
      if (steps > g_dev.boost_left) g_dev.boost_left = steps;
      g_dev.sched = g_features.device_warm_interval;
      uint64_t D = g_dev.sched;
      if (g_dev.hunt.phase != Hunt::kIdle && g_dev.hunt.T < D) D = g_dev.hunt.T;
      CudaSetSampleInterval(D);
    }
  }
  EmitIntervals(t, changed);
}

void ProgressiveForkChild() { g_prog_lock.Reset(); }

}  // namespace memstep::preload

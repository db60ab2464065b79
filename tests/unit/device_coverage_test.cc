// Sampled device sites through the whole analysis (issue 9 item 4, device
// side): a planted tensor-block leak must be a LEAK at its site, with a rate
// interval that covers the truth at the stated 95 %, and a leak-free run must
// have no LEAK tensor-block site.
//
// The workload is what a PyTorch training loop on one GPU leaves in a trace
// (tests/gpu/gpu_train.py's `leak` mode, where a real H200 showed the defect:
// the planted 4 MiB/step leak was LEAK in 4 runs of 8, and one LEAK's
// interval excluded the truth): tensor blocks of PyTorch's caching allocator
// (kind tensor_block, every one recorded with its size, only sampled ones with
// a stack) inside cudaMalloc segments that grow as the leak needs room.
// Per step: activations allocated and freed in the step, gradients allocated
// in the step and freed at the next one's start (live at each step end, flat),
// and (leak runs) one 4 MiB block kept forever. Weights before step 0.
//
// Sampling is simulated as the library samples device allocations: a block of
// s bytes is sampled with p = 1 - exp(-(s+1)/T), independently (the sampler's
// exponential gaps over the bytes make the blocks' draws independent), and the
// record carries T. T follows the device schedule of a run that hunts
// (progressive.cc): 2 MiB while warm (20 steps), 4 then 8 MiB (the default
// T_dev), a device hunt at 2 MiB for steps 26-33, then 4 and 8 MiB again.
//
// Stated rates (docs/analysis.md "Intervals of the estimates", docs/testing.md):
// each rate interval covers the truth in 95 % of the seeds; the 4 MiB/step
// leak is LEAK in at least 95 % of the seeds; a site that does not grow is
// LEAK with probability at most kFalseLeakRate. Acceptance bounds come from
// tests/coverage_bound.h (a correct analysis fails each check with
// probability <= 0.1 %); the seeds are fixed, so a run is deterministic.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/analysis/analysis.h"
#include "src/format/format.h"
#include "tests/coverage_bound.h"
#include "tests/unit/test_util.h"
#include "tests/unit/trace_builder.h"

namespace memstep::analysis {
namespace {

namespace f = format;

constexpr uint64_t kMiB = 1024 * 1024;
constexpr int kSteps = 60;
constexpr uint64_t kLeak = 4 * kMiB;
constexpr uint64_t kWeightStack = 1, kActStack = 2, kGradStack = 3, kLeakStack = 4,
                   kSegmentStack = 5, kHistoryStack = 6;

// The device sampling interval in force during step s.
uint64_t DeviceInterval(int s) {
  if (s < 20) return 2 * kMiB;  // warm
  if (s == 20 || s == 34) return 4 * kMiB;
  if (s >= 26 && s < 34) return 2 * kMiB;  // the device hunt
  return 8 * kMiB;
}

struct Workload {
  bool leak = true;
  // A history kept with torch.cat: `history_base` bytes, then
  // `history_growth` more each step, each time in a new block (the old one
  // freed). None when history_growth is 0.
  uint64_t history_base = 16 * kMiB;
  uint64_t history_growth = 0;
};

// One run's trace; `rng` draws which blocks are sampled.
std::vector<uint8_t> BuildTrace(const Workload& w, std::mt19937_64& rng) {
  reader::TraceHeaderInfo info;
  info.pid = 7;
  info.sample_interval = 512 * 1024;
  reader::TraceBuilder b(info);
  for (uint64_t s = 1; s <= 6; ++s) b.Stack(s, {0x4000 * s});
  std::uniform_real_distribution<double> u(0, 1);
  format::Counters host{};
  uint64_t ts = 1;
  uint64_t addr = 0x100000000;
  uint64_t segment_addr = 0x7000000000;
  uint64_t blocks = 0, reserved = 0;
  // A block: sampled with the schedule's p, always recorded.
  auto block = [&](uint64_t stack, uint64_t size, int s) {
    const uint64_t T = DeviceInterval(s);
    const double p = -std::expm1(-(static_cast<double>(size) + 1) / static_cast<double>(T));
    const bool sampled = u(rng) < p;
    const uint64_t a = addr;
    addr += size;
    b.DevAlloc(ts++, sampled ? stack : 0, f::kDevTensorBlock, 0, a, size,
               f::kApiTorchCachingAllocator, 0, s < 0 ? 0 : static_cast<uint64_t>(s), 0, 1, T,
               sampled);
    blocks += size;
    // The caching allocator's segments (exact: p = 1 at these sizes) grow in
    // 20 MiB steps when the blocks need room.
    while (blocks > reserved) {
      b.DevAlloc(ts++, kSegmentStack, f::kDevDevice, 0, segment_addr, 20 * kMiB, f::kApiCudaMalloc);
      segment_addr += 20 * kMiB;
      reserved += 20 * kMiB;
    }
    return a;
  };
  auto free_block = [&](uint64_t a, uint64_t size) {
    b.DevFree(ts++, f::kDevTensorBlock, 0, a, size, f::kApiTorchCachingAllocator);
    blocks -= size;
  };
  for (int k = 0; k < 4; ++k) block(kWeightStack, 64 * kMiB, -1);
  std::vector<uint64_t> grads;
  uint64_t history = 0, history_size = 0;
  for (int s = 0; s < kSteps; ++s) {
    ts = static_cast<uint64_t>(s + 1) * 1000000000;
    b.Step(ts++, static_cast<uint64_t>(s), 0, host);
    for (uint64_t g : grads) free_block(g, 16 * kMiB);  // zero_grad(set_to_none=True)
    grads.clear();
    std::vector<uint64_t> acts;
    for (int k = 0; k < 8; ++k) acts.push_back(block(kActStack, 6 * kMiB, s));
    for (int k = 0; k < 4; ++k) grads.push_back(block(kGradStack, 16 * kMiB, s));
    if (w.leak) block(kLeakStack, kLeak, s);
    if (w.history_growth > 0) {  // hist = torch.cat([hist, x])
      const uint64_t size = w.history_base + static_cast<uint64_t>(s) * w.history_growth;
      const uint64_t a = block(kHistoryStack, size, s);
      if (history != 0) free_block(history, history_size);
      history = a;
      history_size = size;
    }
    for (uint64_t a : acts) free_block(a, 6 * kMiB);
    b.Step(ts++, static_cast<uint64_t>(s), 1, host);
  }
  b.Trailer(ts++, host, true);
  return b.Finish();
}

struct Outcome {
  bool found = false;
  Growth growth;
  bool history_found = false;
  Growth history;  // the replaced history's site
  double live_end = 0, live_end_low = 0, live_end_high = 0;
  int other_leaks = 0;  // tensor-block sites but the planted one that are LEAK
  int tested = 0;       // tensor-block sites the classifier tested (not INSUFFICIENT)
};

// K seeds: `fallback` unless MEMSTEP_COVERAGE_TEST_SEEDS says (to measure).
int Seeds(int fallback) {
  const char* e = getenv("MEMSTEP_COVERAGE_TEST_SEEDS");
  return e != nullptr && atoi(e) > 0 ? atoi(e) : fallback;
}

Outcome AnalyzeSeed(const Workload& w, uint64_t seed) {
  std::mt19937_64 rng(seed);
  testing::TempDir dir;
  EXPECT_TRUE(testing::WriteFile(dir.File("d.trace"), BuildTrace(w, rng)));
  Options options;
  options.symbolize = false;
  absl::StatusOr<Report> r = AnalyzeRun(dir.path(), options);
  EXPECT_TRUE(r.ok()) << r.status();
  Outcome o;
  if (!r.ok()) return o;
  for (const Site& s : r->sites) {
    if (s.kind != SiteKind::kTensorBlock) continue;
    if (s.stack_id == kHistoryStack) {
      o.history_found = true;
      o.history = s.growth;
      continue;
    }
    const bool planted = s.stack_id == kLeakStack;
    if (planted) {
      o.found = true;
      o.growth = s.growth;
      o.live_end = s.live_bytes_end;
      o.live_end_low = s.live_bytes_end_low;
      o.live_end_high = s.live_bytes_end_high;
      continue;
    }
    if (s.growth.cls != GrowthClass::kInsufficient) ++o.tested;
    if (s.growth.cls == GrowthClass::kLeak) ++o.other_leaks;
  }
  return o;
}

// The planted leak: LEAK in >= 95 % of the seeds, its rate interval covering
// 4 MiB/step in 95 % of those, and its live-at-end interval covering the
// truth (60 x 4 MiB) in 95 % of all.
TEST(DeviceCoverageTest, TensorBlockLeakIsNamedWithAnIntervalThatCoversTheTruth) {
  const int kSeeds = Seeds(200);
  int leak = 0, rate_covered = 0, end_covered = 0, other_leaks = 0, tested = 0;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    const Outcome o = AnalyzeSeed(Workload{}, 9000 + static_cast<uint64_t>(seed));
    ASSERT_TRUE(o.found) << "seed " << seed << ": no sample of the planted leak";
    other_leaks += o.other_leaks;
    tested += o.tested;
    const double truth_end = static_cast<double>(kSteps * kLeak);
    end_covered += o.live_end_low <= truth_end && truth_end <= o.live_end_high;
    if (o.growth.cls != GrowthClass::kLeak) {
      std::printf("seed %d: %s (%s)\n", seed, GrowthClassName(o.growth.cls),
                  o.growth.reason.c_str());
      continue;
    }
    ++leak;
    const double truth = static_cast<double>(kLeak);
    const bool covered = o.growth.slope_low <= truth && truth <= o.growth.slope_high;
    rate_covered += covered;
    if (!covered) {
      std::printf("seed %d: rate %.2f MiB/step [%.2f, %.2f] misses 4\n", seed,
                  o.growth.slope / kMiB, o.growth.slope_low / kMiB, o.growth.slope_high / kMiB);
    }
  }
  std::printf("LEAK %d/%d, rate covered %d/%d, live at end covered %d/%d, other LEAK %d of %d\n",
              leak, kSeeds, rate_covered, leak, end_covered, kSeeds, other_leaks, tested);
  EXPECT_GE(leak, testing::MinCovered(kSeeds));
  EXPECT_GE(rate_covered, testing::MinCovered(leak));
  EXPECT_GE(end_covered, testing::MinCovered(kSeeds));
  EXPECT_LE(other_leaks, testing::MaxFalseLeaks(tested));
}

// No leak: no tensor-block site is LEAK beyond the stated false-LEAK rate.
TEST(DeviceCoverageTest, LeakFreeRunHasNoLeakSite) {
  const int kSeeds = Seeds(100);
  int leaks = 0, tested = 0;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    const Outcome o = AnalyzeSeed(Workload{false}, 5000 + static_cast<uint64_t>(seed));
    EXPECT_FALSE(o.found);
    leaks += o.other_leaks;
    tested += o.tested;
  }
  std::printf("false LEAK sites: %d of %d tested\n", leaks, tested);
  EXPECT_GT(tested, 0);
  EXPECT_LE(leaks, testing::MaxFalseLeaks(tested));
}

// A history kept on the device with torch.cat (predictions gathered over an
// epoch, say): each step a larger block replaces the last, so no cohort keeps
// anything and the cohorts' test misses it (NO_TREND, the growth
// UNATTRIBUTED). Its whole live series names it (ClassifyReplacedGrowth),
// each row read as the one block it holds: its Horvitz-Thompson weight s / p
// is about twice its size s where p is about 1/2, and the slope of the
// weights read 15 % low there.
struct HistoryOutcome {
  int seeds = 0, leak = 0, covered = 0, other_leaks = 0, tested = 0;
  std::vector<double> ratio;  // rate / truth, LEAK seeds
  double MedianRatio() {
    if (ratio.empty()) return 0;
    std::nth_element(ratio.begin(), ratio.begin() + ratio.size() / 2, ratio.end());
    return ratio[ratio.size() / 2];
  }
};

HistoryOutcome AnalyzeHistory(uint64_t base, uint64_t growth, int seeds) {
  HistoryOutcome h;
  h.seeds = seeds;
  for (int seed = 1; seed <= seeds; ++seed) {
    Workload w;
    w.leak = false;
    w.history_base = base;
    w.history_growth = growth;
    const Outcome o = AnalyzeSeed(w, 7000 + static_cast<uint64_t>(seed));
    EXPECT_TRUE(o.history_found) << "seed " << seed << ": no sample of the history";
    h.other_leaks += o.other_leaks;
    h.tested += o.tested;
    if (o.history.cls != GrowthClass::kLeak || !o.history.replaced) continue;
    ++h.leak;
    const double truth = static_cast<double>(growth);
    h.covered += o.history.slope_low <= truth && truth <= o.history.slope_high;
    h.ratio.push_back(o.history.slope / truth);
  }
  std::printf(
      "history of %.0f MiB + %.0f KiB/step: LEAK (replaced) %d/%d, rate covered %d/%d, median "
      "rate/truth %.3f, other LEAK %d of %d\n",
      static_cast<double>(base) / kMiB, static_cast<double>(growth) / 1024, h.leak, seeds,
      h.covered, h.leak, h.MedianRatio(), h.other_leaks, h.tested);
  return h;
}

// 16 MiB + 1 MiB a step at T_dev = 8 MiB (p >= 0.86): LEAK in >= 95 % of
// the seeds, the rate interval covering 1 MiB/step in 95 % of those. 4 MiB +
// 64 KiB a step (p about 0.4-0.6: a buffer held at fewer than 3/4 of the
// step ends is not tested, by design, so LEAK is not claimed): where LEAK,
// the interval covers the truth in 95 % (the weights' slope: 61 of 72) and
// the median rate is within 2 % (the weights': 0.85). No other tensor-block
// site LEAK beyond the false-LEAK rate.
TEST(DeviceCoverageTest, AHistoryGrownByReplacementIsALeak) {
  HistoryOutcome dense = AnalyzeHistory(16 * kMiB, kMiB, Seeds(200));
  EXPECT_GE(dense.leak, testing::MinCovered(dense.seeds));
  EXPECT_GE(dense.covered, testing::MinCovered(dense.leak));
  EXPECT_NEAR(dense.MedianRatio(), 1.0, 0.02);
  HistoryOutcome sparse = AnalyzeHistory(4 * kMiB, 64 * 1024, Seeds(200));
  EXPECT_GE(sparse.leak, 50);  // a sample size, not a claim
  EXPECT_GE(sparse.covered, testing::MinCovered(sparse.leak));
  EXPECT_NEAR(sparse.MedianRatio(), 1.0, 0.02);
  EXPECT_LE(dense.other_leaks + sparse.other_leaks,
            testing::MaxFalseLeaks(dense.tested + sparse.tested));
}

}  // namespace
}  // namespace memstep::analysis

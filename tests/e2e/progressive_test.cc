// Progressive sampling end to end: e2e_planted "progressive" leaks a known
// number of bytes per step under the default schedule, and the raw trace must
// show the schedule (dense warm-up, decay to T_steady, a memstep_boost inside
// step kProgBoostAt), every sample stamped with a T that was in force, and an
// unbiased estimate of the leak across the rate changes.
//
// Both runs use T_steady = 64 KiB (MEMSTEP_SAMPLE_INTERVAL; T_warm = 16 KiB)
// rather than the default 512 KiB, so that the 32 MB leak draws ~500 samples
// and a tolerance derived from a one-in-a-million error rate is still tight
// (docs/testing.md).

#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"
#include "src/format/format.h"
#include "src/reader/reader.h"
#include "tests/coverage_bound.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/planted_facts.h"

namespace memstep::e2e {
namespace {

using namespace facts;  // NOLINT

constexpr uint64_t kSteady = 64 << 10;
constexpr uint64_t kWarm = kSteady / 4;

reader::Trace RunProgressive(const TempDir& dir, const std::vector<std::string>& extra_env) {
  std::vector<std::string> env = TracedEnv(dir.path(), kSteady);
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  absl::StatusOr<reader::Trace> t = RunForOneTrace(dir, {PlantedProgram(), "progressive"}, env);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  EXPECT_TRUE(t->lost.empty());
  return *std::move(t);
}

// The leak's samples: blocks of the leak's size that were never freed; their
// Horvitz-Thompson estimate (each weighted by its own T) and their count.
struct LeakSamples {
  double estimate = 0;
  int64_t count = 0;
  std::set<uint64_t> intervals;  // every T seen on a sample
};

double SampleP(double size, uint64_t interval) {
  return interval == 0 ? 1.0 : -std::expm1(-(size + 1) / static_cast<double>(interval));
}

LeakSamples EstimateLeak(const reader::Trace& t) {
  LeakSamples out;
  absl::flat_hash_map<uint64_t, const reader::Event*> live;
  for (const reader::Event& e : t.events) {
    if (e.tag == format::kTagAlloc) {
      live[e.addr] = &e;
      out.intervals.insert(e.interval);
    } else if (e.tag == format::kTagFree) {
      live.erase(e.addr);
    }
  }
  for (const auto& [addr, e] : live) {
    if (e->size != kProgLeakSize) continue;
    out.estimate +=
        static_cast<double>(e->size) / SampleP(static_cast<double>(e->size), e->interval);
    ++out.count;
  }
  return out;
}

// The leak: kN blocks of s = kProgLeakSize bytes, each sampled independently
// with p = 1 - exp(-(s+1)/T) for the T in force (the sampler's gaps are
// exponential, so memoryless).
constexpr int kN = static_cast<int>(kProgSteps) * kProgLeakBlocks;
constexpr double kS = static_cast<double>(kProgLeakSize);
// Stated error rate of each estimate check below: 1e-6.
constexpr double kRate = 1e-6;

TEST(ProgressiveTest, ScheduleIsRecordedAndEstimatesStayUnbiased) {
  TempDir dir;
  // The planted leak would start a leak hunt (hunt_test.cc): off here, so
  // that only the schedule's T values appear.
  reader::Trace t = RunProgressive(dir, {"MEMSTEP_HUNT_BUDGET=0"});
  EXPECT_TRUE(t.hunts.empty());
  EXPECT_EQ(t.header.sample_interval, kSteady);  // dense from the first step marker

  // Step boundaries by step number.
  absl::flat_hash_map<uint64_t, uint64_t> begin_ts, end_ts;
  for (const reader::Event& e : t.events) {
    if (e.tag != format::kTagStep) continue;
    (e.phase == 0 ? begin_ts : end_ts)[e.step] = e.ts;
  }
  ASSERT_EQ(end_ts.size(), static_cast<size_t>(kProgSteps));

  // T_warm at the first step, decay to 2 T_warm, then to T_steady, then the
  // program's boost.
  ASSERT_GE(t.rates.size(), 4u);
  EXPECT_EQ(t.rates[0].interval, kWarm);
  EXPECT_LE(t.rates[0].ts, begin_ts[0] + 1000000);
  EXPECT_EQ(t.rates[1].interval, 2 * kWarm);
  bool steady = false, boosted = false;
  for (const reader::Rate& r : t.rates) {
    steady |= r.interval == kSteady;
    if (r.interval == kWarm && r.ts >= begin_ts[kProgBoostAt] && r.ts <= end_ts[kProgBoostAt]) {
      boosted = steady;  // the boost comes after the decay
    }
  }
  EXPECT_TRUE(steady);
  EXPECT_TRUE(boosted) << "no T_warm rate inside step " << kProgBoostAt;

  // Every sample carries one of the schedule's T values, and warm-up samples
  // the dense one (but the one that ends the gap drawn before the switch).
  std::set<uint64_t> allowed = {0, kWarm, 2 * kWarm, kSteady};
  uint64_t warm_samples = 0, steady_samples = 0, early = 0;
  for (const reader::Event& e : t.events) {
    if (e.tag != format::kTagAlloc) continue;
    EXPECT_TRUE(allowed.count(e.interval)) << e.interval;
    if (e.step < 15 && e.ts > begin_ts[0]) {
      if (e.interval == kWarm) {
        ++warm_samples;
      } else {
        ++early;
      }
    }
    steady_samples += e.interval == kSteady;
  }
  EXPECT_LE(early, 1u);
  EXPECT_GT(warm_samples, 50u);
  EXPECT_GT(steady_samples, 20u);

  // 32 MB leaked, estimated across the rate changes. Each block's term s/p
  // (sampled) or 0 has variance s^2 (1-p)/p and lies within s/p of its mean;
  // both are largest at the sparsest T (T_steady), so with p_min at T_steady
  // the sum has variance <= kN s^2 (1-p_min)/p_min (2.0e12, SD 4.5 %) and
  // Bernstein's inequality bounds |estimate - truth| by 25 % of the truth
  // with probability >= 1 - kRate, with no normal approximation.
  const double truth = kN * kS;
  const double p_min = SampleP(kS, kSteady);
  const double tol =
      testing::BernsteinHalfWidth(kN * kS * kS * (1 - p_min) / p_min, kS / p_min, kRate);
  const LeakSamples leak = EstimateLeak(t);
  printf(
      "progressive: leak estimate %.0f from %lld samples, truth %.0f, tolerance %.0f (%.1f %%)\n",
      leak.estimate, static_cast<long long>(leak.count), truth, tol, 100 * tol / truth);
  EXPECT_LE(std::fabs(leak.estimate - truth), tol) << leak.estimate << " vs " << truth;
  EXPECT_GE(leak.intervals.size(), 3u);
}

TEST(ProgressiveTest, FixedRateWhenTurnedOff) {
  TempDir dir;
  reader::Trace t = RunProgressive(dir, {"MEMSTEP_PROGRESSIVE=0"});
  EXPECT_EQ(t.header.sample_interval, kSteady);
  EXPECT_TRUE(t.rates.empty());
  // One T: the number of sampled leak blocks is exactly Binomial(kN, p)
  // (mean 474); accepted within its two-sided kRate quantiles (kRate / 2 in
  // each tail: [374, 580], -21 % to +22 % of the mean).
  const double p = SampleP(kS, kSteady);
  const int lo = testing::MinCovered(kN, p, kRate / 2);
  const int hi = testing::MaxSuccesses(kN, p, kRate / 2);
  const LeakSamples leak = EstimateLeak(t);
  printf("fixed rate: %lld of %d leak blocks sampled (accept [%d, %d]), estimate %.0f of %.0f\n",
         static_cast<long long>(leak.count), kN, lo, hi, leak.estimate, kN * kS);
  EXPECT_GE(leak.count, lo);
  EXPECT_LE(leak.count, hi);
  for (uint64_t T : leak.intervals) EXPECT_TRUE(T == 0 || T == kSteady) << T;
}

// A thread that allocates little picks up a lower T within one piece of its
// gap (recorder.cc kGapPiece, 32 KiB), not when the gap drawn at the old T
// runs out. The worker allocates 16 KiB a step; at T_steady = 8 MiB its gap
// lasts about 500 steps. The boost's T_warm = 2 KiB for 10 steps then gives
// it about 7 samples a step (32 blocks of 520 B, p = 0.22 each) once its
// 32 KiB piece ends, within two steps: some 55 (a Poisson count under 20
// has probability below 1e-8; measured 52). When the thread finished its
// gap at the old T, 0 or 1 (measured 0).
TEST(ProgressiveTest, AQuietThreadSamplesAtTheBoostedRate) {
  TempDir dir;
  constexpr uint64_t kSteadyQuiet = 8 << 20, kWarmQuiet = 2048;
  std::vector<std::string> env = TracedEnv(dir.path(), kSteadyQuiet);
  env.push_back("MEMSTEP_SAMPLE_WARM=" + std::to_string(kWarmQuiet));
  env.push_back("MEMSTEP_HUNT_BUDGET=0");
  absl::StatusOr<reader::Trace> t = RunForOneTrace(dir, {PlantedProgram(), "quiet-thread"}, env);
  ASSERT_TRUE(t.ok()) << t.status();
  // The schedule reached T_steady before the boost.
  bool steady = false;
  for (const reader::Rate& rate : t->rates) steady |= rate.interval == kSteadyQuiet;
  ASSERT_TRUE(steady);
  uint64_t boosted = 0, before = 0;
  for (const reader::Event& e : t->events) {
    if (e.tag != format::kTagAlloc || e.size != kQuietSize) continue;
    if (e.step >= static_cast<uint64_t>(kQuietBoostAt) &&
        e.step < static_cast<uint64_t>(kQuietBoostAt) + kQuietBoostSteps) {
      boosted += e.interval == kWarmQuiet;
    } else if (e.step >= 150 && e.step < static_cast<uint64_t>(kQuietBoostAt)) {
      ++before;
    }
  }
  printf("quiet thread: %llu samples at T_warm in the %u boosted steps, %llu in the 30 before\n",
         static_cast<unsigned long long>(boosted), kQuietBoostSteps,
         static_cast<unsigned long long>(before));
  EXPECT_GE(boosted, 20u);
}

}  // namespace
}  // namespace memstep::e2e

// Calibration of sampled leak rates to the exact heap series (calibrate.h):
// the issue-3 acceptance number "bytes/step within 10 % of the truth for
// leaks over 200 steps", for the 100 KiB/step leak hidden in 50 MiB/step of
// churn that sampling alone estimates with a ~16 % standard deviation.
//
// Sampling model as in growth_test.cc: n allocations of s bytes in one step
// are recorded Binomial(n, p) times, p = 1 - exp(-(s+1)/T), weight s/p.

#include "src/analysis/calibrate.h"

#include <cmath>
#include <cstdio>
#include <random>

#include "gtest/gtest.h"
#include "tests/coverage_bound.h"

namespace memstep::analysis {
namespace {

constexpr double kT = 512 * 1024;
constexpr double kKiB = 1024;
constexpr double kMiB = 1024 * 1024;
constexpr size_t kWarmup = 20;
constexpr size_t kSteps = 220;  // 200 after warm-up

double P(double size) { return 1 - std::exp(-(size + 1) / kT); }

struct Sim {
  explicit Sim(uint64_t seed) : rng(seed) {
    site.y.assign(kSteps, 0);
    site.end_bytes_by_cohort.assign(kSteps, 0);
    site.end_samples_by_cohort.assign(kSteps, 0);
    exact.y.assign(kSteps, 0);
  }
  double SampledWeight(int64_t n, double size) {
    std::binomial_distribution<int64_t> d(n, P(size));
    const int64_t k = d(rng);
    last_samples = static_cast<double>(k);
    return static_cast<double>(k) * size / P(size);
  }
  // A leak of `per_step` bytes in 1 KiB objects from one site, among 50 MiB
  // of 4 KiB churn from the same site that is freed within one step (5 MiB of
  // it survives one step end). `other_growth` bytes/step leak elsewhere, in
  // objects too small and spread to be classified (exact series only). A
  // data batch of random size (0..8 MiB) is live at every step end.
  void Run(double per_step, double other_growth) {
    std::uniform_real_distribution<double> batch(0, 8 * kMiB);
    double leaked = 0;
    for (size_t r = 0; r < kSteps; ++r) {
      const double w = SampledWeight(static_cast<int64_t>(per_step / kKiB), kKiB);
      for (size_t k = r + 1; k < kSteps; ++k) site.y[k] += w;
      site.end_bytes_by_cohort[r] += w;
      site.end_samples_by_cohort[r] += last_samples;
      const double survivors = SampledWeight(static_cast<int64_t>(5 * kMiB / (4 * kKiB)), 4 * kKiB);
      if (r + 1 < kSteps) site.y[r + 1] += survivors;
      leaked += per_step + other_growth;
      exact.y[r] = 300 * kMiB + leaked + 5 * kMiB + batch(rng);
    }
  }
  std::mt19937_64 rng;
  double last_samples = 0;
  GrowthInput site, exact;
};

Growth ExactGrowth(const GrowthInput& in) {
  GrowthOptions o;  // the exact series' bounds are 16x smaller (analysis.cc)
  o.min_rate /= 16;
  o.min_window_growth /= 16;
  return ClassifyGrowth(in, kWarmup, o);
}

// One seed's run: a leak of `truth` bytes/step at the site and `elsewhere`
// bytes/step in no site; the exact series and the site, classified.
struct Seed {
  Growth exact, site;
};
Seed RunSeed(uint64_t seed, double truth, double elsewhere) {
  Sim sim(seed);
  sim.Run(truth, elsewhere);
  return {ExactGrowth(sim.exact), ClassifyGrowth(sim.site, kWarmup)};
}

TEST(CalibrateTest, SmallLeakRateWithinTenPercentOverTwoHundredSteps) {
  const double truth = 100 * kKiB;
  int leak = 0, sampled_within = 0, within = 0, applied = 0, covered = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    Sim sim(seed);
    sim.Run(truth, 0);
    Growth exact = ExactGrowth(sim.exact);
    Growth site = ClassifyGrowth(sim.site, kWarmup);
    if (site.cls != GrowthClass::kLeak) continue;
    ++leak;
    sampled_within += std::fabs(site.slope / truth - 1) <= 0.10;
    CalibrationResult c = CalibrateLeakRates(exact, {&site});
    applied += c.applied;
    within += std::fabs(site.slope / truth - 1) <= 0.10;
    if (c.applied) {
      EXPECT_TRUE(site.calibrated);
      covered += site.slope_low <= truth && truth <= site.slope_high;
    }
  }
  printf(
      "100 KiB/step leak, 200 steps: LEAK %d, sampled rate within 10%% %d, calibrated %d, "
      "within 10%% after calibration %d, CI covers the truth %d (of 100 seeds)\n",
      leak, sampled_within, applied, within, covered);
  EXPECT_GE(leak, 95);
  EXPECT_GE(within, 95);
  // A 95 % interval, over the calibrated seeds: the binomial bound (a correct
  // interval fails it with probability <= 0.1 %, tests/coverage_bound.h).
  EXPECT_GE(covered, memstep::testing::MinCovered(applied));
}

TEST(CalibrateTest, GrowthElsewhereIsNotAttributedToTheLeakSite) {
  const double truth = 100 * kKiB;
  int applied = 0, leak = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    auto [exact, site] = RunSeed(seed, truth, 400 * kKiB);
    if (site.cls != GrowthClass::kLeak) continue;
    ++leak;
    const double before = site.slope;
    CalibrationResult c = CalibrateLeakRates(exact, {&site});
    applied += c.applied;
    if (!c.applied) {
      EXPECT_FALSE(site.calibrated);
      EXPECT_EQ(site.slope, before);
    }
  }
  printf("100 KiB/step leak plus 400 KiB/step elsewhere: calibrated in %d of %d\n", applied, leak);
  EXPECT_GE(leak, 95);
  EXPECT_LE(applied, 2);
}

// Growth elsewhere under the site's own noise (20 KiB/step beside the 100
// KiB/step leak, which the site knows to ~16 %): the calibration cannot tell
// it from nothing and applies, and the site's interval must still hold its
// own 100 KiB/step. With the exact series' interval alone (around 120) it
// held it in none of the calibrated seeds; with the site's own lower bound
// kept, as many as the binomial bound for 95 % requires.
TEST(CalibrateTest, GrowthElsewhereUnderTheSitesNoiseStaysInItsInterval) {
  const double truth = 100 * kKiB;
  int applied = 0, covered = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    auto [exact, site] = RunSeed(seed, truth, 20 * kKiB);
    if (site.cls != GrowthClass::kLeak) continue;
    if (!CalibrateLeakRates(exact, {&site}).applied) continue;
    ++applied;
    covered += site.slope_low <= truth && truth <= site.slope_high;
    EXPECT_EQ(site.slope_high, exact.slope_high);
  }
  printf("100 KiB/step leak plus 20 KiB/step elsewhere: calibrated %d of 100, CI covers %d\n",
         applied, covered);
  EXPECT_GE(applied, 50);  // the premise: a difference the test cannot see
  EXPECT_GE(covered, memstep::testing::MinCovered(applied));
}

TEST(CalibrateTest, SeveralLeakSitesKeepTheirSharesAndSumToTheExactSlope) {
  Growth exact;
  exact.cls = GrowthClass::kLeak;
  exact.slope = 400 * kKiB;
  exact.slope_low = 398 * kKiB;
  exact.slope_high = 402 * kKiB;
  Growth a, b, flat;
  a.cls = b.cls = GrowthClass::kLeak;
  a.slope = 330 * kKiB, a.slope_low = 280 * kKiB, a.slope_high = 380 * kKiB;
  b.slope = 110 * kKiB, b.slope_low = 80 * kKiB, b.slope_high = 140 * kKiB;
  flat.cls = GrowthClass::kNoTrend;
  flat.slope = 50 * kKiB;
  CalibrationResult c = CalibrateLeakRates(exact, {&a, &flat, &b});
  ASSERT_TRUE(c.applied);
  EXPECT_NEAR(a.slope + b.slope, exact.slope, 1e-6);
  EXPECT_NEAR(a.slope / b.slope, 3.0, 1e-9);
  EXPECT_DOUBLE_EQ(a.sampled_slope, 330 * kKiB);
  EXPECT_FALSE(flat.calibrated);
  EXPECT_EQ(flat.slope, 50 * kKiB);
}

// The rate tested and rescaled is the one the report gives, the cohorts'
// inverse-variance mean (Growth::slope), not the plain sum of the window's
// cohorts over the window: for a caller line that a screening hunt
// targeted late (a held-out PyTorch loop keeping a record a step), that
// sum read 635 B/step against a rate of 1,659 [1,240, 2,213] and the exact
// heap's 1,683, and the calibration was refused.
TEST(CalibrateTest, TheRateTestedIsTheReportedOne) {
  Growth exact;
  exact.cls = GrowthClass::kLeak;
  exact.slope = 1683, exact.slope_low = 1376, exact.slope_high = 1984;
  Growth line;
  line.cls = GrowthClass::kLeak;
  line.slope = 1659, line.slope_low = 1240, line.slope_high = 2213;
  line.window = 60;
  line.window_bytes = 635.0 * 60;
  line.window_samples = 52;
  line.window_effective_samples = 57;
  CalibrationResult c = CalibrateLeakRates(exact, {&line});
  ASSERT_TRUE(c.applied);
  EXPECT_DOUBLE_EQ(c.sampled_sum, 1659);
  EXPECT_DOUBLE_EQ(line.sampled_slope, 1659);
  EXPECT_EQ(line.slope, 1683);
}

TEST(CalibrateTest, NothingWithoutAnExactLeak) {
  Growth exact;
  exact.cls = GrowthClass::kNoTrend;
  Growth a;
  a.cls = GrowthClass::kLeak;
  a.slope = 100;
  EXPECT_FALSE(CalibrateLeakRates(exact, {&a}).applied);
  EXPECT_FALSE(a.calibrated);
}

}  // namespace
}  // namespace memstep::analysis

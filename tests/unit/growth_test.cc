// Acceptance tests of the growth classifier (issue 3; research note 6.11
// test 3) on synthetic workloads sampled like the profiler samples.
//
// Sampling model: every allocation of s bytes is recorded independently with
// p = 1 - exp(-(s+1)/T) and weighs s/p (Horvitz-Thompson). For n allocations
// of one size in one step, the number recorded is therefore exactly
// Binomial(n, p): the tests draw that count instead of n Bernoulli trials,
// which is the same distribution and keeps 100 seeds within milliseconds.

#include "src/analysis/growth.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/analysis/parallel.h"
#include "src/analysis/step_series.h"
#include "src/analysis/trend.h"
#include "tests/coverage_bound.h"

namespace memstep::analysis {
namespace {

constexpr double kT = 512 * 1024;
constexpr double kKiB = 1024;
constexpr double kMiB = 1024 * 1024;

double P(double size) { return 1 - std::exp(-(size + 1) / kT); }

// One call site's sampled history as the classifier sees it: y[k] = the
// estimated bytes live at the end of step k that were allocated before step
// k began (the long-lived part; docs/analysis.md), and the cohorts live at
// the end of the run.
class SiteSim {
 public:
  SiteSim(size_t steps, uint64_t seed) : rng_(seed), in_{} {
    in_.y.assign(steps, 0);
    in_.end_bytes_by_cohort.assign(steps, 0);
    in_.end_samples_by_cohort.assign(steps, 0);
  }
  // Draws how many of `n` allocations of `size` bytes are sampled.
  int64_t Sampled(int64_t n, double size) {
    if (n <= 0) return 0;
    std::binomial_distribution<int64_t> d(n, P(size));
    return d(rng_);
  }
  // n objects of `size` allocated in `row`, live until the end of the run.
  void Keep(size_t row, int64_t n, double size) {
    const int64_t k = Sampled(n, size);
    const double w = static_cast<double>(k) * size / P(size);
    for (size_t r = row + 1; r < in_.y.size(); ++r) in_.y[r] += w;
    in_.end_bytes_by_cohort[row] += w;
    in_.end_samples_by_cohort[row] += static_cast<double>(k);
  }
  // n objects allocated in `row` and freed during row `until` (before its end).
  void Transient(size_t row, size_t until, int64_t n, double size) {
    const double w = static_cast<double>(Sampled(n, size)) * size / P(size);
    for (size_t r = row + 1; r < until && r < in_.y.size(); ++r) in_.y[r] += w;
  }
  // Adds one recorded object (sampled already) live over [row, until).
  void AddSampled(size_t row, size_t until, double weight) {
    for (size_t r = row + 1; r < until && r < in_.y.size(); ++r) in_.y[r] += weight;
    if (until >= in_.y.size()) {
      in_.end_bytes_by_cohort[row] += weight;
      in_.end_samples_by_cohort[row] += 1;
    }
  }
  std::mt19937_64& rng() { return rng_; }
  const GrowthInput& input() const { return in_; }

 private:
  std::mt19937_64 rng_;
  GrowthInput in_;
};

// (a) 100 KiB/step of 1 KiB objects leaked, hidden in 50 MiB/step of 4 KiB
// churn from the same site: `survivors` (default 5 MiB) live until the
// step after next; the rest is freed, half within its step and half during
// the next step. The survivors live one step longer than the others and so count as long-lived at
// one step end (sampling noise: SD ~ sqrt(survivors x T) = 1.6 MiB per step end against 100
// KiB/step).
GrowthInput LeakInChurn(uint64_t seed, size_t steps, double leak_per_step = 100 * kKiB,
                        double survivors = 5 * kMiB) {
  SiteSim sim(steps, seed);
  const double churn = 50 * kMiB, size = 4 * kKiB;
  for (size_t r = 0; r < steps; ++r) {
    sim.Keep(r, static_cast<int64_t>(leak_per_step / kKiB), kKiB);
    const int64_t short_lived = static_cast<int64_t>((churn - survivors) / 2 / size);
    sim.Transient(r, r, short_lived, size);
    sim.Transient(r, r + 1, short_lived, size);
    sim.Transient(r, r + 2, static_cast<int64_t>(survivors / size), size);
  }
  return sim.input();
}

// (b) an LRU cache of 500 MiB filled at 2 MiB/step with 64 KiB entries; once
// full, every insertion evicts the oldest entry. 400 steps.
GrowthInput Cache(uint64_t seed) {
  const size_t steps = 400;
  SiteSim sim(steps, seed);
  const double size = 64 * kKiB;
  const size_t capacity = static_cast<size_t>(500 * kMiB / size);
  std::bernoulli_distribution sampled(P(size));
  std::deque<std::pair<size_t, bool>> entries;  // row inserted, sampled
  std::vector<std::pair<size_t, size_t>> lifetimes;
  for (size_t r = 0; r < steps; ++r) {
    for (int i = 0; i < 32; ++i) {
      if (entries.size() == capacity) {
        auto [row, s] = entries.front();
        entries.pop_front();
        if (s) lifetimes.emplace_back(row, r);
      }
      entries.emplace_back(r, sampled(sim.rng()));
    }
  }
  for (auto [row, s] : entries) {
    if (s) lifetimes.emplace_back(row, steps);
  }
  for (auto [row, until] : lifetimes) sim.AddSampled(row, until, size / P(size));
  return sim.input();
}

// (c) 500 MiB of 256 KiB buffers allocated over steps 0-9, kept; 20 MiB/step
// of churn throughout. 150 steps.
GrowthInput Warmup(uint64_t seed) {
  const size_t steps = 150;
  SiteSim sim(steps, seed);
  for (size_t r = 0; r < steps; ++r) {
    if (r < 10) sim.Keep(r, 200, 256 * kKiB);
    sim.Transient(r, r + 2, 5120, 4 * kKiB);
  }
  return sim.input();
}

// (d) churn with no trend: 30-70 MiB of 4 KiB objects per step, each living
// two steps (so long-lived at one step end). 150 steps.
GrowthInput Churn(uint64_t seed) {
  const size_t steps = 150;
  SiteSim sim(steps, seed);
  std::uniform_int_distribution<int64_t> mib(30, 70);
  for (size_t r = 0; r < steps; ++r) sim.Transient(r, r + 2, mib(sim.rng()) * 256, 4 * kKiB);
  return sim.input();
}

TEST(GrowthTest, LeakInChurnIsLeakWithin100StepsAfterWarmup) {
  int leaks = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    GrowthInput in = LeakInChurn(seed, 120);
    Growth g = ClassifyGrowth(in, 20);
    EXPECT_EQ(g.window, 100u);
    leaks += g.cls == GrowthClass::kLeak;
    if (g.cls != GrowthClass::kLeak) {
      TrendResult t = TrendTest(std::vector<double>(in.y.begin() + 20, in.y.end()));
      printf("seed %d: %s (%s) hamed-rao factor %.2f\n", static_cast<int>(seed),
             GrowthClassName(g.cls), g.reason.c_str(), t.hamed_rao);
    }
  }
  printf("leak in churn: %d of 100 seeds LEAK at 100 post-warm-up steps\n", leaks);
  EXPECT_GE(leaks, 95);
}

// The harsh variant: all 50 MiB of churn outlive one step boundary (SD 5 MiB
// per step end against 10 MiB of leak over the window). Power is lower; the
// rate is reported, and at 200 post-warm-up steps it is back above 95 %.
TEST(GrowthTest, LeakInHeavyLongLivedChurn) {
  int at100 = 0, at200 = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    at100 +=
        ClassifyGrowth(LeakInChurn(seed, 120, 100 * kKiB, 50 * kMiB), 20).cls == GrowthClass::kLeak;
    at200 +=
        ClassifyGrowth(LeakInChurn(seed, 220, 100 * kKiB, 50 * kMiB), 20).cls == GrowthClass::kLeak;
  }
  printf("heavy churn: LEAK in %d of 100 seeds at 100 steps, %d at 200 steps\n", at100, at200);
  // Stated rates (docs/testing.md): LEAK at 100 steps in 92 % of seeds
  // (measured 1,890 of 2,000, 94.5 %; its 99.9 % lower confidence bound is
  // 92.8 %), at 200 steps in 99 % (measured 2,000 of 2,000). Each floor is
  // the binomial bound: a false failure in <= 1e-3 over fresh seeds.
  EXPECT_GE(at100, testing::MinCovered(100, 0.92));  // 83
  EXPECT_GE(at200, testing::MinCovered(100, 0.99));  // 95
}

TEST(GrowthTest, CacheIsBoundedGrowthNotLeak) {
  int leaks = 0, bounded = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    Growth g = ClassifyGrowth(Cache(seed), 20);
    leaks += g.cls == GrowthClass::kLeak;
    bounded += g.cls == GrowthClass::kBoundedGrowth;
  }
  printf("cache: %d BOUNDED_GROWTH, %d LEAK of 100 seeds\n", bounded, leaks);
  EXPECT_LT(leaks, 1);
  EXPECT_GE(bounded, 95);
}

// Exact series of caches emptied to their floor now and then (a sawtooth,
// rising by 5-15 KiB on 70 % of the steps, so that the median step is not
// the mean one), running a whole period before the window, over every window
// length the classifier uses: emptied every P steps (P up to twice the
// window, 8 phases each), or when full (capacities of 4 to 160 steps of
// growth). TrendTestExact never sets their falls aside as level shifts
// (docs/analysis.md "Level shifts": the fall of a cache emptied when full
// undoes at least half the growth of any window that holds it, a timed one
// nearly so), and none whose window holds three falls or more (two whole
// periods) is LEAK.
TEST(GrowthTest, CachesEmptiedNowAndThenAreNeverLevelShifts) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> step(5 * kKiB, 15 * kKiB);
  std::bernoulli_distribution inserts(0.7);  // a step that adds nothing, 30 %
  int series = 0, set_aside = 0, leaks = 0, tested = 0;
  for (size_t n : {30, 57, 100, 256}) {
    for (bool when_full : {false, true}) {
      for (size_t period = 2; period <= 2 * n; period += period < 40 ? 1 : 7) {
        for (size_t phase = 0; phase < period; phase += std::max<size_t>(1, period / 8)) {
          GrowthInput in;
          const double capacity = static_cast<double>(period) * 7 * kKiB;
          double level = 0;
          size_t falls = 0;
          for (size_t r = 0; r < n + 3 * period; ++r) {
            const bool fall = when_full ? level >= capacity : (r + phase) % period == 0;
            if (fall) {
              level = 0;
              falls += r >= 3 * period;
            } else if (inserts(rng)) {
              level += step(rng);
            }
            if (r >= 3 * period) in.y.push_back(64 * kMiB + level);
          }
          GrowthOptions o;
          o.min_rate = 512;  // the exact series' bounds (analysis.cc)
          o.min_window_growth = 32 * kKiB;
          const Growth g = ClassifyGrowth(in, 0, o);
          ++series;
          set_aside += g.level_shifts > 0;
          EXPECT_EQ(TrendTestExact(in.y).level_shifts, 0u)
              << "n " << n << " period " << period << " phase " << phase;
          if (falls >= 3) {
            ++tested;
            leaks += g.cls == GrowthClass::kLeak;
            EXPECT_NE(g.cls, GrowthClass::kLeak)
                << "n " << n << " period " << period << ": " << g.reason;
          }
        }
      }
    }
  }
  printf(
      "caches emptied now and then: %d series, level shifts set aside in %d; LEAK in %d of the "
      "%d with three falls or more\n",
      series, set_aside, leaks, tested);
  EXPECT_EQ(set_aside, 0);
}

// An exact heap series from its first value and steps, classified with
// the exact series' bounds (analysis.cc); sets `in`.
template <size_t N>
Growth ClassifyExactDeltas(double first, const double (&deltas)[N], GrowthInput* in) {
  in->y = {first};
  for (double d : deltas) in->y.push_back(in->y.back() + d);
  GrowthOptions o;
  o.min_rate = 512;
  o.min_window_growth = 32 * kKiB;
  return ClassifyGrowth(*in, 0, o);
}

// A steady leak with one collection mid-run: the exact heap's step-end
// changes of a real run (CPython 3.11 under memstep: 48 small dicts kept a
// step, 20 objects in reference cycles a step left to the collector, which is
// disabled until one gc.collect() after step 29; the first row is the
// interpreter's start-up). TrendTest read its rate's interval as reaching 0
// (NO_TREND); with the two jumps set aside as level shifts it is LEAK, at the
// step between them, with an interval that also holds the net rate.
TEST(GrowthTest, OneCollectionMidRunLeavesTheHeapLeak) {
  constexpr double kDeltas[] = {
      149440, 11456, 11552, 11680, 11456, 11488,  11512, 11592, 11648, 11712, 11136, 11776,
      11136,  11832, 11936, 11144, 12024, 11136,  11136, 12168, 11128, 12296, 11136, 11136,
      12408,  11136, 11144, 11128, 12584, -55368, 11136, 11144, 12752, 11136, 11144, 11128,
      12968,  11144, 11136, 11128, 11144, 13176,  11128, 11144, 11128, 11144, 13448, 11136,
      11128,  11144, 11128, 11136, 13728, 11136,  11136, 11136, 11144, 11128};
  GrowthInput in;
  const Growth g = ClassifyExactDeltas(6846976, kDeltas, &in);
  const size_t n = in.y.size();
  const TrendResult plain = TrendTest(in.y);
  printf("one collection mid-run: %s %.0f B/step [%.0f, %.0f] (%s); TrendTest %.0f [%.0f, %.0f]\n",
         GrowthClassName(g.cls), g.slope, g.slope_low, g.slope_high, g.reason.c_str(), plain.slope,
         plain.ci_low, plain.ci_high);
  EXPECT_EQ(g.cls, GrowthClass::kLeak) << g.reason;
  EXPECT_EQ(g.level_shifts, 2u) << g.reason;
  EXPECT_LE(plain.ci_low, 0);  // the interval before: reaches 0
  EXPECT_NE(g.reason.find("2 level shifts"), std::string::npos) << g.reason;
  const double net = (in.y.back() - in.y.front()) / static_cast<double>(n - 1);
  EXPECT_GE(g.slope_high, net);
  EXPECT_GT(g.slope_low, 10 * kKiB);
  EXPECT_LE(g.slope_low, g.slope);
  EXPECT_GE(g.slope_high, g.slope);
}

// A set that gains 150 tuples a step (pip's CPython 3.11 under memstep, the
// held-out matrix's "set"): its exact heap rises 9.7 KiB in most steps, its
// table quadruples twice in the window (+108 KiB, +403 KiB), and something
// else frees 107 KiB once. Four jumps are more than the levels' test sets
// aside and read NO_TREND [-97 KiB, 403 KiB]; as a pile with its one-off
// rises and its one-off fall set aside, it is LEAK at its regular rate, the
// interval holding the net rate with the doublings.
TEST(GrowthTest, ASetGrowingEveryStepWithTableDoublingsAndAFallIsALeak) {
  constexpr double kDeltas[] = {18064, 9888, 34448,  9856, 9760, 9904, 9696,   9808, 108000, 9632,
                                9632,  9680, 9632,   9760, 9728, 9648, 9712,   9648, 9648,   9664,
                                9600,  9648, 9680,   9616, 9760, 9616, -97368, 9936, 9824,   9808,
                                9776,  9648, 402832, 9664, 9760, 9616, 9696,   9760, 9680,   9744,
                                9648,  9664, 9728,   9648, 9760, 9760, 9792,   9520, 9760,   9680,
                                9728,  9680, 9808,   9680, 9744, 9584, 9744,   9712, 9632};
  GrowthInput in;
  const Growth g = ClassifyExactDeltas(209801344, kDeltas, &in);
  const size_t n = in.y.size();
  printf("a growing set: %s %.0f B/step [%.0f, %.0f] (%s)\n", GrowthClassName(g.cls), g.slope,
         g.slope_low, g.slope_high, g.reason.c_str());
  EXPECT_EQ(g.cls, GrowthClass::kLeak) << g.reason;
  EXPECT_EQ(g.level_shifts, 3u) << g.reason;  // two doublings, one fall
  const double net = (in.y.back() - in.y.front()) / static_cast<double>(n - 1);
  EXPECT_GE(g.slope_high, net);
  EXPECT_GT(g.slope_low, 9 * kKiB);
  EXPECT_NEAR(g.slope, 10302, 50);  // the mean of the other steps
}

TEST(GrowthTest, WarmupAllocationIsWarmupOnly) {
  int leaks = 0, warm = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    Growth g = ClassifyGrowth(Warmup(seed), 20);
    leaks += g.cls == GrowthClass::kLeak;
    warm += g.cls == GrowthClass::kWarmupOnly;
  }
  printf("warm-up: %d WARMUP_ONLY, %d LEAK of 100 seeds\n", warm, leaks);
  EXPECT_LT(leaks, 1);
  EXPECT_GE(warm, 95);
}

// A leak hunt's history (docs/analysis.md "Leak hunt"): T = 128 KiB for 20
// warm-up steps, 4 KiB in rows 8-23 (the hunt), 512 KiB after. Per step
// 10 KiB leaked in 512 B objects and 64 x 8 KiB kept for two steps (long-
// lived churn). With the exact heap LEAK (widen_sparse_halves) and the exact
// series' bounds, the leak is LEAK in >= 95 of 100 seeds, its interval
// covers 10 KiB/step in >= 90; the churn is never LEAK; and a cache that
// fills at 10 KiB/step until row 30 and then stops is not LEAK when the
// exact heap is not (no widening).
struct HuntSim {
  explicit HuntSim(uint64_t seed) : rng(seed) {
    for (size_t r = 0; r < kRows; ++r) {
      T[r] = r >= 8 && r < 24 ? 4 * kKiB : r < 20 ? 128 * kKiB : 512 * kKiB;
    }
  }
  static constexpr size_t kRows = 60;
  std::mt19937_64 rng;
  double T[kRows];
  // n objects of `size` born in `row`, freed during row `until` (kRows: never).
  void Add(GrowthInput& in, size_t row, int64_t n, double size, size_t until) {
    const double p = 1 - std::exp(-(size + 1) / T[row]);
    std::binomial_distribution<int64_t> d(n, p);
    const int64_t k = d(rng);
    const double w = size / p;
    for (size_t r = row + 1; r < until && r < kRows; ++r) in.y[r] += k * w;
    if (until >= kRows) {
      in.end_bytes_by_cohort[row] += k * w;
      in.end_samples_by_cohort[row] += static_cast<double>(k);
      in.end_var_by_cohort[row] += k * w * w * (1 - p);
    }
  }
  GrowthInput Empty() const {
    GrowthInput in;
    in.y.assign(kRows, 0);
    in.end_bytes_by_cohort.assign(kRows, 0);
    in.end_samples_by_cohort.assign(kRows, 0);
    in.end_var_by_cohort.assign(kRows, 0);
    in.interval_by_row.assign(T, T + kRows);
    return in;
  }
};

GrowthOptions ExactBounds(bool widen) {
  GrowthOptions o;
  o.min_rate = 1024;
  o.min_window_growth = 64 * 1024;
  o.widen_sparse_halves = widen;
  return o;
}

TEST(GrowthTest, HuntedLeakWithSparseHalvesIsLeak) {
  int leaks = 0, covered = 0, churn_leaks = 0, cache_leaks = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    HuntSim sim(seed);
    GrowthInput leak = sim.Empty(), churn = sim.Empty(), cache = sim.Empty();
    for (size_t r = 0; r < HuntSim::kRows; ++r) {
      sim.Add(leak, r, 20, 512, HuntSim::kRows);
      sim.Add(churn, r, 64, 8192, r + 2);
      if (r < 30) sim.Add(cache, r, 20, 512, HuntSim::kRows);
    }
    Growth g = ClassifyGrowth(leak, 0, ExactBounds(true));
    leaks += g.cls == GrowthClass::kLeak;
    covered += g.cls == GrowthClass::kLeak && g.slope_low <= 10240 && 10240 <= g.slope_high;
    churn_leaks += ClassifyGrowth(churn, 0, ExactBounds(true)).cls == GrowthClass::kLeak;
    cache_leaks += ClassifyGrowth(cache, 0, ExactBounds(false)).cls == GrowthClass::kLeak;
  }
  printf(
      "hunted leak: LEAK %d, interval covers the truth %d; churn LEAK %d; stopped cache "
      "LEAK %d (of 100 seeds)\n",
      leaks, covered, churn_leaks, cache_leaks);
  EXPECT_GE(leaks, 95);
  // A 95 % interval: the binomial bound over the LEAK seeds (a correct
  // interval fails it with probability <= 0.1 %, tests/coverage_bound.h).
  EXPECT_GE(covered, testing::MinCovered(leaks));
  // Churn that does not grow: the stated false-LEAK rate, 1e-3 per site
  // (tests/coverage_bound.h; measured 0 of 2,000 seeds): at most
  // MaxFalseLeaks(100) = 2 (P < 1e-3). A stopped cache: LEAK in at most 1 %
  // of seeds (measured 0 of 2,000): at most MaxSuccesses(100, 0.01) = 5.
  EXPECT_LE(churn_leaks, testing::MaxFalseLeaks(100, 1e-3));
  EXPECT_LE(cache_leaks, testing::MaxSuccesses(100, 0.01, 1e-3));
}

// A hunt that targeted the site (docs/analysis.md "Screening Python lines")
// and ended when the site explained the growth: T = 128 KiB for 8 rows,
// 2 KiB in rows 8-35, 512 KiB after. One 6.5 KiB object a step is kept:
// after the hunt it draws a sample every 80 steps, so the second half's
// series is flat over rows 36-59 in most seeds and its inverse-variance rate
// rests on rows 30-35. A GRU loop on pip torch read BOUNDED_GROWTH ("slowing:
// second half 0.0 KiB/step vs first half 7.4 KiB/step") in 3 of 30 runs.
// Slowing must be shown by the sparse rows themselves: LEAK in >= 95 % of
// seeds. A site that stops at row 30, whose dense rows 30-35 show the stop
// before T rises, is still BOUNDED_GROWTH (LEAK in at most 1 % of seeds).
TEST(GrowthTest, HuntedLeakWhoseLastRowsAreSparseIsLeak) {
  constexpr size_t kRows = 60;
  int leaks = 0, stopped_leaks = 0;
  const double obj = 6656;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    auto empty = [] {
      GrowthInput in;
      in.y.assign(kRows, 0);
      in.end_bytes_by_cohort.assign(kRows, 0);
      in.end_samples_by_cohort.assign(kRows, 0);
      in.end_var_by_cohort.assign(kRows, 0);
      for (size_t r = 0; r < kRows; ++r) {
        in.interval_by_row.push_back(r < 8 ? 128 * kKiB : r < 36 ? 2 * kKiB : 512 * kKiB);
      }
      return in;
    };
    auto keep = [&](GrowthInput& in, size_t row) {
      const double p = 1 - std::exp(-(obj + 1) / in.interval_by_row[row]);
      if (std::uniform_real_distribution<double>(0, 1)(rng) >= p) return;
      const double w = obj / p;
      for (size_t r = row + 1; r < kRows; ++r) in.y[r] += w;
      in.end_bytes_by_cohort[row] += w;
      in.end_samples_by_cohort[row] += 1;
      in.end_var_by_cohort[row] += w * w * (1 - p);
    };
    GrowthInput leak = empty(), stopped = empty();
    for (size_t r = 0; r < kRows; ++r) {
      keep(leak, r);
      if (r < 30) keep(stopped, r);
    }
    leaks += ClassifyGrowth(leak, 0, ExactBounds(true)).cls == GrowthClass::kLeak;
    stopped_leaks += ClassifyGrowth(stopped, 0, ExactBounds(true)).cls == GrowthClass::kLeak;
  }
  printf("hunted leak, sparse last rows: LEAK %d; stopped at row 30: LEAK %d (of 200)\n", leaks,
         stopped_leaks);
  // Correct rates of 95 % and 1 % fail these with probability < 1e-3.
  EXPECT_GE(leaks, testing::MinCovered(200, 0.95, 1e-3));
  EXPECT_LE(stopped_leaks, testing::MaxSuccesses(200, 0.01, 1e-3));
}

// A list renewed every epoch while a hunt runs: DataLoader's index list
// (2,560 ints of 36 B, ~90 KiB) is made anew at rows 0, 20 and 40 of a
// 60-step run, the old one freed. Its first copy was sampled at 512 KiB
// (about nothing); a hunt lowered T to 2 KiB at row 8, so the later copies
// are sampled densely and the site's series rises: 0, then ~90 KiB from row
// 20. Its cohorts pass the retention test on the benefit of the doubt a
// sparse first half gets, and the pip torch history runs read it LEAK at
// 0.9-2.2 KiB/step in 3 of 12 runs: ~20 samples, all born in row 40. Samples
// born in one or two steps are an event, not a trend: LEAK in at most 1 % of
// seeds. The same objects kept at 4.5 KiB a step (a leak) stay LEAK in
// >= 95 %.
TEST(GrowthTest, AListRenewedEachEpochIsNotALeakWhenTheHuntSamplesItDensely) {
  int renewed_leaks = 0, leaks = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    HuntSim sim(seed);
    for (size_t r = 0; r < HuntSim::kRows; ++r) sim.T[r] = r < 8 ? 512 * kKiB : 2 * kKiB;
    GrowthInput renewed = sim.Empty(), leak = sim.Empty();
    for (size_t epoch = 0; epoch < 3; ++epoch) {
      sim.Add(renewed, epoch * 20, 2560, 36, epoch * 20 + 20);
    }
    for (size_t r = 0; r < HuntSim::kRows; ++r) sim.Add(leak, r, 128, 36, HuntSim::kRows);
    renewed_leaks += ClassifyGrowth(renewed, 8, ExactBounds(true)).cls == GrowthClass::kLeak;
    leaks += ClassifyGrowth(leak, 8, ExactBounds(true)).cls == GrowthClass::kLeak;
  }
  printf("list renewed each epoch: LEAK %d; the same objects kept: LEAK %d (of 200)\n",
         renewed_leaks, leaks);
  // Correct rates of 1 % and 95 % fail these with probability < 1e-3.
  EXPECT_LE(renewed_leaks, testing::MaxSuccesses(200, 0.01, 1e-3));
  EXPECT_GE(leaks, testing::MinCovered(200, 0.95, 1e-3));
}

// A leak that starts inside the window (a held-out PyTorch loop keeping an
// 8 KiB tensor a step from step 30 of 60): flat over the window's first
// half, rising over its second. The exact heap read NO_TREND (its whole
// window's interval, widened by the hinge's residuals, [-32 B, 8.8 KiB]) and
// the site BOUNDED_GROWTH ("not retained": its first-half cohorts keep
// nothing). Both are LEAK at the second half's rate in >= 95 % of seeds, the
// interval covering 8 KiB/step in 95 % of those: the exact series with 1 KiB
// of noise a step; the site sampled at a hunt's T of 4 KiB (8 x 1 KiB kept a
// step from row 30, 64 x 4 KiB of churn freed the next step). One jump of
// 256 KiB in the second half of a flat exact series is a level shift, not a
// leak that started (LEAK in at most 1 %).
TEST(GrowthTest, ALeakThatStartsInsideTheWindowIsALeakAtItsNewRate) {
  constexpr size_t kRows = 60, kStart = 30;
  const double rate = 8 * kKiB;
  int exact_leaks = 0, exact_covered = 0, site_leaks = 0, site_covered = 0, jump_leaks = 0;
  GrowthOptions exact;
  exact.min_rate = 512;  // the exact series' bounds (analysis.cc)
  exact.min_window_growth = 32 * kKiB;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> noise(0, kKiB);
    GrowthInput heap, jump;
    const size_t at = kStart + 5 + seed % 20;
    for (size_t r = 0; r < kRows; ++r) {
      const double base = 64 * kMiB + noise(rng);
      heap.y.push_back(std::round(base + (r >= kStart ? rate * (r - kStart + 1) : 0)));
      jump.y.push_back(std::round(base + (r >= at ? 256 * kKiB : 0)));
    }
    Growth g = ClassifyGrowth(heap, 0, exact);
    exact_leaks += g.cls == GrowthClass::kLeak;
    exact_covered += g.cls == GrowthClass::kLeak && g.slope_low <= rate && rate <= g.slope_high;
    jump_leaks += ClassifyGrowth(jump, 0, exact).cls == GrowthClass::kLeak;

    HuntSim sim(seed);
    for (size_t r = 0; r < HuntSim::kRows; ++r) sim.T[r] = 4 * kKiB;
    GrowthInput site = sim.Empty();
    for (size_t r = 0; r < HuntSim::kRows; ++r) {
      if (r >= kStart) sim.Add(site, r, 8, kKiB, HuntSim::kRows);
      sim.Add(site, r, 64, 4 * kKiB, r + 1);
    }
    g = ClassifyGrowth(site, 0, ExactBounds(true));
    site_leaks += g.cls == GrowthClass::kLeak;
    site_covered += g.cls == GrowthClass::kLeak && g.slope_low <= rate && rate <= g.slope_high;
  }
  printf(
      "leak from row 30 of 60: exact LEAK %d, covered %d; site LEAK %d, covered %d; one jump "
      "LEAK %d (of 200)\n",
      exact_leaks, exact_covered, site_leaks, site_covered, jump_leaks);
  // Correct rates of 95 % (LEAK, coverage) and 1 % (the jump) fail these
  // with probability < 1e-3.
  EXPECT_GE(exact_leaks, testing::MinCovered(200, 0.95, 1e-3));
  EXPECT_GE(exact_covered, testing::MinCovered(exact_leaks));
  EXPECT_GE(site_leaks, testing::MinCovered(200, 0.95, 1e-3));
  EXPECT_GE(site_covered, testing::MinCovered(site_leaks));
  EXPECT_LE(jump_leaks, testing::MaxSuccesses(200, 0.01, 1e-3));
}

// An exact series (no sampling) that slows but keeps growing: a cache of
// 96 KiB/step filling until step 96 over a 64 KiB/step leak, 200 steps, 0-4
// KiB of noise. LEAK at the second half's rate (the leak), in every seed; the
// cache alone (no leak) stays BOUNDED_GROWTH.
TEST(GrowthTest, ExactSeriesThatSlowsButGrowsIsLeak) {
  int leaks = 0, near = 0, cache_leaks = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> noise(0, 4 * kKiB);
    GrowthInput both, cache;
    for (size_t r = 0; r < 200; ++r) {
      const double fill = 96 * kKiB * static_cast<double>(std::min<size_t>(r, 96));
      both.y.push_back(64 * kKiB * static_cast<double>(r) + fill + noise(rng));
      cache.y.push_back(fill + noise(rng));
    }
    GrowthOptions exact;
    exact.min_rate = 1024;
    exact.min_window_growth = 64 * 1024;
    Growth g = ClassifyGrowth(both, 10, exact);
    leaks += g.cls == GrowthClass::kLeak;
    near += g.cls == GrowthClass::kLeak && std::fabs(g.slope - 64 * kKiB) < 2 * kKiB;
    cache_leaks += ClassifyGrowth(cache, 10, exact).cls == GrowthClass::kLeak;
  }
  printf("exact slowing leak: LEAK %d, at the leak's rate %d; cache alone LEAK %d (of 100)\n",
         leaks, near, cache_leaks);
  EXPECT_EQ(leaks, 100);
  EXPECT_EQ(near, 100);
  EXPECT_EQ(cache_leaks, 0);
}

TEST(GrowthTest, ChurnIsNoTrend) {
  int leaks = 0, flat = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    Growth g = ClassifyGrowth(Churn(seed), 20);
    leaks += g.cls == GrowthClass::kLeak;
    flat += g.cls == GrowthClass::kNoTrend;
  }
  printf("churn: %d NO_TREND, %d LEAK of 100 seeds\n", flat, leaks);
  EXPECT_LT(leaks, 1);
  EXPECT_GE(flat, 95);
}

// Over 200 post-warm-up steps the estimate rests on about b*N/T sampled
// allocations (relative SD ~ 1/sqrt(b*N/T)): 1 MiB/step gives ~400 samples,
// SD ~5 %, so within 10 % in >= 90 of 100 seeds. (100 KiB/step gives ~40
// samples, SD ~16 %: no sampled estimate can promise 10 % there; the exact
// process-level series below does.)
TEST(GrowthTest, SiteLeakRateWithin10PercentOver200Steps) {
  int within = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    Growth g = ClassifyGrowth(LeakInChurn(seed, 220, kMiB), 20);
    EXPECT_EQ(g.cls, GrowthClass::kLeak);
    within += std::fabs(g.slope / kMiB - 1) <= 0.10;
    EXPECT_LE(g.slope_low, g.slope_high);
  }
  printf("1 MiB/step leak over 200 steps: rate within 10%% in %d of 100 seeds\n", within);
  // The rate's relative SD: 1,024 objects of 1 KiB a step, each weighing s/p
  // with variance s^2 (1-p)/p, over the window's 199 cohorts: sqrt((1-p) /
  // (p x 1024 x 199)) = 5.0 %. Within 10 % is then |Z| <= 2.0: a stated rate
  // q = 95.4 % (normal approximation, ~400 samples; measured 1,914 of 2,000,
  // 95.7 %), and the floor is MinCovered(100, q) (P < 1e-3): 88.
  const double p = P(kKiB);
  const double rel_sd = std::sqrt((1 - p) / (p * 1024 * 199));
  EXPECT_GE(within, testing::MinCovered(100, std::erf(0.10 / rel_sd / std::sqrt(2.0))));
}

TEST(GrowthTest, ExactProcessSeriesLeakRateWithin10Percent) {
  // Exact live bytes: 300 MiB of model, 100 KiB/step leak, 0-4 MiB of
  // buffers still live at each step end. The 95 % interval covers the truth
  // in about 95 % of seeds (956 of 1,000 in coverage_test.cc; 92 of these 100).
  int covered = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> act(0, 4 * kMiB);
    GrowthInput in;
    for (size_t r = 0; r < 220; ++r) in.y.push_back(300 * kMiB + 100 * kKiB * r + act(rng));
    Growth g = ClassifyGrowth(in, 20);
    EXPECT_EQ(g.cls, GrowthClass::kLeak) << g.reason;
    EXPECT_NEAR(g.slope, 100 * kKiB, 10 * kKiB);
    EXPECT_EQ(g.retained_bytes, -1);
    covered += g.slope_low <= 100 * kKiB && g.slope_high >= 100 * kKiB;
  }
  printf("exact series: 95%% CI covers the truth in %d of 100 seeds (accept >= %d)\n", covered,
         testing::MinCovered(100));
  EXPECT_GE(covered, testing::MinCovered(100));  // 87: P(Binomial(100, 0.95) < 87) = 0.05 %
}

TEST(GrowthTest, FewStepsAfterWarmupIsInsufficient) {
  Growth g = ClassifyGrowth(LeakInChurn(1, 49), 20);
  EXPECT_EQ(g.cls, GrowthClass::kInsufficient);
  EXPECT_EQ(ClassifyGrowth(LeakInChurn(1, 50), 20).window, 30u);
}

TEST(GrowthTest, GrowthThatIsReplacedIsNotALeak) {
  // One buffer reallocated bigger each step (the old one freed): the series
  // rises steadily, but nothing from the window's first half survives. Its
  // cohorts do not make it a leak; its whole live series does
  // (ClassifyReplacedGrowth, below).
  GrowthInput in;
  const size_t steps = 150;
  in.y.resize(steps);
  in.end_bytes_by_cohort.assign(steps, 0);
  in.end_samples_by_cohort.assign(steps, 0);
  for (size_t r = 0; r < steps; ++r) in.y[r] = 4 * kMiB + 256 * kKiB * r;
  in.end_bytes_by_cohort[steps - 1] = in.y.back();
  in.end_samples_by_cohort[steps - 1] = 1;
  // Pretend detectability holds: 21 samples, born in three steps.
  in.end_samples_by_cohort[steps - 2] = 19;
  in.end_samples_by_cohort[steps - 3] = 1;
  Growth g = ClassifyGrowth(in, 20);
  EXPECT_EQ(g.cls, GrowthClass::kBoundedGrowth) << g.reason;
}

// A site's input with nothing long-lived and only the last row's cohort
// live at the end (`bytes` in `samples` samples): a replaced buffer's.
GrowthInput LastCohortOnly(size_t rows, double bytes, double samples) {
  GrowthInput in;
  in.y.assign(rows, 0);
  in.end_bytes_by_cohort.assign(rows, 0);
  in.end_samples_by_cohort.assign(rows, 0);
  in.end_bytes_by_cohort[rows - 1] = bytes;
  in.end_samples_by_cohort[rows - 1] = samples;
  return in;
}

// A buffer that grows by being reallocated (or replaced by a larger copy):
// `need` grows by `rate` bytes a step; when it passes the capacity, a new
// block of need + need / 8 (bytearray's and list's over-allocation) replaces
// the old one in that row, sampled at T = `t_sample` (weight cap / p, or 0,
// until the next reallocation). Returns the site's input (long-lived series
// and cohorts, as the report builds them) and the bytes its live samples
// hold at each row end (cap where the block was sampled, else 0: what
// ClassifyReplacedGrowth reads).
struct Replaced {
  GrowthInput in;
  std::vector<double> held;
};
Replaced GrowingBuffer(uint64_t seed, size_t steps, double rate, double t_sample,
                       double start = 0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  Replaced out;
  out.in.y.assign(steps, 0);
  out.in.end_bytes_by_cohort.assign(steps, 0);
  out.in.end_samples_by_cohort.assign(steps, 0);
  out.held.assign(steps, 0);
  double need = start, cap = 0, weight = 0;
  size_t born = 0;
  for (size_t r = 0; r < steps; ++r) {
    need += rate;
    if (need > cap) {
      cap = need + need / 8;
      born = r;
      const double p = 1 - std::exp(-(cap + 1) / t_sample);
      weight = u(rng) < p ? cap / p : 0;
    }
    out.held[r] = weight > 0 ? cap : 0;
    out.in.y[r] = born < r ? weight : 0;
  }
  out.in.end_bytes_by_cohort[born] = weight;
  out.in.end_samples_by_cohort[born] = weight > 0 ? 1 : 0;
  return out;
}

// The classes the report gives a replaced buffer: its cohorts keep nothing
// old (not LEAK), its whole live series rises (LEAK, `replaced`). 4 KiB/step
// for 120 steps from a random start (0-256 KiB: where the treads of an
// eighth of the buffer fall), sampled at 64 KiB, W = 20. Its live bytes
// (the capacity) rise in treads; the rate the exact heap would give them is
// the same statistic on the unsampled series, and the interval holds it in
// 95 of 100 seeds at least (a stated 95 %: failing by chance with
// probability 0.03 at 90 of 100; measured 100, and 95 while the rule read the
// weights). Both read within 10 % of 4.3 KiB/step:
// the requested 4 KiB and the over-allocation the treads average.
TEST(GrowthTest, ABufferThatGrowsByReplacementIsALeakOfItsLiveBytes) {
  GrowthOptions o;
  o.min_rate = 512;  // the exact heap grows: the site takes its bounds
  o.min_window_growth = 32 * kKiB;
  int leak = 0, covered = 0, cohorts_leak = 0;
  constexpr int kSeeds = 100;
  std::mt19937_64 starts(7);
  for (int seed = 1; seed <= kSeeds; ++seed) {
    const double start = std::uniform_real_distribution<double>(0, 256 * kKiB)(starts);
    const Replaced b = GrowingBuffer(seed, 120, 4 * kKiB, 64 * kKiB, start);
    const Growth site = ClassifySiteGrowth(b.in, 20, o);
    cohorts_leak += site.cls == GrowthClass::kLeak;
    const Growth g = ClassifyReplacedGrowth(StepSeries::FromDense(b.held), b.in, site, o);
    if (g.cls != GrowthClass::kLeak) continue;
    ++leak;
    EXPECT_TRUE(g.replaced);
    const Replaced exact = GrowingBuffer(seed, 120, 4 * kKiB, 1, start);
    const std::vector<double> window(exact.held.begin() + 20, exact.held.end());
    const double truth = TheilSenSlope(window);
    covered += g.slope_low <= truth && truth <= g.slope_high;
    EXPECT_NEAR(g.slope, 4.3 * kKiB, 0.43 * kKiB);
  }
  printf("replaced buffer: cohorts LEAK %d, LEAK %d, interval holds the exact rate %d of %d\n",
         cohorts_leak, leak, covered, kSeeds);
  EXPECT_EQ(cohorts_leak, 0);
  EXPECT_EQ(leak, kSeeds);
  EXPECT_GE(covered, 90);
  // A torch.cat history of 4 KiB a step as a Debian torch run read it
  // (W = 8; bytes to 0.01): sampled while small (rows 6-11), then at p
  // close to 1 (a few bytes over 4,096 r, falling to 0). Too many odd rows
  // to set aside as level shifts, and the Hamed-Rao and AR(1) corrections
  // read them and the falling excess as persistent noise (p = 3.6e-6, the
  // interval from -91 KiB): NO_TREND until the nearly-exact rule
  // (growth.cc NearlyExact). (These are its weights, read before the rule
  // read the bytes the samples hold; as a series on its line but for a few
  // rows it still tests that rule.)
  const std::vector<double> hist = {
      0.00,      0.00,      0.00,      0.00,      0.00,      0.00,      143785.25, 0.00,
      148170.14, 54596.27,  44631.34,  45248.90,  49160.30,  53256.12,  57352.05,  61448.02,
      65544.01,  69640.00,  73736.00,  77832.00,  81928.00,  86024.00,  90120.00,  94216.00,
      98312.00,  102408.00, 106504.00, 110600.00, 114696.00, 118792.00, 122888.00, 126984.00,
      131072.00, 135168.00, 139264.00, 143360.00, 147456.00, 151552.00, 155648.00, 159744.00,
      163840.00, 167936.00, 172032.00, 176128.00, 180224.00, 184320.00, 188416.00, 192512.00,
      196608.00, 200704.00, 204800.00, 208896.00, 212992.00, 217088.00, 221184.00, 225280.00,
      229376.00, 233472.00, 237568.00, 241664.00};
  const GrowthInput cat = LastCohortOnly(60, hist[59], 1);
  const Growth history =
      ClassifyReplacedGrowth(StepSeries::FromDense(hist), cat, ClassifySiteGrowth(cat, 8, o), o);
  EXPECT_EQ(history.cls, GrowthClass::kLeak) << history.reason;
  EXPECT_LE(history.slope_low, 4096);
  EXPECT_GE(history.slope_high, 4096);
}

// Not a replaced buffer: one of constant size (the step's output, say, live
// at each step end and replaced in the next), sampled at T = 512 KiB; and a
// growing buffer sampled so sparsely that most step ends hold no sample of
// it (a trend in the noise of a few samples is not taken); and a site whose
// old cohorts keep what grows (its cohorts classify it).
TEST(GrowthTest, OnlyABufferThatGrowsIsAReplacedLeak) {
  GrowthOptions o;
  o.min_rate = 512;
  o.min_window_growth = 32 * kKiB;
  int steady = 0, sparse = 0;
  constexpr int kSeeds = 200;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0, 1);
    Replaced b;
    const size_t steps = 120;
    b.in.y.assign(steps, 0);
    b.in.end_bytes_by_cohort.assign(steps, 0);
    b.in.end_samples_by_cohort.assign(steps, 0);
    b.held.assign(steps, 0);
    const double p = 1 - std::exp(-(64 * kKiB + 1) / kT);
    for (size_t r = 0; r < steps; ++r) {  // 8 blocks of 64 KiB, new each step
      for (int k = 0; k < 8; ++k) {
        if (u(rng) < p) b.held[r] += 64 * kKiB;
      }
    }
    b.in.end_bytes_by_cohort[steps - 1] = b.held.back() / p;
    Growth site = ClassifySiteGrowth(b.in, 20, o);
    steady += ClassifyReplacedGrowth(StepSeries::FromDense(b.held), b.in, site, o).cls ==
              GrowthClass::kLeak;
    const Replaced thin = GrowingBuffer(seed, 120, 1 * kKiB, 8 * kMiB);
    site = ClassifySiteGrowth(thin.in, 20, o);
    sparse += ClassifyReplacedGrowth(StepSeries::FromDense(thin.held), thin.in, site, o).cls ==
              GrowthClass::kLeak;
  }
  printf("not replaced growth: steady buffer LEAK %d, sparse LEAK %d of %d\n", steady, sparse,
         kSeeds);
  EXPECT_EQ(steady, 0);
  EXPECT_EQ(sparse, 0);
  // A held-out PyTorch run's backward site (the step's temporaries, live at
  // each step end), sampled at 512 KiB and, from step 7, at a hunt's T: its
  // series as the report read it (change points, bit for bit: some "0" rows
  // hold 2.9e-11, what a sum of weights less its frees leaves). Each row's
  // estimate is unbiased, but the rows after the fall hold samples more
  // often, which ranks read as a rise: p = 4.5e-4, 0.8 KiB/step; the
  // residues counted as samples and made the pairwise slopes' lower bound
  // positive, and it was a replaced LEAK. (Weights, read before the rule
  // read the bytes the samples hold: which rows hold a sample is what ranks
  // read as a rise, and the held bytes keep that.)
  const std::vector<std::pair<size_t, double>> changes = {{6, 207351.9302567821},
                                                          {7, 0},
                                                          {8, 207351.9302567821},
                                                          {10, 0},
                                                          {11, 151586.71844328038},
                                                          {12, 0},
                                                          {13, 207351.9302567821},
                                                          {14, 0},
                                                          {16, 207351.9302567821},
                                                          {17, 0},
                                                          {19, 222424.9103195048},
                                                          {20, 207351.9302567821},
                                                          {21, 0},
                                                          {22, 207351.9302567821},
                                                          {23, 343704.2399851553},
                                                          {24, 207351.93025678213},
                                                          {25, 151586.7184432804},
                                                          {26, 2.9103830456733704e-11},
                                                          {28, 343704.2399851553},
                                                          {29, 2.9103830456733704e-11},
                                                          {30, 207351.93025678213},
                                                          {31, 151586.7184432804},
                                                          {32, 222424.91031950482},
                                                          {33, 2.9103830456733704e-11},
                                                          {34, 207351.93025678213},
                                                          {35, 2.9103830456733704e-11},
                                                          {36, 207351.93025678213},
                                                          {37, 151586.7184432804},
                                                          {38, 133517.38151697404},
                                                          {39, 222424.91031950482},
                                                          {41, 133517.38151697404},
                                                          {43, 151586.7184432804},
                                                          {45, 2.9103830456733704e-11},
                                                          {47, 151586.7184432804},
                                                          {48, 207351.93025678213},
                                                          {49, 333116.7535524735},
                                                          {51, 207351.9302567821},
                                                          {52, 151586.71844328038},
                                                          {56, 171698.2469055685},
                                                          {57, 151586.71844328038},
                                                          {58, 207351.9302567821},
                                                          {59, 333116.7535524735}};
  std::vector<double> series(60, 0);
  for (size_t k = 0; k < changes.size(); ++k) {
    const size_t end = k + 1 < changes.size() ? changes[k + 1].first : series.size();
    for (size_t r = changes[k].first; r < end; ++r) series[r] = changes[k].second;
  }
  const GrowthInput in = LastCohortOnly(60, series[59], 2);
  const Growth backward =
      ClassifyReplacedGrowth(StepSeries::FromDense(series), in, ClassifySiteGrowth(in, 0, o), o);
  EXPECT_NE(backward.cls, GrowthClass::kLeak) << backward.reason;
  // Old cohorts hold the growth: the site's own class stands.
  Replaced kept = GrowingBuffer(1, 120, 4 * kKiB, 16 * kKiB);
  for (size_t r = 0; r < 60; ++r) kept.in.end_bytes_by_cohort[r] = 4 * kKiB;
  Growth site = ClassifySiteGrowth(kept.in, 20, o);
  site.cls = GrowthClass::kNoTrend;
  const Growth g = ClassifyReplacedGrowth(StepSeries::FromDense(kept.held), kept.in, site, o);
  EXPECT_EQ(g.cls, GrowthClass::kNoTrend) << g.reason;
  EXPECT_FALSE(g.replaced);
}

// Blocks of S_always or more are recorded with p = 1: no sampling noise, so
// the ten-sample bound is met by samples worth ten (B^2 / V, without bound
// here) born in at least three steps. A 64 MiB tensor kept every eighth step
// (7 samples in 60 steps; the held-out run that found this read NO_TREND,
// "only 7 live samples", with its 8 MiB/step all UNATTRIBUTED) is LEAK at its
// rate; two such blocks are two events, not a trend; the same seven blocks
// sampled from small allocations (one sample each worth about one) are not.
TEST(GrowthTest, BlocksRecordedWithCertaintyNeedThreeStepsNotTenSamples) {
  const size_t rows = 60;
  auto staircase = [&](const std::vector<size_t>& at, double var_each) {
    GrowthInput in;
    in.y.assign(rows, 0);
    in.end_bytes_by_cohort.assign(rows, 0);
    in.end_samples_by_cohort.assign(rows, 0);
    in.end_var_by_cohort.assign(rows, 0);
    for (size_t r : at) {
      for (size_t i = r; i < rows; ++i) in.y[i] += 64 * kMiB;
      in.end_bytes_by_cohort[r] = 64 * kMiB;
      in.end_samples_by_cohort[r] = 1;
      in.end_var_by_cohort[r] = var_each;
    }
    return in;
  };
  const std::vector<size_t> every8 = {7, 15, 23, 31, 39, 47, 55};
  Growth g = ClassifySiteGrowth(staircase(every8, 0), 0, GrowthOptions{});
  EXPECT_EQ(g.cls, GrowthClass::kLeak) << g.reason;
  EXPECT_NEAR(g.slope, 8 * kMiB, 1.5 * kMiB);
  EXPECT_EQ(g.window_samples, 7);
  EXPECT_EQ(g.window_sample_rows, 7u);
  EXPECT_GE(g.window_effective_samples, 1e12);

  // Two blocks: worth without bound, but born in two steps only.
  g = ClassifySiteGrowth(staircase({20, 45}, 0), 0, GrowthOptions{});
  EXPECT_NE(g.cls, GrowthClass::kLeak) << g.reason;
  EXPECT_NE(g.reason.find("born in 2 steps"), std::string::npos) << g.reason;

  // Seven samples each worth one (weight w = 64 MiB, var w^2): the bound holds.
  const double w = 64 * kMiB;
  g = ClassifySiteGrowth(staircase(every8, w * w), 0, GrowthOptions{});
  EXPECT_EQ(g.cls, GrowthClass::kNoTrend) << g.reason;
  EXPECT_NEAR(g.window_effective_samples, 7, 1e-9);
  EXPECT_NE(g.reason.find("only 7 live samples"), std::string::npos) << g.reason;
}

// A leak of blocks recorded with p = 1 has no sampling variance, but its
// window holds one block more or fewer than its rate gives it: a 64 MiB
// block every eighth step is 6 or 7 blocks in the window's rows, so the
// rate reads 7.3 or 8.5 MiB/step. The interval allows one block more or
// less (GrowthInput::end_block_by_cohort) and covers the 8 MiB/step at every
// phase; with one sample's worth (T = 512 KiB) it was 12 KiB wide and
// missed it at every phase (the held-out run: 7.31 MiB/step [7.30, 7.31]).
TEST(GrowthTest, ALeakOfBlocksIsUncertainByOneBlock) {
  const size_t rows = 60;
  int leak = 0, covered = 0, covered_without = 0;
  for (size_t phase = 0; phase < 8; ++phase) {
    GrowthInput in;
    in.y.assign(rows, 0);
    in.end_bytes_by_cohort.assign(rows, 0);
    in.end_samples_by_cohort.assign(rows, 0);
    in.end_var_by_cohort.assign(rows, 0);
    in.end_block_by_cohort.assign(rows, 0);
    in.interval_by_row.assign(rows, 512 * 1024);
    for (size_t r = phase; r < rows; r += 8) {
      for (size_t i = r; i < rows; ++i) in.y[i] += 64 * kMiB;
      in.end_bytes_by_cohort[r] = in.end_block_by_cohort[r] = 64 * kMiB;
      in.end_samples_by_cohort[r] = 1;
    }
    const Growth g = ClassifySiteGrowth(in, 0, GrowthOptions{});
    if (g.cls != GrowthClass::kLeak) continue;
    ++leak;
    covered += g.slope_low <= 8 * kMiB && 8 * kMiB <= g.slope_high;
    EXPECT_LT(g.slope_high - g.slope_low, 6 * kMiB) << phase;  // not without bound
    in.end_block_by_cohort.clear();
    const Growth without = ClassifySiteGrowth(in, 0, GrowthOptions{});
    covered_without += without.slope_low <= 8 * kMiB && 8 * kMiB <= without.slope_high;
  }
  EXPECT_EQ(leak, 8);
  EXPECT_EQ(covered, leak);
  EXPECT_EQ(covered_without, 0);
}

// A Python line's sum of sites (GrowthInput::parts): its cohorts' rate is
// the sum of each site's, each weighted by its own rows' T. A 64 MiB block
// every eighth row (p = 1, rows at T = 512 KiB) and a small site a hunt
// targeted from row 55, the row of the last block, on (its rows at 256 B):
// one set of weights for the sum, the smallest T of each row, rested the
// rate on rows 55-58 and their one block, 16 MiB/step; the parts' sum is the
// big site's 8 MiB/step.
TEST(GrowthTest, ALinesRateIsTheSumOfItsSitesRates) {
  const size_t rows = 60;
  GrowthInput big, small;
  for (GrowthInput* in : {&big, &small}) {
    in->y.assign(rows, 0);
    in->end_bytes_by_cohort.assign(rows, 0);
    in->end_samples_by_cohort.assign(rows, 0);
    in->end_var_by_cohort.assign(rows, 0);
    in->interval_by_row.assign(rows, 512 * 1024);
  }
  for (size_t r = 7; r < rows; r += 8) {
    for (size_t i = r; i < rows; ++i) big.y[i] += 64 * kMiB;
    big.end_bytes_by_cohort[r] = 64 * kMiB;
    big.end_samples_by_cohort[r] = 1;
  }
  for (size_t r = 55; r < rows; ++r) {
    small.interval_by_row[r] = 256;
    small.end_bytes_by_cohort[r] = 256;
    small.end_samples_by_cohort[r] = 1;
    small.end_var_by_cohort[r] = 256.0 * 256;
    for (size_t i = r; i < rows; ++i) small.y[i] += 256;
  }
  GrowthInput line;
  line.y = big.y;
  line.end_bytes_by_cohort = big.end_bytes_by_cohort;
  line.end_samples_by_cohort = big.end_samples_by_cohort;
  line.end_var_by_cohort = big.end_var_by_cohort;
  line.interval_by_row = big.interval_by_row;
  for (size_t r = 0; r < rows; ++r) {
    line.y[r] += small.y[r];
    line.end_bytes_by_cohort[r] += small.end_bytes_by_cohort[r];
    line.end_samples_by_cohort[r] += small.end_samples_by_cohort[r];
    line.end_var_by_cohort[r] += small.end_var_by_cohort[r];
    line.interval_by_row[r] = std::min(big.interval_by_row[r], small.interval_by_row[r]);
  }
  const double one_set = KeptRate(line, 0, rows - 1);
  EXPECT_GT(one_set, 12 * kMiB);  // what the weights of the smallest T read
  line.parts = {big, small};
  EXPECT_NEAR(KeptRate(line, 0, rows - 1),
              KeptRate(big, 0, rows - 1) + KeptRate(small, 0, rows - 1), 1e-6);
  const Growth g = ClassifySiteGrowth(line, 0, GrowthOptions{});
  EXPECT_EQ(g.cls, GrowthClass::kLeak) << g.reason;
  EXPECT_NEAR(g.slope, 8 * kMiB, 1.5 * kMiB) << g.reason;
}

TEST(GrowthTest, SmallTrendIsNoTrend) {
  GrowthInput in;
  for (size_t r = 0; r < 100; ++r) in.y.push_back(1000.0 * r);  // 1000 B/step
  Growth g = ClassifyGrowth(in, 0);
  EXPECT_LT(g.p_value, 0.01);
  EXPECT_EQ(g.cls, GrowthClass::kNoTrend);
  GrowthOptions o;
  o.min_rate = 512;
  o.min_window_growth = 64 * 1024;
  EXPECT_EQ(ClassifyGrowth(in, 0, o).cls, GrowthClass::kLeak);
}

// Issue 9 item 4: a LEAK's printed interval is the one its class rests on,
// so no series is LEAK with a 95 % rate interval that reaches 0. Exact
// series of 120 steps with AR(1) noise (phi 0..0.9, sd 256 KiB) and trends
// of 0..2 sd per 10 steps, 600 fixed seeds: every LEAK has slope_low > 0.
// On the trend-free third, LEAK is a false alarm. It needs the interval's
// lower end above 0, which a 95 % interval that covers the truth misses from
// below in at most 2.5 % of runs: the stated false LEAK rate on trend-free
// exact series (the Mann-Kendall test's nominal 1 % does not hold for
// strongly autocorrelated ones: before the interval rule, 16 of these 200
// were LEAK). Accepted up to MaxSuccesses(200, 0.025, 1e-4) = 14 (a correct
// classifier fails with probability <= 1e-4); measured: 7.
TEST(GrowthTest, NoLeakWithAnIntervalReachingZero) {
  int leaks = 0, flat_runs = 0, false_leaks = 0, demoted = 0, flat_demoted = 0;
  for (uint64_t seed = 1; seed <= 600; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0, 1);
    const double sd = 256 * kKiB, phi = 0.9 * u(rng);
    const int kind = static_cast<int>(seed % 3);  // 0: flat, 1: small trend, 2: clear trend
    const double slope = kind == 0 ? 0 : kind == 1 ? 0.02 * sd * u(rng) : 0.2 * sd * u(rng);
    std::normal_distribution<double> noise(0, sd * std::sqrt(1 - phi * phi));
    GrowthInput in;
    double e = 0;
    for (int r = 0; r < 120; ++r) {
      e = phi * e + noise(rng);
      in.y.push_back(std::round(64 * kMiB + slope * r + e));
    }
    GrowthOptions o;
    o.min_rate = 512;  // the exact series' bounds (analysis.cc)
    o.min_window_growth = 32 * kKiB;
    const Growth g = ClassifyGrowth(in, 0, o);
    if (g.cls == GrowthClass::kLeak) {
      ++leaks;
      EXPECT_GT(g.slope_low, 0) << "seed " << seed << ": " << g.reason;
    }
    const bool was_leak = g.reason.find("growth not established") != std::string::npos;
    demoted += was_leak;
    if (kind == 0) {
      ++flat_runs;
      flat_demoted += was_leak;
      false_leaks += g.cls == GrowthClass::kLeak;
    }
  }
  EXPECT_LE(false_leaks, testing::MaxSuccesses(flat_runs, 0.025, 1e-4));
  EXPECT_GT(leaks, 100);  // the clear trends are found
  printf(
      "NoLeakWithAnIntervalReachingZero: %d LEAK of 600, %d false of %d flat; not LEAK for "
      "the interval: %d (%d flat)\n",
      leaks, false_leaks, flat_runs, demoted, flat_demoted);
}

// TargetRows: a site's rows take the screening T from the row after the
// first row whose cohort has a sample drawn at exactly it (that row, chosen
// for its sample, keeps its T), to the hunt's end; a sample at the rows' own
// T (thinned, untargeted) starts nothing, and a later hunt needs a sample of
// its own.
TEST(GrowthTest, TargetRowsFollowTheFirstSampleAtTheScreeningT) {
  GrowthInput in;
  const double T = 512 * kKiB, Tf = 128 * kKiB, S = 4 * kKiB;
  in.interval_by_row = {T, Tf, Tf, Tf, Tf, Tf, T, T, Tf, Tf, Tf};
  const std::vector<double> screen = {0, S, S, S, S, S, 0, 0, 2 * S, 2 * S, 2 * S};
  // Cohort samples' smallest T: row 2 thinned (Tf), row 3 targeted (S),
  // row 7 after the hunt, row 9 targeted in a second hunt at 2S.
  in.end_interval_by_cohort = {T, 0, Tf, S, 0, S, 0, T, 0, 2 * S, 0};
  TargetRows(screen, &in);
  const std::vector<double> want = {T, Tf, Tf, Tf, S, S, T, T, Tf, Tf, 2 * S};
  EXPECT_EQ(in.interval_by_row, want);
  // Not screening anywhere: nothing changes.
  GrowthInput plain;
  plain.interval_by_row = {T, T, T};
  plain.end_interval_by_cohort = {S, S, S};
  TargetRows({0, 0, 0}, &plain);
  EXPECT_EQ(plain.interval_by_row, std::vector<double>(3, T));
}

TEST(TrendTest, WorkedExample) {
  TrendResult t = TrendTest({1, 3, 2, 5, 4, 6});
  EXPECT_EQ(t.s, 11);
  EXPECT_EQ(t.slope, 1);
  EXPECT_NEAR(t.var_s, 28.333, 1e-3);
  EXPECT_EQ(t.hamed_rao, 1);
  EXPECT_NEAR(t.z, 1.879, 1e-3);
  EXPECT_NEAR(t.p_increasing, 0.0301, 1e-4);
  EXPECT_EQ(t.slope_low, -1);
  EXPECT_EQ(t.slope_high, 2);
}

TEST(TrendTest, DetectWarmup) {
  std::vector<double> x = {0, 50, 100};
  for (int i = 0; i < 60; ++i) x.push_back(100 + (i % 2));
  EXPECT_EQ(DetectWarmup(x), 3u);
  std::vector<double> line;
  for (int i = 0; i < 60; ++i) line.push_back(3.0 * i + (i % 3));
  EXPECT_EQ(DetectWarmup(line), 0u);
}

// ParallelChunks (the report's per-site statistics run on it): every index
// once, in chunks that tile [0, n), whatever n and the chunk size; n = 0
// calls nothing.
TEST(ParallelChunksTest, EveryIndexOnceInTilingChunks) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}}) {
    for (size_t chunk : {size_t{0}, size_t{1}, size_t{7}, size_t{64}, size_t{5000}}) {
      std::vector<std::atomic<int>> seen(n);
      std::atomic<size_t> calls{0};
      ParallelChunks(n, chunk, [&](size_t lo, size_t hi) {
        ++calls;
        EXPECT_LT(lo, hi);
        EXPECT_LE(hi, n);
        EXPECT_LE(hi - lo, std::max<size_t>(chunk, 1));
        for (size_t i = lo; i < hi; ++i) ++seen[i];
      });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(seen[i].load(), 1) << n << " " << chunk << " " << i;
      const size_t c = std::max<size_t>(chunk, 1);
      EXPECT_EQ(calls.load(), (n + c - 1) / c) << n << " " << chunk;
    }
  }
}

}  // namespace
}  // namespace memstep::analysis

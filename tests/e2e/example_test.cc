// The bundled example (examples/train_loop.cc, training_sim.h) under the real
// library at the default settings: every planted class at its site, and the
// coverage of the leak's 95 % intervals over seeds (docs/analysis.md
// "Intervals of the estimates").
//
// Planted truth (training_sim.h, 200 steps): RecordMetricsHistory keeps one
// malloc(64 KiB) per step until exit (LEAK, 65536 B/step requested; the exact
// heap counts malloc's usable size, at most 16 B more per object, plus the
// history vector's 8 B pointer per step: 32 B/step in all, which matters only
// when the rate is calibrated to the exact heap); WarmupWorkspace keeps 2 MiB
// in each of steps 0-9 and AllocateOptimizerState 4 MiB in step 0
// (WARMUP_ONLY); TokenCache::Insert fills 96 KiB per step until step 96
// (BOUNDED_GROWTH); Forward, Backward and LoadBatch free everything they
// allocate within the step (NO_TREND); the exact heap grows 160 KiB/step,
// then 64: LEAK at 64 KiB/step (it slowed but never stops). At exit only the
// leak is live: 200 x 64 KiB.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/analysis/analysis.h"
#include "tests/coverage_bound.h"
#include "tests/e2e/e2e_util.h"

namespace memstep::e2e {
namespace {

constexpr double kLeakRate = 64 * 1024;  // requested bytes per step
constexpr double kUsableOverhead = 32;   // per step, in the exact heap's count
constexpr double kLeakAtExit = 200 * kLeakRate;
constexpr double kZ95 = 1.959964, kZ999 = 3.290527;  // two-sided 95 % and 99.9 %

// One run of the example at the defaults, seeded; its trace in `dir`.
ChildResult RunExampleChild(const TempDir& dir, uint64_t seed) {
  std::vector<std::string> env = TracedEnv(dir.path(), 0);  // the default interval
  env.push_back(absl::StrCat("MEMSTEP_SEED=", seed));
  return RunChild({ExampleProgram()}, env, 120);
}

analysis::Report Analyze(const TempDir& dir, uint64_t seed, const ChildResult& r) {
  EXPECT_FALSE(r.timed_out) << "seed " << seed;
  EXPECT_EQ(r.exit_code, 0) << "seed " << seed << ": " << r.output;
  absl::StatusOr<analysis::Report> report = analysis::AnalyzeRun(dir.path());
  EXPECT_TRUE(report.ok()) << "seed " << seed << ": " << report.status();
  return report.ok() ? *std::move(report) : analysis::Report{};
}

analysis::Report RunExample(uint64_t seed) {
  TempDir dir;
  return Analyze(dir, seed, RunExampleChild(dir, seed));
}

// Host sites whose innermost frame is in `function`.
std::vector<const analysis::Site*> SitesIn(const analysis::Report& run,
                                           const std::string& function) {
  std::vector<const analysis::Site*> out;
  for (const analysis::Site& s : run.sites) {
    if (s.kind != analysis::SiteKind::kHost || s.frames.empty()) continue;
    if (s.frames.front().function.find(function) != std::string::npos) out.push_back(&s);
  }
  return out;
}

// The class checks of one run, each with its own error rate (stated in
// kClassCheckRates below and in docs/testing.md, "ExampleTest's class checks").
struct ClassChecks {
  bool warmup = false;            // W, the detected warm-up, in [10, 24] steps
  bool heap_leak = false;         // exact heap LEAK at 64 KiB + 32 B/step, +- 64 B
  bool leak_site = false;         // RecordMetricsHistory: one site, LEAK, 99.9 % interval covers
  bool warmup_sites = false;      // WarmupWorkspace, AllocateOptimizerState: WARMUP_ONLY
  bool cache_site = false;        // TokenCache::Insert: one site, BOUNDED_GROWTH
  bool no_trend_sites = false;    // Forward, Backward, LoadBatch: NO_TREND
  bool no_false_leak = false;     // other LEAK sites <= MaxFalseLeaks(other tested sites)
  bool no_zero_interval = false;  // no LEAK printed with a 95 % interval reaching 0
  std::string why;                // what failed, for the message
};

ClassChecks CheckClasses(const analysis::Report& run) {
  ClassChecks c;
  auto fail = [&c](bool* check, const std::string& what) {
    *check = false;
    absl::StrAppend(&c.why, what, "\n");
  };
  if (run.processes.size() != 1 || run.steps.size() != 200) {
    absl::StrAppend(&c.why, "processes ", run.processes.size(), ", steps ", run.steps.size(), "\n");
    return c;
  }
  const analysis::ProcessSummary& p = run.processes[0];
  // The warm-up ends with the workspace's 10 steps (the changepoint of the
  // exact heap; the cache's fill continues after it).
  c.warmup = p.warmup_steps >= 10 && p.warmup_steps <= 24;
  if (!c.warmup) absl::StrAppend(&c.why, "warm-up ", p.warmup_steps, " steps\n");
  c.heap_leak = p.live_growth.cls == analysis::GrowthClass::kLeak &&
                std::abs(p.live_growth.slope - (64 * 1024 + 32)) <= 64;
  if (!c.heap_leak) absl::StrAppend(&c.why, "exact heap: ", p.live_growth.reason, "\n");

  auto leak = SitesIn(run, "RecordMetricsHistory");
  c.leak_site = leak.size() == 1;
  if (c.leak_site) {
    // A 95 % interval misses the truth in 1 run of 20 by design, so a single
    // run checks the 99.9 % interval of the same estimate (the 95 %
    // half-width x 3.29 / 1.96); the 95 % coverage is measured over seeds.
    const analysis::Growth& g = leak[0]->growth;
    const double wide = (kZ999 / kZ95);
    const double low = g.slope - wide * (g.slope - g.slope_low);
    const double high = g.slope + wide * (g.slope_high - g.slope);
    c.leak_site = g.cls == analysis::GrowthClass::kLeak && low <= kLeakRate + kUsableOverhead &&
                  high >= kLeakRate;
    if (!c.leak_site) {
      absl::StrAppend(&c.why, "leak site: ", g.slope, " [", g.slope_low, ", ", g.slope_high, "] ",
                      g.reason, "\n");
    }
  } else {
    absl::StrAppend(&c.why, "leak sites: ", leak.size(), "\n");
  }
  c.warmup_sites = true;
  for (const char* f : {"WarmupWorkspace", "AllocateOptimizerState"}) {
    auto sites = SitesIn(run, f);
    if (sites.empty()) fail(&c.warmup_sites, absl::StrCat(f, ": no site"));
    for (const analysis::Site* s : sites) {
      if (s->growth.cls != analysis::GrowthClass::kWarmupOnly) {
        fail(&c.warmup_sites, absl::StrCat(f, ": ", s->growth.reason));
      }
    }
  }
  auto cache = SitesIn(run, "TokenCache::Insert");
  c.cache_site = cache.size() == 1 && cache[0]->growth.cls == analysis::GrowthClass::kBoundedGrowth;
  if (!c.cache_site) {
    absl::StrAppend(&c.why, "cache: ", cache.size(), " sites",
                    cache.empty() ? "" : absl::StrCat(", ", cache[0]->growth.reason), "\n");
  }
  c.no_trend_sites = true;
  for (const char* f : {"Forward", "Backward", "LoadBatch"}) {
    auto sites = SitesIn(run, f);
    if (sites.empty()) fail(&c.no_trend_sites, absl::StrCat(f, ": no site"));
    for (const analysis::Site* s : sites) {
      if (s->growth.cls != analysis::GrowthClass::kNoTrend) {
        fail(&c.no_trend_sites, absl::StrCat(f, ": ", s->growth.reason));
      }
    }
  }
  // Nothing else leaks: at the stated false-LEAK rate (1e-3 per site the
  // classifier tests, tests/coverage_bound.h), more than MaxFalseLeaks of the
  // other tested sites are LEAK with probability <= 1e-4.
  int other_leaks = 0, other_tested = 0;
  for (const analysis::Site& s : run.sites) {
    if (leak.size() == 1 && &s == leak[0]) continue;
    other_leaks += s.growth.cls == analysis::GrowthClass::kLeak;
    other_tested += ClassifierTested(s);
  }
  c.no_false_leak = other_leaks <= testing::MaxFalseLeaks(other_tested);
  if (!c.no_false_leak) {
    absl::StrAppend(&c.why, "other LEAK sites: ", other_leaks, " of ", other_tested, " tested\n");
  }
  // No LEAK (and no RSS verdict) is printed with a 95 % interval that
  // reaches 0 (issue 9 item 4; the report prints these very fields).
  c.no_zero_interval = p.live_growth.slope_low > 0;
  for (const analysis::Site& s : run.sites) {
    if (s.growth.cls == analysis::GrowthClass::kLeak && !(s.growth.slope_low > 0)) {
      fail(&c.no_zero_interval, absl::StrCat("LEAK with interval from 0: ", s.growth.reason));
    }
  }
  const std::string rss_class = analysis::RssClassName(p.rss_growth, p.rss_explain);
  // RSS: never LEAK over such an interval; any other verdict over one says
  // its rate is not established (the text then prints the rise, no rate).
  if (!(p.rss_growth.slope_low > 0) &&
      (rss_class == "LEAK" || (!p.rss_explain.verdict.empty() && p.rss_explain.rate_established))) {
    fail(&c.no_zero_interval, absl::StrCat("RSS ", rss_class, ": ", p.rss_growth.reason));
  }
  if (!(p.live_growth.slope_low > 0)) absl::StrAppend(&c.why, "exact heap interval reaches 0\n");
  return c;
}

// The error rate of each class check, per run (docs/testing.md, "ExampleTest's
// class checks"). The class verdicts rest on the classifier's stated verdict
// rate from the simulations: the right class in 99 % of seeds per site
// (GrowthTest verdict counts, 100 of 100 and over 2,000 seeds 1,999-2,000 of
// 2,000), and each planted function has one site (seed 1: one site each), so
// a check over n sites fails with probability 1 - 0.99^n. The exact-heap
// checks follow from the exact counters; the false-LEAK check from the stated
// false-LEAK rate. A check whose rate is above 1e-4 is not checked on a
// single run (one CI run is a fresh draw): the seeds test below checks it
// over its 20 seeds, passing in at least MinCovered(20, 1 - rate, 1e-4) of
// them (a correct classifier fails that with probability <= 1e-4).
// Measured: every check passed in 100 of 100 seeds (1001-1100, with
// MEMSTEP_COVERAGE_TEST_SEEDS=100 MEMSTEP_COVERAGE_TEST_FIRST_SEED=1001) and
// in 20 of 20 at seeds 101-120, twice.
struct CheckRate {
  const char* name;
  bool ClassChecks::*field;
  double rate;   // stated failure rate per run
  bool per_run;  // checked on EachPlantedClassAtItsSite's single run
};
constexpr CheckRate kClassCheckRates[] = {
    // The exact heap series (no sampling): its changepoint, class and slope
    // are the same in every run (the example allocates from one thread).
    {"warmup", &ClassChecks::warmup, 0, true},
    {"heap_leak", &ClassChecks::heap_leak, 0, true},
    // The LEAK verdict of a hunted leak (99 %, CoverageTest.HuntSchedule...) and
    // its 99.9 % interval (1e-3): 1.1e-2; over seeds, >= 17 of 20.
    {"leak_site", &ClassChecks::leak_site, 0.011, false},
    // Two WARMUP_ONLY sites: 1 - 0.99^2 = 2.0e-2; >= 16 of 20.
    {"warmup_sites", &ClassChecks::warmup_sites, 0.0199, false},
    // One BOUNDED_GROWTH site: 1e-2; >= 17 of 20.
    {"cache_site", &ClassChecks::cache_site, 0.01, false},
    // Three NO_TREND sites: 1 - 0.99^3 = 3.0e-2; >= 15 of 20.
    {"no_trend_sites", &ClassChecks::no_trend_sites, 0.0297, false},
    // MaxFalseLeaks at the stated false-LEAK rate: 1e-4 by derivation.
    {"no_false_leak", &ClassChecks::no_false_leak, 1e-4, true},
    // A LEAK (site, exact heap, RSS verdict) needs its 95 % interval to
    // exclude 0 (growth.cc, rss_explain.cc): 0 by construction.
    {"no_zero_interval", &ClassChecks::no_zero_interval, 0, true},
};

// One run, seeded, at the defaults: the class checks whose error rate per
// run is at most 1e-4 (kClassCheckRates); the others are checked over the
// seeds of the test below.
TEST(ExampleTest, EachPlantedClassAtItsSite) {
  analysis::Report run = RunExample(1);
  ASSERT_EQ(run.processes.size(), 1u);
  ASSERT_EQ(run.steps.size(), 200u);
  const ClassChecks c = CheckClasses(run);
  for (const CheckRate& r : kClassCheckRates) {
    if (r.per_run) {
      EXPECT_TRUE(c.*(r.field)) << r.name << "\n" << c.why << DescribeSites(run);
    }
  }
}

// Over seeds (MEMSTEP_SEED: the sampler's draws; the leak hunt also follows
// measured time, so runs are close to, not exactly, reproducible): the
// leak's 95 % rate interval covers 64 KiB/step and its 95 % interval of the
// live bytes at exit covers 200 x 64 KiB in at least the binomial bound of
// the seeds (tests/coverage_bound.h) at a false-failure rate of 1e-4 per
// check: with 20 seeds, 14 (P(Binomial(20, 0.95) < 14) = 3.4e-5). The leak
// hunt follows measured time, so a CI run is treated as a fresh draw and its
// chance of failing by chance counts toward the suite's (docs/testing.md).
// A seed whose leak is not LEAK counts as a miss.
int Seeds() {
  const char* e = getenv("MEMSTEP_COVERAGE_TEST_SEEDS");  // more, to measure
  return e != nullptr && atoi(e) > 0 ? atoi(e) : 20;
}
// The first seed: 101 (CI); MEMSTEP_COVERAGE_TEST_FIRST_SEED measures on others.
uint64_t FirstSeed() {
  const char* e = getenv("MEMSTEP_COVERAGE_TEST_FIRST_SEED");
  return e != nullptr && atoi(e) > 0 ? static_cast<uint64_t>(atoi(e)) : 101;
}

// Cost: each run is the example's own work, about 1.4 s of CPU with or
// without memstep (page faults of its large buffers, mostly), so the
// programs run side by side, one per core (at most 4): the seeds are
// independent processes either way, and the hunt's budget is a share of
// each process's own step time. The traces are analysed one by one in this
// process. On a machine loaded 8x (2 cores shared by a dozen jobs) the test
// took 130-278 s; its ctest timeout is 600 s (tests/e2e/CMakeLists.txt).
TEST(ExampleTest, LeakIntervalsCoverTheTruthOverSeeds) {
  const int kSeeds = Seeds();
  const uint64_t first_seed = FirstSeed();
  std::vector<std::unique_ptr<TempDir>> dirs;
  std::vector<ChildResult> results(static_cast<size_t>(kSeeds));
  for (int i = 0; i < kSeeds; ++i) dirs.push_back(std::make_unique<TempDir>());
  {
    const int parallel = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
    std::atomic<int> next{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < parallel; ++w) {
      workers.emplace_back([&] {
        for (int i = next++; i < kSeeds; i = next++) {
          results[static_cast<size_t>(i)] =
              RunExampleChild(*dirs[static_cast<size_t>(i)], first_seed + static_cast<uint64_t>(i));
        }
      });
    }
    for (std::thread& t : workers) t.join();
  }
  int rate_covered = 0, end_covered = 0, leak = 0;
  int passed[std::size(kClassCheckRates)] = {};
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(kSeeds); ++seed) {
    const size_t i = seed - 1;
    analysis::Report run = Analyze(*dirs[i], first_seed + seed - 1, results[i]);
    const ClassChecks c = CheckClasses(run);
    for (size_t k = 0; k < std::size(kClassCheckRates); ++k) {
      passed[k] += c.*(kClassCheckRates[k].field);
    }
    if (!c.why.empty())
      printf("seed %d: %s", static_cast<int>(first_seed + seed - 1), c.why.c_str());
    auto sites = SitesIn(run, "RecordMetricsHistory");
    if (sites.size() != 1) {
      printf("seed %d: %zu leak sites\n", static_cast<int>(first_seed + seed - 1), sites.size());
      continue;  // a miss of both intervals (and of leak_site above)
    }
    const analysis::Site& s = *sites[0];
    const bool is_leak = s.growth.cls == analysis::GrowthClass::kLeak;
    leak += is_leak;
    const double truth_high = s.growth.calibrated ? kLeakRate + kUsableOverhead : kLeakRate;
    const bool rate_ok =
        is_leak && s.growth.slope_low <= truth_high && s.growth.slope_high >= kLeakRate;
    const bool end_ok = s.live_bytes_end_high >= 0 && s.live_bytes_end_low <= kLeakAtExit &&
                        kLeakAtExit <= s.live_bytes_end_high;
    rate_covered += rate_ok;
    end_covered += end_ok;
    if (!rate_ok || !end_ok) {
      printf("seed %d: rate %.0f [%.0f, %.0f]%s, live at exit %.0f [%.0f, %.0f]\n",
             static_cast<int>(first_seed + seed - 1), s.growth.slope, s.growth.slope_low,
             s.growth.slope_high, is_leak ? "" : " (not LEAK)", s.live_bytes_end,
             s.live_bytes_end_low, s.live_bytes_end_high);
    }
  }
  const int min = testing::MinCovered(kSeeds, 0.95, 1e-4);
  printf(
      "example, %d seeds: LEAK %d; 95%% interval covers the rate in %d, the live bytes at exit "
      "in %d (accept >= %d)\n",
      kSeeds, leak, rate_covered, end_covered, min);
  EXPECT_GE(rate_covered, min);
  EXPECT_GE(end_covered, min);
  // The class checks over the seeds: each passes in at least
  // MinCovered(seeds, 1 - its stated rate, 1e-4) of them.
  for (size_t k = 0; k < std::size(kClassCheckRates); ++k) {
    const CheckRate& r = kClassCheckRates[k];
    // A rate of 0 (an exact check) must pass in every seed.
    const int want = r.rate > 0 ? testing::MinCovered(kSeeds, 1 - r.rate, 1e-4) : kSeeds;
    printf("class check %s: passed in %d of %d seeds (stated failure rate %g; accept >= %d)\n",
           r.name, passed[k], kSeeds, r.rate, want);
    EXPECT_GE(passed[k], want) << r.name;
  }
}

}  // namespace
}  // namespace memstep::e2e

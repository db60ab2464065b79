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
#include <cstdio>
#include <cstdlib>
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

// One run, seeded, at the defaults: each planted class at its site. The
// leak's rate must be within its interval; a 95 % interval misses the truth
// in 1 run of 20 by design, so this single run checks the 99.9 % interval of
// the same estimate (the 95 % half-width x 3.29 / 1.96: a false failure in
// 1 run of 1,000); the 95 % coverage itself is measured over seeds below.
TEST(ExampleTest, EachPlantedClassAtItsSite) {
  analysis::Report run = RunExample(1);
  ASSERT_EQ(run.processes.size(), 1u);
  ASSERT_EQ(run.steps.size(), 200u);
  const analysis::ProcessSummary& p = run.processes[0];
  // The warm-up ends with the workspace's 10 steps (the changepoint of the
  // exact heap; the cache's fill continues after it).
  EXPECT_GE(p.warmup_steps, 10u);
  EXPECT_LE(p.warmup_steps, 24u);
  EXPECT_EQ(p.live_growth.cls, analysis::GrowthClass::kLeak) << p.live_growth.reason;
  EXPECT_NEAR(p.live_growth.slope, 64 * 1024 + 32, 64) << p.live_growth.reason;

  auto leak = SitesIn(run, "RecordMetricsHistory");
  ASSERT_EQ(leak.size(), 1u) << DescribeSites(run);
  const analysis::Growth& g = leak[0]->growth;
  EXPECT_EQ(g.cls, analysis::GrowthClass::kLeak) << g.reason << "\n" << DescribeSites(run);
  const double wide = (kZ999 / kZ95);
  const double low = g.slope - wide * (g.slope - g.slope_low);
  const double high = g.slope + wide * (g.slope_high - g.slope);
  EXPECT_LE(low, kLeakRate + kUsableOverhead)
      << g.slope << " [" << g.slope_low << ", " << g.slope_high << "]";
  EXPECT_GE(high, kLeakRate) << g.slope << " [" << g.slope_low << ", " << g.slope_high << "]";

  for (const char* f : {"WarmupWorkspace", "AllocateOptimizerState"}) {
    auto sites = SitesIn(run, f);
    ASSERT_FALSE(sites.empty()) << f << "\n" << DescribeSites(run);
    for (const analysis::Site* s : sites) {
      EXPECT_EQ(s->growth.cls, analysis::GrowthClass::kWarmupOnly) << f << ": " << s->growth.reason;
    }
  }
  auto cache = SitesIn(run, "TokenCache::Insert");
  ASSERT_EQ(cache.size(), 1u) << DescribeSites(run);
  EXPECT_EQ(cache[0]->growth.cls, analysis::GrowthClass::kBoundedGrowth) << cache[0]->growth.reason;
  for (const char* f : {"Forward", "Backward", "LoadBatch"}) {
    auto sites = SitesIn(run, f);
    ASSERT_FALSE(sites.empty()) << f << "\n" << DescribeSites(run);
    for (const analysis::Site* s : sites) {
      EXPECT_EQ(s->growth.cls, analysis::GrowthClass::kNoTrend) << f << ": " << s->growth.reason;
    }
  }
  // Nothing else leaks: at the stated false-LEAK rate (1e-3 per site the
  // classifier tests, tests/coverage_bound.h), more than MaxFalseLeaks of the
  // other tested sites are LEAK with probability <= 1e-4.
  int other_leaks = 0, other_tested = 0;
  for (const analysis::Site& s : run.sites) {
    if (&s == leak[0]) continue;
    other_leaks += s.growth.cls == analysis::GrowthClass::kLeak;
    other_tested += ClassifierTested(s);
  }
  EXPECT_LE(other_leaks, testing::MaxFalseLeaks(other_tested)) << DescribeSites(run);
  // No LEAK (and no RSS verdict) is printed with a 95 % interval that
  // reaches 0 (issue 9 item 4; the report prints these very fields).
  for (const analysis::Site& s : run.sites) {
    if (s.growth.cls == analysis::GrowthClass::kLeak) {
      EXPECT_GT(s.growth.slope_low, 0) << s.growth.reason;
    }
  }
  EXPECT_GT(p.live_growth.slope_low, 0) << p.live_growth.reason;
  const std::string rss_class = analysis::RssClassName(p.rss_growth, p.rss_explain);
  if (rss_class != "NO_TREND" && rss_class != "INSUFFICIENT" && rss_class != "WARMUP_ONLY" &&
      rss_class != "BOUNDED_GROWTH") {
    EXPECT_GT(p.rss_growth.slope_low, 0) << rss_class << ": " << p.rss_growth.reason;
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

// Cost: each run is the example's own work, about 1.4 s of CPU with or
// without memstep (page faults of its large buffers, mostly), so the
// programs run side by side, one per core (at most 4): the seeds are
// independent processes either way, and the hunt's budget is a share of
// each process's own step time. The traces are analysed one by one in this
// process. On a machine loaded 8x (2 cores shared by a dozen jobs) the test
// took 130-278 s; its ctest timeout is 600 s (tests/e2e/CMakeLists.txt).
TEST(ExampleTest, LeakIntervalsCoverTheTruthOverSeeds) {
  const int kSeeds = Seeds();
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
              RunExampleChild(*dirs[static_cast<size_t>(i)], 101 + static_cast<uint64_t>(i));
        }
      });
    }
    for (std::thread& t : workers) t.join();
  }
  int rate_covered = 0, end_covered = 0, leak = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(kSeeds); ++seed) {
    const size_t i = seed - 1;
    analysis::Report run = Analyze(*dirs[i], 100 + seed, results[i]);
    auto sites = SitesIn(run, "RecordMetricsHistory");
    ASSERT_EQ(sites.size(), 1u) << "seed " << 100 + seed << "\n" << DescribeSites(run);
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
             static_cast<int>(100 + seed), s.growth.slope, s.growth.slope_low, s.growth.slope_high,
             is_leak ? "" : " (not LEAK)", s.live_bytes_end, s.live_bytes_end_low,
             s.live_bytes_end_high);
    }
  }
  const int min = testing::MinCovered(kSeeds, 0.95, 1e-4);
  printf(
      "example, %d seeds: LEAK %d; 95%% interval covers the rate in %d, the live bytes at exit "
      "in %d (accept >= %d)\n",
      kSeeds, leak, rate_covered, end_covered, min);
  EXPECT_GE(rate_covered, min);
  EXPECT_GE(end_covered, min);
}

}  // namespace
}  // namespace memstep::e2e

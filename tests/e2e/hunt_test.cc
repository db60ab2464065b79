// The leak hunt end to end (docs/analysis.md "Leak hunt"): e2e_planted "hunt"
// runs a training-like loop under the default settings; a small leak must be
// named at its site (PlantedHuntLeak) within kHuntSteps steps, and leak-free
// runs must name no site.
//
// Statistical goal (issue 9): a 10 KiB/step leak of small objects is named
// within 60 steps in >= 95 % of seeds, with < 1 % false LEAK sites on
// leak-free runs. Each run is seeded (MEMSTEP_SEED) so that a failure can be
// replayed; the hunt's rate also follows measured time, so a replay is close
// but not bit-identical. Measured over 200 seeds on a 2-core Xeon: see
// docs/analysis.md.

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "src/analysis/analysis.h"
#include "src/format/format.h"
#include "src/reader/reader.h"
#include "tests/coverage_bound.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/planted_facts.h"

namespace memstep::e2e {
namespace {

using namespace facts;  // NOLINT

struct HuntRun {
  bool ok = false;
  int leak_sites = 0;         // LEAK sites in PlantedHuntLeak
  int leak2_sites = 0;        // LEAK sites in PlantedHuntLeak2 (the second leak)
  int other_leak_sites = 0;   // LEAK sites anywhere else
  int other_tested = 0;       // sites elsewhere that the classifier tested
  int tested = 0;             // all sites the classifier tested
  int hunts = 0;              // HUNT begin records
  int explained = 0;          // HUNT end records with the outcome "explained"
  int residual = 0;           // residual hunts (a begin at an explained end's step)
  int residual_reported = 0;  // hunts the analysis reports as residual
  double rate = 0;            // the named site's rate, bytes/step
  double rate_low = 0, rate_high = 0;
  double rate2_low = 0, rate2_high = 0;  // the second leak's site's interval
  std::vector<uint64_t> begins;          // steps at which hunts (not residual) began
};

// Whether a frame of `s` is in `function` (a name and its opening
// parenthesis: PlantedHuntLeak( is not PlantedHuntLeak2().
bool InFunction(const analysis::Site& s, const char* function) {
  for (const analysis::Frame& f : s.frames) {
    if (f.function.find(function) != std::string::npos) return true;
  }
  return false;
}
bool InLeakFunction(const analysis::Site& s) { return InFunction(s, "PlantedHuntLeak("); }
bool InLeak2Function(const analysis::Site& s) { return InFunction(s, "PlantedHuntLeak2("); }

// `budget`: MEMSTEP_HUNT_BUDGET (percent), 0 for the default. `leak2` bytes
// a step in `size2`-byte objects: a second leak (0: none).
HuntRun RunHunt(uint64_t seed, long leak, long size, int budget = 0, long leak2 = 0, long size2 = 1,
                long steps = 0, long from2 = 0) {
  HuntRun out;
  TempDir dir;
  std::vector<std::string> env = TracedEnv(dir.path(), 0);
  env.push_back(absl::StrCat("MEMSTEP_SEED=", seed));
  if (budget != 0) env.push_back(absl::StrCat("MEMSTEP_HUNT_BUDGET=", budget));
  std::vector<std::string> argv = {PlantedProgram(), "hunt", std::to_string(leak),
                                   std::to_string(size)};
  if (leak2 > 0 || steps > 0) {
    argv.push_back(std::to_string(leak2));
    argv.push_back(std::to_string(size2));
  }
  if (steps > 0) {
    argv.push_back(std::to_string(steps));
    argv.push_back(std::to_string(from2));
  }
  absl::StatusOr<reader::Trace> t = RunForOneTrace(dir, argv, env);
  EXPECT_TRUE(t.ok()) << "seed " << seed << ": " << t.status();
  if (!t.ok()) return out;
  for (size_t i = 0; i < t->hunts.size(); ++i) {
    const reader::Hunt& h = t->hunts[i];
    out.hunts += h.phase == 0;
    out.explained += h.phase == 1 && h.outcome == format::kHuntExplained;
    const bool residual = h.phase == 0 && i > 0 && t->hunts[i - 1].phase == 1 &&
                          t->hunts[i - 1].outcome == format::kHuntExplained &&
                          t->hunts[i - 1].step == h.step;
    out.residual += residual;
    if (h.phase == 0 && !residual) out.begins.push_back(h.step);
  }
  absl::StatusOr<analysis::Report> report = analysis::AnalyzeRun(dir.path());
  EXPECT_TRUE(report.ok()) << report.status();
  if (!report.ok()) return out;
  for (const analysis::ProcessSummary& p : report->processes) {
    for (const analysis::ProcessSummary::Hunt& h : p.hunts) out.residual_reported += h.residual;
  }
  for (const analysis::Site& s : report->sites) {
    out.tested += ClassifierTested(s);
    if (!InLeakFunction(s) && !InLeak2Function(s)) out.other_tested += ClassifierTested(s);
    if (s.growth.cls != analysis::GrowthClass::kLeak) continue;
    if (InLeak2Function(s)) {
      ++out.leak2_sites;
      out.rate2_low = s.growth.slope_low;
      out.rate2_high = s.growth.slope_high;
    } else if (InLeakFunction(s)) {
      ++out.leak_sites;
      out.rate = s.growth.slope;
      out.rate_low = s.growth.slope_low;
      out.rate_high = s.growth.slope_high;
    } else {
      ++out.other_leak_sites;
    }
  }
  out.ok = true;
  return out;
}

// The exact series the hunt starts from must be the program's alone: with
// dense sampling the writer thread compresses many chunks, and zstd's
// per-chunk context (~0.5 MiB, malloc'd and freed) once showed up in it as
// steps of +-0.5 MiB lasting ~7 steps. Every step after the first keeps the
// same 20 blocks: the step-to-step change is the same within 1 KiB.
TEST(HuntTest, ExactSeriesHasNothingOfTheProfiler) {
  TempDir dir;
  std::vector<std::string> env = TracedEnv(dir.path(), 4096);
  env.push_back("MEMSTEP_PROGRESSIVE=0");
  ChildResult r = RunChild({PlantedProgram(), "hunt", "10240", "512"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> files = dir.Files(".trace");
  ASSERT_EQ(files.size(), 1u);
  absl::StatusOr<reader::Trace> t = reader::ReadTraceFile(files[0]);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<int64_t> live;
  for (const reader::Event& e : t->events) {
    if (e.tag == format::kTagStep && e.phase == 1) {
      live.push_back(static_cast<int64_t>(t->counters[e.counters].live_bytes));
    }
  }
  ASSERT_EQ(live.size(), static_cast<size_t>(kHuntSteps));
  std::vector<int64_t> deltas;
  for (size_t i = 2; i < live.size(); ++i) deltas.push_back(live[i] - live[i - 1]);
  std::vector<int64_t> sorted = deltas;
  std::sort(sorted.begin(), sorted.end());
  const int64_t median = sorted[sorted.size() / 2];
  EXPECT_GE(median, 10240);
  for (size_t i = 0; i < deltas.size(); ++i) {
    EXPECT_LT(std::llabs(deltas[i] - median), 1024) << "step " << i + 2;
  }
}

// 10 KiB/step in 512-byte objects, 30 seeds. Each check fails by chance with
// probability <= 1e-4 (the leak hunt follows measured time, so every CI run
// is a fresh draw; docs/testing.md). Stated rates: the site is named in 99 %
// of seeds (measured: 200 of 200), so the test accepts down to
// MinCovered(30, 0.99, 1e-4) = 26 (P(Binomial(30, 0.99) < 26) = 1.2e-5; the
// earlier bound, 28 of 30, was the 95 % mean and failed a 95 % rate 19 % of
// the time); its 95 % interval covers the truth (the binomial bound over the
// named seeds, 23 of 30). Other LEAK sites: at most MaxFalseLeaks of the
// sites the classifier tested elsewhere (the stated false-LEAK rate, 1e-3
// per tested site, tests/coverage_bound.h: a false failure in <= 1e-4 of
// runs; 0 measured in 200 seeds).
int Seeds() {
  const char* e = getenv("MEMSTEP_HUNT_TEST_SEEDS");  // more, to measure the rates
  return e != nullptr && atoi(e) > 0 ? atoi(e) : 30;
}

// Sites and the exact heap count one unit, usable bytes (docs/analysis.md
// "Bytes: usable, not requested"): at T = 1 every block is a sample served
// from memstep's region, yet the exact heap grows each step by what glibc
// would have counted for the leak's 20 blocks of 512 B (20 x 520 B, the
// region's RegionCharge), and the leak's site holds 60 steps of that.
TEST(HuntTest, SampledBlocksCountTheirUsableSizeInSitesAndExactHeap) {
  TempDir dir;
  ChildResult r =
      RunChild({PlantedProgram(), "hunt", "10240", "512"}, TracedEnv(dir.path(), 1), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  absl::StatusOr<analysis::Report> report = analysis::AnalyzeRun(dir.path());
  ASSERT_TRUE(report.ok()) << report.status();
  const double per_step = 20 * Usable(512);
  ASSERT_EQ(per_step, 10400);
  const std::vector<analysis::StepRow>& steps = report->steps;
  ASSERT_GE(steps.size(), 50u);
  for (size_t k = 2; k < steps.size(); ++k) {
    EXPECT_EQ(static_cast<double>(steps[k].live_bytes_end) -
                  static_cast<double>(steps[k - 1].live_bytes_end),
              per_step)
        << "step " << k;
  }
  double leak_live = 0;
  for (const analysis::Site& s : report->sites) {
    if (InLeakFunction(s)) leak_live += s.live_bytes_end;
  }
  EXPECT_NEAR(leak_live, static_cast<double>(steps.size()) * per_step, 0.5);
}

// A buffer that grows by reallocation (4 KiB a step) beside 100 KiB of
// blocks made anew every 20 steps (an epoch's index list). The hunt's
// tally counts long-lived samples, so it never sees the buffer; the renewed
// blocks' new copy, sampled densely by the hunt (their old one, made before
// it, was not in the tally), "grew" their site by 100 KiB in one step, which
// explained the buffer's growth and ended the hunt; T then went back to
// 512 KiB and the buffer was sampled at too few step ends to be named. A
// site's growth counts only from samples born in 3 steps at least
// (sites.cc kHuntMinSteps): no hunt ends "explained", and the report names
// the buffer (a replaced LEAK, docs/analysis.md). 5 seeds: named in all (a
// stated 99 % each: MinCovered(5, 0.99, 1e-4) = 4; measured 5 of 5, and 0
// of 5 explained; without the rule, explained in 5 of 5 and named in 1).
TEST(HuntTest, ABufferGrownByReallocationIsNamedBesideRenewedBlocks) {
  constexpr int kSeeds = 5;
  int explained = 0, named = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    TempDir dir;
    std::vector<std::string> env = TracedEnv(dir.path(), 0);
    env.push_back(absl::StrCat("MEMSTEP_SEED=", seed));
    absl::StatusOr<reader::Trace> t = RunForOneTrace(dir, {PlantedProgram(), "hunt-grow"}, env);
    ASSERT_TRUE(t.ok()) << t.status();
    for (const reader::Hunt& h : t->hunts) {
      explained += h.phase == 1 && h.outcome == format::kHuntExplained;
    }
    absl::StatusOr<analysis::Report> report = analysis::AnalyzeRun(dir.path());
    ASSERT_TRUE(report.ok()) << report.status();
    for (const analysis::Site& s : report->sites) {
      bool in_buffer = false;
      for (const analysis::Frame& f : s.frames) {
        in_buffer |= f.function.find("PlantedGrowBuffer") != std::string::npos;
      }
      if (!in_buffer || s.growth.cls != analysis::GrowthClass::kLeak) continue;
      EXPECT_TRUE(s.growth.replaced) << s.growth.reason;
      ++named;
      printf("seed %d: %.0f B/step [%.0f, %.0f]\n", static_cast<int>(seed), s.growth.slope,
             s.growth.slope_low, s.growth.slope_high);
    }
  }
  printf("hunt-grow: %d of %d seeds named the buffer, %d hunts explained\n", named, kSeeds,
         explained);
  EXPECT_EQ(explained, 0);
  EXPECT_GE(named, testing::MinCovered(kSeeds, 0.99, 1e-4));
}

TEST(HuntTest, SmallLeakIsNamedAtItsSite) {
  const int kSeeds = Seeds();
  constexpr long kLeak = 10 * 1024;
  int named = 0, hunted = 0, covered = 0, false_sites = 0, tested = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(kSeeds); ++seed) {
    HuntRun r = RunHunt(seed, kLeak, 512);
    ASSERT_TRUE(r.ok) << "seed " << seed;
    hunted += r.hunts > 0;
    named += r.leak_sites == 1;
    // The truth: 20 x 520 B/step, malloc's usable size of 20 requests of
    // 512 B (10 KiB/step requested), which the sites' samples and the exact
    // counters both count; 2 % slack for the program's other few bytes per step.
    const double truth = 20 * Usable(512);
    covered += r.leak_sites == 1 && r.rate_low <= 1.02 * truth && 0.98 * truth <= r.rate_high;
    false_sites += r.other_leak_sites;
    tested += r.other_tested;
    if (r.leak_sites != 1)
      printf("seed %d: not named (replay with MEMSTEP_SEED)\n", static_cast<int>(seed));
  }
  printf(
      "hunt: %d of %d seeds hunted, named %d, interval covers 10 KiB/step in %d, %d other LEAK "
      "sites of %d tested (accept <= %d)\n",
      hunted, kSeeds, named, covered, false_sites, tested, testing::MaxFalseLeaks(tested));
  EXPECT_EQ(hunted, kSeeds);
  EXPECT_GE(named, testing::MinCovered(kSeeds, 0.99, 1e-4));
  // The named site's 95 % rate interval covers the truth in 95 % of the
  // seeds that name it: at least the binomial bound (tests/coverage_bound.h,
  // a false failure in <= 1e-4 of runs).
  EXPECT_GE(covered, testing::MinCovered(named, 0.95, 1e-4));
  EXPECT_LE(false_sites, testing::MaxFalseLeaks(tested));
}

// The smallest leak the issue names, 1 KiB/step of 64-byte objects, over the
// same 60 steps: the exact heap grows only 60 KiB in all, and the site has
// samples almost only from the hunt's steps. Among 1,100 churned objects per
// 11 ms step its T must reach 1-2 KiB, about 600 samples a step: at the
// default budget (10 %) that fits only while a sample costs under ~2 us. On
// this project's 2-core machines a sample costs 0.7-1.8 us at some times and
// 3-6 us at others (the hunt's stack_ns; same binary, same seeds): named in
// 10 of 10 seeds, then 4-5 of 10, with the report then saying "rerun with
// --hunt-budget 30". So the test runs at a budget of 50 %, where T reaches
// 2 KiB even at 6 us a sample (~25 samples of the leak in the hunt's 50
// steps); the default budget is held to the 10 KiB/step goal above. 10
// seeds: named in at least MinCovered(10) = 6 at a stated 95 % (a false
// failure in 6.4e-5 of runs; 10 of 10 measured at both costs); other LEAK
// sites at most MaxFalseLeaks of those tested (1e-4).
TEST(HuntTest, TinyLeakIsNamedAtItsSite) {
  constexpr int kSeeds = 10;
  constexpr long kLeak = 1024;
  constexpr int kBudget = 50;
  int named = 0, false_sites = 0, tested = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(kSeeds); ++seed) {
    HuntRun r = RunHunt(200 + seed, kLeak, 64, kBudget);
    ASSERT_TRUE(r.ok) << "seed " << seed;
    named += r.leak_sites == 1;
    false_sites += r.other_leak_sites;
    tested += r.other_tested;
    if (r.leak_sites != 1) printf("seed %d: not named\n", 200 + static_cast<int>(seed));
  }
  printf("1 KiB/step: named in %d of %d seeds, %d other LEAK sites of %d tested (accept <= %d)\n",
         named, kSeeds, false_sites, tested, testing::MaxFalseLeaks(tested));
  EXPECT_GE(named, testing::MinCovered(kSeeds));
  EXPECT_LE(false_sites, testing::MaxFalseLeaks(tested));
}

// A site explains growth only when its growth stands out of its own sampling
// noise (sites.cc SitesHuntExplain). At a 3 % budget T stays at 8-16 KiB, a
// 1 KiB/step leak of 64 B objects gets a few samples, and the 64 churned
// 8 KiB buffers' tally moves by tens of KiB from the draws alone: without the
// rule that drift "explained" the leak (3 of 6 seeds, "sites 262 KiB of
// 19.2 KiB") and the hunt ended before the leak had samples. So a hunt may
// end "explained" only where the leak is then named. Stated rate of such a
// run with the rule: 1 % (measured 0 of 30, seeds 301-330); 20 seeds accept
// MaxSuccesses(20, 0.01, 1e-4) = 3 (a false failure in <= 1e-4 of runs),
// which a 50 % rate (without the rule: 5 of 10 measured) passes with
// probability 1.3e-3.
TEST(HuntTest, NoisySitesNeverExplainASmallLeak) {
  constexpr int kSeeds = 20;
  int false_explained = 0;
  for (uint64_t seed = 301; seed < 301 + kSeeds; ++seed) {
    HuntRun r = RunHunt(seed, 1024, 64, 3);
    ASSERT_TRUE(r.ok) << "seed " << seed;
    if (r.explained > 0 && r.leak_sites != 1) {
      ++false_explained;
      printf("seed %d: hunt explained, leak not named\n", static_cast<int>(seed));
    }
  }
  EXPECT_LE(false_explained, testing::MaxSuccesses(kSeeds, 0.01, 1e-4));
}

// Two leaks at once (docs/analysis.md "Leak hunt", the residual hunt): 16
// KiB/step in 512 B objects and 2 KiB/step in 256 B ones. The first hunt
// runs at T = 4-8 KiB, where the second leak draws a sample every two to
// four steps; it ends explained with the larger site covering most of the
// growth (that site is then calibrated to the whole exact rate), and the
// smaller leak's growth hides in the tolerance and in the larger site's
// sampling noise. The residual hunt goes on at the rate that could hide
// there. At a budget of 50 % (as TinyLeakIsNamedAtItsSite: T then reaches its
// aim whatever a stack costs on the machine) over seeds 401-430, measured:
// the second leak named in 30 with the residual hunt, in 3 without it (the
// library of c947aae); at the default budget, 29 and 1. Stated rate: 90 %;
// 30 seeds accept MinCovered(30, 0.9, 1e-4) = 20 (a false failure in <= 1e-4
// of runs), which the rate without the residual hunt (about 10 %) passes
// with probability below 1e-12. The larger leak: named in every seed (a
// stated 99 %, as above); other LEAK sites at most MaxFalseLeaks of those
// tested; and the report marks each residual hunt (`residual`).
// Both named sites are calibrated to the exact growth together (calibrate.h:
// each keeps its sampled share); each one's 95 % interval must still cover
// its own leak in 95 % of the seeds that name it (MinCovered, a false
// failure in <= 1e-4 of runs). Measured over seeds 1-200: the larger's
// covered in 199 of 200, the smaller's in 195 of 198 (budget 50 %) and 187
// of 190 (default budget).
TEST(HuntTest, ASecondSmallerLeakIsNamedToo) {
  constexpr int kSeeds = 30;
  constexpr int kBudget = 50;
  // The truths: malloc's usable sizes of the requests (as SmallLeakIsNamed-
  // AtItsSite), 2 % slack for the program's other few bytes per step.
  const double truth = 32 * Usable(512), truth2 = 8 * Usable(256);
  int named = 0, named2 = 0, covered = 0, covered2 = 0, residual = 0, false_sites = 0, tested = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(kSeeds); ++seed) {
    HuntRun r = RunHunt(400 + seed, 16 * 1024, 512, kBudget, 2 * 1024, 256);
    ASSERT_TRUE(r.ok) << "seed " << seed;
    named += r.leak_sites == 1;
    named2 += r.leak2_sites == 1;
    covered += r.leak_sites == 1 && r.rate_low <= 1.02 * truth && 0.98 * truth <= r.rate_high;
    covered2 += r.leak2_sites == 1 && r.rate2_low <= 1.02 * truth2 && 0.98 * truth2 <= r.rate2_high;
    residual += r.residual > 0;
    EXPECT_EQ(r.residual_reported, r.residual) << "seed " << seed;
    false_sites += r.other_leak_sites;
    tested += r.other_tested;
    if (r.leak2_sites != 1)
      printf("seed %d: second leak not named\n", 400 + static_cast<int>(seed));
  }
  printf(
      "two leaks: the larger named in %d of %d seeds, the smaller in %d (accept >= %d), %d "
      "residual hunts, %d other LEAK sites of %d tested (accept <= %d); intervals cover in %d "
      "and %d\n",
      named, kSeeds, named2, testing::MinCovered(kSeeds, 0.9, 1e-4), residual, false_sites, tested,
      testing::MaxFalseLeaks(tested), covered, covered2);
  EXPECT_GE(named, testing::MinCovered(kSeeds, 0.99, 1e-4));
  EXPECT_GE(named2, testing::MinCovered(kSeeds, 0.9, 1e-4));
  EXPECT_GE(covered, testing::MinCovered(named, 0.95, 1e-4));
  EXPECT_GE(covered2, testing::MinCovered(named2, 0.95, 1e-4));
  EXPECT_LE(false_sites, testing::MaxFalseLeaks(tested));
}

// A leak that a hunt found is not hunted again while it goes on at the rate
// the hunt found (docs/analysis.md "Leak hunt", item 5): before, a hunt began
// again kHuntCooldown steps after each one ended, every ~50 steps for as
// long as the run leaked, at its full budget for nothing new. A
// new leak beside it, from step 80 at 4 KiB/step (above kHuntKnownShare of
// the first), rises beyond it: a hunt begins after step 80 and names it.
// Stated rates: a steady run hunts again in 1 % of seeds (measured 0 of
// 10; before, 10 of 10); 10 seeds accept MaxSuccesses(10, 0.01, 1e-4) = 3.
// The new leak: a hunt after step 80 and the leak named in 90 % (measured
// 10 of 10 each), accepting MinCovered(10, 0.9, 1e-4) = 4.
TEST(HuntTest, AFoundLeakIsNotHuntedAgainButANewOneIs) {
  constexpr int kSeeds = 10;
  constexpr long kSteps = 160, kFrom = 80;
  int again = 0, hunted_new = 0, named_new = 0, named = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(kSeeds); ++seed) {
    HuntRun steady = RunHunt(500 + seed, 10 * 1024, 512, 0, 0, 1, kSteps, 0);
    ASSERT_TRUE(steady.ok) << "seed " << seed;
    named += steady.leak_sites == 1;
    again += steady.begins.size() > 1;
    if (steady.begins.size() != 1) {
      printf("seed %d: steady run, hunts began at %s\n", 500 + static_cast<int>(seed),
             absl::StrJoin(steady.begins, ",").c_str());
    }
    HuntRun late = RunHunt(500 + seed, 10 * 1024, 512, 0, 4 * 1024, 256, kSteps, kFrom);
    ASSERT_TRUE(late.ok) << "seed " << seed;
    const bool after = std::any_of(late.begins.begin(), late.begins.end(),
                                   [](uint64_t step) { return step > kFrom; });
    hunted_new += after;
    named_new += late.leak2_sites == 1;
    if (!after || late.leak2_sites != 1) {
      printf("seed %d: late leak, hunts began at %s, named %d\n", 500 + static_cast<int>(seed),
             absl::StrJoin(late.begins, ",").c_str(), late.leak2_sites);
    }
  }
  printf(
      "found leak: hunted again in %d of %d steady runs (accept <= %d); a new leak from step %ld "
      "hunted in %d, named in %d (accept >= %d)\n",
      again, kSeeds, testing::MaxSuccesses(kSeeds, 0.01, 1e-4), kFrom, hunted_new, named_new,
      testing::MinCovered(kSeeds, 0.9, 1e-4));
  EXPECT_GE(named, testing::MinCovered(kSeeds, 0.99, 1e-4));
  EXPECT_LE(again, testing::MaxSuccesses(kSeeds, 0.01, 1e-4));
  EXPECT_GE(hunted_new, testing::MinCovered(kSeeds, 0.9, 1e-4));
  EXPECT_GE(named_new, testing::MinCovered(kSeeds, 0.9, 1e-4));
}

// No leak, 30 seeds: at the stated false-LEAK rate (1e-3 per site the
// classifier tests, tests/coverage_bound.h) the LEAK sites number at most
// MaxFalseLeaks(tested) but with probability <= 1e-4. Measured: none in 200
// seeds.
TEST(HuntTest, LeakFreeRunsNameNoSite) {
  const int kSeeds = Seeds();
  int false_sites = 0, hunted = 0, tested = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(kSeeds); ++seed) {
    HuntRun r = RunHunt(1000 + seed, 0, 512);
    ASSERT_TRUE(r.ok) << "seed " << seed;
    false_sites += r.leak_sites + r.other_leak_sites;
    tested += r.tested;
    hunted += r.hunts > 0;
  }
  printf("no leak: %d of %d seeds hunted, %d LEAK sites of %d tested (accept <= %d)\n", hunted,
         kSeeds, false_sites, tested, testing::MaxFalseLeaks(tested));
  EXPECT_LE(false_sites, testing::MaxFalseLeaks(tested));
}

}  // namespace
}  // namespace memstep::e2e

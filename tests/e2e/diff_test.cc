// `memstep diff` and the churn view on real runs: the planted program's mode
// "churn" (planted_facts.h) under libmemstep.so, without and with a planted
// regression (PlantedChurnLeak keeping 128 KiB a step), compared by the CLI.

#include <sys/stat.h>

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/analysis/analysis.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/planted_facts.h"

namespace memstep::e2e {
namespace {

using namespace facts;  // NOLINT: the planted facts are what the tests assert

constexpr uint64_t kInterval = 16384;
constexpr long kLeak = 128 * 1024;  // the regression: bytes kept per step

// Runs mode churn with LEAK bytes kept per step at a fixed T and seed into
// DIR/NAME; returns that directory.
std::string RunChurn(const TempDir& dir, const std::string& name, long leak) {
  const std::string out = absl::StrCat(dir.path(), "/", name);
  EXPECT_EQ(mkdir(out.c_str(), 0755), 0);
  std::vector<std::string> env = TracedEnv(out, kInterval);
  env.push_back("MEMSTEP_PROGRESSIVE=0");
  ChildResult r = RunChild({PlantedProgram(), "churn", absl::StrCat(leak)}, env);
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

ChildResult Diff(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {MemstepCli(), "diff"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunChild(argv, {}, 120);
}

// The hot allocator's count per step is known exactly: kHotPerStep. With
// p = 1 - exp(-(kHotSize + 1)/T) per allocation, the estimate of the count
// over N = kHotSteps x kHotPerStep allocations has a standard error of
// sqrt(N (1 - p) / p); the estimate per step must be within 4.5 of them
// (two-sided false-failure rate 7e-6 per seed; the seed is fixed).
TEST(ChurnView, EstimatesThePlantedHotAllocator) {
  ASSERT_FALSE(MemstepCli().empty()) << "the memstep CLI is not built";
  TempDir dir;
  const std::string run = RunChurn(dir, "base", 0);
  absl::StatusOr<analysis::Report> r = analysis::AnalyzeRun(run);
  ASSERT_TRUE(r.ok()) << r.status();
  SiteTotals hot = FindSites(*r, "PlantedChurnHot");
  ASSERT_GT(hot.sites, 0) << DescribeSites(*r);
  const double p = -std::expm1(-(static_cast<double>(kHotSize) + 1) / kInterval);
  const double n = static_cast<double>(kHotSteps * kHotPerStep);
  const double se = std::sqrt(n * (1 - p) / p) / kHotSteps;
  const analysis::Site* site = nullptr;
  for (const analysis::Site& s : r->sites) {
    if (!s.frames.empty() && absl::StrContains(s.frames[0].function, "PlantedChurnHot")) site = &s;
  }
  ASSERT_NE(site, nullptr);
  EXPECT_NEAR(site->churn_count_per_step, kHotPerStep, 4.5 * se);
  EXPECT_NEAR(site->churn_bytes_per_step, kHotPerStep * static_cast<double>(kHotSize),
              4.5 * se * kHotSize);
  EXPECT_LT(site->churn_count_per_step_low, site->churn_count_per_step);
  EXPECT_GT(site->churn_count_per_step_high, site->churn_count_per_step);
  EXPECT_GT(site->churn_count_share, 0.8);

  // The view lists it first, in text, JSON and CSV.
  for (const char* format : {"text", "json", "csv"}) {
    ChildResult v =
        RunChild({MemstepCli(), "report", run, "--view", "churn", "--format", format}, {}, 120);
    ASSERT_EQ(v.exit_code, 0) << v.output;
    const size_t hot_at = v.output.find("PlantedChurnHot");
    ASSERT_NE(hot_at, std::string::npos) << format << "\n" << v.output;
    const size_t main_at = v.output.find("main");
    EXPECT_LT(hot_at, main_at) << format;
  }
}

// Exit codes of memstep diff on two real runs: 0 between two runs of the
// same program, 3 when NEW has the planted regression, 1 on bad input.
TEST(DiffCli, ExitCodesOnRealRuns) {
  ASSERT_FALSE(MemstepCli().empty()) << "the memstep CLI is not built";
  TempDir dir;
  const std::string base = RunChurn(dir, "base", 0);
  const std::string same = RunChurn(dir, "same", 0);
  const std::string leaky = RunChurn(dir, "new", kLeak);
  const std::vector<std::string> gates = {"--fail-on", "site_growth > +32KiB/step",
                                          "--fail-on", "peak(forward) > +50%",
                                          "--fail-on", "growth > +32KiB/step"};
  std::vector<std::string> args = {base, same};
  args.insert(args.end(), gates.begin(), gates.end());
  ChildResult r = Diff(args);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "Gates: 0 of 3 failed")) << r.output;

  args = {base, leaky};
  args.insert(args.end(), gates.begin(), gates.end());
  r = Diff(args);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "Gates: 3 of 3 failed")) << r.output;
  // The regression is the first call site: a new LEAK, by stack.
  const size_t sites = r.output.find("Call sites (matched by stack");
  ASSERT_NE(sites, std::string::npos) << r.output;
  const size_t first = r.output.find("  1. new ", sites);
  EXPECT_NE(first, std::string::npos) << r.output;
  EXPECT_LT(r.output.find("PlantedChurnLeak", sites), r.output.find("  2. ", sites)) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "memstep: gate failed: site_growth > +32KiB/step"));

  // The hot allocator matched across the two runs (other pids and addresses).
  r = Diff({base, leaky, "--format", "json"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "\"status\":\"matched\"")) << r.output;

  // Only the first 5 steps: the regression is too young to be a LEAK.
  r = Diff({base, leaky, "--steps", ":4", "--fail-on", "site_growth > +32KiB/step"});
  EXPECT_EQ(r.exit_code, 0) << r.output;

  r = Diff({base, absl::StrCat(dir.path(), "/missing")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = Diff({base, leaky, "--fail-on", "site_growth > 1MiB/step"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
}

}  // namespace
}  // namespace memstep::e2e

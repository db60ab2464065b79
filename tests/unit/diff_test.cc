// `memstep diff`: matching of processes, stages and call sites
// (src/analysis/diff.h), the relative --fail-on gates (gates.h) and the diff
// writers (src/report/diff_report.h), on hand-built reports.

#include "src/analysis/diff.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/analysis/gates.h"
#include "src/report/diff_report.h"

namespace memstep::analysis {
namespace {

using ::testing::HasSubstr;

constexpr double kKiB = 1024;
constexpr double kMiB = 1024 * 1024;

Frame F(uint64_t ip, const std::string& fn, const std::string& file, int line) {
  Frame f;
  f.ip = ip;
  f.function = fn;
  f.file = file;
  f.line = line;
  return f;
}

Site MakeSite(uint64_t id, uint32_t pid, std::vector<Frame> frames, double live, double growth = 0,
              GrowthClass cls = GrowthClass::kNoTrend) {
  Site s;
  s.id = id;
  s.pid = pid;
  s.frames = std::move(frames);
  s.live_bytes_end = live;
  s.growth.cls = cls;
  s.growth.slope = growth;
  return s;
}

ProcessSummary Proc(uint32_t pid, const std::string& rank, uint64_t peak) {
  ProcessSummary p;
  p.pid = pid;
  p.rank = rank;
  p.peak_bytes = peak;
  p.live_growth.window = 10;
  return p;
}

StagePeak Stage(uint32_t pid, const std::string& name, uint64_t peak) {
  StagePeak sp;
  sp.pid = pid;
  sp.stage = name;
  sp.peak_bytes_max = peak;
  sp.peak_bytes_median = peak;
  return sp;
}

// BASE: pid 10, forward peaks at 2 GiB; sites: Leak (a.cc:3) growing
// 16 KiB/step, Cache (b.cc:9). NEW: pid 99 (another pid, other addresses
// under ASLR), forward at 2.3 GiB; Leak grows 64 KiB/step, Cache is gone,
// Fresh (c.cc:1) is new and leaks 32 KiB/step.
struct Pair {
  Report base, next;
};

Pair Runs() {
  Pair p;
  p.base.path = "base";
  p.base.processes = {Proc(10, "", 3ull << 30)};
  p.base.stage_peaks = {Stage(10, "forward", 2ull << 30)};
  p.base.sites = {MakeSite(1, 10, {F(0x401000, "Leak", "a.cc", 3), F(0x402000, "main", "m.cc", 1)},
                           4 * kMiB, 16 * kKiB, GrowthClass::kLeak),
                  MakeSite(2, 10, {F(0x403000, "Cache", "b.cc", 9)}, 1 * kMiB)};
  p.next.path = "new";
  p.next.processes = {Proc(99, "", (3ull << 30) + (300ull << 20))};
  p.next.stage_peaks = {Stage(99, "forward", static_cast<uint64_t>(2.3 * (1ull << 30)))};
  p.next.sites = {
      MakeSite(1, 99, {F(0x7f001000, "Leak", "a.cc", 3), F(0x7f002000, "main", "m.cc", 1)},
               12 * kMiB, 64 * kKiB, GrowthClass::kLeak),
      MakeSite(2, 99, {F(0x7f005000, "Fresh", "c.cc", 1)}, 2 * kMiB, 32 * kKiB,
               GrowthClass::kLeak)};
  return p;
}

const SiteDiff* Find(const Diff& d, const std::string& fn) {
  for (const SiteDiff& s : d.sites) {
    if (!s.frames.empty() && s.frames[0].function == fn) return &s;
  }
  return nullptr;
}

TEST(DiffTest, MatchesSitesByStackNotAddress) {
  const Pair p = Runs();
  const Diff d = DiffReports(p.base, p.next);
  ASSERT_EQ(d.sites.size(), 3u);
  const SiteDiff* leak = Find(d, "Leak");
  ASSERT_NE(leak, nullptr);
  EXPECT_EQ(leak->status, "matched");
  EXPECT_EQ(leak->process, "process 0");
  EXPECT_EQ(leak->base_id, 1u);
  EXPECT_EQ(leak->new_id, 1u);
  EXPECT_DOUBLE_EQ(leak->growth.base, 16 * kKiB);
  EXPECT_DOUBLE_EQ(leak->growth.next, 64 * kKiB);
  EXPECT_DOUBLE_EQ(leak->growth.percent(), 300);
  EXPECT_DOUBLE_EQ(leak->live_bytes_end.delta(), 8 * kMiB);
  EXPECT_EQ(leak->frames[0].ip, 0x7f001000u);  // NEW's frames
  EXPECT_EQ(Find(d, "Cache")->status, "gone");
  EXPECT_EQ(Find(d, "Fresh")->status, "new");
  EXPECT_TRUE(std::isinf(Find(d, "Fresh")->growth.percent()));
  // Largest change first: Leak (48 KiB/step) before Fresh (32) before Cache.
  EXPECT_EQ(d.sites[0].frames[0].function, "Leak");
  EXPECT_EQ(d.sites[2].frames[0].function, "Cache");
}

TEST(DiffTest, ADifferentLineIsADifferentSite) {
  Pair p = Runs();
  p.next.sites[0].frames[0].line = 4;
  const Diff d = DiffReports(p.base, p.next);
  EXPECT_EQ(d.sites.size(), 4u);
  for (const SiteDiff& s : d.sites) EXPECT_NE(s.status, "matched");
}

TEST(DiffTest, SitesWithEqualStacksAreSummed) {
  Pair p = Runs();
  Site twin = p.next.sites[0];
  twin.id = 3;
  twin.stack_id = 77;
  twin.frames[1].ip = 0x7f009999;  // another return address, the same line
  twin.live_bytes_end = 1 * kMiB;
  twin.growth.slope = 8 * kKiB;
  p.next.sites.push_back(twin);
  const Diff d = DiffReports(p.base, p.next);
  const SiteDiff* leak = Find(d, "Leak");
  ASSERT_NE(leak, nullptr);
  EXPECT_DOUBLE_EQ(leak->live_bytes_end.next, 13 * kMiB);
  EXPECT_DOUBLE_EQ(leak->growth.next, 72 * kKiB);
  EXPECT_EQ(leak->new_id, 1u);  // the largest
}

TEST(DiffTest, ProcessesMatchByRankThenPidOrder) {
  Report base, next;
  base.processes = {Proc(5, "1", 100), Proc(6, "0", 200), Proc(7, "", 300), Proc(8, "", 400)};
  next.processes = {Proc(50, "0", 210), Proc(40, "1", 110), Proc(30, "", 310), Proc(90, "", 410),
                    Proc(95, "2", 1)};
  const Diff d = DiffReports(base, next);
  ASSERT_EQ(d.processes.size(), 5u);
  std::map<std::string, const ProcessDiff*> by;
  for (const ProcessDiff& p : d.processes) by[p.key] = &p;
  EXPECT_EQ(by["rank 0"]->base_pid, 6u);
  EXPECT_EQ(by["rank 0"]->new_pid, 50u);
  EXPECT_DOUBLE_EQ(by["rank 0"]->peak_bytes.delta(), 10);
  EXPECT_EQ(by["rank 1"]->new_pid, 40u);
  EXPECT_EQ(by["process 0"]->base_pid, 7u);
  EXPECT_EQ(by["process 0"]->new_pid, 30u);
  EXPECT_EQ(by["process 1"]->new_pid, 90u);
  EXPECT_FALSE(by["rank 2"]->in_base);
  EXPECT_THAT(d.warnings, ::testing::Contains(HasSubstr("rank 2 (pid 95) only in NEW")));
}

TEST(DiffTest, StagesMatchByName) {
  const Pair p = Runs();
  const Diff d = DiffReports(p.base, p.next);
  ASSERT_EQ(d.stages.size(), 1u);
  EXPECT_EQ(d.stages[0].stage, "forward");
  EXPECT_TRUE(d.stages[0].in_base && d.stages[0].in_new);
  EXPECT_NEAR(d.stages[0].peak_bytes_max.percent(), 15, 1e-6);
}

Gate G(const std::string& text) {
  absl::StatusOr<Gate> g = ParseGate(text);
  EXPECT_TRUE(g.ok()) << text << ": " << g.status();
  return g.ok() ? *g : Gate{};
}

TEST(DiffGates, ParseChanges) {
  Gate g = G("peak(forward) > +10%");
  EXPECT_TRUE(g.relative && g.percent);
  EXPECT_EQ(g.stage, "forward");
  EXPECT_DOUBLE_EQ(g.threshold, 10);
  g = G("peak > +64MiB");
  EXPECT_TRUE(g.relative);
  EXPECT_FALSE(g.percent);
  EXPECT_DOUBLE_EQ(g.threshold, 64 * kMiB);
  g = G("growth > +1MiB/step");
  EXPECT_TRUE(g.relative);
  EXPECT_DOUBLE_EQ(g.threshold, kMiB);
  g = G("live_end < -1.5MiB");
  EXPECT_DOUBLE_EQ(g.threshold, -1.5 * kMiB);
  g = G("site_growth >= + 256KiB/step");
  EXPECT_TRUE(g.relative);
  g = G("leaks > +0");
  EXPECT_TRUE(g.relative);
  g = G("churn > 150%");
  EXPECT_TRUE(g.percent);
  EXPECT_DOUBLE_EQ(g.threshold, 150);  // a change may exceed 100 %
  g = G("peak > 2GiB");
  EXPECT_FALSE(g.relative);
  for (const char* bad :
       {"site_growth > 1MiB/step", "peak > +10MiB%", "peak > +10%/step", "peak > +", "peak > %",
        "leaks > +1KiB", "peak > +-3MiB", "peak > +64MiB/step"}) {
    EXPECT_FALSE(ParseGate(bad).ok()) << bad;
  }
  EXPECT_THAT(std::string(ParseGate("site_growth > 1MiB/step").status().message()),
              HasSubstr("compares two runs"));
}

TEST(DiffGates, RelativeGatesOnThePair) {
  const Pair p = Runs();
  Diff d = DiffReports(p.base, p.next);
  const bool failed = EvaluateDiffGates(
      {G("peak(forward) > +10%"), G("peak(forward) > +20%"), G("peak > +64MiB"),
       G("growth > +32KiB/step"), G("site_growth > +40KiB/step"), G("site_growth > +50KiB/step"),
       G("peak > 2GiB"), G("peak(backward) > +1%"), G("leaks > +0")},
      p.base, p.next, &d);
  EXPECT_TRUE(failed);
  ASSERT_EQ(d.gates.size(), 9u);
  EXPECT_FALSE(d.gates[0].passed);  // +15 %
  EXPECT_NEAR(d.gates[0].value, 15, 1e-6);
  EXPECT_TRUE(d.gates[0].percent);
  EXPECT_THAT(d.gates[0].detail, HasSubstr("BASE 2.00 GiB"));
  EXPECT_TRUE(d.gates[1].passed);
  EXPECT_FALSE(d.gates[2].passed);  // +300 MiB
  EXPECT_DOUBLE_EQ(d.gates[2].value, 300 * kMiB);
  EXPECT_FALSE(d.gates[3].passed);  // largest LEAK 16 -> 64 KiB/step
  EXPECT_DOUBLE_EQ(d.gates[3].value, 48 * kKiB);
  EXPECT_FALSE(d.gates[4].passed);  // Leak: +48 KiB/step
  EXPECT_DOUBLE_EQ(d.gates[4].value, 48 * kKiB);
  EXPECT_THAT(d.gates[4].detail, HasSubstr("Leak"));
  EXPECT_TRUE(d.gates[5].passed);
  EXPECT_FALSE(d.gates[6].passed);  // absolute: on NEW
  EXPECT_THAT(d.gates[6].detail, HasSubstr("NEW"));
  EXPECT_FALSE(d.gates[7].passed);  // a stage that ran in neither run
  EXPECT_FALSE(d.gates[8].passed);  // 1 -> 2 LEAK sites
  EXPECT_DOUBLE_EQ(d.gates[8].value, 1);

  Diff same = DiffReports(p.base, p.base);
  EXPECT_FALSE(EvaluateDiffGates(
      {G("peak(forward) > +1%"), G("site_growth > +1KiB/step"), G("growth > +0/step")}, p.base,
      p.base, &same));
}

TEST(DiffGates, FromZeroAnyIncreaseIsInfinite) {
  Pair p = Runs();
  p.base.sites.clear();
  Diff d = DiffReports(p.base, p.next);
  EXPECT_TRUE(EvaluateDiffGates({G("site_growth > +1000%")}, p.base, p.next, &d));
  EXPECT_TRUE(std::isinf(d.gates[0].value));
}

TEST(DiffGates, ReportRefusesAChange) {
  Pair p = Runs();
  EXPECT_TRUE(EvaluateGates({G("peak > +1%")}, &p.next));
  EXPECT_FALSE(p.next.gates[0].passed);
  EXPECT_THAT(p.next.gates[0].detail, HasSubstr("memstep diff"));
}

TEST(DiffReport, TextAndJson) {
  const Pair p = Runs();
  Diff d = DiffReports(p.base, p.next);
  EvaluateDiffGates({G("peak(forward) > +10%")}, p.base, p.next, &d);
  const std::string text = report::FormatDiffText(d);
  EXPECT_THAT(text, HasSubstr("BASE: base"));
  EXPECT_THAT(text, HasSubstr("FAIL  peak(forward) > +10%  (value +15.0 %"));
  EXPECT_THAT(text, HasSubstr("2.00 GiB -> 2.30 GiB  +307 MiB (+15.0 %)"));
  EXPECT_THAT(text, HasSubstr("16.0 KiB/step -> 64.0 KiB/step  +48.0 KiB/step (+300.0 %)"));
  EXPECT_THAT(text, HasSubstr("new     process 0, site - -> #2"));
  EXPECT_THAT(text, HasSubstr("(- -> LEAK)"));
  const std::string json = report::FormatDiffJson(d);
  EXPECT_THAT(json, HasSubstr("\"schema\":\"memstep.diff/1\""));
  EXPECT_THAT(json, HasSubstr("\"status\":\"new\""));
  EXPECT_THAT(json, HasSubstr("\"percent\":null"));  // Fresh from 0
  EXPECT_THAT(json, HasSubstr("\"unit\":\"%\""));
  EXPECT_THAT(json, HasSubstr("\"passed\":false"));
  EXPECT_EQ(json.back(), '\n');
}

}  // namespace
}  // namespace memstep::analysis

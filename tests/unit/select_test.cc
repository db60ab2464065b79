// Selection (--steps, --stage, --pid, --rank: analysis::Options, select.h)
// and the churn estimates (Site::churn_*), on traces built with the test
// trace builder.

#include "src/analysis/select.h"

#include <cmath>
#include <cstdio>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/analysis/analysis.h"
#include "tests/unit/test_util.h"
#include "tests/unit/trace_builder.h"

namespace memstep::analysis {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;

format::Counters C(uint64_t alloc, uint64_t live, uint64_t peak, uint64_t count = 0) {
  format::Counters c{};
  c.alloc_bytes = alloc;
  c.alloc_count = count;
  c.live_bytes = live;
  c.peak_bytes = peak;
  return c;
}

// 60 steps, each recorded exactly (interval 0): in stage "forward" stack 1
// keeps 64 KiB and stack 2 allocates and frees a 1 MiB temporary (step 40:
// 8 MiB); in stage "backward" stack 3 allocates and frees 10 blocks of
// 1 KiB. A 5 MiB block (stack 4) is allocated before step 0 and freed in
// step 30.
std::vector<uint8_t> StagedTrace(uint32_t pid = 100, const std::string& rank = "") {
  reader::TraceHeaderInfo info;
  info.pid = pid;
  if (!rank.empty()) info.tlvs = {{format::kTlvRankEnv, "RANK=" + rank + std::string(1, '\0')}};
  reader::TraceBuilder b(info);
  b.String(1, "forward");
  b.String(2, "backward");
  for (uint64_t s = 1; s <= 4; ++s) b.Stack(s, {0x1000 * s});
  uint64_t ts = 1, addr = 0x100000, alloc = 5 * kMiB, count = 1;
  b.Alloc(ts++, 4, 0x50000000, 5 * kMiB);
  uint64_t live = 5 * kMiB;
  for (uint64_t step = 0; step < 60; ++step) {
    b.Step(ts++, step, 0, C(alloc, live, live, count));
    b.Stage(ts++, 1, step, 0, C(alloc, live, live, count));
    b.Alloc(ts++, 1, addr++, 64 * kKiB, 0, 0, step, 1);
    const uint64_t tmp = step == 40 ? 8 * kMiB : kMiB;
    const uint64_t t = addr++;
    b.Alloc(ts++, 2, t, tmp, 0, 0, step, 1);
    b.Free(ts++, t);
    alloc += 64 * kKiB + tmp;
    count += 2;
    live += 64 * kKiB;
    b.Stage(ts++, 1, step, 1, C(alloc, live, live + tmp, count));
    b.Stage(ts++, 2, step, 0, C(alloc, live, live, count));
    for (int k = 0; k < 10; ++k) {
      const uint64_t a = addr++;
      b.Alloc(ts++, 3, a, kKiB, 0, 0, step, 2);
      b.Free(ts++, a);
    }
    alloc += 10 * kKiB;
    count += 10;
    if (step == 30) {
      b.Free(ts++, 0x50000000);
      live -= 5 * kMiB;
    }
    b.Stage(ts++, 2, step, 1, C(alloc, live, live + kKiB, count));
    b.Step(ts++, step, 1, C(alloc, live, live + tmp, count));
  }
  b.Trailer(ts++, C(alloc, live, 13 * kMiB, count), true);
  return b.Finish();
}

const Site* SiteOfStack(const Report& r, uint64_t stack) {
  for (const Site& s : r.sites) {
    if (s.stack_id == stack) return &s;
  }
  return nullptr;
}

class SelectTest : public ::testing::Test {
 protected:
  absl::StatusOr<Report> Analyze(const Options& o) {
    Options opts = o;
    opts.symbolize = false;
    return AnalyzeRun(dir_.path(), opts);
  }
  void Write(const std::string& name, const std::vector<uint8_t>& bytes) {
    ASSERT_TRUE(testing::WriteFile(dir_.File(name), bytes));
  }
  testing::TempDir dir_;
};

TEST(ParseStepRange, Forms) {
  int64_t a = 0, b = 0;
  ASSERT_TRUE(ParseStepRange("10:20", &a, &b).ok());
  EXPECT_EQ(a, 10);
  EXPECT_EQ(b, 20);
  ASSERT_TRUE(ParseStepRange("5:", &a, &b).ok());
  EXPECT_EQ(a, 5);
  EXPECT_EQ(b, -1);
  ASSERT_TRUE(ParseStepRange(":7", &a, &b).ok());
  EXPECT_EQ(a, -1);
  EXPECT_EQ(b, 7);
  ASSERT_TRUE(ParseStepRange("3", &a, &b).ok());
  EXPECT_EQ(a, 3);
  EXPECT_EQ(b, 3);
  for (const char* bad :
       {"", ":", "a:b", "-1:3", "3:1", "1:2:3", "1.5:2", " 1:2", "99999999999999999999"}) {
    EXPECT_FALSE(ParseStepRange(bad, &a, &b).ok()) << bad;
  }
  EXPECT_THAT(std::string(ParseStepRange("3:1", &a, &b).message()), HasSubstr("after the last"));
}

TEST_F(SelectTest, NoSelectionChangesNothing) {
  Write("a.trace", StagedTrace());
  absl::StatusOr<Report> r = Analyze({});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps.size(), 60u);
  EXPECT_EQ(r->selection, "");
  EXPECT_EQ(r->processes[0].peak_bytes, 13 * kMiB);  // the trailer's run peak
}

// --steps 10:19: ten rows; live at the end is at step 19's end (the 5 MiB
// block from before step 0 still live); the process peak is the selection's
// (step 40's 8 MiB spike is outside); the stage peak too; the keeping site
// grows 64 KiB/step over the selection, and its cohorts are the selected
// steps only.
TEST_F(SelectTest, StepRange) {
  Write("a.trace", StagedTrace());
  Options o;
  o.first_step = 10;
  o.last_step = 19;
  absl::StatusOr<Report> r = Analyze(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->selection, "steps 10..19");
  ASSERT_EQ(r->steps.size(), 10u);
  EXPECT_EQ(r->steps.front().step, 10u);
  EXPECT_EQ(r->steps.back().step, 19u);
  const ProcessSummary& p = r->processes[0];
  EXPECT_EQ(p.live_bytes_end, 5 * kMiB + 20 * 64 * kKiB);
  EXPECT_EQ(p.peak_bytes, 5 * kMiB + 20 * 64 * kKiB + kMiB);
  EXPECT_EQ(p.last_step, 19);
  // The totals are the selection's: 12 allocations a step.
  EXPECT_EQ(p.alloc_count, 10u * 12);
  EXPECT_EQ(p.alloc_bytes, 10 * (64 * kKiB + kMiB + 10 * kKiB));
  const Site* keep = SiteOfStack(*r, 1);
  ASSERT_NE(keep, nullptr);
  EXPECT_DOUBLE_EQ(keep->live_bytes_end, 20 * 64.0 * kKiB);  // allocated in steps 0..19
  EXPECT_EQ(keep->live_bytes_by_step.size(), 10u);
  const Site* old = SiteOfStack(*r, 4);
  ASSERT_NE(old, nullptr);
  EXPECT_DOUBLE_EQ(old->live_bytes_end, 5.0 * kMiB);  // allocated before, still live
  bool forward = false;
  for (const StagePeak& sp : r->stage_peaks) {
    if (sp.stage != "forward") continue;
    forward = true;
    EXPECT_EQ(sp.steps, 10u);
    EXPECT_EQ(sp.peak_bytes_max, 5 * kMiB + 20 * 64 * kKiB + kMiB);
    EXPECT_GE(sp.step_of_max, 10u);
    EXPECT_LE(sp.step_of_max, 19u);
  }
  EXPECT_TRUE(forward);
  // Churn over the ten steps: exact (interval 0).
  EXPECT_DOUBLE_EQ(keep->churn_count_per_step, 1.0);
  EXPECT_DOUBLE_EQ(keep->churn_bytes_per_step, 64.0 * kKiB);
  const Site* small = SiteOfStack(*r, 3);
  ASSERT_NE(small, nullptr);
  EXPECT_DOUBLE_EQ(small->churn_count_per_step, 10.0);
  EXPECT_DOUBLE_EQ(small->churn_count_share, 10.0 / 12.0);
  EXPECT_DOUBLE_EQ(old->churn_count_per_step, 0.0);  // allocated before the steps
}

// The selection's peak includes step 40 when it is selected; open ends.
TEST_F(SelectTest, OpenEnds) {
  Write("a.trace", StagedTrace());
  Options o;
  o.first_step = 35;
  absl::StatusOr<Report> r = Analyze(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->selection, "steps 35..");
  ASSERT_EQ(r->steps.size(), 25u);
  EXPECT_EQ(r->processes[0].peak_bytes, 41 * 64 * kKiB + 8 * kMiB);
  o = {};
  o.last_step = 4;
  r = Analyze(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->selection, "steps ..4");
  ASSERT_EQ(r->steps.size(), 5u);
  EXPECT_EQ(r->processes[0].live_bytes_end, 5 * kMiB + 5 * 64 * kKiB);
  EXPECT_TRUE(r->processes[0].clean_exit);
}

// The growth fit sees the selected steps only: from step 30 on (its end is
// after the 5 MiB block's free) the exact heap and the keeping site grow
// 64 KiB/step over 30 steps; from step 31 on, 29 steps are too few.
TEST_F(SelectTest, GrowthOverTheSelection) {
  Write("a.trace", StagedTrace());
  Options o;
  o.first_step = 31;
  absl::StatusOr<Report> few = Analyze(o);
  ASSERT_TRUE(few.ok()) << few.status();
  EXPECT_EQ(few->processes[0].live_growth.cls, GrowthClass::kInsufficient);
  EXPECT_THAT(few->processes[0].live_growth.reason, HasSubstr("29 steps"));
  o.first_step = 30;
  absl::StatusOr<Report> r = Analyze(o);
  ASSERT_TRUE(r.ok()) << r.status();
  const Site* keep = SiteOfStack(*r, 1);
  ASSERT_NE(keep, nullptr);
  EXPECT_EQ(keep->growth.cls, GrowthClass::kLeak) << keep->growth.reason;
  EXPECT_NEAR(keep->growth.slope, 64.0 * kKiB, 1);
  EXPECT_EQ(r->processes[0].live_growth.cls, GrowthClass::kLeak);
}

// --stage backward: only its peaks and the allocations made in it.
TEST_F(SelectTest, Stage) {
  Write("a.trace", StagedTrace());
  Options o;
  o.stage = "backward";
  absl::StatusOr<Report> r = Analyze(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->selection, "stage backward");
  EXPECT_EQ(r->steps.size(), 60u);
  for (const StagePeak& sp : r->stage_peaks) EXPECT_EQ(sp.stage, "backward");
  for (const StepRow& row : r->steps) {
    EXPECT_EQ(row.stage_peaks.size(), 1u);
    EXPECT_TRUE(row.stage_peaks.count("backward"));
  }
  EXPECT_EQ(SiteOfStack(*r, 1), nullptr);
  EXPECT_EQ(SiteOfStack(*r, 2), nullptr);
  EXPECT_EQ(SiteOfStack(*r, 4), nullptr);  // outside every stage
  const Site* small = SiteOfStack(*r, 3);
  ASSERT_NE(small, nullptr);
  EXPECT_DOUBLE_EQ(small->churn_count_per_step, 10.0);
  EXPECT_DOUBLE_EQ(small->alloc_count, 600.0);
}

TEST_F(SelectTest, StageAndStepsTogether) {
  Write("a.trace", StagedTrace());
  Options o;
  o.stage = "forward";
  o.first_step = 40;
  o.last_step = 40;
  absl::StatusOr<Report> r = Analyze(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->selection, "step 40, stage forward");
  ASSERT_EQ(r->stage_peaks.size(), 1u);
  EXPECT_EQ(r->stage_peaks[0].peak_bytes_max, 41 * 64 * kKiB + 8 * kMiB);
  const Site* tmp = SiteOfStack(*r, 2);
  ASSERT_NE(tmp, nullptr);
  EXPECT_DOUBLE_EQ(tmp->churn_bytes_per_step, 8.0 * kMiB);
}

TEST_F(SelectTest, PidAndRank) {
  Write("a.trace", StagedTrace(100, "0"));
  Write("b.trace", StagedTrace(200, "1"));
  Options o;
  o.pid = 200;
  absl::StatusOr<Report> r = Analyze(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->processes.size(), 1u);
  EXPECT_EQ(r->processes[0].pid, 200u);
  for (const StepRow& row : r->steps) EXPECT_EQ(row.pid, 200u);
  for (const Site& s : r->sites) EXPECT_EQ(s.pid, 200u);
  o = {};
  o.rank = "0";
  r = Analyze(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->processes.size(), 1u);
  EXPECT_EQ(r->processes[0].pid, 100u);
  EXPECT_EQ(r->selection, "rank 0");
}

TEST_F(SelectTest, EmptySelectionsAreErrors) {
  Write("a.trace", StagedTrace(100, "0"));
  Options o;
  o.pid = 7;
  absl::StatusOr<Report> r = Analyze(o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("no process matches pid 7"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("pid 100 (rank 0)"));
  o = {};
  o.rank = "3";
  EXPECT_FALSE(Analyze(o).ok());
  o = {};
  o.first_step = 100;
  r = Analyze(o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("steps 0..59"));
  o = {};
  o.stage = "optimizer";
  r = Analyze(o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("stages: forward, backward"));
}

// Churn against a planted workload: per step, 500 allocations of 200 bytes
// drawn with T = 8 KiB (p = 1 - exp(-201/8192) = 0.0242, about 12 samples
// a step), over 100 steps, 20 seeds. The count estimate's standard error is
// sqrt(N (1 - p) / p) over N = 50,000 allocations: 1,420, 2.8 %; each seed
// must land within 4.5 standard errors (two-sided false-failure rate
// 7e-6 per seed, 1.4e-4 for the 20), and the 95 % interval must cover the
// truth for at least 15 of the 20 (binomial(20, 0.95) gives fewer than 15
// with probability 3e-4).
TEST_F(SelectTest, ChurnEstimateOfAPlantedWorkload) {
  constexpr uint64_t kT = 8192, kSize = 200, kPerStep = 500, kSteps = 100;
  const double p = -std::expm1(-(kSize + 1.0) / kT);
  const double n = kPerStep * kSteps;
  const double se = std::sqrt(n * (1 - p) / p) / kSteps;  // of the per-step count
  int covered = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0, 1);
    reader::TraceHeaderInfo info;
    info.sample_interval = kT;
    reader::TraceBuilder b(info);
    b.Stack(1, {0x1000});
    uint64_t ts = 1, addr = 0x1000000, alloc = 0, count = 0;
    for (uint64_t step = 0; step < kSteps; ++step) {
      b.Step(ts++, step, 0, C(alloc, 0, 0, count));
      for (uint64_t k = 0; k < kPerStep; ++k) {
        if (u(rng) < p) {
          b.Alloc(ts++, 1, addr, kSize, kT, 0, step);
          b.Free(ts++, addr++);
        }
      }
      alloc += kSize * kPerStep;
      count += kPerStep;
      b.Step(ts++, step, 1, C(alloc, 0, kSize, count));
    }
    ASSERT_TRUE(testing::WriteFile(dir_.File("a.trace"), b.Finish()));
    absl::StatusOr<Report> r = Analyze({});
    ASSERT_TRUE(r.ok()) << r.status();
    const Site* s = SiteOfStack(*r, 1);
    ASSERT_NE(s, nullptr);
    EXPECT_NEAR(s->churn_count_per_step, kPerStep, 4.5 * se) << "seed " << seed;
    EXPECT_NEAR(s->churn_bytes_per_step, kPerStep * kSize, 4.5 * se * kSize) << "seed " << seed;
    EXPECT_NEAR(s->churn_count_share, 1.0, 4.5 * se / kPerStep) << "seed " << seed;
    covered += s->churn_count_per_step_low <= kPerStep && kPerStep <= s->churn_count_per_step_high;
    EXPECT_LT(s->churn_count_per_step_low, s->churn_count_per_step);
    EXPECT_GT(s->churn_count_per_step_high, s->churn_count_per_step);
  }
  EXPECT_GE(covered, 15);
  std::printf("churn: the 95 %% interval covered the planted count in %d of 20 seeds\n", covered);
}

}  // namespace
}  // namespace memstep::analysis

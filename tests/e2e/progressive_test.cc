// Progressive sampling end to end: e2e_planted "progressive" leaks a known
// number of bytes per step under the default schedule, and the raw trace must
// show the schedule (dense warm-up, decay to T_steady, a memstep_boost inside
// step kProgBoostAt), every sample stamped with a T that was in force, and an
// unbiased estimate of the leak across the rate changes.

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"
#include "src/format/format.h"
#include "src/reader/reader.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/planted_facts.h"

namespace memstep::e2e {
namespace {

using namespace facts;  // NOLINT

constexpr uint64_t kSteady = 512 << 10;
constexpr uint64_t kWarm = kSteady / 4;

reader::Trace RunProgressive(const TempDir& dir, const std::vector<std::string>& extra_env) {
  std::vector<std::string> env = TracedEnv(dir.path(), 0);
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  ChildResult r = RunChild({PlantedProgram(), "progressive"}, env);
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> files = dir.Files(".trace");
  EXPECT_EQ(files.size(), 1u);
  if (files.size() != 1) return {};
  absl::StatusOr<reader::Trace> t = reader::ReadTraceFile(files[0]);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  EXPECT_TRUE(t->lost.empty());
  return *std::move(t);
}

// Horvitz-Thompson estimate of the leak's bytes: blocks of the leak's size
// that were never freed, each weighted by its own T.
double EstimateLeak(const reader::Trace& t, std::set<uint64_t>* intervals) {
  absl::flat_hash_map<uint64_t, const reader::Event*> live;
  for (const reader::Event& e : t.events) {
    if (e.tag == format::kTagAlloc) {
      live[e.addr] = &e;
      intervals->insert(e.interval);
    } else if (e.tag == format::kTagFree) {
      live.erase(e.addr);
    }
  }
  double sum = 0;
  for (const auto& [addr, e] : live) {
    if (e->size != kProgLeakSize) continue;
    double p =
        e->interval == 0
            ? 1.0
            : -std::expm1(-(static_cast<double>(e->size) + 1) / static_cast<double>(e->interval));
    sum += static_cast<double>(e->size) / p;
  }
  return sum;
}

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

  // T_warm at the first step, decay to 256 KiB, then to T_steady, then the
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

  // 32 MB leaked: about 130 samples at the mixed rates, a relative standard
  // deviation of about 9 %; 30 % is more than 3 standard deviations.
  std::set<uint64_t> seen;
  double truth = static_cast<double>(kProgSteps) * kProgLeakBlocks * kProgLeakSize;
  double est = EstimateLeak(t, &seen);
  EXPECT_NEAR(est / truth, 1.0, 0.30) << est << " vs " << truth;
  EXPECT_GE(seen.size(), 3u);
}

TEST(ProgressiveTest, FixedRateWhenTurnedOff) {
  TempDir dir;
  reader::Trace t = RunProgressive(dir, {"MEMSTEP_PROGRESSIVE=0"});
  EXPECT_EQ(t.header.sample_interval, kSteady);
  EXPECT_TRUE(t.rates.empty());
  std::set<uint64_t> seen;
  double truth = static_cast<double>(kProgSteps) * kProgLeakBlocks * kProgLeakSize;
  double est = EstimateLeak(t, &seen);
  EXPECT_NEAR(est / truth, 1.0, 0.40) << est << " vs " << truth;
  for (uint64_t T : seen) EXPECT_TRUE(T == 0 || T == kSteady) << T;
}

}  // namespace
}  // namespace memstep::e2e

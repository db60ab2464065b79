// `memstep report` growth options and --fail-on gates, run as the binary
// (MEMSTEP_BIN): exit codes 0 / 1 / 3, the Gates section and gates[] in JSON.

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/cli_runner.h"
#include "tests/unit/device_trace.h"
#include "tests/unit/test_util.h"
#include "tests/unit/trace_builder.h"

namespace memstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;

using Result = testing::CliResult;

Result Report(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"report"};
  all.insert(all.end(), args.begin(), args.end());
  return testing::RunCli(MEMSTEP_BIN, all);
}

format::Counters C(uint64_t live, uint64_t peak) {
  format::Counters c{};
  c.alloc_bytes = live;
  c.live_bytes = live;
  c.peak_bytes = peak;
  c.rss_bytes = live + 10 * kMiB;
  return c;
}

// 60 steps; stack 1 leaks 256 KiB per step; "forward" peaks at 3 MiB above
// live in every step (12 MiB in step 42: 22.75 MiB). One growth alert at step 35.
std::vector<uint8_t> LeakyTrace() {
  reader::TraceBuilder b;
  b.String(1, "forward");
  b.Stack(1, {0x1000});
  b.Stack(2, {0x2000});
  uint64_t ts = 1, addr = 0x10000;
  for (uint64_t step = 0; step < 60; ++step) {
    const uint64_t live = step * 256 * kKiB;
    b.Step(ts++, step, 0, C(live, live));
    b.Stage(ts++, 1, step, 0, C(live, live));
    b.Alloc(ts++, 1, addr++, 256 * kKiB, 0, 0, step, 1);
    const uint64_t spike = step == 42 ? 12 * kMiB : 3 * kMiB;
    const uint64_t tmp = addr++;
    b.Alloc(ts++, 2, tmp, spike, 0, 0, step, 1);
    b.Free(ts++, tmp);
    b.Stage(ts++, 1, step, 1, C(live + 256 * kKiB, live + 256 * kKiB + spike));
    b.Step(ts++, step, 1, C(live + 256 * kKiB, live + 256 * kKiB + spike));
    if (step == 35) b.Alert(ts++, 35, format::kAlertGrowth, 256 * kKiB, 128 * kKiB, 0, 1);
  }
  return b.Finish();
}

class ReportCliTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(testing::WriteFile(trace_, LeakyTrace())); }
  testing::TempDir dir_;
  std::string trace_ = dir_.File("leaky.trace");
};

TEST_F(ReportCliTest, GrowthSectionComesFirst) {
  Result r = Report({trace_, "--no-symbolize", "--memory-limit", "1G"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t growth = r.out.find("\nGrowth (memory limit 1.00 GiB, --memory-limit)");
  ASSERT_NE(growth, std::string::npos) << r.out;
  EXPECT_LT(growth, r.out.find("\nStage peaks"));
  EXPECT_LT(r.out.find("\nStage peaks"), r.out.find("\nSteps (pid"));
  EXPECT_THAT(r.out, HasSubstr("heap live (exact): LEAK  +256 KiB/step"));
  EXPECT_THAT(r.out, HasSubstr(" LEAK  +256 KiB/step [95% CI 256 KiB, 256 KiB]"));
  // (1 GiB - 25 MiB of RSS at the end) / 256 KiB = 3996 steps.
  EXPECT_THAT(r.out, HasSubstr("memory limit in 3,996 steps"));
  EXPECT_THAT(r.out, HasSubstr("Alerts fired during the run: 1"));
  EXPECT_THAT(r.out, HasSubstr("step 35  growth  256 KiB > 128 KiB  top growing site #"));
  EXPECT_THAT(r.out, Not(HasSubstr("Gates:")));
}

TEST_F(ReportCliTest, GatesPassAndFail) {
  Result pass = Report({trace_, "--no-symbolize", "--fail-on", "growth > 1MiB/step",
                        "--fail-on=peak(forward) >= 32M", "--fail-on", "leaks > 1"});
  EXPECT_EQ(pass.exit_code, 0) << pass.err;
  EXPECT_THAT(pass.out, HasSubstr("Gates: 0 of 3 failed"));
  EXPECT_THAT(pass.out, HasSubstr("pass  peak(forward) >= 32M  (value 22.8 MiB; step 42"));
  EXPECT_THAT(pass.out, HasSubstr("pass  leaks > 1  (value 1; LEAK call sites)"));
  EXPECT_THAT(pass.out, HasSubstr("pass  growth > 1MiB/step  (value 256 KiB/step; LEAK site #1"));

  Result fail = Report({trace_, "--no-symbolize", "--fail-on", "growth > 100KiB/step", "--fail-on",
                        "peak(forward) > 2GiB", "--fail-on", "leaks>0"});
  EXPECT_EQ(fail.exit_code, 3);
  EXPECT_THAT(fail.out, HasSubstr("Gates: 2 of 3 failed"));
  EXPECT_THAT(fail.out, HasSubstr("FAIL  growth > 100KiB/step  (value 256 KiB/step; LEAK site #"));
  EXPECT_THAT(fail.out, HasSubstr("pass  peak(forward) > 2GiB"));
  EXPECT_THAT(fail.err, HasSubstr("memstep: gate failed: growth > 100KiB/step"));
  EXPECT_THAT(fail.err, HasSubstr("memstep: gate failed: leaks>0"));

  Result missing = Report({trace_, "--no-symbolize", "--fail-on", "peak(optimizer) > 1G"});
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_THAT(missing.out, HasSubstr("no stage 'optimizer' in the trace"));

  Result json = Report({trace_, "--no-symbolize", "--format", "json", "--fail-on", "peak > 1K"});
  EXPECT_EQ(json.exit_code, 3);
  EXPECT_THAT(json.out,
              HasSubstr("\"gates\":[{\"expression\":\"peak > 1K\",\"metric\":\"peak\",\"value\":"));
  EXPECT_THAT(json.out, HasSubstr("\"passed\":false"));
  EXPECT_THAT(json.out, HasSubstr("\"class\":\"LEAK\",\"growth_bytes_per_step\":262144"));
}

TEST_F(ReportCliTest, BadGatesAndOptionsExitOne) {
  for (const std::string bad :
       {"growth", "growth >", "growth > 1XB", "speed > 1", "peak(forward > 1G", "growth >> 1",
        "leaks > 1MiB", "peak > 1G/step", "peak() > 1", "growth > 1.2.3M", "growth > 1M/epoch"}) {
    Result r = Report({trace_, "--fail-on", bad});
    EXPECT_EQ(r.exit_code, 1) << bad;
    EXPECT_THAT(r.err, HasSubstr("bad --fail-on expression '" + bad + "'")) << bad;
    EXPECT_EQ(r.out, "") << bad;
  }
  EXPECT_EQ(Report({trace_, "--warmup", "x"}).exit_code, 1);
  EXPECT_EQ(Report({trace_, "--memory-limit", "0"}).exit_code, 1);
  EXPECT_EQ(Report({trace_, "--memory-limit", "lots"}).exit_code, 1);
  EXPECT_EQ(Report({trace_, "--fail-on"}).exit_code, 1);
  Result missing = Report({dir_.File("nope.trace"), "--fail-on", "peak > 1G"});
  EXPECT_EQ(missing.exit_code, 1);  // input error beats gates
}

TEST_F(ReportCliTest, WarmupAndThresholdOptions) {
  Result r = Report({trace_, "--no-symbolize", "--warmup", "40", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 20 steps after warm-up: too few to classify.
  EXPECT_THAT(r.out, HasSubstr("\"class\":\"INSUFFICIENT\""));
  EXPECT_THAT(r.out, Not(HasSubstr("\"class\":\"LEAK\"")));
  r = Report({trace_, "--no-symbolize", "--leak-min-rate", "512K", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("\"class\":\"LEAK\"")));
}

// Device gates on the planted device trace (device_trace.h): device 0 peaks
// at 353 MiB (step 25), forward at 352 MiB, and leaks 2 MiB per step.
TEST(ReportCliDeviceTest, DeviceGatesExitThree) {
  testing::TempDir dir;
  const std::string trace = dir.File("dev.trace");
  ASSERT_TRUE(testing::WriteFile(trace, testing::PlantedDeviceTrace()));
  Result pass = Report({trace, "--no-symbolize", "--fail-on", "device_peak > 353MiB", "--fail-on",
                        "device_peak(forward) > 352M", "--fail-on", "device_growth > 2MiB/step"});
  EXPECT_EQ(pass.exit_code, 0) << pass.err;
  EXPECT_THAT(pass.out, HasSubstr("Gates: 0 of 3 failed"));
  EXPECT_THAT(pass.out, HasSubstr("pass  device_peak > 353MiB  (value 353 MiB; device 0, pid 9, "
                                  "step 25)"));
  EXPECT_THAT(pass.out, HasSubstr("pass  device_growth > 2MiB/step  (value 2.00 MiB/step; LEAK "
                                  "device site #1 (pid 9))"));

  Result fail =
      Report({trace, "--no-symbolize", "--fail-on", "device_peak > 8GiB", "--fail-on",
              "device_peak >= 353M", "--fail-on", "device_peak(backward) > 300M", "--fail-on",
              "device_growth > 1M/step", "--fail-on", "device_peak(optimizer) > 1G"});
  EXPECT_EQ(fail.exit_code, 3);
  EXPECT_THAT(fail.out, HasSubstr("Gates: 4 of 5 failed"));
  EXPECT_THAT(fail.out, HasSubstr("pass  device_peak > 8GiB"));
  EXPECT_THAT(fail.err, HasSubstr("memstep: gate failed: device_peak >= 353M (device 0, pid 9, "
                                  "step 25)\n"));
  EXPECT_THAT(fail.err, HasSubstr("memstep: gate failed: device_peak(backward) > 300M (device 0, "
                                  "step 25, pid 9)\n"));
  EXPECT_THAT(fail.err, HasSubstr("memstep: gate failed: device_growth > 1M/step"));
  EXPECT_THAT(fail.err, HasSubstr("memstep: gate failed: device_peak(optimizer) > 1G (no stage "
                                  "'optimizer' in the trace)"));

  Result json =
      Report({trace, "--no-symbolize", "--format", "json", "--fail-on", "device_peak > 100M"});
  EXPECT_EQ(json.exit_code, 3);
  EXPECT_THAT(json.out, HasSubstr("{\"expression\":\"device_peak > 100M\",\"metric\":"
                                  "\"device_peak\",\"value\":370147328,\"passed\":false,"
                                  "\"detail\":\"device 0, pid 9, step 25\"}"));

  for (const std::string bad : {"device_peak > 1G/step", "device_growth(fwd) > 1M"}) {
    Result r = Report({trace, "--fail-on", bad});
    EXPECT_EQ(r.exit_code, 1) << bad;
    EXPECT_THAT(r.err, HasSubstr("bad --fail-on expression '" + bad + "'")) << bad;
  }
}

}  // namespace
}  // namespace memstep

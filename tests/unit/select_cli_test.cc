// The selection options (--steps, --stage, --pid, --rank) on every format of
// `memstep report`, the churn view (--view churn: text, json, csv), and
// `memstep diff`'s exit codes and formats, run as the binary (MEMSTEP_BIN)
// on traces built with the test trace builder.

#include <sys/stat.h>

#include <algorithm>
#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/cli_runner.h"
#include "tests/unit/test_util.h"
#include "tests/unit/trace_builder.h"

namespace memstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Result = testing::CliResult;

constexpr uint64_t kKiB = 1024;

Result Cli(const std::vector<std::string>& args) { return testing::RunCli(MEMSTEP_BIN, args); }

format::Counters C(uint64_t alloc, uint64_t live, uint64_t count) {
  format::Counters c{};
  c.alloc_bytes = alloc;
  c.alloc_count = count;
  c.live_bytes = live;
  c.peak_bytes = live;
  return c;
}

constexpr uint64_t kMiB = 1024 * 1024;

// 40 steps recorded exactly: in stage "forward" stack 0x1000 keeps `keep`
// bytes a step; in stage "backward" stack 0x3000 allocates and frees 10
// blocks of 1 KiB. With `mixed`, also (every record exact, p = 1):
//   forward : mmap 0x6000 keeps 1 MiB a step; cudaMalloc 0x5000 2 MiB on
//             device 0, freed in backward; the previous step's 0x7000 freed
//   backward: cudaMalloc 0x7000 1 MiB on device 0 (freed in the next step's
//             forward; the last one stays); a failed 0x7000 cudaMalloc of
//             8 MiB in step 5.
// Device 0: 3 MiB peak, 1 MiB live at each step end; backward's own
// allocations: 1 MiB peak and live.
std::vector<uint8_t> Trace(uint32_t pid, const std::string& rank, uint64_t keep,
                           bool mixed = false) {
  reader::TraceHeaderInfo info;
  info.pid = pid;
  info.tlvs = {{format::kTlvRankEnv, "RANK=" + rank + std::string(1, '\0')}};
  reader::TraceBuilder b(info);
  b.String(1, "forward");
  b.String(2, "backward");
  b.Stack(1, {0x1000});
  b.Stack(3, {0x3000});
  b.Stack(5, {0x5000});
  b.Stack(6, {0x6000});
  b.Stack(7, {0x7000});
  uint64_t ts = 1, addr = 0x100000, alloc = 0, live = 0, count = 0;
  for (uint64_t step = 0; step < 40; ++step) {
    b.Step(ts++, step, 0, C(alloc, live, count));
    b.Stage(ts++, 1, step, 0, C(alloc, live, count));
    b.Alloc(ts++, 1, addr++, keep, 0, 0, step, 1);
    alloc += keep;
    live += keep;
    ++count;
    if (mixed) {
      b.Mmap(ts++, 6, 0x7f0000000000 + step * kMiB, kMiB, step, 1);
      b.DevAlloc(ts++, 5, format::kDevDevice, 0, 0x500000000 + step * 4 * kMiB, 2 * kMiB,
                 format::kApiCudaMalloc, 0, step, 1);
      if (step > 0) {
        b.DevFree(ts++, format::kDevDevice, 0, 0x700000000 + (step - 1) * 4 * kMiB, kMiB,
                  format::kApiCudaFree);
      }
    }
    b.Stage(ts++, 1, step, 1, C(alloc, live, count));
    b.Stage(ts++, 2, step, 0, C(alloc, live, count));
    for (int k = 0; k < 10; ++k) {
      const uint64_t a = addr++;
      b.Alloc(ts++, 3, a, kKiB, 0, 0, step, 2);
      b.Free(ts++, a);
    }
    if (mixed) {
      b.DevAlloc(ts++, 7, format::kDevDevice, 0, 0x700000000 + step * 4 * kMiB, kMiB,
                 format::kApiCudaMalloc, 0, step, 2);
      b.DevFree(ts++, format::kDevDevice, 0, 0x500000000 + step * 4 * kMiB, 2 * kMiB,
                format::kApiCudaFree);
      if (step == 5)
        b.DevFail(ts++, 7, format::kDevDevice, 0, 8 * kMiB, format::kApiCudaMalloc, 2, step, 2);
    }
    alloc += 10 * kKiB;
    count += 10;
    b.Stage(ts++, 2, step, 1, C(alloc, live, count));
    b.Step(ts++, step, 1, C(alloc, live, count));
  }
  b.Trailer(ts++, C(alloc, live, count), true);
  return b.Finish();
}

size_t Lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

class SelectCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::WriteFile(dir_.File("a.trace"), Trace(100, "0", 64 * kKiB)));
    ASSERT_TRUE(testing::WriteFile(dir_.File("b.trace"), Trace(200, "1", 64 * kKiB)));
  }
  Result Report(std::vector<std::string> args) {
    args.insert(args.begin(), {"report", dir_.path(), "--no-symbolize"});
    return Cli(args);
  }
  testing::TempDir dir_;
};

struct Format {
  std::string name;
  std::vector<std::string> args;
};

const std::vector<Format>& Formats() {
  static const std::vector<Format> kFormats = {
      {"text", {}},
      {"json", {"--format", "json"}},
      {"csv", {"--format", "csv"}},
      {"folded", {"--format", "folded"}},
      {"perfetto", {"--format", "perfetto"}},
      {"pprof", {"--format", "pprof"}},
      {"churn-text", {"--view", "churn"}},
      {"churn-json", {"--view", "churn", "--format", "json"}},
      {"churn-csv", {"--view", "churn", "--format", "csv"}},
  };
  return kFormats;
}

// Runs every format with and without `selection` and hands both outputs to
// `check` (pprof, gzipped protobuf, is only required to change).
void EveryFormat(SelectCliTest* t, const std::vector<std::string>& selection,
                 const std::function<void(const std::string& format, const std::string& all,
                                          const std::string& selected)>& check,
                 std::function<Result(std::vector<std::string>)> report) {
  for (const Format& f : Formats()) {
    SCOPED_TRACE(f.name);
    Result all = report(f.args);
    ASSERT_EQ(all.exit_code, 0) << all.err;
    std::vector<std::string> args = f.args;
    args.insert(args.end(), selection.begin(), selection.end());
    Result sel = report(args);
    ASSERT_EQ(sel.exit_code, 0) << sel.err;
    if (f.name != "folded") {
      ASSERT_FALSE(sel.out.empty());  // folded: may select no live byte
    }
    if (f.name == "pprof") {
      EXPECT_EQ(static_cast<unsigned char>(sel.out[0]), 0x1f);  // gzip
      EXPECT_NE(sel.out, all.out);
      continue;
    }
    check(f.name, all.out, sel.out);
  }
  (void)t;
}

TEST_F(SelectCliTest, StepsOnEveryFormat) {
  EveryFormat(
      this, {"--steps", "10:19"},
      [](const std::string& f, const std::string& all, const std::string& sel) {
        if (f == "text") {
          EXPECT_THAT(sel, HasSubstr("Selection: steps 10..19"));
          EXPECT_THAT(sel, HasSubstr("Steps (pid 100): 10 steps"));
          EXPECT_THAT(all, HasSubstr("Steps (pid 100): 40 steps"));
        } else if (f == "json") {
          EXPECT_THAT(sel, HasSubstr("\"selection\":\"steps 10..19\""));
          EXPECT_THAT(sel, HasSubstr("\"pid\":100,\"step\":19,"));
          EXPECT_THAT(sel, Not(HasSubstr("\"pid\":100,\"step\":20,")));
          EXPECT_THAT(all, HasSubstr("\"pid\":100,\"step\":20,"));
        } else if (f == "csv") {
          EXPECT_EQ(Lines(sel), 1u + 2 * 10);
          EXPECT_EQ(Lines(all), 1u + 2 * 40);
        } else if (f == "folded") {
          // Live at the end of step 19: 20 blocks of 64 KiB per process.
          EXPECT_THAT(sel, HasSubstr("[pid 100 rank 0];[host];0x1000 1310720\n"));
          EXPECT_THAT(all, HasSubstr("[pid 100 rank 0];[host];0x1000 2621440\n"));
        } else if (f == "perfetto") {
          EXPECT_THAT(sel, HasSubstr("\"name\":\"step 19\""));
          EXPECT_THAT(sel, Not(HasSubstr("\"name\":\"step 20\"")));
          EXPECT_THAT(sel, Not(HasSubstr("\"name\":\"step 9\"")));
          EXPECT_THAT(all, HasSubstr("\"name\":\"step 20\""));
        } else if (f == "churn-text") {
          EXPECT_THAT(sel, HasSubstr("selection: steps 10..19"));
          EXPECT_THAT(sel, HasSubstr("pid 100 (rank 0): 10 steps, exact 11 allocations and "
                                     "74.0 KiB per step"));
          EXPECT_THAT(sel, HasSubstr("site #3  10 allocs/step [10, 10]  90.9 % of allocations"));
        } else if (f == "churn-json") {
          EXPECT_THAT(sel, HasSubstr("\"steps\":10,"));
          EXPECT_THAT(all, HasSubstr("\"steps\":40,"));
        } else if (f == "churn-csv") {
          EXPECT_THAT(sel, HasSubstr("\r\n100,0,10,"));
          EXPECT_THAT(all, HasSubstr("\r\n100,0,40,"));
        }
      },
      [this](std::vector<std::string> a) { return Report(std::move(a)); });
}

TEST_F(SelectCliTest, StageOnEveryFormat) {
  EveryFormat(
      this, {"--stage", "backward"},
      [](const std::string& f, const std::string& all, const std::string& sel) {
        if (f == "text") {
          EXPECT_THAT(sel, HasSubstr("Selection: stage backward"));
          EXPECT_THAT(sel, Not(HasSubstr("forward")));
          EXPECT_THAT(all, HasSubstr("forward"));
        } else if (f == "json" || f == "csv" || f == "perfetto") {
          EXPECT_THAT(sel, Not(HasSubstr("forward")));
          EXPECT_THAT(sel, HasSubstr("backward"));
          EXPECT_THAT(all, HasSubstr("forward"));
        } else if (f == "folded") {
          EXPECT_THAT(sel, Not(HasSubstr("0x1000")));  // allocated in forward
          EXPECT_THAT(all, HasSubstr("0x1000"));
        } else {  // churn: only the backward site
          EXPECT_THAT(sel, Not(HasSubstr("0x1000")));
          EXPECT_THAT(sel, HasSubstr("0x3000"));
          EXPECT_THAT(all, HasSubstr("0x1000"));
        }
      },
      [this](std::vector<std::string> a) { return Report(std::move(a)); });
}

void OnlyPid200(const std::string& f, const std::string& all, const std::string& sel) {
  if (f == "text" || f == "churn-text") {
    EXPECT_THAT(sel, HasSubstr("pid 200"));
    EXPECT_THAT(sel, Not(HasSubstr("pid 100")));
    EXPECT_THAT(all, HasSubstr("pid 100"));
  } else if (f == "json" || f == "churn-json" || f == "perfetto") {
    EXPECT_THAT(sel, HasSubstr("\"pid\":200"));
    EXPECT_THAT(sel, Not(HasSubstr("\"pid\":100")));
    EXPECT_THAT(all, HasSubstr("\"pid\":100"));
  } else if (f == "csv" || f == "churn-csv") {
    std::vector<std::string> rows = absl::StrSplit(sel, "\r\n", absl::SkipEmpty());
    ASSERT_GT(rows.size(), 1u);
    for (size_t i = 1; i < rows.size(); ++i)
      EXPECT_TRUE(absl::StartsWith(rows[i], "200,")) << rows[i];
    EXPECT_THAT(all, HasSubstr("\r\n100,"));
  } else if (f == "folded") {  // one process: no [pid] frame
    EXPECT_EQ(sel, "[host];0x1000 2621440\n");
    EXPECT_THAT(all, HasSubstr("[pid 100 rank 0]"));
  }
}

TEST_F(SelectCliTest, PidOnEveryFormat) {
  EveryFormat(this, {"--pid", "200"}, OnlyPid200,
              [this](std::vector<std::string> a) { return Report(std::move(a)); });
}

TEST_F(SelectCliTest, RankOnEveryFormat) {
  EveryFormat(this, {"--rank=1"}, OnlyPid200,
              [this](std::vector<std::string> a) { return Report(std::move(a)); });
}

// --stage on mmap and device records (docs/analysis.md "Selection"), on every
// format: backward's view has neither forward's mapping (0x6000) nor its
// device allocation (0x5000), whose free in backward is dropped with it (kept,
// it would end backward's 1 MiB: device 0 would read 0 at the step ends).
class SelectMixedCliTest : public SelectCliTest {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::WriteFile(dir_.File("a.trace"), Trace(100, "0", 64 * kKiB, true)));
  }
};

TEST_F(SelectMixedCliTest, StageFiltersMmapAndDeviceOnEveryFormat) {
  EveryFormat(
      this, {"--stage", "backward"},
      [](const std::string& f, const std::string& all, const std::string& sel) {
        for (const char* forward_site : {"0x5000", "0x6000"}) {
          EXPECT_THAT(sel, Not(HasSubstr(forward_site))) << forward_site;
        }
        if (f == "text") {
          EXPECT_THAT(all, HasSubstr("0x6000"));
          EXPECT_THAT(sel, HasSubstr("0x7000"));
        } else if (f == "json") {
          // Device 0 at each step end: 1 MiB live, the peak 3 MiB (1 MiB backward's own).
          EXPECT_THAT(all, HasSubstr("\"peak_bytes\":3145728"));
          EXPECT_THAT(sel, Not(HasSubstr("\"peak_bytes\":3145728")));
          EXPECT_THAT(sel, HasSubstr("\"live_bytes_end\":1048576,\"peak_bytes\":1048576"));
          EXPECT_THAT(all, HasSubstr("\"live_bytes_end\":1048576,\"peak_bytes\":3145728"));
          EXPECT_THAT(sel, HasSubstr("0x7000"));
          EXPECT_THAT(sel, HasSubstr("8388608"));  // backward's failed 8 MiB call
          EXPECT_THAT(all, HasSubstr("0x5000"));
        } else if (f == "folded") {
          EXPECT_THAT(all, HasSubstr(";0x6000 41943040\n"));  // forward's 40 mappings
          EXPECT_THAT(sel, HasSubstr(";0x7000 1048576\n"));   // the last backward block
        } else if (f == "churn-text") {
          EXPECT_THAT(sel, HasSubstr("device: exact 1 allocations and 1.00 MiB per step"));
          EXPECT_THAT(all, HasSubstr("device: exact 2 allocations and 3.00 MiB per step"));
          EXPECT_THAT(sel, HasSubstr("site #"));
          EXPECT_THAT(all, HasSubstr("[mmap]"));
          EXPECT_THAT(all, HasSubstr("[device, device 0]  1 allocs/step [1, 1]"));
        } else if (f == "churn-json") {
          EXPECT_THAT(sel, HasSubstr("\"device_alloc_count_per_step\":1,"));
          EXPECT_THAT(all, HasSubstr("\"device_alloc_count_per_step\":2,"));
          EXPECT_THAT(sel, HasSubstr("\"kind\":\"device\",\"device\":0,"));
        } else if (f == "churn-csv") {
          // 0x7000's share: of backward's device allocations alone, of both without --stage.
          EXPECT_THAT(sel, HasSubstr(",device,1.000,1.000,1.000,1048576.0,1048576.0,1048576.0,"
                                     "1.000000,1.000000,"));
          EXPECT_THAT(all, HasSubstr(",device,1.000,1.000,1.000,1048576.0,1048576.0,1048576.0,"
                                     "0.500000,0.333333,"));
          EXPECT_THAT(sel, Not(HasSubstr(",mmap,")));
          EXPECT_THAT(all, HasSubstr(",mmap,1.000,"));
        }
      },
      [this](std::vector<std::string> a) { return Report(std::move(a)); });
}

// --steps on the same records: device and mmap memory before step 10 stays
// live (its frees need it), the rows and the churn are steps 10..19's.
TEST_F(SelectMixedCliTest, StepsWithMmapAndDeviceOnEveryFormat) {
  EveryFormat(
      this, {"--steps", "10:19"},
      [](const std::string& f, const std::string& all, const std::string& sel) {
        if (f == "json") {
          EXPECT_THAT(sel, HasSubstr("\"live_bytes_end\":1048576,\"peak_bytes\":3145728"));
          EXPECT_THAT(sel, Not(HasSubstr("\"step\":20,")));
        } else if (f == "folded") {
          // Live at step 19's end: the mappings of steps 0..19.
          EXPECT_THAT(sel, HasSubstr(";0x6000 20971520\n"));
          EXPECT_THAT(all, HasSubstr(";0x6000 41943040\n"));
        } else if (f == "churn-json") {
          EXPECT_THAT(sel, HasSubstr("\"steps\":10,"));
          EXPECT_THAT(sel, HasSubstr("\"device_alloc_count_per_step\":2,"));
          EXPECT_THAT(sel, HasSubstr("\"kind\":\"device\",\"device\":0,"));
        }
      },
      [this](std::vector<std::string> a) { return Report(std::move(a)); });
}

TEST_F(SelectCliTest, BadSelectionsExitOne) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--steps", "9:3"},
                                             {"--steps", "x"},
                                             {"--steps"},
                                             {"--pid", "-1"},
                                             {"--stage="},
                                             {"--view", "churn", "--format", "folded"},
                                             {"--view", "churn", "--format", "pprof"},
                                             {"--fail-on", "peak > +10%"}}) {
    Result r = Report(args);
    EXPECT_EQ(r.exit_code, 1) << absl::StrJoin(args, " ") << "\n" << r.out;
    EXPECT_THAT(r.err, HasSubstr("memstep: error: "));
    EXPECT_TRUE(r.out.empty());
  }
  Result r = Report({"--pid", "7"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("no process matches pid 7 (the run has: pid 100 (rank 0), pid 200 "
                               "(rank 1))"));
  r = Report({"--steps", "50:"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("the run has steps 0..39"));
  r = Report({"--stage", "optimizer"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("stages: forward, backward"));
  r = Report({"--fail-on", "peak > +10%"});
  EXPECT_THAT(r.err, HasSubstr("memstep diff"));
}

// Gates see the selection: the heap grows 64 KiB a step, live at step 9's
// end is 640 KiB.
TEST_F(SelectCliTest, GatesSeeTheSelection) {
  EXPECT_EQ(Report({"--fail-on", "live_end > 1MiB"}).exit_code, 3);
  EXPECT_EQ(Report({"--steps", ":9", "--fail-on", "live_end > 1MiB"}).exit_code, 0);
  EXPECT_EQ(Report({"--steps", ":9", "--fail-on", "live_end >= 640KiB"}).exit_code, 3);
  EXPECT_EQ(Report({"--fail-on", "churn > 74KiB/step"}).exit_code, 0);
  EXPECT_EQ(Report({"--fail-on", "churn >= 74KiB/step"}).exit_code, 3);
}

class DiffCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* d : {"base", "same", "new"}) ASSERT_EQ(mkdir(dir_.File(d).c_str(), 0755), 0);
    ASSERT_TRUE(testing::WriteFile(dir_.File("base/a.trace"), Trace(100, "0", 64 * kKiB)));
    ASSERT_TRUE(testing::WriteFile(dir_.File("same/a.trace"), Trace(300, "0", 64 * kKiB)));
    ASSERT_TRUE(testing::WriteFile(dir_.File("new/a.trace"), Trace(400, "0", 128 * kKiB)));
  }
  Result Diff(const std::string& a, const std::string& b, std::vector<std::string> args) {
    args.insert(args.begin(), {"diff", dir_.File(a), dir_.File(b), "--no-symbolize"});
    return Cli(args);
  }
  testing::TempDir dir_;
};

TEST_F(DiffCliTest, ExitCodes) {
  const std::vector<std::string> gates = {"--fail-on", "site_growth > +32KiB/step", "--fail-on",
                                          "peak(forward) > +50%"};
  Result r = Diff("base", "same", gates);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Gates: 0 of 2 failed"));
  EXPECT_THAT(r.out, HasSubstr("rank 0 (pid 100 -> 300)"));
  r = Diff("base", "new", gates);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Gates: 2 of 2 failed"));
  EXPECT_THAT(r.err, HasSubstr("memstep: gate failed: site_growth > +32KiB/step"));
  EXPECT_THAT(r.out, HasSubstr("64.0 KiB/step -> 128 KiB/step  +64.0 KiB/step (+100.0 %)"));
  // Absolute gates apply to NEW; the selection to both runs.
  EXPECT_EQ(Diff("base", "new", {"--fail-on", "live_end > 4MiB"}).exit_code, 3);
  EXPECT_EQ(Diff("new", "base", {"--fail-on", "live_end > 4MiB"}).exit_code, 0);
  EXPECT_EQ(Diff("base", "new", {"--steps", ":9", "--fail-on", "live_end > 2MiB"}).exit_code, 0);
  EXPECT_EQ(Diff("base", "new", {"--pid", "100:400", "--fail-on", "peak > +100%"}).exit_code, 0);
  EXPECT_EQ(Diff("base", "new", {"--pid", "100:400", "--fail-on", "peak >= +100%"}).exit_code, 3);
}

TEST_F(DiffCliTest, JsonAndErrors) {
  Result r = Diff("base", "new", {"--format", "json", "--fail-on", "growth > +1MiB/step"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"schema\":\"memstep.diff/1\""));
  EXPECT_THAT(r.out, HasSubstr("\"status\":\"matched\""));
  EXPECT_THAT(r.out, HasSubstr("\"passed\":true"));
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"diff"},
           {"diff", dir_.File("base")},
           {"diff", dir_.File("base"), dir_.File("new"), dir_.File("same")},
           {"diff", dir_.File("base"), dir_.File("new"), "--format", "csv"},
           {"diff", dir_.File("base"), dir_.File("new"), "--fail-on", "peak >> 1"},
           {"diff", dir_.File("base"), dir_.File("new"), "--pid", "1:x"},
           {"diff", dir_.File("base"), dir_.File("missing")},
           {"diff", dir_.File("base"), dir_.File("new"), "--pid", "100"}}) {
    Result e = Cli(args);
    EXPECT_EQ(e.exit_code, 1) << absl::StrJoin(args, " ");
    EXPECT_THAT(e.err, HasSubstr("memstep: error: "));
    EXPECT_TRUE(e.out.empty());
  }
  EXPECT_THAT(Cli({"diff", dir_.File("base"), dir_.File("new"), "--pid", "100"}).err,
              HasSubstr("NEW: "));
  Result help = Cli({"diff", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("usage: memstep diff BASE NEW"));
}

}  // namespace
}  // namespace memstep

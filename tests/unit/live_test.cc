// The incremental tailer (src/reader/tailer.h), the live model
// (src/analysis/live_model.h) and the views of `memstep top` and
// `memstep run --metrics-file` (tools/memstep/live_view.h), on traces that
// grow on disk while they are read.

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/analysis/live_model.h"
#include "src/reader/reader.h"
#include "src/reader/tailer.h"
#include "tests/unit/test_util.h"
#include "tests/unit/trace_builder.h"
#include "tools/memstep/live_view.h"

namespace memstep {
namespace {

using analysis::LiveModel;
using analysis::LiveProcess;
using reader::TraceTailer;
using testing::TempDir;

constexpr uint64_t kLeak = 64 << 10;
constexpr uint64_t kBase = 10 << 20;

analysis::LiveOptions Options(size_t top_sites) {
  analysis::LiveOptions o;
  o.top_sites = top_sites;
  o.symbolize = false;
  return o;
}

format::Counters Live(uint64_t live, uint64_t peak) {
  format::Counters c{};
  c.alloc_bytes = live;
  c.live_bytes = live;
  c.peak_bytes = peak;
  c.rss_bytes = 2 * live;
  return c;
}

// A process that leaks kLeak host bytes (site stack 7) and 1 MiB of device
// memory per step; one chunk per step, chunk_offsets() tell where.
// `stack_at`: the STACK record of site 7 comes at the end of that step (-1:
// in the first chunk, before any reference).
std::vector<uint8_t> StepTrace(int steps, uint32_t pid, const std::string& host, bool trailer,
                               int alert_at = -1, int stack_at = -1) {
  reader::TraceHeaderInfo info;
  info.pid = pid;
  info.tlvs = {{format::kTlvCmdline, std::string("train\0--x", 9)},
               {format::kTlvHostname, host},
               {format::kTlvRankEnv, std::string("RANK=3\0LOCAL_RANK=1", 19)}};
  reader::TraceBuilder b(info);
  b.String(1, "forward");
  b.String(2, "back\"ward\\");
  if (stack_at < 0) b.Stack(7, {0x1234});
  b.Flush();
  for (int s = 0; s < steps; ++s) {
    const uint64_t ts = 1000000ull * (s + 1);
    const uint64_t before = kBase + kLeak * s;
    b.Step(ts, s, 0, Live(before, before));
    b.Stage(ts + 1, 1, s, 0, Live(before, before));
    b.Stage(ts + 2, 1, s, 1, Live(before, before + (4 << 20)));
    b.Stage(ts + 3, 2, s, 0, Live(before, before));
    b.Alloc(ts + 4, 7, 0x100000 + 0x10000 * s, kLeak, 0, 0, s, 2);
    b.DevAlloc(ts + 5, 0, format::kDevDevice, 0,
               0x7000000 + (uint64_t{1} << 20) * static_cast<uint64_t>(s), 1 << 20, 1);
    b.Stage(ts + 6, 2, s, 1, Live(before + kLeak, before + kLeak + (1 << 20)));
    if (s == alert_at) b.Alert(ts + 7, s, format::kAlertGrowth, kLeak, 32 << 10);
    b.Step(ts + 8, s, 1, Live(before + kLeak, before + kLeak + (4 << 20)));
    if (s == stack_at) b.Stack(7, {0x1234});
    b.Flush();
  }
  if (trailer) b.Trailer(1000000ull * (steps + 2), Live(kBase + kLeak * steps, 0), true);
  return b.Finish();
}

// Appends bytes [from, to) of `bytes` to the file at `path`.
void Append(const std::string& path, const std::vector<uint8_t>& bytes, size_t from, size_t to) {
  FILE* f = fopen(path.c_str(), "ab");
  ASSERT_NE(f, nullptr);
  if (to > from) {
    ASSERT_EQ(fwrite(bytes.data() + from, 1, to - from, f), to - from);
  }
  fclose(f);
}

TEST(TailerTest, EveryRecordOnceWhateverTheCutsAndNoErrorOnHalfChunks) {
  TempDir dir;
  const std::vector<uint8_t> bytes = StepTrace(30, 100, "node", true, 12);
  absl::StatusOr<reader::Trace> full = reader::ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(full.ok());
  const std::string path = dir.File("a.trace");
  Append(path, bytes, 0, 0);
  TraceTailer tailer(path);
  std::vector<uint64_t> seqs;
  size_t alerts = 0;
  size_t cut = 0;
  for (size_t next = 0; cut < bytes.size(); next += 37) {
    next = std::min(next, bytes.size());
    Append(path, bytes, cut, next);
    cut = next;
    ASSERT_TRUE(tailer.Poll().ok()) << "cut at " << cut;
    EXPECT_EQ(tailer.corrupt(), "") << "cut at " << cut;
    for (const reader::Event& e : tailer.trace().events) seqs.push_back(e.seq);
    alerts += tailer.trace().alerts.size();
  }
  ASSERT_TRUE(tailer.Poll().ok());
  EXPECT_EQ(tailer.offset(), bytes.size());
  EXPECT_TRUE(tailer.trace().has_trailer);
  ASSERT_EQ(seqs.size(), full->events.size());
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], full->events[i].seq);
  EXPECT_EQ(alerts, 1u);
  EXPECT_EQ(tailer.trace().hostname, "node");
}

TEST(TailerTest, ReadsOnlyTheNewBytes) {
  TempDir dir;
  const std::vector<uint8_t> bytes = StepTrace(40, 100, "node", false);
  // Chunk boundaries: parse the chunk headers.
  absl::StatusOr<reader::Trace> full = reader::ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(full.ok());
  reader::Trace t;
  absl::StatusOr<size_t> header = reader::ParseHeader(bytes.data(), bytes.size(), &t);
  ASSERT_TRUE(header.ok());
  std::vector<size_t> ends;
  for (size_t pos = *header; pos < bytes.size();) {
    reader::Trace one;
    reader::ChunkScan scan = reader::ParseChunks(bytes.data(), pos + 1, pos, &one);
    EXPECT_TRUE(scan.incomplete);  // a chunk cut short is incomplete, not invalid
    format::ChunkHeader ch;
    memcpy(&ch, bytes.data() + pos, sizeof(ch));
    pos += sizeof(ch) + ch.payload_len;
    ends.push_back(pos);
  }
  ASSERT_EQ(ends.size(), 41u);
  const std::string path = dir.File("a.trace");
  Append(path, bytes, 0, *header);
  TraceTailer tailer(path);
  ASSERT_TRUE(tailer.Poll().ok());
  size_t cut = *header;
  for (size_t end : ends) {
    Append(path, bytes, cut, end);
    ASSERT_TRUE(tailer.Poll().ok());
    EXPECT_EQ(tailer.last_bytes_read(), end - cut);
    cut = end;
  }
  EXPECT_EQ(tailer.total_bytes_read(), bytes.size());
}

TEST(TailerTest, HeaderStillBeingWrittenIsNothingYetButGarbageIsAnError) {
  TempDir dir;
  const std::vector<uint8_t> bytes = StepTrace(2, 100, "node", false);
  const std::string path = dir.File("a.trace");
  Append(path, bytes, 0, 20);
  TraceTailer tailer(path);
  ASSERT_TRUE(tailer.Poll().ok());
  EXPECT_FALSE(tailer.header_ready());
  Append(path, bytes, 20, bytes.size());
  ASSERT_TRUE(tailer.Poll().ok());
  EXPECT_TRUE(tailer.header_ready());
  EXPECT_FALSE(tailer.trace().events.empty());

  const std::string junk = dir.File("junk.trace");
  const std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'};
  Append(junk, text, 0, text.size());
  TraceTailer bad(junk);
  absl::Status s = bad.Poll();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("not a memstep trace"));
  TraceTailer missing(dir.File("missing.trace"));
  EXPECT_FALSE(missing.Poll().ok());
}

TEST(TailerTest, InvalidChunkIsReportedOnceTheFileStopsChanging) {
  TempDir dir;
  std::vector<uint8_t> bytes = StepTrace(6, 100, "node", false);
  bytes[bytes.size() - 3] ^= 0x5a;  // the last chunk's payload
  const std::string path = dir.File("a.trace");
  Append(path, bytes, 0, bytes.size());
  TraceTailer tailer(path);
  ASSERT_TRUE(tailer.Poll().ok());
  EXPECT_EQ(tailer.corrupt(), "");  // perhaps still being written
  EXPECT_FALSE(tailer.trace().events.empty());
  ASSERT_TRUE(tailer.Poll().ok());
  EXPECT_THAT(tailer.corrupt(), ::testing::HasSubstr("CRC mismatch"));
}

class LiveModelTest : public ::testing::Test {
 protected:
  const LiveProcess& Only(const LiveModel& m) {
    EXPECT_EQ(m.processes().size(), 1u);
    return m.processes().front();
  }
  TempDir dir_;
};

TEST_F(LiveModelTest, FollowsStepsStagesGrowthDeviceAlertsAndSites) {
  const int kSteps = 24;
  const std::vector<uint8_t> bytes = StepTrace(kSteps, 4242, "node", true, 20);
  absl::StatusOr<reader::Trace> full = reader::ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(full.ok());
  LiveModel model(dir_.path(), Options(3));
  ASSERT_TRUE(model.Refresh().ok());
  EXPECT_TRUE(model.processes().empty());
  EXPECT_FALSE(model.ended());

  const std::string path = dir_.File("memstep.node.3.4242.trace");
  // Cut inside step 10's chunk: steps 0..9 are whole.
  reader::Trace t;
  const size_t header = *reader::ParseHeader(bytes.data(), bytes.size(), &t);
  size_t pos = header;
  std::vector<size_t> ends;
  while (pos < bytes.size()) {
    format::ChunkHeader ch;
    memcpy(&ch, bytes.data() + pos, sizeof(ch));
    pos += sizeof(ch) + ch.payload_len;
    ends.push_back(pos);
  }
  // ends[0]: the dictionary chunk; ends[1 + s]: step s.
  Append(path, bytes, 0, ends[10] + 5);
  ASSERT_TRUE(model.Refresh().ok());
  {
    const LiveProcess& p = Only(model);
    EXPECT_EQ(p.state, LiveProcess::State::kRunning);
    EXPECT_EQ(p.host, "node");
    EXPECT_EQ(p.rank, "3");
    EXPECT_EQ(p.pid, 4242u);
    EXPECT_EQ(p.command, "train");
    EXPECT_EQ(p.step, 9u);
    EXPECT_EQ(p.steps_done, 10u);
    EXPECT_EQ(p.host_live, kBase + kLeak * 10);
    EXPECT_EQ(p.step_peak, kBase + kLeak * 10 + (4 << 20));
    EXPECT_DOUBLE_EQ(p.growth_per_step, static_cast<double>(kLeak));
    EXPECT_EQ(p.device_live, uint64_t{10} << 20);
    EXPECT_DOUBLE_EQ(p.device_growth_per_step, static_cast<double>(1 << 20));
    ASSERT_EQ(p.stages.size(), 2u);
    EXPECT_EQ(p.stages[0].name, "back\"ward\\");
    EXPECT_EQ(p.stages[0].last_peak, kBase + kLeak * 10 + (1 << 20));
    EXPECT_EQ(p.stages[1].name, "forward");
    EXPECT_EQ(p.stages[1].max_peak, kBase + kLeak * 9 + (4 << 20));
    EXPECT_EQ(p.alerts_total, 0u);
    // The planted site grows kLeak per step; the device site 1 MiB.
    ASSERT_EQ(p.top_sites.size(), 2u);
    EXPECT_TRUE(p.top_sites[0].device);
    EXPECT_DOUBLE_EQ(p.top_sites[0].growth_per_step, 1 << 20);
    EXPECT_FALSE(p.top_sites[1].device);
    EXPECT_DOUBLE_EQ(p.top_sites[1].growth_per_step, static_cast<double>(kLeak));
    EXPECT_DOUBLE_EQ(p.top_sites[1].live_bytes, static_cast<double>(kLeak * 10));
    EXPECT_EQ(p.top_sites[1].name, "0x1234");
  }
  EXPECT_EQ(model.steps_done(), 10u);
  EXPECT_FALSE(model.ended());

  Append(path, bytes, ends[10] + 5, bytes.size());
  ASSERT_TRUE(model.Refresh().ok());
  const LiveProcess& p = Only(model);
  EXPECT_EQ(p.step, uint64_t{kSteps - 1});
  EXPECT_EQ(p.steps_done, uint64_t{kSteps});
  EXPECT_EQ(p.alerts_total, 1u);
  EXPECT_EQ(p.alerts_by_rule.at("growth"), 1u);
  ASSERT_EQ(p.recent_alerts.size(), 1u);
  EXPECT_EQ(p.recent_alerts[0].step, 20u);
  EXPECT_EQ(p.state, LiveProcess::State::kExited);
  EXPECT_TRUE(p.clean_exit);
  EXPECT_TRUE(model.ended());
}

TEST_F(LiveModelTest, NewProcessesAppearAndTheRunEndsWhenAllDid) {
  const std::vector<uint8_t> a = StepTrace(5, 11, "h1", true);
  const std::vector<uint8_t> b = StepTrace(7, 12, "h2", false);
  Append(dir_.File("memstep.h1.na.11.trace"), a, 0, a.size());
  LiveModel model(dir_.path(), Options(0));
  ASSERT_TRUE(model.Refresh().ok());
  EXPECT_TRUE(model.ended());  // the only process so far exited
  Append(dir_.File("memstep.h2.na.12.trace"), b, 0, b.size() / 2);
  Append(dir_.File("not-a-trace.txt"), a, 0, 10);
  ASSERT_TRUE(model.Refresh().ok());
  ASSERT_EQ(model.processes().size(), 2u);
  EXPECT_FALSE(model.ended());  // h2 has no trailer and is on another host
  Append(dir_.File("memstep.h2.na.12.trace"), b, b.size() / 2, b.size());
  ASSERT_TRUE(model.Refresh().ok());
  EXPECT_EQ(model.processes()[1].steps_done, 7u);
  EXPECT_EQ(model.steps_done(), 12u);
  EXPECT_FALSE(model.ended());
}

TEST_F(LiveModelTest, ASiteIsNamedOnceItsStackArrives) {
  const std::vector<uint8_t> a = StepTrace(12, 3, "node", false, -1, 10);
  const std::string path = dir_.File("memstep.node.na.3.trace");
  Append(path, a, 0, a.size() / 2);  // steps 0..4 or so: no STACK record yet
  LiveModel model(dir_.path(), Options(2));
  ASSERT_TRUE(model.Refresh().ok());
  // [0] is the device site (1 MiB/step), [1] the host site 7 (64 KiB/step).
  ASSERT_EQ(model.processes()[0].top_sites.size(), 2u);
  EXPECT_EQ(model.processes()[0].top_sites[1].name, "stack#7");
  Append(path, a, a.size() / 2, a.size());
  ASSERT_TRUE(model.Refresh().ok());
  ASSERT_EQ(model.processes()[0].top_sites.size(), 2u);
  EXPECT_EQ(model.processes()[0].top_sites[1].name, "0x1234");
}

TEST_F(LiveModelTest, AProcessKilledOnThisHostIsGone) {
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // now no such process
  const std::vector<uint8_t> dead = StepTrace(4, static_cast<uint32_t>(child), host, false);
  const std::vector<uint8_t> alive = StepTrace(4, static_cast<uint32_t>(getpid()), host, false);
  Append(dir_.File("memstep.a.trace"), dead, 0, dead.size());
  Append(dir_.File("memstep.b.trace"), alive, 0, alive.size());
  LiveModel model(dir_.path(), Options(0));
  ASSERT_TRUE(model.Refresh().ok());
  EXPECT_FALSE(model.caught_up());  // the pids were learned: once more
  ASSERT_TRUE(model.Refresh().ok());
  EXPECT_TRUE(model.caught_up());
  ASSERT_EQ(model.processes().size(), 2u);
  EXPECT_EQ(model.processes()[0].state, LiveProcess::State::kGone);
  EXPECT_EQ(model.processes()[0].steps_done, 4u);
  EXPECT_EQ(model.processes()[1].state, LiveProcess::State::kRunning);
  EXPECT_FALSE(model.ended());
}

TEST_F(LiveModelTest, ALongRunCostsTheSamePerRefresh) {
  // 3000 steps: each refresh reads one step's chunk, at step 10 as at 2990.
  const int kSteps = 3000;
  const std::vector<uint8_t> bytes = StepTrace(kSteps, 9, "node", false);
  reader::Trace t;
  size_t pos = *reader::ParseHeader(bytes.data(), bytes.size(), &t);
  std::vector<size_t> ends;
  while (pos < bytes.size()) {
    format::ChunkHeader ch;
    memcpy(&ch, bytes.data() + pos, sizeof(ch));
    pos += sizeof(ch) + ch.payload_len;
    ends.push_back(pos);
  }
  const std::string path = dir_.File("memstep.node.na.9.trace");
  Append(path, bytes, 0, ends[0]);
  LiveModel model(dir_.path(), Options(5));
  ASSERT_TRUE(model.Refresh().ok());
  for (int s = 0; s < kSteps; ++s) {
    Append(path, bytes, ends[s], ends[s + 1]);
    ASSERT_TRUE(model.Refresh().ok());
    EXPECT_EQ(model.last_bytes_read(), ends[s + 1] - ends[s]);
    ASSERT_EQ(model.processes()[0].steps_done, static_cast<uint64_t>(s + 1));
  }
  EXPECT_DOUBLE_EQ(model.processes()[0].growth_per_step, static_cast<double>(kLeak));
}

TEST_F(LiveModelTest, ABadDirectoryIsAnError) {
  LiveModel missing(dir_.File("nope"));
  absl::Status s = missing.Refresh();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("No such file"));
  const std::vector<uint8_t> a = StepTrace(1, 1, "h", true);
  Append(dir_.File("file"), a, 0, a.size());
  LiveModel file(dir_.File("file"));
  s = file.Refresh();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("not a directory"));
}

// The exposition format 0.0.4, strictly: HELP then TYPE then the family's
// samples, names [a-zA-Z_:][a-zA-Z0-9_:]*, label values with \\ \" \n only.
void CheckExposition(const std::string& text, std::set<std::string>* families) {
  const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*))");
  const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|untyped))");
  const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*)\} )"
      R"((-?[0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?|NaN|[+-]Inf))");
  std::string current, pending_help;
  std::smatch m;
  size_t start = 0;
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(text.back(), '\n');
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (std::regex_match(line, m, help)) {
      pending_help = m[1];
      EXPECT_TRUE(families->insert(m[1]).second) << "family twice: " << line;
    } else if (std::regex_match(line, m, type)) {
      EXPECT_EQ(m[1], pending_help) << "TYPE without its HELP: " << line;
      current = m[1];
    } else if (std::regex_match(line, m, sample)) {
      EXPECT_EQ(m[1], current) << "sample outside its family: " << line;
    } else {
      ADD_FAILURE() << "not exposition format: '" << line << "'";
    }
  }
}

TEST_F(LiveModelTest, PrometheusExpositionIsValidAndEscaped) {
  const std::vector<uint8_t> a = StepTrace(8, 77, "no\"de\\1\nx", false, 6);
  Append(dir_.File("memstep.x.3.77.trace"), a, 0, a.size());
  LiveModel model(dir_.path(), Options(0));
  ASSERT_TRUE(model.Refresh().ok());
  const std::string text = cli::FormatPrometheus(model);
  std::set<std::string> families;
  CheckExposition(text, &families);
  for (const char* f :
       {"memstep_step", "memstep_host_live_bytes", "memstep_device_live_bytes",
        "memstep_stage_peak_bytes", "memstep_growth_bytes_per_step", "memstep_alerts_total",
        "memstep_steps_completed_total", "memstep_process_running"}) {
    EXPECT_TRUE(families.count(f) != 0) << f;
  }
  const std::string labels = R"({host="no\"de\\1\nx",rank="3",pid="77"})";
  EXPECT_THAT(text, ::testing::HasSubstr(absl::StrCat("memstep_step", labels, " 7\n")));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        absl::StrCat("memstep_host_live_bytes", labels, " ", kBase + 8 * kLeak)));
  EXPECT_THAT(
      text, ::testing::HasSubstr(absl::StrCat("memstep_growth_bytes_per_step", labels, " 65536")));
  EXPECT_THAT(text, ::testing::HasSubstr(R"(memstep_stage_peak_bytes{host="no\"de\\1\nx",rank="3",)"
                                         R"(pid="77",stage="back\"ward\\"} )"));
  EXPECT_THAT(text, ::testing::HasSubstr(absl::StrCat(
                        R"(memstep_alerts_total{host="no\"de\\1\nx",rank="3",pid="77",)",
                        R"(rule="growth"} 1)")));
  EXPECT_EQ(cli::EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

TEST_F(LiveModelTest, MetricsFileIsReplacedAtomically) {
  const std::string path = dir_.File("m.prom");
  ASSERT_TRUE(cli::WriteFileAtomically(path, "one\n").ok());
  ASSERT_TRUE(cli::WriteFileAtomically(path, "two\n").ok());
  FILE* f = fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char buf[16] = {};
  ASSERT_EQ(fread(buf, 1, sizeof(buf), f), 4u);
  fclose(f);
  EXPECT_STREQ(buf, "two\n");
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0);
  absl::Status s = cli::WriteFileAtomically(dir_.File("no/such/dir/m.prom"), "x");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("No such file"));
}

TEST_F(LiveModelTest, FrameFitsTheTerminalAndSaysWhenTheRunEnded) {
  const std::vector<uint8_t> a = StepTrace(20, 5, "node", false, 18);
  Append(dir_.File("memstep.node.3.5.trace"), a, 0, a.size());
  LiveModel model(dir_.path(), Options(3));
  ASSERT_TRUE(model.Refresh().ok());
  std::vector<std::string> lines = cli::RenderFrame(model, 0, 0, "12:00:00");
  std::string all;
  for (const std::string& l : lines) absl::StrAppend(&all, l, "\n");
  EXPECT_THAT(all, ::testing::HasSubstr("running: 1 of 1 process"));
  EXPECT_THAT(all, ::testing::HasSubstr("GROWING SITES"));
  EXPECT_THAT(all, ::testing::HasSubstr("0x1234"));
  EXPECT_THAT(all, ::testing::HasSubstr("+64.0 KiB"));
  EXPECT_THAT(all, ::testing::HasSubstr("step 18"));
  lines = cli::RenderFrame(model, 40, 6, "12:00:00");
  EXPECT_LE(lines.size(), 6u);
  for (const std::string& l : lines) EXPECT_LE(l.size(), 40u);

  TempDir ended;
  const std::vector<uint8_t> b = StepTrace(3, 6, "node", true);
  Append(ended.File("memstep.node.na.6.trace"), b, 0, b.size());
  LiveModel done(ended.path(), Options(3));
  ASSERT_TRUE(done.Refresh().ok());
  lines = cli::RenderFrame(done, 0, 0, "12:00:00");
  EXPECT_THAT(lines[1], ::testing::HasSubstr("RUN ENDED"));
}

}  // namespace
}  // namespace memstep

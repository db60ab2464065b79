// The exports of src/report/formats.h on a small deterministic trace
// (export_trace.h), against golden files in tests/unit/golden/ (rewrite them
// with MEMSTEP_UPDATE_GOLDEN=1 and review the diff), and their escaping and
// encodings on planted inputs. Through the CLI, export_cli_test.py decodes
// the pprof file with a protobuf decoder of its own and checks the Chrome
// trace JSON with Python's gzip and json modules.

#include <fstream>
#include <functional>
#include <sstream>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/analysis/slices.h"
#include "src/report/churn_report.h"
#include "src/report/formats.h"
#include "src/report/pprof_encoding.h"
#include "tests/unit/export_trace.h"
#include "tests/unit/test_util.h"
#include "tests/unit/trace_builder.h"

namespace memstep::report {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

analysis::Report Analyzed(bool timeline, size_t top_peak_sites = 10) {
  testing::TempDir dir;
  const std::string file = dir.File("export.trace");
  EXPECT_TRUE(testing::WriteFile(file, testing::ExportTrace()));
  analysis::Options o;
  o.symbolize = false;
  o.memory_limit = uint64_t{64} << 30;
  o.timeline = timeline;
  o.top_peak_sites = top_peak_sites;
  absl::StatusOr<analysis::Report> r = analysis::AnalyzeRun(file, o);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  r->path = "export.trace";  // not the temporary directory
  return *std::move(r);
}

// Compares `actual` with tests/unit/golden/NAME (or rewrites it).
void ExpectGolden(const std::string& name, const std::string& actual) {
  const std::string path = absl::StrCat(MEMSTEP_SOURCE_DIR, "/tests/unit/golden/", name);
  if (const char* u = getenv("MEMSTEP_UPDATE_GOLDEN"); u != nullptr && *u == '1') {
    ASSERT_TRUE(testing::WriteFile(path, actual)) << path;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << path << " missing (MEMSTEP_UPDATE_GOLDEN=1 writes it)";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(actual, expected.str()) << "differs from " << path;
}

std::string Folded(const analysis::Report& r, const std::string& view) {
  absl::StatusOr<FoldedView> v = ParseFoldedView(view);
  EXPECT_TRUE(v.ok()) << v.status();
  absl::StatusOr<std::string> out = FormatFolded(r, *v);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "";
}

TEST(ExportGoldenTest, Folded) {
  const analysis::Report r = Analyzed(false, SIZE_MAX);
  ExpectGolden("export.live-end.folded", Folded(r, "live-end"));
  ExpectGolden("export.peak.folded", Folded(r, "peak"));
  ExpectGolden("export.stage-forward.folded", Folded(r, "stage:forward"));
  ExpectGolden("export.class-leak.folded", Folded(r, "class:LEAK"));
  // The planted facts the golden files hold: the leak is exact (p = 1).
  EXPECT_THAT(Folded(r, "class:leak"), HasSubstr(" 2621440\n"));  // 40 x 64 KiB
  EXPECT_EQ(Folded(r, "class:bounded"), Folded(r, "class:BOUNDED_GROWTH"));
}

TEST(ExportGoldenTest, Csv) { ExpectGolden("export.csv", FormatCsv(Analyzed(false))); }

// What a streaming Write* form passes to its sink, joined; the pieces'
// count in `pieces`.
std::string Joined(const std::function<bool(const TextSink&)>& write, size_t* pieces) {
  std::string out;
  *pieces = 0;
  EXPECT_TRUE(write([&](std::string_view piece) {
    ++*pieces;
    out.append(piece);
    return true;
  }));
  return out;
}

TEST(ExportGoldenTest, Perfetto) {
  const analysis::Report r = Analyzed(true);
  ExpectGolden("export.perfetto.json", FormatPerfetto(r));
  // Streamed (memstep report --format perfetto): the same bytes.
  size_t pieces = 0;
  EXPECT_EQ(Joined([&](const TextSink& sink) { return WritePerfetto(r, sink); }, &pieces),
            FormatPerfetto(r));
  EXPECT_GE(pieces, 1u);
}

// The JSON documents streamed (memstep report --format json, --view churn):
// the bytes of their string forms.
TEST(ExportStreamTest, JsonAndChurnStreamTheSameBytes) {
  const analysis::Report r = Analyzed(false);
  size_t pieces = 0;
  for (const ReportOptions& o : {ReportOptions{0, 0}, ReportOptions{1, 2}}) {
    EXPECT_EQ(Joined([&](const TextSink& sink) { return WriteJson(r, o, sink); }, &pieces),
              FormatJson(r, o));
    EXPECT_EQ(Joined([&](const TextSink& sink) { return WriteChurnJson(r, o, sink); }, &pieces),
              FormatChurnJson(r, o));
  }
}

TEST(FoldedTest, ViewsAndErrors) {
  for (const char* bad : {"", "live", "stage:", "class:", "class:GROWING", "peak:x"}) {
    absl::StatusOr<FoldedView> v = ParseFoldedView(bad);
    EXPECT_FALSE(v.ok()) << bad;
    if (!v.ok()) {
      EXPECT_THAT(v.status().message(), HasSubstr("live-end, peak, stage:NAME"));
    }
  }
  const analysis::Report r = Analyzed(false);
  absl::StatusOr<std::string> none = FormatFolded(r, *ParseFoldedView("stage:fwd"));
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("no stage 'fwd' in the trace (stages: forward, "));
}

TEST(FoldedTest, FramesAreEscapedAndProcessesNamed) {
  analysis::Report r;
  for (uint32_t pid : {1u, 2u}) {
    analysis::ProcessSummary p;
    p.pid = pid;
    p.rank = pid == 2 ? "1" : "";
    r.processes.push_back(p);
  }
  analysis::Site s;
  s.pid = 2;
  s.live_bytes_end = 1000.6;
  analysis::Frame leaf, root;
  leaf.function = "f;g\nh";
  root.function = "main";
  s.frames = {leaf, root};
  r.sites.push_back(s);
  s.kind = analysis::SiteKind::kDevice;
  s.device = 1;
  s.pid = 1;
  s.frames.clear();
  s.live_bytes_end = 0.4;  // rounds to 0: left out
  r.sites.push_back(s);
  absl::StatusOr<std::string> out = FormatFolded(r, FoldedView{});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "[pid 2 rank 1];[host];main;f,g h 1001\n");
  r.sites.back().live_bytes_end = 7;
  EXPECT_EQ(*FormatFolded(r, FoldedView{}),
            "[pid 1];[device 1];[no stack] 7\n[pid 2 rank 1];[host];main;f,g h 1001\n");
}

TEST(CsvTest, Quoting) {
  EXPECT_EQ(CsvField("plain"), "plain");
  EXPECT_EQ(CsvField(""), "");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(CsvField(" padded"), "\" padded\"");
}

TEST(PerfettoTest, StringsAreEscaped) {
  analysis::Report r;
  analysis::ProcessSummary p;
  p.pid = 5;
  p.cmdline = "python \"x\".py\n";
  r.processes.push_back(p);
  r.spans.push_back(analysis::TimelineSpan{5, 9, 0, "a\"b\\c", 0.5, 1.0, 10});
  const std::string json = FormatPerfetto(r);
  EXPECT_THAT(json, HasSubstr("\"name\":\"pid 5: python \\\"x\\\".py\\n\""));
  EXPECT_THAT(json, HasSubstr("\"name\":\"a\\\"b\\\\c\",\"pid\":5,\"tid\":9,\"ts\":500000.000,"
                              "\"dur\":500000.000"));
}

// A run longer than the slice bound: the slices merge into buckets of steps
// (powers of two) and stay within the bound, and each merged slice is the
// sum of the unbounded slices of its steps and stage (alloc and live, with
// frees applied before and after a merge).
TEST(SiteSlicesTest, BoundedByMergingStepsIntoBuckets) {
  reader::Trace t;
  t.strings[1] = "forward";
  analysis::SliceTracker bounded(8), unbounded(1u << 20);
  auto apply = [&](const reader::Event& e) {
    bounded.Apply(e, t);
    unbounded.Apply(e, t);
  };
  uint64_t addr = 0x1000;
  for (uint64_t step = 0; step < 40; ++step) {
    reader::Event st;
    st.tag = format::kTagStep;
    st.step = step;
    st.phase = 0;
    apply(st);
    for (uint64_t stage = 0; stage < 2; ++stage) {
      reader::Event a;
      a.tag = format::kTagAlloc;
      a.stack = 7;
      a.addr = addr++;
      a.size = 100 + step;
      a.interval = 0;  // p = 1: exact sums
      a.str = stage;
      apply(a);
      if (step % 3 == 0 && step > 0) {
        reader::Event f;
        f.tag = format::kTagFree;
        f.addr = a.addr - 2;  // the same stage's block of the step before
        apply(f);
      }
    }
    st.phase = 1;
    apply(st);
  }
  EXPECT_EQ(unbounded.step_bucket(), 1);
  EXPECT_EQ(bounded.step_bucket(), 16);  // 80 slices -> 40 -> 20 -> 10 -> 6 (<= 8)
  const std::vector<analysis::SiteSlice> fine = unbounded.SlicesOf(7);
  const std::vector<analysis::SiteSlice> coarse = bounded.SlicesOf(7);
  ASSERT_EQ(fine.size(), 80u);
  ASSERT_LE(coarse.size(), 8u);
  size_t covered = 0;
  double freed_somewhere = 0;
  for (const analysis::SiteSlice& c : coarse) {
    EXPECT_EQ(c.step % 16, 0) << c.step;
    EXPECT_EQ(c.step_last, c.step + 15);
    double alloc = 0, live = 0, count = 0;
    for (const analysis::SiteSlice& f : fine) {
      EXPECT_EQ(f.step_last, f.step);
      if (f.stage != c.stage || f.step < c.step || f.step > c.step_last) continue;
      alloc += f.alloc_bytes;
      live += f.live_bytes_end;
      count += f.alloc_count;
      ++covered;
    }
    EXPECT_EQ(c.alloc_bytes, alloc) << c.step << " " << c.stage;
    EXPECT_EQ(c.live_bytes_end, live) << c.step << " " << c.stage;
    EXPECT_EQ(c.alloc_count, count) << c.step << " " << c.stage;
    freed_somewhere += c.alloc_bytes - c.live_bytes_end;
  }
  EXPECT_EQ(covered, fine.size());
  EXPECT_GT(freed_somewhere, 0);  // the frees reached merged slices
}

// Site::slices split a site's estimates by (step, stage) of allocation and
// sum to them, also for sampled allocations (weights 1/p) that are freed,
// reallocated over and left live.
TEST(SiteSlicesTest, SumToTheSite) {
  reader::TraceBuilder b;
  b.String(1, "forward");
  b.Stack(1, {0x1000});
  format::Counters c{};
  uint64_t addr = 0x1000000;
  b.Alloc(1, 1, addr++, 3000, 4096);  // before the first step
  for (uint64_t step = 0; step < 5; ++step) {
    b.Step(10 + 10 * step, step, 0, c);
    b.Alloc(11 + 10 * step, 1, addr, 100 + step, 4096, 0, step, 1);
    b.Alloc(12 + 10 * step, 1, addr + 1, 5000, 4096, 0, step, 0);
    if (step % 2 == 0) b.Free(13 + 10 * step, addr);
    b.Alloc(14 + 10 * step, 1, addr + 1, 7000, 4096, 0, step, 1);  // over a live block
    addr += 2;
    b.Step(15 + 10 * step, step, 1, c);
  }
  testing::TempDir dir;
  ASSERT_TRUE(testing::WriteFile(dir.File("s.trace"), b.Finish()));
  analysis::Options o;
  o.symbolize = false;
  o.site_slices = true;
  absl::StatusOr<analysis::Report> r = analysis::AnalyzeRun(dir.File("s.trace"), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->sites.size(), 1u);
  const analysis::Site& s = r->sites[0];
  // (-1, ""), then per step ("" and "forward").
  ASSERT_EQ(s.slices.size(), 11u);
  EXPECT_EQ(s.slices[0].step, -1);
  EXPECT_EQ(s.slices[0].stage, "");
  EXPECT_EQ(s.slices[1].step, 0);
  EXPECT_EQ(s.slices[2].stage, "forward");
  double alloc_bytes = 0, alloc_count = 0, live_bytes = 0, live_count = 0;
  for (const analysis::SiteSlice& x : s.slices) {
    alloc_bytes += x.alloc_bytes;
    alloc_count += x.alloc_count;
    live_bytes += x.live_bytes_end;
    live_count += x.live_count_end;
  }
  EXPECT_NEAR(alloc_bytes, s.alloc_bytes, 1e-6 * s.alloc_bytes);
  EXPECT_NEAR(alloc_count, s.alloc_count, 1e-6 * s.alloc_count);
  EXPECT_NEAR(live_bytes, s.live_bytes_end, 1e-6 * s.live_bytes_end);
  EXPECT_NEAR(live_count, s.live_count_end, 1e-6 * s.live_count_end);
  // Step 0's "" slice: its 5000-byte block was allocated over, so nothing is
  // live; step 1's "forward" slice keeps its 101-byte block and its 7000.
  EXPECT_EQ(s.slices[1].live_bytes_end, 0);
  EXPECT_GT(s.slices[4].live_bytes_end, 7000);
  // Without the option, no slices.
  o.site_slices = false;
  EXPECT_TRUE(analysis::AnalyzeRun(dir.File("s.trace"), o)->sites[0].slices.empty());
}

// Processes line up on the wall clock: the later one's events are shifted
// by the difference of their trace starts.
TEST(PerfettoTest, ProcessesShareOneClock) {
  analysis::Report r;
  for (uint32_t pid : {1u, 2u}) {
    analysis::ProcessSummary p;
    p.pid = pid;
    p.start_real_ns = 5000000000ull + (pid - 1) * 1500000000ull;  // pid 2 starts 1.5 s later
    r.processes.push_back(p);
    r.spans.push_back(analysis::TimelineSpan{pid, 0, 7, "", 0.25, 0.5, 0});
    r.timeline.push_back(analysis::TimelinePoint{pid, 0.5, 100 * pid, 0, 0});
  }
  const std::string json = FormatPerfetto(r);
  EXPECT_THAT(json, HasSubstr("\"name\":\"step 7\",\"pid\":1,\"tid\":0,\"ts\":250000.000,"));
  EXPECT_THAT(json, HasSubstr("\"name\":\"step 7\",\"pid\":2,\"tid\":0,\"ts\":1750000.000,"));
  EXPECT_THAT(json, HasSubstr("{\"ph\":\"C\",\"name\":\"host live\",\"pid\":2,\"ts\":2000000.000,"
                              "\"args\":{\"bytes\":200}}"));
  // No RSS recorded: no RSS track.
  EXPECT_THAT(json, Not(HasSubstr("\"RSS\"")));
}

TEST(PprofEncodingTest, Crc32) {
  EXPECT_EQ(Crc32(""), 0u);
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(Crc32("The quick brown fox jumps over the lazy dog"), 0x414FA339u);
}

TEST(PprofEncodingTest, GzipStoredBlocks) {
  EXPECT_EQ(Gzip(""),
            std::string("\x1f\x8b\x08\0\0\0\0\0\0\xff\x01\0\0\xff\xff\0\0\0\0\0\0\0\0", 23));
  const std::string hi = Gzip("hi");
  EXPECT_EQ(hi.substr(10, 7), std::string("\x01\x02\0\xfd\xffhi", 7));
  // 65535 bytes fill one block; one more byte starts a second, final one.
  const std::string big(65536, 'x');
  const std::string z = Gzip(big);
  ASSERT_EQ(z.size(), 10 + 5 + 65535 + 5 + 1 + 8);
  EXPECT_EQ(z[10], '\0');
  EXPECT_EQ(z.substr(11, 4), std::string("\xff\xff\0\0", 4));
  EXPECT_EQ(z[10 + 5 + 65535], '\x01');
}

TEST(PprofEncodingTest, WireFormat) {
  ProtoWriter w;
  w.Varint(1, 150);
  w.Bytes(2, "hi");
  w.Packed(1, {1, 300});
  w.Packed(3, {});
  w.Int64(4, -1);
  EXPECT_EQ(w.data(), std::string("\x08\x96\x01\x12\x02hi\x0a\x03\x01\xac\x02"
                                  "\x20\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
                                  23));
}

}  // namespace
}  // namespace memstep::report

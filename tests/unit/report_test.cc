#include "src/report/report.h"

#include <elf.h>
#include <link.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/report/json_writer.h"
#include "tests/unit/test_util.h"
#include "tests/unit/trace_builder.h"

namespace memstep::report {
namespace {

analysis::Options WithSymbolize(bool on) {
  analysis::Options o;
  o.symbolize = on;
  return o;
}

using analysis::Frame;
using analysis::Report;
using analysis::Site;
using analysis::StepRow;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(HumanBytesTest, Units) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(1536), "1.50 KiB");
  EXPECT_EQ(HumanBytes(12.0 * (1 << 20)), "12.0 MiB");
  EXPECT_EQ(HumanBytes(3.25 * (1ull << 30)), "3.25 GiB");
  EXPECT_EQ(Thousands(12345678), "12,345,678");
  EXPECT_EQ(Thousands(999), "999");
}

TEST(JsonTest, Escaping) {
  EXPECT_EQ(JsonEscape("a\"b\\c\n\t\x01"), "a\\\"b\\\\c\\n\\t\\u0001");
  EXPECT_EQ(JsonEscape("caf\xc3\xa9 \xff\xc3"), "caf\xc3\xa9 \\ufffd\\ufffd");
  // Ill-formed sequences a command line can carry (CPython's test_os passes
  // them): surrogates, overlong forms, lead bytes above F4, code points above
  // U+10FFFF. Each ill-formed byte becomes U+FFFD; valid 4-byte forms stay.
  EXPECT_EQ(JsonEscape("\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd");
  EXPECT_EQ(JsonEscape("\xe0\x80\x80"), "\\ufffd\\ufffd\\ufffd");
  EXPECT_EQ(JsonEscape("\xf0\x80\x80\x80"), "\\ufffd\\ufffd\\ufffd\\ufffd");
  EXPECT_EQ(JsonEscape("\xfd\xbf\xbf"), "\\ufffd\\ufffd\\ufffd");
  EXPECT_EQ(JsonEscape("\xf4\x90\x80\x80"), "\\ufffd\\ufffd\\ufffd\\ufffd");
  EXPECT_EQ(JsonEscape("\xf0\x9f\x98\x80 \xed\x9f\xbf"), "\xf0\x9f\x98\x80 \xed\x9f\xbf");
}

Report SmallReport(size_t steps) {
  Report r;
  r.path = "/runs/r1";
  analysis::ProcessSummary p;
  p.pid = 77;
  p.cmdline = "python \"train\".py";
  p.clean_exit = true;
  p.live_bytes_end = 5 << 20;
  p.peak_bytes = 9 << 20;
  r.processes.push_back(p);
  for (size_t i = 0; i < steps; ++i) {
    StepRow s;
    s.pid = 77;
    s.step = i;
    s.peak_bytes = (i == 17 ? 900 : 10 + i % 5) << 20;
    s.live_bytes_end = 5 << 20;
    s.stage_peaks["forward"] = 3 << 20;
    r.steps.push_back(s);
  }
  Site s;
  s.id = 1;
  s.kind = analysis::SiteKind::kHost;
  s.pid = 77;
  s.live_bytes_end = 5 << 20;
  s.live_bytes_at_peak = 1 << 20;
  s.live_bytes_end_low = 4 << 20;
  s.live_bytes_end_high = 6 << 20;
  s.samples = 12;
  Frame f;
  f.function = "planted_leaky_function(int)";
  f.file = "/src/leak.cc";
  f.line = 42;
  f.module = "/opt/app/train";
  f.inlined = true;
  s.frames.push_back(f);
  f.function = "main";
  f.inlined = false;
  f.line = 7;
  s.frames.push_back(f);
  s.live_bytes_by_step.assign(steps, 1.5);
  r.sites.push_back(s);
  r.warnings.push_back("/runs/r1/x.trace: truncated at offset 123 (file ends inside a chunk)");
  return r;
}

TEST(TextReportTest, Sections) {
  std::string text = FormatText(SmallReport(3));
  EXPECT_THAT(text, HasSubstr("memstep report: /runs/r1"));
  EXPECT_THAT(text, HasSubstr("pid 77"));
  EXPECT_THAT(text, HasSubstr("clean exit"));
  EXPECT_THAT(text, HasSubstr("warning: /runs/r1/x.trace: truncated at offset 123"));
  EXPECT_THAT(text, HasSubstr("live at end      5.00 MiB (5,242,880 bytes)"));
  EXPECT_THAT(text, HasSubstr("forward"));
  EXPECT_THAT(text, HasSubstr("[inlined] planted_leaky_function(int)  /src/leak.cc:42  (train)"));
  EXPECT_THAT(text, HasSubstr("main  /src/leak.cc:7  (train)"));
  EXPECT_THAT(text, HasSubstr("call sites at the peak"));
  // A sampled site's live bytes with their 95 % interval; none given at the
  // peak (high < 0): no interval printed there.
  EXPECT_THAT(text, HasSubstr("5.00 MiB  100.0%  95% CI 4.00 MiB-6.00 MiB  ~"));
  EXPECT_THAT(text, HasSubstr("1.00 MiB  100.0%  host"));
  EXPECT_THAT(text, Not(HasSubstr("...")));
}

// A leak the program frees at exit (Python's teardown frees a list of kept
// tensors): the growing site's line says what was live at the last step end.
TEST(TextReportTest, LeakFreedAtExitShowsTheLastStepEnd) {
  Report r = SmallReport(60);
  Site& s = r.sites[0];
  s.growth.cls = analysis::GrowthClass::kLeak;
  s.growth.window = 60;
  s.growth.slope = 4096;
  s.growth.slope_low = 3000;
  s.growth.slope_high = 5000;
  s.live_bytes_end = 0;
  s.live_bytes_end_high = -1;  // no interval (an exact site) until set below
  std::vector<double> v(60);
  for (size_t k = 0; k < v.size(); ++k) v[k] = 4096.0 * static_cast<double>(k + 1);
  s.live_bytes_by_step = analysis::StepSeries::FromDense(v);
  EXPECT_THAT(FormatText(r), HasSubstr("live at end 0 B (240 KiB at the last step end, freed "
                                       "after it)"));
  // Still live at the end: nothing added.
  s.live_bytes_end = 240 * 1024;
  EXPECT_THAT(FormatText(r), Not(HasSubstr("freed after it")));
  // A sampled site's live bytes come with their 95 % interval (issue 9 item 4).
  EXPECT_THAT(FormatText(r), Not(HasSubstr("live at end 240 KiB [95% CI")));
  s.live_bytes_end_low = 200 * 1024;
  s.live_bytes_end_high = 300 * 1024;
  EXPECT_THAT(FormatText(r), HasSubstr("live at end 240 KiB [95% CI 200 KiB, 300 KiB]"));
}

// A launcher exec'd into the interpreter (pyenv's shims: bash, bash, then
// python, one pid): three traces of pid 77, only the last marked steps. Its
// growth is shown once; the launcher's images are processes without steps
// (each was shown as "pid 77: ... INSUFFICIENT" before).
TEST(TextReportTest, AnExecChainShowsTheGrowthOfTheImageThatMarkedSteps) {
  Report r = SmallReport(40);
  r.processes[0].last_step = 39;
  for (int i = 0; i < 2; ++i) {
    analysis::ProcessSummary shim;
    shim.pid = 77;
    shim.cmdline = "bash /root/.pyenv/libexec/pyenv exec python3 train.py";
    r.processes.insert(r.processes.begin(), shim);
  }
  const std::string text = FormatText(r);
  size_t shown = 0;
  for (size_t at = text.find("pid 77: warm-up"); at != std::string::npos;
       at = text.find("pid 77: warm-up", at + 1)) {
    ++shown;
  }
  EXPECT_EQ(shown, 1u) << text;
  EXPECT_THAT(text, HasSubstr("and 2 processes without steps"));
}

TEST(TextReportTest, RanksAreComparedAndTheOddOneIsNamed) {
  Report r;
  r.path = "/runs/ddp";
  for (uint32_t rank = 0; rank < 3; ++rank) {
    analysis::ProcessSummary p;
    p.pid = 100 + rank;
    p.rank = absl::StrCat(rank);
    p.hostname = "node1";
    p.clean_exit = true;
    p.peak_bytes = (rank == 2 ? 200 : 100) << 20;
    if (rank == 2) {
      p.live_growth.cls = analysis::GrowthClass::kLeak;
      p.live_growth.slope = 2 << 20;
      p.live_growth.slope_low = p.live_growth.slope_high = 2 << 20;
    } else {
      p.live_growth.cls = analysis::GrowthClass::kNoTrend;
    }
    r.processes.push_back(p);
    for (uint64_t k = 0; k < 4; ++k) {
      StepRow s;
      s.pid = p.pid;
      s.step = k;
      r.steps.push_back(s);
    }
  }
  std::string text = FormatText(r);
  EXPECT_THAT(text, HasSubstr("Ranks (3 processes with RANK"));
  EXPECT_THAT(text, HasSubstr("leaks; heap peak +100% over the median"));
  // The two alike ranks carry no note.
  size_t notes = 0;
  for (size_t at = text.find("<- "); at != std::string::npos; at = text.find("<- ", at + 1))
    ++notes;
  EXPECT_EQ(notes, 1u) << text;
  r.processes.resize(1);
  EXPECT_THAT(FormatText(r), Not(HasSubstr("Ranks (")));
}

TEST(TextReportTest, LongStepTablesAreShortened) {
  ReportOptions o;
  std::string text = FormatText(SmallReport(100), o);
  EXPECT_THAT(text, HasSubstr("showing the first 5, the last 5 and the 5 largest peaks"));
  EXPECT_THAT(text, HasSubstr("900 MiB"));  // step 17, the largest peak
  EXPECT_THAT(text, HasSubstr("     ...\n"));
  size_t rows = 0;
  const size_t table = text.find("\nSteps (");
  ASSERT_NE(table, std::string::npos);
  for (size_t pos = table; (pos = text.find("5.00 MiB", pos)) != std::string::npos; ++pos) ++rows;
  EXPECT_LE(rows, 15u);  // 15 step rows
}

TEST(TextReportTest, FramesAndTopLimits) {
  ReportOptions o;
  o.frames = 1;
  std::string text = FormatText(SmallReport(1), o);
  EXPECT_THAT(text, HasSubstr("... 1 more frames"));
  o.top = 0;
  EXPECT_THAT(FormatText(SmallReport(1), o), HasSubstr("planted_leaky_function"));
}

TEST(JsonReportTest, Fields) {
  std::string json = FormatJson(SmallReport(2));
  EXPECT_THAT(json, HasSubstr("\"schema\":\"memstep.report/3\""));
  EXPECT_THAT(json, HasSubstr("\"cmdline\":\"python \\\"train\\\".py\""));
  EXPECT_THAT(json, HasSubstr("\"stage_peaks\":{\"forward\":3145728}"));
  EXPECT_THAT(json, HasSubstr("\"live_bytes_by_step\":{\"rows\":2,\"changes\":[[0,1.5]]}"));
  EXPECT_THAT(json, HasSubstr("{\"function\":\"planted_leaky_function(int)\",\"file\":"
                              "\"/src/leak.cc\",\"line\":42,\"module\":\"/opt/app/train\""));
  EXPECT_THAT(json, HasSubstr("\"kind\":\"host\""));
  EXPECT_THAT(json, HasSubstr("\"live_bytes_end\":5242880"));
  EXPECT_THAT(json, HasSubstr("\"live_bytes_end_ci\":[4194304,6291456]"));
  EXPECT_THAT(json, HasSubstr("\"live_bytes_at_peak_ci\":[1048576,1048576]"));
  // Balanced brackets.
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    if (in_string) {
      if (json[i] == '\\')
        ++i;
      else if (json[i] == '"')
        in_string = false;
    } else if (json[i] == '"') {
      in_string = true;
    } else if (json[i] == '{' || json[i] == '[') {
      ++depth;
    } else if (json[i] == '}' || json[i] == ']') {
      ASSERT_GT(depth, 0);
      --depth;
    }
  }
  EXPECT_EQ(depth, 0);
}

// A report of `sites` sites over `steps` steps, each site's series changing
// every `period` steps: large enough to stream in many pieces.
Report LargeReport(size_t sites, size_t steps, size_t period) {
  Report r = SmallReport(steps);
  const Site site = r.sites[0];
  r.sites.clear();
  for (size_t i = 0; i < sites; ++i) {
    Site s = site;
    s.id = i;
    s.stack_id = 1000 + i;
    s.live_bytes_by_step = analysis::StepSeries(steps);
    for (size_t k = 0; k < steps; k += period) {
      s.live_bytes_by_step.Set(k, static_cast<double>((i + 1) * (k + 1)) + 0.25);
    }
    r.sites.push_back(s);
  }
  return r;
}

// The streamed document is FormatJson's, byte for byte, in pieces of at
// most kFlushBytes plus one value.
TEST(JsonReportTest, StreamedEqualsString) {
  const Report r = LargeReport(300, 400, 7);
  const std::string whole = FormatJson(r);
  ASSERT_GT(whole.size(), 4 * internal::JsonWriter::kFlushBytes);
  std::string streamed;
  size_t pieces = 0, largest = 0;
  ASSERT_TRUE(WriteJson(r, {0, 0}, [&](std::string_view piece) {
    ++pieces;
    largest = std::max(largest, piece.size());
    streamed.append(piece);
    return true;
  }));
  EXPECT_EQ(streamed, whole);
  EXPECT_GE(pieces, 4u);
  EXPECT_LE(largest, internal::JsonWriter::kFlushBytes + 1024);
  // --top / --frames apply the same way.
  ReportOptions o{2, 1};
  streamed.clear();
  ASSERT_TRUE(WriteJson(r, o, [&](std::string_view piece) {
    streamed.append(piece);
    return true;
  }));
  EXPECT_EQ(streamed, FormatJson(r, o));
}

// A sink that fails is not called again, and the writer says so.
TEST(JsonReportTest, StreamStopsAtAFailedWrite) {
  const Report r = LargeReport(300, 400, 7);
  size_t calls = 0;
  EXPECT_FALSE(WriteJson(r, {0, 0}, [&](std::string_view) { return ++calls < 2; }));
  EXPECT_EQ(calls, 2u);
  // Failing at the last piece (the one Finish passes on) is reported too.
  EXPECT_FALSE(WriteJson(SmallReport(2), {0, 0}, [](std::string_view) { return false; }));
}

// A site's series is written by its change points: its size follows what
// the site did, not the number of steps.
TEST(JsonReportTest, SeriesSizeFollowsChangesNotSteps) {
  Report r = SmallReport(10000);
  r.steps.clear();  // only the site's series counts here
  const std::string constant = FormatJson(r);
  EXPECT_THAT(constant, HasSubstr("\"live_bytes_by_step\":{\"rows\":10000,\"changes\":[[0,1.5]]}"));
  r.sites[0].live_bytes_by_step.Set(5000, 2.5);  // one row
  r.sites[0].live_bytes_by_step.Set(9999, 0);
  EXPECT_THAT(FormatJson(r), HasSubstr("\"live_bytes_by_step\":{\"rows\":10000,\"changes\":"
                                       "[[0,1.5],[5000,2.5],[5001,1.5],[9999,0]]}"));
  // The same site over 10 steps: the same document but for the row count.
  Report small = SmallReport(10);
  small.steps.clear();
  EXPECT_EQ(constant.size(), FormatJson(small).size() + 3);  // "10000" vs "10"
  // A site that never held memory: no change at all.
  r.sites[0].live_bytes_by_step = analysis::StepSeries(10000);
  EXPECT_THAT(FormatJson(r), HasSubstr("\"live_bytes_by_step\":{\"rows\":10000,\"changes\":[]}"));
}

// --- End to end from a trace: analysis + text report. ---------------------

__attribute__((noinline)) void* PlantedAllocatorForReportTest(size_t n) {
  void* p = malloc(n);
  asm volatile("" : : "r"(p) : "memory");
  return p;
}

struct MainModule {
  uint64_t start = UINT64_MAX, end = 0, bias = 0;
  std::string build_id;
};

int FindMain(dl_phdr_info* info, size_t, void* data) {
  auto* m = static_cast<MainModule*>(data);
  m->bias = info->dlpi_addr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD) {
      m->start = std::min<uint64_t>(m->start, info->dlpi_addr + ph.p_vaddr);
      m->end = std::max<uint64_t>(m->end, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
    } else if (ph.p_type == PT_NOTE) {
      const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
      const char* end = p + ph.p_memsz;
      while (p + sizeof(ElfW(Nhdr)) <= end) {
        const auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
        const char* name = p + sizeof(*n);
        const char* desc = name + ((n->n_namesz + 3) & ~3u);
        if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
          m->build_id.assign(desc, n->n_descsz);
        }
        p = desc + ((n->n_descsz + 3) & ~3u);
      }
    }
  }
  return 1;  // the first object is the main program
}

TEST(TextReportTest, ReportFromTraceShowsFrames) {
  MainModule m;
  dl_iterate_phdr(FindMain, &m);
  char exe[PATH_MAX];
  ASSERT_NE(realpath("/proc/self/exe", exe), nullptr);
  free(PlantedAllocatorForReportTest(8));
  const uint64_t ip = reinterpret_cast<uint64_t>(&PlantedAllocatorForReportTest) + 8;

  reader::TraceBuilder b;
  b.String(1, exe);
  b.Mapping(1, 0, m.start, m.end, m.bias, 1, m.build_id);
  b.Stack(1, {ip});
  b.Alloc(1, 1, 0x1000, 123456);
  testing::TempDir dir;
  ASSERT_TRUE(testing::WriteFile(dir.File("x.trace"), b.Finish()));

  absl::StatusOr<Report> plain = analysis::AnalyzeRun(dir.path(), WithSymbolize(false));
  ASSERT_TRUE(plain.ok()) << plain.status();
  const std::string base = std::string(exe).substr(std::string(exe).rfind('/') + 1);
  EXPECT_THAT(FormatText(*plain), HasSubstr(base + "+0x"));

  absl::StatusOr<Report> sym = analysis::AnalyzeRun(dir.path(), WithSymbolize(true));
  ASSERT_TRUE(sym.ok()) << sym.status();
  EXPECT_THAT(FormatText(*sym), HasSubstr("PlantedAllocatorForReportTest"));
}

// The function names of the frames of the site with this stack id.
std::vector<std::string> SiteFunctions(const Report& r, uint64_t stack) {
  std::vector<std::string> out;
  for (const Site& site : r.sites) {
    if (site.stack_id != stack) continue;
    for (const Frame& f : site.frames) out.push_back(f.function);
  }
  return out;
}

// memstep's own frames: found by the trace's PROFILER range (a renamed
// copy), by its build-id (another copy elsewhere) and, without either, by
// the file name libmemstep.so; dropped at the top and in the middle of a
// stack, in every output. An address no symbol covers reads
// "module+0xOFFSET", never "??". A stack of memstep frames only keeps one
// frame saying so.
TEST(TextReportTest, MemstepFramesDroppedAndUnnamedFramesShowOffset) {
  reader::TraceHeaderInfo info;
  info.tlvs = {{format::kTlvProfiler, reader::ProfilerTlv(0x7000000, 0x7100000, "PROF")}};
  reader::TraceBuilder b(info);
  b.String(1, "/nonexistent/app/train");
  b.String(2, "/nonexistent/prof/libprofiler-renamed.so");
  b.String(3, "/nonexistent/other/copy-of-profiler.so");
  b.String(4, "/nonexistent/lib/libmemstep.so");
  b.String(5, "/nonexistent/lib/libgone.so");
  b.String(6, "forward");
  b.Mapping(1, 0, 0x1000000, 0x1100000, 0x1000000, 1, "APP");
  b.Mapping(2, 0, 0x7000000, 0x7100000, 0x7000000, 2, "");      // the range says so
  b.Mapping(3, 0, 0x8000000, 0x8100000, 0x8000000, 3, "PROF");  // the build-id says so
  b.Mapping(4, 0, 0x9000000, 0x9100000, 0x9000000, 4, "");
  b.Mapping(5, 0, 0xA000000, 0xA100000, 0xA000000, 5, "");
  // Leading memstep frames, then the caller, a memstep wrapper, its caller.
  b.Stack(1, {0x7000100, 0x7000200, 0x1000abc, 0x8000100, 0x1000def});
  // The name rule; then a library whose file is gone: no symbol.
  b.Stack(2, {0x9000100, 0xA000123, 0x1000111});
  // Only memstep frames.
  b.Stack(3, {0x7000100, 0x8000200, 0x9000300});
  const format::Counters zero{};
  b.Step(1, 0, 0, zero);
  b.Stage(2, 6, 0, 0, zero);
  b.Alloc(3, 1, 0x10000, 8 << 20, 0, 0, 0, 6);
  b.Alloc(4, 2, 0x20000, 4 << 20, 0, 0, 0, 6);
  b.Alloc(5, 3, 0x30000, 2 << 20, 0, 0, 0, 6);
  b.SiteSnapshot(6, 0, format::kSnapshotStagePeak, 6, {{1, 8 << 20, 1}, {3, 2 << 20, 1}});
  b.Stage(7, 6, 0, 1, zero);
  b.Alert(8, 0, format::kAlertGrowth, 1 << 20, 1, 0, 1);
  b.Step(9, 0, 1, zero);
  testing::TempDir dir;
  ASSERT_TRUE(testing::WriteFile(dir.File("m.trace"), b.Finish()));

  for (bool symbolize : {false, true}) {
    SCOPED_TRACE(symbolize ? "symbolized" : "not symbolized");
    absl::StatusOr<Report> r = analysis::AnalyzeRun(dir.path(), WithSymbolize(symbolize));
    ASSERT_TRUE(r.ok()) << r.status();
    auto functions = [&](uint64_t stack) { return SiteFunctions(*r, stack); };
    EXPECT_THAT(functions(1), ::testing::ElementsAre("train+0xabc", "train+0xdef"));
    EXPECT_THAT(functions(2), ::testing::ElementsAre("libgone.so+0x123", "train+0x111"));
    EXPECT_THAT(functions(3), ::testing::ElementsAre("<inside memstep>"));
    for (const Site& site : r->sites) {
      for (const Frame& f : site.frames) {
        EXPECT_FALSE(f.symbolized) << f.function;
        if (f.function == "libgone.so+0x123") {
          EXPECT_EQ(f.module, "/nonexistent/lib/libgone.so");
          EXPECT_EQ(f.module_offset, 0x123u);
        }
      }
    }
    const std::string text = FormatText(*r);
    const std::string json = FormatJson(*r);
    for (const std::string* out : {&text, &json}) {
      EXPECT_THAT(*out, Not(HasSubstr("??")));
      EXPECT_THAT(*out, Not(HasSubstr("profiler-renamed")));
      EXPECT_THAT(*out, Not(HasSubstr("copy-of-profiler")));
      EXPECT_THAT(*out, Not(HasSubstr("libmemstep")));
      EXPECT_THAT(*out, HasSubstr("libgone.so+0x123"));
      EXPECT_THAT(*out, HasSubstr("<inside memstep>"));
    }
    // The offset is the name; the module is not repeated.
    EXPECT_THAT(text, HasSubstr("        libgone.so+0x123\n        train+0x111\n"));
    EXPECT_THAT(json, HasSubstr("\"function\":\"libgone.so+0x123\""));
    EXPECT_THAT(json, HasSubstr("\"module\":\"/nonexistent/lib/libgone.so\""));
    EXPECT_THAT(json, HasSubstr("\"module_offset\":\"0x123\""));
    EXPECT_THAT(json, HasSubstr("\"symbolized\":false"));
    EXPECT_THAT(json, Not(HasSubstr("\"symbolized\":true")));
  }
}

// memstep's own Python frames (its hooks wrap optimizer.step, the
// DataLoader and torch.compile; its sitecustomize imports torch): dropped
// from the middle of a stack as its native wrappers are, by the directory
// the trace header names (kTlvPythonDir) and, in a trace that names none,
// by the package's file names. A user's file of the same name elsewhere
// stays when the header names the directory.
TEST(TextReportTest, MemstepPythonFramesDropped) {
  for (bool named : {true, false}) {
    SCOPED_TRACE(named ? "directory in the header" : "no directory in the header");
    reader::TraceHeaderInfo info;
    if (named) info.tlvs = {{format::kTlvPythonDir, "/opt/ms/python"}};
    reader::TraceBuilder b(info);
    auto frame = [](const std::string& function, const std::string& file, const char* line) {
      return absl::StrCat(function, std::string(1, '\0'), file, std::string(1, '\0'), line);
    };
    b.String(1, "/nonexistent/app/train");
    b.String(2, frame("SGD.step", "/venv/torch/optim/sgd.py", "80"));
    b.String(3, frame("_wrap_step.<locals>.step", "/opt/ms/python/memstep/_torch_hooks.py", "366"));
    b.String(4, frame("<module>", "/work/train.py", "12"));
    b.String(5, frame("_TorchLoader.exec_module", "/opt/ms/python/startup/sitecustomize.py", "52"));
    b.String(6, "forward");
    b.String(7, frame("helper", "/work/memstep/__init__.py", "3"));
    b.Mapping(1, 0, 0x1000000, 0x1100000, 0x1000000, 1, "APP");
    const uint64_t py = format::kPyFrameTag;
    b.Stack(1, {0x1000abc, py | 2, py | 3, py | 4});
    b.Stack(2, {0x1000def, py | 5, py | 4});
    b.Stack(3, {0x1000123, py | 7, py | 4});
    const format::Counters zero{};
    b.Step(1, 0, 0, zero);
    b.Stage(2, 6, 0, 0, zero);
    b.Alloc(3, 1, 0x10000, 8 << 20, 0, 0, 0, 6);
    b.Alloc(4, 2, 0x20000, 4 << 20, 0, 0, 0, 6);
    b.Alloc(5, 3, 0x30000, 2 << 20, 0, 0, 0, 6);
    b.Stage(6, 6, 0, 1, zero);
    b.Step(7, 0, 1, zero);
    testing::TempDir dir;
    ASSERT_TRUE(testing::WriteFile(dir.File("m.trace"), b.Finish()));
    absl::StatusOr<Report> r = analysis::AnalyzeRun(dir.path(), WithSymbolize(false));
    ASSERT_TRUE(r.ok()) << r.status();
    auto functions = [&](uint64_t stack) { return SiteFunctions(*r, stack); };
    EXPECT_THAT(functions(1), ::testing::ElementsAre("train+0xabc", "SGD.step", "<module>"));
    EXPECT_THAT(functions(2), ::testing::ElementsAre("train+0xdef", "<module>"));
    if (named) {
      EXPECT_THAT(functions(3), ::testing::ElementsAre("train+0x123", "helper", "<module>"));
    } else {
      EXPECT_THAT(functions(3), ::testing::ElementsAre("train+0x123", "<module>"));
    }
    const std::string text = FormatText(*r);
    EXPECT_THAT(text, Not(HasSubstr("_torch_hooks.py")));
    EXPECT_THAT(text, Not(HasSubstr("sitecustomize.py")));
  }
}

}  // namespace
}  // namespace memstep::report

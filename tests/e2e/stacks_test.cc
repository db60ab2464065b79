// Reported stacks start at the caller (issue 9 item 6). Programs run under
// libmemstep.so (host malloc family and mmap; a renamed copy of the
// library; CUDA allocations through the fake runtime and driver of
// tests/cuda, with the runtime calling the driver through memstep's
// wrappers; a stripped library), and every stack of the report must start
// at the function that called the allocation function, hold no frame of
// memstep anywhere, and name a frame without a symbol "lib+0xOFFSET".

#include <limits.h>
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "src/analysis/analysis.h"
#include "src/reader/reader.h"
#include "src/report/report.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/planted_facts.h"

namespace memstep::e2e {
namespace {

using analysis::Frame;
using analysis::Report;
using analysis::Site;
using analysis::SiteKind;

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The allocation functions memstep interposes (libmemstep.so exports each
// one): a stack whose first frame is one of them did not start at the caller.
bool IsAllocationFunction(const std::string& function) {
  static const char* const kNames[] = {
      "malloc",         "calloc",        "realloc",       "reallocarray",   "free",
      "posix_memalign", "aligned_alloc", "memalign",      "valloc",         "pvalloc",
      "mmap",           "mmap64",        "munmap",        "mremap",         "operator new",
      "operator new[]", "__libc_malloc", "__libc_calloc", "__libc_realloc", "cudaMalloc",
      "cuMemAlloc_v2"};
  for (const char* name : kNames) {
    if (function == name || absl::StartsWith(function, absl::StrCat(name, "("))) return true;
  }
  return false;
}

// The profiler's object as the trace header records it, and each stack's
// raw frames: the process must already have skipped memstep's leading
// frames. Returns how many stacks hold a frame of memstep below the top
// (a wrapper in the middle, for the report to drop).
int CheckRawTraces(const TempDir& dir, const std::string& library) {
  int middle = 0;
  const std::vector<std::string> traces = dir.Files();
  EXPECT_FALSE(traces.empty());
  for (const std::string& path : traces) {
    SCOPED_TRACE(path);
    absl::StatusOr<reader::Trace> t = reader::ReadTraceFile(path);
    if (!t.ok()) {
      ADD_FAILURE() << t.status();
      continue;
    }
    EXPECT_LT(t->profiler_start, t->profiler_end) << "no PROFILER TLV in the header";
    EXPECT_FALSE(t->profiler_build_id.empty());
    bool found = false;
    for (const reader::Mapping& m : t->mappings) {
      if (m.start != t->profiler_start || m.end != t->profiler_end) continue;
      found = true;
      char real[PATH_MAX];
      EXPECT_NE(realpath(library.c_str(), real), nullptr) << library;
      EXPECT_EQ(m.path, std::string(real));
      EXPECT_EQ(m.build_id, t->profiler_build_id);
    }
    EXPECT_TRUE(found) << "no MAPPING record of the profiler's range";
    for (const auto& [id, ips] : t->stacks) {
      for (size_t i = 0; i < ips.size(); ++i) {
        const bool ours = t->profiler_start <= ips[i] && ips[i] < t->profiler_end;
        if (i == 0) {
          EXPECT_FALSE(ours) << "stack " << id << " starts inside memstep";
        } else if (ours) {
          ++middle;
          break;
        }
      }
    }
  }
  return middle;
}

std::string Describe(const std::vector<Frame>& frames) {
  std::string out;
  for (const Frame& f : frames) {
    absl::StrAppend(&out, "\n    ", f.function, "  (", Basename(f.module), ")");
  }
  return out;
}

// Every stack of the report: not empty, no frame of memstep (nor the
// placeholder of a memstep-only stack), no "??", not starting at an
// allocation function; and neither output mentions memstep's library.
void CheckReportedStacks(const Report& report, const std::string& library) {
  const std::string lib = Basename(library);
  auto check = [&](const std::vector<Frame>& frames, const std::string& what) {
    SCOPED_TRACE(what + Describe(frames));
    ASSERT_FALSE(frames.empty());
    EXPECT_FALSE(IsAllocationFunction(frames[0].function)) << "starts at the allocator";
    for (const Frame& f : frames) {
      EXPECT_FALSE(absl::StartsWith(Basename(f.module), "libmemstep")) << f.function;
      EXPECT_NE(Basename(f.module), lib) << f.function;
      EXPECT_NE(f.function, "<inside memstep>");
      EXPECT_NE(f.function, "??");
      EXPECT_FALSE(f.function.empty());
      if (!f.symbolized) {
        EXPECT_TRUE(absl::StrContains(f.function, "0x")) << f.function;
      }
    }
  };
  for (const Site& s : report.sites) check(s.frames, absl::StrCat("site #", s.id));
  for (const analysis::DeviceFailure& f : report.device_failures) {
    check(f.frames, "device failure");
  }
  report::ReportOptions all;  // every site, every frame
  all.top = 100000;
  all.frames = 0;
  const std::string text = report::FormatText(report, all);
  const std::string json = report::FormatJson(report, {0, 0});
  for (const std::string* out : {&text, &json}) {
    EXPECT_FALSE(absl::StrContains(*out, "libmemstep")) << *out;
    EXPECT_FALSE(absl::StrContains(*out, lib)) << *out;
    EXPECT_FALSE(absl::StrContains(*out, "??")) << *out;
  }
}

// Runs `e2e_planted args...` traced at interval 1 (every allocation) with
// `library` preloaded, checks the raw traces and returns the analysis.
Report RunPlanted(const TempDir& dir, const std::vector<std::string>& args,
                  const std::string& library) {
  std::vector<std::string> env = TracedEnv(dir.path(), 1);
  for (std::string& kv : env) {
    if (absl::StartsWith(kv, "LD_PRELOAD=")) kv = "LD_PRELOAD=" + library;
  }
  std::vector<std::string> argv = {PlantedProgram()};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildResult r = RunChild(argv, env);
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  CheckRawTraces(dir, library);
  absl::StatusOr<Report> report = analysis::AnalyzeRun(dir.path());
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *std::move(report) : Report{};
}

// The planted functions of mode "sites": each calls one allocation function
// (malloc, calloc, realloc, posix_memalign, aligned_alloc, new[], mmap).
void ExpectPlantedCallersFirst(const Report& report) {
  const char* const kCallers[] = {"PlantedLeak3000x1000",        "PlantedChurn1000x777",
                                  "PlantedCalloc500x48x10",      "PlantedReallocSeed300x111",
                                  "PlantedReallocGrow300x4321",  "PlantedPosixMemalign200x2048",
                                  "PlantedAlignedAlloc150x4096", "PlantedNewArray200x1284",
                                  "PlantedMmapPartial10x64K",    "PlantedMmapFull4x32K"};
  for (const char* caller : kCallers) {
    bool first = false;
    for (const Site& s : report.sites) {
      if (!s.frames.empty() && s.frames[0].function.find(caller) != std::string::npos) {
        first = true;
        EXPECT_FALSE(s.frames[0].inlined) << caller;
        EXPECT_TRUE(s.frames[0].symbolized) << caller;
      }
    }
    EXPECT_TRUE(first) << "no site whose first frame is " << caller << "\n"
                       << DescribeSites(report, 40);
  }
}

TEST(Stacks, HostStacksStartAtTheCaller) {
  TempDir dir;
  const Report report = RunPlanted(dir, {"sites"}, PreloadLibrary());
  ExpectPlantedCallersFirst(report);
  CheckReportedStacks(report, PreloadLibrary());
}

// A renamed copy of the library: the trace header's PROFILER TLV, not the
// file name, tells the reader which object is memstep.
TEST(Stacks, RenamedLibraryIsStillRecognised) {
  TempDir dir;
  TempDir lib_dir;
  const std::string copy = lib_dir.path() + "/libprofiler-renamed.so";
  {
    std::ifstream in(PreloadLibrary(), std::ios::binary);
    std::ofstream out(copy, std::ios::binary);
    out << in.rdbuf();
    ASSERT_TRUE(in.good() && out.good()) << copy;
  }
  const Report report = RunPlanted(dir, {"sites"}, copy);
  ExpectPlantedCallersFirst(report);
  CheckReportedStacks(report, copy);
}

// CUDA through the fake runtime, which calls the fake driver through the
// pointers cuGetProcAddress gave it, so memstep's driver wrapper records the
// allocation below memstep's runtime wrapper: a frame of memstep in the
// middle of every device stack, which the report must drop. Every device
// allocation of cuda_app_dyn is made by a planted_dyn_* function.
TEST(Stacks, DeviceStacksStartAtTheCaller) {
  TempDir dir;
  TempDir facts;
  std::vector<std::string> env = TracedEnv(dir.path(), 1);
  env.push_back(std::string("LD_LIBRARY_PATH=") + MEMSTEP_E2E_CUDA_DRIVER_DIR);
  env.push_back("FAKECUDA_RT_VIA_DRIVER=1");
  env.push_back("FAKECUDA_LOG=" + facts.path() + "/fake.log");
  env.push_back("MEMSTEP_DEVICE_SAMPLE_INTERVAL=1");  // every device allocation with its stack
  ChildResult r = RunChild({MEMSTEP_E2E_CUDA_APP, facts.path()}, env);
  ASSERT_FALSE(r.timed_out) << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(CheckRawTraces(dir, PreloadLibrary()), 0)
      << "no stack with memstep's wrapper in the middle: the test lost its premise";
  absl::StatusOr<Report> report = analysis::AnalyzeRun(dir.path());
  ASSERT_TRUE(report.ok()) << report.status();
  int device_sites = 0;
  for (const Site& s : report->sites) {
    if (s.kind == SiteKind::kHost || s.kind == SiteKind::kMmap) continue;
    ++device_sites;
    ASSERT_FALSE(s.frames.empty());
    EXPECT_TRUE(absl::StartsWith(s.frames[0].function, "planted_dyn_"))
        << "device site #" << s.id << Describe(s.frames);
  }
  EXPECT_GE(device_sites, 10);
  ASSERT_EQ(report->device_failures.size(), 2u);
  for (const analysis::DeviceFailure& f : report->device_failures) {
    ASSERT_FALSE(f.frames.empty());
    EXPECT_TRUE(absl::StartsWith(f.frames[0].function, "planted_dyn_")) << Describe(f.frames);
  }
  CheckReportedStacks(*report, PreloadLibrary());
}

// [start, start + size) of `symbol` in `elf`, from nm -S; {0, 0} if absent.
std::pair<uint64_t, uint64_t> SymbolRange(const std::string& elf, const std::string& symbol) {
  const std::string out = elf + ".nm";
  if (std::system(("nm -S --defined-only '" + elf + "' > '" + out + "'").c_str()) != 0) {
    return {0, 0};
  }
  std::ifstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() != 4 || f[3] != symbol) continue;
    uint64_t start = 0, size = 0;
    if (absl::SimpleHexAtoi(f[0], &start) && absl::SimpleHexAtoi(f[1], &size)) {
      return {start, start + size};
    }
  }
  return {0, 0};
}

// A library stripped of every symbol table but .dynsym: the exported
// function is named from .dynsym, the hidden one that allocates reads
// "libplanted_stripped.so+0xOFFSET" with OFFSET - 1 inside it.
TEST(Stacks, FrameWithoutSymbolShowsLibraryAndOffset) {
  const std::string stripped = MEMSTEP_E2E_STRIPPED;
  ASSERT_EQ(std::system(("readelf -SW '" + stripped + "' | grep -q ' .symtab '").c_str()) == 0,
            false)
      << stripped << " still has .symtab";
  TempDir scratch;
  const std::string nm_copy = scratch.path() + "/original.so";
  ASSERT_EQ(
      std::system(
          ("cp '" + std::string(MEMSTEP_E2E_STRIPPED_ORIGINAL) + "' '" + nm_copy + "'").c_str()),
      0);
  const auto hidden = SymbolRange(nm_copy, "PlantedStrippedHidden");
  ASSERT_LT(hidden.first, hidden.second) << "nm -S found no PlantedStrippedHidden";

  TempDir dir;
  const Report report = RunPlanted(dir, {"stripped", stripped}, PreloadLibrary());
  CheckReportedStacks(report, PreloadLibrary());
  int found = 0;
  for (const Site& s : report.sites) {
    if (s.frames.empty() || Basename(s.frames[0].module) != "libplanted_stripped.so") continue;
    ++found;
    SCOPED_TRACE(Describe(s.frames));
    const Frame& f = s.frames[0];
    EXPECT_FALSE(f.symbolized);
    EXPECT_EQ(f.function, absl::StrFormat("libplanted_stripped.so+0x%x", f.module_offset));
    EXPECT_GE(f.module_offset - 1, hidden.first);
    EXPECT_LT(f.module_offset - 1, hidden.second);
    ASSERT_GE(s.frames.size(), 2u);
    EXPECT_EQ(s.frames[1].function, "PlantedStrippedEntry");  // from .dynsym
    EXPECT_TRUE(s.frames[1].symbolized);
    EXPECT_NEAR(s.alloc_count, facts::kStrippedCount, 0.01);
    const std::string text = report::FormatText(report);
    EXPECT_TRUE(absl::StrContains(text, "        " + f.function + "\n")) << text;
    EXPECT_TRUE(
        absl::StrContains(report::FormatJson(report), "\"function\":\"" + f.function + "\""));
  }
  EXPECT_EQ(found, 1) << DescribeSites(report, 40);
}

}  // namespace
}  // namespace memstep::e2e

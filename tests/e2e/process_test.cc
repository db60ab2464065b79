// Planted-fact end-to-end tests, part 2: processes and hostile conditions:
// fork, exec, dlopen/dlclose under allocation load, allocating signal
// handlers, kill -9 mid-run, and the `memstep` CLI.

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/analysis/analysis.h"
#include "src/reader/reader.h"
#include "src/report/report.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/planted_facts.h"

namespace memstep::e2e {
namespace {

using analysis::SiteKind;
using namespace facts;  // NOLINT

analysis::Report MustAnalyze(const std::string& path) {
  auto report = analysis::AnalyzeRun(path);
  EXPECT_TRUE(report.ok()) << path << ": " << report.status();
  return report.ok() ? *std::move(report) : analysis::Report{};
}

TEST(PlantedProcesses, ForkChildHasItsOwnLinkedTrace) {
  TempDir dir;
  ChildResult r = RunChild({PlantedProgram(), "fork"}, TracedEnv(dir.path(), 1));
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(dir.Files().size(), 2u);
  analysis::Report run = MustAnalyze(dir.path());
  ASSERT_EQ(run.processes.size(), 2u);
  const analysis::ProcessSummary* parent = &run.processes[0];
  const analysis::ProcessSummary* child = &run.processes[1];
  if (parent->fork_child) std::swap(parent, child);
  EXPECT_FALSE(parent->fork_child);
  EXPECT_TRUE(child->fork_child);
  EXPECT_EQ(child->ppid, parent->pid);
  EXPECT_TRUE(child->clean_exit);

  analysis::Report child_run = MustAnalyze(child->trace_path);
  SiteTotals in_child = FindSites(child_run, "PlantedForkChild4444x10");
  ASSERT_GE(in_child.sites, 1) << DescribeSites(child_run);
  EXPECT_NEAR(in_child.alloc_count, kForkChildCount, 0.01);
  EXPECT_NEAR(in_child.alloc_bytes, kForkChildCount * Usable(kForkChildSize), 0.5);

  analysis::Report parent_run = MustAnalyze(parent->trace_path);
  EXPECT_EQ(FindSites(parent_run, "PlantedForkChild4444x10").sites, 0);
  EXPECT_NEAR(FindSites(parent_run, "PlantedParent6666x3").alloc_count, 3, 0.01)
      << DescribeSites(parent_run);
}

// A fork child ending with _exit runs no atexit handler or destructor, and
// with a flush period longer than the run the writer never wakes: everything
// in its trace comes from memstep's _exit hook.
TEST(PlantedProcesses, ForkChildEndingWithUnderscoreExitIsFlushed) {
  TempDir dir;
  std::vector<std::string> env = TracedEnv(dir.path(), 1);
  env.push_back("MEMSTEP_FLUSH_MS=600000");
  ChildResult r = RunChild({PlantedProgram(), "fork-exit"}, env);
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  analysis::Report run = MustAnalyze(dir.path());
  ASSERT_EQ(run.processes.size(), 2u);
  const analysis::ProcessSummary* child = &run.processes[0];
  if (!child->fork_child) child = &run.processes[1];
  ASSERT_TRUE(child->fork_child);
  EXPECT_TRUE(child->clean_exit);
  analysis::Report child_run = MustAnalyze(child->trace_path);
  SiteTotals in_child = FindSites(child_run, "PlantedForkChild4444x10");
  ASSERT_GE(in_child.sites, 1) << DescribeSites(child_run);
  EXPECT_NEAR(in_child.alloc_count, kForkChildCount, 0.01);
}

TEST(PlantedProcesses, ExecedProgramIsTracedToo) {
  TempDir dir;
  std::vector<std::string> env = TracedEnv(dir.path(), 1);
  env.push_back("MEMSTEP_FLUSH_MS=600000");  // only the exec hook can flush the first image
  ChildResult r = RunChild({PlantedProgram(), "exec"}, env);
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Same pid before and after exec: still two traces.
  ASSERT_EQ(dir.Files().size(), 2u);
  analysis::Report run = MustAnalyze(dir.path());
  ASSERT_EQ(run.processes.size(), 2u);
  auto target = std::find_if(run.processes.begin(), run.processes.end(), [](const auto& p) {
    return absl::StrContains(p.cmdline, "exec-target");
  });
  ASSERT_NE(target, run.processes.end());
  // The image before exec flushed its records before execve replaced it.
  auto before = target == run.processes.begin() ? run.processes.begin() + 1 : run.processes.begin();
  analysis::Report before_run = MustAnalyze(before->trace_path);
  EXPECT_GE(FindSites(before_run, "PlantedBeforeExec").sites, 1) << DescribeSites(before_run);
  analysis::Report target_run = MustAnalyze(target->trace_path);
  SiteTotals t = FindSites(target_run, "PlantedAfterExec5555x7");
  ASSERT_GE(t.sites, 1) << DescribeSites(target_run);
  EXPECT_NEAR(t.alloc_count, kExecCount, 0.01);
  EXPECT_NEAR(t.live_bytes_end, kExecCount * Usable(kExecSize), 0.5);
}

// dlopen/dlclose of a library in a loop while 4 threads allocate: no
// deadlock (the watchdog kills the program after 60 s and the test fails),
// and the library's site symbolizes although it was unloaded long ago.
TEST(PlantedHostile, DlopenLoopUnderAllocationLoad) {
  TempDir dir;
  ChildResult r =
      RunChild({PlantedProgram(), "dlopen", PlantedDso()}, TracedEnv(dir.path(), 0), 60);
  ASSERT_FALSE(r.timed_out) << "deadlock? " << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  analysis::Report run = MustAnalyze(dir.path());
  SiteTotals t = FindSites(run, "PlantedDsoAlloc", SiteKind::kHost);
  ASSERT_GE(t.sites, 1) << DescribeSites(run);
  // kDsoSize >= S_always: recorded every time, exact at the default interval.
  EXPECT_NEAR(t.alloc_count, kDlopenIterations, 0.01);
  EXPECT_NEAR(t.alloc_bytes, kDlopenIterations * double{kDsoSize}, 0.5);
  EXPECT_NEAR(t.live_bytes_end, 0, 0.5);
  bool module_named = false;
  for (const analysis::Site* site : t.matches) {
    for (const analysis::Frame& f : site->frames) {
      module_named |= absl::StrContains(f.function, "PlantedDsoAlloc") &&
                      absl::StrContains(f.module, "libplanted_dso");
    }
  }
  EXPECT_TRUE(module_named) << DescribeSites(run);
}

// Signal handlers that malloc and free, raised synchronously (every 10
// iterations) and from a 200 us interval timer that lands anywhere,
// including inside memstep's hooks, at interval 1 (every allocation takes
// the slow path). The program must finish, and the numbers must agree.
TEST(PlantedHostile, AllocatingSignalHandlers) {
  TempDir dir;
  ChildResult r = RunChild({PlantedProgram(), "signal"}, TracedEnv(dir.path(), 1), 60);
  ASSERT_FALSE(r.timed_out) << "deadlock? " << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t at = r.output.find("handler runs ");
  ASSERT_NE(at, std::string::npos) << r.output;
  int64_t runs = 0;
  ASSERT_TRUE(absl::SimpleAtoi(r.output.substr(at + 13, r.output.find('\n', at) - at - 13), &runs));
  const int64_t raised = kSignalMainCount / 10;
  ASSERT_GE(runs, raised);

  analysis::Report run = MustAnalyze(dir.path());
  ASSERT_EQ(run.processes.size(), 1u);
  ASSERT_EQ(run.processes[0].lost_records, 0u) << "records dropped: counts cannot be exact";
  SiteTotals main_site = FindSites(run, "PlantedSignalMain", SiteKind::kHost);
  EXPECT_NEAR(main_site.alloc_count, kSignalMainCount, 0.01) << DescribeSites(run);
  EXPECT_NEAR(main_site.live_count_end, 0, 0.01);
  // A handler that interrupts memstep's own hook may be passed through
  // unrecorded; every other run is recorded, and none leaks.
  SiteTotals handler = FindSites(run, "PlantedSignalHandler", SiteKind::kHost);
  EXPECT_GE(handler.alloc_count, raised) << DescribeSites(run);
  EXPECT_LE(handler.alloc_count, runs);
  EXPECT_NEAR(handler.live_count_end, 0, 0.01);
  EXPECT_GE(run.processes[0].alloc_count, uint64_t{kSignalMainCount});
}

// kill -9 mid-run: what was flushed before the kill reads back. The program
// prints "step N" after each step end; once it has printed step kKill we wait
// until the trace on disk holds that step's STEP record (a file that merely
// grew twice could hold two chunks of one flush cycle that began before the
// step: under load in CI's sanitizer pass the steps were not yet in it), then
// SIGKILL the program and analyse what it left.
TEST(PlantedHostile, KillNineKeepsFlushedSteps) {
  constexpr int64_t kKill = 30;
  TempDir dir;
  std::vector<std::string> env = TracedEnv(dir.path(), 0);
  env.push_back("MEMSTEP_FLUSH_MS=20");
  Child child = Spawn({PlantedProgram(), "progress"}, env);
  std::string line;
  int64_t step = -1;
  while (step < kKill) {
    ASSERT_TRUE(ReadLine(child.out_fd, &line, 30)) << "no progress, last line: " << line;
    if (absl::StartsWith(line, "step ")) {
      ASSERT_TRUE(absl::SimpleAtoi(line.substr(5), &step)) << line;
    }
  }
  std::vector<std::string> traces = dir.Files();
  ASSERT_EQ(traces.size(), 1u);
  const auto flushed = [&] {
    absl::StatusOr<reader::Trace> t = reader::ReadTraceFile(traces[0]);
    if (!t.ok()) return false;
    for (const reader::Event& e : t->events) {
      if (e.tag == format::kTagStep && e.step >= static_cast<uint64_t>(kKill)) return true;
    }
    return false;
  };
  while (!flushed()) {
    // The next write (the program keeps stepping), draining its output.
    ASSERT_TRUE(WaitForGrowth(traces[0], FileSize(traces[0]), 30, child.out_fd))
        << "step " << kKill << " never reached the trace";
  }
  kill(child.pid, SIGKILL);
  ChildResult r = Wait(&child, 30);
  ASSERT_EQ(r.term_signal, SIGKILL);

  analysis::Report run = MustAnalyze(dir.path());
  ASSERT_EQ(run.processes.size(), 1u);
  EXPECT_FALSE(run.processes[0].clean_exit);
  ASSERT_FALSE(run.steps.empty());
  EXPECT_GE(run.steps.back().step, static_cast<uint64_t>(kKill - 1));
  EXPECT_GE(FindSites(run, "PlantedProgressAlloc").sites, 1) << DescribeSites(run);
}

// The planted leak is 3000 blocks of 1000 B. At the default T = 512 KiB it
// draws about 5.7 samples, so P(no sample) = exp(-3e6 / 524288) = 0.33 % and
// the report could not name it (seen: 3 failures in 125 runs). At T = 16 KiB
// it draws about 183: P(no sample) = exp(-183) < 1e-79.
uint64_t MonoNow() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// kill -9 at seeded random moments (issue 12, item 5): every flushed chunk
// reads back (no truncation short of the torn tail), the last recorded time
// is within two flush periods of the kill, and the report says the run ended
// abnormally with its last step. The flush period is 100 ms so that a loaded
// 2-core CI machine keeps the 200 ms promise; the delays are drawn from a
// fixed-seed generator (no clock-picked seed).
TEST(PlantedHostile, KillNineAtRandomMomentsOverSeeds) {
  constexpr int kSeeds = 12;
  constexpr uint64_t kFlushNs = 100000000;
  std::mt19937 rng(20261125);
  std::uniform_int_distribution<int> delay_ms(150, 1200);
  for (int seed = 0; seed < kSeeds; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    TempDir dir;
    std::vector<std::string> env = TracedEnv(dir.path(), 0);
    env.push_back("MEMSTEP_FLUSH_MS=100");
    Child child = Spawn({PlantedProgram(), "progress"}, env);
    std::string line;
    int64_t last_seen = -1;
    // The delay counts from the program's first step, not from the spawn: on
    // a loaded machine starting the process can take longer than the
    // shortest delay, and a kill before any step has no step to report.
    const uint64_t start_deadline = MonoNow() + 30000000000u;
    while (last_seen < 0 && MonoNow() < start_deadline) {
      if (ReadLine(child.out_fd, &line, 5) && absl::StartsWith(line, "step ")) {
        (void)absl::SimpleAtoi(line.substr(5), &last_seen);
      }
    }
    if (last_seen < 0) kill(child.pid, SIGKILL);
    ASSERT_GE(last_seen, 0) << "no step within 30 s";
    const uint64_t until = MonoNow() + static_cast<uint64_t>(delay_ms(rng)) * 1000000;
    while (MonoNow() < until) {  // drain its output while it runs
      if (ReadLine(child.out_fd, &line, 5) && absl::StartsWith(line, "step ")) {
        (void)absl::SimpleAtoi(line.substr(5), &last_seen);
      }
    }
    const uint64_t kill_mono = MonoNow();
    kill(child.pid, SIGKILL);
    while (ReadLine(child.out_fd, &line, 5)) {  // what it printed before the kill
      if (absl::StartsWith(line, "step ")) (void)absl::SimpleAtoi(line.substr(5), &last_seen);
    }
    ChildResult r = Wait(&child, 30);
    ASSERT_EQ(r.term_signal, SIGKILL);
    std::vector<std::string> files = dir.Files();
    ASSERT_EQ(files.size(), 1u);
    absl::StatusOr<reader::Trace> t = reader::ReadTraceFile(files[0]);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_FALSE(t->has_trailer);
    const uint64_t kill_rel = kill_mono - t->header.start_mono_ns;
    EXPECT_GE(t->max_ts + 2 * kFlushNs, kill_rel)
        << "last record " << t->max_ts << " ns, kill at " << kill_rel << " ns";
    analysis::Report run = MustAnalyze(dir.path());
    ASSERT_EQ(run.processes.size(), 1u);
    const analysis::ProcessSummary& p = run.processes[0];
    EXPECT_FALSE(p.clean_exit);
    EXPECT_FALSE(p.recording_stopped);
    ASSERT_GE(p.last_step, 0);
    // It records a step's end before printing it: the trace may hold one more.
    EXPECT_LE(p.last_step, last_seen + 1);
    // The report says so, with the last step and the heap live then (issue 12, item 5).
    const std::string text = report::FormatText(run);
    EXPECT_TRUE(absl::StrContains(text, "ENDED ABNORMALLY") ||
                absl::StrContains(text, "TRUNCATED at offset"))
        << text;
    EXPECT_TRUE(
        absl::StrContains(text, absl::StrCat("last step ", p.last_step, ", heap live then ")))
        << text;
  }
}

// Out of memory under an address-space limit (no cgroup needed), over
// several fixed seeds (issue 12, item 5): the program aborts when malloc
// fails; memstep neither crashes first nor loses the trace, the last recorded
// time is within two flush periods of the failure (the program prints the
// CLOCK_MONOTONIC time at which malloc failed, just before abort()), and the
// report says where the run was: its last step and the live heap. Each seed
// sets MEMSTEP_SEED (the sampler's draws) and the headroom the program leaves
// itself (so the failure falls at a different moment of the flush cycle),
// both from a fixed-seed generator. The flush period is 100 ms, as in the
// kill -9 test, so that a loaded 2-core CI machine keeps the promise.
TEST(PlantedHostile, OutOfMemoryUnderAnAddressSpaceLimit) {
  constexpr int kSeeds = 6;
  constexpr uint64_t kFlushNs = 100000000;
  std::mt19937 rng(20261126);
  std::uniform_int_distribution<int> headroom_mib(256, 768);
  for (int seed = 1; seed <= kSeeds; ++seed) {
    const int headroom = headroom_mib(rng);
    SCOPED_TRACE(absl::StrCat("seed ", seed, ", headroom ", headroom, " MiB"));
    TempDir dir;
    std::vector<std::string> env = TracedEnv(dir.path(), 0);
    env.push_back("MEMSTEP_FLUSH_MS=100");
    env.push_back(absl::StrCat("MEMSTEP_SEED=", seed));
    // Its 4 MiB steps run out after about headroom / 4.
    ChildResult r = RunChild({PlantedProgram(), "oom", std::to_string(headroom)}, env, 120);
    ASSERT_FALSE(r.timed_out);
    EXPECT_EQ(r.term_signal, SIGABRT) << r.output;
    const size_t at = r.output.find("out of memory at step ");
    ASSERT_NE(at, std::string::npos) << r.output;
    int64_t oom_step = -1;
    uint64_t oom_mono = 0;
    ASSERT_EQ(sscanf(r.output.c_str() + at, "out of memory at step %" SCNd64 " mono %" SCNu64,
                     &oom_step, &oom_mono),
              2)
        << r.output;
    std::vector<std::string> files = dir.Files();
    ASSERT_EQ(files.size(), 1u);
    absl::StatusOr<reader::Trace> t = reader::ReadTraceFile(files[0]);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_FALSE(t->has_trailer);
    ASSERT_GE(oom_mono, t->header.start_mono_ns);
    const uint64_t oom_rel = oom_mono - t->header.start_mono_ns;
    EXPECT_GE(t->max_ts + 2 * kFlushNs, oom_rel)
        << "last record " << t->max_ts << " ns, out of memory at " << oom_rel << " ns";
    analysis::Report run = MustAnalyze(dir.path());
    ASSERT_EQ(run.processes.size(), 1u);
    const analysis::ProcessSummary& p = run.processes[0];
    EXPECT_FALSE(p.clean_exit);
    // Where the run was: a step the program reached (the time check above
    // bounds how far before the failure it may be). No floor from the
    // headroom: what memstep and glibc map after the limit is set (the
    // writer thread's arena reserves 64 MiB) varies, and a floor of half the
    // headroom's steps failed at seed 6 (41 steps against 42) with the trace
    // whole.
    EXPECT_GE(p.last_step, 1);
    EXPECT_LE(p.last_step, oom_step);
    // Each step kept 4 MiB: what was live at the last step is its 4 MiB x steps.
    EXPECT_GE(p.live_bytes_end, static_cast<uint64_t>(p.last_step) * (4 << 20));
    const std::string text = report::FormatText(run);
    EXPECT_TRUE(absl::StrContains(text, "ENDED ABNORMALLY")) << text;
    EXPECT_TRUE(absl::StrContains(text, absl::StrCat("last step ", p.last_step))) << text;
  }
}

TEST(Cli, RunPassesExitCodeAndReportNamesTheLeak) {
  ASSERT_FALSE(MemstepCli().empty()) << "the memstep CLI is not built";
  TempDir dir;
  const std::string out = absl::StrCat(dir.path(), "/run");
  ChildResult r = RunChild({MemstepCli(), "run", "--out", out, "--sample-interval", "16KiB", "--",
                            PlantedProgram(), "exit", "7"},
                           {"MEMSTEP_SEED=1"}, 60);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 7) << r.output;
  // The run directory is printed: `out` itself or a directory inside it.
  size_t at = r.output.find(out);
  ASSERT_NE(at, std::string::npos) << r.output;
  size_t end = r.output.find_first_of(" \t\n'\"", at);
  std::string run_dir = r.output.substr(at, end == std::string::npos ? end : end - at);
  while (run_dir.size() > out.size() && (run_dir.back() == '.' || run_dir.back() == ':')) {
    run_dir.pop_back();
  }

  ChildResult rep = RunChild({MemstepCli(), "report", run_dir}, {}, 60);
  ASSERT_FALSE(rep.timed_out);
  EXPECT_EQ(rep.exit_code, 0) << rep.output;
  EXPECT_TRUE(absl::StrContains(rep.output, "PlantedLeak3000x1000")) << rep.output;
}

// The README's first example: at the default interval the planted leak of
// the bundled training program (64 KiB per step, 200 steps) is the top site
// live at the end, and every step is in the table. The leak's 200
// allocations are each sampled with p = 1 - exp(-65537/524288) = 0.118, so
// P(no sample at all) = 0.882^200 < 1e-10; nothing else is live at exit.
TEST(Example, TrainingLoopLeakIsTheTopLiveSite) {
  TempDir dir;
  ChildResult r = RunChild({ExampleProgram(), "--steps", "200"}, TracedEnv(dir.path(), 0), 60);
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  analysis::Report run = MustAnalyze(dir.path());
  ASSERT_EQ(run.steps.size(), 200u);
  ASSERT_FALSE(run.sites.empty());
  const analysis::Site& top = run.sites.front();
  ASSERT_FALSE(top.frames.empty());
  EXPECT_TRUE(absl::StrContains(top.frames.front().function, "RecordMetricsHistory"))
      << DescribeSites(run);
  EXPECT_EQ(run.steps.front().stage_peaks.size(), 4u);
  // Each planted class at its site, and the leak's rate interval:
  // example_test.cc.
}

}  // namespace
}  // namespace memstep::e2e

// report_scale_bench: how `memstep report` scales with the trace
// (issue 11 "Scale"; tests/bench/report_scale.sh runs it on a 1 GiB trace).
//
//   report_scale_bench --memstep BIN --trace FILE [--formats a,b,...] [--pin2 0|1]
//
// 1. Runs `BIN report --format F -o /dev/null FILE` for each format (text,
//    json, html, pprof, perfetto, folded, csv, the churn view) and
//    `BIN diff FILE FILE`, each a child process: wall time, CPU time (user +
//    sys) and peak RSS (wait4's ru_maxrss).
// 2. Splits one analysis in this process: the scan (pass 1: decompression,
//    decoding, dictionaries, control events), one re-read of the bulk events
//    (reader::EventStream, what each later pass costs to decode), the whole
//    AnalyzeRun, and the growth statistics alone (ClassifyGrowth on series of
//    the report's shape: its sites x steps, with the current trend code).
// 3. Prints one PASS/FAIL line per goal: every format within 60 wall
//    seconds per GiB of its input (a report reads the trace once, `diff`
//    reads it twice: 2x the bytes, so twice the time) and under 2 GiB of
//    peak RSS. CPU seconds (user + sys, both of the report's threads) are
//    printed beside the wall seconds: wall below CPU means both cores
//    worked; on a shared machine wall time also measures the other jobs.
// --pin2 1 (4 CPUs or more) pins each child, and this process for the
// split, to a pair of CPUs of its own and runs as many formats at once as
// there are pairs: each run sees a 2-core machine, as the goal states.
// Output format: see tests/bench/report_scale.sh and scripts/bench_doc.py.

#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "src/analysis/analysis.h"
#include "src/analysis/growth.h"
#include "src/reader/reader.h"
#include "src/reader/run_files.h"

namespace {

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

double CpuNow() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

struct ChildResult {
  int status = -1;
  double wall_s = 0;
  double cpu_s = 0;
  double max_rss_mib = 0;
};

// Pins this process to CPUs 2k and 2k+1.
void PinPair(int k) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(2 * k, &set);
  CPU_SET(2 * k + 1, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

// Starts `argv` (stdout to /dev/null), pinned to CPU pair `pair` (>= 0).
pid_t StartChild(const std::vector<std::string>& argv, int pair) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (pair >= 0) PinPair(pair);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (freopen("/dev/null", "w", stdout) == nullptr) _exit(127);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

ChildResult Reap(pid_t pid, double t0) {
  ChildResult r;
  int status = 0;
  rusage ru;
  wait4(pid, &status, 0, &ru);
  r.wall_s = Now() - t0;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
            static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  r.max_rss_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;
  return r;
}

int Usage() {
  fprintf(stderr, "usage: report_scale_bench --memstep BIN --trace FILE [--formats a,b,...]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string memstep, trace, formats = "text,json,html,pprof,perfetto,folded,csv,churn,diff";
  bool pin = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--memstep") {
      memstep = argv[i + 1];
    } else if (k == "--trace") {
      trace = argv[i + 1];
    } else if (k == "--formats") {
      formats = argv[i + 1];
    } else if (k == "--pin2") {
      pin = std::string(argv[i + 1]) == "1";
    } else {
      return Usage();
    }
  }
  if (memstep.empty() || trace.empty() || argc % 2 == 0) return Usage();

  // 1. Every format, as a user runs it.
  printf("%-10s %8s %8s %10s %4s %9s\n", "format", "wall_s", "cpu_s", "max_rss_mib", "rc",
         "input_mib");
  fflush(stdout);  // before fork: the children must not inherit unwritten output
  // Per GiB of the run's input (diff: both traces).
  double worst_cpu = 0, worst_wall = 0, worst_rss = 0;
  struct stat st {};
  if (stat(trace.c_str(), &st) != 0 || st.st_size <= 0) {
    fprintf(stderr, "report_scale_bench: cannot stat %s\n", trace.c_str());
    return 1;
  }
  const double trace_mib = static_cast<double>(st.st_size) / (1 << 20);
  bool all_ok = true;
  const std::vector<std::string> names = absl::StrSplit(formats, ',');
  // Pinned: as many runs at once as the machine has CPU pairs.
  const size_t pairs = static_cast<size_t>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN) / 2));
  if (pin && pairs < 2) {
    fprintf(stderr, "report_scale_bench: --pin2 1 needs 4 CPUs or more\n");
    return 2;
  }
  std::vector<pid_t> pids;
  std::vector<double> starts;
  auto show = [&](const std::string& f, const ChildResult& r) {
    const double input_mib = f == "diff" ? 2 * trace_mib : trace_mib;
    printf("%-10s %8.2f %8.2f %10.1f %4d %9.1f\n", f.c_str(), r.wall_s, r.cpu_s, r.max_rss_mib,
           r.status, input_mib);
    fflush(stdout);
    all_ok = all_ok && (r.status == 0 || r.status == 3);  // 3: a gate failed (none here)
    const double gib = input_mib / 1024;
    worst_cpu = std::max(worst_cpu, r.cpu_s / gib);
    worst_wall = std::max(worst_wall, r.wall_s / gib);
    worst_rss = std::max(worst_rss, r.max_rss_mib);
  };
  for (size_t k = 0; k < names.size(); ++k) {
    const std::string& f = names[k];
    std::vector<std::string> cmd;
    if (f == "diff") {
      cmd = {memstep, "diff", "--no-symbolize", trace, trace};
    } else if (f == "churn") {
      cmd = {memstep, "report", "--no-symbolize", "--view", "churn", trace};
    } else {
      cmd = {memstep, "report", "--no-symbolize", "--format", f, "-o", "/dev/null", trace};
    }
    starts.push_back(Now());
    pids.push_back(StartChild(cmd, pin ? static_cast<int>(k % pairs) : -1));
    if (!pin) {
      show(f, Reap(pids.back(), starts.back()));  // one at a time
    } else if (pids.size() % pairs == 0 || k + 1 == names.size()) {
      for (size_t j = pids.size() - ((pids.size() - 1) % pairs + 1); j < pids.size(); ++j) {
        show(names[j], Reap(pids[j], starts[j]));  // a wave of runs, one per CPU pair
      }
    }
  }
  printf("(%s)\n", pin ? "formats in waves, each run pinned to 2 CPUs of its own"
                       : "one format at a time, not pinned");
  if (pin) PinPair(0);

  // 2. The split, in this process.
  absl::StatusOr<memstep::reader::RunFiles> run = memstep::reader::RunFiles::Open(trace);
  if (!run.ok() || run->traces().empty()) {
    fprintf(stderr, "report_scale_bench: %s\n", std::string(run.status().message()).c_str());
    return 1;
  }
  const memstep::reader::TraceFile& file = run->traces()[0];
  double c0 = CpuNow();
  absl::StatusOr<memstep::reader::Trace> scanned = memstep::reader::ScanTrace(file.data, file.size);
  const double scan_s = CpuNow() - c0;
  if (!scanned.ok()) {
    fprintf(stderr, "report_scale_bench: %s\n", std::string(scanned.status().message()).c_str());
    return 1;
  }
  c0 = CpuNow();
  uint64_t bulk = 0;
  {
    memstep::reader::EventStream stream(file.data, scanned->data_begin, scanned->data_end);
    memstep::reader::Event e;
    while (stream.Next(&e)) ++bulk;
  }
  const double pass_s = CpuNow() - c0;
  memstep::analysis::Options options;
  options.symbolize = false;
  c0 = CpuNow();
  absl::StatusOr<memstep::analysis::Report> report = memstep::analysis::AnalyzeRun(*run, options);
  const double analyze_s = CpuNow() - c0;
  if (!report.ok()) {
    fprintf(stderr, "report_scale_bench: %s\n", std::string(report.status().message()).c_str());
    return 1;
  }
  const size_t rows = report->steps.size();
  size_t host_sites = 0;
  for (const memstep::analysis::Site& s : report->sites) {
    host_sites += s.kind == memstep::analysis::SiteKind::kHost;
  }
  // The statistics alone: one ClassifyGrowth per host site on a series of
  // the report's length (a noisy random walk, fixed seed).
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0, 4096);
  memstep::analysis::GrowthInput in;
  in.y.resize(rows);
  double v = 1 << 20;
  for (size_t k = 0; k < rows; ++k) in.y[k] = (v += noise(rng)) > 0 ? v : 0;
  in.interval_by_row.assign(rows, 524288.0);
  c0 = CpuNow();
  for (size_t s = 0; s < host_sites; ++s) {
    (void)memstep::analysis::ClassifyGrowth(in, rows / 10, memstep::analysis::GrowthOptions{});
  }
  const double stats_s = CpuNow() - c0;
  const uint64_t records = scanned->bulk_events + scanned->events.size();
  printf("trace: %.1f MiB, %llu records (%llu bulk), %zu steps, %zu host sites\n",
         static_cast<double>(file.size) / (1 << 20), static_cast<unsigned long long>(records),
         static_cast<unsigned long long>(bulk), rows, host_sites);
  printf("split (cpu_s, in process, no symbolization):\n");
  printf("  scan (pass 1: decompress, decode, dictionaries, control events): %.2f\n", scan_s);
  printf("  one re-read of the bulk events (each later pass's decoding): %.2f\n", pass_s);
  printf("  decode rate: %.1f MiB/cpu-s of file, %.1f M records/cpu-s\n",
         static_cast<double>(file.size) / (1 << 20) / std::max(pass_s, 1e-9),
         static_cast<double>(bulk) / 1e6 / std::max(pass_s, 1e-9));
  printf("  whole AnalyzeRun (scan + passes + replay + statistics): %.2f\n", analyze_s);
  printf("  growth statistics alone (%zu x ClassifyGrowth on %zu steps): %.2f\n", host_sites, rows,
         stats_s);
  printf("  reorder window peak: %zu events\n", scanned->peak_window);

  // 3. Goals.
  int passed = 0, failed = 0;
  auto goal = [&](const char* name, double value, double limit, const char* unit) {
    const bool ok = all_ok && value <= limit;
    (ok ? passed : failed)++;
    printf("%s %s: measured %.1f%s (goal <= %.1f%s)%s\n", ok ? "PASS" : "FAIL", name, value, unit,
           limit, unit, all_ok ? "" : " (a run failed)");
  };
  // The time goal is 60 wall seconds for 1 GiB; every run is held to its
  // input's share (the time is linear in the records: every pass decodes
  // all of them), and diff's input is both traces.
  printf("time per GiB of input (diff: two traces, 2x the bytes): worst %.1f wall-s, %.1f cpu-s\n",
         worst_wall, worst_cpu);
  printf("goals:\n");
  goal("report-scale-time", worst_wall, 60, " wall-s per GiB");
  goal("report-scale-memory", worst_rss, 2048, " MiB");
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

// Helpers of the memstep CLI: units, library lookup, usage texts.

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/analysis/select.h"
#include "src/format/quantity.h"
#include "tools/memstep/cli.h"

#ifndef MEMSTEP_BIN_TO_LIB
#define MEMSTEP_BIN_TO_LIB "../lib"
#endif
#ifndef MEMSTEP_BIN_TO_PYTHON
#define MEMSTEP_BIN_TO_PYTHON "../share/memstep/python"
#endif

namespace memstep::cli {

const char kBinToLib[] = MEMSTEP_BIN_TO_LIB;
const char kBinToPython[] = MEMSTEP_BIN_TO_PYTHON;

absl::StatusOr<uint64_t> ParseUint(const std::string& text) {
  uint64_t v;
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) ||
      !absl::SimpleAtoi(text, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a non-negative integer"));
  }
  return v;
}

absl::StatusOr<uint64_t> ParseBytes(const std::string& text) {
  namespace fmt = ::memstep::format;
  constexpr uint32_t kAccept = fmt::kAcceptSize | fmt::kAcceptFraction;
  fmt::Quantity q;
  const char* err = fmt::ParseQuantity(text.data(), text.size(), kAccept, &q);
  if (err == nullptr && !q.fits) err = "too large";
  if (err != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a size (", err,
                                                   "); expected ", fmt::QuantityForms(kAccept)));
  }
  return q.bytes;
}

absl::StatusOr<double> ParsePercent(const std::string& text) {
  namespace fmt = ::memstep::format;
  constexpr uint32_t kAccept = fmt::kAcceptPercent | fmt::kAcceptFraction;
  fmt::Quantity q;
  const char* err = fmt::ParseQuantity(text.data(), text.size(), kAccept, &q);
  if (err != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a percentage 0..100 (", err,
                                                   "); expected ", fmt::QuantityForms(kAccept)));
  }
  return q.value;
}

bool IsAnalysisOption(const std::string& name) {
  return std::find(std::begin(kAnalysisOptions), std::end(kAnalysisOptions), name) !=
         std::end(kAnalysisOptions);
}

absl::Status ApplyAnalysisOption(const std::string& name, const std::string& value,
                                 analysis::Options* options) {
  if (name == "--steps")
    return analysis::ParseStepRange(value, &options->first_step, &options->last_step);
  if (name == "--stage" || name == "--rank") {
    if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(name, " needs a name"));
    (name == "--stage" ? options->stage : options->rank) = value;
    return absl::OkStatus();
  }
  if (name == "--pid" || name == "--warmup") {
    absl::StatusOr<uint64_t> n = ParseUint(value);
    if (!n.ok() || *n > (name == "--pid" ? uint64_t{UINT32_MAX} : uint64_t{1000000})) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": '", value, "' is not a ",
                                                     name == "--pid" ? "process id" : "count"));
    }
    (name == "--pid" ? options->pid : options->warmup_steps) = static_cast<int64_t>(*n);
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> bytes = ParseBytes(value);
  if (!bytes.ok())
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", bytes.status().message()));
  if (name == "--memory-limit") {
    if (*bytes == 0) return absl::InvalidArgumentError("--memory-limit must be more than 0");
    options->memory_limit = *bytes;
  } else if (name == "--leak-min-rate") {
    options->growth.min_rate = static_cast<double>(*bytes);
  } else {
    options->growth.min_window_growth = static_cast<double>(*bytes);
  }
  return absl::OkStatus();
}

bool StreamOutput(const std::string& path,
                  const std::function<void(const report::TextSink&)>& produce) {
  if (path.empty()) {
    bool ok = true;
    produce([&ok](std::string_view piece) {
      if (ok) ok = static_cast<bool>(std::cout.write(piece.data(), piece.size()));
      return ok;
    });
    std::cout.flush();
    if (!ok || !std::cout.good()) {
      std::cerr << "memstep: error: cannot write the report to stdout\n";
      return false;
    }
    return true;
  }
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr) {
    std::cerr << "memstep: error: cannot create " << path << ": " << strerror(errno) << "\n";
    return false;
  }
  int err = 0;  // errno of the first failed write
  produce([f, &err](std::string_view piece) {
    if (err == 0 && fwrite(piece.data(), 1, piece.size(), f) != piece.size()) {
      err = errno != 0 ? errno : EIO;
    }
    return err == 0;
  });
  if (fclose(f) != 0 && err == 0) err = errno != 0 ? errno : EIO;
  if (err != 0) {
    std::cerr << "memstep: error: cannot write " << path << ": " << strerror(err) << "\n";
    return false;
  }
  return true;
}

std::string ExeDir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string path(buf, static_cast<size_t>(n));
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

absl::StatusOr<std::string> FindPreloadLibrary(const std::string& exe_dir) {
  if (const char* env = getenv("MEMSTEP_LIB"); env != nullptr && *env != '\0') {
    if (access(env, R_OK) != 0) {
      return absl::NotFoundError(absl::StrCat("MEMSTEP_LIB=", env, ": no such readable file"));
    }
    return std::string(env);
  }
  // The installed layout first (bin -> libdir, e.g. ../lib or
  // ../lib/x86_64-linux-gnu), then the build tree's (build/bin, build/lib).
  const std::string candidates[] = {
      absl::StrCat(exe_dir, "/", kBinToLib, "/libmemstep.so"),
      absl::StrCat(exe_dir, "/../lib/libmemstep.so"),
      absl::StrCat(exe_dir, "/libmemstep.so"),
      absl::StrCat(exe_dir, "/../lib/memstep/libmemstep.so"),
  };
  for (const std::string& c : candidates) {
    if (access(c.c_str(), R_OK) == 0) {
      char real[PATH_MAX];
      if (realpath(c.c_str(), real) != nullptr) return std::string(real);
      return c;
    }
  }
  return absl::NotFoundError(absl::StrCat("libmemstep.so not found (looked in ", candidates[0],
                                          ", ", candidates[1], ", ", candidates[2], ", ",
                                          candidates[3], "); set MEMSTEP_LIB to its path"));
}

std::string MainUsage() {
  return "usage: memstep <command> [options]\n"
         "\n"
         "memstep profiles the memory of a training job, step by step.\n"
         "\n"
         "commands:\n"
         "  run [options] -- COMMAND ARGS...   run COMMAND with the profiler, write a run "
         "directory\n"
         "  report RUN_DIR|TRACE [options]     analyze a run directory or one trace file\n"
         "  diff BASE NEW [options]            compare two runs (regression gates)\n"
         "  top RUN_DIR [options]              live view of a running job (--once: one frame)\n"
         "\n"
         "  memstep --help | -h                this help\n"
         "  memstep --version                  version\n"
         "  memstep <command> --help           help of one command\n"
         "\n"
         "examples:\n"
         "  memstep run -- python train.py --epochs 2\n"
         "  memstep report memstep-20260101-120000-4242 --top 20\n"
         "\n"
         "environment (see `memstep run --help`): MEMSTEP_OUT, MEMSTEP_SAMPLE_INTERVAL,\n"
         "MEMSTEP_FLUSH_MS, MEMSTEP_LIB.\n"
         "\n"
         "Exit status: 0 ok, 1 usage or input error, 3 `report`, `diff`: a --fail-on gate failed;\n"
         "`run` exits with the command's status (128+N if killed by signal N, 127 if not found).\n";
}

std::string RunUsage() {
  return "usage: memstep run [options] [--] COMMAND ARGS...\n"
         "\n"
         "Runs COMMAND with libmemstep.so preloaded; each process writes one trace into the\n"
         "run directory. Exits with COMMAND's exit status.\n"
         "\n"
         "options (each has an environment variable; the option wins):\n"
         "  --out DIR               run directory                       MEMSTEP_OUT\n"
         "                          (default ./memstep-YYYYmmdd-HHMMSS-PID; an existing\n"
         "                          directory is reused, files are only added)\n"
         "  --sample-interval BYTES mean sampling interval T            MEMSTEP_SAMPLE_INTERVAL\n"
         "                          (4096, 512K, 512KiB, 1.5MiB, 2GB; K, KiB are 1024-based,\n"
         "                          kB, MB 1000-based; 1 = every allocation)\n"
         "                          after warm-up (T_steady)\n"
         "  --sample-warm BYTES     T_warm: the dense interval of the   MEMSTEP_SAMPLE_WARM\n"
         "                          first 20 marked steps and of boosts (default T_steady/4)\n"
         "  --fixed-interval        no progressive sampling: T_steady   MEMSTEP_PROGRESSIVE=0\n"
         "                          all the time\n"
         "  --hunt-budget PCT       leak hunt: while the exact heap     MEMSTEP_HUNT_BUDGET\n"
         "                          grows unexplained by the sampled sites, sample more\n"
         "                          densely, spending at most PCT% of wall time on samples\n"
         "                          (default 10; 0 = no hunt; off with --fixed-interval)\n"
         "  --flush-ms MS           writer flush period in milliseconds MEMSTEP_FLUSH_MS\n"
         "  --metrics-file PATH     keep PATH, a Prometheus text file   MEMSTEP_METRICS_FILE\n"
         "                          (node_exporter's textfile collector), up to date: rewritten\n"
         "                          atomically (PATH.tmp, rename) when a process completes a\n"
         "                          step and at the end (docs/monitoring.md)\n"
         "  -h, --help              this help\n"
         "\n"
         "environment:\n"
         "  MEMSTEP_LIB             path of libmemstep.so (default: next to this program,\n"
         "                          <bin>/" MEMSTEP_BIN_TO_LIB
         "/libmemstep.so (installed), <bin>/../lib,\n"
         "                          <bin>, <bin>/../lib/memstep)\n"
         "The command sees LD_PRELOAD (libmemstep.so first, then yours), MEMSTEP_DIR and the\n"
         "MEMSTEP_* settings above.\n";
}

std::string ReportUsage() {
  return "usage: memstep report RUN_DIR|TRACE [options]\n"
         "\n"
         "Reads every *.trace in RUN_DIR (or one TRACE file) and prints the report\n"
         "(on stdout, or into FILE with -o).\n"
         "\n"
         "options:\n"
         "  --format FORMAT      output format (default text):\n"
         "                         text      the report for people\n"
         "                         json      everything, schema memstep.report/3\n"
         "                         folded    folded stacks (flamegraph.pl, inferno, speedscope)\n"
         "                         csv       the per-step table, one row per step per process\n"
         "                         perfetto  Chrome trace-event JSON (ui.perfetto.dev):\n"
         "                                   memory counters, step/stage slices, alerts,\n"
         "                                   failed device allocations (OOMs)\n"
         "                         pprof     gzipped profile.proto (pprof, speedscope)\n"
         "                         html      one self-contained page for a browser: alerts,\n"
         "                                   gates, memory over steps, stage peaks, growing\n"
         "                                   sites, flame graphs (no network needed)\n"
         "  --view churn         text, json, csv: the churn view instead of the report:\n"
         "                       allocations and bytes per step by call site, estimated\n"
         "                       with 95% intervals, and their share of all allocations\n"
         "  --view VIEW          folded: which bytes (default live-end):\n"
         "                         live-end     estimated live bytes at the end\n"
         "                         peak         live at the peak\n"
         "                         stage:NAME   live at stage NAME's largest peak\n"
         "                         class:CLASS  live at the end, sites of one growth class\n"
         "                                      (LEAK, BOUNDED_GROWTH, WARMUP_ONLY, NO_TREND,\n"
         "                                      INSUFFICIENT)\n"
         "  -o, --output FILE    write the report into FILE instead of stdout\n"
         "selection (every format; docs/analysis.md \"Selection\"):\n"
         "  --steps A:B          only steps A..B (A:, :B open; A alone is A:A): rows, peaks\n"
         "                       and growth fits of those steps; live at the end = at B's end\n"
         "  --stage NAME         only stage NAME: its stage peaks, and call sites from the\n"
         "                       sampled host allocations made in it\n"
         "  --pid N              only process N\n"
         "  --rank R             only the process(es) with RANK=R\n"
         "  --top N              call sites per table (default 10; json: all unless given)\n"
         "  --frames N           frames per stack (default 8; json: all unless given)\n"
         "  --no-symbolize       show module+offset instead of functions and lines\n"
         "  --warmup STEPS       ignore at least the first STEPS steps for growth (default:\n"
         "                       detected from the exact live bytes)\n"
         "  --memory-limit BYTES project time to exhaustion against BYTES (default: MemTotal)\n"
         "  --leak-min-rate BYTES    smallest growth/step called LEAK (default 16K)\n"
         "  --leak-min-growth BYTES  smallest growth over the window called LEAK (default 1M)\n"
         "                       (defaults for call sites; the exact heap series uses 1/32\n"
         "                       of them unless these options are given)\n"
         "  --fail-on EXPR       exit 3 when EXPR holds, e.g. 'growth > 1MiB/step',\n"
         "                       'peak(forward) > 2GiB', 'leaks > 0', 'device_peak > 8GiB'\n"
         "                       (repeatable; metrics: growth live_growth peak peak(STAGE)\n"
         "                       live_end rss_peak leaks device_peak device_peak(STAGE)\n"
         "                       device_growth churn)\n"
         "  -h, --help           this help\n"
         "\n"
         "exit status: 0 ok, 1 usage or input error, 3 a --fail-on gate failed\n";
}

std::string DiffUsage() {
  return "usage: memstep diff BASE NEW [options]\n"
         "\n"
         "Compares two runs (run directories or trace files): per-process heap peak, live\n"
         "bytes, growth and allocations per step, per-stage peaks, and call sites matched\n"
         "by their symbolized stacks (function, file:line; not addresses). Processes are\n"
         "matched by rank (RANK), else by pid order.\n"
         "\n"
         "options:\n"
         "  --format text|json|html\n"
         "                       output format (default text; json: schema memstep.diff/1;\n"
         "                       html: one self-contained page, gates at the top)\n"
         "  -o, --output FILE    write into FILE instead of stdout\n"
         "  --top N              call sites shown (default 10; json: all unless given;\n"
         "                       html: 100, 0 all)\n"
         "  --frames N           frames per stack (default 8; json, html: all unless given)\n"
         "  --no-symbolize       match by module+offset (same binaries only)\n"
         "  --steps A:B, --stage NAME, --rank R\n"
         "                       the same selection of both runs (see memstep report --help)\n"
         "  --pid N | --pid BASE:NEW\n"
         "                       one process of each run (pids differ between runs)\n"
         "  --warmup, --memory-limit, --leak-min-rate, --leak-min-growth\n"
         "                       as for memstep report, for both runs\n"
         "  --fail-on EXPR       exit 3 when EXPR holds (repeatable). A change compares the\n"
         "                       runs: NEW minus BASE ('peak > +64MiB', 'growth >\n"
         "                       +1MiB/step') or in percent of BASE ('peak(forward) > +10%',\n"
         "                       from 0 any increase is +inf %); 'site_growth > +256KiB/step':\n"
         "                       the largest increase of one call site's growth. Without a\n"
         "                       sign or %, a gate applies to NEW as in memstep report.\n"
         "                       Metrics: growth live_growth peak peak(STAGE) live_end\n"
         "                       rss_peak leaks device_peak device_peak(STAGE) device_growth\n"
         "                       churn site_growth\n"
         "  -h, --help           this help\n"
         "\n"
         "exit status: 0 ok, 1 usage or input error, 3 a --fail-on gate failed\n";
}

}  // namespace memstep::cli

#include "tools/memstep/analyze.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_format.h"
#include "src/reader/run_files.h"

namespace memstep::cli {
namespace {

uint64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string Mib(uint64_t bytes) {
  return absl::StrFormat("%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

}  // namespace

void ProgressBar::Update(const std::string& file, int pass, uint64_t done, uint64_t total) {
  if (!enabled_) return;
  const uint64_t now = MonoNs();
  const bool first = file != file_ || pass != pass_;
  const bool last = done >= total;
  if (!first && !last && now - last_ns_ < 100000000) return;
  file_ = file;
  pass_ = pass;
  last_ns_ = now;
  constexpr int kWidth = 24;
  const double frac = total > 0 ? std::min(1.0, static_cast<double>(done) / total) : 1.0;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(filled, '#');
  bar.append(kWidth - filled, '-');
  const std::string line =
      absl::StrFormat("memstep: reading %s (pass %d) [%s] %3d%%  %s/%s MiB", BaseName(file), pass,
                      bar, static_cast<int>(frac * 100), Mib(done), Mib(total));
  fprintf(out_, "\r\033[K%s", line.c_str());
  fflush(out_);
  drawn_ = true;
}

void ProgressBar::Finish() {
  if (!drawn_) return;
  fprintf(out_, "\r\033[K");
  fflush(out_);
  drawn_ = false;
}

absl::StatusOr<analysis::Report> AnalyzePath(const std::string& path,
                                             const analysis::Options& options) {
  absl::StatusOr<reader::RunFiles> run = reader::RunFiles::Open(path);
  if (!run.ok()) return run.status();
  analysis::Options o = options;
  o.machine_memory = reader::MachineMemTotal();
  ProgressBar bar(stderr, isatty(STDERR_FILENO) == 1);
  absl::StatusOr<analysis::Report> report = analysis::AnalyzeRun(
      *run, o, [&bar](const std::string& file, int pass, uint64_t done, uint64_t total) {
        bar.Update(file, pass, done, total);
      });
  bar.Finish();
  return report;
}

}  // namespace memstep::cli

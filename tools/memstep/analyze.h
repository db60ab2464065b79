// The CLI's side of an analysis: it opens the run's files (the analysis does
// no file I/O), reads the machine's memory for projections, and shows a
// progress bar on stderr when stderr is a terminal (nothing otherwise).

#ifndef MEMSTEP_TOOLS_MEMSTEP_ANALYZE_H_
#define MEMSTEP_TOOLS_MEMSTEP_ANALYZE_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "src/analysis/analysis.h"

namespace memstep::cli {

// A one-line progress bar: "memstep: reading NAME (pass P) [####----] 42%
// 1.2/2.9 GiB", redrawn with '\r' at most every 100 ms (and at the first and
// last byte of each pass), erased by Finish. Inactive (prints nothing) unless
// enabled.
class ProgressBar {
 public:
  ProgressBar(FILE* out, bool enabled) : out_(out), enabled_(enabled) {}
  ~ProgressBar() { Finish(); }
  void Update(const std::string& file, int pass, uint64_t done, uint64_t total);
  void Finish();

 private:
  FILE* out_;
  bool enabled_;
  bool drawn_ = false;
  int pass_ = 0;
  std::string file_;
  uint64_t last_ns_ = 0;
};

// Opens `path` (a run directory or one trace) and analyzes it, with a
// progress bar on stderr when stderr is a terminal.
absl::StatusOr<analysis::Report> AnalyzePath(const std::string& path,
                                             const analysis::Options& options);

}  // namespace memstep::cli

#endif  // MEMSTEP_TOOLS_MEMSTEP_ANALYZE_H_

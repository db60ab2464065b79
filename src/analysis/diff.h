// `memstep diff BASE NEW`: two analyzed runs compared, process by process,
// stage by stage and call site by call site, and the relative --fail-on
// gates (gates.h) evaluated on the pair. A pure function of two Reports:
// the text and JSON writers (src/report/diff_report.h) and an HTML writer
// consume the Diff as it is.
//
// Matching. Processes: by rank (the RANK variable) when a process has one,
// else by order of pid among the processes without a rank ("process 0",
// "process 1", ...): pids differ between runs. Call sites: by process key,
// kind, device and the symbolized stack, frame by frame "function
// file:line" (or "module+0xOFFSET" unsymbolized), never by address, which
// ASLR changes between runs; sites of one run with equal keys are summed.
// Stages: by process key, stage name, kind and device.
//
// Worked example: BASE forward peak 2.00 GiB, NEW 2.30 GiB ->
//   StageDiff{stage "forward", peak_bytes_max {2.00 GiB, 2.30 GiB}}:
//   delta +0.30 GiB, +15 %; a site leaking 64 KiB/step only in NEW ->
//   SiteDiff{status "new", growth {0, 65536}}, and the gate
//   'site_growth > +32KiB/step' fails with value 65536.
//
// Contract: DiffReports and EvaluateDiffGates do no I/O.

#ifndef MEMSTEP_SRC_ANALYSIS_DIFF_H_
#define MEMSTEP_SRC_ANALYSIS_DIFF_H_

#include <cstdint>
#include <string>
#include <vector>

#include "src/analysis/analysis.h"
#include "src/analysis/gates.h"

namespace memstep::analysis {

// One number in both runs. A side that lacks the thing (a site only in NEW)
// reads 0 and has in_base / in_new false.
struct DiffValue {
  double base = 0;
  double next = 0;  // NEW's
  double delta() const { return next - base; }
  // The change in percent of base: +inf from 0 to more, 0 from 0 to 0.
  double percent() const;
};

struct ProcessDiff {
  std::string key;  // "rank 0" or "process 0" (pid order)
  bool in_base = false, in_new = false;
  uint32_t base_pid = 0, new_pid = 0;
  DiffValue steps;
  DiffValue peak_bytes;      // exact heap peak
  DiffValue live_bytes_end;  // exact heap live at the end
  DiffValue rss_peak_bytes;
  DiffValue growth;  // exact heap live bytes, Theil-Sen slope after warm-up (bytes/step)
  std::string base_class, new_class;  // its growth classes ("" when absent)
  DiffValue alloc_bytes_per_step;     // exact, mean over the steps (churn of the whole heap)
  DiffValue alloc_count_per_step;
  DiffValue device_peak_bytes;  // largest resident device peak
};

struct StageDiff {
  std::string process;  // ProcessDiff::key
  std::string stage;
  SiteKind kind = SiteKind::kHost;  // kHost or kDevice
  int32_t device = -1;
  bool in_base = false, in_new = false;
  DiffValue peak_bytes_max;
  DiffValue peak_bytes_median;
};

struct SiteDiff {
  std::string process;  // ProcessDiff::key
  SiteKind kind = SiteKind::kHost;
  int32_t device = -1;
  std::vector<Frame> frames;         // NEW's when it has the site, else BASE's
  std::string status;                // "matched", "new" (only in NEW), "gone" (only in BASE)
  uint64_t base_id = 0, new_id = 0;  // Report::sites ids (the largest when summed); 0 absent
  DiffValue live_bytes_end;
  DiffValue live_bytes_at_peak;
  // Growth rate (bytes/step) of a LEAK or BOUNDED_GROWTH site, else 0.
  DiffValue growth;
  std::string base_class, new_class;  // growth classes, "" when absent
  DiffValue churn_bytes_per_step;     // Site::churn_* (estimated)
  DiffValue churn_count_per_step;
};

struct Diff {
  std::string base_path, new_path;
  std::string base_selection, new_selection;  // Report::selection
  std::vector<ProcessDiff> processes;         // by key
  std::vector<StageDiff> stages;              // by (process, stage, kind, device)
  // Ordered by the size of the change: |growth delta| x 100 steps +
  // |live_bytes_end delta|, largest first.
  std::vector<SiteDiff> sites;
  std::vector<std::string> warnings;  // e.g. "rank 3 only in NEW"
  std::vector<GateResult> gates;      // filled by EvaluateDiffGates
};

// Compares two analyses. Sites whose stacks are unsymbolized in one run and
// symbolized in the other do not match (diff both with the same binaries and
// --no-symbolize setting).
Diff DiffReports(const Report& base, const Report& next);

// Evaluates `gates` for the pair and stores the results in diff->gates:
// absolute gates on NEW (as `memstep report` would), relative ones on the
// change (gates.h). Returns true when any gate failed.
bool EvaluateDiffGates(const std::vector<Gate>& gates, const Report& base, const Report& next,
                       Diff* diff);

// The key a site is matched by: process key, kind, device and its frames.
std::string SiteMatchKey(const std::string& process, const Site& site);

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_DIFF_H_

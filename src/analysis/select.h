// Selection (`--steps A:B`, `--stage NAME`, `--pid N`, `--rank R`) and the
// churn estimates of call sites. docs/analysis.md "Selection" and "Churn"
// document both for users.
//
// Worked example: --steps 10:19 --stage forward on a trace of steps 0..59
//   SelectTrace drops the STEP, STAGE and ALERT records of steps 0..9 (no
//   rows, no peaks, no alerts for them) but keeps their allocations and frees,
//   so the live heap at step 10's begin is what the program really had; it
//   cuts every event after step 19's STEP end (the report ends there: "live
//   at the end" is live at the end of step 19), and drops the allocation
//   records (ALLOC, MMAP, DEV_ALLOC, DEV_FAIL) whose stage is not "forward",
//   with the DEV_FREEs of the dropped DEV_ALLOCs: call sites, their live bytes
//   and churn, and the device totals are then forward's allocations. The exact
//   host counters (step table, heap growth, stage peaks of that stage), the
//   driver's DEV_INFO and the COUNTERs stay whole.
//   A site's cohorts are the steps 10..19 only: what was allocated before
//   step 10 belongs to no step, so a growth fit sees only what the selected
//   steps kept.
//
// Contract: SelectTrace is a pure function of its arguments (no I/O);
// FillChurn only writes Site::churn_*.

#ifndef MEMSTEP_SRC_ANALYSIS_SELECT_H_
#define MEMSTEP_SRC_ANALYSIS_SELECT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "src/analysis/analysis.h"
#include "src/analysis/events.h"
#include "src/analysis/replay.h"
#include "src/reader/reader.h"

namespace memstep::analysis {

// What SelectTrace did to one trace.
struct SelectOutcome {
  bool process_selected = true;  // false: --pid / --rank excluded the process
  size_t steps = 0;              // STEP end records left in the selection
  bool stage_ran = false;        // --stage: a STAGE record of it is left
};

// Applies `options`' selection to `trace` in place (see the worked example).
// Without a selection it changes nothing.
// With `bulk`: the cut and the stage filter, for the bulk events that a
// streaming trace does not hold (events.h).
SelectOutcome SelectTrace(const Options& options, reader::Trace* trace,
                          BulkTransform* bulk = nullptr);

// What the selection left of a whole run, for a clear error when it left
// nothing: no process, no step or a stage that did not run.
class SelectionTally {
 public:
  // Before SelectTrace: what the trace had (pid, rank, steps, stages).
  void Before(const reader::Trace& t);
  void After(const SelectOutcome& outcome);
  // OK, or NotFound naming what the run has instead.
  absl::Status Check(const Options& options, const std::string& path) const;

 private:
  std::vector<std::string> processes_;  // "pid 12 (rank 0)"
  int64_t min_step_ = -1, max_step_ = -1;
  std::vector<std::string> stages_;
  size_t selected_ = 0, steps_ = 0;
  bool stage_ran_ = false;
};

// The selection in words, "" when there is none.
std::string DescribeSelection(const Options& options);

// Steps 10..19 of "--steps 10:19"; "5:" and ":20" leave one end open;
// "7" is 7:7. InvalidArgument on anything else (A > B included).
absl::Status ParseStepRange(const std::string& text, int64_t* first, int64_t* last);

// Fills `site`'s churn_* fields from the replay's step_alloc_* estimates over
// `steps` selected steps; `alloc_bytes` / `alloc_count` are the process's
// exact allocations in those steps; `interval` is the largest T in force
// (the intervals' one-sample term, HtSumInterval).
void FillChurn(const HeapReplay::Accumulator& a, size_t steps, double alloc_bytes,
               double alloc_count, double interval, Site& site);

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_SELECT_H_

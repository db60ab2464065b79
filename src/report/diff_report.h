// Renders an analysis::Diff (`memstep diff BASE NEW`) for people (text) and
// programs (JSON, schema "memstep.diff/1", docs/report-schema.md "Diff").
//
// Contract: pure functions of the Diff and the options (no I/O,
// deterministic); non-finite numbers (a change in percent from 0) are
// written as "+inf %" in text and null in JSON.

#ifndef MEMSTEP_SRC_REPORT_DIFF_REPORT_H_
#define MEMSTEP_SRC_REPORT_DIFF_REPORT_H_

#include <string>

#include "src/analysis/diff.h"
#include "src/report/report.h"

namespace memstep::report {

inline constexpr char kDiffSchema[] = "memstep.diff/1";

// Text: the runs, Gates (when any), Processes, Stage peaks, Call sites
// (options.top, largest change first; options.frames frames), warnings.
std::string FormatDiffText(const analysis::Diff& diff, const ReportOptions& options = {});
// JSON: every process, stage and site unless top / frames > 0.
std::string FormatDiffJson(const analysis::Diff& diff, const ReportOptions& options = {0, 0});

}  // namespace memstep::report

#endif  // MEMSTEP_SRC_REPORT_DIFF_REPORT_H_

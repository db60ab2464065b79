// `memstep diff BASE NEW --format html`: one self-contained page (no network:
// the report's Content-Security-Policy, style sheet inlined) that draws the
// diff's memstep.diff/1 JSON with its inline script (html_diff.js): the gates'
// results at the top, then per process its exact peaks and per-step growth,
// the stage peaks (a table and paired bars), and the call sites matched by
// stack, largest change first.
//
// Contract: a pure function of the Diff and the options (no I/O,
// deterministic). Everything from the traces (paths, stage names, symbols)
// reaches the page as JSON inside <script type="application/json"> with <, >
// and & escaped, and the script inserts it as text only.

#ifndef MEMSTEP_SRC_REPORT_HTML_DIFF_H_
#define MEMSTEP_SRC_REPORT_HTML_DIFF_H_

#include <string>

#include "src/analysis/diff.h"
#include "src/report/report.h"

namespace memstep::report {

// options.top call sites (0: all; the page says how many it left out),
// options.frames frames each (0: all).
std::string FormatDiffHtml(const analysis::Diff& diff, const ReportOptions& options);

}  // namespace memstep::report

#endif  // MEMSTEP_SRC_REPORT_HTML_DIFF_H_

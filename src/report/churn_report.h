// The churn view (`memstep report --view churn`): per call site, the
// allocations made per step and their bytes, estimated from the samples with
// 95 % intervals, and the site's share of all of its process's allocations
// (exact totals from the step counters): the hot allocators worth pooling.
//
// Worked example (one process, 50 steps, T = 512 KiB):
//   pid 77: 50 steps, exact 1,200 allocations and 9.4 MiB per step
//    1. site #3  1,000 allocs/step [950, 1,050]  83.3 % of allocations
//       8.0 MiB/step [7.6 MiB, 8.4 MiB]  85.1 % of bytes
//       make_batch  train.cc:42
//
// Contract: pure functions of the Report (no I/O, deterministic); sites are
// ordered by allocations per step, then bytes per step: host (and mmap) sites
// first, then device sites (every kind, tensor blocks included), whose shares
// are of the process's resident device allocations.

#ifndef MEMSTEP_SRC_REPORT_CHURN_REPORT_H_
#define MEMSTEP_SRC_REPORT_CHURN_REPORT_H_

#include <string>

#include "src/analysis/analysis.h"
#include "src/report/report.h"

namespace memstep::report {

inline constexpr char kChurnSchema[] = "memstep.churn/1";

// Text; options.top sites per process (0: all), options.frames frames.
std::string FormatChurnText(const analysis::Report& report, const ReportOptions& options = {});
// JSON, schema memstep.churn/1 (docs/report-schema.md "Churn view"); top and
// frames apply when > 0.
std::string FormatChurnJson(const analysis::Report& report, const ReportOptions& options = {0, 0});
// FormatChurnJson's bytes streamed to `sink` (WriteJson in report.h); false
// when the sink failed.
bool WriteChurnJson(const analysis::Report& report, const ReportOptions& options,
                    const TextSink& sink);
// CSV (RFC 4180), one row per site, every site; columns in docs/export.md.
std::string FormatChurnCsv(const analysis::Report& report);

}  // namespace memstep::report

#endif  // MEMSTEP_SRC_REPORT_CHURN_REPORT_H_

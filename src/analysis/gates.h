// Offline gates (`memstep report --fail-on EXPR`): conditions on a Report that
// make CI fail. docs/cli.md documents the grammar for users.
//
// Worked example: --fail-on 'growth > 1MiB/step' --fail-on 'peak(forward) >= 2G'
//   ParseGate("growth > 1MiB/step")     -> metric growth, op >, 1048576
//   ParseGate("peak(forward) >= 2G")    -> metric peak, stage forward, op >=, 2^31
//   EvaluateGates: the largest LEAK site grows 1.3 MiB/step -> the first gate
//   FAILS (value 1363148); the forward stage peaked at 1.1 GiB -> passes.
//
// Grammar (whitespace allowed between tokens):
//   gate   := metric op quantity | metric op change
//   metric := growth | live_growth | peak | peak(STAGE) | live_end | rss_peak | leaks
//           | device_peak | device_peak(STAGE) | device_growth | churn | site_growth
//   op     := > | >= | < | <=
//   quantity: a size in the one grammar of src/format/quantity.h ("1MiB",
//   "1.5GB"; K..T and KiB..TiB 1024-based, kB..TB 1000-based)
//   change := (+|-) quantity | [+|-] NUMBER %     (`memstep diff` only)
// "/step" is accepted only after growth metrics (growth, live_growth,
// device_growth, churn, site_growth); `leaks` takes no unit. A gate FAILS
// when "value op threshold" holds.
//
// Relative gates (a change: a sign or a percentage) compare two runs in
// `memstep diff` (diff.h): the value is the metric of NEW minus that of BASE
// ("+64MiB"), or that difference in percent of BASE ("+10%"; from a BASE of
// 0 any increase is +inf %). Worked example: 'peak(forward) > +10%' with
// forward peaking at 2.0 GiB in BASE and 2.3 GiB in NEW: +15 % -> FAILS.
// `site_growth` is relative only: the largest increase of one call site's
// growth rate (sites matched by stack; a site only in NEW grew from 0).
// `churn`: exact heap bytes allocated per step (the mean over the steps). For multi-process runs
// every metric is the largest over the processes (device metrics: over processes and devices).
// `growth` looks at host call sites and the host heap; `device_growth` at device call sites and
// each device's resident bytes; `leaks` counts LEAK call sites of every kind. device_peak is the
// peak of resident device bytes (device + device_vmm + device_pool + device_managed) of one device.
//
// Contract: ParseGate returns InvalidArgument with a message naming the
// problem; EvaluateGates is a pure function of the report.

#ifndef MEMSTEP_SRC_ANALYSIS_GATES_H_
#define MEMSTEP_SRC_ANALYSIS_GATES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/analysis/analysis.h"

namespace memstep::analysis {

struct Gate {
  enum class Op { kGt, kGe, kLt, kLe };
  std::string expression;  // as given
  std::string metric;      // "growth", "live_growth", "peak", "live_end", "rss_peak", "leaks",
                           // "device_peak", "device_growth"
  std::string stage;       // peak(STAGE), device_peak(STAGE); "" otherwise
  Op op = Op::kGt;
  // bytes (bytes/step for growth metrics) or a count; relative gates: the
  // change (may be negative), in percent when `percent`.
  double threshold = 0;
  bool relative = false;  // a change between two runs (memstep diff)
  bool percent = false;   // relative, in percent of BASE
};

absl::StatusOr<Gate> ParseGate(const std::string& text);

// Evaluates every gate on `report` and stores the results in report->gates.
// Returns true when any gate failed. A relative gate fails here (it needs
// two runs); the CLI refuses it before.
bool EvaluateGates(const std::vector<Gate>& gates, Report* report);

// The metric of `g` on one report (r.value, r.detail); false when it does
// not apply (e.g. a stage that never ran). site_growth: 0 (diff.h).
bool GateMetric(const Report& report, const Gate& g, GateResult& r);

// Whether "value op threshold" holds (the gate FAILS then).
bool GateHolds(const Gate& g, double value);

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_GATES_H_

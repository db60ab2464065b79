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
//   gate   := metric op quantity
//   metric := growth | live_growth | peak | peak(STAGE) | live_end | rss_peak | leaks
//           | device_peak | device_peak(STAGE) | device_growth
//   op     := > | >= | < | <=
//   quantity: a size in the one grammar of src/format/quantity.h ("1MiB",
//   "1.5GB"; K..T and KiB..TiB 1024-based, kB..TB 1000-based)
// "/step" is accepted only after growth metrics (growth, live_growth,
// device_growth); `leaks` takes no unit. A gate FAILS when "value op
// threshold" holds. For multi-process runs every metric is the largest over
// the processes (device metrics: over processes and devices). `growth` looks
// at host call sites and the host heap; `device_growth` at device call sites
// and each device's resident bytes; `leaks` counts LEAK call sites of every
// kind. device_peak is the peak of resident device bytes (device +
// device_vmm + device_pool + device_managed) of one device.
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
  double threshold = 0;  // bytes (bytes/step for growth metrics) or a count
};

absl::StatusOr<Gate> ParseGate(const std::string& text);

// Evaluates every gate on `report` and stores the results in report->gates.
// Returns true when any gate failed.
bool EvaluateGates(const std::vector<Gate>& gates, Report* report);

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_GATES_H_

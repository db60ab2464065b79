// `memstep report`: analyzes a run directory or one trace and prints it.

#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/analysis/analysis.h"
#include "src/analysis/gates.h"
#include "src/report/report.h"
#include "tools/memstep/cli.h"

namespace memstep::cli {
namespace {

int UsageError(const std::string& message) {
  std::cerr << "memstep: error: " << message << "\n" << ReportUsage();
  return kExitError;
}

}  // namespace

int ReportMain(const std::vector<std::string>& args) {
  std::string path;
  std::string format = "text";
  int top = -1;
  int frames = -1;
  analysis::Options options;
  std::vector<analysis::Gate> gates;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::cout << ReportUsage();
      return kExitOk;
    }
    if (a == "--no-symbolize") {
      options.symbolize = false;
      continue;
    }
    std::string name = a;
    std::string value;
    bool has_value = false;
    if (size_t eq = a.find('='); absl::StartsWith(a, "--") && eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_value = true;
    }
    if (name == "--format" || name == "--top" || name == "--frames" || name == "--fail-on" ||
        name == "--warmup" || name == "--memory-limit" || name == "--leak-min-rate" ||
        name == "--leak-min-growth") {
      if (!has_value) {
        if (i + 1 >= args.size()) return UsageError(absl::StrCat(a, " needs a value"));
        value = args[++i];
      }
      if (name == "--format") {
        if (value != "text" && value != "json") {
          return UsageError(absl::StrCat("--format must be text or json, not '", value, "'"));
        }
        format = value;
      } else if (name == "--fail-on") {
        absl::StatusOr<analysis::Gate> gate = analysis::ParseGate(value);
        if (!gate.ok()) return UsageError(std::string(gate.status().message()));
        gates.push_back(*std::move(gate));
      } else if (name == "--memory-limit" || name == "--leak-min-rate" ||
                 name == "--leak-min-growth") {
        absl::StatusOr<uint64_t> bytes = ParseBytes(value);
        if (!bytes.ok()) return UsageError(absl::StrCat(name, ": ", bytes.status().message()));
        if (name == "--memory-limit") {
          if (*bytes == 0) return UsageError("--memory-limit must be more than 0");
          options.memory_limit = *bytes;
        } else if (name == "--leak-min-rate") {
          options.growth.min_rate = static_cast<double>(*bytes);
        } else {
          options.growth.min_window_growth = static_cast<double>(*bytes);
        }
      } else {
        absl::StatusOr<uint64_t> n = ParseUint(value);
        if (!n.ok() || *n > 1000000) {
          return UsageError(absl::StrCat(name, ": '", value, "' is not a count"));
        }
        if (name == "--warmup") {
          options.warmup_steps = static_cast<int64_t>(*n);
        } else {
          (name == "--top" ? top : frames) = static_cast<int>(*n);
        }
      }
      continue;
    }
    if (absl::StartsWith(a, "-") && a != "-") {
      return UsageError(absl::StrCat("unknown option '", a, "'"));
    }
    if (!path.empty()) return UsageError(absl::StrCat("unexpected argument '", a, "'"));
    path = a;
  }
  if (path.empty()) return UsageError("missing RUN_DIR or TRACE");

  absl::StatusOr<analysis::Report> report = analysis::AnalyzeRun(path, options);
  if (!report.ok()) {
    std::cerr << "memstep: error: " << report.status().message() << "\n";
    return kExitError;
  }
  for (const std::string& w : report->warnings) std::cerr << "memstep: warning: " << w << "\n";
  const bool gate_failed = analysis::EvaluateGates(gates, &*report);
  report::ReportOptions ro;
  if (format == "json") {
    ro.top = top > 0 ? top : 0;
    ro.frames = frames > 0 ? frames : 0;
    std::cout << report::FormatJson(*report, ro);
  } else {
    if (top >= 0) ro.top = top;
    if (frames >= 0) ro.frames = frames;
    std::cout << report::FormatText(*report, ro);
  }
  std::cout.flush();
  if (!std::cout.good()) return kExitError;
  if (gate_failed) {
    for (const analysis::GateResult& g : report->gates) {
      if (!g.passed) std::cerr << "memstep: gate failed: " << g.expression << " (" << g.detail << ")\n";
    }
    return kExitGateFailed;
  }
  return kExitOk;
}

}  // namespace memstep::cli

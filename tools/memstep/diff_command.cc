// `memstep diff BASE NEW`: analyzes two runs with the same options and
// prints what changed (src/analysis/diff.h), with the relative --fail-on
// gates; exit codes as `memstep report` (cli.h).

#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/analysis/analysis.h"
#include "src/analysis/diff.h"
#include "src/analysis/gates.h"
#include "src/report/diff_report.h"
#include "src/report/html_diff.h"
#include "tools/memstep/analyze.h"
#include "tools/memstep/cli.h"

namespace memstep::cli {
namespace {

int UsageError(const std::string& message) {
  std::cerr << "memstep: error: " << message << "\n" << DiffUsage();
  return kExitError;
}

}  // namespace

int DiffMain(const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  std::string format = "text";
  std::string output;
  std::string pid_text;
  int top = -1;
  int frames = -1;
  analysis::Options options;
  std::vector<analysis::Gate> gates;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::cout << DiffUsage();
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
        name == "-o" || name == "--output" || IsAnalysisOption(name)) {
      if (!has_value) {
        if (i + 1 >= args.size()) return UsageError(absl::StrCat(a, " needs a value"));
        value = args[++i];
      }
      if (name == "--format") {
        if (value != "text" && value != "json" && value != "html") {
          return UsageError(absl::StrCat("--format must be text, json or html, not '", value, "'"));
        }
        format = value;
      } else if (name == "-o" || name == "--output") {
        if (value.empty()) return UsageError(absl::StrCat(name, " needs a file name"));
        output = value;
      } else if (name == "--fail-on") {
        absl::StatusOr<analysis::Gate> gate = analysis::ParseGate(value);
        if (!gate.ok()) return UsageError(std::string(gate.status().message()));
        gates.push_back(*std::move(gate));
      } else if (name == "--top" || name == "--frames") {
        absl::StatusOr<uint64_t> n = ParseUint(value);
        if (!n.ok() || *n > 1000000) {
          return UsageError(absl::StrCat(name, ": '", value, "' is not a count"));
        }
        (name == "--top" ? top : frames) = static_cast<int>(*n);
      } else if (name == "--pid") {
        pid_text = value;  // N or BASE:NEW, applied per run below
        analysis::Options check;
        for (const std::string& part :
             {value.substr(0, value.find(':')), value.find(':') == std::string::npos
                                                    ? std::string("0")
                                                    : value.substr(value.find(':') + 1)}) {
          if (absl::Status st = ApplyAnalysisOption("--pid", part, &check); !st.ok()) {
            return UsageError(absl::StrCat("--pid: '", value, "' is not N or BASE_PID:NEW_PID"));
          }
        }
      } else if (absl::Status st = ApplyAnalysisOption(name, value, &options); !st.ok()) {
        return UsageError(std::string(st.message()));
      }
      continue;
    }
    if (absl::StartsWith(a, "-") && a != "-") {
      return UsageError(absl::StrCat("unknown option '", a, "'"));
    }
    if (paths.size() == 2) return UsageError(absl::StrCat("unexpected argument '", a, "'"));
    paths.push_back(a);
  }
  if (paths.size() != 2) return UsageError("needs two runs: BASE and NEW");

  analysis::Report reports[2];
  for (int k = 0; k < 2; ++k) {
    analysis::Options o = options;
    if (!pid_text.empty()) {
      const size_t colon = pid_text.find(':');
      const std::string part = colon == std::string::npos ? pid_text
                                                          : (k == 0 ? pid_text.substr(0, colon)
                                                                    : pid_text.substr(colon + 1));
      (void)ApplyAnalysisOption("--pid", part, &o);  // checked above
    }
    absl::StatusOr<analysis::Report> r = AnalyzePath(paths[k], o);
    if (!r.ok()) {
      std::cerr << "memstep: error: " << (k == 0 ? "BASE: " : "NEW: ") << r.status().message()
                << "\n";
      return kExitError;
    }
    for (const std::string& w : r->warnings) {
      std::cerr << "memstep: warning: " << (k == 0 ? "BASE: " : "NEW: ") << w << "\n";
    }
    reports[k] = *std::move(r);
  }
  analysis::Diff diff = analysis::DiffReports(reports[0], reports[1]);
  const bool gate_failed = analysis::EvaluateDiffGates(gates, reports[0], reports[1], &diff);
  report::ReportOptions ro;
  std::string data;
  if (format == "json") {
    ro.top = top > 0 ? top : 0;
    ro.frames = frames > 0 ? frames : 0;
    data = report::FormatDiffJson(diff, ro);
  } else if (format == "html") {  // a page: the 100 largest changes unless told
    ro.top = top >= 0 ? top : 100;
    ro.frames = frames >= 0 ? frames : 0;
    data = report::FormatDiffHtml(diff, ro);
  } else {
    if (top >= 0) ro.top = top;
    if (frames >= 0) ro.frames = frames;
    data = report::FormatDiffText(diff, ro);
  }
  if (!WriteOutput(output, data)) return kExitError;
  if (gate_failed) {
    for (const analysis::GateResult& g : diff.gates) {
      if (!g.passed) {
        std::cerr << "memstep: gate failed: " << g.expression << " (" << g.detail << ")\n";
      }
    }
    return kExitGateFailed;
  }
  return kExitOk;
}

}  // namespace memstep::cli

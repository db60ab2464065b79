// `memstep diff BASE NEW`: analyzes two runs with the same options and
// prints what changed (src/analysis/diff.h), with the relative --fail-on
// gates; exit codes as `memstep report` (cli.h).

#include <iostream>

#include "absl/strings/str_cat.h"
#include "src/analysis/analysis.h"
#include "src/analysis/diff.h"
#include "src/analysis/gates.h"
#include "src/report/diff_report.h"
#include "src/report/html_diff.h"
#include "tools/memstep/analyze.h"
#include "tools/memstep/cli.h"
#include "tools/memstep/options.h"

namespace memstep::cli {
namespace {

int UsageError(const std::string& message) {
  std::cerr << "memstep: error: " << message << "\n" << DiffUsage();
  return kExitError;
}

constexpr const char* kFormats[] = {"text", "json", "html"};
constexpr const char* kRunNames[] = {"BASE: ", "NEW: "};

// The command line of `memstep diff`.
struct DiffArgs {
  std::vector<std::string> paths;  // BASE, NEW
  OutputOptions out;
  std::string pid_text;  // --pid N or BASE:NEW, applied per run
};

// --pid of run `k` (0 BASE, 1 NEW): N for both, or BASE:NEW.
std::string PidOf(const std::string& pid_text, int k) {
  const size_t colon = pid_text.find(':');
  if (colon == std::string::npos) return pid_text;
  return k == 0 ? pid_text.substr(0, colon) : pid_text.substr(colon + 1);
}

absl::Status CheckPid(const std::string& value) {
  analysis::Options check;
  const bool two = value.find(':') != std::string::npos;
  for (const std::string& part : {PidOf(value, 0), two ? PidOf(value, 1) : std::string("0")}) {
    if (!ApplyAnalysisOption("--pid", part, &check).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--pid: '", value, "' is not N or BASE_PID:NEW_PID"));
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyDiffArg(const Arg& arg, DiffArgs* d) {
  if (arg.operand()) {
    if (d->paths.size() == 2) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg.value, "'"));
    }
    d->paths.push_back(arg.value);
    return absl::OkStatus();
  }
  if (arg.name == "--pid") {
    d->pid_text = arg.value;
    return CheckPid(arg.value);
  }
  return ApplyOutputOption(arg, kFormats, /*relative_gates=*/true, &d->out);
}

// Analyzes BASE and NEW into `reports`; false (with the error on stderr)
// when one cannot be read.
bool AnalyzeBoth(const DiffArgs& d, analysis::Report reports[2]) {
  for (int k = 0; k < 2; ++k) {
    analysis::Options o = d.out.analysis;
    if (!d.pid_text.empty()) (void)ApplyAnalysisOption("--pid", PidOf(d.pid_text, k), &o);
    absl::StatusOr<analysis::Report> r = AnalyzePath(d.paths[k], o);
    if (!r.ok()) {
      std::cerr << "memstep: error: " << kRunNames[k] << r.status().message() << "\n";
      return false;
    }
    for (const std::string& w : r->warnings) {
      std::cerr << "memstep: warning: " << kRunNames[k] << w << "\n";
    }
    reports[k] = *std::move(r);
  }
  return true;
}

}  // namespace

int DiffMain(const std::vector<std::string>& args) {
  DiffArgs d;
  absl::StatusOr<ParsedArgs> parsed =
      ParseArgs(args, OutputFlags(), [&d](const Arg& arg) { return ApplyDiffArg(arg, &d); });
  if (!parsed.ok()) return UsageError(std::string(parsed.status().message()));
  if (parsed->help) {
    std::cout << DiffUsage();
    return kExitOk;
  }
  if (d.paths.size() != 2) return UsageError("needs two runs: BASE and NEW");

  analysis::Report reports[2];
  if (!AnalyzeBoth(d, reports)) return kExitError;
  analysis::Diff diff = analysis::DiffReports(reports[0], reports[1]);
  const bool gate_failed = analysis::EvaluateDiffGates(d.out.gates, reports[0], reports[1], &diff);
  const std::string& format = d.out.format;
  std::string data;
  if (format == "html") {  // a page: the 100 largest changes unless told
    report::ReportOptions ro;
    ro.top = d.out.top >= 0 ? d.out.top : 100;
    ro.frames = d.out.frames >= 0 ? d.out.frames : 0;
    data = report::FormatDiffHtml(diff, ro);
  } else {
    const bool json = format == "json";
    const report::ReportOptions ro = ResolveReportOptions(json, d.out.top, d.out.frames);
    data = json ? report::FormatDiffJson(diff, ro) : report::FormatDiffText(diff, ro);
  }
  return FinishReport(d.out.output, data, gate_failed, diff.gates);
}

}  // namespace memstep::cli

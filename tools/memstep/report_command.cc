// `memstep report`: analyzes a run directory or one trace and prints it.

#include <cstdint>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "src/analysis/analysis.h"
#include "src/analysis/gates.h"
#include "src/report/churn_report.h"
#include "src/report/formats.h"
#include "src/report/report.h"
#include "tools/memstep/analyze.h"
#include "tools/memstep/cli.h"
#include "tools/memstep/options.h"

namespace memstep::cli {
namespace {

int UsageError(const std::string& message) {
  std::cerr << "memstep: error: " << message << "\n" << ReportUsage();
  return kExitError;
}

constexpr const char* kFormats[] = {"text", "json", "folded", "csv", "perfetto", "pprof", "html"};

// The command line of `memstep report`.
struct ReportArgs {
  std::string path;  // RUN_DIR or TRACE
  OutputOptions out;
  std::string view_text;    // --view as given
  bool churn = false;       // --view churn
  report::FoldedView view;  // --view of --format folded
};

absl::Status ApplyReportArg(const Arg& arg, ReportArgs* r) {
  if (arg.operand()) {
    if (!r->path.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg.value, "'"));
    }
    r->path = arg.value;
    return absl::OkStatus();
  }
  if (arg.name == "--view") {
    r->view_text = arg.value;
    return absl::OkStatus();
  }
  return ApplyOutputOption(arg, kFormats, /*relative_gates=*/false, &r->out);
}

// --view against --format, then what the chosen export needs of the
// analysis beyond the text report.
absl::Status ResolveView(ReportArgs* r) {
  const std::string& format = r->out.format;
  r->churn = r->view_text == "churn";
  if (r->churn) {
    if (format != "text" && format != "json" && format != "csv") {
      return absl::InvalidArgumentError("--view churn applies to --format text, json and csv");
    }
  } else if (!r->view_text.empty()) {
    if (format != "folded") {
      return absl::InvalidArgumentError(
          "--view applies to --format folded only (--view churn: to text, json and csv)");
    }
    absl::StatusOr<report::FoldedView> v = report::ParseFoldedView(r->view_text);
    if (!v.ok()) return v.status();
    r->view = *v;
  }
  analysis::Options& options = r->out.analysis;
  if (format == "perfetto") options.timeline = true;
  if (format == "pprof") options.site_slices = true;
  if (format == "folded" && r->view.kind == report::FoldedView::Kind::kStage) {
    options.top_peak_sites = SIZE_MAX;  // every site live at the stage's peak
  }
  return absl::OkStatus();
}

report::ReportOptions ReportOptionsOf(const ReportArgs& r) {
  return ResolveReportOptions(r.out.format == "json", r.out.top, r.out.frames);
}

// Whether the chosen format is a JSON document, written to the output as it
// is made (Stream) rather than built whole (Render): its size grows with the
// steps and sites (issue 11 "Scale").
bool Streams(const ReportArgs& r) { return r.out.format == "json" || r.out.format == "perfetto"; }

// The report in a streamed format and view, to `sink`.
void Stream(const analysis::Report& report, const ReportArgs& r, const report::TextSink& sink) {
  if (r.out.format == "perfetto") {
    report::WritePerfetto(report, sink);
  } else if (r.churn) {
    report::WriteChurnJson(report, ReportOptionsOf(r), sink);
  } else {
    report::WriteJson(report, ReportOptionsOf(r), sink);
  }
}

// The report in any other format and view, whole.
absl::StatusOr<std::string> Render(const analysis::Report& report, const ReportArgs& r) {
  const std::string& format = r.out.format;
  const report::ReportOptions ro = ReportOptionsOf(r);
  if (r.churn) {
    if (format == "csv") return report::FormatChurnCsv(report);
    return report::FormatChurnText(report, ro);
  }
  if (format == "folded") return report::FormatFolded(report, r.view);
  if (format == "csv") return report::FormatCsv(report);
  if (format == "pprof") return report::FormatPprof(report);
  if (format == "html") return report::FormatHtml(report);
  return report::FormatText(report, ro);
}

}  // namespace

int ReportMain(const std::vector<std::string>& args) {
  ReportArgs r;
  FlagSet flags = OutputFlags();
  flags.valued.push_back("--view");
  absl::StatusOr<ParsedArgs> parsed =
      ParseArgs(args, flags, [&r](const Arg& arg) { return ApplyReportArg(arg, &r); });
  if (!parsed.ok()) return UsageError(std::string(parsed.status().message()));
  if (parsed->help) {
    std::cout << ReportUsage();
    return kExitOk;
  }
  if (r.path.empty()) return UsageError("missing RUN_DIR or TRACE");
  if (absl::Status st = ResolveView(&r); !st.ok()) return UsageError(std::string(st.message()));

  absl::StatusOr<analysis::Report> report = AnalyzePath(r.path, r.out.analysis);
  if (!report.ok()) {
    std::cerr << "memstep: error: " << report.status().message() << "\n";
    return kExitError;
  }
  for (const std::string& w : report->warnings) std::cerr << "memstep: warning: " << w << "\n";
  const bool gate_failed = analysis::EvaluateGates(r.out.gates, &*report);
  if (Streams(r)) {
    return FinishReport(
        r.out.output, [&](const report::TextSink& sink) { Stream(*report, r, sink); }, gate_failed,
        report->gates);
  }
  absl::StatusOr<std::string> data = Render(*report, r);
  if (!data.ok()) {
    std::cerr << "memstep: error: " << data.status().message() << "\n";
    return kExitError;
  }
  return FinishReport(r.out.output, *data, gate_failed, report->gates);
}

}  // namespace memstep::cli

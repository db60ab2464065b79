// `memstep report`: analyzes a run directory or one trace and prints it.

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/analysis/analysis.h"
#include "src/analysis/gates.h"
#include "src/report/churn_report.h"
#include "src/report/formats.h"
#include "src/report/report.h"
#include "tools/memstep/analyze.h"
#include "tools/memstep/cli.h"

namespace memstep::cli {
namespace {

int UsageError(const std::string& message) {
  std::cerr << "memstep: error: " << message << "\n" << ReportUsage();
  return kExitError;
}

constexpr const char* kFormats[] = {"text", "json", "folded", "csv", "perfetto", "pprof", "html"};

}  // namespace

int ReportMain(const std::vector<std::string>& args) {
  std::string path;
  std::string format = "text";
  std::string output;
  std::string view_text;
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
        name == "--leak-min-growth" || name == "--view" || name == "-o" || name == "--output" ||
        IsAnalysisOption(name)) {
      if (!has_value) {
        if (i + 1 >= args.size()) return UsageError(absl::StrCat(a, " needs a value"));
        value = args[++i];
      }
      if (name == "--steps" || name == "--stage" || name == "--pid" || name == "--rank") {
        if (absl::Status st = ApplyAnalysisOption(name, value, &options); !st.ok()) {
          return UsageError(std::string(st.message()));
        }
      } else if (name == "--format") {
        if (std::find(std::begin(kFormats), std::end(kFormats), value) == std::end(kFormats)) {
          return UsageError(absl::StrCat(
              "--format must be text, json, folded, csv, perfetto, pprof or html, not '", value,
              "'"));
        }
        format = value;
      } else if (name == "--view") {
        view_text = value;
      } else if (name == "-o" || name == "--output") {
        if (value.empty()) return UsageError(absl::StrCat(name, " needs a file name"));
        output = value;
      } else if (name == "--fail-on") {
        absl::StatusOr<analysis::Gate> gate = analysis::ParseGate(value);
        if (!gate.ok()) return UsageError(std::string(gate.status().message()));
        if (gate->relative) {
          return UsageError(absl::StrCat("--fail-on '", value,
                                         "': a change (+N, -N, N%) compares two runs: use "
                                         "memstep diff BASE NEW --fail-on ..."));
        }
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
  report::FoldedView view;
  const bool churn = view_text == "churn";
  if (churn) {
    if (format != "text" && format != "json" && format != "csv") {
      return UsageError("--view churn applies to --format text, json and csv");
    }
  } else if (!view_text.empty()) {
    if (format != "folded")
      return UsageError(
          "--view applies to --format folded only (--view churn: to text, json and csv)");
    absl::StatusOr<report::FoldedView> v = report::ParseFoldedView(view_text);
    if (!v.ok()) return UsageError(std::string(v.status().message()));
    view = *v;
  }
  // The exports that need more of the analysis than the text report.
  if (format == "perfetto") options.timeline = true;
  if (format == "pprof") options.site_slices = true;
  if (format == "folded" && view.kind == report::FoldedView::Kind::kStage) {
    options.top_peak_sites = SIZE_MAX;  // every site live at the stage's peak
  }

  absl::StatusOr<analysis::Report> report = AnalyzePath(path, options);
  if (!report.ok()) {
    std::cerr << "memstep: error: " << report.status().message() << "\n";
    return kExitError;
  }
  for (const std::string& w : report->warnings) std::cerr << "memstep: warning: " << w << "\n";
  const bool gate_failed = analysis::EvaluateGates(gates, &*report);
  report::ReportOptions ro;
  std::string data;
  if (churn) {
    if (format == "csv") {
      data = report::FormatChurnCsv(*report);
    } else {
      ro.top = top >= 0 ? top : (format == "json" ? 0 : ro.top);
      ro.frames = frames >= 0 ? frames : (format == "json" ? 0 : ro.frames);
      data = format == "json" ? report::FormatChurnJson(*report, ro)
                              : report::FormatChurnText(*report, ro);
    }
  } else if (format == "json") {
    ro.top = top > 0 ? top : 0;
    ro.frames = frames > 0 ? frames : 0;
    data = report::FormatJson(*report, ro);
  } else if (format == "folded") {
    absl::StatusOr<std::string> folded = report::FormatFolded(*report, view);
    if (!folded.ok()) {
      std::cerr << "memstep: error: " << folded.status().message() << "\n";
      return kExitError;
    }
    data = *std::move(folded);
  } else if (format == "csv") {
    data = report::FormatCsv(*report);
  } else if (format == "perfetto") {
    data = report::FormatPerfetto(*report);
  } else if (format == "pprof") {
    data = report::FormatPprof(*report);
  } else if (format == "html") {
    data = report::FormatHtml(*report);
  } else {
    if (top >= 0) ro.top = top;
    if (frames >= 0) ro.frames = frames;
    data = report::FormatText(*report, ro);
  }
  if (!WriteOutput(output, data)) return kExitError;
  if (gate_failed) {
    for (const analysis::GateResult& g : report->gates) {
      if (!g.passed) {
        std::cerr << "memstep: gate failed: " << g.expression << " (" << g.detail << ")\n";
      }
    }
    return kExitGateFailed;
  }
  return kExitOk;
}

}  // namespace memstep::cli

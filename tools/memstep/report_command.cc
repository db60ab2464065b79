// `memstep report`: analyzes a run directory or one trace and prints it.

#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/analysis/analysis.h"
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
    if (name == "--format" || name == "--top" || name == "--frames") {
      if (!has_value) {
        if (i + 1 >= args.size()) return UsageError(absl::StrCat(a, " needs a value"));
        value = args[++i];
      }
      if (name == "--format") {
        if (value != "text" && value != "json") {
          return UsageError(absl::StrCat("--format must be text or json, not '", value, "'"));
        }
        format = value;
      } else {
        absl::StatusOr<uint64_t> n = ParseUint(value);
        if (!n.ok() || *n > 1000000) {
          return UsageError(absl::StrCat(name, ": '", value, "' is not a count"));
        }
        (name == "--top" ? top : frames) = static_cast<int>(*n);
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
  return std::cout.good() ? kExitOk : kExitError;
}

}  // namespace memstep::cli

// The option parser of the memstep subcommands (options.h).

#include "tools/memstep/options.h"

#include <algorithm>
#include <iostream>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/memstep/cli.h"

namespace memstep::cli {
namespace {

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool IsOperand(const std::string& a) { return a == "-" || !absl::StartsWith(a, "-"); }

// "text or json", "text, json, folded or csv".
std::string OneOf(absl::Span<const char* const> values) {
  if (values.size() < 2) return absl::StrJoin(values, "");
  return absl::StrCat(absl::StrJoin(values.first(values.size() - 1), ", "), " or ", values.back());
}

absl::Status InvalidArgument(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

absl::Status ApplyGate(const std::string& value, bool relative_gates,
                       std::vector<analysis::Gate>* gates) {
  absl::StatusOr<analysis::Gate> gate = analysis::ParseGate(value);
  if (!gate.ok()) return InvalidArgument(std::string(gate.status().message()));
  if (gate->relative && !relative_gates) {
    return InvalidArgument(absl::StrCat("--fail-on '", value,
                                        "': a change (+N, -N, N%) compares two runs: use "
                                        "memstep diff BASE NEW --fail-on ..."));
  }
  gates->push_back(*std::move(gate));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& args, const FlagSet& flags,
                                     const std::function<absl::Status(const Arg&)>& handle) {
  ParsedArgs parsed;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      parsed.help = true;
      return parsed;
    }
    if (flags.stop_at_operand && a == "--") {
      ++i;
      break;
    }
    Arg arg;
    if (Contains(flags.switches, a)) {
      arg.name = a;
    } else if (IsOperand(a)) {
      if (flags.stop_at_operand) break;
      arg.value = a;
    } else {
      const size_t eq = absl::StartsWith(a, "--") ? a.find('=') : std::string::npos;
      arg.name = a.substr(0, eq);
      if (!Contains(flags.valued, arg.name)) {
        return InvalidArgument(absl::StrCat("unknown option '", a, "'"));
      }
      if (eq != std::string::npos) {
        arg.value = a.substr(eq + 1);
      } else if (i + 1 < args.size()) {
        arg.value = args[++i];
      } else {
        return InvalidArgument(absl::StrCat(a, " needs a value"));
      }
    }
    if (absl::Status st = handle(arg); !st.ok()) return st;
  }
  parsed.rest = i;
  return parsed;
}

FlagSet OutputFlags() {
  FlagSet flags;
  flags.switches = {"--no-symbolize"};
  flags.valued = {"--format", "--top", "--frames", "--fail-on", "-o", "--output"};
  flags.valued.insert(flags.valued.end(), std::begin(kAnalysisOptions), std::end(kAnalysisOptions));
  return flags;
}

absl::Status ApplyOutputOption(const Arg& arg, absl::Span<const char* const> formats,
                               bool relative_gates, OutputOptions* o) {
  const std::string& name = arg.name;
  const std::string& value = arg.value;
  if (name == "--no-symbolize") {
    o->analysis.symbolize = false;
  } else if (name == "--format") {
    if (std::find(formats.begin(), formats.end(), value) == formats.end()) {
      return InvalidArgument(
          absl::StrCat("--format must be ", OneOf(formats), ", not '", value, "'"));
    }
    o->format = value;
  } else if (name == "-o" || name == "--output") {
    if (value.empty()) return InvalidArgument(absl::StrCat(name, " needs a file name"));
    o->output = value;
  } else if (name == "--fail-on") {
    return ApplyGate(value, relative_gates, &o->gates);
  } else if (name == "--top" || name == "--frames") {
    absl::StatusOr<uint64_t> n = ParseUint(value);
    if (!n.ok() || *n > 1000000) {
      return InvalidArgument(absl::StrCat(name, ": '", value, "' is not a count"));
    }
    (name == "--top" ? o->top : o->frames) = static_cast<int>(*n);
  } else if (IsAnalysisOption(name)) {
    return ApplyAnalysisOption(name, value, &o->analysis);
  } else {
    return absl::NotFoundError(name);
  }
  return absl::OkStatus();
}

report::ReportOptions ResolveReportOptions(bool json, int top, int frames) {
  report::ReportOptions ro;
  if (json) {
    ro.top = std::max(top, 0);
    ro.frames = std::max(frames, 0);
  } else {
    if (top >= 0) ro.top = top;
    if (frames >= 0) ro.frames = frames;
  }
  return ro;
}

int FinishReport(const std::string& output, const std::string& data, bool gate_failed,
                 const std::vector<analysis::GateResult>& gates) {
  return FinishReport(
      output, [&data](const report::TextSink& sink) { sink(data); }, gate_failed, gates);
}

int FinishReport(const std::string& output,
                 const std::function<void(const report::TextSink&)>& produce, bool gate_failed,
                 const std::vector<analysis::GateResult>& gates) {
  if (!StreamOutput(output, produce)) return kExitError;
  if (!gate_failed) return kExitOk;
  for (const analysis::GateResult& g : gates) {
    if (!g.passed) {
      std::cerr << "memstep: gate failed: " << g.expression << " (" << g.detail << ")\n";
    }
  }
  return kExitGateFailed;
}

}  // namespace memstep::cli

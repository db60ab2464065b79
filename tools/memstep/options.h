// The one option parser of the memstep subcommands, and the options that
// `report` and `diff` share.
//
// Grammar (docs/cli.md): an option takes its value as the next argument or
// after `=` (`--out DIR`, `--out=DIR`; `-o FILE` only the former); a switch
// takes none and matches only as written (`--once`, not `--once=1`);
// `-h`/`--help` stops the parse. Any other argument starting with `-` (but
// `-` alone) is an unknown option. The rest are operands, handed to the
// handler in order, or, for a command that runs another (`memstep run`),
// the start of that command: parsing stops at the first operand and after
// `--`.
//
// Errors are InvalidArgument statuses whose message is the one line the
// subcommand prints after "memstep: error: " (with its usage text, exit 1):
// "unknown option '--bogus'", "--top needs a value", or the handler's own.

#ifndef MEMSTEP_TOOLS_MEMSTEP_OPTIONS_H_
#define MEMSTEP_TOOLS_MEMSTEP_OPTIONS_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/analysis/analysis.h"
#include "src/analysis/gates.h"
#include "src/report/report.h"

namespace memstep::cli {

// The flags one subcommand knows.
struct FlagSet {
  std::vector<std::string> switches;  // no value: "--once"
  std::vector<std::string> valued;    // one value: "--top N", "--top=N"
  // `run`: the first operand (or whatever follows "--") starts a command.
  bool stop_at_operand = false;
};

// One parsed argument: an option (`name` as written before any '=', `value`
// "" for a switch) or an operand (`name` empty, `value` the argument).
struct Arg {
  std::string name;
  std::string value;
  bool operand() const { return name.empty(); }
};

struct ParsedArgs {
  bool help = false;  // -h or --help: print the usage, exit 0
  size_t rest = 0;    // stop_at_operand: index of the command's first argument
};

// Walks `args`, calling `handle` for each option and operand in order; the
// first error (the parser's or the handler's) ends the walk.
absl::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& args, const FlagSet& flags,
                                     const std::function<absl::Status(const Arg&)>& handle);

// What `report` and `diff` share: --format, -o/--output, --top, --frames,
// --fail-on, --no-symbolize and the analysis options of cli.h
// (IsAnalysisOption).
struct OutputOptions {
  std::string format = "text";
  std::string output;  // "" = stdout
  int top = -1;        // -1: not given
  int frames = -1;
  std::vector<analysis::Gate> gates;
  analysis::Options analysis;
};

// The shared flags, to extend with a subcommand's own.
FlagSet OutputFlags();

// Applies one shared option. `formats`: the accepted --format values;
// `relative_gates`: whether --fail-on takes a change (+N, -N, N%), which
// only `diff` can evaluate. NotFound when `arg` is none of the shared ones.
absl::Status ApplyOutputOption(const Arg& arg, absl::Span<const char* const> formats,
                               bool relative_gates, OutputOptions* o);

// --top and --frames over the report's defaults: a JSON output has every
// site and frame unless they are given (0 = all), text the defaults.
report::ReportOptions ResolveReportOptions(bool json, int top, int frames);

// Writes `data` to `output` ("" = stdout; StreamOutput), names each failed gate on stderr and
// returns the exit status: kExitError when the write failed, kExitGateFailed when a gate failed,
// kExitOk otherwise.
int FinishReport(const std::string& output, const std::string& data, bool gate_failed,
                 const std::vector<analysis::GateResult>& gates);
// The same with the output streamed (StreamOutput): `produce` passes the
// report to its sink piece by piece.
int FinishReport(const std::string& output,
                 const std::function<void(const report::TextSink&)>& produce, bool gate_failed,
                 const std::vector<analysis::GateResult>& gates);

}  // namespace memstep::cli

#endif  // MEMSTEP_TOOLS_MEMSTEP_OPTIONS_H_

// The `memstep` command line: subcommands and their helpers.
//
// Contract: each subcommand takes its arguments (after the subcommand name)
// and returns the process exit status: 0 success, 1 usage or input error
// (message "memstep: error: ..." on stderr), for `run` the child's status
// (128 + signal if it was killed, 127 if the command was not found); for
// `report` and `diff`, 3 when any --fail-on gate failed (the report is
// still printed).

#ifndef MEMSTEP_TOOLS_MEMSTEP_CLI_H_
#define MEMSTEP_TOOLS_MEMSTEP_CLI_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/analysis/analysis.h"
#include "src/report/report.h"

namespace memstep::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitGateFailed = 3;
inline constexpr int kExitNotFound = 127;

// A size in the one grammar of src/format/quantity.h -> bytes: "4096",
// "512K", "512KiB", "1.5MiB", "2GB" (K..T, KiB..TiB 1024-based; kB..TB
// 1000-based). Rejects empty, negative and overflowing input, with the
// accepted forms in the message.
absl::StatusOr<uint64_t> ParseBytes(const std::string& text);
// A percentage 0..100 ("10", "10%", "2.5%"), in percent.
absl::StatusOr<double> ParsePercent(const std::string& text);
// A non-negative decimal integer.
absl::StatusOr<uint64_t> ParseUint(const std::string& text);

// Options of the analysis that `report` and `diff` share: --steps, --stage,
// --pid, --rank (the selection), --warmup, --memory-limit, --leak-min-rate,
// --leak-min-growth. IsAnalysisOption: whether `name` is one (each takes a
// value); ApplyAnalysisOption sets it, InvalidArgument naming the option
// otherwise.
inline constexpr const char* kAnalysisOptions[] = {
    "--steps",  "--stage",        "--pid",           "--rank",
    "--warmup", "--memory-limit", "--leak-min-rate", "--leak-min-growth"};
bool IsAnalysisOption(const std::string& name);
absl::Status ApplyAnalysisOption(const std::string& name, const std::string& value,
                                 analysis::Options* options);

// Writes to `path` ("" = stdout) what `produce` passes to its sink, piece by
// piece as it comes (the JSON documents: never whole in memory; a whole
// string: one piece). The file is created (truncated) before `produce` runs
// and written in place: false with "cannot create PATH: ..." when it cannot be
// opened (`produce` does not run), "cannot write PATH: ..." (stdout: "cannot
// write the report to stdout") when a write or the close fails; after a
// failed write the sink returns false and drops the rest. A file cut short by
// a failure is left as it is, but never reported as written.
bool StreamOutput(const std::string& path,
                  const std::function<void(const report::TextSink&)>& produce);

// Install layout, relative to the directory of the memstep executable:
// libmemstep.so's directory ("../lib") and the Python helper's
// ("../share/memstep/python"), from GNUInstallDirs at configure time.
extern const char kBinToLib[];
extern const char kBinToPython[];

// Locates libmemstep.so: $MEMSTEP_LIB, else relative to `exe_dir`:
// <kBinToLib>/libmemstep.so (installed), ../lib/libmemstep.so (build tree),
// ./libmemstep.so, ../lib/memstep/libmemstep.so.
absl::StatusOr<std::string> FindPreloadLibrary(const std::string& exe_dir);

// Directory of the running executable (/proc/self/exe), "" if unknown.
std::string ExeDir();

std::string MainUsage();
std::string RunUsage();
std::string ReportUsage();
std::string TopUsage();
std::string DiffUsage();

int RunMain(const std::vector<std::string>& args);
int ReportMain(const std::vector<std::string>& args);
int DiffMain(const std::vector<std::string>& args);
// `memstep top RUN_DIR`: 0, or 1 on a usage error or an unreadable RUN_DIR.
int TopMain(const std::vector<std::string>& args);

}  // namespace memstep::cli

#endif  // MEMSTEP_TOOLS_MEMSTEP_CLI_H_

// The live views of a run directory (src/analysis/live_model.h): the frames
// of `memstep top` and the Prometheus text file of `memstep run
// --metrics-file`. Internal to tools/memstep.

#ifndef MEMSTEP_TOOLS_MEMSTEP_LIVE_VIEW_H_
#define MEMSTEP_TOOLS_MEMSTEP_LIVE_VIEW_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "src/analysis/live_model.h"

namespace memstep::cli {

// One frame of `memstep top`: lines without newlines, each at most `width`
// columns (0: no limit), at most `height` lines (0: no limit; the process
// list is cut first, with a "... N more" line). `clock` is the time shown.
std::vector<std::string> RenderFrame(const analysis::LiveModel& model, size_t width, size_t height,
                                     const std::string& clock);

// The model in the Prometheus text exposition format 0.0.4: every family
// with HELP and TYPE lines, labels host, rank, pid (and stage, rule),
// values escaped per the format.
std::string FormatPrometheus(const analysis::LiveModel& model);

// A label value escaped for the exposition format: \ " and newline.
std::string EscapeLabelValue(const std::string& value);

// Writes `content` to PATH.tmp in PATH's directory and renames it onto PATH,
// so that readers see the old file or the new one, never a partial one.
absl::Status WriteFileAtomically(const std::string& path, const std::string& content);

// Waits for `child` (storing its wait status in *status). With a
// `metrics_file`, meanwhile tails `run_dir` and rewrites the file whenever a
// process completes a step, and once after the child ended; a file that
// cannot be written is one warning on stderr, never an error. Returns 0 or
// the errno of a failed waitpid.
int WaitForChild(pid_t child, const std::string& run_dir, const std::string& metrics_file,
                 int* status);

}  // namespace memstep::cli

#endif  // MEMSTEP_TOOLS_MEMSTEP_LIVE_VIEW_H_

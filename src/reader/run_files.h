// The files of a run, opened for the analysis: the CLI (and tests) open a
// run directory or one trace file here and hand the mapped bytes to
// analysis::AnalyzeRun, which does no file I/O itself.
//
// Contract: every trace file is mapped read-only for the lifetime of the
// RunFiles; errors (missing path, no traces, a file that cannot be mapped)
// come back as a Status with a message fit for the user. Empty *.trace files
// in a directory (a process that ended before writing its header) are
// skipped with a warning; an empty file named directly is an error.

#ifndef MEMSTEP_SRC_READER_RUN_FILES_H_
#define MEMSTEP_SRC_READER_RUN_FILES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace memstep::reader {

struct TraceFile {
  std::string path;
  const uint8_t* data = nullptr;  // `size` bytes
  size_t size = 0;
  // `data` is a read-only mapping of the file (RunFiles::Open): a reader may
  // drop its pages behind it (reader::StreamOptions::release_mapped_pages).
  bool mapped = false;
};

// Maps the trace file `path` read-only into `out` (`mapped` set); a missing,
// empty or non-regular file is an error naming `path`. The caller unmaps
// (munmap(out->data, out->size)); RunFiles does it for its own.
absl::Status MapTraceFile(const std::string& path, TraceFile* out);

class RunFiles {
 public:
  // `path`: a run directory (every *.trace file in it, sorted by name) or
  // one trace file.
  static absl::StatusOr<RunFiles> Open(const std::string& path);

  RunFiles() = default;
  RunFiles(RunFiles&& other) noexcept;
  RunFiles& operator=(RunFiles&& other) noexcept;
  RunFiles(const RunFiles&) = delete;
  RunFiles& operator=(const RunFiles&) = delete;
  ~RunFiles();

  const std::string& path() const { return path_; }
  const std::vector<TraceFile>& traces() const { return traces_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  uint64_t total_bytes() const;

 private:
  void Unmap();
  std::string path_;
  std::vector<TraceFile> traces_;
  std::vector<std::string> warnings_;
};

// MemTotal of this machine from /proc/meminfo in bytes, 0 if unknown.
uint64_t MachineMemTotal();

}  // namespace memstep::reader

#endif  // MEMSTEP_SRC_READER_RUN_FILES_H_

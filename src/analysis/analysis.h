// Offline analysis of memstep traces: replays the sampled live heap and the
// exact step/stage counters of every process in a run, and produces the data
// behind `memstep report` (text and JSON) and the end-to-end tests.
//
// Contract shared by src/analysis (implements it), src/report, tools/ and
// tests/e2e (use it). Extend by adding fields; do not rename.

#ifndef MEMSTEP_SRC_ANALYSIS_ANALYSIS_H_
#define MEMSTEP_SRC_ANALYSIS_ANALYSIS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace memstep::analysis {

// One symbolized frame, innermost first. Inlined frames come before the frame
// of the function they were inlined into, with inlined = true.
struct Frame {
  uint64_t ip = 0;           // runtime return address as recorded
  std::string function;      // demangled; "??" when unknown
  std::string file;          // source file, "" when unknown
  int line = 0;              // 0 when unknown
  std::string module;        // path of the ELF object, "" when unknown
  bool inlined = false;
  uint64_t module_offset = 0;  // ip - load_bias (ELF virtual address), 0 when unknown
};

// A call site: one deduplicated stack (allocation frames inside memstep and
// the allocator are not part of it).
struct Site {
  uint64_t id = 0;           // stable within one report
  std::string kind;          // "host" (malloc family) or "mmap"
  uint32_t pid = 0;          // process whose trace recorded it (sites are per process)
  uint64_t stack_id = 0;     // the trace's stack id (0: no stack)
  std::vector<Frame> frames;
  uint64_t samples = 0;             // sampled allocations recorded for this site
  double alloc_bytes = 0;           // estimated bytes allocated over the run
  double alloc_count = 0;           // estimated allocations over the run
  double live_bytes_end = 0;        // estimated bytes still live at the end of the trace
  double live_count_end = 0;
  double live_bytes_at_peak = 0;    // estimated live bytes at the run's host peak
  std::vector<double> live_bytes_by_step;  // estimated live at each step end (index as Report::steps)
};

// One training step (of one process; multi-process runs report per process).
struct StepRow {
  uint64_t step = 0;
  uint32_t pid = 0;
  uint64_t live_bytes_end = 0;      // exact heap live bytes at step end
  uint64_t peak_bytes = 0;          // exact max heap live bytes within the step
  uint64_t mmap_live_bytes_end = 0;
  uint64_t rss_bytes_end = 0;
  uint64_t alloc_bytes = 0;         // allocated during the step (exact)
  uint64_t alloc_count = 0;
  uint64_t free_bytes = 0;
  uint64_t free_count = 0;
  double duration_s = 0;
  std::map<std::string, uint64_t> stage_peaks;  // stage name -> exact peak live bytes
};

struct ProcessSummary {
  uint32_t pid = 0;
  uint32_t ppid = 0;
  bool fork_child = false;
  std::string trace_path;
  std::string cmdline;              // argv joined with spaces
  std::string hostname;
  std::string rank;                 // RANK env or ""
  uint64_t alloc_bytes = 0;         // exact totals over the trace
  uint64_t alloc_count = 0;
  uint64_t free_bytes = 0;
  uint64_t free_count = 0;
  uint64_t live_bytes_end = 0;
  uint64_t peak_bytes = 0;          // exact max heap live bytes seen at any boundary
  uint64_t mmap_live_bytes_end = 0;
  uint64_t samples = 0;
  uint64_t lost_records = 0;
  double duration_s = 0;
  bool clean_exit = false;          // a trailer was found
  bool truncated = false;           // the file ended inside a chunk or had a bad chunk
  uint64_t truncated_at_offset = 0; // offset of the first unreadable byte
  std::vector<std::string> notices; // profiler notices recorded in the trace
  uint64_t lost_bytes = 0;
  uint64_t unknown_refs = 0;        // records referring to undefined ids
  uint64_t rss_bytes_end = 0;
  double sample_interval = 0;       // header's mean sampling interval T (bytes)
  double est_live_bytes_end = 0;    // sampled estimate of the live heap at the end
  double est_peak_bytes = 0;        // sampled estimate of the live heap at its peak
  double est_peak_time_s = 0;       // when that peak happened (since trace start)
};

struct Report {
  std::string path;                 // as given to AnalyzeRun
  std::vector<ProcessSummary> processes;
  std::vector<StepRow> steps;       // ordered by (pid, step)
  std::vector<Site> sites;          // ordered by live_bytes_end, largest first
  std::vector<std::string> warnings;  // e.g. "trace X truncated at offset N"
};

struct Options {
  bool symbolize = true;
};

// `path` is a run directory (every *.trace file in it) or one trace file.
// Errors (missing path, no traces, a file that is not a memstep trace) come
// back as a Status with a message fit for the user; a truncated trace is not
// an error (it is read up to its last valid chunk and reported in warnings).
absl::StatusOr<Report> AnalyzeRun(const std::string& path, const Options& options = {});

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_ANALYSIS_H_

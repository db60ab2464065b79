// LiveModel: the state of a running job, kept up to date from its run
// directory while the traces grow (`memstep top`, `memstep run
// --metrics-file`).
//
// Each Refresh() lists the directory (new processes appear during the run),
// polls one reader::TraceTailer per trace (only the bytes appended since the
// last refresh are read and decoded) and feeds the new records, in seq order,
// to per-process state:
//   - step, live host bytes, the step's peak, mmap and RSS bytes: the exact
//     counters of the latest STEP or STAGE record (STEP end: the step's peak);
//   - stage peaks: the peak_bytes of each stage's latest STAGE end record,
//     and the largest seen;
//   - live device bytes: exact (every device allocation is recorded),
//     replayed by DeviceReplay (device + managed + VMM + pool bytes);
//   - growth rate: the Theil-Sen slope (trend.h) of the live host bytes at
//     the last kGrowthWindow step ends, the window of the online growth alert;
//     the same for device bytes;
//   - top growing sites: HeapReplay and DeviceReplay estimate each call
//     site's live bytes; at every step end they are recorded for the last
//     kSiteWindow steps, and the sites whose Theil-Sen slope over those is
//     largest (and positive) are listed, with the symbolized first frame;
//   - alerts: the ALERT records the process wrote, counted per rule.
// Worked example: STEP end records with live_bytes 100, 164, 228, 292 KiB
// give step 3 (the latest), live 292 KiB, growth 64 KiB/step; a site whose
// estimates at those ends are 64, 128, 192, 256 KiB grows 64 KiB/step too.
//
// Cost per Refresh(): one readdir, one fstat per trace and work proportional
// to the new records; at each step end O(sites x kSiteWindow); the top sites
// O(sites x kSiteWindow^2). None of it grows with the length of the run.
// Memory: per process, the tailer's dictionaries, the replays' live samples,
// and kSiteWindow values per site. Thread-compatible.

#ifndef MEMSTEP_SRC_ANALYSIS_LIVE_MODEL_H_
#define MEMSTEP_SRC_ANALYSIS_LIVE_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace memstep::analysis {

inline constexpr size_t kGrowthWindow = 50;
inline constexpr size_t kSiteWindow = 16;

struct LiveSite {
  std::string name;  // "function (file:line)" of the first frame, or a hex id
  bool device = false;
  double live_bytes = 0;       // estimate
  double growth_per_step = 0;  // Theil-Sen slope over the last kSiteWindow step ends
};

struct LiveStage {
  std::string name;
  uint64_t step = 0;       // of its latest end
  uint64_t last_peak = 0;  // peak live host bytes in its latest run
  uint64_t max_peak = 0;   // largest of those so far
};

struct LiveAlert {
  uint64_t step = 0;
  std::string rule;    // AlertRuleName
  std::string stage;   // stage_peak: the stage
  uint64_t value = 0;  // bytes (growth: bytes per step)
  uint64_t threshold = 0;
};

struct LiveProcess {
  enum class State { kStarting, kRunning, kExited, kGone, kUnreadable };
  std::string path;
  std::string host;
  std::string rank;  // $RANK of the process, "" if unset
  uint32_t pid = 0;
  std::string command;  // argv[0]
  State state = State::kStarting;
  bool clean_exit = false;
  std::string problem;  // kUnreadable, or a corrupt chunk: why

  bool has_step = false;
  uint64_t step = 0;        // latest step number seen (begin or end)
  uint64_t steps_done = 0;  // STEP end records seen
  double steps_per_second = 0;
  uint64_t host_live = 0;  // exact, latest STEP/STAGE counters
  uint64_t step_peak = 0;  // the latest completed step's peak
  uint64_t max_step_peak = 0;
  uint64_t mmap_live = 0;
  uint64_t rss = 0;
  uint64_t device_live = 0;    // exact, resident on all devices
  uint64_t device_peak = 0;    // largest device_live seen
  double growth_per_step = 0;  // host bytes per step, Theil-Sen
  double device_growth_per_step = 0;
  size_t growth_points = 0;       // step ends in the window
  std::vector<LiveStage> stages;  // by name
  std::vector<LiveSite> top_sites;
  std::map<std::string, uint64_t> alerts_by_rule;  // "growth", "peak", ...
  uint64_t alerts_total = 0;
  std::vector<LiveAlert> recent_alerts;  // the last few, oldest first
  uint64_t start_real_ns = 0;
  uint64_t last_record_real_ns = 0;  // wall clock of its latest record
};

struct LiveOptions {
  size_t top_sites = 5;
  bool symbolize = true;
};

class LiveModel {
 public:
  explicit LiveModel(std::string dir, LiveOptions options = {});
  ~LiveModel();
  LiveModel(const LiveModel&) = delete;
  LiveModel& operator=(const LiveModel&) = delete;

  // Reads what the traces gained. An error only when the directory cannot
  // be listed (missing, not a directory, no permission); a trace that is not
  // one shows as a process in state kUnreadable.
  absl::Status Refresh();

  const std::string& dir() const { return dir_; }
  // In the order of their file names.
  const std::vector<LiveProcess>& processes() const { return processes_; }
  // At least one process, and every one exited or gone (none still running).
  bool ended() const;
  // STEP end records seen, all processes together (grows by one per step
  // completed anywhere).
  uint64_t steps_done() const;
  // Bytes the last Refresh() read from the traces, and whether it read all
  // there was (a refresh reads at most 64 MiB per trace) and knew every
  // process's pid before it read (so that a process gone is known as such).
  uint64_t last_bytes_read() const { return last_bytes_read_; }
  bool caught_up() const { return caught_up_; }

 private:
  struct Tracked;
  void Update(Tracked& t);

  std::string dir_;
  LiveOptions options_;
  std::map<std::string, std::unique_ptr<Tracked>> tracked_;  // by file name
  std::vector<LiveProcess> processes_;
  std::string local_host_;
  uint64_t last_bytes_read_ = 0;
  bool caught_up_ = true;
};

// "growth", "peak", "stage_peak", "device_peak" (format::AlertRule).
const char* AlertRuleName(uint8_t rule);

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_LIVE_MODEL_H_

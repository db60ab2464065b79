// Device side of AnalyzeTrace (analysis.cc): exact device memory of one
// process, per step, per stage, per device and per call site, from the
// DEV_ALLOC / DEV_FREE / DEV_FAIL / DEV_INFO records and the PyTorch counters
// `torch.cuda:<dev>.<stat>`. Internal to src/analysis.
//
// Worked example (one device, MiB; R = resident bytes of device 0):
//   DEV_ALLOC device 100 (model, stack 1)            R = 100, before step 0
//   STEP 0 begin                                      step peak starts at 100
//     STAGE forward begin                             run peak starts at 100
//       DEV_ALLOC device 30 (activations, stack 2)    R = 130: step and run peak 130
//       DEV_FREE  those 30                            R = 100
//     STAGE forward end                               forward peak in step 0 = 130,
//                                                     top sites there: stack 1 100, stack 2 30
//     COUNTER torch.cuda:0.reserved_bytes 160
//     COUNTER torch.cuda:0.allocated_bytes 100
//   STEP 0 end                                        live end 100, peak 130, reserved 160,
//                                                     allocated 100, cache slack 60
//   DEV_INFO step 0 dev 0 free 70000 total 81559       driver used 11559 (includes the context)
// The device's run peak (130, step 0) and each (stage, device)'s largest
// peak keep the device replay's sites as they were then (marks,
// site_marks.h), so the sites live there are exact. Growth: each device's resident bytes at step
// ends, and each device site's live bytes at step ends, are exact series, so they take the
// classifier's exact-series path (no cohorts, effect-size bounds divided by 16 unless set by the
// user), with the warm-up detected on the device's own series; LEAK projections run against the
// driver's total memory of the device (DEV_INFO), or not at all when it is unknown. Pinned host
// sites use the process's (host) warm-up and memory limit.

#ifndef MEMSTEP_SRC_ANALYSIS_DEVICE_ANALYSIS_H_
#define MEMSTEP_SRC_ANALYSIS_DEVICE_ANALYSIS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "src/analysis/analysis.h"
#include "src/analysis/device_replay.h"
#include "src/analysis/events.h"
#include "src/analysis/frame_resolver.h"
#include "src/reader/reader.h"

namespace memstep::analysis {

// What the device analysis needs from the host analysis of the same process.
struct HostContext {
  const absl::flat_hash_map<uint64_t, size_t>* row_of_step = nullptr;  // step -> row
  // The seq of the last STEP end that has a row (UINT64_MAX: none): the
  // sampled sites' cohorts are what is live then, as for host sites.
  uint64_t last_step_end_seq = UINT64_MAX;
  // What is allocated before the first row belongs to row 0's cohort, or
  // (--steps A:B with A > 0) to none.
  bool cohort_before_rows = true;
  size_t warmup_steps = 0;  // the process's W (pinned host sites)
  double median_step_s = 0;
  double host_used_bytes = 0;  // max(RSS, live) at the end (pinned host projections)
  double memory_limit = 0;     // host memory limit (pinned host projections)
  GrowthOptions exact;         // effect-size bounds of exact series
};

// The device analysis, in parts that ride on the host analysis' passes (one
// decoding of the trace feeds both, docs/architecture.md "Streaming
// reports"): Start before the host's replay pass, Apply on each of its
// events, Captures names the moments whose device sites the report shows
// and Kept gives those sites (the capture pass replays only a moment Kept
// lacks), Finish fills the device fields of `steps` (one row per
// STEP end, as built by the host analysis) and `summary`, appends device
// sites to `sites`, device stage peaks to `stage_peaks` and failures to
// `failures`. Site ids in stage peaks and failures are indices into `sites`
// plus 1, like the host analysis'.
class DeviceAnalysis {
 public:
  // Null for a host-only trace (nothing changes). `host.row_of_step` must be
  // set and outlive the analysis; `steps` must not move until Finish.
  static std::unique_ptr<DeviceAnalysis> Start(const reader::Trace& t, const HostContext& host,
                                               std::vector<StepRow>& steps);
  ~DeviceAnalysis();
  void Apply(size_t index, const reader::Event& e);
  std::vector<size_t> Captures() const;
  // DeviceReplay::sites() right after the indices of Captures() that pass 1
  // kept with marks (DeviceReplay::Mark): normally all of them, so that no
  // capture pass is needed.
  std::map<size_t, std::vector<DeviceReplay::SiteAcc>> Kept() const;
  // `captured`: DeviceReplay::sites() right after each index of Captures().
  void Finish(const HostContext& host, const Options& options, FrameResolver& resolver,
              std::vector<StepRow>& steps, ProcessSummary& summary, std::vector<Site>& sites,
              std::vector<StagePeak>& stage_peaks, std::vector<DeviceFailure>& failures,
              const std::map<size_t, std::vector<DeviceReplay::SiteAcc>>& captured);

 private:
  DeviceAnalysis();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Parses "torch.cuda:<dev>.<stat>"; false for any other counter name.
bool ParseTorchCounter(const std::string& name, int32_t* device, std::string* stat);

// Parses the library's pool counters: "cuda.pool:<dev>.0x<pool>.<stat>"
// (*pool = "0x<pool>") and "cuda.graph:<dev>.<stat>" (*pool = ""), <dev> a
// CUDA ordinal or -1, <stat> reserved_bytes or used_bytes (and, for pools,
// release_threshold_bytes); false otherwise (trim_to_bytes, multicast).
bool ParsePoolCounter(const std::string& name, int32_t* device, std::string* pool,
                      std::string* stat);

// Parses "cuda.pool:<dev>.0x<pool>.trim_to_bytes" (a trim's minBytesToKeep).
bool ParsePoolTrimCounter(const std::string& name, int32_t* device, std::string* pool);

// Parses "cuda.multicast:<dev>.0x<mc>.<stat>", <stat> size_bytes or
// bound_bytes, <dev> a CUDA ordinal or -1.
bool ParseMulticastCounter(const std::string& name, int32_t* device, std::string* object,
                           std::string* stat);

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_DEVICE_ANALYSIS_H_

// Offline analysis of memstep traces: replays the sampled live heap and the
// exact step/stage counters of every process in a run, and produces the data
// behind `memstep report` (text and JSON) and the end-to-end tests.
//
// Contract shared by src/analysis (implements it), src/report, tools/ and
// tests/e2e (use it). Extend by adding fields; do not rename.

#ifndef MEMSTEP_SRC_ANALYSIS_ANALYSIS_H_
#define MEMSTEP_SRC_ANALYSIS_ANALYSIS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/analysis/growth.h"
#include "src/analysis/rss_explain.h"
#include "src/analysis/site_kind.h"
#include "src/analysis/step_series.h"
#include "src/reader/run_files.h"

namespace memstep::analysis {

// One symbolized frame, innermost first. Inlined frames come before the frame
// of the function they were inlined into, with inlined = true.
struct Frame {
  uint64_t ip = 0;       // runtime return address as recorded
  std::string function;  // demangled; "module+0xOFFSET" when no symbol (see `symbolized`)
  std::string file;      // source file, "" when unknown
  int line = 0;          // 0 when unknown
  std::string module;    // path of the ELF object, "" when unknown
  bool inlined = false;
  uint64_t module_offset = 0;  // ip - load_bias (ELF virtual address), 0 when unknown
  // false: no symbol names the address (or symbolization was off), and
  // `function` is "module+0xOFFSET" ("0xIP" outside every mapping).
  bool symbolized = true;
};

// A host call site's sampled allocations made in one step and stage
// (slices.h; Options::site_slices): the same estimates as Site, split.
struct SiteSlice {
  int64_t step = -1;       // the step open when allocated; -1 outside every step
  int64_t step_last = -1;  // the last step of the slice: step, but for a run long enough
                           // that its slices were merged into buckets of steps (slices.h)
  std::string stage;       // the stage open when allocated; "" none
  double alloc_bytes = 0;  // estimated, as Site::alloc_bytes
  double alloc_count = 0;
  double live_bytes_end = 0;  // estimated, still live at the end of the trace
  double live_count_end = 0;
};

// A call site: one deduplicated stack (allocation frames inside memstep and
// the allocator are not part of it).
//
// Device sites (kind other than host and mmap) are exact: every device
// allocation is recorded with its stack, so samples is the allocation count
// and every byte figure is exact; they are kept per (kind, device, stack).
struct Site {
  uint64_t id = 0;  // stable within one report
  // kHost (malloc family), kMmap, or a device kind (DeviceSiteKind).
  SiteKind kind = SiteKind::kHost;
  uint32_t pid = 0;       // process whose trace recorded it (sites are per process)
  uint64_t stack_id = 0;  // the trace's stack id (0: no stack)
  int32_t device = -1;    // device sites: CUDA ordinal (-1 unknown); host sites: -1
  std::string api;        // device sites: API of its first allocation ("cudaMalloc", ...)
  std::vector<Frame> frames;
  uint64_t samples = 0;  // sampled allocations recorded for this site
  // Host sites: which allocator served its samples: "malloc" (the malloc
  // family), "pymalloc" (CPython's own allocator, ALLOC kind 4), "mixed";
  // "" for other sites.
  std::string allocator;
  double alloc_bytes = 0;     // estimated bytes allocated over the run
  double alloc_count = 0;     // estimated allocations over the run
  double live_bytes_end = 0;  // estimated bytes still live at the end of the trace
  double live_count_end = 0;
  // Estimated live bytes at the run's host peak; device sites: exact, at the
  // peak of their device's resident bytes (pinned_host: of pinned host bytes).
  double live_bytes_at_peak = 0;
  // 95 % intervals of live_bytes_end and live_bytes_at_peak (Horvitz-Thompson
  // sampling variance; docs/analysis.md "Intervals"). Exact sites (mmap,
  // device) and sites built without them: high < 0, read as [value, value].
  double live_bytes_end_low = 0, live_bytes_end_high = -1;
  double live_bytes_at_peak_low = 0, live_bytes_at_peak_high = -1;
  // Estimated live at each step end (index as Report::steps), stored by its
  // change points (step_series.h).
  StepSeries live_bytes_by_step;
  Growth growth;                 // classification of its own process's steps (growth.h)
  double steps_to_limit = -1;    // LEAK: steps until the memory limit at this rate; -1 n/a
  double seconds_to_limit = -1;  // the same in seconds (median step duration); -1 n/a
  // With Options::site_slices, host sites: by (step, stage) of allocation;
  // they sum to alloc_* and live_*_end.
  std::vector<SiteSlice> slices;
  // Churn (docs/analysis.md "Churn"), host and mmap sites: estimated
  // allocations made while a step of the selection was open, per step
  // (Horvitz-Thompson, with 95 % intervals; mmap sites are exact: high =
  // value), and the site's share of its process's exact allocations in those
  // steps (0..1). Device sites: 0.
  double churn_bytes_per_step = 0;
  double churn_bytes_per_step_low = 0, churn_bytes_per_step_high = -1;
  double churn_count_per_step = 0;
  double churn_count_per_step_low = 0, churn_count_per_step_high = -1;
  double churn_bytes_share = 0;
  double churn_count_share = 0;
};

// PyTorch caching-allocator statistics of one device at a step end: the last
// COUNTER record `torch.cuda:<dev>.<stat>` before the step's END record (the
// Python helper pushes them there). -1: not recorded.
struct TorchCudaStats {
  int64_t allocated_bytes = -1;
  int64_t reserved_bytes = -1;
  int64_t inactive_split_bytes = -1;  // free memory trapped in split blocks
  int64_t requested_bytes = -1;
  int64_t num_alloc_retries = -1;     // cumulative since the process start
  int64_t num_ooms = -1;              // cumulative
  int64_t allocated_bytes_peak = -1;  // within the step (the helper resets peaks per step)
  int64_t reserved_bytes_peak = -1;
  int64_t alloc_retries_in_step =
      -1;  // num_alloc_retries minus the previous step's (first: itself)
  int64_t ooms_in_step = -1;
  bool any() const { return allocated_bytes >= 0 || reserved_bytes >= 0 || num_alloc_retries >= 0; }
  // reserved - allocated (cache slack); -1 when either is unknown.
  int64_t cache_slack() const {
    return reserved_bytes >= 0 && allocated_bytes >= 0 ? reserved_bytes - allocated_bytes : -1;
  }
};

// Device memory of one device in one step. Exact (from DEV_ALLOC/DEV_FREE)
// unless marked otherwise. "Resident" bytes are device + device_vmm +
// device_pool + device_managed; pinned host memory is counted in StepRow.
struct DeviceStep {
  int32_t device = -1;                           // CUDA ordinal, -1 unknown
  uint64_t live_bytes_end = 0;                   // resident bytes live at the step end
  uint64_t peak_bytes = 0;                       // max resident bytes within the step
  std::map<std::string, uint64_t> live_by_kind;  // kind -> live at the step end
  std::map<std::string, uint64_t> peak_by_kind;  // kind -> max within the step
  uint64_t alloc_bytes = 0;                      // resident kinds, during the step
  uint64_t alloc_count = 0;
  uint64_t free_bytes = 0;
  uint64_t free_count = 0;
  uint64_t failures = 0;  // failed allocation calls (DEV_FAIL) during the step
  std::map<std::string, uint64_t> stage_peaks;  // stage -> max resident bytes within its runs
  // DEV_INFO read at this step's end (driver view; includes the CUDA context).
  bool has_info = false;
  uint64_t driver_free_bytes = 0;
  uint64_t driver_total_bytes = 0;
  uint64_t driver_used_bytes = 0;    // total - free
  uint64_t pool_reserved_bytes = 0;  // default memory pool (stream-ordered allocator)
  uint64_t pool_used_bytes = 0;
  TorchCudaStats torch;
  // Tensor blocks of PyTorch's caching allocator (kind tensor_block, an inner
  // layer): live block bytes at the step end ("allocated"), once any block
  // was recorded on this device. The segments (live_bytes_end) are "reserved".
  bool has_blocks = false;
  uint64_t blocks_bytes = 0;
  // The library's counters of CUDA memory pools created by the program
  // (`cuda.pool:<dev>.0x<pool>.{reserved,used}_bytes`, key "0x<pool>") and of
  // the device's graph memory (`cuda.graph:<dev>.*`): their latest values at
  // the step end; -1 unknown. Stream-ordered allocations are in the resident
  // bytes already; these show what the pools hold besides.
  struct PoolBytes {
    int64_t reserved = -1;
    int64_t used = -1;
    // The pool's release threshold (`.release_threshold_bytes`: what the
    // pool may keep of freed memory); -1 unknown, INT64_MAX no limit (a
    // threshold of 2^63 bytes or more, such as PyTorch's UINT64_MAX).
    int64_t release_threshold = -1;
    // Freed memory the pool keeps (reserved - used), -1 unknown; and whether
    // it is within the release threshold (the pool caches as configured:
    // not a leak), -1 unknown.
    int64_t cached() const { return reserved >= 0 && used >= 0 ? reserved - used : -1; }
    int within_threshold() const {
      return cached() >= 0 && release_threshold >= 0 ? cached() <= release_threshold : -1;
    }
    void Set(const std::string& stat, int64_t value) {
      if (stat == "reserved_bytes") {
        reserved = value;
      } else if (stat == "used_bytes") {
        used = value;
      } else {  // release_threshold_bytes (ParsePoolCounter admits no other)
        release_threshold = value < 0 ? INT64_MAX : value;
      }
    }
  };
  std::map<std::string, PoolBytes> created_pools;
  PoolBytes graph;
  // reserved - allocated from the records: segments minus blocks; -1 when
  // no block was recorded or the blocks exceed the recorded segments.
  int64_t block_fragmentation() const {
    return has_blocks && live_bytes_end >= blocks_bytes
               ? static_cast<int64_t>(live_bytes_end - blocks_bytes)
               : -1;
  }
};

// One training step (of one process; multi-process runs report per process).
struct StepRow {
  uint64_t step = 0;
  uint32_t pid = 0;
  uint64_t live_bytes_end = 0;  // exact heap live bytes at step end
  uint64_t peak_bytes = 0;      // exact max heap live bytes within the step
  uint64_t mmap_live_bytes_end = 0;
  uint64_t rss_bytes_end = 0;
  uint64_t alloc_bytes = 0;  // allocated during the step (exact)
  uint64_t alloc_count = 0;
  uint64_t free_bytes = 0;
  uint64_t free_count = 0;
  double duration_s = 0;
  std::map<std::string, uint64_t> stage_peaks;  // stage name -> exact peak live bytes
  int64_t epoch = -1;  // epoch the step belongs to; -1 when no EPOCH records
  // Device memory (exact; 0 / empty when the process recorded none).
  uint64_t device_live_bytes_end = 0;  // resident bytes, summed over devices
  uint64_t device_peak_bytes = 0;      // max of that sum within the step
  uint64_t pinned_host_live_bytes_end = 0;
  uint64_t pinned_host_peak_bytes = 0;
  std::vector<DeviceStep> devices;  // by ordinal; devices the process used, plus DEV_INFO ones
};

// One epoch (EPOCH records) of one process: its steps' totals.
struct EpochRow {
  uint64_t epoch = 0;
  uint32_t pid = 0;
  uint64_t first_step = 0;
  uint64_t last_step = 0;
  uint64_t steps = 0;
  uint64_t live_bytes_end = 0;  // at the end of its last step
  int64_t growth_bytes = 0;  // live_bytes_end minus the previous epoch's (first: its first step's)
  double growth_bytes_per_step = 0;  // growth_bytes / steps
  uint64_t peak_bytes = 0;           // max step peak
  uint64_t rss_bytes_end = 0;
  double duration_s = 0;                        // sum of its steps' durations
  std::map<std::string, uint64_t> stage_peaks;  // max over its steps
};

// A call site live at a stage's peak.
struct PeakSite {
  uint64_t site_id = 0;  // Report::sites id; 0 when the stack is not a reported site
  uint64_t stack_id = 0;
  double live_bytes = 0;  // estimated
  double live_count = 0;
  // 95 % interval of live_bytes (host sites; docs/analysis.md "Intervals");
  // high < 0: exact (device sites), read as [live_bytes, live_bytes].
  double live_bytes_low = 0, live_bytes_high = -1;
};

// Peaks of one stage name in one process, over the steps where it ran.
// kind kHost: the exact host heap (STAGE counters), top sites estimated.
// kind kDevice: resident device bytes of one device (exact, from the device
// replay), top sites exact.
struct StagePeak {
  uint32_t pid = 0;
  std::string stage;
  SiteKind kind = SiteKind::kHost;  // kHost or kDevice
  int32_t device = -1;              // kind kDevice: the CUDA ordinal
  uint64_t peak_bytes_max = 0;      // exact (STAGE end peak_bytes)
  uint64_t step_of_max = 0;
  uint64_t peak_bytes_median = 0;  // median over steps (per step: max over the stage's runs)
  uint64_t steps = 0;              // steps in which the stage ran
  std::string top_source;          // "snapshot" (in-process SITE_SNAPSHOT), "replay", "exact" or ""
  std::vector<PeakSite> top_sites;  // largest first
};

// An online alert recorded in a trace (ALERT record).
struct AlertRow {
  uint32_t pid = 0;
  uint64_t step = 0;
  double time_s = 0;
  std::string rule;  // "growth", "peak", "stage_peak", "device_peak", "rule N"
  uint64_t value = 0;
  uint64_t threshold = 0;
  std::string stage;
  uint64_t site_id = 0;  // top growing site (0: unknown)
};

// Result of one offline gate (--fail-on), filled by EvaluateGates (gates.h).
struct GateResult {
  std::string expression;  // as given
  std::string metric;      // "growth", "live_growth", "peak", "live_end", "rss_peak", "leaks",
                           // "device_peak", "device_growth"
  double value = 0;        // the metric's value (bytes, bytes/step or a count)
  bool percent = false;    // memstep diff: value is a change in percent (gates.h)
  bool passed = true;
  std::string detail;  // e.g. "largest LEAK site #3" or "no stage 'fwd'"
};

// A failed device allocation call (DEV_FAIL): nothing was allocated.
struct DeviceFailure {
  uint32_t pid = 0;
  double time_s = 0;                  // since the trace start
  uint64_t step = 0;                  // the step in progress
  std::string stage;                  // the stage in progress, "" none
  uint64_t size = 0;                  // requested bytes
  SiteKind kind = SiteKind::kDevice;  // a device kind (DeviceSiteKind)
  std::string api;                    // "cudaMalloc", "cuMemCreate", ...
  uint64_t error = 0;                 // the cudaError_t / CUresult the caller got
  std::string error_name;             // "out of memory" for 2 (both APIs), else ""
  int32_t device = -1;
  uint64_t stack_id = 0;
  uint64_t site_id = 0;       // the device site with this stack, kind and device; 0 none
  std::vector<Frame> frames;  // innermost first, memstep's and CUDA's entry frames stripped
};

// A MEM_SNAPSHOT (docs/gpu.md "Out of memory"): an out-of-memory error, or a
// snapshot on request, and what was live by site at that moment, rebuilt
// from the trace up to the record (the same replays as the rest of the
// report: host sites estimated from the samples, device sites from the
// device samples, device totals exact).
struct MemorySnapshot {
  uint32_t pid = 0;
  double time_s = 0;
  uint64_t step = 0;           // the step in progress
  std::string stage;           // the stage in progress, "" none
  std::string cause;           // "device_oom", "torch_oom", "signal", "request"
  bool out_of_memory = false;  // device_oom or torch_oom
  int32_t device = -1;         // -1 unknown
  uint64_t requested = 0;      // bytes asked for (0: a request)
  std::string api;             // device_oom: the failing call
  // The device's free and total memory: from the driver at that moment
  // ("moment"; total 0 when the caller did not know it), else from the
  // last step end's DEV_INFO before it ("step_end"), else unknown ("", 0).
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
  std::string free_source;
  uint64_t device_resident_bytes = 0;  // exact: that device (all devices when -1)
  double host_live_bytes = 0;          // estimated live heap (host sites)
  // Top sites by live bytes then, largest first: host (heap and mmap) and
  // device (resident kinds on that device, every device when -1). site_id
  // is a Report::sites id.
  std::vector<PeakSite> host_sites;
  std::vector<PeakSite> device_sites;
};

// Device memory of one device over a process's run (exact).
struct DeviceSummary {
  int32_t device = -1;
  uint64_t peak_bytes = 0;  // max resident bytes (device + vmm + pool + managed)
  double peak_time_s = 0;
  int64_t peak_step = -1;       // step in progress at the peak; -1 before the first step
  uint64_t live_bytes_end = 0;  // resident bytes at the end of the trace
  std::map<std::string, uint64_t> live_by_kind_end;
  std::map<std::string, uint64_t> peak_by_kind;
  uint64_t alloc_bytes = 0;  // resident kinds, over the run
  uint64_t alloc_count = 0;
  uint64_t free_bytes = 0;
  uint64_t free_count = 0;
  uint64_t failures = 0;        // DEV_FAIL records on this device
  uint64_t total_bytes = 0;     // driver total memory (last DEV_INFO); 0 unknown
  uint64_t used_bytes_end = 0;  // driver total - free at the last DEV_INFO; 0 unknown
  size_t warmup_steps = 0;      // W of this device's growth analysis
  Growth live_growth;           // exact resident bytes at step ends
  double steps_to_limit = -1;   // live_growth LEAK: steps until total_bytes; -1 n/a
  double seconds_to_limit = -1;
  // With PyTorch's allocator statistics at every step end: its allocated
  // bytes (live tensors) classified like the resident series, and what the
  // device growth is: "leak" (tensors grow), "caching" (segments grow, tensors
  // do not: cache the allocator keeps), "fragmentation" (the same, with the
  // free memory trapped in split blocks growing), or "" (no growth, or no
  // statistics).
  bool has_torch_growth = false;
  Growth torch_allocated_growth;
  std::string growth_verdict;
};

struct ProcessSummary {
  uint32_t pid = 0;
  uint32_t ppid = 0;
  bool fork_child = false;
  std::string trace_path;
  std::string cmdline;  // argv joined with spaces
  std::string hostname;
  std::string rank;          // RANK env or ""
  uint64_t alloc_bytes = 0;  // exact totals over the trace
  uint64_t alloc_count = 0;
  uint64_t free_bytes = 0;
  uint64_t free_count = 0;
  uint64_t live_bytes_end = 0;
  uint64_t peak_bytes = 0;  // exact max heap live bytes seen at any boundary
  uint64_t mmap_live_bytes_end = 0;
  uint64_t samples = 0;
  uint64_t lost_records = 0;
  // Of lost_records, by cause (LOST records): sampled allocations dropped for
  // a full ring (1), dictionary entries (2), records memstep keeps that found
  // its kept lane full too (3: steps, stages or frees may be missing).
  uint64_t lost_samples = 0;
  uint64_t lost_dictionary = 0;
  uint64_t lost_kept_records = 0;
  double duration_s = 0;
  uint64_t start_real_ns = 0;        // wall clock at the trace start (ns since the epoch)
  bool clean_exit = false;           // a trailer was found
  bool truncated = false;            // the file ended inside a chunk or had a bad chunk
  uint64_t truncated_at_offset = 0;  // offset of the first unreadable byte
  std::vector<std::string> notices;  // profiler notices recorded in the trace
  bool recording_stopped = false;    // a notice with an error code: memstep stopped early
  int64_t last_step = -1;            // the last step that ended (-1: none)
  uint64_t lost_bytes = 0;
  uint64_t unknown_refs = 0;  // records referring to undefined ids
  uint64_t rss_bytes_end = 0;
  double sample_interval = 0;     // header's mean sampling interval T (bytes)
  double est_live_bytes_end = 0;  // sampled estimate of the live heap at the end
  double est_peak_bytes = 0;      // sampled estimate of the live heap at its peak
  double est_peak_time_s = 0;     // when that peak happened (since trace start)
  uint64_t rss_peak_bytes = 0;    // max RSS seen at any boundary
  size_t warmup_steps = 0;        // W used for growth (configured or detected, the later)
  bool warmup_detected = false;   // W came from the changepoint of exact live bytes
  Growth live_growth;             // exact heap live bytes at step ends
  Growth rss_growth;              // RSS at step ends
  bool fragmentation = false;     // RSS grows (significantly) while live bytes do not
  // RSS growth split into live bytes, allocator free space and mappings, and
  // its verdict (rss_explain.h; pins[].site_id are Report::sites ids).
  RssExplain rss_explain;
  // Leak hunts the library ran (HUNT records; docs/analysis.md "Leak hunt").
  struct Hunt {
    uint64_t begin_step = 0;
    uint64_t end_step = 0;      // the last step when the trace ends mid-hunt
    uint8_t outcome = 0;        // format::HuntOutcome; 0: still running at the end
    uint64_t min_interval = 0;  // the smallest T in force during the hunt
    uint64_t rate = 0;          // exact growth when it began, bytes/step
    uint64_t growth = 0;        // at its end: exact growth since its checkpoint
    uint64_t explained = 0;     //   and the explaining sites' growth
    uint64_t samples = 0;       //   on this many long-lived samples
    uint64_t stack_ns = 0;      // cost of one stack capture, ns
    bool device = false;        // the device hunt (device-resident bytes; T is T_dev)
    bool screened = false;      // it screened Python lines (min_interval: its screening T)
    bool residual = false;      // it hunted what the explained hunt before it left
  };
  std::vector<Hunt> hunts;
  // Exact heap growth (live_growth LEAK or BOUNDED_GROWTH) against the heap
  // sites that grow (LEAK or BOUNDED_GROWTH): what they explain per step, and
  // what remains unattributed when it is significant (else 0), with how to
  // get it attributed (docs/analysis.md "Unattributed growth").
  double attributed_bytes_per_step = 0;
  double unattributed_bytes_per_step = 0;
  // Python lines (docs/analysis.md "Python lines"): the host sites of this
  // process summed by their Python frames, where two or more sites share them
  // (one line's objects come from several native paths: a tuple, its items, a
  // dict's table) and the sum grows (LEAK or BOUNDED_GROWTH). Classified as
  // one call site, with the same tests and bounds; a line can be LEAK when no
  // site of it is by itself.
  struct PythonLine {
    std::vector<Frame> frames;       // its Python frames, innermost first
    std::vector<uint64_t> site_ids;  // its host sites (Report::sites ids)
    double live_bytes_end = 0;       // estimated, with its 95 % interval
    double live_bytes_end_low = 0, live_bytes_end_high = 0;
    double live_bytes_last_step = 0;  // estimated, at the last step end
    double samples = 0;
    Growth growth;
    double steps_to_limit = -1, seconds_to_limit = -1;
    // A caller line: the sites allocated under its innermost frame, in it
    // or in what it calls (docs/analysis.md "Caller lines"); frames start
    // at that frame.
    bool callees = false;
  };
  std::vector<PythonLine> python_lines;
  std::string attribute_hint;
  double median_step_s = 0;
  double steps_to_limit = -1;  // live_growth LEAK: steps until the memory limit; -1 n/a
  double seconds_to_limit = -1;
  // Device memory (exact; empty / 0 when the trace has no DEV_* records).
  std::vector<DeviceSummary> devices;  // by ordinal
  uint64_t device_peak_bytes = 0;      // max over devices of their resident peak
  uint64_t pinned_host_live_bytes_end = 0;
  uint64_t pinned_host_peak_bytes = 0;
  uint64_t device_failures = 0;         // DEV_FAIL records
  uint64_t device_unmatched_frees = 0;  // DEV_FREE of an unseen allocation, applied with its size
  uint64_t device_ignored_frees = 0;    // DEV_FREE of an unseen allocation without a size: ignored
  // Memory pools' release-threshold changes and trims, in trace order (the
  // library's `cuda.pool:*` COUNTERs, docs/gpu.md): a threshold is listed
  // when it is first read or changes; a trim with the pool's reserved bytes
  // read right after it. At most kMaxPoolEvents; the rest are only counted.
  struct PoolEvent {
    int64_t step = -1;  // the step in progress (-1: outside any step)
    int32_t device = -1;
    std::string pool;             // "0x<pool>"
    bool trim = false;            // a trim (cudaMemPoolTrimTo), else a release threshold
    int64_t bytes = 0;            // trim: minBytesToKeep; threshold: bytes, INT64_MAX no limit
    int64_t reserved_after = -1;  // trim: the pool's reserved bytes right after, -1 unknown
  };
  static constexpr size_t kMaxPoolEvents = 1000;
  std::vector<PoolEvent> pool_events;
  uint64_t pool_events_dropped = 0;
  // Multicast objects (the `cuda.multicast:*` COUNTERs): they own no memory,
  // the bound memory is cuMemCreate memory counted on its device. At most
  // kMaxMulticast objects, in order of creation; the rest are only counted.
  struct Multicast {
    std::string object;                    // "0x<handle>"
    int64_t size_bytes = -1;               // per device, at its creation; -1 unknown
    int64_t created_step = -1;             // step in progress at its first record (-1: outside any)
    bool released = false;                 // its size went back to 0 (cuMemRelease)
    int64_t released_step = -1;            // step in progress then (-1: outside any)
    std::map<int32_t, int64_t> bound_max;  // device -> most bytes bound at once
    std::map<int32_t, int64_t> bound_end;  // device -> bytes bound at the end of the trace
  };
  static constexpr size_t kMaxMulticast = 256;
  std::vector<Multicast> multicast;
  uint64_t multicast_dropped = 0;
  bool has_device_data() const {
    return !devices.empty() || pinned_host_peak_bytes > 0 || device_failures > 0;
  }
};

// The run in time, for timeline exports (src/report/perfetto_report.cc):
// kept only with Options::timeline, one entry per STEP / STAGE record, so it
// costs memory in proportion to the step table, not to the trace.
struct TimelineSpan {
  uint32_t pid = 0;
  uint32_t tid = 0;  // thread that ended it
  uint64_t step = 0;
  std::string stage;   // "" for a step
  double begin_s = 0;  // since the trace start; its end when the begin is missing
  double end_s = 0;
  uint64_t peak_bytes = 0;  // exact heap peak within it
};
// Exact counters at one STEP / STAGE boundary.
struct TimelinePoint {
  uint32_t pid = 0;
  double time_s = 0;  // since the trace start
  uint64_t live_bytes = 0;
  uint64_t rss_bytes = 0;
  uint64_t mmap_live_bytes = 0;
};

struct Report {
  std::string path;  // as given to AnalyzeRun
  std::vector<ProcessSummary> processes;
  std::vector<StepRow> steps;          // ordered by (pid, step)
  std::vector<Site> sites;             // ordered by live_bytes_end, largest first
  std::vector<std::string> warnings;   // e.g. "trace X truncated at offset N"
  std::vector<EpochRow> epochs;        // ordered by (pid, epoch); empty without EPOCH records
  std::vector<StagePeak> stage_peaks;  // ordered by (pid, stage)
  std::vector<AlertRow> alerts;        // ordered by (pid, seq)
  std::vector<GateResult> gates;       // filled by EvaluateGates
  std::vector<DeviceFailure> device_failures;    // ordered by (pid, time)
  std::vector<TimelineSpan> spans;               // with Options::timeline: ordered by (pid, end)
  std::vector<TimelinePoint> timeline;           // with Options::timeline: ordered by (pid, time)
  std::vector<MemorySnapshot> memory_snapshots;  // ordered by (pid, time)
  uint64_t memory_limit_bytes = 0;               // limit used for projections
  std::string memory_limit_source;               // "--memory-limit" or "MemTotal of this machine"
  std::string selection;  // the selection in words ("steps 10..50, stage forward"); "" none
};

struct Options {
  bool symbolize = true;
  int64_t warmup_steps = -1;  // --warmup: W at least this; -1: detected only
  uint64_t memory_limit = 0;  // --memory-limit; 0: machine_memory
  // MemTotal of the machine (reader::MachineMemTotal), the projections'
  // limit without --memory-limit; 0 unknown. The caller reads it: the
  // analysis does no I/O.
  uint64_t machine_memory = 0;
  GrowthOptions growth;
  size_t top_peak_sites = 10;  // sites kept per stage peak
  bool timeline = false;       // fill Report::spans and Report::timeline
  bool site_slices = false;    // fill Site::slices (host sites)
  // Selection (docs/analysis.md "Selection"): the analysis sees only these
  // steps, stage and processes. first_step/last_step: --steps A:B, -1 open;
  // step numbers as the report shows them (after renumbering repeats).
  int64_t first_step = -1;
  int64_t last_step = -1;
  std::string stage;  // --stage NAME: sampled host allocations made in NAME; "" all
  int64_t pid = -1;   // --pid N; -1 every process
  std::string rank;   // --rank R (the RANK variable); "" every process
  bool selects() const {
    return first_step >= 0 || last_step >= 0 || !stage.empty() || pid >= 0 || !rank.empty();
  }
};

// Progress of a long analysis: `file` is being read in pass `pass` (1 the
// scan, 2, 3, ... the re-reads of its bulk events; docs/architecture.md
// "Streaming reports"), `done` of its `total` bytes.
using ProgressFn =
    std::function<void(const std::string& file, int pass, uint64_t done, uint64_t total)>;

// Analyzes the traces of `run` (opened by the caller: the analysis does no
// file I/O). Each trace is streamed: memory grows with its unique stacks,
// strings, mappings, steps and live sampled allocations, not with its
// length (a trace that breaks the reorder window is read whole, with a
// warning). Errors (a file that is not a memstep trace) come back as a
// Status with a message fit for the user; a truncated trace is not an error
// (it is read up to its last valid chunk and reported in warnings).
absl::StatusOr<Report> AnalyzeRun(const reader::RunFiles& run, const Options& options,
                                  const ProgressFn& progress = nullptr);

// The same for `path`, a run directory (every *.trace file in it) or one
// trace file, opened with reader::RunFiles; Options::machine_memory is read
// when 0. For tests and tools that have a path and want no progress.
absl::StatusOr<Report> AnalyzeRun(const std::string& path, const Options& options = {});

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_ANALYSIS_H_

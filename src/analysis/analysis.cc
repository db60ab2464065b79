// AnalyzeRun: reads every trace of a run, replays each process (replay.h),
// builds its step table from the exact counters, symbolizes the sites' stacks
// and assembles the Report.
//
// Sites are kept per (process, kind, stack id): two stack ids whose
// symbolized frames happen to be identical stay two sites (this keeps ids
// stable and needs no symbolization to group; the writer deduplicates stacks
// by their instruction pointers already).
//
// Step rows come from STEP end records: live/peak/mmap/rss are the end
// record's counters; alloc/free deltas are end minus the matching STEP begin
// (or the previous boundary's counters when the begin was not recorded);
// stage peaks are the max of STAGE end peak_bytes per stage name and step.

#include "src/analysis/analysis.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/analysis/calibrate.h"
#include "src/analysis/device_analysis.h"
#include "src/analysis/device_replay.h"
#include "src/analysis/events.h"
#include "src/analysis/frame_resolver.h"
#include "src/analysis/live_model.h"
#include "src/analysis/mem_snapshot.h"
#include "src/analysis/parallel.h"
#include "src/analysis/renumber.h"
#include "src/analysis/replay.h"
#include "src/analysis/select.h"
#include "src/analysis/series_util.h"
#include "src/analysis/slices.h"
#include "src/analysis/step_series.h"
#include "src/analysis/trend.h"
#include "src/reader/reader.h"
#include "src/reader/run_files.h"

namespace memstep::analysis {
namespace {

// Effect-size bounds of the exact process series: the call-site bounds / this.
constexpr double kExactSeriesBoundDivisor = 32;

using reader::Event;
using reader::Trace;

uint64_t Sub(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

// One run of a stage (STAGE begin .. STAGE end), as seq numbers.
struct StageRun {
  uint64_t peak = 0;
  uint64_t step = 0;
  uint64_t begin = 0;  // seq of the STAGE begin (or of the end when it is missing)
  uint64_t end = 0;
};

struct ProcessResult {
  ProcessSummary summary;
  std::vector<StepRow> steps;
  std::vector<Site> sites;  // live_bytes_by_step indexed like `steps`
  std::vector<EpochRow> epochs;
  std::vector<StagePeak> stage_peaks;   // top_sites[].site_id: local site index + 1
  std::vector<AlertRow> alerts;         // site_id: local site index + 1
  std::vector<DeviceFailure> failures;  // site_id: local site index + 1
  std::vector<TimelineSpan> spans;      // with Options::timeline
  std::vector<TimelinePoint> timeline;
  std::vector<MemorySnapshot> snapshots;  // {host,device}_sites[].site_id: local index + 1
};

// Builds the step table of one process from its control records (STEP,
// STAGE, EPOCH), in trace order.
class StepTableBuilder {
 public:
  StepTableBuilder(const Trace& t, ProcessResult& r, std::map<std::string, StageRun>& max_run,
                   bool timeline)
      : t_(t), r_(r), max_run_(max_run), timeline_(timeline) {}

  void OnEpoch(const Event& e) { epoch_ = static_cast<int64_t>(e.step); }

  // A STEP or STAGE record with counters `c`.
  void OnBoundary(const Event& e, const format::Counters& c) {
    last_ = &c;
    peak_ = std::max({peak_, c.peak_bytes, c.live_bytes});
    r_.summary.rss_peak_bytes = std::max(r_.summary.rss_peak_bytes, c.rss_bytes);
    if (timeline_) {
      r_.timeline.push_back(TimelinePoint{t_.header.pid, Seconds(e.ts), c.live_bytes, c.rss_bytes,
                                          c.mmap_live_bytes});
    }
    if (e.tag == format::kTagStage) {
      OnStage(e, c);
    } else if (e.phase == 0) {
      begins_[e.step] = Begin{e.ts, c, epoch_};
    } else {
      OnStepEnd(e, c);
    }
  }

  // The rows in step order, with their stage peaks; the process totals.
  void Finish(absl::flat_hash_map<uint64_t, size_t>& row_of_step) {
    if (!rows_.empty()) r_.summary.last_step = static_cast<int64_t>(rows_.rbegin()->first);
    for (auto& [step, row] : rows_) {
      auto sp = stage_peaks_.find(step);
      if (sp != stage_peaks_.end()) row.stage_peaks = sp->second;
      row_of_step[step] = r_.steps.size();
      r_.steps.push_back(std::move(row));
    }
    ProcessSummary& s = r_.summary;
    const format::Counters* totals = t_.has_trailer ? &t_.trailer.counters : last_;
    if (t_.has_trailer) peak_ = std::max({peak_, totals->peak_bytes, totals->live_bytes});
    if (totals != nullptr) {
      s.alloc_bytes = totals->alloc_bytes;
      s.alloc_count = totals->alloc_count;
      s.free_bytes = totals->free_bytes;
      s.free_count = totals->free_count;
      s.live_bytes_end = totals->live_bytes;
      s.mmap_live_bytes_end = totals->mmap_live_bytes;
      s.rss_bytes_end = totals->rss_bytes;
      s.rss_peak_bytes = std::max(s.rss_peak_bytes, totals->rss_bytes);
    }
    s.peak_bytes = peak_;
  }

 private:
  struct Begin {
    uint64_t ts;
    format::Counters c;
    int64_t epoch;
  };
  struct StageBegin {
    uint64_t seq, ts;
  };

  static double Seconds(uint64_t ts) { return static_cast<double>(ts) / 1e9; }

  // A stage begins or ends: its span, its peak in the step, its largest run.
  void OnStage(const Event& e, const format::Counters& c) {
    const std::pair<uint32_t, uint64_t> key(e.tid, e.str);
    if (e.phase == 0) {
      stage_begin_[key] = StageBegin{e.seq, e.ts};
      return;
    }
    auto b = stage_begin_.find(key);
    if (timeline_) {
      const double begin_s = b != stage_begin_.end() ? Seconds(b->second.ts) : Seconds(e.ts);
      r_.spans.push_back(TimelineSpan{t_.header.pid, e.tid, e.step, t_.String(e.str), begin_s,
                                      Seconds(e.ts), c.peak_bytes});
    }
    const std::string& name = t_.String(e.str);
    uint64_t& p = stage_peaks_[e.step][name];
    p = std::max(p, c.peak_bytes);
    auto [it, inserted] = max_run_.try_emplace(name);
    if (inserted || c.peak_bytes > it->second.peak) {
      it->second =
          StageRun{c.peak_bytes, e.step, b != stage_begin_.end() ? b->second.seq : e.seq, e.seq};
    }
  }

  // A step ends: its row, from its begin's counters (or the previous end's).
  void OnStepEnd(const Event& e, const format::Counters& c) {
    auto b = begins_.find(e.step);
    const format::Counters& base = b != begins_.end() ? b->second.c : prev_;
    StepRow row;
    row.step = e.step;
    row.pid = t_.header.pid;
    row.live_bytes_end = c.live_bytes;
    row.peak_bytes = c.peak_bytes;
    row.mmap_live_bytes_end = c.mmap_live_bytes;
    row.rss_bytes_end = c.rss_bytes;
    row.alloc_bytes = Sub(c.alloc_bytes, base.alloc_bytes);
    row.alloc_count = Sub(c.alloc_count, base.alloc_count);
    row.free_bytes = Sub(c.free_bytes, base.free_bytes);
    row.free_count = Sub(c.free_count, base.free_count);
    row.epoch = b != begins_.end() ? b->second.epoch : epoch_;
    if (b != begins_.end()) row.duration_s = static_cast<double>(Sub(e.ts, b->second.ts)) / 1e9;
    if (timeline_) {
      const double begin_s = b != begins_.end() ? Seconds(b->second.ts) : Seconds(e.ts);
      r_.spans.push_back(
          TimelineSpan{t_.header.pid, e.tid, e.step, "", begin_s, Seconds(e.ts), c.peak_bytes});
    }
    rows_[e.step] = row;
    prev_ = c;
  }

  const Trace& t_;
  ProcessResult& r_;
  std::map<std::string, StageRun>& max_run_;
  const bool timeline_;
  absl::flat_hash_map<uint64_t, Begin> begins_;
  std::map<uint64_t, StepRow> rows_;
  std::map<uint64_t, std::map<std::string, uint64_t>> stage_peaks_;
  absl::flat_hash_map<std::pair<uint32_t, uint64_t>, StageBegin> stage_begin_;  // (tid, str)
  format::Counters prev_{};  // counters at the previous STEP end
  const format::Counters* last_ = nullptr;
  uint64_t peak_ = 0;
  int64_t epoch_ = -1;
};

// Builds the step rows and the process totals from the exact counters, and
// finds, per stage name, the run that reached the stage's largest peak.
void BuildSteps(const Trace& t, ProcessResult& r,
                absl::flat_hash_map<uint64_t, size_t>& row_of_step,
                std::map<std::string, StageRun>& max_run, bool timeline) {
  StepTableBuilder builder(t, r, max_run, timeline);
  for (const Event& e : t.events) {  // the control events suffice
    if (e.tag == format::kTagEpoch) {
      builder.OnEpoch(e);
    } else if (e.tag == format::kTagStep || e.tag == format::kTagStage) {
      builder.OnBoundary(e, t.counters[e.counters]);
    }
  }
  builder.Finish(row_of_step);
}

void FillSummary(const Trace& t, const std::string& path, ProcessSummary& s) {
  s.pid = t.header.pid;
  s.ppid = t.header.ppid;
  s.fork_child = (t.header.flags & format::kFlagForkChild) != 0;
  s.trace_path = path;
  s.cmdline = t.cmdline;
  while (!s.cmdline.empty() && s.cmdline.back() == '\0') s.cmdline.pop_back();
  std::replace(s.cmdline.begin(), s.cmdline.end(), '\0', ' ');
  s.hostname = t.hostname;
  s.rank = t.RankValue("RANK");
  for (const reader::Lost& l : t.lost) {
    s.lost_records += l.records;
    s.lost_bytes += l.bytes;
    if (l.cause == 1) s.lost_samples += l.records;
    if (l.cause == 2) s.lost_dictionary += l.records;
    if (l.cause == 3) s.lost_kept_records += l.records;
  }
  const uint64_t end_ts = t.has_trailer ? std::max(t.trailer.ts, t.max_ts) : t.max_ts;
  s.duration_s = static_cast<double>(end_ts) / 1e9;
  s.start_real_ns = t.header.start_real_ns;
  s.clean_exit = t.has_trailer && t.trailer.clean_exit;
  s.truncated = t.truncated;
  s.truncated_at_offset = t.truncated_at_offset;
  s.unknown_refs = t.unknown_refs;
  s.sample_interval = static_cast<double>(t.header.sample_interval);
  for (const reader::Notice& n : t.notices) {
    s.notices.push_back(absl::StrCat("[", n.code, "] ", n.message));
    s.recording_stopped |= n.code != 0;  // Degrade's errno; informational notices have 0
  }
}

// Per-epoch totals from the step rows (rows with an epoch only).
std::vector<EpochRow> BuildEpochs(const std::vector<StepRow>& steps) {
  std::map<int64_t, EpochRow> by_epoch;
  for (const StepRow& row : steps) {
    if (row.epoch < 0) continue;
    auto [it, inserted] = by_epoch.try_emplace(row.epoch);
    EpochRow& e = it->second;
    if (inserted) {
      e.epoch = static_cast<uint64_t>(row.epoch);
      e.pid = row.pid;
      e.first_step = row.step;
      e.growth_bytes = -static_cast<int64_t>(row.live_bytes_end);  // fixed up below
    }
    e.last_step = row.step;
    ++e.steps;
    e.live_bytes_end = row.live_bytes_end;
    e.rss_bytes_end = row.rss_bytes_end;
    e.peak_bytes = std::max(e.peak_bytes, row.peak_bytes);
    e.duration_s += row.duration_s;
    for (const auto& [stage, peak] : row.stage_peaks) {
      uint64_t& p = e.stage_peaks[stage];
      p = std::max(p, peak);
    }
  }
  std::vector<EpochRow> out;
  const EpochRow* prev = nullptr;
  for (auto& [epoch, e] : by_epoch) {
    // Growth from the previous epoch's end, or (first epoch) from the end of
    // its own first step.
    const int64_t base =
        prev != nullptr ? static_cast<int64_t>(prev->live_bytes_end) : -e.growth_bytes;
    e.growth_bytes = static_cast<int64_t>(e.live_bytes_end) - base;
    const uint64_t span = prev != nullptr ? e.steps : std::max<uint64_t>(e.steps - 1, 1);
    e.growth_bytes_per_step = static_cast<double>(e.growth_bytes) / static_cast<double>(span);
    out.push_back(e);
    prev = &out.back();
  }
  return out;
}

using internal::MedianOf;
using internal::Project;

// The leak hunts of a trace: each begin paired with the next end, and the
// smallest T in force between them (RATE records). A begin right after an
// explained end, at the same step, is that hunt's residual hunt (progressive.cc
// ResidualBegins): a new hunt waits out a cooldown.
// Device hunts (HUNT `memory` 1) are paired among themselves; their T is
// T_dev, which RATE records do not carry: the smallest of their records'.
std::vector<ProcessSummary::Hunt> SummarizeHunts(const Trace& t, bool device) {
  std::vector<ProcessSummary::Hunt> out;
  const reader::Hunt* open = nullptr;
  const reader::Hunt* before = nullptr;  // the record before `open`
  const reader::Hunt* prev = nullptr;
  auto close = [&](const reader::Hunt* end) {
    ProcessSummary::Hunt h;
    h.device = device;
    h.residual = before != nullptr && before->phase == 1 &&
                 before->outcome == format::kHuntExplained && before->step == open->step;
    h.begin_step = open->step;
    h.end_step = end != nullptr ? end->step : open->step;
    h.rate = open->rate;
    h.min_interval = open->interval;
    if (end != nullptr && end->interval > 0)
      h.min_interval = std::min(h.min_interval, end->interval);
    const uint64_t until = end != nullptr ? end->ts : UINT64_MAX;
    for (const reader::Rate& r : t.rates) {
      if (!device && r.ts >= open->ts && r.ts <= until && r.interval > 0) {
        h.min_interval = std::min(h.min_interval, r.interval);
      }
    }
    // A hunt that screens samples its targets at its screening T (the
    // memstep.screen_interval COUNTER): the finest it sampled at.
    for (const reader::Event& e : t.events) {
      if (device || e.tag != format::kTagCounter || e.ts < open->ts || e.ts > until ||
          e.value <= 0 || t.String(e.str) != "memstep.screen_interval") {
        continue;
      }
      h.min_interval = std::min(h.min_interval, static_cast<uint64_t>(e.value));
      h.screened = true;
    }
    h.stack_ns = open->stack_ns;
    if (end != nullptr) {
      h.outcome = end->outcome;
      h.growth = end->growth;
      h.explained = end->explained;
      h.samples = end->samples;
      h.stack_ns = end->stack_ns;
    }
    out.push_back(h);
    open = nullptr;
  };
  for (const reader::Hunt& h : t.hunts) {
    if ((h.memory == format::kHuntDevice) != device) continue;
    if (h.phase == 0) {
      if (open != nullptr) close(nullptr);
      open = &h;
      before = prev;
    } else if (open != nullptr) {
      close(&h);
    }
    prev = &h;
  }
  if (open != nullptr) close(nullptr);
  return out;
}

// How to get `missing` bytes/step attributed (docs/analysis.md "Unattributed
// growth"): a larger hunt budget, or a fixed T that sees it about twice a
// step, raised until its stacks cost at most 30 % of a step, with what the
// leak then draws. The stacks' cost: the run's median allocated bytes per
// step over T (an upper bound), at the cost per stack the hunt measured (else
// an assumed 20 us).
std::string AttributeHint(const std::vector<StepRow>& steps, const ProcessSummary& ps,
                          double missing) {
  constexpr double kMaxShare = 0.3;
  std::vector<double> alloc;
  for (const StepRow& r : steps) {
    if (r.pid == ps.pid) alloc.push_back(static_cast<double>(r.alloc_bytes));
  }
  std::sort(alloc.begin(), alloc.end());
  const double per_step = alloc.empty() ? 0 : alloc[alloc.size() / 2];
  double stack_ns = 20000;
  bool measured = false;
  const ProcessSummary::Hunt* last = nullptr;  // the last host hunt
  for (const ProcessSummary::Hunt& h : ps.hunts) {
    if (h.device) continue;
    last = &h;
    if (h.stack_ns > 0) stack_ns = static_cast<double>(h.stack_ns), measured = true;
  }
  auto share = [&](double t) {
    return ps.median_step_s > 0 ? per_step / t * stack_ns * 1e-9 / ps.median_step_s : 0.0;
  };
  double T = 256;
  while (T * 2 <= missing / 2) T *= 2;
  const bool raised = share(T) > kMaxShare;
  while (share(T) > kMaxShare && T < (uint64_t{1} << 30)) T *= 2;
  std::string cost;
  if (ps.median_step_s > 0) {
    cost = absl::StrFormat(", about %.0f %% of a %.3g s step", 100 * share(T), ps.median_step_s);
  }
  // What the missing growth then draws: about missing / T samples a step.
  const double per_leak_step = missing / T;
  std::string draws =
      per_leak_step >= 1
          ? absl::StrFormat("; the missing growth then draws about %.1f samples a step",
                            per_leak_step)
          : absl::StrFormat(
                "; the missing growth then draws a sample every %.0f steps, ten in "
                "about %.0f steps",
                1 / per_leak_step, std::ceil(10 / per_leak_step));
  std::string hunt_state = "no leak hunt ran (it needs progressive sampling and a hunt budget)";
  if (last != nullptr) {
    const ProcessSummary::Hunt& h = *last;
    hunt_state =
        absl::StrFormat("the last leak hunt (steps %d-%d, T down to %d) %s", h.begin_step,
                        h.end_step, h.min_interval,
                        h.outcome == format::kHuntExplained ? "explained the growth then"
                        : h.outcome == format::kHuntStopped ? "stopped: the growth paused"
                        : h.outcome == format::kHuntGaveUp  ? "gave up within its CPU budget"
                                                            : "was still running");
  }
  return absl::StrFormat(
      "%s; to attribute it, rerun with --hunt-budget 30 (a larger share of time for the hunt), "
      "or with --sample-interval %d --fixed-interval%s: up to %.0f stacks per step at %s%.0f us "
      "each%s%s",
      hunt_state, static_cast<uint64_t>(T),
      raised ? " (raised to keep its stacks within 30 % of a step)" : "", per_step / T,
      measured ? "" : "an assumed ", stack_ns / 1000, cost, draws);
}

// The Python lines of `ps` that are LEAK (or, without `leak_only`, that
// grow: every listed one), the outermost only (a caller line holds the lines
// and sites under it: lines nest or are disjoint), and the local ids
// (index + 1) of the sites they sum.
std::vector<ProcessSummary::PythonLine*> LinesOf(ProcessSummary& ps, bool leak_only,
                                                 absl::flat_hash_set<uint64_t>* site_ids) {
  std::vector<ProcessSummary::PythonLine*> all;
  for (ProcessSummary::PythonLine& line : ps.python_lines) {
    if (leak_only && line.growth.cls != GrowthClass::kLeak) continue;
    if (!line.site_ids.empty()) all.push_back(&line);
  }
  std::stable_sort(all.begin(), all.end(), [](const auto* a, const auto* b) {
    return a->site_ids.size() > b->site_ids.size();
  });
  std::vector<ProcessSummary::PythonLine*> out;
  for (ProcessSummary::PythonLine* line : all) {
    if (site_ids->contains(line->site_ids.front())) continue;  // inside a larger one
    out.push_back(line);
    site_ids->insert(line->site_ids.begin(), line->site_ids.end());
  }
  return out;
}

// The exact heap growth of `ps` that its growing heap sites and Python lines
// do not explain, when it is above `sds` standard deviations, the exact
// series' bound and a quarter of the growth (docs/analysis.md "Unattributed
// growth"); else 0. `attributed`: what they explain.
double MissingGrowth(const std::vector<Site>& sites, const GrowthOptions& exact_options, double sds,
                     ProcessSummary& ps, double* attributed) {
  const Growth& g = ps.live_growth;
  *attributed = 0;
  if ((g.cls != GrowthClass::kLeak && g.cls != GrowthClass::kBoundedGrowth) || !(g.slope > 0)) {
    return 0;
  }
  double sum = 0, var = 0;
  auto add = [&](const Growth& gr) {
    if (gr.cls != GrowthClass::kLeak && gr.cls != GrowthClass::kBoundedGrowth) return;
    sum += gr.slope;
    const double sd = (gr.slope_high - gr.slope_low) / (2 * 1.959964);
    var += sd * sd;
  };
  // A growing Python line counts for its sites (they are part of it).
  absl::flat_hash_set<uint64_t> in_line;
  for (const ProcessSummary::PythonLine* line : LinesOf(ps, false, &in_line)) {
    add(line->growth);
  }
  for (size_t i = 0; i < sites.size(); ++i) {
    const Site& s = sites[i];
    if (s.pid != ps.pid || s.kind != SiteKind::kHost || in_line.contains(i + 1)) continue;
    add(s.growth);
  }
  const double exact_sd = (g.slope_high - g.slope_low) / (2 * 1.959964);
  var += exact_sd * exact_sd;
  *attributed = std::min(sum, g.slope);
  const double missing = g.slope - sum;
  if (!(missing > std::max(exact_options.min_rate, sds * std::sqrt(var))) ||
      !(missing > 0.25 * g.slope)) {
    return 0;
  }
  return missing;
}

// Exact heap growth that the growing heap sites do not explain
// (docs/analysis.md "Unattributed growth"), and how to get it attributed.
void Unattributed(const std::vector<Site>& sites, const std::vector<StepRow>& steps,
                  const GrowthOptions& exact_options, ProcessSummary& ps) {
  // Three standard deviations: said only when it is not sampling noise.
  const double missing = MissingGrowth(sites, exact_options, 3, ps, &ps.attributed_bytes_per_step);
  if (missing > 0) {
    ps.unattributed_bytes_per_step = missing;
    ps.attribute_hint = AttributeHint(steps, ps, missing);
  }
}

// A stage's largest run, and where in it the estimated live heap was
// highest (pass 1).
struct StageTarget {
  const std::string* name;
  StageRun run;
  double best = -1;
  size_t index = 0;  // event index (events.h) of that moment
};

// What pass 1 (the whole host replay) leaves for the rest of the analysis.
struct HostPass {
  HeapReplay replay;
  SliceTracker slices;  // with options.site_slices
  // Per site, by row (step_series.h: change points only, so memory follows
  // what the sites did, not steps x sites): live at the step end, and of it
  // what was allocated before the step.
  std::vector<StepSeries> by_step, old_by_step;
  // And the bytes its live samples hold themselves (Accumulator::live_held:
  // what ClassifyReplacedGrowth reads).
  std::vector<StepSeries> held_by_step;
  // The same while pass 1 runs: recorded at each step end for the sites
  // that changed in the step only (FinishStepSeries turns them into the
  // above), and how many sites there were at the last step end.
  StepEndSeries live_at_end, old_at_end, held_at_end;
  size_t sites_at_end = 0;
  // Per site: its allocations live at the last step end by cohort (the row
  // they were allocated in), rows increasing; only cohorts with one.
  std::vector<std::vector<CohortCell>> cohorts;
  // The largest sampling interval T in force during each row (RATE records).
  std::vector<double> interval_by_row;
  // The leak hunt's screening T in force during each row (0: not screening;
  // the memstep.screen_interval COUNTER), for the sites it targeted.
  std::vector<double> screen_by_row;
  // The largest T that applied anywhere in the trace: the one-sample term of
  // the live-bytes intervals (HtSumInterval).
  double interval_max = 0;
  double peak = -1;  // estimated live heap at its peak, in the selection
  size_t peak_index = 0;
  uint64_t peak_ts = 0;
  std::vector<StageTarget> targets;
  // The host sites right after event index k, for the run peak and the
  // stage peaks without an in-process snapshot, kept by the replay's marks
  // (what a second replay up to k would give): the capture pass then
  // replays the device only.
  std::map<size_t, std::vector<HeapReplay::Accumulator>> captured;
};

// The in-process snapshot of a stage target's peak, or null.
const reader::SiteSnapshot* StageSnapshot(const Trace& t, const StageTarget& target) {
  const reader::SiteSnapshot* found = nullptr;
  for (const reader::SiteSnapshot& snap : t.snapshots) {
    if (snap.cause == format::kSnapshotStagePeak && snap.stage == *target.name &&
        snap.step == target.run.step) {
      found = &snap;
    }
  }
  return found;
}

// The seq of the last STEP end that has a row (UINT64_MAX: none).
uint64_t LastStepEndSeq(const Trace& t, const absl::flat_hash_map<uint64_t, size_t>& row_of_step) {
  uint64_t seq = UINT64_MAX;
  for (const Event& e : t.events) {
    if (e.tag == format::kTagStep && e.phase == 1 && row_of_step.contains(e.step)) seq = e.seq;
  }
  return seq;
}

// Per-site live bytes at a step end, and (at the last one) the cohorts
// still live. Visits only the sites that changed since the previous step
// end (HeapReplay::changed_sites; set_cohort's resets included): the others
// keep the values recorded before, so the work follows the changes, not
// steps x sites (issue 11).
void RecordStepEnd(HostPass& h, size_t row, size_t rows, bool last) {
  const auto& sites = h.replay.sites();
  h.live_at_end.EndStep(row);
  h.old_at_end.EndStep(row);
  h.held_at_end.EndStep(row);
  for (uint32_t s : h.replay.changed_sites()) {
    h.live_at_end.Record(s, sites[s].live_bytes);
    h.old_at_end.Record(s, sites[s].live_bytes - sites[s].young_bytes);
    h.held_at_end.Record(s, sites[s].live_held);
  }
  h.replay.ClearChanged();
  h.sites_at_end = sites.size();
  if (last) {
    h.cohorts = LiveCohorts([&](auto fn) { h.replay.ForEachLive(fn); }, sites.size(), rows,
                            h.replay.live_allocations());
  }
}

// After pass 1: the per-row series of the sites there were at the last step
// end (none when no step ended), as setting every site's row at every step
// end would have made them.
void FinishStepSeries(HostPass& h, size_t rows) {
  h.by_step = h.live_at_end.Finish(rows, h.sites_at_end);
  h.old_by_step = h.old_at_end.Finish(rows, h.sites_at_end);
  h.held_by_step = h.held_at_end.Finish(rows, h.sites_at_end);
}

// The run's peak and each stage target's peak, found as pass 1 goes, with
// the host sites there kept by marks (HeapReplay::Mark) for the moments a
// capture pass would replay up to: the run peak (event 0 until a peak is
// found, as PlanCaptures has it), and each stage target without a snapshot,
// kept in HostPass::captured once its run is over.
class HostPeaks {
 public:
  HostPeaks(const Trace& t, HostPass& h) : h_(h), replay_(h.replay) {
    peak_mark_ = replay_.NewMark();
    target_mark_.assign(h.targets.size(), kNoMark);
    for (size_t k = 0; k < h.targets.size(); ++k) {
      if (StageSnapshot(t, h.targets[k]) == nullptr) target_mark_[k] = replay_.NewMark();
    }
  }

  // After event i (the replay has applied it); `live`: the heap after it.
  void Note(size_t i, const Event& e, double live, bool in_selection) {
    if (in_selection && live > h_.peak) {
      h_.peak = live;
      h_.peak_index = i;
      h_.peak_ts = e.ts;
      replay_.Mark(peak_mark_);
    } else if (i == 0) {
      replay_.Mark(peak_mark_);
    }
    for (size_t k = 0; k < h_.targets.size(); ++k) {
      StageTarget& st = h_.targets[k];
      if (e.seq >= st.run.begin && e.seq <= st.run.end && live > st.best) {
        st.best = live;
        st.index = i;
        if (target_mark_[k] != kNoMark) replay_.Mark(target_mark_[k]);
      } else if (e.seq > st.run.end && target_mark_[k] != kNoMark) {
        Keep(k);  // the run is over
      }
    }
  }

  // At the end of the pass.
  void Finish() {
    if (replay_.marked(peak_mark_)) h_.captured.emplace(h_.peak_index, replay_.SitesAt(peak_mark_));
    replay_.DropMark(peak_mark_);
    for (size_t k = 0; k < h_.targets.size(); ++k) {
      if (target_mark_[k] != kNoMark) Keep(k);
    }
  }

 private:
  static constexpr size_t kNoMark = SIZE_MAX;
  void Keep(size_t k) {
    if (replay_.marked(target_mark_[k])) {
      h_.captured.emplace(h_.targets[k].index, replay_.SitesAt(target_mark_[k]));
    }
    replay_.DropMark(target_mark_[k]);
    target_mark_[k] = kNoMark;
  }

  HostPass& h_;
  HeapReplay& replay_;
  size_t peak_mark_;
  std::vector<size_t> target_mark_;
};

// Pass 1: the whole replay, per-step snapshots, cohorts live at the last
// step end, the run's peak and each stage's peak within its largest run.
void ReplayHost(const Trace& t, const TraceEvents& events,
                const absl::flat_hash_map<uint64_t, size_t>& row_of_step,
                const std::map<std::string, StageRun>& max_run, const Options& options, size_t rows,
                DeviceAnalysis* device, ProcessResult& r, HostPass& h) {
  const uint64_t last_step_end = LastStepEndSeq(t, row_of_step);
  h.interval_by_row.assign(rows, static_cast<double>(t.header.sample_interval));
  h.screen_by_row.assign(rows, 0.0);
  double screen_now = 0;
  std::vector<reader::Rate> rates(t.rates.begin(), t.rates.end());
  std::stable_sort(rates.begin(), rates.end(),
                   [](const reader::Rate& a, const reader::Rate& b) { return a.ts < b.ts; });
  size_t next_rate = 0;
  double interval_now = static_cast<double>(t.header.sample_interval);
  h.interval_max = interval_now;
  for (const reader::Rate& rate : rates) {
    h.interval_max = std::max(h.interval_max, static_cast<double>(rate.interval));
  }
  size_t row_now = 0;
  for (const auto& [name, run] : max_run) h.targets.push_back(StageTarget{&name, run});
  HeapReplay& replay = h.replay;
  HostPeaks peaks(t, h);
  // --steps A:B: what was allocated before step A belongs to no step's
  // cohort, and the estimated peak is looked for from step A's begin on.
  bool in_selection = options.first_step <= 0;
  if (!in_selection) replay.set_cohort(UINT32_MAX);
  events.ForEach([&](size_t i, const Event& e) {
    if (device != nullptr) device->Apply(i, e);  // the device pass rides on this one
    while (next_rate < rates.size() && rates[next_rate].ts <= e.ts) {
      interval_now = static_cast<double>(rates[next_rate++].interval);
      if (row_now < rows)
        h.interval_by_row[row_now] = std::max(h.interval_by_row[row_now], interval_now);
    }
    if (e.tag == format::kTagCounter && t.String(e.str) == "memstep.screen_interval") {
      screen_now = static_cast<double>(e.value);
    }
    if (e.tag == format::kTagStep && e.phase == 0) {
      if (auto row = row_of_step.find(e.step); row != row_of_step.end()) {
        replay.set_cohort(static_cast<uint32_t>(row->second));
        row_now = row->second;
        if (row_now < rows) {
          h.interval_by_row[row_now] = interval_now;
          h.screen_by_row[row_now] = screen_now;
        }
        replay.set_in_step(true);
        in_selection = true;
      }
    }
    replay.Apply(e);
    if (options.site_slices && in_selection) h.slices.Apply(e, t);
    if (e.tag == format::kTagAlloc || e.tag == format::kTagMmap) ++r.summary.samples;
    peaks.Note(i, e, replay.host_live_bytes(), in_selection);
    if (e.tag == format::kTagStep && e.phase == 1) {
      auto row = row_of_step.find(e.step);
      if (row == row_of_step.end()) return;
      replay.set_in_step(false);
      RecordStepEnd(h, row->second, rows, e.seq == last_step_end);
      // Between steps, allocations belong to the next step.
      replay.set_cohort(static_cast<uint32_t>(std::min(row->second + 1, rows - 1)));
    }
  });
  peaks.Finish();
  FinishStepSeries(h, rows);
  // A running sum of sample weights added and taken away: what is left when
  // every sample was freed is rounding (the report printed "-0 B"); a live
  // sample weighs at least a byte.
  const double est_live = replay.host_live_bytes();
  r.summary.est_live_bytes_end = est_live < 0.5 ? 0.0 : est_live;
  r.summary.est_peak_bytes = std::max(h.peak, 0.0);
  r.summary.est_peak_time_s = static_cast<double>(h.peak_ts) / 1e9;
}

// What the capture pass keeps: each site's live bytes right after given
// events, host (HeapReplay) and device (DeviceReplay).
struct Captured {
  std::map<size_t, std::vector<HeapReplay::Accumulator>> host;
  std::map<size_t, std::vector<DeviceReplay::SiteAcc>> device;
};

// The capture pass: replays up to each capture point (event indices, host
// and device) and keeps what each site had live there. Stops after the last
// one. Only for moments the replay pass's marks did not keep (ReplayHost,
// DeviceAnalysis::Kept): normally it does not run.
Captured CapturePass(const TraceEvents& events, HostRounding rounding, std::vector<size_t> host,
                     std::vector<size_t> device) {
  for (std::vector<size_t>* v : {&host, &device}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  Captured out;
  if (host.empty() && device.empty()) return out;
  const size_t last = std::max(host.empty() ? 0 : host.back(), device.empty() ? 0 : device.back());
  HeapReplay heap;
  heap.set_rounding(rounding);
  DeviceReplay dev;
  size_t next_host = 0, next_device = 0;
  const bool with_host = !host.empty();
  events.ForEachUntil([&](size_t i, const Event& e) {
    if (with_host) heap.Apply(e);
    dev.Apply(e);
    if (next_host < host.size() && i == host[next_host]) out.host[host[next_host++]] = heap.sites();
    if (next_device < device.size() && i == device[next_device]) {
      out.device[device[next_device++]] = dev.sites();
    }
    return i < last;
  });
  return out;
}

// Host sites by stack: stack -> index in the replay's sites.
absl::flat_hash_map<uint64_t, uint32_t> HostSiteIndex(const HeapReplay& replay) {
  absl::flat_hash_map<uint64_t, uint32_t> host_site;
  for (size_t i = 0; i < replay.sites().size(); ++i) {
    if (replay.sites()[i].key.kind == HeapReplay::Kind::kHost) {
      host_site[replay.sites()[i].key.stack] = static_cast<uint32_t>(i);
    }
  }
  return host_site;
}

// The moments pass 2 captures: the run peak and the stage peaks without an
// in-process snapshot (`snapshot_of[k]`: the snapshot of target k, or null).
std::vector<size_t> PlanCaptures(const Trace& t, const HostPass& h,
                                 std::vector<const reader::SiteSnapshot*>& snapshot_of) {
  const std::vector<StageTarget>& targets = h.targets;
  std::vector<size_t> captures = {h.peak_index};
  snapshot_of.assign(targets.size(), nullptr);
  for (size_t k = 0; k < targets.size(); ++k) {
    snapshot_of[k] = StageSnapshot(t, targets[k]);
    if (snapshot_of[k] == nullptr && targets[k].best >= 0) captures.push_back(targets[k].index);
  }
  return captures;
}

// The top sites of a stage peak from the process' in-process snapshot.
void SnapshotTopSites(const reader::SiteSnapshot& snapshot,
                      const absl::flat_hash_map<uint64_t, uint32_t>& host_site, double interval_max,
                      StagePeak& sp) {
  sp.top_source = "snapshot";
  for (const auto& site : snapshot.sites) {
    PeakSite ps;
    ps.stack_id = site.stack;
    auto it = host_site.find(site.stack);
    ps.site_id = it != host_site.end() ? it->second + 1 : 0;
    ps.live_bytes = static_cast<double>(site.live_bytes);
    ps.live_count = static_cast<double>(site.live_count);
    // The snapshot keeps no variance; sum (s/p)^2 (1 - p) <= (s/p) T for
    // every sample (s (1-p)/p = s / (e^((s+1)/T) - 1) < T), so bytes x T
    // bounds it.
    const HtInterval ci = HtSumInterval(ps.live_bytes, ps.live_bytes * interval_max, interval_max);
    ps.live_bytes_low = ci.low;
    ps.live_bytes_high = ci.high;
    sp.top_sites.push_back(ps);
  }
}

// The top sites of a stage peak from the capture pass' replay there.
void ReplayTopSites(const std::vector<HeapReplay::Accumulator>& at, double interval_max,
                    StagePeak& sp) {
  sp.top_source = "replay";
  for (size_t i = 0; i < at.size(); ++i) {
    const HeapReplay::Accumulator& a = at[i];
    if (a.key.kind != HeapReplay::Kind::kHost || a.live_bytes <= 0) continue;
    PeakSite ps{i + 1, a.key.stack, a.live_bytes, a.live_count};
    const HtInterval ci = HtSumInterval(a.live_bytes, a.live_var, interval_max);
    ps.live_bytes_low = ci.low;
    ps.live_bytes_high = ci.high;
    sp.top_sites.push_back(ps);
  }
}

// The host peak of one stage: its largest run, its median over the steps,
// the sites live at the largest (from a snapshot, or from the capture).
StagePeak HostStagePeak(const Trace& t, const ProcessResult& r, const StageTarget& st,
                        const reader::SiteSnapshot* snapshot,
                        const std::map<size_t, std::vector<HeapReplay::Accumulator>>& captured,
                        const absl::flat_hash_map<uint64_t, uint32_t>& host_site,
                        double interval_max, const Options& options) {
  StagePeak sp;
  sp.pid = t.header.pid;
  sp.stage = *st.name;
  sp.peak_bytes_max = st.run.peak;
  sp.step_of_max = st.run.step;
  std::vector<uint64_t> per_step;
  for (const StepRow& row : r.steps) {
    auto it = row.stage_peaks.find(sp.stage);
    if (it != row.stage_peaks.end()) per_step.push_back(it->second);
  }
  sp.steps = per_step.size();
  sp.peak_bytes_median = MedianOf(per_step);
  if (snapshot != nullptr) {
    SnapshotTopSites(*snapshot, host_site, interval_max, sp);
  } else if (auto it = captured.find(st.index); st.best >= 0 && it != captured.end()) {
    ReplayTopSites(it->second, interval_max, sp);
  }
  std::stable_sort(
      sp.top_sites.begin(), sp.top_sites.end(),
      [](const PeakSite& a, const PeakSite& b) { return a.live_bytes > b.live_bytes; });
  if (sp.top_sites.size() > options.top_peak_sites) sp.top_sites.resize(options.top_peak_sites);
  return sp;
}

// The alert's rule as live_model.h names it; "rule N" for a rule this
// version does not know.
std::string AlertRowRule(uint8_t rule) {
  const char* name = AlertRuleName(rule);
  return strcmp(name, "unknown") == 0 ? absl::StrCat("rule ", rule) : std::string(name);
}

AlertRow MakeAlertRow(const Trace& t, const reader::Alert& a,
                      const absl::flat_hash_map<uint64_t, uint32_t>& host_site) {
  AlertRow row;
  row.pid = t.header.pid;
  row.step = a.step;
  row.time_s = static_cast<double>(a.ts) / 1e9;
  row.rule = AlertRowRule(a.rule);
  row.value = a.value;
  row.threshold = a.threshold;
  row.stage = a.stage;
  auto it = host_site.find(a.site_stack);
  row.site_id = a.site_stack != 0 && it != host_site.end() ? it->second + 1 : 0;
  return row;
}

// The process' exact series and what its growth is judged against.
struct ProcessSeries {
  std::vector<double> live, rss;  // per row: live heap, RSS at the step end
  bool have_rss = false;
  GrowthOptions exact;  // effect-size bounds of the exact series
  double used = 0;      // max(RSS, live) at the end
  double limit = 0;     // the memory limit
};

// The exact series' effect-size bounds: the exact live series has no
// sampling noise, so its bounds are 32x smaller than a call site's (512
// B/step, 32 KiB): a small leak that survives the trend, persistence and
// window-growth tests is still a leak (PyTorch's "keep the loss with its
// graph" leaks a few KiB per step). A bound the user set (--leak-min-rate,
// --leak-min-growth) applies as given.
GrowthOptions ExactSeriesOptions(const GrowthOptions& growth) {
  GrowthOptions exact = growth;
  const GrowthOptions defaults;
  if (exact.min_rate == defaults.min_rate) exact.min_rate /= kExactSeriesBoundDivisor;
  if (exact.min_window_growth == defaults.min_window_growth) {
    exact.min_window_growth /= kExactSeriesBoundDivisor;
  }
  return exact;
}

// Growth of the process: median step time, warm-up, the exact live heap's
// and RSS's classes, fragmentation, the projection to the memory limit.
ProcessSeries ClassifyProcess(ProcessResult& r, const Options& options, uint64_t memory_limit) {
  const size_t rows = r.steps.size();
  ProcessSummary& ps = r.summary;
  ProcessSeries out;
  out.live.resize(rows);
  out.rss.resize(rows);
  std::vector<double> durations;
  for (size_t k = 0; k < rows; ++k) {
    out.live[k] = static_cast<double>(r.steps[k].live_bytes_end);
    out.rss[k] = static_cast<double>(r.steps[k].rss_bytes_end);
    if (r.steps[k].duration_s > 0) durations.push_back(r.steps[k].duration_s);
  }
  if (!durations.empty()) {
    std::sort(durations.begin(), durations.end());
    ps.median_step_s = durations[durations.size() / 2];
  }
  const size_t detected = DetectWarmup(out.live, 0.25, options.growth.min_window);
  const size_t configured =
      options.warmup_steps > 0 ? static_cast<size_t>(options.warmup_steps) : 0;
  ps.warmup_steps = std::max(detected, configured);
  ps.warmup_detected = detected > configured;
  out.exact = ExactSeriesOptions(options.growth);
  ps.live_growth =
      ClassifyGrowth(GrowthInput{out.live, {}, {}, {}, {}, {}, {}, {}}, ps.warmup_steps, out.exact);
  out.have_rss = std::any_of(out.rss.begin(), out.rss.end(), [](double v) { return v > 0; });
  if (out.have_rss) {
    GrowthOptions rss_options = options.growth;
    rss_options.piles = false;
    ps.rss_growth = ClassifyGrowth(GrowthInput{out.rss, {}, {}, {}, {}, {}, {}, {}},
                                   ps.warmup_steps, rss_options);
    const auto rises = [&](const Growth& g) {
      return g.window > 0 && g.p_value < options.growth.p_value && g.slope > 0;
    };
    ps.fragmentation = rises(ps.rss_growth) &&
                       ps.rss_growth.slope * static_cast<double>(ps.rss_growth.window) >=
                           options.growth.min_window_growth &&
                       !rises(ps.live_growth);
  }
  out.used = static_cast<double>(std::max(ps.rss_bytes_end, ps.live_bytes_end));
  out.limit = static_cast<double>(memory_limit);
  if (ps.live_growth.cls == GrowthClass::kLeak) {
    Project(ps.live_growth.slope, out.used, out.limit, ps.median_step_s, &ps.steps_to_limit,
            &ps.seconds_to_limit);
  }
  return out;
}

// What each host or mmap site of one process is built from.
struct HostSiteContext {
  const Trace& t;
  const HostPass& h;
  const Options& options;
  const GrowthOptions& site_options;
  const ProcessSummary& ps;
  const ProcessSeries& series;
  const std::vector<HeapReplay::Accumulator>& peak_sites;  // live at the run peak
  size_t rows;
  double interval_max;
  double step_alloc_bytes = 0, step_alloc_count = 0;  // exact, in the steps (churn shares)
};

// Site i's live bytes at the end, at the run peak and at each step end.
void FillHostSiteLive(const HostSiteContext& c, size_t i, const HeapReplay::Accumulator& a,
                      Site& s) {
  static const HeapReplay::Accumulator empty_acc{};
  s.live_bytes_end = std::max(a.live_bytes, 0.0);
  s.live_count_end = std::max(a.live_count, 0.0);
  const HeapReplay::Accumulator& at_peak = i < c.peak_sites.size() ? c.peak_sites[i] : empty_acc;
  s.live_bytes_at_peak = std::max(at_peak.live_bytes, 0.0);
  if (s.kind == SiteKind::kHost) {  // mmap sites are exact
    const HtInterval end_ci = HtSumInterval(s.live_bytes_end, a.live_var, c.interval_max);
    s.live_bytes_end_low = end_ci.low;
    s.live_bytes_end_high = end_ci.high;
    const HtInterval peak_ci =
        HtSumInterval(s.live_bytes_at_peak, at_peak.live_var, c.interval_max);
    s.live_bytes_at_peak_low = peak_ci.low;
    s.live_bytes_at_peak_high = peak_ci.high;
  }
  s.live_bytes_by_step = i < c.h.by_step.size() ? c.h.by_step[i] : StepSeries(c.rows);
  s.live_bytes_by_step.resize(c.rows);
}

// The classified series of site i is the long-lived part: live at the step
// end and allocated before the step began (docs/analysis.md), with the
// cohorts still live at the end. Written densely into `in`, whose buffers
// every site reuses (one site's rows at a time, never steps x sites).
void HostSiteGrowthInput(const HostSiteContext& c, size_t i, const HeapReplay::Accumulator& a,
                         GrowthInput& in) {
  const HostPass& h = c.h;
  const size_t rows = c.rows;
  in.y.assign(rows, 0.0);
  if (i < h.old_by_step.size()) {
    size_t k = 0;
    for (double v : h.old_by_step[i]) {
      if (k >= rows) break;
      in.y[k++] = std::max(v, 0.0);
    }
  }
  SetCohorts(i < h.cohorts.size() ? &h.cohorts[i] : nullptr, rows, &in);
  if (a.key.kind == HeapReplay::Kind::kHost) {
    in.interval_by_row = h.interval_by_row;
    TargetRows(h.screen_by_row, &in);
  } else {
    in.interval_by_row.assign(rows, 0.0);
  }
}

// The growth class of a site (and, for a leak, its projection).
void ClassifyHostSite(const HostSiteContext& c, size_t i, const GrowthInput& in, Site& s) {
  const ProcessSummary& ps = c.ps;
  s.growth = ClassifySiteGrowth(in, ps.warmup_steps, c.site_options);
  // A buffer that grows by being reallocated or replaced keeps nothing old:
  // its cohorts miss it, its whole live series does not (growth.h).
  const StepSeries none(c.rows);
  const StepSeries& held = i < c.h.held_by_step.size() ? c.h.held_by_step[i] : none;
  s.growth = ClassifyReplacedGrowth(held, in, s.growth, c.site_options);
  if (s.growth.cls == GrowthClass::kLeak) {
    Project(s.growth.slope, c.series.used, c.series.limit, ps.median_step_s, &s.steps_to_limit,
            &s.seconds_to_limit);
  }
}

// Host or mmap site i of the replay, but for its growth class.
Site MakeHostSite(const HostSiteContext& c, FrameResolver& resolver, size_t i) {
  const HeapReplay::Accumulator& a = c.h.replay.sites()[i];
  Site s;
  s.kind = a.key.kind == HeapReplay::Kind::kHost ? SiteKind::kHost : SiteKind::kMmap;
  s.pid = c.t.header.pid;
  s.stack_id = a.key.stack;
  s.frames = resolver.Resolve(a.key.stack, a.first_ts);
  s.samples = a.samples;
  if (s.kind == SiteKind::kHost) {
    s.allocator = a.pymalloc_samples == 0           ? "malloc"
                  : a.pymalloc_samples == a.samples ? "pymalloc"
                                                    : "mixed";
  }
  s.alloc_bytes = a.alloc_bytes;
  s.alloc_count = a.alloc_count;
  FillChurn(a, c.rows, c.step_alloc_bytes, c.step_alloc_count, c.interval_max, s);
  if (c.options.site_slices && s.kind == SiteKind::kHost)
    s.slices = c.h.slices.SlicesOf(a.key.stack);
  FillHostSiteLive(c, i, a, s);
  return s;
}

// A Python frame a line is made of: not one of 3.10/3.11's list, dict and
// set comprehensions (their line is their caller's, and 3.12 runs them
// inline, in the caller's frame).
bool LineFrame(const Frame& f) {
  return f.module == "<python>" && !absl::EndsWith(f.function, "<listcomp>") &&
         !absl::EndsWith(f.function, "<dictcomp>") && !absl::EndsWith(f.function, "<setcomp>");
}

// One Python frame's part of a line key: function, file, line.
std::string FrameKey(const Frame& f) {
  return absl::StrCat(f.function, "\x1f", f.file, "\x1f", f.line, "\x1e");
}

// Adds a site's cohorts to the part of a line's sum (GrowthInput::parts)
// whose rows have the same T as the site's: weighted alike, their cohorts
// can be summed before the weighted mean. Most sites share the process's
// rows; each first row a hunt targeted a site from makes one more part.
void AddToPart(const GrowthInput& site, size_t rows, std::vector<GrowthInput>& parts) {
  GrowthInput* part = nullptr;
  for (GrowthInput& p : parts) {
    if (p.interval_by_row == site.interval_by_row) part = &p;
  }
  if (part == nullptr) {
    part = &parts.emplace_back();
    part->interval_by_row = site.interval_by_row;
    part->end_bytes_by_cohort.assign(rows, 0.0);
    part->end_samples_by_cohort.assign(rows, 0.0);
    part->end_var_by_cohort.assign(rows, 0.0);
    part->end_block_by_cohort.assign(rows, 0.0);
  }
  for (size_t k = 0; k < rows; ++k) {
    part->end_bytes_by_cohort[k] += site.end_bytes_by_cohort[k];
    part->end_samples_by_cohort[k] += site.end_samples_by_cohort[k];
    part->end_var_by_cohort[k] += site.end_var_by_cohort[k];
    if (k < site.end_block_by_cohort.size()) {
      part->end_block_by_cohort[k] =
          std::max(part->end_block_by_cohort[k], site.end_block_by_cohort[k]);
    }
  }
}

// The host sites `members` (indexes into the pass) summed as one line and
// classified as one site's series: series, cohorts' bytes, samples and
// variances add up, and the cohorts' rate is the sum of its parts' (each
// weighted by its own rows' T: a site a hunt targeted has its rows at the
// screening T, TargetRows). Frames, interval and projection are the
// caller's (FinishLine).
ProcessSummary::PythonLine SumLine(const HostSiteContext& c, size_t first,
                                   const std::vector<size_t>& members, const ProcessResult& r,
                                   const GrowthOptions& options, double* live_var) {
  const auto& acc = c.h.replay.sites();
  GrowthInput in, one;
  in.y.assign(c.rows, 0.0);
  in.end_bytes_by_cohort.assign(c.rows, 0.0);
  in.end_samples_by_cohort.assign(c.rows, 0.0);
  in.end_var_by_cohort.assign(c.rows, 0.0);
  ProcessSummary::PythonLine line;
  *live_var = 0;
  for (const size_t i : members) {
    HostSiteGrowthInput(c, i, acc[i], one);
    AddToPart(one, c.rows, in.parts);
    for (size_t k = 0; k < c.rows; ++k) {
      in.y[k] += one.y[k];
      in.end_bytes_by_cohort[k] += one.end_bytes_by_cohort[k];
      in.end_samples_by_cohort[k] += one.end_samples_by_cohort[k];
      in.end_var_by_cohort[k] += one.end_var_by_cohort[k];
    }
    const Site& s = r.sites[first + i];
    line.site_ids.push_back(first + i + 1);
    line.live_bytes_end += s.live_bytes_end;
    if (c.rows > 0 && s.live_bytes_by_step.size() >= c.rows) {
      line.live_bytes_last_step += s.live_bytes_by_step[c.rows - 1];
    }
    line.samples += static_cast<double>(s.samples);
    *live_var += acc[i].live_var;
  }
  line.growth = ClassifySiteGrowth(in, c.ps.warmup_steps, options);
  return line;
}

// A growing line's interval of live bytes at the end, frames and projection.
void FinishLine(const HostSiteContext& c, double live_var, std::vector<Frame> frames,
                ProcessSummary::PythonLine& line) {
  const HtInterval ci = HtSumInterval(line.live_bytes_end, live_var, c.interval_max);
  line.live_bytes_end_low = ci.low;
  line.live_bytes_end_high = ci.high;
  line.frames = std::move(frames);
  if (line.growth.cls == GrowthClass::kLeak) {
    Project(line.growth.slope, c.series.used, c.series.limit, c.ps.median_step_s,
            &line.steps_to_limit, &line.seconds_to_limit);
  }
}

// Where the host sites of a process meet in Python: for each site, its
// Python frames (LineFrame), innermost first, the key of all of them (its
// Python line) and a hash of each suffix (the frames from that one
// outwards: the lines it was allocated under, CallerGroups). Hashes, not
// strings: the suffixes' strings of a 60-frame stack would take hundreds
// of KiB a site.
struct SiteLines {
  std::vector<Frame> frames;
  std::string key;               // all of frames as one key; "" without one
  std::vector<uint64_t> suffix;  // suffix[i]: a hash of frames[i..], never 0
};

// A 64-bit mix of a frame's hash and its callers' (splitmix64's finalizer):
// the same in every run, so that the groups, and the report, are too.
uint64_t MixSuffix(uint64_t frame, uint64_t outer) {
  uint64_t x = frame ^ (outer + 0x9e3779b97f4a7c15ull + (outer << 6) + (outer >> 2));
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return (x ^ (x >> 31)) | 1;
}

SiteLines LinesOfSite(const Site& s) {
  SiteLines l;
  for (const Frame& f : s.frames) {
    if (LineFrame(f)) l.frames.push_back(f);
  }
  l.suffix.resize(l.frames.size());
  for (size_t i = l.frames.size(); i-- > 0;) {
    const std::string part = FrameKey(l.frames[i]);
    const uint64_t outer = i + 1 < l.frames.size() ? l.suffix[i + 1] : 0;
    l.suffix[i] = MixSuffix(std::hash<std::string>{}(part), outer);
  }
  for (const Frame& f : l.frames) l.key += FrameKey(f);
  return l;
}

// Python lines (ProcessSummary::PythonLine): the host sites from `first`
// summed by Python line (all of their Python frames), where two or more
// sites share them, each sum classified as one site's series.
void BuildPythonLines(const HostSiteContext& c, size_t first,
                      const std::vector<SiteLines>& lines_of, ProcessResult& r) {
  std::map<std::string, std::vector<size_t>> by_line;
  for (size_t i = 0; i < lines_of.size(); ++i) {
    if (!lines_of[i].key.empty()) by_line[lines_of[i].key].push_back(i);
  }
  for (const auto& [key, members] : by_line) {
    if (members.size() < 2) continue;
    double live_var = 0;
    ProcessSummary::PythonLine line = SumLine(c, first, members, r, c.site_options, &live_var);
    if (line.growth.cls != GrowthClass::kLeak && line.growth.cls != GrowthClass::kBoundedGrowth) {
      continue;
    }
    FinishLine(c, live_var, lines_of[members[0]].frames, line);
    r.summary.python_lines.push_back(std::move(line));
  }
}

// A Python line with every host site allocated under it (CallerGroups).
struct CallerGroup {
  std::vector<size_t> members;
  absl::flat_hash_set<uint64_t> children;  // the next deeper suffixes; 0: the line itself
  bool callee = false;                     // some member was allocated in a callee
  size_t depth = 0;                        // frames in the key
  const SiteLines* of = nullptr;           // a member's frames, from `at` outwards
  size_t at = 0;
  double growth = 0;  // members' estimated growth over the window (to rank them)
};

// The sites of `lines_of` grouped by each suffix of their Python frames.
absl::flat_hash_map<uint64_t, CallerGroup> CallerGroups(const HostSiteContext& c, size_t first,
                                                        const std::vector<SiteLines>& lines_of,
                                                        const ProcessResult& r) {
  absl::flat_hash_map<uint64_t, CallerGroup> groups;
  const size_t w = std::min<size_t>(c.ps.warmup_steps, c.rows > 0 ? c.rows - 1 : 0);
  for (size_t i = 0; i < lines_of.size(); ++i) {
    const SiteLines& l = lines_of[i];
    const Site& s = r.sites[first + i];
    const double grew = c.rows > 0 && s.live_bytes_by_step.size() >= c.rows
                            ? s.live_bytes_by_step[c.rows - 1] - s.live_bytes_by_step[w]
                            : 0.0;
    for (size_t k = 0; k < l.suffix.size(); ++k) {
      CallerGroup& g = groups[l.suffix[k]];
      g.members.push_back(i);
      g.children.insert(k == 0 ? 0 : l.suffix[k - 1]);
      g.callee |= k > 0;
      g.depth = l.suffix.size() - k;
      g.of = &l;
      g.at = k;
      g.growth += grew;
    }
  }
  return groups;
}

// What is already named, as a set of local site ids (sorted) and a rate.
struct NamedUnit {
  std::vector<uint64_t> ids;
  double rate;
};

// The rates of the named units inside `ids` (sorted), each counted once: the
// largest first, and lines nest or are disjoint, so a unit whose first site
// is covered is inside one already counted.
double ExplainedInside(const std::vector<uint64_t>& ids, const std::vector<NamedUnit>& units) {
  std::vector<const NamedUnit*> inside;
  for (const NamedUnit& u : units) {
    if (std::includes(ids.begin(), ids.end(), u.ids.begin(), u.ids.end())) inside.push_back(&u);
  }
  std::stable_sort(inside.begin(), inside.end(), [](const NamedUnit* a, const NamedUnit* b) {
    return a->ids.size() > b->ids.size();
  });
  absl::flat_hash_set<uint64_t> covered;
  double explained = 0;
  for (const NamedUnit* u : inside) {
    if (covered.contains(u->ids.front())) continue;
    explained += u->rate;
    covered.insert(u->ids.begin(), u->ids.end());
  }
  return explained;
}

// Caller lines (docs/analysis.md "Caller lines"): when the exact heap grows
// and its growing sites and lines leave part of it unexplained, the host
// sites summed by each Python line they were allocated under, callees
// included (an object made on one line whose attributes are made in its
// constructor's lines: each part too small to stand out). Such a line is
// listed when its sum is LEAK and its rate's lower bound exceeds what the
// LEAK sites and lines inside it explain; innermost first, so that the
// lines outside it (the training loop, main) are listed only when they hold
// still more.
void BuildCallerLines(const HostSiteContext& c, size_t first,
                      const std::vector<SiteLines>& lines_of, ProcessResult& r) {
  // A screening test, one-sided at 5 % (1.645 standard deviations): each
  // candidate then passes its own. At three, as the report's unattributed
  // growth, a leak spread over a constructor's lines went unsearched while a
  // third of it was unnamed (its exact rate's interval 1.4-2.3 kB/step).
  double attributed = 0;
  if (!(MissingGrowth(r.sites, c.series.exact, 1.645, r.summary, &attributed) > 0)) return;
  absl::flat_hash_map<uint64_t, CallerGroup> groups = CallerGroups(c, first, lines_of, r);
  std::vector<CallerGroup*> candidates;
  for (auto& [key, g] : groups) {
    if (g.callee && g.children.size() >= 2 && g.growth > 0) candidates.push_back(&g);
  }
  // The fastest-growing first, at most 256 (each costs a sum of series);
  // then innermost first: a line is weighed against the lines inside it.
  // Ties by first site and depth (a site's suffix of one depth is one
  // group): the map's order is not the same from run to run.
  std::sort(candidates.begin(), candidates.end(), [](const CallerGroup* a, const CallerGroup* b) {
    if (a->growth != b->growth) return a->growth > b->growth;
    if (a->members[0] != b->members[0]) return a->members[0] < b->members[0];
    return a->depth > b->depth;
  });
  if (candidates.size() > 256) candidates.resize(256);
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const CallerGroup* a, const CallerGroup* b) { return a->depth > b->depth; });
  std::vector<NamedUnit> units;
  for (size_t i = 0; i < lines_of.size(); ++i) {
    const Growth& g = r.sites[first + i].growth;
    if (g.cls == GrowthClass::kLeak) units.push_back({{first + i + 1}, g.slope});
  }
  for (const ProcessSummary::PythonLine& line : r.summary.python_lines) {
    if (line.growth.cls != GrowthClass::kLeak) continue;
    NamedUnit u{line.site_ids, line.growth.slope};
    std::sort(u.ids.begin(), u.ids.end());
    units.push_back(std::move(u));
  }
  // Each candidate is one more trend test: their level is the sites' over
  // the number tested (Bonferroni), so that a process's caller lines are
  // falsely LEAK no more often than one site is. Without it, a leak-free DDP
  // rank's main() read LEAK at 29 KiB/step (p = 2.6e-4) from a few early
  // samples of 512 KiB weight among 179 sites.
  GrowthOptions options = c.site_options;
  options.p_value /= static_cast<double>(std::max<size_t>(1, candidates.size()));
  const Growth& heap = r.summary.live_growth;
  for (CallerGroup* g : candidates) {
    double live_var = 0;
    ProcessSummary::PythonLine line = SumLine(c, first, g->members, r, options, &live_var);
    if (line.growth.cls != GrowthClass::kLeak) continue;
    // Part of the heap cannot grow faster than all of it.
    if (line.growth.slope_low > heap.slope_high) continue;
    std::vector<uint64_t> ids = line.site_ids;
    std::sort(ids.begin(), ids.end());
    // It must hold significantly more than what is named inside it, and a
    // share of its own worth naming (as unattributed growth must be): else
    // main()'s call, which holds everything, reads LEAK for the sum of the
    // leaks named inside it and some small growth elsewhere.
    const double explained = ExplainedInside(ids, units);
    const double rest = line.growth.slope - explained;
    if (!(line.growth.slope_low > explained) ||
        !(rest > std::max(c.site_options.min_rate, 0.25 * line.growth.slope))) {
      continue;
    }
    line.callees = true;
    units.push_back({std::move(ids), line.growth.slope});
    FinishLine(c, live_var,
               std::vector<Frame>(g->of->frames.begin() + static_cast<std::ptrdiff_t>(g->at),
                                  g->of->frames.end()),
               line);
    r.summary.python_lines.push_back(std::move(line));
  }
}

// A LEAK line holding sites the calibration rescaled moves with them: its
// rate gains what they gained (the line of one calibrated site read 3.0
// KiB/step [2.1, 4.4] beside the site's 4.4 KiB/step, calibrated to the
// exact heap's), its interval the hull of its own and its own scaled by the
// same ratio, as a calibrated site's (calibrate.h). Returns whether it moved.
bool FollowCalibratedSites(const std::vector<Site>& sites, ProcessSummary::PythonLine& line) {
  Growth& g = line.growth;
  if (g.cls != GrowthClass::kLeak || g.calibrated || !(g.slope > 0)) return false;
  double gained = 0;
  bool any = false;
  for (uint64_t id : line.site_ids) {
    if (id == 0 || id > sites.size() || !sites[id - 1].growth.calibrated) continue;
    const Growth& s = sites[id - 1].growth;
    gained += s.slope - s.sampled_slope;
    any = true;
  }
  if (!any || !(g.slope + gained > 0)) return false;
  const double factor = (g.slope + gained) / g.slope;
  g.sampled_slope = g.slope;
  g.calibrated = true;
  g.slope *= factor;
  g.slope_low = std::min(g.slope_low, g.slope_low * factor);
  g.slope_high = std::max(g.slope_high, g.slope_high * factor);
  return true;
}

// Sampled leak rates rescaled to the exact heap growth when they account
// for it (calibrate.h); projections follow the calibrated rate, and the
// lines holding calibrated sites follow them.
void CalibrateSites(const ProcessSeries& series, ProcessResult& r) {
  const ProcessSummary& ps = r.summary;
  std::vector<Growth*> heap_sites;
  for (Site& s : r.sites) {
    if (s.kind == SiteKind::kHost) heap_sites.push_back(&s.growth);
  }
  // A listed caller line holds significantly more than the LEAK sites inside
  // it: the sites alone do not account for the growth, whatever their
  // intervals allow.
  const bool callers = std::any_of(ps.python_lines.begin(), ps.python_lines.end(),
                                   [](const ProcessSummary::PythonLine& l) { return l.callees; });
  if (!callers && CalibrateLeakRates(ps.live_growth, heap_sites).applied) {
    for (Site& s : r.sites) {
      if (!s.growth.calibrated) continue;
      Project(s.growth.slope, series.used, series.limit, ps.median_step_s, &s.steps_to_limit,
              &s.seconds_to_limit);
    }
    for (ProcessSummary::PythonLine& line : r.summary.python_lines) {
      if (!FollowCalibratedSites(r.sites, line)) continue;
      Project(line.growth.slope, series.used, series.limit, ps.median_step_s, &line.steps_to_limit,
              &line.seconds_to_limit);
    }
    return;
  }
  // No site alone accounts for the growth: the LEAK Python lines with the
  // sites outside them may (a line whose objects come from several native
  // paths, none LEAK by itself).
  std::vector<Growth*> units;
  absl::flat_hash_set<uint64_t> in_line;
  for (ProcessSummary::PythonLine* line : LinesOf(r.summary, true, &in_line)) {
    units.push_back(&line->growth);
  }
  if (units.empty()) return;
  for (size_t i = 0; i < r.sites.size(); ++i) {
    if (r.sites[i].kind == SiteKind::kHost && !in_line.contains(i + 1)) {
      units.push_back(&r.sites[i].growth);
    }
  }
  if (!CalibrateLeakRates(ps.live_growth, units).applied) return;
  for (Site& s : r.sites) {
    if (!s.growth.calibrated) continue;
    Project(s.growth.slope, series.used, series.limit, ps.median_step_s, &s.steps_to_limit,
            &s.seconds_to_limit);
  }
  for (ProcessSummary::PythonLine& line : r.summary.python_lines) {
    if (!line.growth.calibrated) continue;
    Project(line.growth.slope, series.used, series.limit, ps.median_step_s, &line.steps_to_limit,
            &line.seconds_to_limit);
  }
}

// RSS growth explained (rss_explain.h): after the sites, which may pin it.
void ExplainRssGrowth(const Trace& t, const absl::flat_hash_map<uint64_t, size_t>& row_of_step,
                      const ProcessSeries& series, const Options& options, ProcessResult& r) {
  if (!series.have_rss) return;
  const size_t rows = r.steps.size();
  ProcessSummary& ps = r.summary;
  RssInput in;
  in.rss = series.rss;
  in.live = series.live;
  in.mmap.resize(rows);
  for (size_t k = 0; k < rows; ++k)
    in.mmap[k] = static_cast<double>(r.steps[k].mmap_live_bytes_end);
  in.stats = StepAllocStats(t, row_of_step, rows);
  in.rss_growth = ps.rss_growth;
  in.live_growth = ps.live_growth;
  for (size_t i = 0; i < r.sites.size(); ++i) {
    const Site& s = r.sites[i];
    if (s.kind == SiteKind::kHost) in.sites.push_back(RssSite{i + 1, s.growth.slope, s.growth.cls});
  }
  ps.rss_explain = ExplainRss(in, options.growth);
  const std::string& v = ps.rss_explain.verdict;
  if (!v.empty()) ps.fragmentation = v == "FRAGMENTATION" || v == "CACHING";
}

// The host and mmap sites of the process, in replay order.
void BuildHostSites(const Trace& t, const HostPass& h, const Captured& both,
                    const ProcessSeries& series, const Options& options, FrameResolver& resolver,
                    ProcessResult& r) {
  const auto& acc = h.replay.sites();
  const auto peak = both.host.find(h.peak_index);
  // Held to the exact heap's bounds when it grows.
  const GrowthOptions site_options = SiteBounds(
      options.growth, series.exact, r.summary.live_growth.cls, r.summary.live_growth.rises);
  HostSiteContext c{t,
                    h,
                    options,
                    site_options,
                    r.summary,
                    series,
                    peak != both.host.end() ? peak->second : acc,
                    r.steps.size(),
                    h.interval_max};
  for (const StepRow& row : r.steps) {
    c.step_alloc_bytes += static_cast<double>(row.alloc_bytes);
    c.step_alloc_count += static_cast<double>(row.alloc_count);
  }
  const size_t first = r.sites.size();
  for (size_t i = 0; i < acc.size(); ++i) r.sites.push_back(MakeHostSite(c, resolver, i));
  // The growth classes, the report's costliest statistics (O(steps log steps)
  // a site), on every core: each site reads the pass and writes only itself.
  ParallelChunks(acc.size(), 64, [&](size_t lo, size_t hi) {
    GrowthInput in;  // one chunk's buffers, reused site to site
    for (size_t i = lo; i < hi; ++i) {
      HostSiteGrowthInput(c, i, acc[i], in);
      ClassifyHostSite(c, i, in, r.sites[first + i]);
    }
  });
  std::vector<SiteLines> lines_of(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) {
    if (r.sites[first + i].kind == SiteKind::kHost) lines_of[i] = LinesOfSite(r.sites[first + i]);
  }
  BuildPythonLines(c, first, lines_of, r);
  BuildCallerLines(c, first, lines_of, r);
}

ProcessResult AnalyzeTrace(const Trace& t, const TraceEvents& events, const std::string& path,
                           const Options& options, uint64_t memory_limit) {
  ProcessResult r;
  FillSummary(t, path, r.summary);
  absl::flat_hash_map<uint64_t, size_t> row_of_step;
  std::map<std::string, StageRun> max_run;
  BuildSteps(t, r, row_of_step, max_run, options.timeline);
  HostContext host;  // for the device analysis; filled in below
  host.row_of_step = &row_of_step;
  host.last_step_end_seq = LastStepEndSeq(t, row_of_step);
  host.cohort_before_rows = options.first_step <= 0;
  std::unique_ptr<DeviceAnalysis> device = DeviceAnalysis::Start(t, host, r.steps);
  // Pass 1 after the scan: the whole replay (the device pass rides on it).
  HostPass h;
  const HostRounding rounding = HostRoundingOf(t);
  h.replay.set_rounding(rounding);
  h.slices.set_rounding(rounding);
  ReplayHost(t, events, row_of_step, max_run, options, r.steps.size(), device.get(), r, h);
  // The run peak and the stage peaks without an in-process snapshot: pass 1
  // kept the host and device sites there (marks), so the capture pass
  // (pass 2) runs only for a moment the marks did not keep.
  const absl::flat_hash_map<uint64_t, uint32_t> host_site = HostSiteIndex(h.replay);
  std::vector<const reader::SiteSnapshot*> snapshot_of;
  std::vector<size_t> captures = PlanCaptures(t, h, snapshot_of);
  // Pass 1's marks kept every host moment (the replay's events are the
  // capture's); should one be missing, the capture pass replays the host too.
  bool host_kept = true;
  for (size_t index : captures) host_kept = host_kept && h.captured.count(index) > 0;
  // The same for the device's moments (DeviceAnalysis::Kept).
  std::vector<size_t> device_captures =
      device != nullptr ? device->Captures() : std::vector<size_t>{};
  std::map<size_t, std::vector<DeviceReplay::SiteAcc>> device_kept;
  if (device != nullptr) device_kept = device->Kept();
  bool device_all_kept = true;
  for (size_t index : device_captures) {
    device_all_kept = device_all_kept && device_kept.count(index) > 0;
  }
  Captured both = CapturePass(events, rounding, host_kept ? std::vector<size_t>{} : captures,
                              device_all_kept ? std::vector<size_t>{} : device_captures);
  if (host_kept) both.host = std::move(h.captured);
  if (device_all_kept) both.device = std::move(device_kept);
  for (size_t k = 0; k < h.targets.size(); ++k) {
    r.stage_peaks.push_back(HostStagePeak(t, r, h.targets[k], snapshot_of[k], both.host, host_site,
                                          h.interval_max, options));
  }
  for (const reader::Alert& a : t.alerts) r.alerts.push_back(MakeAlertRow(t, a, host_site));
  r.epochs = BuildEpochs(r.steps);
  // Growth: warm-up, process-level series, then each site.
  const ProcessSeries series = ClassifyProcess(r, options, memory_limit);
  FrameResolver resolver(t, options.symbolize);
  BuildHostSites(t, h, both, series, options, resolver, r);
  CalibrateSites(series, r);
  ExplainRssGrowth(t, row_of_step, series, options, r);
  ProcessSummary& ps = r.summary;
  ps.hunts = SummarizeHunts(t, false);
  for (const ProcessSummary::Hunt& hunt : SummarizeHunts(t, true)) ps.hunts.push_back(hunt);
  // A hunt the trace ends in ran until the last step.
  for (ProcessSummary::Hunt& hunt : ps.hunts) {
    if (hunt.outcome == 0 && ps.last_step > static_cast<int64_t>(hunt.end_step)) {
      hunt.end_step = static_cast<uint64_t>(ps.last_step);
    }
  }
  Unattributed(r.sites, r.steps, series.exact, ps);
  // Device memory (device_analysis.h): exact, so it needs no sampling math.
  host.warmup_steps = ps.warmup_steps;
  host.median_step_s = ps.median_step_s;
  host.host_used_bytes = series.used;
  host.memory_limit = series.limit;
  host.exact = series.exact;
  const size_t device_base = r.sites.size();
  if (device != nullptr) {
    device->Finish(host, options, resolver, r.steps, r.summary, r.sites, r.stage_peaks, r.failures,
                   both.device);
  }
  // Out-of-memory moments and snapshots on request (mem_snapshot.h).
  AnalyzeMemSnapshots(t, events, device_base, h.interval_max, options, r.snapshots);
  return r;
}

// One trace as the analysis reads it: the scanned Trace and its events.
struct LoadedTrace {
  std::unique_ptr<Trace> trace;
  std::unique_ptr<TraceEvents> events;
};

// Splits a whole-file Trace into control events (kept in it) and bulk events.
std::vector<Event> SplitBulk(Trace& t) {
  std::vector<Event> bulk, control;
  for (const Event& e : t.events) (reader::IsBulkTag(e.tag) ? bulk : control).push_back(e);
  t.events = std::move(control);
  t.control_only = true;
  t.bulk_events = bulk.size();
  return bulk;
}

// Reads one trace: a streaming scan, or the whole file when it breaks the
// reorder window (a warning says so).
absl::StatusOr<LoadedTrace> LoadTrace(const reader::TraceFile& file, const ProgressFn& progress,
                                      std::vector<std::string>& warnings) {
  LoadedTrace out;
  reader::StreamOptions stream;
  stream.release_mapped_pages = file.mapped;
  reader::ProgressFn scan_progress;
  if (progress) {
    scan_progress = [&](uint64_t done) { progress(file.path, 1, done, file.size); };
  }
  absl::StatusOr<Trace> scanned = reader::ScanTrace(file.data, file.size, stream, scan_progress);
  if (scanned.ok()) {
    out.trace = std::make_unique<Trace>(std::move(*scanned));
    out.events = std::make_unique<TraceEvents>(*out.trace, file.data, stream);
    if (progress) {
      out.events->set_progress([progress, path = file.path, size = file.size](
                                   int pass, uint64_t done) { progress(path, pass, done, size); });
    }
    return out;
  }
  if (scanned.status().code() != absl::StatusCode::kFailedPrecondition) {
    return absl::Status(scanned.status().code(),
                        absl::StrCat(file.path, ": ", scanned.status().message()));
  }
  warnings.push_back(absl::StrCat(file.path, ": ", scanned.status().message(),
                                  "; read whole instead (memory grows with the trace)"));
  absl::StatusOr<Trace> whole = reader::ParseTrace(file.data, file.size);
  if (!whole.ok()) {
    return absl::Status(whole.status().code(),
                        absl::StrCat(file.path, ": ", whole.status().message()));
  }
  out.trace = std::make_unique<Trace>(std::move(*whole));
  std::vector<Event> bulk = SplitBulk(*out.trace);
  out.events = std::make_unique<TraceEvents>(*out.trace, std::move(bulk));
  return out;
}

// Renumbers repeated steps and applies the selection; false when the
// selection leaves the process out.
bool PrepareTrace(const std::string& path, const Options& options, LoadedTrace& lt,
                  SelectionTally& selection, std::vector<std::string>& warnings) {
  Trace& trace = *lt.trace;
  for (const std::string& w : trace.warnings) warnings.push_back(absl::StrCat(path, ": ", w));
  if (RenumberRepeatedSteps(&trace, &lt.events->transform())) {
    warnings.push_back(absl::StrCat(
        path,
        ": step numbers repeat (numbered per epoch, or time windows before the "
        "program's own steps): steps are numbered 0, 1, 2, ... in the order they ran"));
  }
  if (!options.selects()) return true;
  selection.Before(trace);
  const SelectOutcome outcome = SelectTrace(options, &trace, &lt.events->transform());
  selection.After(outcome);
  return outcome.process_selected;
}

// Warnings about what a process's figures may miss.
void ProcessWarnings(const std::string& path, const ProcessSummary& p,
                     std::vector<std::string>& warnings) {
  if (p.lost_samples > 0) {
    // Only sampled allocations are dropped for a full buffer (docs/format.md
    // "LOST"): the estimates lack that share of the samples.
    const double share = 100.0 * static_cast<double>(p.lost_samples) /
                         static_cast<double>(p.lost_samples + p.samples);
    warnings.push_back(absl::StrCat(path, ": ", p.lost_samples,
                                    " sampled allocations lost by the profiler (its buffers "
                                    "were full while the writer fell behind): ",
                                    absl::StrFormat("%.1f", share),
                                    "% of the samples; sampled "
                                    "estimates are low by about that share (exact counters, "
                                    "steps and stages are complete)"));
  }
  if (p.lost_dictionary > 0) {
    warnings.push_back(absl::StrCat(path, ": ", p.lost_dictionary,
                                    " stacks or strings lost by the profiler (its dictionary "
                                    "was full): some sites or names read as unknown"));
  }
  if (p.lost_kept_records > 0) {
    warnings.push_back(absl::StrCat(path, ": ", p.lost_kept_records,
                                    " records lost that memstep keeps (its reserve for them "
                                    "was full too): step, stage or free records may be "
                                    "missing"));
  }
  const uint64_t other = p.lost_records - p.lost_samples - p.lost_dictionary - p.lost_kept_records;
  if (other > 0) {
    warnings.push_back(absl::StrCat(path, ": ", other,
                                    " records lost by the profiler (buffers full); "
                                    "sampled estimates are low"));
  }
  if (p.device_ignored_frees > 0) {
    warnings.push_back(absl::StrCat(path, ": ", p.device_ignored_frees,
                                    " device frees of allocations memstep never saw "
                                    "(made before it started, or their records were lost); "
                                    "ignored"));
  }
}

// Moves each process's results into the report, with site ids made unique
// (process ordinal << 32 | local index + 1) and per-step series widened to
// the report's step table.
void MergeResults(std::vector<ProcessResult>& results, Report& report) {
  size_t total_steps = 0;
  for (const ProcessResult& r : results) total_steps += r.steps.size();
  uint64_t ordinal = 0;
  for (ProcessResult& r : results) {
    const uint64_t tag = ++ordinal << 32;
    for (size_t i = 0; i < r.sites.size(); ++i) r.sites[i].id = tag | (i + 1);
    auto retag = [tag](uint64_t id) { return id != 0 ? tag | id : 0; };
    for (StagePeak& sp : r.stage_peaks) {
      for (PeakSite& p : sp.top_sites) p.site_id = retag(p.site_id);
    }
    for (AlertRow& a : r.alerts) a.site_id = retag(a.site_id);
    for (RssPin& p : r.summary.rss_explain.pins) p.site_id = retag(p.site_id);
    for (ProcessSummary::PythonLine& line : r.summary.python_lines) {
      for (uint64_t& id : line.site_ids) id = retag(id);
    }
    for (DeviceFailure& f : r.failures) f.site_id = retag(f.site_id);
    for (MemorySnapshot& m : r.snapshots) {
      for (PeakSite& p : m.host_sites) p.site_id = retag(p.site_id);
      for (PeakSite& p : m.device_sites) p.site_id = retag(p.site_id);
    }
    report.memory_snapshots.insert(report.memory_snapshots.end(), r.snapshots.begin(),
                                   r.snapshots.end());
    report.device_failures.insert(report.device_failures.end(), r.failures.begin(),
                                  r.failures.end());
    report.epochs.insert(report.epochs.end(), r.epochs.begin(), r.epochs.end());
    report.stage_peaks.insert(report.stage_peaks.end(), r.stage_peaks.begin(), r.stage_peaks.end());
    report.alerts.insert(report.alerts.end(), r.alerts.begin(), r.alerts.end());
    report.spans.insert(report.spans.end(), r.spans.begin(), r.spans.end());
    report.timeline.insert(report.timeline.end(), r.timeline.begin(), r.timeline.end());
    const size_t offset = report.steps.size();
    for (Site& s : r.sites) {
      s.live_bytes_by_step = s.live_bytes_by_step.Shifted(offset, total_steps);
      report.sites.push_back(std::move(s));
    }
    report.steps.insert(report.steps.end(), r.steps.begin(), r.steps.end());
    report.processes.push_back(std::move(r.summary));
  }
}

// Orders the sites by live bytes at the end and numbers them 1, 2, ...
// everywhere they are referred to.
void NumberSites(Report& report) {
  std::stable_sort(report.sites.begin(), report.sites.end(), [](const Site& a, const Site& b) {
    if (a.live_bytes_end != b.live_bytes_end) return a.live_bytes_end > b.live_bytes_end;
    return a.alloc_bytes > b.alloc_bytes;
  });
  absl::flat_hash_map<uint64_t, uint64_t> new_id;
  for (size_t i = 0; i < report.sites.size(); ++i) {
    new_id[report.sites[i].id] = i + 1;
    report.sites[i].id = i + 1;
  }
  auto renumber = [&](uint64_t id) {
    auto it = new_id.find(id);
    return it == new_id.end() ? uint64_t{0} : it->second;
  };
  for (StagePeak& sp : report.stage_peaks) {
    for (PeakSite& p : sp.top_sites) p.site_id = renumber(p.site_id);
  }
  for (AlertRow& a : report.alerts) a.site_id = renumber(a.site_id);
  for (ProcessSummary& p : report.processes) {
    for (RssPin& pin : p.rss_explain.pins) pin.site_id = renumber(pin.site_id);
    for (ProcessSummary::PythonLine& line : p.python_lines) {
      for (uint64_t& id : line.site_ids) id = renumber(id);
      std::sort(line.site_ids.begin(), line.site_ids.end());
    }
  }
  for (DeviceFailure& f : report.device_failures) f.site_id = renumber(f.site_id);
  for (MemorySnapshot& m : report.memory_snapshots) {
    for (PeakSite& p : m.host_sites) p.site_id = renumber(p.site_id);
    for (PeakSite& p : m.device_sites) p.site_id = renumber(p.site_id);
  }
}

}  // namespace

absl::StatusOr<Report> AnalyzeRun(const reader::RunFiles& run, const Options& options,
                                  const ProgressFn& progress) {
  Report report;
  report.path = run.path();
  report.warnings = run.warnings();
  report.memory_limit_bytes = options.memory_limit;
  report.memory_limit_source = "--memory-limit";
  if (report.memory_limit_bytes == 0) {
    report.memory_limit_bytes = options.machine_memory;
    report.memory_limit_source = "MemTotal of this machine";
  }
  std::vector<ProcessResult> results;
  SelectionTally selection;  // --steps, --stage, --pid, --rank (select.h)
  for (const reader::TraceFile& file : run.traces()) {
    absl::StatusOr<LoadedTrace> loaded = LoadTrace(file, progress, report.warnings);
    if (!loaded.ok()) return loaded.status();
    if (!PrepareTrace(file.path, options, *loaded, selection, report.warnings)) continue;
    results.push_back(AnalyzeTrace(*loaded->trace, *loaded->events, file.path, options,
                                   report.memory_limit_bytes));
    if (const absl::Status& s = loaded->events->status(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(file.path, ": ", s.message()));
    }
    ProcessWarnings(file.path, results.back().summary, report.warnings);
  }
  if (absl::Status s = selection.Check(options, run.path()); !s.ok()) return s;
  report.selection = DescribeSelection(options);
  if (results.empty()) {
    return absl::NotFoundError(absl::StrCat(run.path(), ": no readable memstep traces"));
  }
  std::stable_sort(
      results.begin(), results.end(),
      [](const ProcessResult& a, const ProcessResult& b) { return a.summary.pid < b.summary.pid; });
  MergeResults(results, report);
  NumberSites(report);
  return report;
}

absl::StatusOr<Report> AnalyzeRun(const std::string& path, const Options& options) {
  absl::StatusOr<reader::RunFiles> run = reader::RunFiles::Open(path);
  if (!run.ok()) return run.status();
  Options o = options;
  if (o.machine_memory == 0) o.machine_memory = reader::MachineMemTotal();
  return AnalyzeRun(*run, o);
}

}  // namespace memstep::analysis

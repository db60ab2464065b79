#include "src/analysis/device_analysis.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "src/analysis/device_replay.h"
#include "src/analysis/growth.h"
#include "src/analysis/replay.h"
#include "src/analysis/select.h"
#include "src/analysis/series_util.h"
#include "src/analysis/step_series.h"
#include "src/analysis/trend.h"
#include "src/format/format.h"

namespace memstep::analysis {
namespace {

using reader::Event;
using reader::Trace;

constexpr char kTorchPrefix[] = "torch.cuda:";

// A peak and the event index right after which it was reached.
struct IndexedPeak {
  uint64_t bytes = 0;
  size_t index = SIZE_MAX;  // event index (events.h); SIZE_MAX: never reached (no allocation)
  int64_t step = -1;
  uint64_t ts = 0;  // of that event
};

// Peaks since the last STEP record (begin or end), as the host counters do.
struct StepTrack {
  std::map<int32_t, uint64_t> resident;                  // device -> peak
  std::map<std::pair<uint8_t, int32_t>, uint64_t> kind;  // (kind, device) -> peak
  uint64_t total = 0;
  uint64_t pinned = 0;
  std::map<int32_t, DeviceReplay::Traffic> base;  // traffic at the last STEP record
};

// One open run of a stage: its peak per device, and the replay's mark
// (DeviceReplay::Mark) at each.
struct StageRun {
  std::map<int32_t, IndexedPeak> peak;
  std::map<int32_t, size_t> mark;
};

using internal::MedianOf;
using internal::Project;

void SetTorchStat(const std::string& stat, int64_t v, TorchCudaStats& s) {
  if (stat == "allocated_bytes") s.allocated_bytes = v;
  if (stat == "reserved_bytes") s.reserved_bytes = v;
  if (stat == "inactive_split_bytes") s.inactive_split_bytes = v;
  if (stat == "requested_bytes") s.requested_bytes = v;
  if (stat == "num_alloc_retries") s.num_alloc_retries = v;
  if (stat == "num_ooms") s.num_ooms = v;
  if (stat == "allocated_bytes_peak") s.allocated_bytes_peak = v;
  if (stat == "reserved_bytes_peak") s.reserved_bytes_peak = v;
}

// Every device the trace mentions: resident allocations, frees and failures,
// tensor blocks, DEV_INFO records and PyTorch counters.
std::set<int32_t> DevicesOf(const Trace& t) {
  std::set<int32_t> out;
  for (const auto& [kind, device] : t.device_kinds) {  // of every DEV_* record (reader.h)
    if (IsResidentKind(kind) || kind == format::kDevTensorBlock) out.insert(device);
  }
  for (const Event& e : t.events) {  // counters are control events
    int32_t device;
    std::string stat;
    std::string pool;
    if (e.tag == format::kTagCounter &&
        (ParseTorchCounter(t.String(e.str), &device, &stat) ||
         ParsePoolCounter(t.String(e.str), &device, &pool, &stat))) {
      out.insert(device);
    }
  }
  for (const reader::DeviceInfo& i : t.device_info) out.insert(i.device);
  return out;
}

// The first pass's state and results.
class DevicePass {
 public:
  DevicePass(const Trace& t, const HostContext& host, const std::set<int32_t>& devices)
      : t_(t),
        host_(host),
        devices_(devices),
        rows_(host.row_of_step->size()),
        by_row_(rows_),
        stage_by_row_(rows_),
        interval_by_row_(rows_, 0.0) {
    cohort_ = host.cohort_before_rows ? 0 : UINT32_MAX;
    replay_.set_cohort(cohort_);
    Reset();
  }

  // One event of the pass, in order (`i`: its index, events.h).
  void Apply(size_t i, const Event& e) {
    NoteDevInfo(e);
    if (replay_.Apply(e)) {
      if (e.tag == format::kTagDevAlloc) OnAlloc(i, e);
      return;
    }
    switch (e.tag) {
      case format::kTagStep:
        OnStep(e);
        break;
      case format::kTagStage:
        OnStage(i, e);
        break;
      case format::kTagCounter:
        OnCounter(e);
        break;
      case format::kTagDevFail:
        fails_.push_back(e);
        break;
      default:
        break;
    }
  }

  const DeviceReplay& replay() const { return replay_; }
  size_t rows() const { return rows_; }
  std::vector<std::map<int32_t, DeviceStep>>& by_row() { return by_row_; }
  // [row][device][stage] -> peak within the step's runs.
  const std::vector<std::map<int32_t, std::map<std::string, uint64_t>>>& stage_by_row() const {
    return stage_by_row_;
  }
  const std::map<int32_t, IndexedPeak>& run_peak() const { return run_peak_; }
  const std::map<std::pair<uint8_t, int32_t>, uint64_t>& kind_peak() const { return kind_peak_; }
  const IndexedPeak& pinned_peak() const { return pinned_peak_; }
  const std::map<std::pair<std::string, int32_t>, IndexedPeak>& best_stage() const { return best_; }
  const std::vector<Event>& fails() const { return fails_; }
  // [site][row]: live bytes at each step end (after FinishSeries).
  const std::vector<StepSeries>& site_by_step() const { return site_by_step_; }
  // [site][row]: the bytes its live samples hold themselves at each step end
  // (DeviceReplay::SiteAcc::live_held; after FinishSeries).
  const std::vector<StepSeries>& held_by_step() const { return held_by_step_; }
  // [site]: its sampled allocations live at the last step end by cohort (the
  // row they were allocated in), rows increasing; only cohorts with one.
  const std::vector<std::vector<CohortCell>>& cohorts() const { return cohorts_; }
  // [row]: the device sampling interval T of the row (after FinishSeries).
  const std::vector<double>& interval_by_row() const { return interval_by_row_; }
  // Once the pass is over: site_by_step() from what the step ends recorded,
  // and each row's T.
  void FinishSeries() {
    site_by_step_ = site_at_end_.Finish(rows_, sites_at_end_);
    held_by_step_ = held_at_end_.Finish(rows_, sites_at_end_);
    FillIntervals();
  }
  std::vector<StepRow*> step_rows;  // set by the caller, aligned with rows

 private:
  void Reset() {
    track_ = StepTrack{};
    for (int32_t d : devices_) track_.resident[d] = replay_.resident(d);
    for (const auto& [key, live] : replay_.live_by_kind()) track_.kind[key] = live;
    track_.total = replay_.resident_total();
    track_.pinned = replay_.pinned();
    track_.base = replay_.devices();
  }

  void OnAlloc(size_t i, const Event& e) {
    // The row's T: the largest its samples were drawn with (a row's first
    // samples may carry the previous row's T when it changed at the step end).
    if (e.sampled && cohort_ < rows_) {
      double& T = interval_by_row_[cohort_];
      T = std::max(T, static_cast<double>(e.interval));
    }
    if (e.kind == format::kDevPinnedHost) {
      track_.pinned = std::max(track_.pinned, replay_.pinned());
      if (replay_.pinned() > pinned_peak_.bytes) {
        pinned_peak_ = {replay_.pinned(), i, in_step_, e.ts};
        MarkNow(pinned_mark_);
      }
      return;
    }
    if (!IsResidentKind(e.kind)) return;
    const uint64_t r = replay_.resident(e.device);
    const uint64_t k = replay_.live(e.kind, e.device);
    uint64_t& tr = track_.resident[e.device];
    tr = std::max(tr, r);
    uint64_t& tk = track_.kind[{e.kind, e.device}];
    tk = std::max(tk, k);
    track_.total = std::max(track_.total, replay_.resident_total());
    IndexedPeak& p = run_peak_[e.device];
    if (r > p.bytes) {
      p = {r, i, in_step_, e.ts};
      MarkNow(run_mark_.try_emplace(e.device, SIZE_MAX).first->second);
    }
    uint64_t& kp = kind_peak_[{e.kind, e.device}];
    kp = std::max(kp, k);
    for (auto& [key, run] : open_) {
      IndexedPeak& rp = run.peak[e.device];
      if (r > rp.bytes) {
        rp = {r, i, in_step_, e.ts};
        MarkNow(run.mark.try_emplace(e.device, SIZE_MAX).first->second);
      }
    }
  }

  void OnStep(const Event& e) {
    auto row = host_.row_of_step->find(e.step);
    if (e.phase == 0) {
      in_step_ = static_cast<int64_t>(e.step);
      replay_.set_in_step(true);
      if (row != host_.row_of_step->end()) SetCohort(static_cast<uint32_t>(row->second));
      Reset();
      return;
    }
    if (row != host_.row_of_step->end()) {
      Record(row->second);
      if (e.seq == host_.last_step_end_seq) {
        cohorts_ = LiveCohorts([&](auto fn) { replay_.ForEachLive(fn); }, replay_.sites().size(),
                               rows_, replay_.live_allocations());
      }
      // Between steps, allocations belong to the next step.
      SetCohort(static_cast<uint32_t>(std::min(row->second + 1, rows_ - 1)));
    }
    in_step_ = -1;
    replay_.set_in_step(false);
    Reset();
  }

  void OnStage(size_t i, const Event& e) {
    const std::pair<uint32_t, uint64_t> key(e.tid, e.str);
    if (e.phase == 0) {
      StageRun& open = open_[key];
      DropMarks(open);  // a run begun again before it ended
      open = Begin(i);
      return;
    }
    auto it = open_.find(key);
    StageRun run = it != open_.end() ? std::move(it->second) : Begin(i);
    if (it != open_.end()) open_.erase(it);
    const std::string& name = t_.String(e.str);
    auto row = host_.row_of_step->find(e.step);
    for (const auto& [device, peak] : run.peak) {
      if (row != host_.row_of_step->end()) {
        uint64_t& p = stage_by_row_[row->second][device][name];
        p = std::max(p, peak.bytes);
      }
      auto [b, inserted] = best_.try_emplace({name, device});
      if (inserted || peak.bytes > b->second.bytes) {
        b->second = peak;
        b->second.step = static_cast<int64_t>(e.step);
        auto m = run.mark.find(device);
        if (m != run.mark.end() && replay_.marked(m->second)) {
          best_sites_[{name, device}] = replay_.SitesAt(m->second);
        } else {
          best_sites_.erase({name, device});  // not kept: the capture pass replays it
        }
      }
    }
    DropMarks(run);
  }

  void SetCohort(uint32_t c) {
    cohort_ = c;
    replay_.set_cohort(c);
  }

  // Rows without a sample take the T of the row before (the first ones: of
  // the first row with a sample); all 0 when no sample had a T (exact).
  void FillIntervals() {
    double prev = 0;
    for (double T : interval_by_row_) {
      if (T > 0) {
        prev = T;
        break;
      }
    }
    for (double& T : interval_by_row_) {
      if (T > 0) {
        prev = T;
      } else {
        T = prev;
      }
    }
  }

  StageRun Begin(size_t i) {
    StageRun run;
    for (int32_t d : devices_) {
      run.peak[d] = IndexedPeak{replay_.resident(d), i, in_step_};
      MarkNow(run.mark.try_emplace(d, SIZE_MAX).first->second);
    }
    return run;
  }

  // Marks the replay's sites now in `mark` (a new mark when it is SIZE_MAX).
  void MarkNow(size_t& mark) {
    if (mark == SIZE_MAX) mark = replay_.NewMark();
    replay_.Mark(mark);
  }
  void DropMarks(StageRun& run) {
    for (auto& [device, mark] : run.mark) replay_.DropMark(mark);
    run.mark.clear();
  }

 public:
  // The pool events and multicast objects (with their dropped counts) into
  // the process summary.
  void PoolsAndMulticastInto(ProcessSummary& summary) const {
    summary.pool_events = pool_events_;
    summary.pool_events_dropped = pool_events_dropped_;
    summary.multicast = multicast_;
    summary.multicast_dropped = multicast_dropped_;
  }

  // The device sites right after each index of Captures() that the marks
  // kept (all of them, unless a stage's best peak came from a run without
  // a mark): what a second replay up to them would give.
  std::map<size_t, std::vector<DeviceReplay::SiteAcc>> Kept() const {
    std::map<size_t, std::vector<DeviceReplay::SiteAcc>> out;
    for (const auto& [device, p] : run_peak_) {
      auto m = run_mark_.find(device);
      if (p.index != SIZE_MAX && m != run_mark_.end() && replay_.marked(m->second)) {
        out.emplace(p.index, replay_.SitesAt(m->second));
      }
    }
    if (pinned_peak_.index != SIZE_MAX && replay_.marked(pinned_mark_)) {
      out.emplace(pinned_peak_.index, replay_.SitesAt(pinned_mark_));
    }
    for (const auto& [key, p] : best_) {
      auto it = best_sites_.find(key);
      if (p.index != SIZE_MAX && it != best_sites_.end()) out.emplace(p.index, it->second);
    }
    return out;
  }

 private:
  void OnCounter(const Event& e) {
    int32_t device;
    std::string stat;
    std::string pool;
    if (ParseTorchCounter(t_.String(e.str), &device, &stat)) {
      SetTorchStat(stat, e.value, torch_[device]);
    } else if (ParsePoolTrimCounter(t_.String(e.str), &device, &pool)) {
      OnTrim(device, pool, e.value);
    } else if (ParseMulticastCounter(t_.String(e.str), &device, &pool, &stat)) {
      OnMulticast(device, pool, stat, e.value);
    } else if (ParsePoolCounter(t_.String(e.str), &device, &pool, &stat)) {
      DeviceStep::PoolBytes& b = pool.empty() ? graph_[device] : pools_[device][pool];
      if (!pool.empty()) OnPoolStat(device, pool, stat, e.value, b);
      b.Set(stat, e.value);
      // The library reads the pools right after a step's DEV_INFO (which
      // follows that step's END record): such a read is that step's value.
      if (const reader::DeviceInfo* info = read_info_) {
        auto row = host_.row_of_step->find(info->step);
        if (row != host_.row_of_step->end()) {
          DeviceStep& ds = by_row_[row->second][device];
          DeviceStep::PoolBytes& r = pool.empty() ? ds.graph : ds.created_pools[pool];
          r.Set(stat, e.value);
        }
      }
    }
  }

  // A trim: listed now, its reserved bytes filled in by the pool's next read.
  void OnTrim(int32_t device, const std::string& pool, int64_t value) {
    pending_trim_.erase({device, pool});
    ProcessSummary::PoolEvent* ev = AddPoolEvent(device, pool, value);
    if (ev == nullptr) return;
    ev->trim = true;
    pending_trim_[{device, pool}] = pool_events_.size() - 1;
  }

  // A new pool event at this step, or nullptr (counted) past the cap.
  ProcessSummary::PoolEvent* AddPoolEvent(int32_t device, const std::string& pool, int64_t bytes) {
    if (pool_events_.size() >= ProcessSummary::kMaxPoolEvents) {
      ++pool_events_dropped_;
      return nullptr;
    }
    ProcessSummary::PoolEvent& ev = pool_events_.emplace_back();
    ev.step = in_step_;
    ev.device = device;
    ev.pool = pool;
    ev.bytes = bytes;
    return &ev;
  }

  // A pool's read: completes a pending trim, lists a new release threshold.
  void OnPoolStat(int32_t device, const std::string& pool, const std::string& stat, int64_t value,
                  const DeviceStep::PoolBytes& before) {
    if (stat == "reserved_bytes") {
      auto it = pending_trim_.find({device, pool});
      if (it != pending_trim_.end()) {
        pool_events_[it->second].reserved_after = value;
        pending_trim_.erase(it);
      }
      return;
    }
    if (stat != "release_threshold_bytes") return;
    const int64_t threshold = value < 0 ? INT64_MAX : value;
    if (before.release_threshold == threshold) return;  // read again, unchanged
    AddPoolEvent(device, pool, threshold);
  }

  void OnMulticast(int32_t device, const std::string& object, const std::string& stat,
                   int64_t value) {
    auto it = multicast_of_.find(object);
    if (it != multicast_of_.end() && multicast_[it->second].released && stat == "size_bytes" &&
        value > 0) {
      multicast_of_.erase(it);  // the handle reused for a new object
      it = multicast_of_.end();
    }
    if (it == multicast_of_.end()) {
      if (multicast_.size() >= ProcessSummary::kMaxMulticast) {
        ++multicast_dropped_;
        return;
      }
      it = multicast_of_.emplace(object, multicast_.size()).first;
      ProcessSummary::Multicast m;
      m.object = object;
      m.created_step = in_step_;
      multicast_.push_back(std::move(m));
    }
    ProcessSummary::Multicast& m = multicast_[it->second];
    if (stat == "size_bytes") {
      if (value == 0 && m.size_bytes > 0) {
        m.released = true;
        m.released_step = in_step_;
      } else {
        m.size_bytes = value;
      }
      return;
    }
    m.bound_end[device] = value;
    int64_t& most = m.bound_max[device];
    most = std::max(most, value);
  }

  void Record(size_t row) {
    StepRow& s = *step_rows[row];
    for (int32_t d : devices_) {
      DeviceStep& ds = by_row_[row][d];
      ds.device = d;
      ds.live_bytes_end = replay_.resident(d);
      ds.peak_bytes = std::max(track_.resident[d], ds.live_bytes_end);
      auto now = replay_.devices().find(d);
      if (now != replay_.devices().end()) {
        const DeviceReplay::Traffic& base = track_.base[d];
        ds.alloc_bytes = now->second.alloc_bytes - base.alloc_bytes;
        ds.alloc_count = now->second.alloc_count - base.alloc_count;
        ds.free_bytes = now->second.free_bytes - base.free_bytes;
        ds.free_count = now->second.free_count - base.free_count;
      }
    }
    for (const auto& [key, live] : replay_.live_by_kind()) {
      if (key.first == format::kDevTensorBlock) {
        DeviceStep& ds = by_row_[row][key.second];
        ds.has_blocks = true;
        ds.blocks_bytes = live;
        continue;
      }
      if (!IsResidentKind(key.first)) continue;
      DeviceStep& ds = by_row_[row][key.second];
      const char* name = format::DeviceKindName(key.first);
      ds.live_by_kind[name] = live;
      ds.peak_by_kind[name] = std::max(track_.kind[key], live);
    }
    for (const auto& [device, pools] : pools_) by_row_[row][device].created_pools = pools;
    for (const auto& [device, graph] : graph_) by_row_[row][device].graph = graph;
    for (const auto& [device, stats] : torch_) {
      TorchCudaStats& ts = by_row_[row][device].torch;
      ts = stats;
      if (stats.num_alloc_retries >= 0) {
        int64_t& prev = prev_retries_[device];
        ts.alloc_retries_in_step = stats.num_alloc_retries - prev;
        prev = stats.num_alloc_retries;
      }
      if (stats.num_ooms >= 0) {
        int64_t& prev = prev_ooms_[device];
        ts.ooms_in_step = stats.num_ooms - prev;
        prev = stats.num_ooms;
      }
    }
    s.device_live_bytes_end = replay_.resident_total();
    s.device_peak_bytes = std::max(track_.total, s.device_live_bytes_end);
    s.pinned_host_live_bytes_end = replay_.pinned();
    s.pinned_host_peak_bytes = std::max(track_.pinned, s.pinned_host_live_bytes_end);
    // The sites' live bytes: only those that changed since the previous
    // step end (the others keep theirs), so the work and the series' memory
    // follow the changes, not steps x sites (issue 11).
    const auto& sites = replay_.sites();
    site_at_end_.EndStep(row);
    held_at_end_.EndStep(row);
    for (uint32_t j : replay_.changed_sites()) {
      site_at_end_.Record(j, sites[j].live_bytes);
      held_at_end_.Record(j, sites[j].live_held);
    }
    replay_.ClearChanged();
    sites_at_end_ = sites.size();
  }

  const Trace& t_;
  const HostContext& host_;
  const std::set<int32_t>& devices_;
  const size_t rows_;
  DeviceReplay replay_;
  StepTrack track_;
  int64_t in_step_ = -1;
  std::vector<std::map<int32_t, DeviceStep>> by_row_;
  std::vector<std::map<int32_t, std::map<std::string, uint64_t>>> stage_by_row_;
  std::map<int32_t, IndexedPeak> run_peak_;
  std::map<std::pair<uint8_t, int32_t>, uint64_t> kind_peak_;
  IndexedPeak pinned_peak_;
  // Marks on replay_ at the run peaks and the pinned peak, and the sites at
  // each (stage, device)'s best peak (Kept).
  std::map<int32_t, size_t> run_mark_;
  size_t pinned_mark_ = SIZE_MAX;
  std::map<std::pair<std::string, int32_t>, std::vector<DeviceReplay::SiteAcc>> best_sites_;
  absl::flat_hash_map<std::pair<uint32_t, uint64_t>, StageRun> open_;  // (tid, stage str)
  std::map<std::pair<std::string, int32_t>, IndexedPeak> best_;        // (stage, device)
  std::map<int32_t, TorchCudaStats> torch_;
  std::map<int32_t, std::map<std::string, DeviceStep::PoolBytes>> pools_;  // latest values
  std::map<int32_t, DeviceStep::PoolBytes> graph_;
  std::map<std::pair<int32_t, std::string>, size_t> pending_trim_;  // -> pool_events_ index
  std::map<std::string, size_t> multicast_of_;                      // -> multicast_ index
  std::vector<ProcessSummary::PoolEvent> pool_events_;
  uint64_t pool_events_dropped_ = 0;
  std::vector<ProcessSummary::Multicast> multicast_;
  uint64_t multicast_dropped_ = 0;
  // The DEV_INFO whose step-end pool read is under way: set when a DEV_INFO
  // came right before the current event, kept while pool counters follow it.
  const reader::DeviceInfo* read_info_ = nullptr;
  uint64_t prev_seq_ = 0;

  void NoteDevInfo(const Event& e) {
    const reader::DeviceInfo* info = InfoBefore(e.seq);
    int32_t device;
    std::string pool, stat;
    if (info != nullptr && info->seq > prev_seq_) {
      read_info_ = info;
    } else if (e.tag != format::kTagCounter ||
               !ParsePoolCounter(t_.String(e.str), &device, &pool, &stat)) {
      read_info_ = nullptr;
    }
    prev_seq_ = e.seq;
  }

  // The last DEV_INFO written before `seq` (t_.device_info is in seq order).
  const reader::DeviceInfo* InfoBefore(uint64_t seq) const {
    auto it = std::lower_bound(t_.device_info.begin(), t_.device_info.end(), seq,
                               [](const reader::DeviceInfo& i, uint64_t s) { return i.seq < s; });
    return it == t_.device_info.begin() ? nullptr : &*(it - 1);
  }
  std::map<int32_t, int64_t> prev_retries_, prev_ooms_;
  std::vector<Event> fails_;  // DEV_FAIL records
  uint32_t cohort_ = 0;       // of what the replay is told is allocated now
  std::vector<std::vector<CohortCell>> cohorts_;
  std::vector<double> interval_by_row_;
  StepEndSeries site_at_end_, held_at_end_;  // while the pass runs
  size_t sites_at_end_ = 0;                  // sites at the last step end
  std::vector<StepSeries> site_by_step_, held_by_step_;
};

// The growth verdict of an exact per-step series.
Growth ClassifyExact(const std::vector<double>& y, size_t warmup, const GrowthOptions& exact) {
  return ClassifySiteGrowth(GrowthInput{y, {}, {}, {}, {}, {}, {}, {}}, warmup, exact);
}

double Seconds(uint64_t ts) { return static_cast<double>(ts) / 1e9; }

bool Grows(const Growth& g) {
  return g.cls == GrowthClass::kLeak || g.cls == GrowthClass::kBoundedGrowth;
}

// Tensors or cache? PyTorch's caching allocator keeps freed blocks in its
// segments, so the resident (segment) bytes memstep counts can grow while the
// tensors do not: that is caching, or fragmentation when the free memory
// trapped in split blocks grows too, not a leak. Needs the helper's
// statistics at every step end of this device.
void ClassifyTorchGrowth(const std::vector<StepRow>& steps, const HostContext& host,
                         DeviceSummary* ds) {
  std::vector<double> allocated, inactive;
  size_t rows = 0;
  for (const StepRow& row : steps) {
    for (const DeviceStep& s : row.devices) {
      if (s.device != ds->device) continue;
      ++rows;
      if (s.torch.allocated_bytes >= 0)
        allocated.push_back(static_cast<double>(s.torch.allocated_bytes));
      if (s.torch.inactive_split_bytes >= 0) {
        inactive.push_back(static_cast<double>(s.torch.inactive_split_bytes));
      }
    }
  }
  if (allocated.empty() || allocated.size() != rows) return;
  ds->has_torch_growth = true;
  ds->torch_allocated_growth = ClassifyExact(allocated, ds->warmup_steps, host.exact);
  if (ds->torch_allocated_growth.cls == GrowthClass::kLeak) {
    ds->growth_verdict = "leak";
  } else if (Grows(ds->live_growth)) {
    const bool split_grows =
        inactive.size() == rows && Grows(ClassifyExact(inactive, ds->warmup_steps, host.exact));
    ds->growth_verdict = split_grows ? "fragmentation" : "caching";
  }
}

void FillDeviceSummaries(const Trace& t, const HostContext& host, const Options& options,
                         const std::set<int32_t>& devices, const DevicePass& pass,
                         const std::vector<StepRow>& steps, ProcessSummary& summary) {
  std::map<int32_t, const reader::DeviceInfo*> last_info;
  for (const reader::DeviceInfo& i : t.device_info) last_info[i.device] = &i;
  for (int32_t d : devices) {
    DeviceSummary ds;
    ds.device = d;
    if (auto p = pass.run_peak().find(d);
        p != pass.run_peak().end() && p->second.index != SIZE_MAX) {
      ds.peak_bytes = p->second.bytes;
      ds.peak_time_s = Seconds(p->second.ts);
      ds.peak_step = p->second.step;
    }
    ds.live_bytes_end = pass.replay().resident(d);
    for (const auto& [key, live] : pass.replay().live_by_kind()) {
      if (key.second == d && IsResidentKind(key.first)) {
        ds.live_by_kind_end[format::DeviceKindName(key.first)] = live;
      }
    }
    for (const auto& [key, peak] : pass.kind_peak()) {
      if (key.second == d) ds.peak_by_kind[format::DeviceKindName(key.first)] = peak;
    }
    if (auto tr = pass.replay().devices().find(d); tr != pass.replay().devices().end()) {
      ds.alloc_bytes = tr->second.alloc_bytes;
      ds.alloc_count = tr->second.alloc_count;
      ds.free_bytes = tr->second.free_bytes;
      ds.free_count = tr->second.free_count;
    }
    for (const Event& e : pass.fails()) {
      ds.failures += IsResidentKind(e.kind) && e.device == d;
    }
    if (auto info = last_info.find(d); info != last_info.end()) {
      ds.total_bytes = info->second->total_bytes;
      ds.used_bytes_end =
          info->second->total_bytes - std::min(info->second->total_bytes, info->second->free_bytes);
    }
    std::vector<double> y;
    for (const StepRow& row : steps) {
      for (const DeviceStep& s : row.devices) {
        if (s.device == d) y.push_back(static_cast<double>(s.live_bytes_end));
      }
    }
    const size_t configured =
        options.warmup_steps > 0 ? static_cast<size_t>(options.warmup_steps) : 0;
    ds.warmup_steps = std::max(configured, DetectWarmup(y, 0.25, options.growth.min_window));
    ds.live_growth = ClassifyExact(y, ds.warmup_steps, host.exact);
    if (ds.live_growth.cls == GrowthClass::kLeak) {
      const double used =
          static_cast<double>(ds.used_bytes_end > 0 ? ds.used_bytes_end : ds.live_bytes_end);
      Project(ds.live_growth.slope, used, static_cast<double>(ds.total_bytes), host.median_step_s,
              &ds.steps_to_limit, &ds.seconds_to_limit);
    }
    ClassifyTorchGrowth(steps, host, &ds);
    summary.device_peak_bytes = std::max(summary.device_peak_bytes, ds.peak_bytes);
    summary.devices.push_back(std::move(ds));
  }
  summary.pinned_host_live_bytes_end = pass.replay().pinned();
  summary.pinned_host_peak_bytes = pass.pinned_peak().bytes;
  summary.device_unmatched_frees = pass.replay().unmatched_frees();
  summary.device_ignored_frees = pass.replay().ignored_frees();
  summary.device_failures = pass.fails().size();
  pass.PoolsAndMulticastInto(summary);
}

void FillStepRows(const Trace& t, DevicePass& pass, std::vector<StepRow>& steps) {
  for (size_t k = 0; k < steps.size(); ++k) {
    std::map<int32_t, DeviceStep>& m = pass.by_row()[k];
    if (k < pass.stage_by_row().size()) {
      for (const auto& [device, stages] : pass.stage_by_row()[k]) m[device].stage_peaks = stages;
    }
  }
  std::map<uint64_t, size_t> row_by_step;
  for (size_t k = 0; k < steps.size(); ++k) row_by_step[steps[k].step] = k;
  for (const reader::DeviceInfo& i : t.device_info) {
    auto row = row_by_step.find(i.step);
    if (row == row_by_step.end()) continue;
    DeviceStep& ds = pass.by_row()[row->second][i.device];
    ds.has_info = true;
    ds.driver_free_bytes = i.free_bytes;
    ds.driver_total_bytes = i.total_bytes;
    ds.driver_used_bytes = i.total_bytes - std::min(i.total_bytes, i.free_bytes);
    ds.pool_reserved_bytes = i.pool_reserved;
    ds.pool_used_bytes = i.pool_used;
  }
  for (const Event& e : pass.fails()) {
    auto row = row_by_step.find(e.step);
    if (row == row_by_step.end() || !IsResidentKind(e.kind)) continue;
    ++pass.by_row()[row->second][e.device].failures;
  }
  for (size_t k = 0; k < steps.size(); ++k) {
    for (auto& [device, ds] : pass.by_row()[k]) {
      ds.device = device;
      steps[k].devices.push_back(std::move(ds));
    }
  }
}

// A device site's churn (the churn view, docs/analysis.md "Churn"): its
// allocations made while a step was open, per step, estimated like a host
// site's (FillChurn); exact when every sample had p = 1 (high = low). Shares
// are of the process's exact resident device allocations in its steps (0
// totals: no share, for pinned host memory and tensor blocks).
void FillDeviceChurn(const DeviceReplay::SiteAcc& a, size_t steps, double bytes, double count,
                     double interval, Site& s) {
  HeapReplay::Accumulator acc;
  acc.key.kind = HeapReplay::Kind::kHost;
  acc.step_alloc_bytes = a.step_alloc_bytes;
  acc.step_alloc_count = a.step_alloc_count;
  acc.step_alloc_bytes_var = a.step_alloc_bytes_var;
  acc.step_alloc_count_var = a.step_alloc_count_var;
  FillChurn(acc, steps, bytes, count, interval, s);
  if (interval <= 0 && steps > 0) {  // every allocation recorded with p = 1
    s.churn_bytes_per_step_low = s.churn_bytes_per_step_high = s.churn_bytes_per_step;
    s.churn_count_per_step_low = s.churn_count_per_step_high = s.churn_count_per_step;
  }
}

// "0x" and 1 to 16 lowercase hex digits: a pool's or object's handle as the
// library writes it in a COUNTER name.
bool IsObjectHex(const std::string& hex) {
  return hex.size() >= 3 && hex.size() <= 18 && hex.compare(0, 2, "0x") == 0 &&
         std::all_of(hex.begin() + 2, hex.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

bool ParsePoolCounter(const std::string& name, int32_t* device, std::string* pool,
                      std::string* stat) {
  std::string rest;
  bool graph = false;
  if (absl::StartsWith(name, "cuda.pool:")) {
    rest = name.substr(sizeof("cuda.pool:") - 1);
  } else if (absl::StartsWith(name, "cuda.graph:")) {
    rest = name.substr(sizeof("cuda.graph:") - 1);
    graph = true;
  } else {
    return false;
  }
  const std::vector<std::string> parts = absl::StrSplit(rest, '.');
  if (parts.size() != (graph ? 2u : 3u)) return false;
  const std::string& s = parts.back();
  if (s != "reserved_bytes" && s != "used_bytes" && (graph || s != "release_threshold_bytes")) {
    return false;
  }
  if (!absl::SimpleAtoi(parts[0], device) || *device < -1) return false;
  if (graph) {
    pool->clear();
  } else {
    if (!IsObjectHex(parts[1])) return false;
    *pool = parts[1];
  }
  *stat = s;
  return true;
}

namespace {

// "<prefix><dev>.0x<hex>.<stat>": the device, "0x<hex>" and the stat.
bool ParseObjectCounter(const std::string& name, const char* prefix, int32_t* device,
                        std::string* object, std::string* stat) {
  if (!absl::StartsWith(name, prefix)) return false;
  const std::vector<std::string> parts = absl::StrSplit(name.substr(strlen(prefix)), '.');
  if (parts.size() != 3u) return false;
  if (!absl::SimpleAtoi(parts[0], device) || *device < -1) return false;
  if (!IsObjectHex(parts[1])) return false;
  *object = parts[1];
  *stat = parts[2];
  return true;
}

}  // namespace

bool ParsePoolTrimCounter(const std::string& name, int32_t* device, std::string* pool) {
  std::string stat;
  return ParseObjectCounter(name, "cuda.pool:", device, pool, &stat) && stat == "trim_to_bytes";
}

bool ParseMulticastCounter(const std::string& name, int32_t* device, std::string* object,
                           std::string* stat) {
  return ParseObjectCounter(name, "cuda.multicast:", device, object, stat) &&
         (*stat == "size_bytes" || *stat == "bound_bytes");
}

bool ParseTorchCounter(const std::string& name, int32_t* device, std::string* stat) {
  if (!absl::StartsWith(name, kTorchPrefix)) return false;
  const size_t begin = sizeof(kTorchPrefix) - 1;
  const size_t dot = name.find('.', begin);
  if (dot == std::string::npos || dot == begin || dot + 1 >= name.size()) return false;
  const std::string digits = name.substr(begin, dot - begin);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  return absl::SimpleAtoi(digits, device) && (*stat = name.substr(dot + 1), true);
}

struct DeviceAnalysis::Impl {
  Impl(const Trace& t, const HostContext& host, std::set<int32_t> d)
      : trace(t), devices(std::move(d)), pass(t, host, devices) {}
  const Trace& trace;
  const std::set<int32_t> devices;
  DevicePass pass;
};

std::unique_ptr<DeviceAnalysis> DeviceAnalysis::Start(const Trace& t, const HostContext& host,
                                                      std::vector<StepRow>& steps) {
  std::set<int32_t> devices = DevicesOf(t);
  if (devices.empty() && t.device_kinds.empty()) return nullptr;  // a host-only trace
  std::unique_ptr<DeviceAnalysis> d(new DeviceAnalysis);
  d->impl_ = std::make_unique<Impl>(t, host, std::move(devices));
  for (StepRow& row : steps) d->impl_->pass.step_rows.push_back(&row);
  return d;
}

DeviceAnalysis::DeviceAnalysis() = default;
DeviceAnalysis::~DeviceAnalysis() = default;

void DeviceAnalysis::Apply(size_t index, const Event& e) { impl_->pass.Apply(index, e); }

std::map<size_t, std::vector<DeviceReplay::SiteAcc>> DeviceAnalysis::Kept() const {
  return impl_->pass.Kept();
}

std::vector<size_t> DeviceAnalysis::Captures() const {
  // The sites live at each device's peak, at the pinned host peak and at
  // each (stage, device)'s largest peak (SIZE_MAX: never reached).
  const DevicePass& pass = impl_->pass;
  std::vector<size_t> indices;
  for (const auto& [d, p] : pass.run_peak()) indices.push_back(p.index);
  indices.push_back(pass.pinned_peak().index);
  for (const auto& [key, p] : pass.best_stage()) indices.push_back(p.index);
  indices.erase(std::remove(indices.begin(), indices.end(), SIZE_MAX), indices.end());
  return indices;
}

namespace {

// What the device sites, stage peaks and failures of one process are built
// from, once its passes are over.
struct SiteContext {
  const Trace& t;
  const HostContext& host;
  const Options& options;
  const DevicePass& pass;
  const std::map<size_t, std::vector<DeviceReplay::SiteAcc>>& captured;
  size_t base;      // index in `sites` of the first device site
  size_t rows;      // step rows
  double interval;  // the largest sampling interval
  bool sampled;     // sites are Horvitz-Thompson estimates once any sample had p < 1
  std::map<int32_t, const DeviceSummary*> summary_of;
  // The churn view's shares: the process's exact resident device
  // allocations in its steps (the step rows' device traffic).
  double step_dev_bytes = 0, step_dev_count = 0;
  // The growth class of the exact series a sampled site's kind counts
  // toward: each device's tensor blocks, and the pinned host bytes (the
  // resident kinds': DeviceSummary::live_growth).
  std::map<int32_t, GrowthClass> blocks_class = {};
  GrowthClass pinned_class = GrowthClass::kInsufficient;

  // Site `site` of the replay right after event `index` (null when not captured).
  const DeviceReplay::SiteAcc* LiveAt(size_t index, size_t site) const {
    auto it = captured.find(index);
    return it != captured.end() && site < it->second.size() ? &it->second[site] : nullptr;
  }
  const DeviceSummary* SummaryOf(int32_t device) const {
    auto it = summary_of.find(device);
    return it != summary_of.end() ? it->second : nullptr;
  }
};

// The site's live bytes at the peak its kind counts toward (its device's
// run peak, or the pinned host peak): `peak_index`, SIZE_MAX when none.
void FillLiveAtPeak(const SiteContext& c, size_t j, size_t peak_index, Site& s) {
  if (const DeviceReplay::SiteAcc* at = c.LiveAt(peak_index, j)) {
    s.live_bytes_at_peak = std::max(at->live_bytes, 0.0);
    if (c.sampled) {
      const HtInterval ci = HtSumInterval(s.live_bytes_at_peak, at->live_var, c.interval);
      s.live_bytes_at_peak_low = ci.low;
      s.live_bytes_at_peak_high = ci.high;
    }
  } else if (c.sampled) {
    s.live_bytes_at_peak_high = HtSumInterval(0, 0, c.interval).high;
  }
}

// The class of the exact series site kind `kind` on `device` counts toward.
GrowthClass ExactClassOf(const SiteContext& c, uint8_t kind, const DeviceSummary* dev) {
  if (kind == format::kDevTensorBlock && dev != nullptr) {
    auto it = c.blocks_class.find(dev->device);
    return it != c.blocks_class.end() ? it->second : GrowthClass::kInsufficient;
  }
  if (IsResidentKind(kind) && dev != nullptr) return dev->live_growth.cls;
  if (kind == format::kDevPinnedHost) return c.pinned_class;
  return GrowthClass::kInsufficient;
}

// The site's live bytes at each step end, their growth class and, for a
// leak, its projection against the device's (or the host's) memory. Exact
// sites (every allocation recorded with p = 1) are classified as an exact
// series. Sampled ones as host call sites are (docs/analysis.md "Intervals
// of the estimates"): a LEAK's rate is what the window's cohorts (the rows
// their blocks were allocated in) kept to the last step end, with its
// Horvitz-Thompson interval, and the bounds are the exact ones when the exact
// series of the site's kind grows (SiteBounds). As a plain series, a leak
// sampled every few steps was a staircase whose Theil-Sen interval reached 0
// (NO_TREND) in about half the runs, and the residuals alone gave intervals
// that missed the truth.
void FillSiteGrowth(const SiteContext& c, size_t j, const DeviceReplay::SiteAcc& a,
                    const DeviceSummary* dev, Site& s) {
  std::vector<double> live(c.rows, 0.0);
  if (j < c.pass.site_by_step().size()) {
    const StepSeries& v = c.pass.site_by_step()[j];
    size_t k = 0;
    for (auto it = v.begin(); it != v.end() && k < c.rows; ++it, ++k) live[k] = std::max(*it, 0.0);
  }
  s.live_bytes_by_step = StepSeries::FromDense(live);
  const size_t warmup = dev != nullptr ? dev->warmup_steps : c.host.warmup_steps;
  if (!c.sampled) {
    s.growth = ClassifyExact(live, warmup, c.host.exact);
  } else {
    GrowthInput in;
    in.y = std::move(live);
    SetCohorts(j < c.pass.cohorts().size() ? &c.pass.cohorts()[j] : nullptr, c.rows, &in);
    in.interval_by_row = c.pass.interval_by_row();
    const GrowthOptions bounds =
        SiteBounds(c.options.growth, c.host.exact, ExactClassOf(c, a.key.kind, dev));
    s.growth = ClassifySiteGrowth(in, warmup, bounds);
    // A buffer that grows by being replaced (a history kept with torch.cat
    // on the device) keeps nothing old: its cohorts miss it, its whole live
    // series does not (growth.h).
    const StepSeries none(c.rows);
    const StepSeries& held = j < c.pass.held_by_step().size() ? c.pass.held_by_step()[j] : none;
    s.growth = ClassifyReplacedGrowth(held, in, s.growth, bounds);
  }
  if (s.growth.cls != GrowthClass::kLeak) return;
  if (dev != nullptr) {
    const double used =
        static_cast<double>(dev->used_bytes_end > 0 ? dev->used_bytes_end : dev->live_bytes_end);
    Project(s.growth.slope, used, static_cast<double>(dev->total_bytes), c.host.median_step_s,
            &s.steps_to_limit, &s.seconds_to_limit);
  } else if (a.key.kind == format::kDevPinnedHost) {
    Project(s.growth.slope, c.host.host_used_bytes, c.host.memory_limit, c.host.median_step_s,
            &s.steps_to_limit, &s.seconds_to_limit);
  }
}

// SiteContext's exact classes: each device's tensor blocks (where every step
// row has them) and the pinned host bytes, at step ends.
void ExactClasses(const std::vector<StepRow>& steps, const HostContext& host, SiteContext& c) {
  std::map<int32_t, std::vector<double>> blocks;
  std::vector<double> pinned;
  for (const StepRow& row : steps) {
    pinned.push_back(static_cast<double>(row.pinned_host_live_bytes_end));
    for (const DeviceStep& ds : row.devices) {
      if (ds.has_blocks) blocks[ds.device].push_back(static_cast<double>(ds.blocks_bytes));
    }
  }
  for (const auto& [device, y] : blocks) {
    const DeviceSummary* dev = c.SummaryOf(device);
    if (y.size() != steps.size() || dev == nullptr) continue;
    c.blocks_class[device] = ClassifyExact(y, dev->warmup_steps, host.exact).cls;
  }
  c.pinned_class = ClassifyExact(pinned, host.warmup_steps, host.exact).cls;
}

// Device site `j` of the replay.
Site MakeDeviceSite(const SiteContext& c, FrameResolver& resolver, size_t j) {
  const DeviceReplay::SiteAcc& a = c.pass.replay().sites()[j];
  Site s;
  s.kind = DeviceSiteKind(a.key.kind);
  s.pid = c.t.header.pid;
  s.stack_id = a.key.stack;
  s.device = a.key.device;
  s.api = format::DeviceApiName(a.api);
  s.frames = resolver.Resolve(a.key.stack, a.first_ts, /*device=*/true);
  s.samples = a.samples;
  s.alloc_bytes = a.alloc_bytes;
  s.alloc_count = a.alloc_count;
  const bool resident = IsResidentKind(a.key.kind);
  FillDeviceChurn(a, c.rows, resident ? c.step_dev_bytes : 0, resident ? c.step_dev_count : 0,
                  c.sampled ? c.interval : 0, s);
  s.live_bytes_end = std::max(a.live_bytes, 0.0);
  s.live_count_end = std::max(a.live_count, 0.0);
  if (c.sampled) {  // exact sites keep high < 0
    const HtInterval end_ci = HtSumInterval(s.live_bytes_end, a.live_var, c.interval);
    s.live_bytes_end_low = end_ci.low;
    s.live_bytes_end_high = end_ci.high;
  }
  // Tensor blocks live on their device too: its warm-up and memory.
  const bool on_device = resident || a.key.kind == format::kDevTensorBlock;
  const DeviceSummary* dev = on_device ? c.SummaryOf(a.key.device) : nullptr;
  size_t peak_index = SIZE_MAX;
  if (resident) {
    auto p = c.pass.run_peak().find(a.key.device);
    if (p != c.pass.run_peak().end()) peak_index = p->second.index;
  } else if (a.key.kind == format::kDevPinnedHost) {
    peak_index = c.pass.pinned_peak().index;
  }
  FillLiveAtPeak(c, j, peak_index, s);
  FillSiteGrowth(c, j, a, dev, s);
  return s;
}

// The resident device sites live at `best` (a stage's largest peak on
// `sp.device`), largest first, at most options.top_peak_sites.
void FillStageTopSites(const SiteContext& c, const IndexedPeak& best, StagePeak& sp) {
  const auto& accs = c.pass.replay().sites();
  for (size_t j = 0; j < accs.size(); ++j) {
    const DeviceReplay::SiteAcc* at = c.LiveAt(best.index, j);
    if (at == nullptr || at->live_bytes <= 0 || !IsResidentKind(at->key.kind) ||
        at->key.device != sp.device) {
      continue;
    }
    PeakSite ps{c.base + j + 1, at->key.stack, at->live_bytes, at->live_count};
    if (c.sampled) {
      const HtInterval ci = HtSumInterval(at->live_bytes, at->live_var, c.interval);
      ps.live_bytes_low = ci.low;
      ps.live_bytes_high = ci.high;
    }
    sp.top_sites.push_back(ps);
  }
  std::stable_sort(
      sp.top_sites.begin(), sp.top_sites.end(),
      [](const PeakSite& a, const PeakSite& b) { return a.live_bytes > b.live_bytes; });
  if (sp.top_sites.size() > c.options.top_peak_sites) sp.top_sites.resize(c.options.top_peak_sites);
}

// The peak of stage `key.first` on device `key.second`: its largest, its
// median over the steps, the sites live at the largest.
StagePeak MakeDeviceStagePeak(const SiteContext& c, const std::pair<std::string, int32_t>& key,
                              const IndexedPeak& best, const std::vector<StepRow>& steps) {
  StagePeak sp;
  sp.pid = c.t.header.pid;
  sp.stage = key.first;
  sp.kind = SiteKind::kDevice;
  sp.device = key.second;
  sp.peak_bytes_max = best.bytes;
  sp.step_of_max = best.step < 0 ? 0 : static_cast<uint64_t>(best.step);
  std::vector<uint64_t> per_step;
  for (const StepRow& row : steps) {
    for (const DeviceStep& ds : row.devices) {
      if (ds.device != sp.device) continue;
      auto it = ds.stage_peaks.find(sp.stage);
      if (it != ds.stage_peaks.end()) per_step.push_back(it->second);
    }
  }
  sp.steps = per_step.size();
  sp.peak_bytes_median = MedianOf(per_step);
  sp.top_source = c.sampled ? "replay" : "exact";
  FillStageTopSites(c, best, sp);
  return sp;
}

// A failed device allocation (DEV_FAIL), with its site when it has one.
DeviceFailure MakeFailure(const Trace& t, const Event& e,
                          const absl::flat_hash_map<DeviceReplay::SiteKey, size_t>& site_of,
                          FrameResolver& resolver) {
  DeviceFailure f;
  f.pid = t.header.pid;
  f.time_s = Seconds(e.ts);
  f.step = e.step;
  f.stage = t.String(e.str);
  f.size = e.size;
  f.kind = DeviceSiteKind(e.kind);
  f.api = format::DeviceApiName(e.api);
  f.error = static_cast<uint64_t>(e.value);
  // cudaErrorMemoryAllocation and CUDA_ERROR_OUT_OF_MEMORY are both 2.
  if (f.error == 2) f.error_name = "out of memory";
  f.device = e.device;
  f.stack_id = e.stack;
  auto site = site_of.find(DeviceReplay::SiteKey{e.kind, e.device, e.stack});
  f.site_id = site != site_of.end() ? site->second + 1 : 0;
  f.frames = resolver.Resolve(e.stack, e.ts, /*device=*/true);
  return f;
}

}  // namespace

void DeviceAnalysis::Finish(const HostContext& host, const Options& options,
                            FrameResolver& resolver, std::vector<StepRow>& steps,
                            ProcessSummary& summary, std::vector<Site>& sites,
                            std::vector<StagePeak>& stage_peaks,
                            std::vector<DeviceFailure>& failures,
                            const std::map<size_t, std::vector<DeviceReplay::SiteAcc>>& captured) {
  const Trace& t = impl_->trace;
  DevicePass& pass = impl_->pass;
  pass.FinishSeries();
  FillStepRows(t, pass, steps);
  FillDeviceSummaries(t, host, options, impl_->devices, pass, steps, summary);
  SiteContext c{t,
                host,
                options,
                pass,
                captured,
                sites.size(),
                steps.size(),
                static_cast<double>(pass.replay().max_interval()),
                pass.replay().max_interval() > 0,
                {}};
  for (const DeviceSummary& ds : summary.devices) c.summary_of[ds.device] = &ds;
  if (c.sampled) ExactClasses(steps, host, c);
  for (const StepRow& row : steps) {
    for (const DeviceStep& ds : row.devices) {
      c.step_dev_bytes += static_cast<double>(ds.alloc_bytes);
      c.step_dev_count += static_cast<double>(ds.alloc_count);
    }
  }
  absl::flat_hash_map<DeviceReplay::SiteKey, size_t> site_of;
  const auto& accs = pass.replay().sites();
  for (size_t j = 0; j < accs.size(); ++j) {
    site_of[accs[j].key] = c.base + j;
    sites.push_back(MakeDeviceSite(c, resolver, j));
  }
  // Stage peaks of each device, after the host ones, by (stage, device).
  for (const auto& [key, best] : pass.best_stage()) {
    if (pass.replay().devices().count(key.second) == 0) continue;  // no allocation on it
    stage_peaks.push_back(MakeDeviceStagePeak(c, key, best, steps));
  }
  for (const Event& e : pass.fails()) failures.push_back(MakeFailure(t, e, site_of, resolver));
}

}  // namespace memstep::analysis

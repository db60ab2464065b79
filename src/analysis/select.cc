#include "src/analysis/select.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/analysis/growth.h"
#include "src/format/format.h"

namespace memstep::analysis {
namespace {

using reader::Event;

// Keeps the elements of `v` that `keep` accepts.
template <typename T, typename Pred>
void KeepIf(std::vector<T>& v, Pred keep) {
  v.erase(std::remove_if(v.begin(), v.end(), [&](const T& x) { return !keep(x); }), v.end());
}

bool ParseStep(const std::string& text, int64_t* out) {
  uint64_t v = 0;
  if (text.empty() || text[0] < '0' || text[0] > '9' || !absl::SimpleAtoi(text, &v) ||
      v > static_cast<uint64_t>(INT64_MAX)) {
    return false;
  }
  *out = static_cast<int64_t>(v);
  return true;
}

}  // namespace

absl::Status ParseStepRange(const std::string& text, int64_t* first, int64_t* last) {
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("--steps: '", text,
                     "' is not a step range (A:B, A:, :B or A; steps as the report numbers "
                     "them, from 0)"));
  };
  *first = -1;
  *last = -1;
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    if (!ParseStep(text, first)) return bad();
    *last = *first;
    return absl::OkStatus();
  }
  const std::string a = text.substr(0, colon), b = text.substr(colon + 1);
  if (a.empty() && b.empty()) return bad();
  if (!a.empty() && !ParseStep(a, first)) return bad();
  if (!b.empty() && !ParseStep(b, last)) return bad();
  if (*first >= 0 && *last >= 0 && *first > *last) {
    return absl::InvalidArgumentError(
        absl::StrCat("--steps: '", text, "': the first step is after the last"));
  }
  return absl::OkStatus();
}

std::string DescribeSelection(const Options& o) {
  std::vector<std::string> parts;
  if (o.first_step >= 0 || o.last_step >= 0) {
    if (o.first_step >= 0 && o.first_step == o.last_step) {
      parts.push_back(absl::StrCat("step ", o.first_step));
    } else {
      parts.push_back(absl::StrCat("steps ", o.first_step >= 0 ? absl::StrCat(o.first_step) : "",
                                   "..", o.last_step >= 0 ? absl::StrCat(o.last_step) : ""));
    }
  }
  if (!o.stage.empty()) parts.push_back(absl::StrCat("stage ", o.stage));
  if (o.pid >= 0) parts.push_back(absl::StrCat("pid ", o.pid));
  if (!o.rank.empty()) parts.push_back(absl::StrCat("rank ", o.rank));
  return absl::StrJoin(parts, ", ");
}

namespace {

// The cut: nothing after step `last`'s STEP end (or, when it has none,
// from the first STEP record of a later step on). Returns the index of the
// first event cut (events.size(): none) and sets `end_counters` to the
// counters of step `last`'s end, when it has one.
size_t FindCut(const reader::Trace& t, uint64_t last, const format::Counters** end_counters) {
  const std::vector<Event>& ev = t.events;
  for (size_t i = 0; i < ev.size(); ++i) {
    const Event& e = ev[i];
    if (e.tag != format::kTagStep) continue;
    if (e.step > last) return i;
    if (e.phase == 1 && e.step == last) {
      if (e.counters < t.counters.size()) *end_counters = &t.counters[e.counters];
      return i + 1;
    }
  }
  return ev.size();
}

// The ids of the string `stage` names (none when `stage` is empty).
absl::flat_hash_set<uint64_t> StageIds(const std::string& stage, const reader::Trace& t) {
  absl::flat_hash_set<uint64_t> stage_ids;
  for (const auto& [id, s] : t.strings) {
    if (!stage.empty() && s == stage) stage_ids.insert(id);
  }
  return stage_ids;
}

// Whether a control event other than a STEP or STAGE stays under --stage:
// a device allocation failure only in that stage. The bulk records (ALLOC,
// MMAP, DEV_ALLOC and the frees of dropped device allocations) get the
// stage filter as they are read, in BulkTransform::Apply (events.cc): the
// trace's in-memory events are control events only.
bool KeepInStage(const Event& e, const absl::flat_hash_set<uint64_t>& stage_ids) {
  return e.tag != format::kTagDevFail || stage_ids.contains(e.str);
}

// Keeps the events before `cut` that the selection keeps: steps and stages
// from step `first` on (stages: only stage `o.stage`), the records made in
// that stage. Counts the selected steps into `out`; returns the counters at
// the first selected step's begin (nullptr when `first` is 0 or none).
const format::Counters* FilterEvents(const Options& o, uint64_t first, size_t cut,
                                     const absl::flat_hash_set<uint64_t>& stage_ids,
                                     reader::Trace* t, SelectOutcome* out) {
  std::vector<Event>& ev = t->events;
  size_t kept = 0;
  const format::Counters* begin_counters = nullptr;
  for (size_t i = 0; i < cut; ++i) {
    const Event& e = ev[i];
    if (first > 0 && begin_counters == nullptr && e.tag == format::kTagStep && e.step >= first &&
        e.counters < t->counters.size()) {
      begin_counters = &t->counters[e.counters];
    }
    bool keep = true;
    if (e.tag == format::kTagStep || e.tag == format::kTagStage) {
      keep = e.step >= first;
      if (e.tag == format::kTagStage && !o.stage.empty()) keep = keep && stage_ids.contains(e.str);
      if (keep && e.tag == format::kTagStep && e.phase == 1) ++out->steps;
      if (keep && e.tag == format::kTagStage) out->stage_ran = true;
    } else if (!o.stage.empty()) {
      keep = KeepInStage(e, stage_ids);
    }
    if (keep) ev[kept++] = e;
  }
  ev.resize(kept);
  return begin_counters;
}

// The records beside the events, from step `first` to the cut.
void KeepSelectedRecords(const Options& o, uint64_t first, uint64_t cut_seq, uint64_t cut_ts,
                         reader::Trace* t) {
  KeepIf(t->alerts, [&](const reader::Alert& a) { return a.seq < cut_seq && a.step >= first; });
  KeepIf(t->snapshots, [&](const reader::SiteSnapshot& s) {
    return s.seq < cut_seq && s.step >= first && (o.stage.empty() || s.stage == o.stage);
  });
  KeepIf(t->device_info,
         [&](const reader::DeviceInfo& d) { return d.seq < cut_seq && d.step >= first; });
  KeepIf(t->hunts, [&](const reader::Hunt& h) { return h.seq < cut_seq && h.step >= first; });
  KeepIf(t->arena_stats, [&](const reader::ArenaStats& a) { return a.seq < cut_seq; });
  KeepIf(t->rates, [&](const reader::Rate& r) { return r.ts < cut_ts; });
}

// The run, as far as the report sees it, ends at step `last`'s end: its
// counters stand in for the trailer's totals.
void EndAtCut(const format::Counters* end_counters, reader::Trace* t) {
  t->max_ts = t->events.empty() ? 0 : t->events.back().ts;
  if (t->has_trailer && end_counters != nullptr) {
    t->trailer.counters = *end_counters;
    t->trailer.ts = t->max_ts;
  } else {
    t->has_trailer = false;
  }
}

// The trailer's totals count from the process start and its peak is the
// run's: from step `first`'s begin on, they are the selection's.
void SubtractBefore(uint64_t first, const format::Counters* begin_counters, reader::Trace* t) {
  if (!t->has_trailer || first == 0) return;
  format::Counters& c = t->trailer.counters;
  c.peak_bytes = c.live_bytes;
  if (begin_counters == nullptr) return;
  const auto sub = [](uint64_t a, uint64_t b) { return a > b ? a - b : 0; };
  c.alloc_bytes = sub(c.alloc_bytes, begin_counters->alloc_bytes);
  c.alloc_count = sub(c.alloc_count, begin_counters->alloc_count);
  c.free_bytes = sub(c.free_bytes, begin_counters->free_bytes);
  c.free_count = sub(c.free_count, begin_counters->free_count);
}

}  // namespace

SelectOutcome SelectTrace(const Options& o, reader::Trace* t, BulkTransform* bulk) {
  SelectOutcome out;
  if ((o.pid >= 0 && t->header.pid != static_cast<uint64_t>(o.pid)) ||
      (!o.rank.empty() && t->RankValue("RANK") != o.rank)) {
    out.process_selected = false;
    return out;
  }
  const bool by_step = o.first_step >= 0 || o.last_step >= 0;
  const uint64_t first = o.first_step >= 0 ? static_cast<uint64_t>(o.first_step) : 0;
  const uint64_t last = o.last_step >= 0 ? static_cast<uint64_t>(o.last_step) : UINT64_MAX;
  const absl::flat_hash_set<uint64_t> stage_ids = StageIds(o.stage, *t);
  const format::Counters* end_counters = nullptr;
  const size_t cut = o.last_step >= 0 ? FindCut(*t, last, &end_counters) : t->events.size();
  const std::vector<Event>& ev = t->events;
  const uint64_t cut_seq = cut < ev.size() ? ev[cut].seq : UINT64_MAX;
  const uint64_t cut_ts = cut < ev.size() ? ev[cut].ts : UINT64_MAX;
  const format::Counters* begin_counters = FilterEvents(o, first, cut, stage_ids, t, &out);
  if (bulk != nullptr) {
    bulk->cut_seq = cut_seq;
    bulk->stage_filter = !o.stage.empty();
    bulk->stage_ids = stage_ids;
  }
  if (!by_step && o.stage.empty()) return out;
  KeepSelectedRecords(o, first, cut_seq, cut_ts, t);
  if (cut_ts != UINT64_MAX) EndAtCut(end_counters, t);
  SubtractBefore(first, begin_counters, t);
  return out;
}

void SelectionTally::Before(const reader::Trace& t) {
  const std::string rank = t.RankValue("RANK");
  processes_.push_back(
      absl::StrCat("pid ", t.header.pid, rank.empty() ? "" : absl::StrCat(" (rank ", rank, ")")));
  for (const Event& e : t.events) {
    if (e.tag == format::kTagStep && e.phase == 1) {
      const int64_t step = static_cast<int64_t>(e.step);
      min_step_ = min_step_ < 0 ? step : std::min(min_step_, step);
      max_step_ = std::max(max_step_, step);
    } else if (e.tag == format::kTagStage && e.phase == 1) {
      const std::string& name = t.String(e.str);
      if (std::find(stages_.begin(), stages_.end(), name) == stages_.end() && stages_.size() < 20) {
        stages_.push_back(name);
      }
    }
  }
}

void SelectionTally::After(const SelectOutcome& outcome) {
  if (!outcome.process_selected) return;
  ++selected_;
  steps_ += outcome.steps;
  stage_ran_ |= outcome.stage_ran;
}

absl::Status SelectionTally::Check(const Options& o, const std::string& path) const {
  if (o.pid >= 0 || !o.rank.empty()) {
    if (selected_ == 0) {
      return absl::NotFoundError(absl::StrCat(path, ": no process matches ", DescribeSelection(o),
                                              " (the run has: ", absl::StrJoin(processes_, ", "),
                                              ")"));
    }
  }
  if ((o.first_step >= 0 || o.last_step >= 0) && steps_ == 0) {
    return absl::NotFoundError(
        absl::StrCat(path, ": no step in ", DescribeSelection(o), " (the run has ",
                     min_step_ < 0 ? std::string("no steps")
                                   : absl::StrCat("steps ", min_step_, "..", max_step_),
                     ")"));
  }
  if (!o.stage.empty() && !stage_ran_) {
    return absl::NotFoundError(
        absl::StrCat(path, ": stage '", o.stage, "' did not run in the selection (",
                     stages_.empty() ? std::string("the run has no stages")
                                     : absl::StrCat("stages: ", absl::StrJoin(stages_, ", ")),
                     ")"));
  }
  return absl::OkStatus();
}

void FillChurn(const HeapReplay::Accumulator& a, size_t steps, double alloc_bytes,
               double alloc_count, double interval, Site& s) {
  if (steps == 0) return;
  const double n = static_cast<double>(steps);
  s.churn_bytes_per_step = a.step_alloc_bytes / n;
  s.churn_count_per_step = a.step_alloc_count / n;
  if (a.key.kind == HeapReplay::Kind::kMmap) {  // every mapping is recorded: exact
    s.churn_bytes_per_step_low = s.churn_bytes_per_step_high = s.churn_bytes_per_step;
    s.churn_count_per_step_low = s.churn_count_per_step_high = s.churn_count_per_step;
    return;
  }
  const HtInterval b = HtSumInterval(a.step_alloc_bytes, a.step_alloc_bytes_var, interval);
  // The count's one-sample term: an unseen allocation of the site's mean
  // size weighs T / size allocations.
  const double mean = a.step_alloc_count > 0 ? a.step_alloc_bytes / a.step_alloc_count : 1;
  const HtInterval c =
      HtSumInterval(a.step_alloc_count, a.step_alloc_count_var, interval / std::max(mean, 1.0));
  s.churn_bytes_per_step_low = b.low / n;
  s.churn_bytes_per_step_high = b.high / n;
  s.churn_count_per_step_low = c.low / n;
  s.churn_count_per_step_high = c.high / n;
  if (alloc_bytes > 0) s.churn_bytes_share = a.step_alloc_bytes / alloc_bytes;
  if (alloc_count > 0) s.churn_count_share = a.step_alloc_count / alloc_count;
}

}  // namespace memstep::analysis

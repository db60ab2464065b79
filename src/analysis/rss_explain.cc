#include "src/analysis/rss_explain.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_format.h"
#include "src/analysis/trend.h"
#include "src/format/format.h"
#include "src/reader/reader.h"

namespace memstep::analysis {
namespace {

// A component explains the RSS growth when its rate reaches this share of it.
constexpr double kMinShare = 0.25;
// Fewer rows with statistics in the window: the allocator's components are unknown.
constexpr size_t kMinStatRows = 10;

struct Component {
  double slope = 0;
  double p = 1;
  bool known = false;
};

// Slope and trend of the rows [b, e) where `value(row)` is known (>= 0).
template <typename F>
Component Fit(size_t b, size_t e, F value) {
  std::vector<double> x, y;
  for (size_t k = b; k < e; ++k) {
    const double v = value(k);
    if (v < 0) continue;
    x.push_back(static_cast<double>(k));
    y.push_back(v);
  }
  Component c;
  if (y.size() < kMinStatRows) return c;
  c.known = true;
  c.slope = TheilSenSlopeXY(x, y);
  c.p = TrendTest(y).p_increasing;
  return c;
}

}  // namespace

namespace {

// One collection's COUNTER values by name and its ARENA_STATS record.
struct Collected {
  std::map<std::string, int64_t> values;
  const reader::ArenaStats* arenas = nullptr;
};

// Which collection a COUNTER name belongs to.
enum class StatsPart { kNone, kHeap, kResident };
StatsPart PartOf(const std::string& name) {
  if (name.rfind("glibc.", 0) == 0 || name.rfind("jemalloc.", 0) == 0 ||
      name == "memstep.stats_ns") {
    return StatsPart::kHeap;
  }
  if (name.rfind("rss.", 0) == 0 || name == "memstep.own_bytes" || name == "memstep.region_bytes" ||
      name == "memstep.sampled_bytes" || name == "memstep.own_ns") {
    return StatsPart::kResident;
  }
  return StatsPart::kNone;
}

void FillRow(const Collected& c, RowAllocStats& r) {
  auto get = [&](const char* n) {
    auto it = c.values.find(n);
    return it == c.values.end() ? int64_t{-1} : it->second;
  };
  r = RowAllocStats{};
  r.has = true;
  r.anon_bytes = get("rss.anon_bytes");
  r.file_bytes = get("rss.file_bytes");
  const int64_t source = get("rss.source");
  r.rss_source = source == 1 || source == 2 ? static_cast<int>(source) : 0;
  if (r.rss_source == 0 && r.anon_bytes >= 0) r.rss_source = 2;  // older traces: statm
  r.cost_ns = get("memstep.stats_ns");
  r.smaps_ns = get("rss.smaps_ns");
  r.own_ns = get("memstep.own_ns");
  // memstep's own: its mappings, plus what its sampled-block region
  // holds beyond the live blocks' requested bytes (the program's data).
  const int64_t own = get("memstep.own_bytes"), region = get("memstep.region_bytes");
  const int64_t sampled = get("memstep.sampled_bytes");
  if (own >= 0) {
    r.own_bytes = own + std::max<int64_t>(region - std::max<int64_t>(sampled, 0), 0);
  }
  const int64_t fordblks = get("glibc.free_bytes"), keepcost = get("glibc.top_bytes");
  const int64_t allocated = get("jemalloc.allocated"), active = get("jemalloc.active");
  const int64_t dirty = get("jemalloc.dirty_bytes"), muzzy = get("jemalloc.muzzy_bytes");
  if (c.arenas != nullptr && !c.arenas->arenas.empty()) {
    // Per arena: free chunks inside it (fragmentation) and its top (caching).
    r.allocator = "glibc";
    r.frag_bytes = 0;
    r.cache_bytes = 0;
    // (Clamped: the record's values are untrusted; 64 arenas of 2^56 sum
    // without overflow.)
    auto clamp = [](uint64_t v) {
      return static_cast<int64_t>(std::min<uint64_t>(v, uint64_t{1} << 56));
    };
    for (const reader::ArenaStats::Arena& a : c.arenas->arenas) {
      const int64_t free = clamp(a.free), top = std::min(clamp(a.top), free);
      r.frag_bytes += free - top;
      r.cache_bytes += top;
      r.arenas.push_back({clamp(a.system), free, top});
    }
  } else if (fordblks >= 0 && keepcost >= 0) {
    r.allocator = "glibc";
    r.frag_bytes = std::max<int64_t>(fordblks - keepcost, 0);
    r.cache_bytes = keepcost;
  } else if (allocated >= 0 && active >= 0) {
    r.allocator = "jemalloc";
    r.frag_bytes = std::max<int64_t>(active - allocated, 0);
    r.cache_bytes = (dirty >= 0 ? dirty : 0) + (muzzy >= 0 ? muzzy : 0);
  }
}

}  // namespace

// Two sources (docs/format.md "Step-end allocator statistics"): the
// step-ending thread writes the heap allocator's COUNTERs and ARENA_STATS
// record between the previous STEP record and the step's STEP end record; the
// writer thread writes the resident split and memstep's own memory after a
// `stats.step` COUNTER naming their step (same thread; older traces have them
// with the heap's). A step's row merges both. ARENA_STATS is always the heap's.
std::vector<RowAllocStats> StepAllocStats(const reader::Trace& t,
                                          const absl::flat_hash_map<uint64_t, size_t>& row_of_step,
                                          size_t rows) {
  std::map<uint64_t, Collected> by_step;
  absl::flat_hash_map<uint32_t, uint64_t> step_of;  // tid -> the step its `stats.step` named
  Collected before_end;                             // since the last STEP record, no `stats.step`
  auto merge = [](Collected& into, Collected& from) {
    into.values.merge(from.values);
    if (from.arenas != nullptr) into.arenas = from.arenas;
  };
  size_t next_arena = 0;
  auto take_arenas_before = [&](uint64_t seq) {
    for (; next_arena < t.arena_stats.size() && t.arena_stats[next_arena].seq < seq; ++next_arena) {
      before_end.arenas = &t.arena_stats[next_arena];
    }
  };
  for (const reader::Event& e : t.events) {
    if (e.tag == format::kTagCounter) {
      take_arenas_before(e.seq);
      const std::string& name = t.String(e.str);
      if (name == "stats.step") {
        step_of[e.tid] = static_cast<uint64_t>(e.value);
      } else if (const StatsPart part = PartOf(name); part != StatsPart::kNone) {
        auto it = part == StatsPart::kResident ? step_of.find(e.tid) : step_of.end();
        (it != step_of.end() ? by_step[it->second] : before_end).values[name] = e.value;
      }
      continue;
    }
    if (e.tag != format::kTagStep) continue;
    take_arenas_before(e.seq);
    if (e.phase == 1 && !before_end.values.empty()) merge(by_step[e.step], before_end);
    before_end = Collected{};
  }
  std::vector<RowAllocStats> out(rows);
  for (const auto& [step, c] : by_step) {
    auto row = row_of_step.find(step);
    if (c.values.empty() || row == row_of_step.end() || row->second >= rows) continue;
    FillRow(c, out[row->second]);
  }
  return out;
}

namespace {

// The allocator statistics of row k, or null when the row has none.
const RowAllocStats* StatAt(const RssInput& in, size_t k) {
  return k < in.stats.size() && in.stats[k].has ? &in.stats[k] : nullptr;
}

// Row k of an exact series, or -1 (unknown) past its end.
double At(const std::vector<double>& v, size_t k) { return k < v.size() ? v[k] : -1.0; }

// The median of a statistic's cost over every row that measured it, or 0.
double MedianCost(const std::vector<RowAllocStats>& stats, int64_t RowAllocStats::*field) {
  std::vector<double> v;
  for (const RowAllocStats& s : stats) {
    if (s.has && s.*field >= 0) v.push_back(static_cast<double>(s.*field));
  }
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The fitted components of the RSS growth over the window.
struct Components {
  Component live, mmap, frag, cache, file, anon, own;
};

// Fits each component over the rows [b, e); sets x->file_source.
Components FitComponents(const RssInput& in, size_t b, size_t e, RssExplain* x) {
  Components c;
  // Exact series: every row.
  c.live = Fit(b, e, [&](size_t k) { return At(in.live, k); });
  c.mmap = Fit(b, e, [&](size_t k) { return At(in.mmap, k); });
  c.frag = Fit(b, e, [&](size_t k) {
    const RowAllocStats* s = StatAt(in, k);
    return s != nullptr ? static_cast<double>(s->frag_bytes) : -1.0;
  });
  c.cache = Fit(b, e, [&](size_t k) {
    const RowAllocStats* s = StatAt(in, k);
    return s != nullptr && s->frag_bytes >= 0 ? static_cast<double>(s->cache_bytes) : -1.0;
  });
  // Anonymous vs file-backed: from smaps_rollup when enough rows read it (it
  // is exact; statm's counters may lag by a few pages per CPU), else statm.
  size_t smaps_rows = 0;
  for (size_t k = b; k < e; ++k) {
    const RowAllocStats* s = StatAt(in, k);
    smaps_rows += s != nullptr && s->rss_source == 1 && s->file_bytes >= 0;
  }
  const int source = smaps_rows >= kMinStatRows ? 1 : 0;
  auto resident = [&](size_t k, bool file_part) -> double {
    const RowAllocStats* s = StatAt(in, k);
    if (s == nullptr || (source != 0 && s->rss_source != source)) return -1.0;
    return static_cast<double>(file_part ? s->file_bytes : s->anon_bytes);
  };
  c.file = Fit(b, e, [&](size_t k) { return resident(k, true); });
  c.anon = Fit(b, e, [&](size_t k) { return resident(k, false); });
  x->file_source = !c.file.known ? "" : source == 1 ? "smaps_rollup" : "statm";
  c.own = Fit(b, e, [&](size_t k) {
    const RowAllocStats* s = StatAt(in, k);
    return s != nullptr ? static_cast<double>(s->own_bytes) : -1.0;
  });
  return c;
}

// Which glibc arena's free space grows: per arena, over the rows that list
// it; sets x->arenas and, for the arena whose free space (fragments and top)
// grows fastest, x->arena and its rates.
void FindGrowingArena(const RssInput& in, size_t b, size_t e, RssExplain* x) {
  size_t arenas = 0;
  for (size_t k = b; k < e; ++k) {
    if (const RowAllocStats* s = StatAt(in, k)) arenas = std::max(arenas, s->arenas.size());
  }
  x->arenas = arenas;
  double best_arena = 0;
  for (size_t i = 0; i < arenas; ++i) {
    auto arena = [&](size_t k, int what) -> double {
      const RowAllocStats* s = StatAt(in, k);
      if (s == nullptr || i >= s->arenas.size()) return -1.0;
      const RowAllocStats::Arena& a = s->arenas[i];
      return static_cast<double>(what == 0   ? a.free - a.top
                                 : what == 1 ? a.top
                                             : std::max<int64_t>(a.system - a.free, 0));
    };
    const Component af = Fit(b, e, [&](size_t k) { return arena(k, 0); });
    const Component at = Fit(b, e, [&](size_t k) { return arena(k, 1); });
    const Component au = Fit(b, e, [&](size_t k) { return arena(k, 2); });
    if (!af.known || af.slope + at.slope <= best_arena) continue;
    best_arena = af.slope + at.slope;
    x->arena = static_cast<int>(i);
    x->arena_frag_per_step = af.slope;
    x->arena_top_per_step = at.slope;
    x->arena_in_use_per_step = au.slope;
  }
}

// Copies the components' rates (and p-values) into x, those of the
// allocator, the file split and memstep's own only where known, and the rest
// of the RSS rate as "other".
void SetRates(const Components& c, RssExplain* x) {
  x->live_per_step = c.live.slope;
  x->live_p = c.live.p;
  x->mmap_per_step = c.mmap.slope;
  x->mmap_p = c.mmap.p;
  x->has_allocator = c.frag.known && c.cache.known;
  if (x->has_allocator) {
    x->frag_per_step = c.frag.slope;
    x->frag_p = c.frag.p;
    x->cache_per_step = c.cache.slope;
    x->cache_p = c.cache.p;
  }
  x->has_file = c.file.known && c.anon.known;
  if (x->has_file) {
    x->file_per_step = c.file.slope;
    x->file_p = c.file.p;
    x->anon_per_step = c.anon.slope;
  }
  x->has_own = c.own.known;
  if (c.own.known) {
    x->own_per_step = c.own.slope;
    x->own_p = c.own.p;
  }
  x->other_per_step = x->rss_per_step - x->live_per_step - x->frag_per_step - x->cache_per_step -
                      x->mmap_per_step - x->file_per_step - x->own_per_step;
}

// Pins: heap sites whose long-lived bytes grow, when fragmented free space
// grows (at most 5, the fastest first; the live bytes when no site grows).
void FindPins(const RssInput& in, const Components& c, double p, RssExplain* x) {
  for (const RssSite& s : in.sites) {
    if ((s.cls == GrowthClass::kLeak || s.cls == GrowthClass::kBoundedGrowth) && s.slope > 0) {
      x->pins.push_back(RssPin{s.site_id, s.slope, c.frag.slope / s.slope});
    }
  }
  std::sort(x->pins.begin(), x->pins.end(),
            [](const RssPin& a, const RssPin& b) { return a.bytes_per_step > b.bytes_per_step; });
  if (x->pins.size() > 5) x->pins.resize(5);
  if (x->pins.empty() && c.live.p < p && c.live.slope > 0) {
    x->pins.push_back(RssPin{0, c.live.slope, c.frag.slope / c.live.slope});
  }
}

// The verdict on a growing RSS (its rise is significant: the gatekeeper).
// LEAK only when the exact live bytes (or memstep's anonymous mappings)
// rise significantly themselves: RSS is never a LEAK without them. The
// allocator's free space, its cache and file-backed pages are parts of an
// established growth, attributed by their estimated rates: each needs a
// positive rate, not a trend test of its own. Such a part rises in steps
// (a freed activation leaves a hole, the next step fills part of it): its
// Hamed-Rao variance is inflated by those runs, and at 60 steps its test
// alone came out p = 0.0002, 0.007 and, in a failing run, above 0.01 for the
// same 134-200 KiB/step of fragmentation, which then lost to memstep's own
// 77 KiB/step. Sets x->verdict and x->reason.
void Decide(const Growth& rg, const Components& c, double p, RssExplain* x) {
  struct Candidate {
    const char* verdict;
    const char* what;
    double slope;
  };
  std::vector<Candidate> candidates;
  const Component& live = c.live;
  if (live.p < p && live.slope > 0) {
    candidates.push_back({"LEAK", "exact heap live bytes", live.slope});
  }
  if (c.mmap.p < p && c.mmap.slope > 0) {
    candidates.push_back({"LEAK", "anonymous mappings", c.mmap.slope});
  }
  if (x->has_allocator && c.frag.slope > 0) {
    candidates.push_back({"FRAGMENTATION", "free space inside the heap", c.frag.slope});
  }
  if (x->has_allocator && c.cache.slope > 0) {
    candidates.push_back({"CACHING",
                          x->allocator == "jemalloc" ? "dirty and muzzy pages" : "top chunks",
                          c.cache.slope});
  }
  if (x->has_file && c.file.slope > 0) {
    candidates.push_back({"FILE", "file-backed pages", c.file.slope});
  }
  // The program's components compete for the growth net of memstep's own
  // memory.
  const Component& own = c.own;
  const bool own_rises = own.known && own.p < p && own.slope > 0;
  const double net = rg.slope - (own_rises ? std::min(own.slope, rg.slope) : 0.0);
  const Candidate* best = nullptr;
  for (const Candidate& k : candidates) {
    if (best == nullptr || k.slope > best->slope) best = &k;
  }
  const Candidate memstep = {"MEMSTEP", "memstep's own memory (not the program's)", own.slope};
  // memstep's own: when it rises more than any program component and is most
  // of the growth (the rest under 25 %), or no program component explains
  // the rest.
  if (own_rises && own.slope >= kMinShare * rg.slope &&
      (best == nullptr || own.slope > best->slope) &&
      (net < kMinShare * rg.slope || best == nullptr || best->slope < kMinShare * net)) {
    best = &memstep;
  }
  if (best == nullptr || (best != &memstep && best->slope < kMinShare * net)) {
    x->verdict = "UNEXPLAINED";
    x->reason = absl::StrFormat("no component grows by %.0f %% of the RSS growth%s%s",
                                100 * kMinShare, own_rises ? " net of memstep's own memory" : "",
                                x->has_allocator ? "" : " (no allocator statistics in the trace)");
    return;
  }
  x->verdict = best->verdict;
  // Each part's rate is its own Theil-Sen slope: over a window where RSS
  // rises unevenly, one part's rate can exceed the RSS's own.
  const double share = 100 * best->slope / rg.slope;
  x->reason = share <= 100 ? absl::StrFormat("%s: %.0f %% of the RSS growth", best->what, share)
                           : absl::StrFormat(
                                 "%s: rises %.0f %% as fast as the RSS itself (each part's rate "
                                 "is fitted on its own, so the parts need not add up)",
                                 best->what, share);
  if (x->verdict != "LEAK" && !(live.p < p && live.slope > 0)) {
    x->reason += "; the exact live bytes do not grow";
  }
}

}  // namespace

RssExplain ExplainRss(const RssInput& in, const GrowthOptions& options) {
  RssExplain x;
  const Growth& rg = in.rss_growth;
  if (rg.window == 0 || rg.window_begin + rg.window > in.rss.size()) return x;
  const size_t b = rg.window_begin, e = rg.window_begin + rg.window;
  x.window_begin = b;
  x.window = rg.window;
  x.rss_per_step = rg.slope;
  x.rise_bytes = in.rss[e - 1] - in.rss[b];
  x.rate_established = rg.slope_low > 0;
  for (size_t k = b; k < e; ++k) x.stat_rows += StatAt(in, k) != nullptr;
  x.median_cost_ns = MedianCost(in.stats, &RowAllocStats::cost_ns);
  x.median_smaps_ns = MedianCost(in.stats, &RowAllocStats::smaps_ns);
  x.median_own_ns = MedianCost(in.stats, &RowAllocStats::own_ns);

  const Components c = FitComponents(in, b, e, &x);
  FindGrowingArena(in, b, e, &x);
  for (size_t k = b; k < e && x.allocator.empty(); ++k) {
    if (const RowAllocStats* s = StatAt(in, k); s != nullptr) x.allocator = s->allocator;
  }
  SetRates(c, &x);

  // Does RSS grow at all (the call-site bounds, as before)?
  const double p = options.p_value;
  const bool rss_grows = rg.p_value < p && rg.slope >= options.min_rate &&
                         rg.slope * static_cast<double>(rg.window) >= options.min_window_growth;
  const bool frag_grows = x.has_allocator && c.frag.p < p && c.frag.slope > 0;
  if (!rss_grows) {
    x.reason = "RSS does not grow significantly";
    if (frag_grows) FindPins(in, c, p, &x);
    return x;
  }
  Decide(rg, c, p, &x);
  // The verdict says what the window's rise is made of; its rate is a
  // separate estimate. An uneven rise (a staircase: a few jumps, flat between
  // them; or one that slows, as the PyTorch loop's free space does: steep in
  // the first steps, flat in the last) passes the trend test while its rate's
  // 95 % interval, which allows for slowly mixing steps, reaches 0. The
  // verdict then stands on the rise over the window, and the rate is said to
  // be not established (the text shows the rise instead of the rate). LEAK
  // is the exception: it claims a rate (the rule every LEAK follows,
  // growth.cc), so an RSS LEAK whose rate's interval reaches 0 is not
  // asserted; the exact heap's own line carries the leak.
  if (!x.verdict.empty() && !x.rate_established) {
    if (x.verdict == "LEAK") {
      x.reason = absl::StrFormat(
          "not significant: RSS rises (p = %.2g) but its rate's 95 %% interval [%.0f, %.0f] "
          "B/step reaches 0 (LEAK not asserted)",
          rg.p_value, rg.slope_low, rg.slope_high);
      x.verdict.clear();
    } else {
      x.reason += absl::StrFormat(
          "; an uneven rise (p = %.2g): its rate's 95 %% interval [%.0f, %.0f] B/step reaches "
          "0, so no rate is established",
          rg.p_value, rg.slope_low, rg.slope_high);
    }
  }
  if (frag_grows || x.verdict == "FRAGMENTATION") FindPins(in, c, p, &x);
  return x;
}

std::string RssClassName(const Growth& rss_growth, const RssExplain& x) {
  if (!x.verdict.empty()) return x.verdict;
  if (rss_growth.cls == GrowthClass::kLeak) return "GROWS";
  return GrowthClassName(rss_growth.cls);
}

}  // namespace memstep::analysis

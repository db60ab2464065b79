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

// Theil-Sen slope of (x, y): the median of the pairwise slopes.
double SlopeXY(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<double> s;
  for (size_t i = 0; i < x.size(); ++i) {
    for (size_t j = i + 1; j < x.size(); ++j) {
      if (x[j] != x[i]) s.push_back((y[j] - y[i]) / (x[j] - x[i]));
    }
  }
  if (s.empty()) return 0;
  const size_t mid = s.size() / 2;
  std::nth_element(s.begin(), s.begin() + mid, s.end());
  double m = s[mid];
  if (s.size() % 2 == 0) {
    m = (m + *std::max_element(s.begin(), s.begin() + mid)) / 2;
  }
  return m;
}

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
  c.slope = SlopeXY(x, y);
  c.p = TrendTest(y).p_increasing;
  return c;
}

}  // namespace

std::vector<RowAllocStats> StepAllocStats(const reader::Trace& t,
                                          const absl::flat_hash_map<uint64_t, size_t>& row_of_step,
                                          size_t rows) {
  std::vector<RowAllocStats> out(rows);
  std::map<std::string, int64_t> pending;  // counters since the previous STEP record
  for (const reader::Event& e : t.events) {
    if (e.tag == format::kTagCounter) {
      const std::string& name = t.String(e.str);
      if (name.rfind("glibc.", 0) == 0 || name.rfind("jemalloc.", 0) == 0 ||
          name.rfind("rss.", 0) == 0 || name == "memstep.stats_ns") {
        pending[name] = e.value;
      }
      continue;
    }
    if (e.tag != format::kTagStep) continue;
    if (e.phase == 1 && !pending.empty()) {
      auto row = row_of_step.find(e.step);
      if (row != row_of_step.end() && row->second < rows) {
        RowAllocStats& r = out[row->second];
        auto get = [&](const char* n) {
          auto it = pending.find(n);
          return it == pending.end() ? int64_t{-1} : it->second;
        };
        r.has = true;
        r.anon_bytes = get("rss.anon_bytes");
        r.file_bytes = get("rss.file_bytes");
        r.cost_ns = get("memstep.stats_ns");
        const int64_t fordblks = get("glibc.free_bytes"), keepcost = get("glibc.top_bytes");
        const int64_t allocated = get("jemalloc.allocated"), active = get("jemalloc.active");
        const int64_t dirty = get("jemalloc.dirty_bytes"), muzzy = get("jemalloc.muzzy_bytes");
        if (fordblks >= 0 && keepcost >= 0) {
          r.allocator = "glibc";
          r.frag_bytes = std::max<int64_t>(fordblks - keepcost, 0);
          r.cache_bytes = keepcost;
        } else if (allocated >= 0 && active >= 0) {
          r.allocator = "jemalloc";
          r.frag_bytes = std::max<int64_t>(active - allocated, 0);
          r.cache_bytes = (dirty >= 0 ? dirty : 0) + (muzzy >= 0 ? muzzy : 0);
        }
      }
    }
    pending.clear();
  }
  return out;
}

RssExplain ExplainRss(const RssInput& in, const GrowthOptions& options) {
  RssExplain x;
  const Growth& rg = in.rss_growth;
  const size_t rows = in.rss.size();
  if (rg.window == 0 || rg.window_begin + rg.window > rows) return x;
  const size_t b = rg.window_begin, e = rg.window_begin + rg.window;
  x.window_begin = b;
  x.window = rg.window;
  x.rss_per_step = rg.slope;

  auto at = [](const std::vector<double>& v, size_t k) { return k < v.size() ? v[k] : -1.0; };
  const auto stat = [&](size_t k) -> const RowAllocStats* {
    return k < in.stats.size() && in.stats[k].has ? &in.stats[k] : nullptr;
  };
  for (size_t k = b; k < e; ++k) x.stat_rows += stat(k) != nullptr;
  std::vector<double> costs;
  for (const RowAllocStats& s : in.stats) {
    if (s.has && s.cost_ns >= 0) costs.push_back(static_cast<double>(s.cost_ns));
  }
  if (!costs.empty()) {
    std::sort(costs.begin(), costs.end());
    x.median_cost_ns = costs[costs.size() / 2];
  }

  // Exact series: every row.
  const Component live = Fit(b, e, [&](size_t k) { return at(in.live, k); });
  const Component mmap = Fit(b, e, [&](size_t k) { return at(in.mmap, k); });
  const Component frag = Fit(b, e, [&](size_t k) {
    const RowAllocStats* s = stat(k);
    return s != nullptr ? static_cast<double>(s->frag_bytes) : -1.0;
  });
  const Component cache = Fit(b, e, [&](size_t k) {
    const RowAllocStats* s = stat(k);
    return s != nullptr && s->frag_bytes >= 0 ? static_cast<double>(s->cache_bytes) : -1.0;
  });
  const Component file = Fit(b, e, [&](size_t k) {
    const RowAllocStats* s = stat(k);
    return s != nullptr ? static_cast<double>(s->file_bytes) : -1.0;
  });
  for (size_t k = b; k < e && x.allocator.empty(); ++k) {
    if (const RowAllocStats* s = stat(k); s != nullptr) x.allocator = s->allocator;
  }
  x.live_per_step = live.slope;
  x.live_p = live.p;
  x.mmap_per_step = mmap.slope;
  x.mmap_p = mmap.p;
  x.has_allocator = frag.known && cache.known;
  if (x.has_allocator) {
    x.frag_per_step = frag.slope;
    x.frag_p = frag.p;
    x.cache_per_step = cache.slope;
    x.cache_p = cache.p;
  }
  x.has_file = file.known;
  if (file.known) {
    x.file_per_step = file.slope;
    x.file_p = file.p;
  }
  x.other_per_step = x.rss_per_step - x.live_per_step - x.frag_per_step - x.cache_per_step -
                     x.mmap_per_step - x.file_per_step;

  // Does RSS grow at all (the call-site bounds, as before)?
  const double p = options.p_value;
  const bool rss_grows = rg.p_value < p && rg.slope >= options.min_rate &&
                         rg.slope * static_cast<double>(rg.window) >= options.min_window_growth;

  // Pins: heap sites whose long-lived bytes grow, when fragmented free space grows.
  const bool frag_grows = x.has_allocator && frag.p < p && frag.slope > 0;
  if (frag_grows) {
    for (const RssSite& s : in.sites) {
      if ((s.cls == GrowthClass::kLeak || s.cls == GrowthClass::kBoundedGrowth) && s.slope > 0) {
        x.pins.push_back(RssPin{s.site_id, s.slope, frag.slope / s.slope});
      }
    }
    std::sort(x.pins.begin(), x.pins.end(),
              [](const RssPin& a, const RssPin& c) { return a.bytes_per_step > c.bytes_per_step; });
    if (x.pins.size() > 5) x.pins.resize(5);
    if (x.pins.empty() && live.p < p && live.slope > 0) {
      x.pins.push_back(RssPin{0, live.slope, frag.slope / live.slope});
    }
  }
  if (!rss_grows) {
    x.reason = "RSS does not grow significantly";
    return x;
  }

  // The largest component that rises significantly; live bytes (and
  // memstep's mappings) only when they grow: RSS is never a LEAK without them.
  struct Candidate {
    const char* verdict;
    const char* what;
    double slope;
  };
  std::vector<Candidate> c;
  if (live.p < p && live.slope > 0) c.push_back({"LEAK", "exact heap live bytes", live.slope});
  if (mmap.p < p && mmap.slope > 0) c.push_back({"LEAK", "anonymous mappings", mmap.slope});
  if (frag_grows) c.push_back({"FRAGMENTATION", "free space inside the heap", frag.slope});
  if (x.has_allocator && cache.p < p && cache.slope > 0) {
    c.push_back({"CACHING", x.allocator == "jemalloc" ? "dirty and muzzy pages" : "the top chunk",
                 cache.slope});
  }
  if (file.known && file.p < p && file.slope > 0) {
    c.push_back({"FILE", "file-backed pages", file.slope});
  }
  const Candidate* best = nullptr;
  for (const Candidate& k : c) {
    if (best == nullptr || k.slope > best->slope) best = &k;
  }
  if (best == nullptr || best->slope < kMinShare * rg.slope) {
    x.verdict = "UNEXPLAINED";
    x.reason = absl::StrFormat(
        "no component grows by %.0f %% of the RSS growth%s", 100 * kMinShare,
        x.has_allocator ? "" : " (no allocator statistics in the trace)");
    return x;
  }
  x.verdict = best->verdict;
  x.reason = absl::StrFormat("%s: %.0f %% of the RSS growth", best->what,
                             100 * best->slope / rg.slope);
  if (x.verdict != "LEAK" && !(live.p < p && live.slope > 0)) {
    x.reason += "; the exact live bytes do not grow";
  }
  return x;
}

}  // namespace memstep::analysis

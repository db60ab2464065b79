#include "src/analysis/diff.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace memstep::analysis {
namespace {

// Process keys of one run: "rank R" for a process with a rank, else
// "process K", K its order by pid among the processes without one.
std::map<uint32_t, std::string> ProcessKeys(const Report& r) {
  std::vector<uint32_t> unranked;
  std::map<uint32_t, std::string> keys;
  for (const ProcessSummary& p : r.processes) {
    if (!p.rank.empty()) {
      keys[p.pid] = absl::StrCat("rank ", p.rank);
    } else {
      unranked.push_back(p.pid);
    }
  }
  std::sort(unranked.begin(), unranked.end());
  for (size_t k = 0; k < unranked.size(); ++k) keys[unranked[k]] = absl::StrCat("process ", k);
  return keys;
}

std::string KeyOf(const std::map<uint32_t, std::string>& keys, uint32_t pid) {
  auto it = keys.find(pid);
  return it == keys.end() ? absl::StrCat("pid ", pid) : it->second;
}

bool Grows(const Growth& g) {
  return g.cls == GrowthClass::kLeak || g.cls == GrowthClass::kBoundedGrowth;
}

// A run's sites with one key, summed.
struct SiteSum {
  const Site* largest = nullptr;  // by live bytes at the end, then growth
  double live_end = 0, live_peak = 0, growth = 0, churn_bytes = 0, churn_count = 0;
  double top_growth = -1;
  std::string cls;  // the class of its fastest growing member, else of the largest
};

std::map<std::string, SiteSum> SumSites(const Report& r) {
  const std::map<uint32_t, std::string> keys = ProcessKeys(r);
  std::map<std::string, SiteSum> out;
  for (const Site& s : r.sites) {
    SiteSum& sum = out[SiteMatchKey(KeyOf(keys, s.pid), s)];
    if (sum.largest == nullptr || s.live_bytes_end > sum.largest->live_bytes_end) {
      sum.largest = &s;
      if (sum.top_growth < 0) sum.cls = GrowthClassName(s.growth.cls);
    }
    sum.live_end += s.live_bytes_end;
    sum.live_peak += s.live_bytes_at_peak;
    sum.churn_bytes += s.churn_bytes_per_step;
    sum.churn_count += s.churn_count_per_step;
    if (Grows(s.growth)) {
      sum.growth += s.growth.slope;
      if (s.growth.slope > sum.top_growth) {
        sum.top_growth = s.growth.slope;
        sum.cls = GrowthClassName(s.growth.cls);
      }
    }
  }
  return out;
}

struct ProcessFacts {
  const ProcessSummary* p = nullptr;
  double steps = 0, alloc_bytes = 0, alloc_count = 0;
};

std::map<std::string, ProcessFacts> Processes(const Report& r) {
  const std::map<uint32_t, std::string> keys = ProcessKeys(r);
  std::map<std::string, ProcessFacts> out;
  for (const ProcessSummary& p : r.processes) out[KeyOf(keys, p.pid)].p = &p;
  for (const StepRow& row : r.steps) {
    ProcessFacts& f = out[KeyOf(keys, row.pid)];
    f.steps += 1;
    f.alloc_bytes += static_cast<double>(row.alloc_bytes);
    f.alloc_count += static_cast<double>(row.alloc_count);
  }
  return out;
}

void FillProcess(const ProcessFacts& f, bool base, ProcessDiff& d) {
  if (f.p == nullptr) return;
  const ProcessSummary& p = *f.p;
  auto side = [base](DiffValue& v) -> double& { return base ? v.base : v.next; };
  (base ? d.in_base : d.in_new) = true;
  (base ? d.base_pid : d.new_pid) = p.pid;
  side(d.steps) = f.steps;
  side(d.peak_bytes) = static_cast<double>(p.peak_bytes);
  side(d.live_bytes_end) = static_cast<double>(p.live_bytes_end);
  side(d.rss_peak_bytes) = static_cast<double>(p.rss_peak_bytes);
  side(d.growth) = p.live_growth.window > 0 ? p.live_growth.slope : 0;
  (base ? d.base_class : d.new_class) = GrowthClassName(p.live_growth.cls);
  side(d.alloc_bytes_per_step) = f.steps > 0 ? f.alloc_bytes / f.steps : 0;
  side(d.alloc_count_per_step) = f.steps > 0 ? f.alloc_count / f.steps : 0;
  side(d.device_peak_bytes) = static_cast<double>(p.device_peak_bytes);
}

std::string Human(double v, const std::string& metric) {
  if (metric == "leaks") return absl::StrFormat("%.0f", v);
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double a = std::fabs(v);
  int u = 0;
  while (a >= 1024 && u < 4) a /= 1024, ++u;
  const std::string per =
      metric.find("growth") != std::string::npos || metric == "churn" ? "/step" : "";
  const char* sign = v < 0 ? "-" : "";
  return u == 0 ? absl::StrFormat("%s%.0f %s%s", sign, a, units[u], per)
                : absl::StrFormat("%s%.2f %s%s", sign, a, units[u], per);
}

}  // namespace

double DiffValue::percent() const {
  if (base == 0) {
    return next > 0   ? std::numeric_limits<double>::infinity()
           : next < 0 ? -std::numeric_limits<double>::infinity()
                      : 0.0;
  }
  return (next - base) / std::fabs(base) * 100;
}

std::string SiteMatchKey(const std::string& process, const Site& site) {
  std::string key = absl::StrCat(process, "|", SiteKindName(site.kind), "|", site.device);
  for (const Frame& f : site.frames) {
    absl::StrAppend(&key, "|", f.function);
    if (!f.file.empty()) absl::StrAppend(&key, " ", f.file, ":", f.line);
  }
  if (site.frames.empty()) absl::StrAppend(&key, "|<no stack>");
  return key;
}

Diff DiffReports(const Report& base, const Report& next) {
  Diff d;
  d.base_path = base.path;
  d.new_path = next.path;
  d.base_selection = base.selection;
  d.new_selection = next.selection;

  const std::map<std::string, ProcessFacts> bp = Processes(base), np = Processes(next);
  std::map<std::string, ProcessDiff> procs;
  for (const auto& [key, f] : bp) FillProcess(f, true, procs[key]);
  for (const auto& [key, f] : np) FillProcess(f, false, procs[key]);
  for (auto& [key, p] : procs) {
    p.key = key;
    if (!p.in_base) d.warnings.push_back(absl::StrCat(key, " (pid ", p.new_pid, ") only in NEW"));
    if (!p.in_new) d.warnings.push_back(absl::StrCat(key, " (pid ", p.base_pid, ") only in BASE"));
    d.processes.push_back(std::move(p));
  }

  using StageKey = std::tuple<std::string, std::string, int, int32_t>;
  std::map<StageKey, StageDiff> stages;
  for (int side = 0; side < 2; ++side) {
    const Report& r = side == 0 ? base : next;
    const std::map<uint32_t, std::string> keys = ProcessKeys(r);
    for (const StagePeak& sp : r.stage_peaks) {
      const std::string process = KeyOf(keys, sp.pid);
      StageDiff& s = stages[StageKey(process, sp.stage, static_cast<int>(sp.kind), sp.device)];
      s.process = process;
      s.stage = sp.stage;
      s.kind = sp.kind;
      s.device = sp.device;
      (side == 0 ? s.in_base : s.in_new) = true;
      (side == 0 ? s.peak_bytes_max.base : s.peak_bytes_max.next) =
          static_cast<double>(sp.peak_bytes_max);
      (side == 0 ? s.peak_bytes_median.base : s.peak_bytes_median.next) =
          static_cast<double>(sp.peak_bytes_median);
    }
  }
  for (auto& [key, s] : stages) d.stages.push_back(std::move(s));

  const std::map<std::string, SiteSum> bs = SumSites(base), ns = SumSites(next);
  std::map<std::string, SiteDiff> sites;
  for (int side = 0; side < 2; ++side) {
    const Report& r = side == 0 ? base : next;
    const std::map<uint32_t, std::string> keys = ProcessKeys(r);
    for (const auto& [key, sum] : side == 0 ? bs : ns) {
      SiteDiff& s = sites[key];
      const Site& site = *sum.largest;
      s.process = KeyOf(keys, site.pid);
      s.kind = site.kind;
      s.device = site.device;
      if (side == 1 || s.frames.empty()) s.frames = site.frames;
      (side == 0 ? s.base_id : s.new_id) = site.id;
      (side == 0 ? s.base_class : s.new_class) = sum.cls;
      auto set = [side](DiffValue& v, double x) { (side == 0 ? v.base : v.next) = x; };
      set(s.live_bytes_end, sum.live_end);
      set(s.live_bytes_at_peak, sum.live_peak);
      set(s.growth, sum.growth);
      set(s.churn_bytes_per_step, sum.churn_bytes);
      set(s.churn_count_per_step, sum.churn_count);
    }
  }
  for (auto& [key, s] : sites) {
    s.status = s.base_id == 0 ? "new" : s.new_id == 0 ? "gone" : "matched";
    d.sites.push_back(std::move(s));
  }
  auto weight = [](const SiteDiff& s) {
    return std::fabs(s.growth.delta()) * 100 + std::fabs(s.live_bytes_end.delta());
  };
  std::stable_sort(d.sites.begin(), d.sites.end(),
                   [&](const SiteDiff& a, const SiteDiff& b) { return weight(a) > weight(b); });
  return d;
}

bool EvaluateDiffGates(const std::vector<Gate>& gates, const Report& base, const Report& next,
                       Diff* diff) {
  bool any_failed = false;
  diff->gates.clear();
  for (const Gate& g : gates) {
    GateResult r;
    r.expression = g.expression;
    r.metric = g.metric;
    r.percent = g.percent;
    bool found = true;
    if (!g.relative) {
      found = GateMetric(next, g, r);
      r.detail = absl::StrCat("NEW: ", r.detail);
    } else if (g.metric == "site_growth") {
      r.detail = "no call site";
      bool first = true;
      for (const SiteDiff& s : diff->sites) {
        const double v = g.percent ? s.growth.percent() : s.growth.delta();
        if (!first && !(v > r.value)) continue;
        first = false;
        r.value = v;
        r.detail =
            absl::StrCat(s.status, " site ", s.process, " ",
                         s.frames.empty() ? "<no stack>" : s.frames[0].function, ": ",
                         Human(s.growth.base, "growth"), " -> ", Human(s.growth.next, "growth"));
      }
    } else {
      GateResult b, n;
      const bool fb = GateMetric(base, g, b);
      const bool fn = GateMetric(next, g, n);
      const DiffValue v{b.value, n.value};
      r.value = g.percent ? v.percent() : v.delta();
      found = fb && fn;
      r.detail = absl::StrCat("BASE ", Human(b.value, g.metric), " (", b.detail, ") -> NEW ",
                              Human(n.value, g.metric), " (", n.detail, ")");
      if (!fb) r.detail = absl::StrCat("BASE: ", b.detail);
      if (!fn) r.detail = absl::StrCat("NEW: ", n.detail);
    }
    r.passed = found && !GateHolds(g, r.value);
    any_failed |= !r.passed;
    diff->gates.push_back(std::move(r));
  }
  return any_failed;
}

}  // namespace memstep::analysis

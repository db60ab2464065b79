// The HTML report (`memstep report --format html`): one self-contained page.
// This file turns an analysis::Report into one JSON object, aggregated so
// that its size does not grow with the run; html_page.cc wraps it in the
// page, whose style sheet and script (html_page.css, html_page.js, compiled
// in through html_assets.cc) draw it. Nothing in the page loads anything
// from the network.
//
// Worked example of the aggregation (100,000 steps, 50,000 sites, 4 stages):
//   memory over steps  each process's step rows fall into at most
//                      kChartBuckets buckets of consecutive steps (100 steps
//                      each); a series keeps its min and max per bucket, so
//                      the spikes survive; the stage shading keeps, per
//                      bucket, the stage with the largest exact peak.
//   growth table       the kGrowthRows growing sites the text report would
//                      list first (LEAK before BOUNDED_GROWTH, then by rate),
//                      the rest summed in one row; each sparkline is the
//                      site's live bytes at step ends, max per bucket of
//                      kSparkPoints.
//   flame graphs       the sites' stacks merged into one tree per view;
//                      siblings below kFlameMinFraction of the view's total
//                      are merged into one "[N smaller frames]" node, and
//                      stacks deeper than kFlameMaxDepth are cut there.
// The numbers are the analysis's (the same as the text and JSON reports):
// gates as EvaluateGates left them in Report::gates, alerts, stage peaks,
// growth classes with their 95 % intervals, unattributed growth.
//
// Escaping: every string from the trace goes through the JSON writer in its
// kHtmlScript style (json_writer.h, HtmlJsonString), which
// writes a JSON string in which '<', '>' and '&' are \u escapes and U+2028
// and U+2029 are escaped too, so no text can close the <script> element that
// holds the data or start a comment in it; the page's script puts strings
// into the document only as text (textContent), never as markup.

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/report/formats.h"
#include "src/report/html_internal.h"
#include "src/report/html_page.h"
#include "src/report/report.h"
#include "src/report/text_internal.h"

namespace memstep::report {
namespace html {

std::string KindName(analysis::SiteKind kind, int32_t device) {
  if (analysis::IsHost(kind) || device < 0) return SiteKindName(kind);
  return absl::StrCat(SiteKindName(kind), " ", device);
}

}  // namespace html

namespace {

using html::D;
using html::JsonWriter;
using html::KindName;

using analysis::GrowthClass;
using analysis::ProcessSummary;
using analysis::Report;
using analysis::Site;
using analysis::SiteKind;
using analysis::StepRow;

constexpr size_t kChartBuckets = 1000;  // points per memory chart
constexpr size_t kMaxCharts = 16;       // processes drawn (the rest are listed)
constexpr size_t kMaxMarkers = 200;     // step markers per chart
constexpr size_t kGrowthRows = 50;      // growing sites listed
constexpr size_t kSparkPoints = 60;     // points per sparkline
constexpr size_t kMaxFrames = 12;       // frames listed per growing site
constexpr size_t kMaxListRows = 100;    // alerts, OOMs listed at the top

// The innermost frame outside the allocator (as the text report names sites).

// Rows [begin, end) of Report::steps per process (steps are ordered by pid).
std::map<uint32_t, std::pair<size_t, size_t>> StepRanges(const Report& r) {
  std::map<uint32_t, std::pair<size_t, size_t>> ranges;
  for (size_t i = 0; i < r.steps.size(); ++i) {
    auto [it, inserted] = ranges.try_emplace(r.steps[i].pid, i, i + 1);
    if (!inserted) it->second.second = i + 1;
  }
  return ranges;
}

// Bucket b of n rows split into `buckets`: rows [Lo(b), Lo(b + 1)).
size_t Lo(size_t b, size_t n, size_t buckets) { return b * n / buckets; }

// "gates" as EvaluateGates left them, "alert_count" and the first "alerts".
void WriteGatesAndAlerts(const Report& r, JsonWriter& j) {
  j.Key("gates");
  j.BeginArray();
  for (const analysis::GateResult& g : r.gates) internal::WriteGate(j, g);
  j.EndArray();
  j.Field("alert_count", D(r.alerts.size()));
  j.Key("alerts");
  j.BeginArray();
  for (size_t i = 0; i < r.alerts.size() && i < kMaxListRows; ++i) {
    const analysis::AlertRow& a = r.alerts[i];
    j.BeginObject();
    j.Field("pid", a.pid);
    j.Field("step", D(a.step));
    j.Field("rule", a.rule);
    j.Field("stage", a.stage);
    j.Field("value", D(a.value));
    j.Field("threshold", D(a.threshold));
    j.Field("site_id", D(a.site_id));
    j.EndObject();
  }
  j.EndArray();
}

// Process-level growth ("growth") and the growth no site explains
// ("unattributed").
void WriteProcessGrowth(const Report& r, JsonWriter& j) {
  j.Key("growth");
  j.BeginArray();
  for (const ProcessSummary& p : r.processes) {
    auto add = [&](const char* what, const analysis::Growth& g, const std::string& cls) {
      if (g.cls != GrowthClass::kLeak && g.cls != GrowthClass::kBoundedGrowth) return;
      j.BeginObject();
      j.Field("pid", p.pid);
      j.Field("what", what);
      j.Field("class", cls);
      j.Field("slope", g.slope);
      j.Field("low", g.slope_low);
      j.Field("high", g.slope_high);
      j.Field("steps_to_limit", &g == &p.live_growth ? p.steps_to_limit : -1);
      j.Field("reason", g.reason);
      j.EndObject();
    };
    add("host heap live (exact)", p.live_growth, analysis::GrowthClassName(p.live_growth.cls));
    add("RSS", p.rss_growth, analysis::RssClassName(p.rss_growth, p.rss_explain));
    for (const analysis::DeviceSummary& d : p.devices) {
      add(d.device < 0 ? "device resident" : absl::StrCat("device ", d.device, " resident").c_str(),
          d.live_growth, analysis::GrowthClassName(d.live_growth.cls));
    }
  }
  j.EndArray();
  j.Key("unattributed");
  j.BeginArray();
  for (const ProcessSummary& p : r.processes) {
    if (!(p.unattributed_bytes_per_step > 0)) continue;
    j.BeginObject();
    j.Field("pid", p.pid);
    j.Field("bytes_per_step", p.unattributed_bytes_per_step);
    j.Field("attributed_per_step", p.attributed_bytes_per_step);
    j.Field("hint", p.attribute_hint);
    j.EndObject();
  }
  j.EndArray();
}

// "attention": what the page shows first: gates, alerts, growing processes,
// unexplained growth, failed device allocations, out-of-memory snapshots,
// warnings.
void WriteAttention(const Report& r, JsonWriter& j) {
  WriteGatesAndAlerts(r, j);
  WriteProcessGrowth(r, j);
  j.Field("device_failure_count", D(r.device_failures.size()));
  j.Key("ooms");
  j.BeginArray();
  for (size_t i = 0; i < r.memory_snapshots.size() && i < kMaxListRows; ++i) {
    const analysis::MemorySnapshot& m = r.memory_snapshots[i];
    if (!m.out_of_memory) continue;
    j.BeginObject();
    j.Field("pid", m.pid);
    j.Field("step", D(m.step));
    j.Field("stage", m.stage);
    j.Field("device", m.device);
    j.Field("requested", D(m.requested));
    j.Field("free", D(m.free_bytes));
    j.Field("total", D(m.total_bytes));
    j.Field("api", m.api);
    j.EndObject();
  }
  j.EndArray();
  j.Key("warnings");
  j.BeginArray();
  for (size_t i = 0; i < r.warnings.size() && i < kMaxListRows; ++i) j.String(r.warnings[i]);
  j.EndArray();
}

void WriteProcesses(const Report& r, const std::map<uint32_t, std::pair<size_t, size_t>>& ranges,
                    JsonWriter& j) {
  j.Key("processes");
  j.BeginArray();
  for (const ProcessSummary& p : r.processes) {
    j.BeginObject();
    j.Field("pid", p.pid);
    j.Field("rank", p.rank);
    j.Field("cmdline", p.cmdline.size() > 300 ? p.cmdline.substr(0, 300) + "..." : p.cmdline);
    j.Field("hostname", p.hostname);
    auto it = ranges.find(p.pid);
    j.Field("steps", it == ranges.end() ? 0.0 : D(it->second.second - it->second.first));
    j.Field("peak_bytes", D(p.peak_bytes));
    j.Field("live_bytes_end", D(p.live_bytes_end));
    j.Field("rss_peak_bytes", D(p.rss_peak_bytes));
    j.Field("device_peak_bytes", D(p.device_peak_bytes));
    j.Field("duration_s", p.duration_s);
    j.Field("warmup_steps", D(p.warmup_steps));
    j.Field("heap_class", analysis::GrowthClassName(p.live_growth.cls));
    j.Field("truncated", p.truncated);
    j.Field("clean_exit", p.clean_exit);
    j.EndObject();
  }
  j.EndArray();
}

// One chart series: per bucket the min and max of `value` over its rows;
// value < 0 means "no value in this row" (a device the step did not use).
template <typename F>
void WriteSeries(const std::vector<StepRow>& steps, size_t begin, size_t n, size_t buckets,
                 const std::string& name, const char* style, F value, JsonWriter& j) {
  std::vector<double> lo(buckets, -1), hi(buckets, -1);
  bool any = false;
  for (size_t b = 0; b < buckets; ++b) {
    for (size_t i = Lo(b, n, buckets); i < Lo(b + 1, n, buckets); ++i) {
      const double v = value(steps[begin + i]);
      if (v < 0) continue;
      any = true;
      lo[b] = lo[b] < 0 ? v : std::min(lo[b], v);
      hi[b] = std::max(hi[b], v);
    }
  }
  if (!any) return;
  j.BeginObject();
  j.Field("name", name);
  j.Field("style", style);
  j.Key("lo");
  j.BeginArray();
  for (double v : lo) j.Double(v);
  j.EndArray();
  j.Key("hi");
  j.BeginArray();
  for (double v : hi) j.Double(v);
  j.EndArray();
  j.EndObject();
}

// The devices of rows [begin, end), sorted, and which optional series they
// have: PyTorch's reserved bytes, the driver's used bytes, pinned host bytes.
struct ChartDevices {
  std::vector<int32_t> devices;
  bool torch_reserved = false;
  bool driver_used = false;
  bool pinned = false;
};

ChartDevices DevicesOf(const std::vector<StepRow>& steps, size_t begin, size_t end) {
  ChartDevices c;
  for (size_t i = begin; i < end; ++i) {
    c.pinned |= steps[i].pinned_host_peak_bytes > 0;
    for (const analysis::DeviceStep& d : steps[i].devices) {
      if (std::find(c.devices.begin(), c.devices.end(), d.device) == c.devices.end()) {
        c.devices.push_back(d.device);
      }
      c.torch_reserved |= d.torch.reserved_bytes >= 0;
      c.driver_used |= d.has_info;
    }
  }
  std::sort(c.devices.begin(), c.devices.end());
  return c;
}

// "series": host live, host peak, RSS, then per device allocated, peak and
// reserved (PyTorch) or used (driver), then pinned host bytes.
void WriteChartSeries(const std::vector<StepRow>& steps, size_t begin, size_t end, size_t buckets,
                      JsonWriter& j) {
  const size_t n = end - begin;
  j.Key("series");
  j.BeginArray();
  auto series = [&](const std::string& name, const char* style, auto value) {
    WriteSeries(steps, begin, n, buckets, name, style, value, j);
  };
  series("host live", "host", [](const StepRow& s) { return D(s.live_bytes_end); });
  series("host peak", "peak", [](const StepRow& s) { return D(s.peak_bytes); });
  series("RSS", "rss",
         [](const StepRow& s) { return s.rss_bytes_end > 0 ? D(s.rss_bytes_end) : -1; });
  const ChartDevices c = DevicesOf(steps, begin, end);
  for (int32_t dev : c.devices) {
    auto of = [dev](const StepRow& s) -> const analysis::DeviceStep* {
      for (const analysis::DeviceStep& d : s.devices) {
        if (d.device == dev) return &d;
      }
      return nullptr;
    };
    const std::string name = dev < 0 ? "device ?" : absl::StrCat("device ", dev);
    series(name + " allocated", "dev", [&](const StepRow& s) {
      const analysis::DeviceStep* d = of(s);
      return d == nullptr ? -1 : D(d->live_bytes_end);
    });
    series(name + " peak", "devpeak", [&](const StepRow& s) {
      const analysis::DeviceStep* d = of(s);
      return d == nullptr ? -1 : D(d->peak_bytes);
    });
    if (c.torch_reserved) {
      series(name + " reserved (PyTorch)", "devres", [&](const StepRow& s) {
        const analysis::DeviceStep* d = of(s);
        return d == nullptr ? -1 : static_cast<double>(d->torch.reserved_bytes);
      });
    } else if (c.driver_used) {
      series(name + " used (driver)", "devres", [&](const StepRow& s) {
        const analysis::DeviceStep* d = of(s);
        return d == nullptr || !d->has_info ? -1 : D(d->driver_used_bytes);
      });
    }
  }
  if (c.pinned) {
    series("pinned host", "pinned",
           [](const StepRow& s) { return D(s.pinned_host_live_bytes_end); });
  }
  j.EndArray();
}

// Stage shading: "stages" (names) and "stage_of" (per bucket, the stage
// with the largest exact host peak, -1 for none).
void WriteStageShading(const std::vector<StepRow>& steps, size_t begin, size_t end, size_t buckets,
                       JsonWriter& j) {
  const size_t n = end - begin;
  std::map<std::string, int> stage_index;
  for (size_t i = begin; i < end; ++i) {
    for (const auto& [name, peak] : steps[i].stage_peaks) stage_index.emplace(name, 0);
  }
  int next = 0;
  j.Key("stages");
  j.BeginArray();
  for (auto& [name, index] : stage_index) {
    index = next++;
    j.String(name);
  }
  j.EndArray();
  j.Key("stage_of");
  j.BeginArray();
  for (size_t b = 0; b < buckets && !stage_index.empty(); ++b) {
    int best = -1;
    uint64_t best_peak = 0;
    for (size_t i = Lo(b, n, buckets); i < Lo(b + 1, n, buckets); ++i) {
      for (const auto& [name, peak] : steps[begin + i].stage_peaks) {
        if (best < 0 || peak > best_peak) best = stage_index[name], best_peak = peak;
      }
    }
    j.Double(best);
  }
  j.EndArray();
}

// A chart's step markers (step, kind, label): warm-up end, epoch starts,
// alerts, failed device allocations, out-of-memory snapshots; by step.
using Marker = std::tuple<double, std::string, std::string>;

std::vector<Marker> ChartMarkers(const Report& r, const ProcessSummary& p, size_t begin, size_t n) {
  const std::vector<StepRow>& steps = r.steps;
  std::vector<Marker> markers;
  if (p.warmup_steps > 0 && p.warmup_steps < n) {
    markers.emplace_back(D(steps[begin + p.warmup_steps].step), "warmup",
                         absl::StrCat("warm-up ends (", p.warmup_steps, " steps)"));
  }
  for (const analysis::EpochRow& e : r.epochs) {
    if (e.pid == p.pid && e.first_step > steps[begin].step) {
      markers.emplace_back(D(e.first_step), "epoch", absl::StrCat("epoch ", e.epoch));
    }
  }
  for (const analysis::AlertRow& a : r.alerts) {
    if (a.pid != p.pid) continue;
    markers.emplace_back(
        D(a.step), "alert",
        absl::StrCat("alert ", a.rule, a.stage.empty() ? "" : " (" + a.stage + ")", ": ",
                     HumanBytes(D(a.value)), " > ", HumanBytes(D(a.threshold))));
  }
  for (const analysis::DeviceFailure& f : r.device_failures) {
    if (f.pid != p.pid) continue;
    markers.emplace_back(D(f.step), "fail",
                         absl::StrCat(f.api, " of ", HumanBytes(D(f.size)), " failed",
                                      f.error_name.empty() ? "" : ": " + f.error_name));
  }
  for (const analysis::MemorySnapshot& m : r.memory_snapshots) {
    if (m.pid == p.pid && m.out_of_memory) {
      markers.emplace_back(D(m.step), "oom", absl::StrCat("out of memory (", m.cause, ")"));
    }
  }
  std::stable_sort(markers.begin(), markers.end(),
                   [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  return markers;
}

// "marker_count" and "markers": at most kMaxMarkers, spread evenly.
void WriteMarkers(const std::vector<Marker>& markers, JsonWriter& j) {
  j.Field("marker_count", D(markers.size()));
  j.Key("markers");
  j.BeginArray();
  const size_t shown = std::min(markers.size(), kMaxMarkers);
  for (size_t k = 0; k < shown; ++k) {
    const Marker& m = markers[k * markers.size() / shown];
    j.BeginArray();
    j.Double(std::get<0>(m));
    j.String(std::get<1>(m));
    j.String(std::get<2>(m));
    j.EndArray();
  }
  j.EndArray();
}

// One process's memory chart over rows [begin, end) of r.steps, in at most
// kChartBuckets buckets.
void WriteChart(const Report& r, const ProcessSummary& p, size_t begin, size_t end, JsonWriter& j) {
  const std::vector<StepRow>& steps = r.steps;
  const size_t n = end - begin;
  const size_t buckets = std::min(n, kChartBuckets);
  j.BeginObject();
  j.Field("pid", p.pid);
  j.Field("rank", p.rank);
  j.Field("steps", D(n));
  j.Field("per_bucket", D((n + buckets - 1) / buckets));
  j.Field("last_step", D(steps[end - 1].step));
  j.Key("x");
  j.BeginArray();
  for (size_t b = 0; b < buckets; ++b) j.Double(D(steps[begin + Lo(b, n, buckets)].step));
  j.EndArray();
  WriteChartSeries(steps, begin, end, buckets, j);
  WriteStageShading(steps, begin, end, buckets, j);
  WriteMarkers(ChartMarkers(r, p, begin, n), j);
  j.EndObject();
}

void WriteStagePeaks(const Report& r, JsonWriter& j) {
  j.Key("stage_peaks");
  j.BeginArray();
  for (const analysis::StagePeak& sp : r.stage_peaks) {
    j.BeginObject();
    j.Field("pid", sp.pid);
    j.Field("stage", sp.stage);
    j.Field("kind",
            sp.kind == SiteKind::kHost ? std::string("host") : KindName(sp.kind, sp.device));
    j.Field("max", D(sp.peak_bytes_max));
    j.Field("median", D(sp.peak_bytes_median));
    j.Field("step", D(sp.step_of_max));
    j.Field("steps", D(sp.steps));
    j.EndObject();
  }
  j.EndArray();
}

// One growing site: its class, rate, interval, frames and sparkline.
void WriteGrowthRow(const Site& s, const std::map<uint32_t, std::pair<size_t, size_t>>& ranges,
                    JsonWriter& j) {
  const analysis::Growth& g = s.growth;
  j.BeginObject();
  j.Field("id", D(s.id));
  j.Field("pid", s.pid);
  j.Field("class", analysis::GrowthClassName(g.cls));
  j.Field("kind", KindName(s.kind, s.device));
  j.Field("name", internal::SiteName(s, "[no stack]"));
  j.Field("slope", g.slope);
  j.Field("low", g.slope_low);
  j.Field("high", g.slope_high);
  j.Field("live_end", s.live_bytes_end);
  j.Field("capacity", g.cls == GrowthClass::kBoundedGrowth ? g.capacity : -1);
  j.Field("steps_to_limit", s.steps_to_limit);
  j.Field("calibrated", g.calibrated);
  j.Field("reason", g.reason);
  j.Key("frames");
  j.BeginArray();
  for (size_t f = 0; f < s.frames.size() && f < kMaxFrames; ++f) {
    const analysis::Frame& fr = s.frames[f];
    j.String(fr.file.empty() ? fr.function
                             : absl::StrCat(fr.function, "  ", fr.file, ":", fr.line));
  }
  j.EndArray();
  // Sparkline: the site's own process's steps, max per bucket.
  auto it = ranges.find(s.pid);
  size_t begin = 0, end = 0;
  if (it != ranges.end()) {
    begin = std::min(it->second.first, s.live_bytes_by_step.size());
    end = std::min(it->second.second, s.live_bytes_by_step.size());
  }
  const size_t n = end - begin, points = std::min(n, kSparkPoints);
  j.Key("spark");
  j.BeginArray();
  auto row = s.live_bytes_by_step.begin();  // one pass over the rows (stored sparse)
  for (size_t i = 0; i < begin; ++i) ++row;
  for (size_t b = 0; b < points; ++b) {
    double v = 0;
    for (size_t i = Lo(b, n, points); i < Lo(b + 1, n, points); ++i, ++row) v = std::max(v, *row);
    j.Double(std::round(v));
  }
  j.EndArray();
  j.Field("warmup", n == 0 ? 0.0 : D(g.warmup) * D(points) / D(n));
  j.EndObject();
}

void WriteGrowth(const Report& r, const std::map<uint32_t, std::pair<size_t, size_t>>& ranges,
                 JsonWriter& j) {
  const internal::GrowthGroups groups = internal::GroupByGrowth(r.sites);
  const std::vector<const Site*>& growing = groups.growing;
  j.Key("growth");
  j.BeginObject();
  j.Key("rows");
  j.BeginArray();
  for (size_t k = 0; k < growing.size() && k < kGrowthRows; ++k) {
    WriteGrowthRow(*growing[k], ranges, j);
  }
  j.EndArray();
  double more_bytes = 0;
  for (size_t k = kGrowthRows; k < growing.size(); ++k) more_bytes += growing[k]->live_bytes_end;
  j.Field("more_sites", growing.size() > kGrowthRows ? D(growing.size() - kGrowthRows) : 0.0);
  j.Field("more_live_end", more_bytes);
  // Python lines whose sites, summed, grow (docs/analysis.md "Python lines").
  j.Key("lines");
  j.BeginArray();
  for (const ProcessSummary& p : r.processes) {
    for (const ProcessSummary::PythonLine& line : p.python_lines) {
      const analysis::Growth& g = line.growth;
      j.BeginObject();
      j.Field("pid", p.pid);
      j.Field("class", analysis::GrowthClassName(g.cls));
      j.Field("slope", g.slope);
      j.Field("low", g.slope_low);
      j.Field("high", g.slope_high);
      j.Field("live_end", line.live_bytes_end);
      j.Field("calibrated", g.calibrated);
      j.Field("callees", line.callees);
      j.Field("reason", g.reason);
      j.Key("sites");
      j.BeginArray();
      for (uint64_t id : line.site_ids) j.Double(D(id));
      j.EndArray();
      j.Key("frames");
      j.BeginArray();
      for (const analysis::Frame& fr : line.frames) {
        j.String(absl::StrCat(fr.function, "  ", fr.file, ":", fr.line));
      }
      j.EndArray();
      j.EndObject();
    }
  }
  j.EndArray();
  j.Key("others");
  j.BeginArray();
  for (const auto& [cls, v] : groups.others) {
    j.BeginObject();
    j.Field("class", cls);
    j.Field("sites", v.first);
    j.Field("live_end", v.second);
    j.EndObject();
  }
  j.EndArray();
  j.EndObject();
}

}  // namespace

std::string FormatHtmlData(const Report& r) {
  const auto ranges = StepRanges(r);
  JsonWriter j(JsonWriter::Style::kHtmlScript);
  j.BeginObject();
  j.Field("schema", "memstep.html/1");
  j.Field("path", r.path);
  j.Field("memory_limit", D(r.memory_limit_bytes));
  j.Field("memory_limit_source", r.memory_limit_source);
  WriteProcesses(r, ranges, j);
  j.Key("attention");
  j.BeginObject();
  WriteAttention(r, j);
  j.EndObject();
  j.Key("charts");
  j.BeginArray();
  size_t charts = 0;
  for (const ProcessSummary& p : r.processes) {
    auto it = ranges.find(p.pid);
    if (it == ranges.end() || charts >= kMaxCharts) continue;
    WriteChart(r, p, it->second.first, it->second.second, j);
    ++charts;
  }
  j.EndArray();
  j.Field("charts_left_out", D(ranges.size() - charts));
  WriteStagePeaks(r, j);
  WriteGrowth(r, ranges, j);
  html::WriteFlames(r, j);
  j.EndObject();
  return j.Take();
}

std::string FormatHtml(const Report& report) {
  return HtmlPage(report.path, FormatHtmlData(report));
}

}  // namespace memstep::report

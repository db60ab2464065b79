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
// Escaping: every string from the trace goes through HtmlJsonString, which
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

// A JSON string safe inside <script type="application/json">.
std::string HtmlJsonString(const std::string& s) {
  const std::string e = JsonEscape(s);
  std::string out = "\"";
  out.reserve(e.size() + 2);
  for (size_t i = 0; i < e.size(); ++i) {
    const char c = e[i];
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else if (static_cast<unsigned char>(c) == 0xE2 && i + 2 < e.size() &&
               static_cast<unsigned char>(e[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(e[i + 2]) == 0xA8 ||
                static_cast<unsigned char>(e[i + 2]) == 0xA9)) {
      out += static_cast<unsigned char>(e[i + 2]) == 0xA8 ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::string KindName(analysis::SiteKind kind, int32_t device) {
  if (analysis::IsHost(kind) || device < 0) return SiteKindName(kind);
  return absl::StrCat(SiteKindName(kind), " ", device);
}

}  // namespace html

namespace {

using html::D;
using html::Json;
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

void WriteAttention(const Report& r, Json& j) {
  j.Key("gates");
  j.Open('[');
  for (const analysis::GateResult& g : r.gates) {
    j.Open('{');
    j.F("expression", g.expression);
    j.F("metric", g.metric);
    j.F("value", g.value);
    j.B("passed", g.passed);
    j.F("detail", g.detail);
    j.Close('}');
  }
  j.Close(']');
  j.F("alert_count", D(r.alerts.size()));
  j.Key("alerts");
  j.Open('[');
  for (size_t i = 0; i < r.alerts.size() && i < kMaxListRows; ++i) {
    const analysis::AlertRow& a = r.alerts[i];
    j.Open('{');
    j.F("pid", a.pid);
    j.F("step", D(a.step));
    j.F("rule", a.rule);
    j.F("stage", a.stage);
    j.F("value", D(a.value));
    j.F("threshold", D(a.threshold));
    j.F("site_id", D(a.site_id));
    j.Close('}');
  }
  j.Close(']');
  // Process-level growth and the growth no site explains.
  j.Key("growth");
  j.Open('[');
  for (const ProcessSummary& p : r.processes) {
    auto add = [&](const char* what, const analysis::Growth& g, const std::string& cls) {
      if (g.cls != GrowthClass::kLeak && g.cls != GrowthClass::kBoundedGrowth) return;
      j.Open('{');
      j.F("pid", p.pid);
      j.F("what", what);
      j.F("class", cls);
      j.F("slope", g.slope);
      j.F("low", g.slope_low);
      j.F("high", g.slope_high);
      j.F("steps_to_limit", &g == &p.live_growth ? p.steps_to_limit : -1);
      j.F("reason", g.reason);
      j.Close('}');
    };
    add("host heap live (exact)", p.live_growth, analysis::GrowthClassName(p.live_growth.cls));
    add("RSS", p.rss_growth, analysis::RssClassName(p.rss_growth, p.rss_explain));
    for (const analysis::DeviceSummary& d : p.devices) {
      add(d.device < 0 ? "device resident" : absl::StrCat("device ", d.device, " resident").c_str(),
          d.live_growth, analysis::GrowthClassName(d.live_growth.cls));
    }
  }
  j.Close(']');
  j.Key("unattributed");
  j.Open('[');
  for (const ProcessSummary& p : r.processes) {
    if (!(p.unattributed_bytes_per_step > 0)) continue;
    j.Open('{');
    j.F("pid", p.pid);
    j.F("bytes_per_step", p.unattributed_bytes_per_step);
    j.F("attributed_per_step", p.attributed_bytes_per_step);
    j.F("hint", p.attribute_hint);
    j.Close('}');
  }
  j.Close(']');
  j.F("device_failure_count", D(r.device_failures.size()));
  j.Key("ooms");
  j.Open('[');
  for (size_t i = 0; i < r.memory_snapshots.size() && i < kMaxListRows; ++i) {
    const analysis::MemorySnapshot& m = r.memory_snapshots[i];
    if (!m.out_of_memory) continue;
    j.Open('{');
    j.F("pid", m.pid);
    j.F("step", D(m.step));
    j.F("stage", m.stage);
    j.F("device", m.device);
    j.F("requested", D(m.requested));
    j.F("free", D(m.free_bytes));
    j.F("total", D(m.total_bytes));
    j.F("api", m.api);
    j.Close('}');
  }
  j.Close(']');
  j.Key("warnings");
  j.Open('[');
  for (size_t i = 0; i < r.warnings.size() && i < kMaxListRows; ++i) j.Str(r.warnings[i]);
  j.Close(']');
}

void WriteProcesses(const Report& r, const std::map<uint32_t, std::pair<size_t, size_t>>& ranges,
                    Json& j) {
  j.Key("processes");
  j.Open('[');
  for (const ProcessSummary& p : r.processes) {
    j.Open('{');
    j.F("pid", p.pid);
    j.F("rank", p.rank);
    j.F("cmdline", p.cmdline.size() > 300 ? p.cmdline.substr(0, 300) + "..." : p.cmdline);
    j.F("hostname", p.hostname);
    auto it = ranges.find(p.pid);
    j.F("steps", it == ranges.end() ? 0.0 : D(it->second.second - it->second.first));
    j.F("peak_bytes", D(p.peak_bytes));
    j.F("live_bytes_end", D(p.live_bytes_end));
    j.F("rss_peak_bytes", D(p.rss_peak_bytes));
    j.F("device_peak_bytes", D(p.device_peak_bytes));
    j.F("duration_s", p.duration_s);
    j.F("warmup_steps", D(p.warmup_steps));
    j.F("heap_class", analysis::GrowthClassName(p.live_growth.cls));
    j.B("truncated", p.truncated);
    j.B("clean_exit", p.clean_exit);
    j.Close('}');
  }
  j.Close(']');
}

// One chart series: per bucket the min and max of `value` over its rows;
// value < 0 means "no value in this row" (a device the step did not use).
template <typename F>
void WriteSeries(const std::vector<StepRow>& steps, size_t begin, size_t n, size_t buckets,
                 const std::string& name, const char* style, F value, Json& j) {
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
  j.Open('{');
  j.F("name", name);
  j.F("style", style);
  j.Key("lo");
  j.Open('[');
  for (double v : lo) j.Num(v);
  j.Close(']');
  j.Key("hi");
  j.Open('[');
  for (double v : hi) j.Num(v);
  j.Close(']');
  j.Close('}');
}

void WriteChart(const Report& r, const ProcessSummary& p, size_t begin, size_t end, Json& j) {
  const std::vector<StepRow>& steps = r.steps;
  const size_t n = end - begin;
  const size_t buckets = std::min(n, kChartBuckets);
  j.Open('{');
  j.F("pid", p.pid);
  j.F("rank", p.rank);
  j.F("steps", D(n));
  j.F("per_bucket", D((n + buckets - 1) / buckets));
  j.F("last_step", D(steps[end - 1].step));
  j.Key("x");
  j.Open('[');
  for (size_t b = 0; b < buckets; ++b) j.Num(D(steps[begin + Lo(b, n, buckets)].step));
  j.Close(']');
  j.Key("series");
  j.Open('[');
  auto series = [&](const std::string& name, const char* style, auto value) {
    WriteSeries(steps, begin, n, buckets, name, style, value, j);
  };
  series("host live", "host", [](const StepRow& s) { return D(s.live_bytes_end); });
  series("host peak", "peak", [](const StepRow& s) { return D(s.peak_bytes); });
  series("RSS", "rss",
         [](const StepRow& s) { return s.rss_bytes_end > 0 ? D(s.rss_bytes_end) : -1; });
  std::vector<int32_t> devices;
  bool torch_reserved = false, driver_used = false, pinned = false;
  for (size_t i = begin; i < end; ++i) {
    pinned |= steps[i].pinned_host_peak_bytes > 0;
    for (const analysis::DeviceStep& d : steps[i].devices) {
      if (std::find(devices.begin(), devices.end(), d.device) == devices.end()) {
        devices.push_back(d.device);
      }
      torch_reserved |= d.torch.reserved_bytes >= 0;
      driver_used |= d.has_info;
    }
  }
  std::sort(devices.begin(), devices.end());
  for (int32_t dev : devices) {
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
    if (torch_reserved) {
      series(name + " reserved (PyTorch)", "devres", [&](const StepRow& s) {
        const analysis::DeviceStep* d = of(s);
        return d == nullptr ? -1 : static_cast<double>(d->torch.reserved_bytes);
      });
    } else if (driver_used) {
      series(name + " used (driver)", "devres", [&](const StepRow& s) {
        const analysis::DeviceStep* d = of(s);
        return d == nullptr || !d->has_info ? -1 : D(d->driver_used_bytes);
      });
    }
  }
  if (pinned) {
    series("pinned host", "pinned",
           [](const StepRow& s) { return D(s.pinned_host_live_bytes_end); });
  }
  j.Close(']');
  // Stage shading: the stage with the largest exact host peak per bucket.
  std::map<std::string, int> stage_index;
  for (size_t i = begin; i < end; ++i) {
    for (const auto& [name, peak] : steps[i].stage_peaks) stage_index.emplace(name, 0);
  }
  int next = 0;
  j.Key("stages");
  j.Open('[');
  for (auto& [name, index] : stage_index) {
    index = next++;
    j.Str(name);
  }
  j.Close(']');
  j.Key("stage_of");
  j.Open('[');
  for (size_t b = 0; b < buckets && !stage_index.empty(); ++b) {
    int best = -1;
    uint64_t best_peak = 0;
    for (size_t i = Lo(b, n, buckets); i < Lo(b + 1, n, buckets); ++i) {
      for (const auto& [name, peak] : steps[begin + i].stage_peaks) {
        if (best < 0 || peak > best_peak) best = stage_index[name], best_peak = peak;
      }
    }
    j.Num(best);
  }
  j.Close(']');
  // Step markers: warm-up end, epoch starts, alerts, failed device
  // allocations, out-of-memory snapshots.
  std::vector<std::tuple<double, std::string, std::string>> markers;
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
  // At most kMaxMarkers, spread evenly over the run.
  std::stable_sort(markers.begin(), markers.end(),
                   [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  j.F("marker_count", D(markers.size()));
  j.Key("markers");
  j.Open('[');
  const size_t shown = std::min(markers.size(), kMaxMarkers);
  for (size_t k = 0; k < shown; ++k) {
    const auto& m = markers[k * markers.size() / shown];
    j.Open('[');
    j.Num(std::get<0>(m));
    j.Str(std::get<1>(m));
    j.Str(std::get<2>(m));
    j.Close(']');
  }
  j.Close(']');
  j.Close('}');
}

void WriteStagePeaks(const Report& r, Json& j) {
  j.Key("stage_peaks");
  j.Open('[');
  for (const analysis::StagePeak& sp : r.stage_peaks) {
    j.Open('{');
    j.F("pid", sp.pid);
    j.F("stage", sp.stage);
    j.F("kind", sp.kind == SiteKind::kHost ? std::string("host") : KindName(sp.kind, sp.device));
    j.F("max", D(sp.peak_bytes_max));
    j.F("median", D(sp.peak_bytes_median));
    j.F("step", D(sp.step_of_max));
    j.F("steps", D(sp.steps));
    j.Close('}');
  }
  j.Close(']');
}

void WriteGrowth(const Report& r, const std::map<uint32_t, std::pair<size_t, size_t>>& ranges,
                 Json& j) {
  std::vector<const Site*> growing;
  std::map<std::string, std::pair<double, double>> others;  // class -> (sites, live bytes)
  for (const Site& s : r.sites) {
    const GrowthClass c = s.growth.cls;
    if (c == GrowthClass::kLeak || c == GrowthClass::kBoundedGrowth) {
      growing.push_back(&s);
    } else {
      auto& [count, bytes] = others[analysis::GrowthClassName(c)];
      count += 1;
      bytes += s.live_bytes_end;
    }
  }
  // The text report's order: LEAK first, then by rate.
  std::stable_sort(growing.begin(), growing.end(), [](const Site* a, const Site* b) {
    if ((a->growth.cls == GrowthClass::kLeak) != (b->growth.cls == GrowthClass::kLeak)) {
      return a->growth.cls == GrowthClass::kLeak;
    }
    return a->growth.slope > b->growth.slope;
  });
  j.Key("growth");
  j.Open('{');
  j.Key("rows");
  j.Open('[');
  for (size_t k = 0; k < growing.size() && k < kGrowthRows; ++k) {
    const Site& s = *growing[k];
    const analysis::Growth& g = s.growth;
    j.Open('{');
    j.F("id", D(s.id));
    j.F("pid", s.pid);
    j.F("class", analysis::GrowthClassName(g.cls));
    j.F("kind", KindName(s.kind, s.device));
    j.F("name", internal::SiteName(s, "[no stack]"));
    j.F("slope", g.slope);
    j.F("low", g.slope_low);
    j.F("high", g.slope_high);
    j.F("live_end", s.live_bytes_end);
    j.F("capacity", g.cls == GrowthClass::kBoundedGrowth ? g.capacity : -1);
    j.F("steps_to_limit", s.steps_to_limit);
    j.B("calibrated", g.calibrated);
    j.F("reason", g.reason);
    j.Key("frames");
    j.Open('[');
    for (size_t f = 0; f < s.frames.size() && f < kMaxFrames; ++f) {
      const analysis::Frame& fr = s.frames[f];
      j.Str(fr.file.empty() ? fr.function : absl::StrCat(fr.function, "  ", fr.file, ":", fr.line));
    }
    j.Close(']');
    // Sparkline: the site's own process's steps, max per bucket.
    auto it = ranges.find(s.pid);
    size_t begin = 0, end = 0;
    if (it != ranges.end()) {
      begin = std::min(it->second.first, s.live_bytes_by_step.size());
      end = std::min(it->second.second, s.live_bytes_by_step.size());
    }
    const size_t n = end - begin, points = std::min(n, kSparkPoints);
    j.Key("spark");
    j.Open('[');
    for (size_t b = 0; b < points; ++b) {
      double v = 0;
      for (size_t i = Lo(b, n, points); i < Lo(b + 1, n, points); ++i) {
        v = std::max(v, s.live_bytes_by_step[begin + i]);
      }
      j.Num(std::round(v));
    }
    j.Close(']');
    j.F("warmup", n == 0 ? 0.0 : D(g.warmup) * D(points) / D(n));
    j.Close('}');
  }
  j.Close(']');
  double more_bytes = 0;
  for (size_t k = kGrowthRows; k < growing.size(); ++k) more_bytes += growing[k]->live_bytes_end;
  j.F("more_sites", growing.size() > kGrowthRows ? D(growing.size() - kGrowthRows) : 0.0);
  j.F("more_live_end", more_bytes);
  j.Key("others");
  j.Open('[');
  for (const auto& [cls, v] : others) {
    j.Open('{');
    j.F("class", cls);
    j.F("sites", v.first);
    j.F("live_end", v.second);
    j.Close('}');
  }
  j.Close(']');
  j.Close('}');
}

}  // namespace

std::string FormatHtmlData(const Report& r) {
  const auto ranges = StepRanges(r);
  Json j;
  j.Open('{');
  j.F("schema", "memstep.html/1");
  j.F("path", r.path);
  j.F("memory_limit", D(r.memory_limit_bytes));
  j.F("memory_limit_source", r.memory_limit_source);
  WriteProcesses(r, ranges, j);
  j.Key("attention");
  j.Open('{');
  WriteAttention(r, j);
  j.Close('}');
  j.Key("charts");
  j.Open('[');
  size_t charts = 0;
  for (const ProcessSummary& p : r.processes) {
    auto it = ranges.find(p.pid);
    if (it == ranges.end() || charts >= kMaxCharts) continue;
    WriteChart(r, p, it->second.first, it->second.second, j);
    ++charts;
  }
  j.Close(']');
  j.F("charts_left_out", D(ranges.size() - charts));
  WriteStagePeaks(r, j);
  WriteGrowth(r, ranges, j);
  html::WriteFlames(r, j);
  j.Close('}');
  return std::move(j.out());
}

std::string FormatHtml(const Report& report) {
  return HtmlPage(report.path, FormatHtmlData(report));
}

}  // namespace memstep::report

#include "src/analysis/gates.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/format/quantity.h"

namespace memstep::analysis {
namespace {

absl::Status Bad(const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad --fail-on expression '", text, "': ", why,
                   " (expected e.g. 'growth > 1MiB/step', 'peak(forward) > 2GiB', 'leaks > 0', "
                   "'device_peak > 8GiB'; memstep diff: 'peak > +10%', 'site_growth > "
                   "+256KiB/step')"));
}

bool IsGrowthMetric(const std::string& m) {
  return m == "growth" || m == "live_growth" || m == "device_growth" || m == "churn" ||
         m == "site_growth";
}

bool IsKnownMetric(const std::string& m) {
  return IsGrowthMetric(m) || m == "peak" || m == "live_end" || m == "rss_peak" || m == "leaks" ||
         m == "device_peak";
}

// churn: the exact heap bytes allocated per step, the mean over each
// process's steps; the largest over the processes.
void Churn(const Report& report, GateResult& r) {
  r.detail = "no steps";
  for (const ProcessSummary& p : report.processes) {
    double sum = 0, n = 0;
    for (const StepRow& row : report.steps) {
      if (row.pid != p.pid) continue;
      sum += static_cast<double>(row.alloc_bytes);
      ++n;
    }
    if (n > 0 && sum / n >= r.value) {
      r.value = sum / n;
      r.detail = absl::StrCat("pid ", p.pid, ", ", n, " steps");
    }
  }
}

// device_growth: the fastest LEAK among device call sites and the exact
// resident series of each device.
void DeviceGrowth(const Report& report, GateResult& r) {
  r.detail = "no device LEAK";
  for (const Site& s : report.sites) {
    if (IsHost(s.kind) || s.growth.cls != GrowthClass::kLeak || s.growth.slope <= r.value) {
      continue;
    }
    r.value = s.growth.slope;
    r.detail = absl::StrCat("LEAK ", SiteKindName(s.kind), " site #", s.id, " (pid ", s.pid, ")");
  }
  for (const ProcessSummary& p : report.processes) {
    for (const DeviceSummary& d : p.devices) {
      if (d.live_growth.cls == GrowthClass::kLeak && d.live_growth.slope > r.value) {
        r.value = d.live_growth.slope;
        r.detail = absl::StrCat("process ", p.pid, " device ", d.device, " live bytes (LEAK)");
      }
    }
  }
}

// device_peak: the largest resident peak of any device of any process.
void DevicePeak(const Report& report, GateResult& r) {
  r.detail = "no device memory recorded";
  bool first = true;
  for (const ProcessSummary& p : report.processes) {
    for (const DeviceSummary& d : p.devices) {
      if (!first && static_cast<double>(d.peak_bytes) <= r.value) continue;
      first = false;
      r.value = static_cast<double>(d.peak_bytes);
      r.detail = absl::StrCat("device ", d.device, ", pid ", p.pid);
      if (d.peak_step >= 0) absl::StrAppend(&r.detail, ", step ", d.peak_step);
    }
  }
}

// peak(STAGE) and device_peak(STAGE). A stage that never ran fails the gate
// (returns false) so that a typo cannot pass; a stage that ran without device
// memory has a device peak of 0.
bool StagePeakGate(const Report& report, const Gate& g, GateResult& r) {
  const SiteKind kind = g.metric == "peak" ? SiteKind::kHost : SiteKind::kDevice;
  bool ran = false, found = false;
  for (const StagePeak& sp : report.stage_peaks) {
    if (sp.stage != g.stage) continue;
    ran = true;
    if (sp.kind != kind) continue;
    if (!found || static_cast<double>(sp.peak_bytes_max) > r.value) {
      r.value = static_cast<double>(sp.peak_bytes_max);
      r.detail = absl::StrCat("step ", sp.step_of_max, ", pid ", sp.pid);
      if (kind == SiteKind::kDevice) r.detail = absl::StrCat("device ", sp.device, ", ", r.detail);
    }
    found = true;
  }
  if (!ran) r.detail = absl::StrCat("no stage '", g.stage, "' in the trace");
  if (ran && !found) {
    r.detail = absl::StrCat("no ", kind == SiteKind::kDevice ? "device memory" : "host peak",
                            " in stage '", g.stage, "'");
  }
  return ran;
}

// The text of a gate expression and the position of the parse in it.
struct Cursor {
  const std::string& text;
  size_t i = 0;
  void SkipSpace() {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  }
  bool At(char c) const { return i < text.size() && text[i] == c; }
};

// "peak(forward)": the metric and, for peak and device_peak, the stage.
absl::Status ParseSubject(Cursor& c, Gate& g) {
  const std::string& text = c.text;
  c.SkipSpace();
  const size_t start = c.i;
  while (c.i < text.size() &&
         (std::isalnum(static_cast<unsigned char>(text[c.i])) || text[c.i] == '_')) {
    ++c.i;
  }
  g.metric = text.substr(start, c.i - start);
  if (!IsKnownMetric(g.metric)) {
    return Bad(text, g.metric.empty() ? "missing metric"
                                      : absl::StrCat("unknown metric '", g.metric,
                                                     "' (growth, live_growth, peak, "
                                                     "peak(STAGE), live_end, rss_peak, leaks, "
                                                     "device_peak, device_peak(STAGE), "
                                                     "device_growth, churn, site_growth)"));
  }
  c.SkipSpace();
  if (!c.At('(')) return absl::OkStatus();
  if (g.metric != "peak" && g.metric != "device_peak") {
    return Bad(text, absl::StrCat("'", g.metric, "' takes no stage"));
  }
  const size_t close = text.find(')', c.i);
  if (close == std::string::npos) return Bad(text, "missing ')'");
  g.stage = std::string(absl::StripAsciiWhitespace(text.substr(c.i + 1, close - c.i - 1)));
  if (g.stage.empty()) return Bad(text, "empty stage name");
  c.i = close + 1;
  c.SkipSpace();
  return absl::OkStatus();
}

// >, >=, <, <=
absl::Status ParseOp(Cursor& c, Gate& g) {
  if (!c.At('>') && !c.At('<')) return Bad(c.text, "missing comparison (>, >=, <, <=)");
  const bool gt = c.At('>');
  ++c.i;
  const bool eq = c.At('=');
  if (eq) ++c.i;
  g.op = gt ? (eq ? Gate::Op::kGe : Gate::Op::kGt) : (eq ? Gate::Op::kLe : Gate::Op::kLt);
  return absl::OkStatus();
}

// The threshold: the one grammar of sizes (src/format/quantity.h); a count
// for 'leaks'; '/step' for growth metrics. A sign or a '%' makes it a
// change between two runs.
absl::Status ParseThreshold(Cursor& c, Gate& g) {
  namespace fmt = ::memstep::format;
  const std::string& text = c.text;
  c.SkipSpace();
  double sign = 1;
  if (c.At('+') || c.At('-')) {
    g.relative = true;
    sign = c.At('-') ? -1 : 1;
    ++c.i;
    c.SkipSpace();
  }
  const size_t i = c.i;
  size_t end = text.size();
  while (end > i && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  if (end > i && text[end - 1] == '%') {
    g.relative = g.percent = true;
    --end;
    while (end > i && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  }
  const bool count = g.metric == "leaks";
  const uint32_t accept = fmt::kAcceptSize | fmt::kAcceptFraction |
                          (IsGrowthMetric(g.metric) && !g.percent ? fmt::kAcceptPerStep : 0u);
  fmt::Quantity q;
  if (const char* err = fmt::ParseQuantity(text.data() + i, end - i, accept, &q)) {
    if (g.percent) return Bad(text, absl::StrCat(err, "; expected a change in percent: +10%"));
    if (count) return Bad(text, absl::StrCat(err, "; 'leaks' takes a count: leaks > 0"));
    const bool per_step = text.find("/step", i) != std::string::npos;
    if (per_step && !IsGrowthMetric(g.metric)) {
      return Bad(text, "'/step' only applies to growth metrics");
    }
    return Bad(text, absl::StrCat(err, "; expected ", fmt::QuantityForms(accept)));
  }
  if (g.percent && q.unit != fmt::kQuantityNone) {
    return Bad(text, "a percentage is a bare number: +10%");
  }
  if (count && q.unit != fmt::kQuantityNone) {
    return Bad(text, "'leaks' is a count and takes no unit");
  }
  g.threshold = sign * q.value;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Gate> ParseGate(const std::string& text) {
  Gate g;
  g.expression = text;
  Cursor c{text};
  for (auto step : {ParseSubject, ParseOp, ParseThreshold}) {
    if (absl::Status st = step(c, g); !st.ok()) return st;
  }
  if (g.metric == "site_growth" && !g.relative) {
    return Bad(text,
               "'site_growth' compares two runs (memstep diff): give a change, e.g. "
               "'site_growth > +256KiB/step'");
  }
  return g;
}

bool GateHolds(const Gate& g, double value) {
  switch (g.op) {
    case Gate::Op::kGt:
      return value > g.threshold;
    case Gate::Op::kGe:
      return value >= g.threshold;
    case Gate::Op::kLt:
      return value < g.threshold;
    case Gate::Op::kLe:
      return value <= g.threshold;
  }
  return false;
}

// "function (file:line)" of a Python line's innermost frame.
std::string LineName(const ProcessSummary::PythonLine& line) {
  if (line.frames.empty()) return "?";
  const Frame& f = line.frames.front();
  return absl::StrCat(f.function, " (", f.file, ":", f.line, ")");
}

// `growth`: the fastest host LEAK (site, Python line or exact heap).
void FastestLeak(const Report& report, GateResult& r) {
  r.detail = "no LEAK";
  for (const Site& s : report.sites) {
    if (IsHost(s.kind) && s.growth.cls == GrowthClass::kLeak && s.growth.slope > r.value) {
      r.value = s.growth.slope;
      r.detail = absl::StrCat("LEAK site #", s.id, " (pid ", s.pid, ")");
    }
  }
  for (const ProcessSummary& p : report.processes) {
    for (const ProcessSummary::PythonLine& line : p.python_lines) {
      if (line.growth.cls == GrowthClass::kLeak && line.growth.slope > r.value) {
        r.value = line.growth.slope;
        r.detail = absl::StrCat("LEAK Python line ", LineName(line), " (pid ", p.pid, ")");
      }
    }
    if (p.live_growth.cls == GrowthClass::kLeak && p.live_growth.slope > r.value) {
      r.value = p.live_growth.slope;
      r.detail = absl::StrCat("process ", p.pid, " live bytes (LEAK)");
    }
  }
}

// `leaks`: LEAK call sites, and LEAK Python lines with no LEAK site.
void LeakCount(const Report& report, GateResult& r) {
  // (No hash set: the parsers' fuzz target links this file without
  // Abseil's hash libraries.)
  std::vector<uint64_t> leak_ids;
  for (const Site& s : report.sites) {
    if (s.growth.cls == GrowthClass::kLeak) leak_ids.push_back(s.id);
  }
  std::sort(leak_ids.begin(), leak_ids.end());
  r.value = static_cast<double>(leak_ids.size());
  // A LEAK Python line none of whose sites is LEAK by itself is one more,
  // unless a larger LEAK line holds it (a caller line holds the lines under
  // it: lines nest or are disjoint).
  double lines = 0;
  for (const ProcessSummary& p : report.processes) {
    for (const ProcessSummary::PythonLine& line : p.python_lines) {
      if (line.growth.cls != GrowthClass::kLeak || line.site_ids.empty()) continue;
      bool any = false;
      for (uint64_t id : line.site_ids) {
        any |= std::binary_search(leak_ids.begin(), leak_ids.end(), id);
      }
      for (const ProcessSummary::PythonLine& outer : p.python_lines) {
        any |=
            outer.growth.cls == GrowthClass::kLeak &&
            outer.site_ids.size() > line.site_ids.size() &&
            std::binary_search(outer.site_ids.begin(), outer.site_ids.end(), line.site_ids.front());
      }
      lines += any ? 0 : 1;
    }
  }
  r.value += lines;
  r.detail = lines > 0 ? absl::StrFormat("LEAK call sites, %.0f of them Python lines", lines)
                       : "LEAK call sites";
}

bool GateMetric(const Report& report, const Gate& g, GateResult& r) {
  r.metric = g.metric;
  r.value = 0;
  bool found = true;
  if (g.metric == "growth") {
    FastestLeak(report, r);
  } else if (g.metric == "live_growth") {
    found = false;
    for (const ProcessSummary& p : report.processes) {
      if (p.live_growth.window == 0) continue;
      if (!found || p.live_growth.slope > r.value) {
        r.value = p.live_growth.slope;
        r.detail = absl::StrCat("process ", p.pid, " (", GrowthClassName(p.live_growth.cls), ")");
      }
      found = true;
    }
    if (!found) r.detail = "insufficient steps after warm-up";
    found = true;  // 0 when unknown; the detail says why
  } else if (!g.stage.empty()) {
    found = StagePeakGate(report, g, r);
  } else if (g.metric == "device_peak") {
    DevicePeak(report, r);
  } else if (g.metric == "device_growth") {
    DeviceGrowth(report, r);
  } else if (g.metric == "churn") {
    Churn(report, r);
  } else if (g.metric == "site_growth") {
    r.detail = "compares two runs";
  } else {
    for (const ProcessSummary& p : report.processes) {
      double v = 0;
      if (g.metric == "peak") v = static_cast<double>(p.peak_bytes);
      if (g.metric == "live_end") v = static_cast<double>(p.live_bytes_end);
      if (g.metric == "rss_peak") v = static_cast<double>(p.rss_peak_bytes);
      if (v >= r.value) {
        r.value = v;
        r.detail = absl::StrCat("pid ", p.pid);
      }
    }
    if (g.metric == "leaks") LeakCount(report, r);
  }
  return found;
}

bool EvaluateGates(const std::vector<Gate>& gates, Report* report) {
  bool any_failed = false;
  report->gates.clear();
  for (const Gate& g : gates) {
    GateResult r;
    r.expression = g.expression;
    bool found = GateMetric(*report, g, r);
    if (g.relative) {
      found = false;
      r.detail = "a change compares two runs: use memstep diff";
    }
    r.passed = found && !GateHolds(g, r.value);
    any_failed |= !r.passed;
    report->gates.push_back(std::move(r));
  }
  return any_failed;
}

}  // namespace memstep::analysis

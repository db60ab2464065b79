#include "src/report/diff_report.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/report/json_writer.h"
#include "src/report/text_internal.h"

namespace memstep::report {
namespace {

using analysis::DiffValue;

std::string Percent(double p) {
  if (std::isinf(p)) return p > 0 ? "+inf %" : "-inf %";
  return absl::StrFormat("%+.1f %%", p);
}

std::string Signed(double v, bool bytes) {
  if (!bytes) return absl::StrFormat("%+.4g", v);
  return (v >= 0 ? "+" : "") + HumanBytes(v);
}

std::string Plain(double v, bool bytes) {
  return bytes ? HumanBytes(v) : absl::StrFormat("%.4g", v);
}

// "1.00 GiB -> 1.10 GiB  +102 MiB (+10.0 %)"
std::string Change(const DiffValue& v, bool bytes, const std::string& per = "") {
  std::string out = absl::StrCat(Plain(v.base, bytes), per, " -> ", Plain(v.next, bytes), per);
  if (v.base == v.next) return absl::StrCat(out, "  (same)");
  return absl::StrCat(out, "  ", Signed(v.delta(), bytes), per, " (", Percent(v.percent()), ")");
}

std::string GateValue(const analysis::GateResult& g) {
  if (g.percent) return Percent(g.value);
  if (g.metric == "leaks") return absl::StrFormat("%.0f", g.value);
  const bool per = absl::StrContains(g.metric, "growth") || g.metric == "churn";
  return absl::StrCat(HumanBytes(g.value), per ? "/step" : "");
}

void WriteValue(internal::JsonWriter& w, const std::string& key, const DiffValue& v) {
  w.Key(key);
  w.BeginObject();
  w.Field("base", v.base);
  w.Field("new", v.next);
  w.Field("delta", v.delta());
  w.Field("percent", v.percent());  // null when BASE is 0 and NEW is not
  w.EndObject();
}

// "Gates: N of M failed" and one line per gate.
void AppendGates(const std::vector<analysis::GateResult>& gates, std::string& out) {
  if (gates.empty()) return;
  int failed = 0;
  for (const analysis::GateResult& g : gates) failed += !g.passed;
  absl::StrAppend(&out, "\nGates: ", failed, " of ", gates.size(), " failed\n");
  for (const analysis::GateResult& g : gates) {
    absl::StrAppend(&out, "  ", g.passed ? "pass" : "FAIL", "  ", g.expression, "  (value ",
                    GateValue(g), "; ", g.detail, ")\n");
  }
}

const char* OnlyIn(bool in_base, bool in_new) {
  return !in_base ? "  only in NEW" : !in_new ? "  only in BASE" : "";
}

void AppendProcess(const analysis::ProcessDiff& p, std::string& out) {
  absl::StrAppend(&out, "  ", p.key, " (pid ", p.in_base ? absl::StrCat(p.base_pid) : "-", " -> ",
                  p.in_new ? absl::StrCat(p.new_pid) : "-", ")", OnlyIn(p.in_base, p.in_new), "\n");
  absl::StrAppend(&out, "    steps             ", Change(p.steps, false), "\n");
  absl::StrAppend(&out, "    heap peak         ", Change(p.peak_bytes, true), "\n");
  absl::StrAppend(&out, "    heap live at end  ", Change(p.live_bytes_end, true), "\n");
  absl::StrAppend(&out, "    heap growth       ", Change(p.growth, true, "/step"), "  (",
                  p.base_class.empty() ? "-" : p.base_class, " -> ",
                  p.new_class.empty() ? "-" : p.new_class, ")\n");
  absl::StrAppend(&out, "    RSS peak          ", Change(p.rss_peak_bytes, true), "\n");
  absl::StrAppend(&out, "    allocated         ", Change(p.alloc_bytes_per_step, true, "/step"),
                  "\n");
  absl::StrAppend(&out, "    allocations       ", Change(p.alloc_count_per_step, false, "/step"),
                  "\n");
  if (p.device_peak_bytes.base > 0 || p.device_peak_bytes.next > 0) {
    absl::StrAppend(&out, "    device peak       ", Change(p.device_peak_bytes, true), "\n");
  }
}

void AppendStages(const std::vector<analysis::StageDiff>& stages, std::string& out) {
  if (stages.empty()) return;
  absl::StrAppend(&out, "\nStage peaks (largest over the steps, exact)\n");
  for (const analysis::StageDiff& s : stages) {
    std::string name = absl::StrCat(s.process, "  ", s.stage);
    if (s.kind == analysis::SiteKind::kDevice) absl::StrAppend(&name, " [device ", s.device, "]");
    absl::StrAppend(&out, "  ", absl::StrFormat("%-28s", name), "  ",
                    Change(s.peak_bytes_max, true), OnlyIn(s.in_base, s.in_new), "\n");
  }
}

// Site `i + 1` of the list: status, ids, kind, growth, live bytes,
// allocations, frames.
void AppendSite(size_t i, const analysis::SiteDiff& s, const ReportOptions& o, std::string& out) {
  std::string ids = absl::StrCat(s.base_id > 0 ? absl::StrCat("#", s.base_id) : "-", " -> ",
                                 s.new_id > 0 ? absl::StrCat("#", s.new_id) : "-");
  absl::StrAppend(
      &out,
      absl::StrFormat("%3d. %-7s %s, site %s%s\n", i + 1, s.status, s.process, ids,
                      analysis::IsHost(s.kind)
                          ? std::string(s.kind == analysis::SiteKind::kMmap ? " [mmap]" : "")
                          : absl::StrCat(" [", SiteKindName(s.kind), ", device ", s.device, "]")));
  absl::StrAppend(&out, "     growth       ", Change(s.growth, true, "/step"), "  (",
                  s.base_class.empty() ? "-" : s.base_class, " -> ",
                  s.new_class.empty() ? "-" : s.new_class, ")\n");
  absl::StrAppend(&out, "     live at end  ", Change(s.live_bytes_end, true), "\n");
  if (s.churn_count_per_step.base > 0 || s.churn_count_per_step.next > 0) {
    absl::StrAppend(&out, "     allocations  ", Change(s.churn_count_per_step, false, "/step"),
                    "\n");
  }
  internal::AppendFrames(s.frames, o, out);
}

void WriteGates(internal::JsonWriter& w, const std::vector<analysis::GateResult>& gates) {
  w.Key("gates");
  w.BeginArray();
  for (const analysis::GateResult& g : gates) internal::WriteGate(w, g, /*with_unit=*/true);
  w.EndArray();
}

void WriteProcess(internal::JsonWriter& w, const analysis::ProcessDiff& p) {
  w.BeginObject();
  w.Field("key", p.key);
  w.Field("in_base", p.in_base);
  w.Field("in_new", p.in_new);
  w.Field("base_pid", p.base_pid);
  w.Field("new_pid", p.new_pid);
  WriteValue(w, "steps", p.steps);
  WriteValue(w, "peak_bytes", p.peak_bytes);
  WriteValue(w, "live_bytes_end", p.live_bytes_end);
  WriteValue(w, "rss_peak_bytes", p.rss_peak_bytes);
  WriteValue(w, "growth_bytes_per_step", p.growth);
  w.Field("base_class", p.base_class);
  w.Field("new_class", p.new_class);
  WriteValue(w, "alloc_bytes_per_step", p.alloc_bytes_per_step);
  WriteValue(w, "alloc_count_per_step", p.alloc_count_per_step);
  WriteValue(w, "device_peak_bytes", p.device_peak_bytes);
  w.EndObject();
}

void WriteStage(internal::JsonWriter& w, const analysis::StageDiff& s) {
  w.BeginObject();
  w.Field("process", s.process);
  w.Field("stage", s.stage);
  w.Field("kind", analysis::SiteKindName(s.kind));
  w.Field("device", static_cast<int>(s.device));
  w.Field("in_base", s.in_base);
  w.Field("in_new", s.in_new);
  WriteValue(w, "peak_bytes_max", s.peak_bytes_max);
  WriteValue(w, "peak_bytes_median", s.peak_bytes_median);
  w.EndObject();
}

void WriteSite(internal::JsonWriter& w, const analysis::SiteDiff& s, int max_frames) {
  w.BeginObject();
  w.Field("status", s.status);
  w.Field("process", s.process);
  w.Field("kind", analysis::SiteKindName(s.kind));
  w.Field("device", static_cast<int>(s.device));
  w.Field("base_id", s.base_id);
  w.Field("new_id", s.new_id);
  WriteValue(w, "growth_bytes_per_step", s.growth);
  w.Field("base_class", s.base_class);
  w.Field("new_class", s.new_class);
  WriteValue(w, "live_bytes_end", s.live_bytes_end);
  WriteValue(w, "live_bytes_at_peak", s.live_bytes_at_peak);
  WriteValue(w, "churn_bytes_per_step", s.churn_bytes_per_step);
  WriteValue(w, "churn_count_per_step", s.churn_count_per_step);
  internal::WriteFrames(w, s.frames, max_frames);
  w.EndObject();
}

void WriteRun(internal::JsonWriter& w, const char* key, const std::string& path,
              const std::string& selection) {
  w.Key(key);
  w.BeginObject();
  w.Field("path", path);
  w.Field("selection", selection);
  w.EndObject();
}

}  // namespace

std::string FormatDiffText(const analysis::Diff& d, const ReportOptions& o) {
  std::string out = "memstep diff\n";
  absl::StrAppend(&out, "  BASE: ", d.base_path,
                  d.base_selection.empty() ? "" : absl::StrCat("  (", d.base_selection, ")"), "\n");
  absl::StrAppend(&out, "  NEW:  ", d.new_path,
                  d.new_selection.empty() ? "" : absl::StrCat("  (", d.new_selection, ")"), "\n");
  AppendGates(d.gates, out);
  absl::StrAppend(&out, "\nProcesses (BASE -> NEW; exact heap counters)\n");
  for (const analysis::ProcessDiff& p : d.processes) AppendProcess(p, out);
  AppendStages(d.stages, out);
  absl::StrAppend(&out, "\nCall sites (matched by stack; largest change first)\n");
  if (d.sites.empty()) absl::StrAppend(&out, "  none\n");
  for (size_t i = 0; i < d.sites.size(); ++i) {
    if (o.top > 0 && i >= static_cast<size_t>(o.top)) {
      absl::StrAppend(&out, "  ... ", d.sites.size() - i, " more (--top)\n");
      break;
    }
    AppendSite(i, d.sites[i], o, out);
  }
  if (!d.warnings.empty()) {
    absl::StrAppend(&out, "\nWarnings\n");
    for (const std::string& w : d.warnings) absl::StrAppend(&out, "  ", w, "\n");
  }
  return out;
}

std::string FormatDiffJson(const analysis::Diff& d, const ReportOptions& o) {
  internal::JsonWriter w;
  w.BeginObject();
  w.Field("schema", kDiffSchema);
  WriteRun(w, "base", d.base_path, d.base_selection);
  WriteRun(w, "new", d.new_path, d.new_selection);
  WriteGates(w, d.gates);
  w.Key("processes");
  w.BeginArray();
  for (const analysis::ProcessDiff& p : d.processes) WriteProcess(w, p);
  w.EndArray();
  w.Key("stages");
  w.BeginArray();
  for (const analysis::StageDiff& s : d.stages) WriteStage(w, s);
  w.EndArray();
  w.Key("sites");
  w.BeginArray();
  for (size_t i = 0; i < d.sites.size(); ++i) {
    if (o.top > 0 && i >= static_cast<size_t>(o.top)) break;
    WriteSite(w, d.sites[i], o.frames);
  }
  w.EndArray();
  w.Field("warnings", d.warnings);
  w.EndObject();
  std::string out = w.Take();
  out += '\n';
  return out;
}

}  // namespace memstep::report

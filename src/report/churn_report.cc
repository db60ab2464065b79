#include "src/report/churn_report.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/report/formats.h"
#include "src/report/json_writer.h"
#include "src/report/text_internal.h"

namespace memstep::report {
namespace {

using analysis::ProcessSummary;
using analysis::Report;
using analysis::Site;

// A process's exact allocations over its steps: host, and resident device
// memory (every device's).
struct Totals {
  size_t steps = 0;
  double bytes = 0, count = 0;
  double device_bytes = 0, device_count = 0;
};

Totals TotalsOf(const Report& r, uint32_t pid) {
  Totals t;
  for (const analysis::StepRow& row : r.steps) {
    if (row.pid != pid) continue;
    ++t.steps;
    t.bytes += static_cast<double>(row.alloc_bytes);
    t.count += static_cast<double>(row.alloc_count);
    for (const analysis::DeviceStep& d : row.devices) {
      t.device_bytes += static_cast<double>(d.alloc_bytes);
      t.device_count += static_cast<double>(d.alloc_count);
    }
  }
  return t;
}

// The process's host and mmap sites (device: its device sites) that
// allocated in its steps, hottest first.
std::vector<const Site*> ChurnSites(const Report& r, uint32_t pid, bool device) {
  std::vector<const Site*> out;
  for (const Site& s : r.sites) {
    if (s.pid == pid && analysis::IsHost(s.kind) != device && s.churn_count_per_step > 0) {
      out.push_back(&s);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Site* a, const Site* b) {
    if (a->churn_count_per_step != b->churn_count_per_step) {
      return a->churn_count_per_step > b->churn_count_per_step;
    }
    return a->churn_bytes_per_step > b->churn_bytes_per_step;
  });
  return out;
}

std::string Count(double v) {
  if (v >= 100) return Thousands(static_cast<uint64_t>(v + 0.5));
  return absl::StrFormat("%.3g", v);
}

// "[low, high]"; "exact" for an exact value (high < 0).
std::string Ci(double low, double high, bool bytes) {
  if (high < 0) return "exact";
  return bytes ? absl::StrCat("[", HumanBytes(low), ", ", HumanBytes(high), "]")
               : absl::StrCat("[", Count(low), ", ", Count(high), "]");
}

// " [mmap]", " [device_pool, device 0]" or "".
std::string KindTag(const Site& s) {
  if (s.kind == analysis::SiteKind::kHost) return "";
  if (analysis::IsHost(s.kind)) return " [mmap]";
  return absl::StrCat(" [", analysis::SiteKindName(s.kind),
                      s.device >= 0 ? absl::StrCat(", device ", s.device) : "", "]");
}

// Shares of a device site are of the resident device allocations: none for
// pinned host memory and tensor blocks (share 0 with allocations).
bool HasShare(const Site& s) { return s.churn_count_share > 0 || s.churn_bytes_share > 0; }

void AppendSites(const std::vector<const Site*>& sites, const ReportOptions& o, std::string& out) {
  for (size_t i = 0; i < sites.size(); ++i) {
    if (o.top > 0 && i >= static_cast<size_t>(o.top)) {
      absl::StrAppend(&out, "  ... ", sites.size() - i, " more sites (--top)\n");
      break;
    }
    const Site& s = *sites[i];
    const bool share = analysis::IsHost(s.kind) || HasShare(s);
    absl::StrAppend(
        &out,
        absl::StrFormat("%3d. site #%d%s  %s allocs/step %s", i + 1, s.id, KindTag(s),
                        Count(s.churn_count_per_step),
                        Ci(s.churn_count_per_step_low, s.churn_count_per_step_high, false)),
        share ? absl::StrFormat("  %.1f %% of allocations", 100 * s.churn_count_share) : "", "\n");
    absl::StrAppend(
        &out,
        absl::StrFormat("     %s/step %s", HumanBytes(s.churn_bytes_per_step),
                        Ci(s.churn_bytes_per_step_low, s.churn_bytes_per_step_high, true)),
        share ? absl::StrFormat("  %.1f %% of bytes", 100 * s.churn_bytes_share) : "", "\n");
    internal::AppendFrames(s.frames, o, out);
  }
}

}  // namespace

std::string FormatChurnText(const Report& r, const ReportOptions& o) {
  std::string out = absl::StrCat("memstep churn: ", r.path, "\n");
  if (!r.selection.empty()) absl::StrAppend(&out, "selection: ", r.selection, "\n");
  absl::StrAppend(&out,
                  "Allocations made during the steps, per step, by call site (estimated from "
                  "the samples, 95% CI; shares of the exact totals): the hot allocators to "
                  "pool.\n");
  for (const ProcessSummary& p : r.processes) {
    const Totals t = TotalsOf(r, p.pid);
    absl::StrAppend(&out, "\npid ", p.pid,
                    p.rank.empty() ? "" : absl::StrCat(" (rank ", p.rank, ")"), ": ");
    if (t.steps == 0) {
      absl::StrAppend(&out, "no steps\n");
      continue;
    }
    const double n = static_cast<double>(t.steps);
    absl::StrAppend(&out, t.steps, " steps, exact ", Count(t.count / n), " allocations and ",
                    HumanBytes(t.bytes / n), " per step\n");
    const std::vector<const Site*> sites = ChurnSites(r, p.pid, false);
    if (sites.empty()) absl::StrAppend(&out, "  no sampled allocation in the steps\n");
    AppendSites(sites, o, out);
    const std::vector<const Site*> device = ChurnSites(r, p.pid, true);
    if (!device.empty() || t.device_count > 0) {
      absl::StrAppend(&out, "  device: exact ", Count(t.device_count / n), " allocations and ",
                      HumanBytes(t.device_bytes / n), " per step (resident kinds)\n");
      if (device.empty()) absl::StrAppend(&out, "  no sampled device allocation in the steps\n");
      AppendSites(device, o, out);
    }
  }
  return out;
}

namespace {

// The churn document, then its newline.
void WriteChurnDocument(internal::JsonWriter& w, const Report& r, const ReportOptions& o) {
  w.BeginObject();
  w.Field("schema", kChurnSchema);
  w.Field("path", r.path);
  w.Field("selection", r.selection);
  w.Key("processes");
  w.BeginArray();
  for (const ProcessSummary& p : r.processes) {
    const Totals t = TotalsOf(r, p.pid);
    const double n = t.steps > 0 ? static_cast<double>(t.steps) : 1;
    w.BeginObject();
    w.Field("pid", p.pid);
    w.Field("rank", p.rank);
    w.Field("steps", static_cast<uint64_t>(t.steps));
    w.Field("alloc_bytes_per_step", t.bytes / n);
    w.Field("alloc_count_per_step", t.count / n);
    w.Field("device_alloc_bytes_per_step", t.device_bytes / n);
    w.Field("device_alloc_count_per_step", t.device_count / n);
    w.Key("sites");
    w.BeginArray();
    for (bool device : {false, true}) {  // host and mmap sites, then device sites
      const std::vector<const Site*> sites = ChurnSites(r, p.pid, device);
      for (size_t i = 0; i < sites.size(); ++i) {
        if (o.top > 0 && i >= static_cast<size_t>(o.top)) break;
        const Site& s = *sites[i];
        w.BeginObject();
        w.Field("site_id", s.id);
        w.Field("kind", analysis::SiteKindName(s.kind));
        if (device) w.Field("device", static_cast<int>(s.device));
        w.Field("samples", s.samples);
        w.Key("churn");
        internal::WriteChurn(w, s);
        internal::WriteFrames(w, s.frames, o.frames);
        w.EndObject();
      }
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.Field("warnings", r.warnings);
  w.EndObject();
  w.EndLine();
}

}  // namespace

std::string FormatChurnJson(const Report& r, const ReportOptions& o) {
  internal::JsonWriter w;
  WriteChurnDocument(w, r, o);
  return w.Take();
}

bool WriteChurnJson(const Report& r, const ReportOptions& o, const TextSink& sink) {
  internal::JsonWriter w(sink);
  WriteChurnDocument(w, r, o);
  return w.Finish();
}

std::string FormatChurnCsv(const Report& r) {
  std::string out =
      "pid,rank,steps,site_id,kind,alloc_count_per_step,alloc_count_per_step_low,"
      "alloc_count_per_step_high,alloc_bytes_per_step,alloc_bytes_per_step_low,"
      "alloc_bytes_per_step_high,count_share,bytes_share,function,file,line,stack\r\n";
  for (const ProcessSummary& p : r.processes) {
    const Totals t = TotalsOf(r, p.pid);
    std::vector<const Site*> sites = ChurnSites(r, p.pid, false);
    for (const Site* d : ChurnSites(r, p.pid, true)) sites.push_back(d);
    for (const Site* sp : sites) {
      const Site& s = *sp;
      auto lo = [](double v, double low, double high) { return high < 0 ? v : low; };
      auto hi = [](double v, double high) { return high < 0 ? v : high; };
      std::string stack;
      for (const analysis::Frame& f : s.frames) {
        if (!stack.empty()) stack += ';';
        stack += f.function;
      }
      const analysis::Frame* top = s.frames.empty() ? nullptr : &s.frames[0];
      absl::StrAppend(
          &out, p.pid, ",", CsvField(p.rank), ",", t.steps, ",", s.id, ",",
          analysis::SiteKindName(s.kind), ",",
          absl::StrFormat(
              "%.3f,%.3f,%.3f,%.1f,%.1f,%.1f,%.6f,%.6f,", s.churn_count_per_step,
              lo(s.churn_count_per_step, s.churn_count_per_step_low, s.churn_count_per_step_high),
              hi(s.churn_count_per_step, s.churn_count_per_step_high), s.churn_bytes_per_step,
              lo(s.churn_bytes_per_step, s.churn_bytes_per_step_low, s.churn_bytes_per_step_high),
              hi(s.churn_bytes_per_step, s.churn_bytes_per_step_high), s.churn_count_share,
              s.churn_bytes_share),
          CsvField(top != nullptr ? top->function : ""), ",",
          CsvField(top != nullptr ? top->file : ""), ",", top != nullptr ? top->line : 0, ",",
          CsvField(stack), "\r\n");
    }
  }
  return out;
}

}  // namespace memstep::report

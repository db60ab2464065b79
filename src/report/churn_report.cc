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

// A process's exact allocations over its steps.
struct Totals {
  size_t steps = 0;
  double bytes = 0, count = 0;
};

Totals TotalsOf(const Report& r, uint32_t pid) {
  Totals t;
  for (const analysis::StepRow& row : r.steps) {
    if (row.pid != pid) continue;
    ++t.steps;
    t.bytes += static_cast<double>(row.alloc_bytes);
    t.count += static_cast<double>(row.alloc_count);
  }
  return t;
}

// The process's host and mmap sites that allocated in its steps, hottest
// first.
std::vector<const Site*> ChurnSites(const Report& r, uint32_t pid) {
  std::vector<const Site*> out;
  for (const Site& s : r.sites) {
    if (s.pid == pid && analysis::IsHost(s.kind) && s.churn_count_per_step > 0) out.push_back(&s);
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
    const std::vector<const Site*> sites = ChurnSites(r, p.pid);
    if (sites.empty()) absl::StrAppend(&out, "  no sampled allocation in the steps\n");
    for (size_t i = 0; i < sites.size(); ++i) {
      if (o.top > 0 && i >= static_cast<size_t>(o.top)) {
        absl::StrAppend(&out, "  ... ", sites.size() - i, " more sites (--top)\n");
        break;
      }
      const Site& s = *sites[i];
      absl::StrAppend(
          &out, absl::StrFormat("%3d. site #%d%s  %s allocs/step %s  %.1f %% of allocations\n",
                                i + 1, s.id, s.kind == analysis::SiteKind::kMmap ? " [mmap]" : "",
                                Count(s.churn_count_per_step),
                                Ci(s.churn_count_per_step_low, s.churn_count_per_step_high, false),
                                100 * s.churn_count_share));
      absl::StrAppend(
          &out,
          absl::StrFormat("     %s/step %s  %.1f %% of bytes\n", HumanBytes(s.churn_bytes_per_step),
                          Ci(s.churn_bytes_per_step_low, s.churn_bytes_per_step_high, true),
                          100 * s.churn_bytes_share));
      internal::AppendFrames(s.frames, o, out);
    }
  }
  return out;
}

std::string FormatChurnJson(const Report& r, const ReportOptions& o) {
  internal::JsonWriter w;
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
    w.Key("sites");
    w.BeginArray();
    const std::vector<const Site*> sites = ChurnSites(r, p.pid);
    for (size_t i = 0; i < sites.size(); ++i) {
      if (o.top > 0 && i >= static_cast<size_t>(o.top)) break;
      const Site& s = *sites[i];
      w.BeginObject();
      w.Field("site_id", s.id);
      w.Field("kind", analysis::SiteKindName(s.kind));
      w.Field("samples", s.samples);
      w.Key("churn");
      internal::WriteChurn(w, s);
      internal::WriteFrames(w, s.frames, o.frames);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.Key("warnings");
  w.BeginArray();
  for (const std::string& s : r.warnings) w.String(s);
  w.EndArray();
  w.EndObject();
  std::string out = w.Take();
  out += '\n';
  return out;
}

std::string FormatChurnCsv(const Report& r) {
  std::string out =
      "pid,rank,steps,site_id,kind,alloc_count_per_step,alloc_count_per_step_low,"
      "alloc_count_per_step_high,alloc_bytes_per_step,alloc_bytes_per_step_low,"
      "alloc_bytes_per_step_high,count_share,bytes_share,function,file,line,stack\r\n";
  for (const ProcessSummary& p : r.processes) {
    const Totals t = TotalsOf(r, p.pid);
    for (const Site* sp : ChurnSites(r, p.pid)) {
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

// Text report: what `memstep report` prints by default.

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/report/report.h"
#include "src/report/text_internal.h"

namespace memstep::report {
namespace internal {
namespace {

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string ExactBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  return absl::StrCat(HumanBytes(static_cast<double>(bytes)), " (", Thousands(bytes), " bytes)");
}

std::string Seconds(double s) { return absl::StrFormat("%.3f s", s); }

std::string Duration(double s) {
  if (s < 120) return absl::StrFormat("%.0f s", s);
  if (s < 7200) return absl::StrFormat("%.0f min", s / 60);
  if (s < 172800) return absl::StrFormat("%.1f h", s / 3600);
  return absl::StrFormat("%.1f d", s / 86400);
}

std::string Rate(const analysis::Growth& g) {
  return absl::StrFormat("%s%s/step [95%% CI %s, %s]", g.slope >= 0 ? "+" : "", HumanBytes(g.slope),
                         HumanBytes(g.slope_low), HumanBytes(g.slope_high));
}

std::vector<const analysis::Site*> TopSites(const analysis::Report& r, const ReportOptions& o,
                                            bool device, bool at_peak, double* total, bool* any) {
  std::vector<const analysis::Site*> sites;
  *total = 0;
  *any = false;
  for (const analysis::Site& s : r.sites) {
    if (IsHost(s.kind) == device) continue;
    *any = true;
    const double v = at_peak ? s.live_bytes_at_peak : s.live_bytes_end;
    *total += v;
    if (v > 0) sites.push_back(&s);
  }
  std::stable_sort(sites.begin(), sites.end(),
                   [&](const analysis::Site* a, const analysis::Site* b) {
                     return at_peak ? a->live_bytes_at_peak > b->live_bytes_at_peak
                                    : a->live_bytes_end > b->live_bytes_end;
                   });
  if (o.top > 0 && sites.size() > static_cast<size_t>(o.top)) sites.resize(o.top);
  return sites;
}

std::string SiteRankCells(int rank, double live, double total) {
  return absl::StrFormat("  #%-3d %10s  %5.1f%%  ", rank, HumanBytes(live),
                         total > 0 ? 100.0 * live / total : 0.0);
}

void AppendFrames(const std::vector<analysis::Frame>& frames, const ReportOptions& o,
                  std::string& out) {
  if (frames.empty()) {
    absl::StrAppend(&out, "        <no stack>\n");
    return;
  }
  const size_t limit = o.frames > 0 ? static_cast<size_t>(o.frames) : frames.size();
  auto line = [&](const analysis::Frame& f) {
    absl::StrAppend(&out, "        ", f.inlined ? "[inlined] " : "", f.function);
    if (!f.file.empty()) {
      absl::StrAppend(&out, "  ", f.file);
      if (f.line > 0) absl::StrAppend(&out, ":", f.line);
    }
    // An unnamed frame's function is already "module+0xOFFSET".
    if (!f.module.empty() && f.symbolized) absl::StrAppend(&out, "  (", Basename(f.module), ")");
    absl::StrAppend(&out, "\n");
  };
  bool python_shown = false;
  for (size_t i = 0; i < frames.size() && i < limit; ++i) {
    line(frames[i]);
    python_shown |= frames[i].module == "<python>";
  }
  size_t shown = std::min(limit, frames.size());
  // The Python line that made the allocation is what a Python user looks
  // for: the innermost Python frame and its caller, even below the limit.
  if (!python_shown) {
    for (size_t i = shown; i < frames.size(); ++i) {
      if (frames[i].module != "<python>") continue;
      if (i > shown) absl::StrAppend(&out, "        ... ", i - shown, " frames down to Python:\n");
      line(frames[i]);
      shown = i + 1;
      if (shown < frames.size() && frames[shown].module == "<python>") line(frames[shown++]);
      break;
    }
  }
  if (frames.size() > shown) {
    absl::StrAppend(&out, "        ... ", frames.size() - shown, " more frames\n");
  }
}

std::vector<size_t> PickRows(const std::vector<uint64_t>& peaks, const ReportOptions& o) {
  std::vector<size_t> out;
  const size_t n = peaks.size();
  if (n <= static_cast<size_t>(o.max_step_rows)) {
    for (size_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  std::set<size_t> keep;
  for (size_t i = 0; i < static_cast<size_t>(o.edge_rows) && i < n; ++i) {
    keep.insert(i);
    keep.insert(n - 1 - i);
  }
  std::vector<size_t> by_peak(n);
  for (size_t i = 0; i < n; ++i) by_peak[i] = i;
  std::stable_sort(by_peak.begin(), by_peak.end(),
                   [&](size_t a, size_t b) { return peaks[a] > peaks[b]; });
  for (size_t i = 0; i < static_cast<size_t>(o.peak_rows) && i < n; ++i) keep.insert(by_peak[i]);
  size_t prev = SIZE_MAX;
  for (size_t i : keep) {
    if (prev != SIZE_MAX && i != prev + 1) out.push_back(SIZE_MAX);
    if (prev == SIZE_MAX && i != 0) out.push_back(SIZE_MAX);
    out.push_back(i);
    prev = i;
  }
  return out;
}

// The first frame that is not an allocator's or memstep's, for a one-line name.
std::string SiteName(const analysis::Site& s, const char* no_frames) {
  for (const analysis::Frame& f : s.frames) {
    if (absl::StartsWith(f.function, "operator new") || absl::StartsWith(f.function, "malloc") ||
        absl::StartsWith(f.function, "calloc") || absl::StartsWith(f.function, "realloc") ||
        absl::StrContains(f.module, "libc.so") || absl::StrContains(f.module, "libstdc++") ||
        absl::StrContains(f.module, "libmemstep")) {
      continue;
    }
    return f.function;
  }
  return s.frames.empty() ? no_frames : s.frames[0].function;
}

GrowthGroups GroupByGrowth(const std::vector<analysis::Site>& sites) {
  using analysis::GrowthClass;
  GrowthGroups groups;
  for (const analysis::Site& s : sites) {
    const GrowthClass c = s.growth.cls;
    if (c == GrowthClass::kLeak || c == GrowthClass::kBoundedGrowth) {
      groups.growing.push_back(&s);
    } else {
      auto& [count, bytes] = groups.others[analysis::GrowthClassName(c)];
      ++count;
      bytes += s.live_bytes_end;
    }
  }
  std::stable_sort(
      groups.growing.begin(), groups.growing.end(),
      [](const analysis::Site* a, const analysis::Site* b) {
        if ((a->growth.cls == GrowthClass::kLeak) != (b->growth.cls == GrowthClass::kLeak)) {
          return a->growth.cls == GrowthClass::kLeak;
        }
        return a->growth.slope > b->growth.slope;
      });
  return groups;
}

}  // namespace internal

namespace {

using analysis::GrowthClass;
using analysis::ProcessSummary;
using analysis::Report;
using analysis::Site;
using analysis::StepRow;
using internal::AppendFrames;
using internal::Duration;
using internal::ExactBytes;
using internal::IsHost;
using internal::Rate;
using internal::Seconds;
using internal::SiteKind;
using internal::SiteKindName;

// One line: control characters shown as spaces, long command lines cut.
std::string OneLine(const std::string& text, size_t max_len = 160) {
  std::string out;
  for (char c : text) out += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
  if (out.size() > max_len) out = out.substr(0, max_len - 3) + "...";
  return out;
}

void AppendProcess(const ProcessSummary& p, std::string& out) {
  absl::StrAppend(&out, "  pid ", p.pid, " (ppid ", p.ppid);
  if (!p.rank.empty()) absl::StrAppend(&out, ", rank ", p.rank);
  if (p.fork_child) absl::StrAppend(&out, ", fork child");
  absl::StrAppend(&out, ")");
  if (!p.hostname.empty()) absl::StrAppend(&out, " on ", p.hostname);
  absl::StrAppend(&out, "  ", Seconds(p.duration_s), "  ");
  if (p.recording_stopped) {
    absl::StrAppend(&out, "INCOMPLETE: memstep stopped recording (notice below)");
  } else if (p.truncated) {
    absl::StrAppend(&out, "TRUNCATED at offset ", p.truncated_at_offset);
  } else if (p.clean_exit) {
    absl::StrAppend(&out, "clean exit");
  } else {
    absl::StrAppend(&out,
                    "ENDED ABNORMALLY (no trailer: killed, crashed, out of memory or "
                    "still running)");
  }
  if (!p.clean_exit && p.last_step >= 0) {
    absl::StrAppend(&out, "; last step ", p.last_step, ", heap live then ",
                    HumanBytes(static_cast<double>(p.live_bytes_end)));
  } else if (!p.clean_exit) {
    absl::StrAppend(&out, "; no step ended");
  }
  absl::StrAppend(&out, "  peak ", HumanBytes(p.peak_bytes));
  if (p.has_device_data()) {
    absl::StrAppend(&out, "  device peak ", HumanBytes(static_cast<double>(p.device_peak_bytes)));
  }
  absl::StrAppend(&out, "\n");
  absl::StrAppend(&out, "    cmdline: ", p.cmdline.empty() ? "?" : OneLine(p.cmdline), "\n");
  absl::StrAppend(&out, "    trace: ", p.trace_path, "\n");
  for (const std::string& n : p.notices) absl::StrAppend(&out, "    notice: ", OneLine(n), "\n");
}

// Runs with many processes show the kMaxProcesses with the largest peaks.
constexpr size_t kMaxProcesses = 8;

void AppendProcesses(const Report& r, std::string& out) {
  absl::StrAppend(&out, "memstep report: ", r.path, "\n");
  absl::StrAppend(&out, "Processes: ", r.processes.size());
  std::vector<const ProcessSummary*> shown;
  for (const ProcessSummary& p : r.processes) shown.push_back(&p);
  if (shown.size() > kMaxProcesses) {
    std::stable_sort(shown.begin(), shown.end(),
                     [](const ProcessSummary* a, const ProcessSummary* b) {
                       return a->peak_bytes > b->peak_bytes;
                     });
    shown.resize(kMaxProcesses);
    absl::StrAppend(&out, " (showing the ", kMaxProcesses,
                    " with the largest peaks; all in --format json)");
  }
  absl::StrAppend(&out, "\n");
  for (const ProcessSummary* p : shown) AppendProcess(*p, out);
  for (const std::string& w : r.warnings) absl::StrAppend(&out, "warning: ", w, "\n");
}

// Multi-rank runs (RANK set in two or more processes): one row per rank,
// ordered by rank, and the ranks that stand out: a LEAK of the exact heap,
// or a heap (device) peak more than 10 % above the ranks' median. Ranks of a
// data-parallel job should look alike; the odd one out is the lead.
void AppendRanks(const Report& r, std::string& out) {
  std::vector<const ProcessSummary*> ranked;
  for (const ProcessSummary& p : r.processes) {
    int64_t n;
    if (!p.rank.empty() && absl::SimpleAtoi(p.rank, &n)) ranked.push_back(&p);
  }
  if (ranked.size() < 2) return;
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const ProcessSummary* a, const ProcessSummary* b) {
                     int64_t x = 0, y = 0;
                     (void)absl::SimpleAtoi(a->rank, &x);
                     (void)absl::SimpleAtoi(b->rank, &y);
                     return x < y;
                   });
  auto median = [&](auto field) {
    std::vector<uint64_t> v;
    for (const ProcessSummary* p : ranked) v.push_back(field(*p));
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const uint64_t heap_median = median([](const ProcessSummary& p) { return p.peak_bytes; });
  const uint64_t device_median =
      median([](const ProcessSummary& p) { return p.device_peak_bytes; });
  absl::flat_hash_map<uint32_t, size_t> steps;
  for (const StepRow& s : r.steps) ++steps[s.pid];
  absl::StrAppend(&out, "\nRanks (", ranked.size(),
                  " processes with RANK; heap growth from the exact series)\n");
  absl::StrAppend(&out, absl::StrFormat("  %5s %8s %-12s %6s %10s %10s  %s\n", "rank", "pid",
                                        "host", "steps", "heap peak", "dev peak", "heap growth"));
  for (const ProcessSummary* p : ranked) {
    const analysis::Growth& g = p->live_growth;
    std::string growth = analysis::GrowthClassName(g.cls);
    if (g.cls == GrowthClass::kLeak || g.cls == GrowthClass::kBoundedGrowth) {
      absl::StrAppend(&growth, " ", Rate(g));
    }
    std::vector<std::string> notes;
    if (g.cls == GrowthClass::kLeak) notes.push_back("leaks");
    const auto above = [](uint64_t v, uint64_t m) { return m > 0 && v > m + m / 10; };
    if (above(p->peak_bytes, heap_median)) {
      notes.push_back(absl::StrFormat(
          "heap peak +%.0f%% over the median",
          100.0 * (static_cast<double>(p->peak_bytes) / static_cast<double>(heap_median) - 1)));
    }
    if (above(p->device_peak_bytes, device_median)) {
      notes.push_back(absl::StrFormat(
          "device peak +%.0f%% over the median",
          100.0 * (static_cast<double>(p->device_peak_bytes) / static_cast<double>(device_median) -
                   1)));
    }
    const auto st = steps.find(p->pid);
    absl::StrAppend(
        &out,
        absl::StrFormat("  %5s %8u %-12s %6u %10s %10s  %s", p->rank, p->pid,
                        OneLine(p->hostname, 12), st == steps.end() ? 0 : st->second,
                        HumanBytes(static_cast<double>(p->peak_bytes)),
                        p->has_device_data() ? HumanBytes(static_cast<double>(p->device_peak_bytes))
                                             : std::string("-"),
                        growth));
    if (!notes.empty()) absl::StrAppend(&out, "  <- ", absl::StrJoin(notes, "; "));
    absl::StrAppend(&out, "\n");
  }
}

void AppendTotals(const Report& r, std::string& out) {
  ProcessSummary t;
  double est_live = 0;
  for (const ProcessSummary& p : r.processes) {
    t.alloc_bytes += p.alloc_bytes;
    t.alloc_count += p.alloc_count;
    t.free_bytes += p.free_bytes;
    t.free_count += p.free_count;
    t.live_bytes_end += p.live_bytes_end;
    t.peak_bytes += p.peak_bytes;
    t.mmap_live_bytes_end += p.mmap_live_bytes_end;
    t.samples += p.samples;
    t.lost_records += p.lost_records;
    est_live += p.est_live_bytes_end;
  }
  const bool many = r.processes.size() > 1;
  absl::StrAppend(&out, "\nTotals (exact counters", many ? ", summed over processes" : "", ")\n");
  absl::StrAppend(&out, "  allocations      ", Thousands(t.alloc_count), "  ",
                  ExactBytes(t.alloc_bytes), "\n");
  absl::StrAppend(&out, "  frees            ", Thousands(t.free_count), "  ",
                  ExactBytes(t.free_bytes), "\n");
  absl::StrAppend(&out, "  live at end      ", ExactBytes(t.live_bytes_end), "\n");
  absl::StrAppend(&out, "  peak             ", ExactBytes(t.peak_bytes),
                  many ? "  (sum of per-process peaks)" : "", "\n");
  absl::StrAppend(&out, "  mmap live at end ", ExactBytes(t.mmap_live_bytes_end), "\n");
  absl::StrAppend(&out, "  samples          ", Thousands(t.samples),
                  "  (estimated heap live at end ", HumanBytes(est_live), ")\n");
  absl::StrAppend(&out, "  lost records     ", Thousands(t.lost_records), "\n");
}

void AppendSteps(const Report& r, const ReportOptions& o, std::string& out) {
  for (const ProcessSummary& p : r.processes) {
    std::vector<const StepRow*> rows;
    std::set<std::string> stages;
    for (const StepRow& s : r.steps) {
      if (s.pid != p.pid) continue;
      rows.push_back(&s);
      for (const auto& [name, peak] : s.stage_peaks) stages.insert(name);
    }
    if (rows.empty()) {
      if (r.processes.size() == 1) absl::StrAppend(&out, "\nNo steps recorded.\n");
      continue;
    }
    absl::StrAppend(&out, "\nSteps (pid ", p.pid, "): ", rows.size(), " steps, exact bytes");
    if (rows.size() > static_cast<size_t>(o.max_step_rows)) {
      absl::StrAppend(&out, "; showing the first ", o.edge_rows, ", the last ", o.edge_rows,
                      " and the ", o.peak_rows, " largest peaks (all rows in --format json)");
    }
    absl::StrAppend(&out, "\n");
    std::string header = absl::StrFormat("  %8s %11s %11s", "step", "live end", "peak");
    for (const std::string& s : stages) {
      absl::StrAppend(&header, absl::StrFormat(" %11s", s.size() > 11 ? s.substr(0, 11) : s));
    }
    absl::StrAppend(&header, absl::StrFormat(" %11s %11s", "alloc'd", "RSS"),
                    internal::DeviceStepHeader(p), "\n");
    out += header;
    std::vector<uint64_t> peaks;
    for (const StepRow* s : rows) peaks.push_back(s->peak_bytes);
    for (size_t i : internal::PickRows(peaks, o)) {
      if (i == SIZE_MAX) {
        absl::StrAppend(&out, absl::StrFormat("  %8s\n", "..."));
        continue;
      }
      const StepRow& s = *rows[i];
      absl::StrAppend(&out, absl::StrFormat("  %8d %11s %11s", s.step, HumanBytes(s.live_bytes_end),
                                            HumanBytes(s.peak_bytes)));
      for (const std::string& name : stages) {
        auto it = s.stage_peaks.find(name);
        absl::StrAppend(
            &out,
            absl::StrFormat(" %11s", it == s.stage_peaks.end() ? "-" : HumanBytes(it->second)));
      }
      absl::StrAppend(&out,
                      absl::StrFormat(" %11s %11s", HumanBytes(s.alloc_bytes),
                                      s.rss_bytes_end ? HumanBytes(s.rss_bytes_end) : "-"),
                      internal::DeviceStepCells(p, s), "\n");
    }
    internal::AppendDeviceSteps(r, p, o, out);
  }
}

void AppendSites(const Report& r, const ReportOptions& o, bool at_peak, std::string& out) {
  double total;
  bool any;  // device sites: their own tables (AppendDeviceSites)
  const std::vector<const Site*> sites = internal::TopSites(r, o, false, at_peak, &total, &any);
  if (at_peak) {
    absl::StrAppend(&out, "\nTop ", sites.size(),
                    " call sites at the peak (estimated from samples;");
    for (const ProcessSummary& p : r.processes) {
      absl::StrAppend(&out, " pid ", p.pid, ": heap ", HumanBytes(p.est_peak_bytes), " at ",
                      Seconds(p.est_peak_time_s), ";");
    }
    out.back() = ')';
    out += "\n";
  } else {
    absl::StrAppend(&out, "\nTop ", sites.size(),
                    " call sites by live bytes at end (estimated from samples)\n");
  }
  if (sites.empty()) {
    absl::StrAppend(&out, "  (none)\n");
    return;
  }
  int rank = 0;
  for (const Site* s : sites) {
    const double v = at_peak ? s->live_bytes_at_peak : s->live_bytes_end;
    absl::StrAppend(&out, internal::SiteRankCells(++rank, v, total));
    const double high = at_peak ? s->live_bytes_at_peak_high : s->live_bytes_end_high;
    if (high >= 0) {  // sampled: its 95 % interval
      const double low = at_peak ? s->live_bytes_at_peak_low : s->live_bytes_end_low;
      absl::StrAppend(&out, "95% CI ", HumanBytes(low), "-", HumanBytes(high), "  ");
    }
    if (!at_peak && s->kind == SiteKind::kHost) {
      absl::StrAppend(&out, absl::StrFormat("~%.0f live allocs  ", s->live_count_end));
    }
    absl::StrAppend(
        &out, absl::StrFormat("%s%s  %d samples  %s allocated in total", SiteKindName(s->kind),
                              s->allocator == "pymalloc" ? " (pymalloc)"
                              : s->allocator == "mixed"  ? " (malloc+pymalloc)"
                                                         : "",
                              s->samples, HumanBytes(s->alloc_bytes)));
    if (r.processes.size() > 1) absl::StrAppend(&out, "  pid ", s->pid);
    absl::StrAppend(&out, "\n");
    AppendFrames(s->frames, o, out);
  }
}

std::string Projection(double steps, double seconds) {
  if (steps < 0) return "";
  std::string out =
      absl::StrFormat("  memory limit in %s steps", Thousands(static_cast<uint64_t>(steps)));
  if (seconds >= 0) absl::StrAppend(&out, " (", Duration(seconds), ")");
  return out;
}

// The leak hunts (the last three) and the exact growth no site explains.
void AppendHunts(const ProcessSummary& p, std::string& out) {
  const size_t n = p.hunts.size();
  if (n > 3) absl::StrAppend(&out, "    leak hunts: ", n, " (the last 3:)\n");
  for (size_t i = n > 3 ? n - 3 : 0; i < n; ++i) {
    const ProcessSummary::Hunt& h = p.hunts[i];
    absl::StrAppend(
        &out, h.device ? "    device leak hunt: steps " : "    leak hunt: steps ", h.begin_step,
        "-", h.end_step, h.residual ? ", residual: up to " : ", growth ",
        HumanBytes(static_cast<double>(h.rate)),
        h.residual ? "/step the last left unexplained, T down to " : "/step, T down to ",
        HumanBytes(static_cast<double>(h.min_interval)),
        h.screened ? " (screening Python lines)" : "", ": ");
    switch (h.outcome) {
      case format::kHuntExplained:
        absl::StrAppend(&out, "explained (sites ", HumanBytes(static_cast<double>(h.explained)),
                        " of ", HumanBytes(static_cast<double>(h.growth)), ", ", h.samples,
                        " samples)\n");
        break;
      case format::kHuntStopped:
        absl::StrAppend(&out, "the growth stopped\n");
        break;
      case format::kHuntGaveUp:
        // What no site explains, said outright: rounded, a small remainder
        // read "sites 56.0 MiB of 56.0 MiB".
        absl::StrAppend(
            &out, "gave up, unexplained (sites ", HumanBytes(static_cast<double>(h.explained)),
            " of ", HumanBytes(static_cast<double>(h.growth)), ": ",
            HumanBytes(h.growth > h.explained ? static_cast<double>(h.growth - h.explained) : 0.0),
            " in no site)\n");
        break;
      default:
        absl::StrAppend(&out, "still running at the end\n");
    }
  }
  if (p.unattributed_bytes_per_step > 0) {
    absl::StrAppend(&out, "    UNATTRIBUTED: ", HumanBytes(p.unattributed_bytes_per_step),
                    "/step of the exact heap growth is in no growing site (the sites explain ",
                    HumanBytes(p.attributed_bytes_per_step), "/step)\n      ", p.attribute_hint,
                    "\n");
  }
}

std::string SignedBytes(double v) { return (v >= 0 ? "+" : "") + HumanBytes(v); }

// The innermost frame outside the allocator, for a one-line site name.

// RSS growth split per step (docs/analysis.md "RSS growth explained").
void AppendRssExplain(const Report& r, const ProcessSummary& p, std::string& out) {
  const analysis::RssExplain& x = p.rss_explain;
  if (x.window == 0) return;
  absl::StrAppend(&out, "      per step: live ", SignedBytes(x.live_per_step), " (exact heap)");
  if (x.has_allocator) {
    absl::StrAppend(&out, ", free ", SignedBytes(x.frag_per_step), " inside the heap",
                    " (fragmentation), ", SignedBytes(x.cache_per_step), " ",
                    x.allocator == "jemalloc" ? "dirty+muzzy pages" : "top chunk", " (caching)");
  } else {
    absl::StrAppend(&out, ", free space unknown (no allocator statistics)");
  }
  absl::StrAppend(&out, ", mappings ", SignedBytes(x.mmap_per_step), " anonymous");
  if (x.has_file) absl::StrAppend(&out, " ", SignedBytes(x.file_per_step), " file-backed");
  if (x.has_own) absl::StrAppend(&out, ", memstep's own ", SignedBytes(x.own_per_step));
  absl::StrAppend(&out, ", other ", SignedBytes(x.other_per_step), "\n");
  if (x.arena >= 0) {
    absl::StrAppend(&out, "      glibc arena ", x.arena, x.arena == 0 ? " (main)" : "", " of ",
                    x.arenas, " grows most: free ", SignedBytes(x.arena_frag_per_step),
                    " inside, top ", SignedBytes(x.arena_top_per_step), ", in use ",
                    SignedBytes(x.arena_in_use_per_step), "\n");
  }
  if (x.stat_rows == 0) {
    absl::StrAppend(&out, "      (no allocator statistics recorded");
  } else {
    absl::StrAppend(&out, "      (", x.allocator.empty() ? "no allocator" : x.allocator,
                    " statistics at ", x.stat_rows, " of ", x.window, " steps");
    if (!x.file_source.empty()) absl::StrAppend(&out, ", resident split from ", x.file_source);
  }
  if (x.median_cost_ns > 0) {
    absl::StrAppend(&out, absl::StrFormat(", %.0f us each", x.median_cost_ns / 1000));
  }
  absl::StrAppend(&out, ")");
  if (!x.verdict.empty()) absl::StrAppend(&out, ": ", x.verdict, ": ", x.reason);
  absl::StrAppend(&out, "\n");
  if (x.verdict != "FRAGMENTATION") return;
  for (const analysis::RssPin& pin : x.pins) {
    const Site* site = nullptr;
    for (const Site& s : r.sites) {
      if (s.id == pin.site_id) site = &s;
    }
    absl::StrAppend(&out, "      likely cause: ");
    if (site != nullptr) {
      absl::StrAppend(&out, "site #", site->id, " ", internal::SiteName(*site, "?"));
    } else {
      absl::StrAppend(&out, "the exact heap (no site named)");
    }
    absl::StrAppend(&out, absl::StrFormat(" keeps %s/step and pins %.0fx as much free space\n",
                                          HumanBytes(pin.bytes_per_step), pin.ratio));
  }
}

// One process's growth: warm-up, the exact heap's class, RSS, hunts,
// devices.
void AppendProcessGrowth(const Report& r, const ProcessSummary& p, std::string& out) {
  const analysis::Growth& g = p.live_growth;
  absl::StrAppend(&out, "  pid ", p.pid, ": warm-up ", p.warmup_steps, " steps",
                  p.warmup_detected ? " (detected)" : "");
  if (g.window > 0) absl::StrAppend(&out, ", window the last ", g.window, " steps");
  absl::StrAppend(&out, "\n");
  absl::StrAppend(&out, "    heap live (exact): ", analysis::GrowthClassName(g.cls));
  if (g.window > 0) absl::StrAppend(&out, "  ", Rate(g));
  absl::StrAppend(&out, Projection(p.steps_to_limit, p.seconds_to_limit), "  (", g.reason, ")\n");
  if (p.rss_growth.window > 0) {
    // RSS is called LEAK only when the exact live bytes grow with it.
    const std::string cls = analysis::RssClassName(p.rss_growth, p.rss_explain);
    const analysis::RssExplain& x = p.rss_explain;
    if (!x.verdict.empty() && !x.rate_established) {
      // An uneven rise: the verdict stands on the rise over the window, and
      // the rate, whose interval reaches 0, is shown as not established.
      absl::StrAppend(&out, "    RSS: ", cls, "  ", SignedBytes(x.rise_bytes), " over ", x.window,
                      " steps, uneven (rate ", Rate(p.rss_growth), " not established)\n");
    } else {
      absl::StrAppend(&out, "    RSS: ", cls, "  ", Rate(p.rss_growth), "\n");
    }
    AppendRssExplain(r, p, out);
  }
  if (p.fragmentation && p.rss_explain.verdict.empty()) {
    absl::StrAppend(&out, "    FRAGMENTATION: RSS grows ", HumanBytes(p.rss_growth.slope),
                    "/step while heap live bytes do not (allocator caching or "
                    "fragmentation, not a leak)\n");
  }
  AppendHunts(p, out);
  internal::AppendDeviceGrowth(p, out);
}

// One growing site: class, rate, live bytes, capacity, projection, reason,
// frames.
void AppendGrowingSite(const Report& r, const Site& s, const ReportOptions& o, std::string& out) {
  using analysis::GrowthClass;
  const analysis::Growth& g = s.growth;
  absl::StrAppend(&out, "  site #", s.id, " ", analysis::GrowthClassName(g.cls),
                  internal::DeviceSiteTag(s), "  ", Rate(g), "  live at end ",
                  HumanBytes(s.live_bytes_end));
  if (s.live_bytes_end_high >= 0) {  // sampled: its 95 % interval
    absl::StrAppend(&out, " [95% CI ", HumanBytes(s.live_bytes_end_low), ", ",
                    HumanBytes(s.live_bytes_end_high), "]");
  }
  // A program that frees its leak at exit (Python's teardown frees a list of
  // kept tensors) ends with little live: what was live at the last step end
  // is the leak's size.
  const size_t rows = s.live_bytes_by_step.size();
  const double at_last = rows > 0 ? s.live_bytes_by_step[rows - 1] : 0;
  if (at_last > s.live_bytes_end + std::max(4096.0, at_last / 2)) {
    absl::StrAppend(&out, " (", HumanBytes(at_last), " at the last step end, freed after it)");
  }
  if (g.cls == GrowthClass::kBoundedGrowth) {
    absl::StrAppend(&out, "  capacity ~", HumanBytes(g.capacity));
  }
  const bool device = !IsHost(s.kind) && s.kind != SiteKind::kPinnedHost;
  absl::StrAppend(&out, device ? internal::DeviceProjection(s)
                               : Projection(s.steps_to_limit, s.seconds_to_limit));
  if (r.processes.size() > 1) absl::StrAppend(&out, "  pid ", s.pid);
  absl::StrAppend(&out, "\n        (", g.reason);
  if (g.calibrated) {
    absl::StrAppend(&out, "; rate calibrated to the exact heap growth, sampled ",
                    HumanBytes(g.sampled_slope), "/step");
  }
  absl::StrAppend(&out, ")\n");
  AppendFrames(s.frames, o, out);
}

// One growing Python line: its host sites summed (docs/analysis.md "Python
// lines").
void AppendPythonLine(const Report& r, const ProcessSummary& p,
                      const ProcessSummary::PythonLine& line, const ReportOptions& o,
                      std::string& out) {
  const analysis::Growth& g = line.growth;
  absl::StrAppend(&out, line.callees ? "  python caller line " : "  python line ",
                  analysis::GrowthClassName(g.cls), "  ", Rate(g), "  live at end ",
                  HumanBytes(line.live_bytes_end), " [95% CI ", HumanBytes(line.live_bytes_end_low),
                  ", ", HumanBytes(line.live_bytes_end_high), "]");
  if (line.live_bytes_last_step >
      line.live_bytes_end + std::max(4096.0, line.live_bytes_last_step / 2)) {
    absl::StrAppend(&out, " (", HumanBytes(line.live_bytes_last_step),
                    " at the last step end, freed after it)");
  }
  if (g.cls == analysis::GrowthClass::kBoundedGrowth) {
    absl::StrAppend(&out, "  capacity ~", HumanBytes(g.capacity));
  }
  absl::StrAppend(&out, Projection(line.steps_to_limit, line.seconds_to_limit));
  if (r.processes.size() > 1) absl::StrAppend(&out, "  pid ", p.pid);
  absl::StrAppend(&out, "\n        (", g.reason);
  if (g.calibrated) {
    absl::StrAppend(&out, "; rate calibrated to the exact heap growth, sampled ",
                    HumanBytes(g.sampled_slope), "/step");
  }
  absl::StrAppend(&out, "; the sum of ", line.site_ids.size(),
                  line.callees ? " sites allocated on this line or in what it calls:" : " sites:");
  for (size_t i = 0; i < line.site_ids.size(); ++i) {
    if (i == 8) {
      absl::StrAppend(&out, " ...");
      break;
    }
    absl::StrAppend(&out, " #", line.site_ids[i]);
  }
  absl::StrAppend(&out, ")\n");
  AppendFrames(line.frames, o, out);
}

void AppendGrowth(const Report& r, const ReportOptions& o, std::string& out) {
  absl::StrAppend(&out, "\nGrowth (memory limit ",
                  HumanBytes(static_cast<double>(r.memory_limit_bytes)), ", ",
                  r.memory_limit_source, ")\n");
  bool any_steps = false;
  size_t without_steps = 0;
  for (const ProcessSummary& p : r.processes) {
    // By its own last step: the images a pid exec'd (a launcher script, then
    // the interpreter: pyenv's shims are two bash scripts) are processes of
    // their own with the pid's step rows, and only the one that marked steps
    // has growth to show. Rows without an ended step (a run cut short in its
    // first step) still count when no image of the pid ended one.
    bool has_steps = p.last_step >= 0;
    if (!has_steps) {
      bool pid_ended_one = false;
      for (const ProcessSummary& q : r.processes)
        pid_ended_one |= q.pid == p.pid && q.last_step >= 0;
      for (const StepRow& row : r.steps) has_steps |= !pid_ended_one && row.pid == p.pid;
    }
    any_steps |= has_steps;
    if (has_steps) {
      AppendProcessGrowth(r, p, out);
    } else {
      ++without_steps;
    }
  }
  internal::GrowthGroups groups = internal::GroupByGrowth(r.sites);
  std::vector<const Site*>& growing = groups.growing;
  if (o.top > 0 && growing.size() > static_cast<size_t>(o.top)) growing.resize(o.top);
  if (without_steps > 0) {
    absl::StrAppend(&out, "  ", without_steps == r.processes.size() ? "" : "and ", without_steps,
                    without_steps == 1 ? " process" : " processes",
                    " without steps (growth is measured across steps: mark them, or let time "
                    "windows act as steps)\n");
  }
  if (!any_steps) return;
  size_t lines = 0;
  for (const ProcessSummary& p : r.processes) lines += p.python_lines.size();
  if (growing.empty()) {
    absl::StrAppend(&out, lines > 0 ? "  no single call site grows after warm-up\n"
                                    : "  no call site grows after warm-up\n");
  }
  for (const Site* s : growing) AppendGrowingSite(r, *s, o, out);
  if (lines > 0) {
    absl::StrAppend(&out, "  Python lines whose sites, summed, grow:\n");
    for (const ProcessSummary& p : r.processes) {
      for (const ProcessSummary::PythonLine& line : p.python_lines) {
        AppendPythonLine(r, p, line, o, out);
      }
    }
  }
  if (!groups.others.empty()) {
    absl::StrAppend(&out, "  other sites:");
    for (const auto& [name, v] : groups.others) {
      absl::StrAppend(&out, " ", v.first, " ", name, " (", HumanBytes(v.second), " live at end);");
    }
    out.back() = '\n';
  }
}

void AppendGates(const Report& r, std::string& out) {
  if (r.gates.empty()) return;
  int failed = 0;
  for (const analysis::GateResult& g : r.gates) failed += !g.passed;
  absl::StrAppend(&out, "\nGates: ", failed, " of ", r.gates.size(), " failed\n");
  for (const analysis::GateResult& g : r.gates) {
    std::string value = g.metric == "leaks" ? absl::StrFormat("%.0f", g.value)
                        : absl::StrContains(g.metric, "growth") || g.metric == "churn"
                            ? absl::StrCat(HumanBytes(g.value), "/step")
                            : HumanBytes(g.value);
    absl::StrAppend(&out, "  ", g.passed ? "pass" : "FAIL", "  ", g.expression, "  (value ", value,
                    "; ", g.detail, ")\n");
  }
}

void AppendAlerts(const Report& r, std::string& out) {
  if (r.alerts.empty()) return;
  absl::StrAppend(&out, "\nAlerts fired during the run: ", r.alerts.size(), "\n");
  for (const analysis::AlertRow& a : r.alerts) {
    absl::StrAppend(&out, "  step ", a.step, "  ", a.rule);
    if (!a.stage.empty()) absl::StrAppend(&out, "(", a.stage, ")");
    absl::StrAppend(&out, "  ", HumanBytes(static_cast<double>(a.value)), " > ",
                    HumanBytes(static_cast<double>(a.threshold)));
    if (a.site_id != 0) absl::StrAppend(&out, "  top growing site #", a.site_id);
    if (r.processes.size() > 1) absl::StrAppend(&out, "  pid ", a.pid);
    absl::StrAppend(&out, "\n");
  }
}

void AppendStagePeaks(const Report& r, std::string& out) {
  if (std::none_of(r.stage_peaks.begin(), r.stage_peaks.end(),
                   [](const analysis::StagePeak& sp) { return sp.kind == SiteKind::kHost; })) {
    return;
  }
  absl::StrAppend(&out, "\nStage peaks (exact host heap bytes; top sites estimated)\n");
  absl::StrAppend(&out, absl::StrFormat("  %-16s %11s %8s %11s %7s\n", "stage", "max", "at step",
                                        "median", "steps"));
  const size_t per_stage = 3;
  for (const analysis::StagePeak& sp : r.stage_peaks) {
    if (sp.kind != SiteKind::kHost) continue;  // AppendDeviceStagePeaks
    std::string name = sp.stage.size() > 16 ? sp.stage.substr(0, 16) : sp.stage;
    absl::StrAppend(
        &out, absl::StrFormat("  %-16s %11s %8d %11s %7d", name,
                              HumanBytes(static_cast<double>(sp.peak_bytes_max)), sp.step_of_max,
                              HumanBytes(static_cast<double>(sp.peak_bytes_median)), sp.steps));
    if (r.processes.size() > 1) absl::StrAppend(&out, "  pid ", sp.pid);
    absl::StrAppend(&out, "\n");
    for (size_t i = 0; i < sp.top_sites.size() && i < per_stage; ++i) {
      const analysis::PeakSite& t = sp.top_sites[i];
      absl::StrAppend(&out, "      ", HumanBytes(t.live_bytes), "  ");
      if (t.live_bytes_high >= 0) {
        absl::StrAppend(&out, "(95% CI ", HumanBytes(t.live_bytes_low), "-",
                        HumanBytes(t.live_bytes_high), ")  ");
      }
      const Site* site = nullptr;
      for (const Site& s : r.sites) {
        if (s.id == t.site_id) site = &s;
      }
      if (site != nullptr && !site->frames.empty()) {
        absl::StrAppend(&out, "site #", site->id, " ", site->frames[0].function);
      } else {
        absl::StrAppend(&out, "stack ", t.stack_id);
      }
      absl::StrAppend(&out, "  (", sp.top_source, ")\n");
    }
  }
}

void AppendEpochs(const Report& r, std::string& out) {
  if (r.epochs.empty()) return;
  absl::StrAppend(&out, "\nEpochs (exact bytes)\n");
  absl::StrAppend(&out, absl::StrFormat("  %6s %15s %11s %11s %13s %11s\n", "epoch", "steps",
                                        "live end", "growth", "growth/step", "peak"));
  for (const analysis::EpochRow& e : r.epochs) {
    absl::StrAppend(&out, absl::StrFormat("  %6d %15s %11s %11s %13s %11s", e.epoch,
                                          absl::StrCat(e.first_step, "-", e.last_step),
                                          HumanBytes(static_cast<double>(e.live_bytes_end)),
                                          HumanBytes(static_cast<double>(e.growth_bytes)),
                                          HumanBytes(e.growth_bytes_per_step),
                                          HumanBytes(static_cast<double>(e.peak_bytes))));
    if (r.processes.size() > 1) absl::StrAppend(&out, "  pid ", e.pid);
    absl::StrAppend(&out, "\n");
  }
}

}  // namespace

std::string HumanBytes(double bytes) {
  if (!std::isfinite(bytes)) return "?";
  const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const bool neg = bytes < 0;
  double v = std::fabs(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  std::string s = u == 0    ? absl::StrFormat("%.0f B", v)
                  : v < 10  ? absl::StrFormat("%.2f %s", v, kUnits[u])
                  : v < 100 ? absl::StrFormat("%.1f %s", v, kUnits[u])
                            : absl::StrFormat("%.0f %s", v, kUnits[u]);
  return neg ? "-" + s : s;
}

std::string Thousands(uint64_t n) {
  std::string digits = absl::StrCat(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string FormatText(const Report& report, const ReportOptions& options) {
  std::string out;
  if (!report.selection.empty()) {
    absl::StrAppend(&out, "Selection: ", report.selection,
                    " (the analysis sees only these; docs/analysis.md \"Selection\")\n");
  }
  AppendProcesses(report, out);
  AppendRanks(report, out);
  internal::AppendMemorySnapshots(report, options, out);
  AppendGrowth(report, options, out);
  AppendGates(report, out);
  AppendAlerts(report, out);
  internal::AppendDeviceFailures(report, options, out);
  AppendStagePeaks(report, out);
  internal::AppendDeviceStagePeaks(report, out);
  AppendEpochs(report, out);
  AppendTotals(report, out);
  internal::AppendDeviceMemory(report, out);
  AppendSteps(report, options, out);
  AppendSites(report, options, /*at_peak=*/false, out);
  AppendSites(report, options, /*at_peak=*/true, out);
  internal::AppendDeviceSites(report, options, /*at_peak=*/false, out);
  internal::AppendDeviceSites(report, options, /*at_peak=*/true, out);
  return out;
}

}  // namespace memstep::report

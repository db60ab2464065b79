// Text report: the device-memory sections. Each prints nothing for a trace
// without device records, so host-only reports are unchanged.

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/report/text_internal.h"

namespace memstep::report::internal {
namespace {

using analysis::DeviceStep;
using analysis::DeviceSummary;
using analysis::ProcessSummary;
using analysis::Report;
using analysis::Site;
using analysis::StepRow;

std::string DeviceName(int32_t device) {
  return device < 0 ? std::string("device ?") : absl::StrCat("device ", device);
}

std::string Bytes(uint64_t v) { return HumanBytes(static_cast<double>(v)); }

// "-" for an unknown (-1) statistic.
std::string MaybeBytes(int64_t v) { return v < 0 ? "-" : HumanBytes(static_cast<double>(v)); }

std::string FullIn(int32_t device, double steps, double seconds) {
  if (steps < 0) return "";
  std::string out = absl::StrFormat("  %s full in %s steps", DeviceName(device),
                                    Thousands(static_cast<uint64_t>(steps)));
  if (seconds >= 0) absl::StrAppend(&out, " (", Duration(seconds), ")");
  return out;
}

const Site* SiteById(const Report& r, uint64_t id) {
  for (const Site& s : r.sites) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

bool AnyDeviceData(const Report& r) {
  return std::any_of(r.processes.begin(), r.processes.end(),
                     [](const ProcessSummary& p) { return p.has_device_data(); });
}

// The steps of process `pid` and, for each, the entry of `device`.
std::vector<std::pair<const StepRow*, const DeviceStep*>> DeviceRows(const Report& r, uint32_t pid,
                                                                     int32_t device) {
  std::vector<std::pair<const StepRow*, const DeviceStep*>> out;
  for (const StepRow& s : r.steps) {
    if (s.pid != pid) continue;
    for (const DeviceStep& d : s.devices) {
      if (d.device == device) out.emplace_back(&s, &d);
    }
  }
  return out;
}

}  // namespace

void AppendDeviceGrowth(const ProcessSummary& p, std::string& out) {
  for (const DeviceSummary& d : p.devices) {
    if (d.alloc_count == 0) continue;  // only driver or PyTorch counters for it
    const analysis::Growth& g = d.live_growth;
    absl::StrAppend(&out, "    ", DeviceName(d.device),
                    " resident (exact): ", analysis::GrowthClassName(g.cls));
    if (g.window > 0) absl::StrAppend(&out, "  ", Rate(g));
    absl::StrAppend(&out, FullIn(d.device, d.steps_to_limit, d.seconds_to_limit));
    if (d.warmup_steps != p.warmup_steps)
      absl::StrAppend(&out, "  warm-up ", d.warmup_steps, " steps");
    absl::StrAppend(&out, "  (", g.reason, ")\n");
    if (d.has_torch_growth) {
      const analysis::Growth& t = d.torch_allocated_growth;
      absl::StrAppend(&out,
                      "      PyTorch allocated (tensors): ", analysis::GrowthClassName(t.cls));
      if (t.window > 0) absl::StrAppend(&out, "  ", Rate(t));
      if (d.growth_verdict == "leak") {
        absl::StrAppend(&out, "  -> tensors leak");
      } else if (d.growth_verdict == "caching") {
        absl::StrAppend(&out,
                        "  -> CACHING: the allocator's segments grow, the tensors do not "
                        "(not a leak; empty_cache() would return it)");
      } else if (d.growth_verdict == "fragmentation") {
        absl::StrAppend(&out,
                        "  -> FRAGMENTATION: segments and the free memory trapped in split "
                        "blocks grow, the tensors do not (not a leak)");
      }
      absl::StrAppend(&out, "\n");
    }
  }
}

std::string DeviceSiteTag(const Site& s) {
  if (IsHost(s.kind)) return "";
  if (s.kind == SiteKind::kPinnedHost) return absl::StrCat(" [pinned_host, ", s.api, "]");
  return absl::StrCat(" [", SiteKindName(s.kind), ", ", DeviceName(s.device), ", ", s.api, "]");
}

std::string DeviceProjection(const Site& s) {
  return FullIn(s.device, s.steps_to_limit, s.seconds_to_limit);
}

void AppendDeviceFailures(const Report& r, const ReportOptions& o, std::string& out) {
  if (r.device_failures.empty()) return;
  const size_t shown =
      o.top > 0 ? std::min<size_t>(o.top, r.device_failures.size()) : r.device_failures.size();
  absl::StrAppend(&out, "\nDevice allocation failures: ", r.device_failures.size());
  if (shown < r.device_failures.size()) {
    absl::StrAppend(&out, " (the first ", shown, "; all in --format json)");
  }
  absl::StrAppend(&out, "\n");
  for (size_t i = 0; i < shown; ++i) {
    const analysis::DeviceFailure& f = r.device_failures[i];
    absl::StrAppend(
        &out, "  step ", f.step, f.stage.empty() ? "" : absl::StrCat(" (", f.stage, ")"), "  ",
        Seconds(f.time_s), "  ", f.api, " ", ExactBytes(f.size), "  [", SiteKindName(f.kind));
    if (f.kind != SiteKind::kPinnedHost) absl::StrAppend(&out, ", ", DeviceName(f.device));
    absl::StrAppend(&out, "]  error ", f.error);
    if (!f.error_name.empty()) absl::StrAppend(&out, " (", f.error_name, ")");
    if (f.site_id != 0) absl::StrAppend(&out, "  site #", f.site_id);
    if (r.processes.size() > 1) absl::StrAppend(&out, "  pid ", f.pid);
    absl::StrAppend(&out, "\n");
    AppendFrames(f.frames, o, out);
  }
}

void AppendDeviceStagePeaks(const Report& r, std::string& out) {
  const auto is_device = [](const analysis::StagePeak& sp) { return sp.kind == SiteKind::kDevice; };
  if (std::none_of(r.stage_peaks.begin(), r.stage_peaks.end(), is_device)) return;
  absl::StrAppend(&out, "\nDevice stage peaks (exact resident device bytes; top sites exact)\n");
  absl::StrAppend(&out, absl::StrFormat("  %-16s %8s %11s %8s %11s %7s\n", "stage", "device", "max",
                                        "at step", "median", "steps"));
  const size_t per_stage = 3;
  for (const analysis::StagePeak& sp : r.stage_peaks) {
    if (!is_device(sp)) continue;
    std::string name = sp.stage.size() > 16 ? sp.stage.substr(0, 16) : sp.stage;
    absl::StrAppend(&out, absl::StrFormat("  %-16s %8s %11s %8d %11s %7d", name,
                                          sp.device < 0 ? "?" : absl::StrCat(sp.device),
                                          Bytes(sp.peak_bytes_max), sp.step_of_max,
                                          Bytes(sp.peak_bytes_median), sp.steps));
    if (r.processes.size() > 1) absl::StrAppend(&out, "  pid ", sp.pid);
    absl::StrAppend(&out, "\n");
    for (size_t i = 0; i < sp.top_sites.size() && i < per_stage; ++i) {
      const analysis::PeakSite& t = sp.top_sites[i];
      absl::StrAppend(&out, "      ", HumanBytes(t.live_bytes), "  ");
      const Site* site = SiteById(r, t.site_id);
      if (site != nullptr) {
        absl::StrAppend(&out, "site #", site->id, " ", SiteKindName(site->kind), " ",
                        site->frames.empty() ? "<no stack>" : site->frames[0].function);
      } else {
        absl::StrAppend(&out, "stack ", t.stack_id);
      }
      absl::StrAppend(&out, "\n");
    }
  }
}

void AppendDeviceMemory(const Report& r, std::string& out) {
  if (!AnyDeviceData(r)) return;
  absl::StrAppend(&out,
                  "\nDevice memory (exact: every CUDA allocation is recorded; resident = "
                  "device + device_vmm + device_pool + device_managed)\n");
  for (const ProcessSummary& p : r.processes) {
    if (!p.has_device_data()) continue;
    for (const DeviceSummary& d : p.devices) {
      absl::StrAppend(&out, "  pid ", p.pid, " ", DeviceName(d.device), ": peak ",
                      ExactBytes(d.peak_bytes));
      if (d.peak_bytes > 0) {
        absl::StrAppend(&out, " at ",
                        d.peak_step >= 0 ? absl::StrCat("step ", d.peak_step, ", ") : "",
                        Seconds(d.peak_time_s));
      }
      absl::StrAppend(&out, "; live at end ", ExactBytes(d.live_bytes_end), "\n");
      for (const auto& [kind, peak] : d.peak_by_kind) {
        auto live = d.live_by_kind_end.find(kind);
        absl::StrAppend(
            &out, absl::StrFormat("      %-15s peak %11s  live at end %11s\n", kind, Bytes(peak),
                                  Bytes(live == d.live_by_kind_end.end() ? 0 : live->second)));
      }
      absl::StrAppend(&out, "      ", Thousands(d.alloc_count), " allocations (",
                      Bytes(d.alloc_bytes), "), ", Thousands(d.free_count), " frees (",
                      Bytes(d.free_bytes), ")");
      if (d.failures > 0) absl::StrAppend(&out, ", ", d.failures, " failed");
      absl::StrAppend(&out, "\n");
      if (d.total_bytes > 0) {
        absl::StrAppend(&out, "      driver: total ", Bytes(d.total_bytes), ", used ",
                        Bytes(d.used_bytes_end),
                        " at the last step end (includes the CUDA context and libraries)\n");
      }
    }
    if (p.pinned_host_peak_bytes > 0) {
      absl::StrAppend(&out, "  pid ", p.pid, " pinned host memory: peak ",
                      ExactBytes(p.pinned_host_peak_bytes), "; live at end ",
                      ExactBytes(p.pinned_host_live_bytes_end), "\n");
    }
    if (p.device_unmatched_frees > 0) {
      absl::StrAppend(&out, "  pid ", p.pid, ": ", p.device_unmatched_frees,
                      " device frees of allocations memstep never saw, applied with their "
                      "recorded sizes\n");
    }
    if (p.device_ignored_frees > 0) {
      absl::StrAppend(&out, "  pid ", p.pid, ": ", p.device_ignored_frees,
                      " device frees of allocations memstep never saw, without a size: ignored\n");
    }
  }
}

std::string DeviceStepHeader(const ProcessSummary& p) {
  if (!p.has_device_data()) return "";
  std::string out = absl::StrFormat(" %11s %11s", "dev live", "dev peak");
  if (p.pinned_host_peak_bytes > 0) absl::StrAppend(&out, absl::StrFormat(" %11s", "pinned"));
  return out;
}

std::string DeviceStepCells(const ProcessSummary& p, const StepRow& s) {
  if (!p.has_device_data()) return "";
  std::string out =
      absl::StrFormat(" %11s %11s", Bytes(s.device_live_bytes_end), Bytes(s.device_peak_bytes));
  if (p.pinned_host_peak_bytes > 0) {
    absl::StrAppend(&out, absl::StrFormat(" %11s", Bytes(s.pinned_host_live_bytes_end)));
  }
  return out;
}

namespace {

// The optional columns of a device's step table: those some row has data for.
struct DeviceColumns {
  bool info = false;    // the driver's used bytes
  bool pool = false;    // the default pool's reserve
  bool torch = false;   // PyTorch's caching allocator
  bool ooms = false;    // PyTorch's OOMs in a step
  bool blocks = false;  // tensor blocks
  bool pools = false;   // created memory pools
  bool graph = false;   // graph memory
};

template <typename Rows>
DeviceColumns ColumnsOf(const Rows& rows) {
  DeviceColumns c;
  for (const auto& [row, ds] : rows) {
    c.blocks |= ds->has_blocks;
    c.pools |= !ds->created_pools.empty();
    c.graph |= ds->graph.reserved >= 0 || ds->graph.used >= 0;
    c.info |= ds->has_info;
    c.pool |= ds->pool_reserved_bytes > 0;
    c.torch |= ds->torch.any();
    c.ooms |= ds->torch.ooms_in_step > 0;
  }
  return c;
}

std::string DeviceStepsHeader(const DeviceColumns& c) {
  std::string header = absl::StrFormat("  %8s %11s %11s", "step", "live end", "peak");
  if (c.info) absl::StrAppend(&header, absl::StrFormat(" %11s", "drv used"));
  if (c.pool) absl::StrAppend(&header, absl::StrFormat(" %11s %11s", "pool rsv", "pool used"));
  if (c.torch) {
    absl::StrAppend(
        &header, absl::StrFormat(" %11s %11s %11s %11s %6s %7s", "reserved", "allocated", "slack",
                                 "inact.split", "share", "retries"));
  }
  if (c.blocks) absl::StrAppend(&header, absl::StrFormat(" %11s %11s", "blocks", "frag."));
  if (c.pools) absl::StrAppend(&header, absl::StrFormat(" %11s %11s", "pools rsv", "pools used"));
  if (c.graph) absl::StrAppend(&header, absl::StrFormat(" %11s %11s", "graph rsv", "graph used"));
  if (c.ooms) absl::StrAppend(&header, absl::StrFormat(" %5s", "OOMs"));
  return header;
}

// PyTorch's cells: reserved, allocated, slack, inactive split and its share
// of reserved, allocation retries.
std::string TorchCells(const analysis::TorchCudaStats& t) {
  const std::string share =
      t.inactive_split_bytes >= 0 && t.reserved_bytes > 0
          ? absl::StrFormat("%.1f%%", 100.0 * static_cast<double>(t.inactive_split_bytes) /
                                          static_cast<double>(t.reserved_bytes))
          : "-";
  return absl::StrFormat(" %11s %11s %11s %11s %6s %7s", MaybeBytes(t.reserved_bytes),
                         MaybeBytes(t.allocated_bytes), MaybeBytes(t.cache_slack()),
                         MaybeBytes(t.inactive_split_bytes), share,
                         t.alloc_retries_in_step < 0 ? "-" : absl::StrCat(t.alloc_retries_in_step));
}

std::string DeviceStepLine(uint64_t step, const DeviceStep& ds, const DeviceColumns& c) {
  std::string out =
      absl::StrFormat("  %8d %11s %11s", step, Bytes(ds.live_bytes_end), Bytes(ds.peak_bytes));
  if (c.info) {
    absl::StrAppend(&out,
                    absl::StrFormat(" %11s", ds.has_info ? Bytes(ds.driver_used_bytes) : "-"));
  }
  if (c.pool) {
    absl::StrAppend(&out, absl::StrFormat(" %11s %11s", Bytes(ds.pool_reserved_bytes),
                                          Bytes(ds.pool_used_bytes)));
  }
  if (c.torch) absl::StrAppend(&out, TorchCells(ds.torch));
  if (c.blocks) {
    absl::StrAppend(&out,
                    absl::StrFormat(" %11s %11s", ds.has_blocks ? Bytes(ds.blocks_bytes) : "-",
                                    MaybeBytes(ds.block_fragmentation())));
  }
  if (c.pools) {  // created pools, summed
    int64_t reserved = -1, used = -1;
    for (const auto& [name, b] : ds.created_pools) {
      if (b.reserved >= 0) reserved = std::max<int64_t>(reserved, 0) + b.reserved;
      if (b.used >= 0) used = std::max<int64_t>(used, 0) + b.used;
    }
    absl::StrAppend(&out, absl::StrFormat(" %11s %11s", MaybeBytes(reserved), MaybeBytes(used)));
  }
  if (c.graph) {
    absl::StrAppend(&out, absl::StrFormat(" %11s %11s", MaybeBytes(ds.graph.reserved),
                                          MaybeBytes(ds.graph.used)));
  }
  if (c.ooms) {
    absl::StrAppend(
        &out, absl::StrFormat(
                  " %5s", ds.torch.ooms_in_step < 0 ? "-" : absl::StrCat(ds.torch.ooms_in_step)));
  }
  return out + "\n";
}

std::string StepName(int64_t step) { return step < 0 ? "-" : absl::StrCat(step); }

// At most this many lines of pool events or multicast objects (all in JSON).
constexpr size_t kMaxObjectLines = 20;

// Release thresholds as set or first read, and trims, in trace order.
void AppendPoolEvents(const ProcessSummary& p, std::string& out) {
  if (p.pool_events.empty()) return;
  const size_t total = p.pool_events.size() + p.pool_events_dropped;
  absl::StrAppend(&out, "\nMemory pools (pid ", p.pid, "): ", total,
                  total == 1 ? " release threshold or trim" : " release thresholds and trims",
                  " (a pool keeps freed memory up to its threshold: caching, not a leak)\n");
  absl::StrAppend(&out,
                  absl::StrFormat("  %8s %6s  %-18s %s\n", "step", "device", "pool", "event"));
  size_t shown = 0;
  const size_t limit = kMaxObjectLines;
  for (const ProcessSummary::PoolEvent& e : p.pool_events) {
    if (shown++ == limit) break;
    std::string what;
    if (e.trim) {
      what = absl::StrCat("trimmed to ", HumanBytes(static_cast<double>(e.bytes)));
      if (e.reserved_after >= 0) {
        absl::StrAppend(&what, ", reserved ", HumanBytes(static_cast<double>(e.reserved_after)),
                        " after");
      }
    } else {
      what = absl::StrCat("release threshold ", e.bytes == INT64_MAX
                                                    ? "no limit"
                                                    : HumanBytes(static_cast<double>(e.bytes)));
    }
    if (e.device < 0) absl::StrAppend(&what, "  (a pool memstep did not see created)");
    absl::StrAppend(&out,
                    absl::StrFormat("  %8s %6s  %-18s %s\n", StepName(e.step),
                                    e.device < 0 ? "-" : absl::StrCat(e.device), e.pool, what));
  }
  if (total > std::min(limit, p.pool_events.size())) {
    absl::StrAppend(&out, "  ... ", total - std::min(limit, p.pool_events.size()),
                    " more (all recorded ones in --format json)\n");
  }
}

// Multicast objects: size, lifetime and the most memory bound per device.
void AppendMulticast(const ProcessSummary& p, std::string& out) {
  if (p.multicast.empty()) return;
  const size_t total = p.multicast.size() + p.multicast_dropped;
  absl::StrAppend(&out, "\nMulticast objects (pid ", p.pid, "): ", total,
                  " (no memory of their own: the bound memory is cuMemCreate memory, counted "
                  "on its device)\n");
  absl::StrAppend(&out, absl::StrFormat("  %-18s %11s %8s %8s  %s\n", "object", "size", "created",
                                        "released", "bound at most (now)"));
  size_t shown = 0;
  const size_t limit = kMaxObjectLines;
  for (const ProcessSummary::Multicast& m : p.multicast) {
    if (shown++ == limit) break;
    std::string bound;
    for (const auto& [device, most] : m.bound_max) {
      auto now = m.bound_end.find(device);
      absl::StrAppend(&bound, bound.empty() ? "" : ", ", DeviceName(device), " ",
                      HumanBytes(static_cast<double>(most)), " (",
                      HumanBytes(static_cast<double>(now != m.bound_end.end() ? now->second : 0)),
                      ")");
    }
    absl::StrAppend(&out, absl::StrFormat("  %-18s %11s %8s %8s  %s\n", m.object,
                                          MaybeBytes(m.size_bytes), StepName(m.created_step),
                                          m.released ? StepName(m.released_step) : "no",
                                          bound.empty() ? "none" : bound));
  }
  if (total > std::min(limit, p.multicast.size())) {
    absl::StrAppend(&out, "  ... ", total - std::min(limit, p.multicast.size()),
                    " more (all recorded ones in --format json)\n");
  }
}

}  // namespace

void AppendDeviceSteps(const Report& r, const ProcessSummary& p, const ReportOptions& o,
                       std::string& out) {
  for (const DeviceSummary& d : p.devices) {
    const auto rows = DeviceRows(r, p.pid, d.device);
    const DeviceColumns c = ColumnsOf(rows);
    if (!c.info && !c.torch && !c.blocks && !c.pools && !c.graph) continue;
    absl::StrAppend(&out, "\n", DeviceName(d.device), " per step (pid ", p.pid, "): resident bytes",
                    c.info ? ", the driver's view" : "",
                    c.torch ? ", PyTorch's caching allocator" : "",
                    c.blocks ? ", its tensor blocks (allocated) in the segments (reserved)" : "",
                    c.pools ? ", created memory pools" : "", c.graph ? ", graph memory" : "", "\n");
    out += DeviceStepsHeader(c) + "\n";
    std::vector<uint64_t> peaks;
    for (const auto& [row, ds] : rows) peaks.push_back(ds->peak_bytes);
    for (size_t i : PickRows(peaks, o)) {
      if (i == SIZE_MAX) {
        absl::StrAppend(&out, absl::StrFormat("  %8s\n", "..."));
        continue;
      }
      out += DeviceStepLine(rows[i].first->step, *rows[i].second, c);
    }
  }
  AppendPoolEvents(p, out);
  AppendMulticast(p, out);
}

void AppendDeviceSites(const Report& r, const ReportOptions& o, bool at_peak, std::string& out) {
  double total;
  bool any;
  const std::vector<const Site*> sites = TopSites(r, o, true, at_peak, &total, &any);
  if (!any) return;
  if (at_peak) {
    absl::StrAppend(&out, "\nTop ", sites.size(),
                    " device call sites at their device's peak (exact; pinned host sites at the "
                    "pinned peak)\n");
  } else {
    absl::StrAppend(&out, "\nTop ", sites.size(),
                    " device call sites by live bytes at end (exact)\n");
  }
  if (sites.empty()) {
    absl::StrAppend(&out, "  (none)\n");
    return;
  }
  int rank = 0;
  for (const Site* s : sites) {
    const double v = at_peak ? s->live_bytes_at_peak : s->live_bytes_end;
    absl::StrAppend(&out, SiteRankCells(++rank, v, total));
    if (!at_peak) absl::StrAppend(&out, absl::StrFormat("%.0f live allocs  ", s->live_count_end));
    absl::StrAppend(&out, SiteKindName(s->kind));
    if (s->kind != SiteKind::kPinnedHost) absl::StrAppend(&out, "  ", DeviceName(s->device));
    absl::StrAppend(&out, "  ", s->api, "  ", Thousands(s->samples), " allocations, ",
                    HumanBytes(s->alloc_bytes), " in total  site #", s->id);
    if (r.processes.size() > 1) absl::StrAppend(&out, "  pid ", s->pid);
    absl::StrAppend(&out, "\n");
    AppendFrames(s->frames, o, out);
  }
}

}  // namespace memstep::report::internal

// JSON report, schema "memstep.report/3" (fields listed in docs/report-schema.md).

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/report/json_writer.h"
#include "src/report/report.h"
#include "src/report/text_internal.h"

namespace memstep::report {
namespace {

using analysis::Frame;
using analysis::ProcessSummary;
using analysis::Report;
using analysis::Site;
using analysis::StepRow;

using internal::JsonWriter;

// -1 ("not applicable") as null.
void OptionalDouble(JsonWriter& w, const std::string& key, double v) {
  w.Key(key);
  if (v < 0) {
    w.Double(NAN);
  } else {
    w.Double(v);
  }
}

// `cls`: the class to write ("" = the growth's own).
void WriteGrowth(JsonWriter& w, const analysis::Growth& g, const std::string& cls = "") {
  w.BeginObject();
  w.Field("class", cls.empty() ? std::string(analysis::GrowthClassName(g.cls)) : cls);
  w.Field("reason", g.reason);
  w.Field("warmup_steps", static_cast<uint64_t>(g.warmup));
  w.Field("window_begin", static_cast<uint64_t>(g.window_begin));
  w.Field("window_steps", static_cast<uint64_t>(g.window));
  w.Field("p_value", g.p_value);
  w.Field("z", g.z);
  w.Field("bytes_per_step", g.slope);
  w.Key("ci");
  w.BeginArray();
  w.Double(g.slope_low);
  w.Double(g.slope_high);
  w.EndArray();
  w.Field("calibrated", g.calibrated);
  OptionalDouble(w, "sampled_bytes_per_step", g.calibrated ? g.sampled_slope : -1);
  w.Field("replaced", g.replaced);
  w.Field("bytes_per_step_first_half", g.slope_first_half);
  w.Field("bytes_per_step_second_half", g.slope_second_half);
  OptionalDouble(w, "retained_bytes", g.retained_bytes);
  OptionalDouble(w, "window_samples", g.window_samples);
  // Blocks recorded with p = 1 are worth without bound: written as null.
  OptionalDouble(
      w, "window_effective_samples",
      g.window_samples < 0 || g.window_effective_samples >= 1e12 ? -1 : g.window_effective_samples);
  w.Field("window_sample_steps", static_cast<uint64_t>(g.window_sample_rows));
  w.Field("warmup_bytes", g.warmup_bytes);
  w.Field("max_bytes", g.capacity);
  w.Field("level_shifts", static_cast<uint64_t>(g.level_shifts));
  w.Field("level_shift_bytes", g.level_shift_bytes);
  w.EndObject();
}

// A site's or Python line's "class", "growth_bytes_per_step", "growth_ci"
// and "growth" fields.
void WriteClassAndGrowth(JsonWriter& w, const analysis::Growth& g) {
  w.Field("class", std::string(analysis::GrowthClassName(g.cls)));
  w.Field("growth_bytes_per_step", g.slope);
  w.Key("growth_ci");
  w.BeginArray();
  w.Double(g.slope_low);
  w.Double(g.slope_high);
  w.EndArray();
  w.Key("growth");
  WriteGrowth(w, g);
}

// A count or byte figure where -1 (or, with zero_is_null, 0) means unknown.
void OptionalInt(JsonWriter& w, const std::string& key, int64_t v, bool zero_is_null = false) {
  w.Key(key);
  if (v < 0 || (zero_is_null && v == 0)) {
    w.Double(NAN);
  } else {
    w.Int(v);
  }
}

void WriteByName(JsonWriter& w, const std::string& key, const std::map<std::string, uint64_t>& m) {
  w.Key(key);
  w.BeginObject();
  for (const auto& [name, v] : m) w.Field(name, v);
  w.EndObject();
}

// The allocation traffic of a DeviceSummary or DeviceStep (resident kinds).
template <typename D>
void WriteTraffic(JsonWriter& w, const D& d) {
  w.Field("alloc_bytes", d.alloc_bytes);
  w.Field("alloc_count", d.alloc_count);
  w.Field("free_bytes", d.free_bytes);
  w.Field("free_count", d.free_count);
  w.Field("failures", d.failures);
}

void WriteDeviceSummary(JsonWriter& w, const analysis::DeviceSummary& d) {
  w.BeginObject();
  OptionalInt(w, "device", d.device);
  w.Field("peak_bytes", d.peak_bytes);
  w.Field("peak_time_s", d.peak_time_s);
  OptionalInt(w, "peak_step", d.peak_step);
  w.Field("live_bytes_end", d.live_bytes_end);
  WriteByName(w, "live_by_kind_end", d.live_by_kind_end);
  WriteByName(w, "peak_by_kind", d.peak_by_kind);
  WriteTraffic(w, d);
  OptionalInt(w, "total_bytes", static_cast<int64_t>(d.total_bytes), true);
  OptionalInt(w, "used_bytes_end", static_cast<int64_t>(d.used_bytes_end), true);
  w.Field("warmup_steps", static_cast<uint64_t>(d.warmup_steps));
  w.Key("live_growth");
  WriteGrowth(w, d.live_growth);
  OptionalDouble(w, "steps_to_limit", d.steps_to_limit);
  OptionalDouble(w, "seconds_to_limit", d.seconds_to_limit);
  w.Key("torch_allocated_growth");
  if (d.has_torch_growth) {
    WriteGrowth(w, d.torch_allocated_growth);
  } else {
    w.Double(NAN);
  }
  w.Field("growth_verdict", d.growth_verdict);
  w.EndObject();
}

// The identity, exact totals and sampling figures of one process.
void WriteProcessTotals(JsonWriter& w, const ProcessSummary& p) {
  w.Field("pid", p.pid);
  w.Field("ppid", p.ppid);
  w.Field("fork_child", p.fork_child);
  w.Field("trace_path", p.trace_path);
  w.Field("cmdline", p.cmdline);
  w.Field("hostname", p.hostname);
  w.Field("rank", p.rank);
  w.Field("alloc_bytes", p.alloc_bytes);
  w.Field("alloc_count", p.alloc_count);
  w.Field("free_bytes", p.free_bytes);
  w.Field("free_count", p.free_count);
  w.Field("live_bytes_end", p.live_bytes_end);
  w.Field("peak_bytes", p.peak_bytes);
  w.Field("mmap_live_bytes_end", p.mmap_live_bytes_end);
  w.Field("rss_bytes_end", p.rss_bytes_end);
  w.Field("samples", p.samples);
  w.Field("lost_records", p.lost_records);
  w.Field("lost_bytes", p.lost_bytes);
  w.Field("lost_samples", p.lost_samples);
  w.Field("lost_kept_records", p.lost_kept_records);
  w.Field("unknown_refs", p.unknown_refs);
  w.Field("sample_interval", p.sample_interval);
  w.Field("est_live_bytes_end", p.est_live_bytes_end);
  w.Field("est_peak_bytes", p.est_peak_bytes);
  w.Field("est_peak_time_s", p.est_peak_time_s);
  w.Field("duration_s", p.duration_s);
  w.Field("clean_exit", p.clean_exit);
  w.Field("recording_stopped", p.recording_stopped);
  w.Field("last_step", static_cast<double>(p.last_step));
  w.Field("truncated", p.truncated);
  w.Field("truncated_at_offset", p.truncated_at_offset);
  w.Field("rss_peak_bytes", p.rss_peak_bytes);
  w.Field("warmup_steps", static_cast<uint64_t>(p.warmup_steps));
  w.Field("warmup_detected", p.warmup_detected);
  w.Field("median_step_s", p.median_step_s);
}

// The RSS growth split into components (analysis::ExplainRss).
void WriteRssExplain(JsonWriter& w, const analysis::RssExplain& x) {
  w.Key("rss_explain");
  w.BeginObject();
  w.Field("verdict", x.verdict);
  w.Field("reason", x.reason);
  w.Field("allocator", x.allocator);
  w.Field("window_begin", static_cast<uint64_t>(x.window_begin));
  w.Field("window", static_cast<uint64_t>(x.window));
  w.Field("stat_rows", static_cast<uint64_t>(x.stat_rows));
  w.Field("rss_per_step", x.rss_per_step);
  w.Field("rise_bytes", x.rise_bytes);
  w.Field("rate_established", x.rate_established);
  w.Field("live_per_step", x.live_per_step);
  w.Field("has_allocator", x.has_allocator);
  w.Field("frag_per_step", x.frag_per_step);
  w.Field("cache_per_step", x.cache_per_step);
  w.Field("mmap_per_step", x.mmap_per_step);
  w.Field("has_file", x.has_file);
  w.Field("file_per_step", x.file_per_step);
  w.Field("anon_per_step", x.anon_per_step);
  w.Field("file_source", x.file_source);
  w.Field("has_own", x.has_own);
  w.Field("own_per_step", x.own_per_step);
  w.Field("other_per_step", x.other_per_step);
  w.Field("arena", x.arena);
  w.Field("arenas", static_cast<uint64_t>(x.arenas));
  w.Field("arena_frag_per_step", x.arena_frag_per_step);
  w.Field("arena_top_per_step", x.arena_top_per_step);
  w.Field("arena_in_use_per_step", x.arena_in_use_per_step);
  w.Field("live_p", x.live_p);
  w.Field("frag_p", x.frag_p);
  w.Field("cache_p", x.cache_p);
  w.Field("mmap_p", x.mmap_p);
  w.Field("file_p", x.file_p);
  w.Field("own_p", x.own_p);
  w.Field("median_cost_ns", x.median_cost_ns);
  w.Field("median_smaps_ns", x.median_smaps_ns);
  w.Field("median_own_ns", x.median_own_ns);
  w.Key("pins");
  w.BeginArray();
  for (const analysis::RssPin& pin : x.pins) {
    w.BeginObject();
    w.Field("site_id", pin.site_id);
    w.Field("bytes_per_step", pin.bytes_per_step);
    w.Field("ratio", pin.ratio);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
}

// One leak hunt (HUNT records).
void WriteHunt(JsonWriter& w, const ProcessSummary::Hunt& h) {
  w.BeginObject();
  w.Field("begin_step", h.begin_step);
  w.Field("end_step", h.end_step);
  w.Field("outcome", h.outcome == format::kHuntExplained ? "explained"
                     : h.outcome == format::kHuntStopped ? "stopped"
                     : h.outcome == format::kHuntGaveUp  ? "gave_up"
                                                         : "running");
  w.Field("min_interval", h.min_interval);
  w.Field("rate_bytes_per_step", h.rate);
  w.Field("growth_bytes", h.growth);
  w.Field("explained_bytes", h.explained);
  w.Field("samples", h.samples);
  w.Field("stack_ns", h.stack_ns);
  w.Field("memory", h.device ? "device" : "host");
  w.Field("screened", h.screened);
  w.Field("residual", h.residual);
  w.EndObject();
}

// The process's device totals and each device's summary.
void WriteDeviceTotals(JsonWriter& w, const ProcessSummary& p) {
  w.Field("device_peak_bytes", p.device_peak_bytes);
  w.Field("pinned_host_live_bytes_end", p.pinned_host_live_bytes_end);
  w.Field("pinned_host_peak_bytes", p.pinned_host_peak_bytes);
  w.Field("device_failures", p.device_failures);
  w.Field("device_unmatched_frees", p.device_unmatched_frees);
  w.Field("device_ignored_frees", p.device_ignored_frees);
  w.Key("devices");
  w.BeginArray();
  for (const analysis::DeviceSummary& d : p.devices) WriteDeviceSummary(w, d);
  w.EndArray();
  // Memory pools' release thresholds and trims, multicast objects.
  w.Key("pool_events");
  w.BeginArray();
  for (const ProcessSummary::PoolEvent& e : p.pool_events) {
    w.BeginObject();
    OptionalInt(w, "step", e.step);
    w.Key("device");
    w.Int(e.device);
    w.Field("pool", e.pool);
    w.Field("event", e.trim ? "trim" : "release_threshold");
    w.Field(e.trim ? "trim_to_bytes" : "release_threshold_bytes", e.bytes);
    OptionalInt(w, "reserved_bytes_after", e.reserved_after);
    w.EndObject();
  }
  w.EndArray();
  w.Field("pool_events_dropped", p.pool_events_dropped);
  w.Key("multicast");
  w.BeginArray();
  for (const ProcessSummary::Multicast& m : p.multicast) {
    w.BeginObject();
    w.Field("object", m.object);
    OptionalInt(w, "size_bytes", m.size_bytes);
    OptionalInt(w, "created_step", m.created_step);
    w.Field("released", m.released);
    OptionalInt(w, "released_step", m.released_step);
    for (const auto* by : {&m.bound_max, &m.bound_end}) {
      w.Key(by == &m.bound_max ? "bound_bytes_max" : "bound_bytes_end");
      w.BeginObject();
      for (const auto& [device, bytes] : *by) {
        w.Key(absl::StrCat(device));
        w.Int(bytes);
      }
      w.EndObject();
    }
    w.EndObject();
  }
  w.EndArray();
  w.Field("multicast_dropped", p.multicast_dropped);
}

void WriteProcess(JsonWriter& w, const ProcessSummary& p) {
  w.BeginObject();
  WriteProcessTotals(w, p);
  w.Key("live_growth");
  WriteGrowth(w, p.live_growth);
  w.Key("rss_growth");
  // The same class as the text report: never LEAK unless the split says so.
  WriteGrowth(w, p.rss_growth, analysis::RssClassName(p.rss_growth, p.rss_explain));
  w.Field("fragmentation", p.fragmentation);
  WriteRssExplain(w, p.rss_explain);
  w.Field("attributed_bytes_per_step", p.attributed_bytes_per_step);
  w.Field("unattributed_bytes_per_step", p.unattributed_bytes_per_step);
  w.Field("attribute_hint", p.attribute_hint);
  w.Key("python_lines");
  w.BeginArray();
  for (const ProcessSummary::PythonLine& line : p.python_lines) {
    w.BeginObject();
    WriteClassAndGrowth(w, line.growth);
    w.Field("live_bytes_end", line.live_bytes_end);
    w.Key("live_bytes_end_ci");
    w.BeginArray();
    w.Double(line.live_bytes_end_low);
    w.Double(line.live_bytes_end_high);
    w.EndArray();
    w.Field("live_bytes_last_step", line.live_bytes_last_step);
    w.Field("samples", line.samples);
    w.Field("callees", line.callees);
    OptionalDouble(w, "steps_to_limit", line.steps_to_limit);
    OptionalDouble(w, "seconds_to_limit", line.seconds_to_limit);
    w.Key("site_ids");
    w.BeginArray();
    for (uint64_t id : line.site_ids) w.Uint(id);
    w.EndArray();
    internal::WriteFrames(w, line.frames, 0);
    w.EndObject();
  }
  w.EndArray();
  w.Key("hunts");
  w.BeginArray();
  for (const ProcessSummary::Hunt& h : p.hunts) WriteHunt(w, h);
  w.EndArray();
  OptionalDouble(w, "steps_to_limit", p.steps_to_limit);
  OptionalDouble(w, "seconds_to_limit", p.seconds_to_limit);
  w.Field("notices", p.notices);
  WriteDeviceTotals(w, p);
  w.EndObject();
}

void WriteTorch(JsonWriter& w, const analysis::TorchCudaStats& t) {
  w.BeginObject();
  OptionalInt(w, "allocated_bytes", t.allocated_bytes);
  OptionalInt(w, "reserved_bytes", t.reserved_bytes);
  OptionalInt(w, "inactive_split_bytes", t.inactive_split_bytes);
  OptionalInt(w, "requested_bytes", t.requested_bytes);
  OptionalInt(w, "num_alloc_retries", t.num_alloc_retries);
  OptionalInt(w, "num_ooms", t.num_ooms);
  OptionalInt(w, "allocated_bytes_peak", t.allocated_bytes_peak);
  OptionalInt(w, "reserved_bytes_peak", t.reserved_bytes_peak);
  OptionalInt(w, "cache_slack_bytes", t.cache_slack());
  w.Key("inactive_split_share");
  if (t.inactive_split_bytes >= 0 && t.reserved_bytes > 0) {
    w.Double(static_cast<double>(t.inactive_split_bytes) / static_cast<double>(t.reserved_bytes));
  } else {
    w.Double(NAN);
  }
  OptionalInt(w, "alloc_retries_in_step", t.alloc_retries_in_step);
  OptionalInt(w, "ooms_in_step", t.ooms_in_step);
  w.EndObject();
}

void WriteDeviceStep(JsonWriter& w, const analysis::DeviceStep& d) {
  w.BeginObject();
  OptionalInt(w, "device", d.device);
  w.Field("live_bytes_end", d.live_bytes_end);
  w.Field("peak_bytes", d.peak_bytes);
  WriteByName(w, "live_by_kind", d.live_by_kind);
  WriteByName(w, "peak_by_kind", d.peak_by_kind);
  WriteTraffic(w, d);
  WriteByName(w, "stage_peaks", d.stage_peaks);
  // PyTorch's tensor blocks (allocated) inside the segments (reserved).
  w.Key("tensor_blocks");
  if (d.has_blocks) {
    w.BeginObject();
    w.Field("allocated_bytes", d.blocks_bytes);
    w.Field("reserved_bytes", d.live_bytes_end);
    OptionalInt(w, "fragmentation_bytes", d.block_fragmentation());
    w.EndObject();
  } else {
    w.Double(NAN);
  }
  // The library's counters of created memory pools and of graph memory.
  w.Key("created_pools");
  w.BeginObject();
  for (const auto& [name, b] : d.created_pools) {
    w.Key(name);
    w.BeginObject();
    OptionalInt(w, "reserved_bytes", b.reserved);
    OptionalInt(w, "used_bytes", b.used);
    OptionalInt(w, "release_threshold_bytes", b.release_threshold);
    OptionalInt(w, "cached_bytes", b.cached());
    w.Key("within_release_threshold");
    if (b.within_threshold() >= 0) {
      w.Bool(b.within_threshold() == 1);
    } else {
      w.Double(NAN);
    }
    w.EndObject();
  }
  w.EndObject();
  w.Key("graph_memory");
  if (d.graph.reserved >= 0 || d.graph.used >= 0) {
    w.BeginObject();
    OptionalInt(w, "reserved_bytes", d.graph.reserved);
    OptionalInt(w, "used_bytes", d.graph.used);
    w.EndObject();
  } else {
    w.Double(NAN);
  }
  w.Key("driver");
  if (d.has_info) {
    w.BeginObject();
    w.Field("free_bytes", d.driver_free_bytes);
    w.Field("total_bytes", d.driver_total_bytes);
    w.Field("used_bytes", d.driver_used_bytes);
    w.Field("pool_reserved_bytes", d.pool_reserved_bytes);
    w.Field("pool_used_bytes", d.pool_used_bytes);
    w.EndObject();
  } else {
    w.Double(NAN);
  }
  w.Key("torch");
  if (d.torch.any()) {
    WriteTorch(w, d.torch);
  } else {
    w.Double(NAN);
  }
  w.EndObject();
}

void WriteStep(JsonWriter& w, const StepRow& s) {
  w.BeginObject();
  w.Field("pid", s.pid);
  w.Field("step", s.step);
  w.Key("epoch");
  if (s.epoch < 0) {
    w.Double(NAN);
  } else {
    w.Int(s.epoch);
  }
  w.Field("live_bytes_end", s.live_bytes_end);
  w.Field("peak_bytes", s.peak_bytes);
  w.Field("mmap_live_bytes_end", s.mmap_live_bytes_end);
  w.Field("rss_bytes_end", s.rss_bytes_end);
  w.Field("alloc_bytes", s.alloc_bytes);
  w.Field("alloc_count", s.alloc_count);
  w.Field("free_bytes", s.free_bytes);
  w.Field("free_count", s.free_count);
  w.Field("duration_s", s.duration_s);
  w.Key("stage_peaks");
  w.BeginObject();
  for (const auto& [name, peak] : s.stage_peaks) w.Field(name, peak);
  w.EndObject();
  w.Field("device_live_bytes_end", s.device_live_bytes_end);
  w.Field("device_peak_bytes", s.device_peak_bytes);
  w.Field("pinned_host_live_bytes_end", s.pinned_host_live_bytes_end);
  w.Field("pinned_host_peak_bytes", s.pinned_host_peak_bytes);
  w.Key("devices");
  w.BeginArray();
  for (const analysis::DeviceStep& d : s.devices) WriteDeviceStep(w, d);
  w.EndArray();
  w.EndObject();
}

using internal::WriteFrames;

// A 95 % interval [lo, hi]; high < 0 marks an exact value: [value, value].
void WriteCi(JsonWriter& w, const char* key, double value, double low, double high) {
  w.Key(key);
  w.BeginArray();
  w.Double(high < 0 ? value : low);
  w.Double(high < 0 ? value : high);
  w.EndArray();
}

// A per-step series by its change points, as analysis::StepSeries keeps it:
// {"rows": N, "changes": [[row, value], ...]}, rows increasing; each value
// holds from its row to the next change, the rows before the first are 0.
// Its size follows the changes, not the steps: a site constant over 10,000
// steps is {"rows":10000,"changes":[[0,V]]}.
void WriteSeries(JsonWriter& w, const char* key, const analysis::StepSeries& series) {
  w.Key(key);
  w.BeginObject();
  w.Field("rows", static_cast<uint64_t>(series.size()));
  w.Key("changes");
  w.BeginArray();
  for (const analysis::StepSeries::Change& c : series.changes()) {
    w.BeginArray();
    w.Uint(c.row);
    w.Double(c.value);
    w.EndArray();
  }
  w.EndArray();
  w.EndObject();
}

void WriteSite(JsonWriter& w, const Site& s, int max_frames) {
  w.BeginObject();
  w.Field("id", s.id);
  w.Field("kind", analysis::SiteKindName(s.kind));
  w.Field("pid", s.pid);
  w.Field("stack_id", s.stack_id);
  w.Field("samples", s.samples);
  w.Field("allocator", s.allocator);
  w.Field("alloc_bytes", s.alloc_bytes);
  w.Field("alloc_count", s.alloc_count);
  w.Field("live_bytes_end", s.live_bytes_end);
  w.Field("live_count_end", s.live_count_end);
  w.Field("live_bytes_at_peak", s.live_bytes_at_peak);
  WriteCi(w, "live_bytes_end_ci", s.live_bytes_end, s.live_bytes_end_low, s.live_bytes_end_high);
  WriteCi(w, "live_bytes_at_peak_ci", s.live_bytes_at_peak, s.live_bytes_at_peak_low,
          s.live_bytes_at_peak_high);
  WriteClassAndGrowth(w, s.growth);
  OptionalDouble(w, "steps_to_limit", s.steps_to_limit);
  OptionalDouble(w, "seconds_to_limit", s.seconds_to_limit);
  WriteSeries(w, "live_bytes_by_step", s.live_bytes_by_step);
  w.Key("churn");
  WriteChurn(w, s);
  WriteFrames(w, s.frames, max_frames);
  OptionalInt(w, "device", analysis::IsHost(s.kind) ? -1 : s.device);
  w.Field("api", s.api);
  w.EndObject();
}

void WriteDeviceFailure(JsonWriter& w, const analysis::DeviceFailure& f, int max_frames) {
  w.BeginObject();
  w.Field("pid", f.pid);
  w.Field("time_s", f.time_s);
  w.Field("step", f.step);
  w.Field("stage", f.stage);
  w.Field("size", f.size);
  w.Field("kind", analysis::SiteKindName(f.kind));
  w.Field("api", f.api);
  w.Field("error", f.error);
  w.Field("error_name", f.error_name);
  OptionalInt(w, "device", f.device);
  w.Field("stack_id", f.stack_id);
  w.Field("site_id", f.site_id);
  WriteFrames(w, f.frames, max_frames);
  w.EndObject();
}

void WritePeakSites(JsonWriter& w, const std::vector<analysis::PeakSite>& sites) {
  w.BeginArray();
  for (const analysis::PeakSite& t : sites) {
    w.BeginObject();
    w.Field("site_id", t.site_id);
    w.Field("stack_id", t.stack_id);
    w.Field("live_bytes", t.live_bytes);
    w.Field("live_count", t.live_count);
    WriteCi(w, "live_bytes_ci", t.live_bytes, t.live_bytes_low, t.live_bytes_high);
    w.EndObject();
  }
  w.EndArray();
}

void WriteMemorySnapshot(JsonWriter& w, const analysis::MemorySnapshot& m) {
  w.BeginObject();
  w.Field("pid", m.pid);
  w.Field("time_s", m.time_s);
  w.Field("step", m.step);
  w.Field("stage", m.stage);
  w.Field("cause", m.cause);
  w.Field("out_of_memory", m.out_of_memory);
  OptionalInt(w, "device", m.device);
  w.Field("requested_bytes", m.requested);
  w.Field("api", m.api);
  w.Field("free_bytes", m.free_bytes);
  w.Field("total_bytes", m.total_bytes);
  w.Field("free_source", m.free_source);
  w.Field("device_resident_bytes", m.device_resident_bytes);
  w.Field("host_live_bytes", m.host_live_bytes);
  w.Field("summary", report::internal::SnapshotHeadline(m));
  w.Key("device_sites");
  WritePeakSites(w, m.device_sites);
  w.Key("host_sites");
  WritePeakSites(w, m.host_sites);
  w.EndObject();
}

void WriteEpoch(JsonWriter& w, const analysis::EpochRow& e) {
  w.BeginObject();
  w.Field("pid", e.pid);
  w.Field("epoch", e.epoch);
  w.Field("first_step", e.first_step);
  w.Field("last_step", e.last_step);
  w.Field("steps", e.steps);
  w.Field("live_bytes_end", e.live_bytes_end);
  w.Field("growth_bytes", static_cast<double>(e.growth_bytes));
  w.Field("growth_bytes_per_step", e.growth_bytes_per_step);
  w.Field("peak_bytes", e.peak_bytes);
  w.Field("rss_bytes_end", e.rss_bytes_end);
  w.Field("duration_s", e.duration_s);
  w.Key("stage_peaks");
  w.BeginObject();
  for (const auto& [name, peak] : e.stage_peaks) w.Field(name, peak);
  w.EndObject();
  w.EndObject();
}

void WriteStagePeak(JsonWriter& w, const analysis::StagePeak& sp) {
  w.BeginObject();
  w.Field("pid", sp.pid);
  w.Field("stage", sp.stage);
  w.Field("kind", analysis::SiteKindName(sp.kind));
  w.Field("peak_bytes_max", sp.peak_bytes_max);
  w.Field("step_of_max", sp.step_of_max);
  w.Field("peak_bytes_median", sp.peak_bytes_median);
  w.Field("steps", sp.steps);
  w.Field("top_source", sp.top_source);
  OptionalInt(w, "device", sp.kind == analysis::SiteKind::kDevice ? sp.device : -1);
  w.Key("top_sites");
  WritePeakSites(w, sp.top_sites);
  w.EndObject();
}

void WriteAlert(JsonWriter& w, const analysis::AlertRow& a) {
  w.BeginObject();
  w.Field("pid", a.pid);
  w.Field("step", a.step);
  w.Field("time_s", a.time_s);
  w.Field("rule", a.rule);
  w.Field("value", a.value);
  w.Field("threshold", a.threshold);
  w.Field("stage", a.stage);
  w.Field("site_id", a.site_id);
  w.EndObject();
}

// Length of the valid UTF-8 sequence at s[i], or 0 if it is not valid.
// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629, table 3-7
// of the Unicode standard: no overlong forms, no surrogates, nothing above
// U+10FFFF), or 0.
size_t Utf8Length(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  }
  if (n == 0 || i + n > s.size()) return 0;
  const unsigned char second = static_cast<unsigned char>(s[i + 1]);
  if (second < lo || second > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

}  // namespace

std::string JsonEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {  // keep valid UTF-8, replace anything else with U+FFFD
      const size_t n = Utf8Length(s, i);
      if (n == 0) {
        out += "\\ufffd";
      } else {
        out.append(s, i, n);
        i += n - 1;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

namespace {

// The report document, then its newline.
void WriteReport(JsonWriter& w, const Report& report, const ReportOptions& options) {
  w.BeginObject();
  w.Field("schema", kJsonSchema);
  w.Field("path", report.path);
  w.Field("selection", report.selection);
  w.Key("processes");
  w.BeginArray();
  for (const ProcessSummary& p : report.processes) WriteProcess(w, p);
  w.EndArray();
  w.Field("memory_limit_bytes", report.memory_limit_bytes);
  w.Field("memory_limit_source", report.memory_limit_source);
  w.Key("epochs");
  w.BeginArray();
  for (const analysis::EpochRow& e : report.epochs) WriteEpoch(w, e);
  w.EndArray();
  w.Key("steps");
  w.BeginArray();
  for (const StepRow& s : report.steps) WriteStep(w, s);
  w.EndArray();
  w.Key("stage_peaks");
  w.BeginArray();
  for (const analysis::StagePeak& sp : report.stage_peaks) WriteStagePeak(w, sp);
  w.EndArray();
  w.Key("alerts");
  w.BeginArray();
  for (const analysis::AlertRow& a : report.alerts) WriteAlert(w, a);
  w.EndArray();
  w.Key("gates");
  w.BeginArray();
  for (const analysis::GateResult& g : report.gates) WriteGate(w, g);
  w.EndArray();
  w.Key("device_failures");
  w.BeginArray();
  for (const analysis::DeviceFailure& f : report.device_failures) {
    WriteDeviceFailure(w, f, options.frames);
  }
  w.EndArray();
  w.Key("memory_snapshots");
  w.BeginArray();
  for (const analysis::MemorySnapshot& m : report.memory_snapshots) WriteMemorySnapshot(w, m);
  w.EndArray();
  w.Key("sites");
  w.BeginArray();
  for (size_t i = 0; i < report.sites.size(); ++i) {
    if (options.top > 0 && i >= static_cast<size_t>(options.top)) break;
    WriteSite(w, report.sites[i], options.frames);
  }
  w.EndArray();
  w.Field("warnings", report.warnings);
  w.EndObject();
  w.EndLine();
}

}  // namespace

std::string FormatJson(const Report& report, const ReportOptions& options) {
  JsonWriter w;
  WriteReport(w, report, options);
  return w.Take();
}

bool WriteJson(const Report& report, const ReportOptions& options, const TextSink& sink) {
  JsonWriter w(sink);
  WriteReport(w, report, options);
  return w.Finish();
}

}  // namespace memstep::report

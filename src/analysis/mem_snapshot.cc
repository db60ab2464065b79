#include "src/analysis/mem_snapshot.h"

#include <algorithm>

#include "src/analysis/device_replay.h"
#include "src/analysis/growth.h"
#include "src/analysis/replay.h"
#include "src/format/format.h"

namespace memstep::analysis {
namespace {

void TopSites(std::vector<PeakSite>& v, size_t n) {
  std::stable_sort(v.begin(), v.end(), [](const PeakSite& a, const PeakSite& b) {
    return a.live_bytes > b.live_bytes;
  });
  if (v.size() > n) v.resize(n);
}

// The last DEV_INFO before `seq` of `device` (any device when -1).
const reader::DeviceInfo* LastInfo(const reader::Trace& t, uint64_t seq, int32_t device) {
  const reader::DeviceInfo* found = nullptr;
  for (const reader::DeviceInfo& i : t.device_info) {
    if (i.seq > seq) break;  // sorted by seq
    if (device < 0 || i.device == device) found = &i;
  }
  return found;
}

}  // namespace

void AnalyzeMemSnapshots(const reader::Trace& t, const TraceEvents& events, size_t device_base,
                         double interval_max, const Options& options,
                         std::vector<MemorySnapshot>& out) {
  size_t left = 0;  // MEM_SNAPSHOT records (control events) still to come
  for (const reader::Event& e : t.events) left += e.tag == format::kTagMemSnapshot;
  if (left == 0) return;
  HeapReplay host;
  host.set_rounding(HostRoundingOf(t));
  DeviceReplay dev;
  const double dev_interval = static_cast<double>(t.max_dev_interval);
  events.ForEachUntil([&](size_t, const reader::Event& e) {
    if (e.tag != format::kTagMemSnapshot) {
      if (!dev.Apply(e)) host.Apply(e);
      return true;
    }
    MemorySnapshot s;
    s.pid = t.header.pid;
    s.time_s = static_cast<double>(e.ts) / 1e9;
    s.step = e.step;
    s.stage = t.String(e.str);
    s.cause = format::MemSnapshotCauseName(e.kind);
    s.out_of_memory = e.kind == format::kMemSnapDeviceOom || e.kind == format::kMemSnapTorchOom;
    s.device = e.device;
    s.requested = e.size;
    if (e.kind == format::kMemSnapDeviceOom) s.api = format::DeviceApiName(e.api);
    if (e.new_addr > 0 || e.new_len > 0) {  // free and/or total from the moment itself
      s.free_bytes = e.new_addr;
      s.total_bytes = e.new_len;
      s.free_source = "moment";
    } else if (const reader::DeviceInfo* i = LastInfo(t, e.seq, e.device)) {
      s.free_bytes = i->free_bytes;
      s.total_bytes = i->total_bytes;
      s.free_source = "step_end";
      if (s.device < 0) s.device = i->device;
    }
    s.device_resident_bytes = s.device >= 0 ? dev.resident(s.device) : dev.resident_total();
    s.host_live_bytes = host.host_live_bytes();
    const auto& hs = host.sites();
    for (size_t i = 0; i < hs.size() && i < device_base; ++i) {
      if (hs[i].live_bytes <= 0) continue;
      PeakSite p{i + 1, hs[i].key.stack, hs[i].live_bytes, hs[i].live_count};
      if (hs[i].key.kind == HeapReplay::Kind::kHost) {
        const HtInterval ci = HtSumInterval(hs[i].live_bytes, hs[i].live_var, interval_max);
        p.live_bytes_low = ci.low;
        p.live_bytes_high = ci.high;
      }
      s.host_sites.push_back(p);
    }
    const auto& ds = dev.sites();
    for (size_t j = 0; j < ds.size(); ++j) {
      const DeviceReplay::SiteAcc& a = ds[j];
      if (a.live_bytes <= 0 || !IsResidentKind(a.key.kind)) continue;
      if (s.device >= 0 && a.key.device != s.device) continue;
      PeakSite p{device_base + j + 1, a.key.stack, a.live_bytes, a.live_count};
      if (dev_interval > 0) {
        const HtInterval ci = HtSumInterval(a.live_bytes, a.live_var, dev_interval);
        p.live_bytes_low = ci.low;
        p.live_bytes_high = ci.high;
      }
      s.device_sites.push_back(p);
    }
    TopSites(s.host_sites, options.top_peak_sites);
    TopSites(s.device_sites, options.top_peak_sites);
    out.push_back(std::move(s));
    return --left > 0;  // the replay after the last one is not needed
  });
}

}  // namespace memstep::analysis

#include "src/analysis/device_replay.h"

#include <algorithm>

#include "src/analysis/replay.h"
#include "src/format/format.h"

namespace memstep::analysis {

bool IsResidentKind(uint8_t kind) {
  return kind == format::kDevDevice || kind == format::kDevVmm || kind == format::kDevPool ||
         kind == format::kDevManaged;
}

uint64_t DeviceReplay::live(uint8_t kind, int32_t device) const {
  auto it = live_.find({kind, device});
  return it == live_.end() ? 0 : it->second;
}

uint64_t DeviceReplay::resident(int32_t device) const {
  auto it = resident_.find(device);
  return it == resident_.end() ? 0 : it->second;
}

uint32_t DeviceReplay::SiteIndex(const reader::Event& e) {
  const SiteKey key{e.kind, e.device, e.stack};
  auto [it, inserted] = site_index_.try_emplace(key, static_cast<uint32_t>(sites_.size()));
  if (inserted) {
    SiteAcc a;
    a.key = key;
    a.api = e.api;
    a.first_ts = e.ts;
    sites_.push_back(a);
  }
  return it->second;
}

void DeviceReplay::Remove(uint8_t kind, int32_t device, uint64_t size) {
  uint64_t& live = live_[{kind, device}];
  const uint64_t cut = std::min(live, size);
  live -= cut;
  if (IsResidentKind(kind)) {
    resident_[device] -= cut;
    resident_total_ -= cut;
    Traffic& t = traffic_[device];
    t.free_bytes += cut;
    ++t.free_count;
  } else if (kind == format::kDevPinnedHost) {
    pinned_ -= std::min(pinned_, cut);
  }
}

void DeviceReplay::Drop(const Live& l) {
  if (l.site != kNoSite) {
    Touch(l.site);
    SiteAcc& s = sites_[l.site];
    const double bytes = static_cast<double>(l.size) * l.weight;
    s.live_bytes -= bytes;
    s.live_count -= l.weight;
    s.live_held -= static_cast<double>(l.size);
    s.live_var -= bytes * bytes * (1 - 1 / l.weight);
    if (s.live_count < 0.5) s.live_bytes = s.live_count = s.live_held = s.live_var = 0;  // rounding
  }
  Remove(l.kind, l.device, l.size);
}

bool DeviceReplay::Apply(const reader::Event& e) {
  if (e.tag == format::kTagDevAlloc) {
    auto old = allocations_.find({e.kind, e.addr});
    if (old != allocations_.end()) {  // its FREE was not recorded
      Drop(old->second);
      allocations_.erase(old);
    }
    Live l{kNoSite, e.size, 1.0, e.kind, e.device, cohort_};
    if (e.sampled) {
      l.site = SiteIndex(e);
      const double p = SampleProbability(e.size, e.interval);
      l.weight = 1 / p;
      max_interval_ = std::max(max_interval_, e.interval);
      Touch(l.site);
      SiteAcc& s = sites_[l.site];
      const double bytes = static_cast<double>(e.size) * l.weight;
      ++s.samples;
      s.alloc_count += l.weight;
      s.alloc_bytes += bytes;
      s.live_count += l.weight;
      s.live_bytes += bytes;
      s.live_held += static_cast<double>(e.size);
      s.live_var += bytes * bytes * (1 - p);
      if (in_step_) {
        s.step_alloc_bytes += bytes;
        s.step_alloc_count += l.weight;
        s.step_alloc_bytes_var += bytes * bytes * (1 - p);
        s.step_alloc_count_var += l.weight * l.weight * (1 - p);
      }
    }
    allocations_[{e.kind, e.addr}] = l;
    live_[{e.kind, e.device}] += e.size;
    if (IsResidentKind(e.kind)) {
      resident_[e.device] += e.size;
      resident_total_ += e.size;
      Traffic& t = traffic_[e.device];
      t.alloc_bytes += e.size;
      ++t.alloc_count;
    } else if (e.kind == format::kDevPinnedHost) {
      pinned_ += e.size;
    }
    return true;
  }
  if (e.tag != format::kTagDevFree) return false;
  auto it = allocations_.find({e.kind, e.addr});
  if (it == allocations_.end()) {
    // Allocated before memstep saw it, or its DEV_ALLOC was lost.
    if (e.size == 0) {
      ++ignored_frees_;
      return true;
    }
    ++unmatched_frees_;
    Remove(e.kind, e.device, e.size);
    return true;
  }
  // The allocation's own device and size: DEV_FREE may not know the device.
  Drop(it->second);
  allocations_.erase(it);
  return true;
}

}  // namespace memstep::analysis

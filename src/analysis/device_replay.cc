#include "src/analysis/device_replay.h"

#include <algorithm>

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

bool DeviceReplay::Apply(const reader::Event& e) {
  if (e.tag == format::kTagDevAlloc) {
    auto old = allocations_.find({e.kind, e.addr});
    if (old != allocations_.end()) {  // its FREE was not recorded
      SiteAcc& s = sites_[old->second.site];
      s.live_bytes -= old->second.size;
      --s.live_count;
      Remove(s.key.kind, s.key.device, old->second.size);
      allocations_.erase(old);
    }
    const uint32_t site = SiteIndex(e);
    SiteAcc& s = sites_[site];
    ++s.alloc_count;
    s.alloc_bytes += e.size;
    ++s.live_count;
    s.live_bytes += e.size;
    allocations_[{e.kind, e.addr}] = Live{site, e.size};
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
  SiteAcc& s = sites_[it->second.site];
  s.live_bytes -= it->second.size;
  --s.live_count;
  // The allocation's own device and size: DEV_FREE may not know the device.
  Remove(s.key.kind, s.key.device, it->second.size);
  allocations_.erase(it);
  return true;
}

}  // namespace memstep::analysis

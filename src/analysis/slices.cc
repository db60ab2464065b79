#include "src/analysis/slices.h"

#include <algorithm>

#include "src/analysis/replay.h"
#include "src/format/format.h"

namespace memstep::analysis {

void SliceTracker::Remove(uint64_t addr) {
  auto it = live_.find(addr);
  if (it == live_.end()) return;
  SiteSlice& s = slices_[it->second.slice];
  s.live_bytes_end -= it->second.bytes;
  s.live_count_end -= it->second.count;
  live_.erase(it);
}

void SliceTracker::Apply(const reader::Event& e, const reader::Trace& t) {
  switch (e.tag) {
    case format::kTagStep:
      open_step_ = e.phase == 0 ? static_cast<int64_t>(e.step) : -1;
      break;
    case format::kTagAlloc: {
      Remove(e.addr);
      const Key key(e.stack, BucketOf(open_step_), e.str);
      auto [it, inserted] = index_.try_emplace(key, static_cast<uint32_t>(slices_.size()));
      if (inserted) {
        SiteSlice s;
        s.step = std::get<1>(key);
        s.step_last = s.step < 0 ? -1 : s.step + bucket_ - 1;
        s.stage = t.String(e.str);
        slices_.push_back(std::move(s));
        keys_.push_back(key);
        by_stack_[e.stack].push_back(it->second);
      }
      const double p = SampleProbability(e.size, e.interval);
      const double bytes = static_cast<double>(UsableBytes(rounding_, e.kind, e.size)) / p;
      SiteSlice& s = slices_[it->second];
      s.alloc_bytes += bytes;
      s.alloc_count += 1 / p;
      s.live_bytes_end += bytes;
      s.live_count_end += 1 / p;
      live_[e.addr] = Live{it->second, bytes, 1 / p};
      if (slices_.size() > max_slices_) Coarsen();
      break;
    }
    case format::kTagFree:
      Remove(e.addr);
      break;
    default:
      break;
  }
}

void SliceTracker::Coarsen() {
  while (slices_.size() > max_slices_ && bucket_ < (int64_t{1} << 40)) {
    bucket_ *= 2;
    absl::flat_hash_map<Key, uint32_t> index;
    std::vector<SiteSlice> merged;
    std::vector<Key> keys;
    std::vector<uint32_t> to(slices_.size());
    for (size_t i = 0; i < slices_.size(); ++i) {
      Key k = keys_[i];
      std::get<1>(k) = BucketOf(std::get<1>(k));
      auto [it, inserted] = index.try_emplace(k, static_cast<uint32_t>(merged.size()));
      if (inserted) {
        SiteSlice m;
        m.step = std::get<1>(k);
        m.step_last = m.step < 0 ? -1 : m.step + bucket_ - 1;
        m.stage = std::move(slices_[i].stage);
        merged.push_back(std::move(m));
        keys.push_back(k);
      }
      SiteSlice& m = merged[it->second];
      m.alloc_bytes += slices_[i].alloc_bytes;
      m.alloc_count += slices_[i].alloc_count;
      m.live_bytes_end += slices_[i].live_bytes_end;
      m.live_count_end += slices_[i].live_count_end;
      to[i] = it->second;
    }
    for (auto& [addr, live] : live_) live.slice = to[live.slice];
    by_stack_.clear();
    for (size_t i = 0; i < keys.size(); ++i)
      by_stack_[std::get<0>(keys[i])].push_back(static_cast<uint32_t>(i));
    index_ = std::move(index);
    slices_ = std::move(merged);
    keys_ = std::move(keys);
  }
}

std::vector<SiteSlice> SliceTracker::SlicesOf(uint64_t stack) const {
  std::vector<SiteSlice> out;
  auto it = by_stack_.find(stack);
  if (it == by_stack_.end()) return out;
  for (uint32_t i : it->second) {
    SiteSlice s = slices_[i];
    s.live_bytes_end = std::max(s.live_bytes_end, 0.0);
    s.live_count_end = std::max(s.live_count_end, 0.0);
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const SiteSlice& a, const SiteSlice& b) {
    return std::tie(a.step, a.stage) < std::tie(b.step, b.stage);
  });
  return out;
}

}  // namespace memstep::analysis

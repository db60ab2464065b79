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
      const Key key(e.stack, open_step_, e.str);
      auto [it, inserted] = index_.try_emplace(key, static_cast<uint32_t>(slices_.size()));
      if (inserted) {
        SiteSlice s;
        s.step = open_step_;
        s.stage = t.String(e.str);
        slices_.push_back(std::move(s));
        by_stack_[e.stack].push_back(it->second);
      }
      const double p = SampleProbability(e.size, e.interval);
      const double bytes = static_cast<double>(e.size) / p;
      SiteSlice& s = slices_[it->second];
      s.alloc_bytes += bytes;
      s.alloc_count += 1 / p;
      s.live_bytes_end += bytes;
      s.live_count_end += 1 / p;
      live_[e.addr] = Live{it->second, bytes, 1 / p};
      break;
    }
    case format::kTagFree:
      Remove(e.addr);
      break;
    default:
      break;
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

#include "src/analysis/replay.h"

#include <algorithm>
#include <cmath>

#include "src/format/format.h"

namespace memstep::analysis {
namespace {
// Var of one sample's estimate s/p: (s/p)^2 (1 - p), with p = 1/count.
double ObjectVar(double bytes, double count) {
  return count > 1 ? bytes * bytes * (1 - 1 / count) : 0.0;
}

uint64_t End(uint64_t addr, uint64_t len) {
  return len > UINT64_MAX - addr ? UINT64_MAX : addr + len;
}
}  // namespace

double SampleProbability(uint64_t size, uint64_t interval) {
  if (interval == 0) return 1.0;
  double p = -std::expm1(-(static_cast<double>(size) + 1.0) / static_cast<double>(interval));
  return p > 0 ? p : 1e-300;
}

HostRounding HostRoundingOf(const reader::Trace& t) {
  if (t.allocator == "glibc") return HostRounding::kGlibc;
  if (t.allocator == "jemalloc") return HostRounding::kJemalloc;
  return HostRounding::kRequest;
}

uint64_t UsableBytes(HostRounding r, uint8_t kind, uint64_t size) {
  if (kind == format::kKindPymalloc) return format::PymallocUsable(size);
  switch (r) {
    case HostRounding::kGlibc:
      return size >= format::kGlibcMmapFloor ? size : format::GlibcUsable(size);
    case HostRounding::kJemalloc:
      return format::JemallocUsable(size);
    case HostRounding::kRequest:
      break;
  }
  return size;
}

void HeapReplay::set_cohort(uint32_t c) {
  if (c == cohort_) return;
  cohort_ = c;
  // The sites not listed in young_ hold young_bytes +0.0 already.
  for (uint32_t i : young_.list()) {
    Touch(i);
    sites_[i].young_bytes = 0;
  }
  young_.Clear();
}

uint32_t HeapReplay::SiteIndex(Kind kind, uint64_t stack, uint64_t ts) {
  SiteKey key{kind, stack};
  auto [it, inserted] = site_index_.try_emplace(key, static_cast<uint32_t>(sites_.size()));
  if (inserted) {
    Accumulator a;
    a.key = key;
    a.first_ts = ts;
    sites_.push_back(a);
  }
  return it->second;
}

void HeapReplay::RemoveLive(uint64_t addr) {
  auto it = live_.find(addr);
  if (it == live_.end()) return;
  Touch(it->second.site);
  Accumulator& s = sites_[it->second.site];
  s.live_bytes -= it->second.bytes;
  s.live_count -= it->second.count;
  s.live_held -= it->second.bytes / it->second.count;
  if (s.live_held < 0.5) s.live_held = 0;  // rounding
  s.live_var -= ObjectVar(it->second.bytes, it->second.count);
  if (s.live_var < 0) s.live_var = 0;
  if (it->second.cohort == cohort_) {
    s.young_bytes -= it->second.bytes;
    young_.Add(it->second.site);
  }
  host_live_ -= it->second.bytes;
  live_.erase(it);
}

void HeapReplay::AddRange(uint64_t start, uint64_t end, uint32_t site) {
  if (end <= start) return;
  const uint64_t object = next_object_++;
  ranges_[start] = Range{end, site, object, cohort_};
  object_pieces_[object] = 1;
  double len = static_cast<double>(end - start);
  Touch(site);
  sites_[site].live_bytes += len;
  sites_[site].live_count += 1;
  sites_[site].live_held += len;
  sites_[site].young_bytes += len;
  young_.Add(site);
  mmap_live_ += len;
}

int64_t HeapReplay::RemoveRange(uint64_t start, uint64_t end) {
  int64_t first_site = -1;
  if (end <= start) return first_site;
  auto it = ranges_.upper_bound(start);
  if (it != ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.end > start) it = prev;
  }
  while (it != ranges_.end() && it->first < end) {
    const uint64_t r_start = it->first;
    const Range r = it->second;
    if (first_site < 0) first_site = r.site;
    it = ranges_.erase(it);
    const uint64_t cut_start = std::max(r_start, start);
    const uint64_t cut_end = std::min(r.end, end);
    double cut = static_cast<double>(cut_end - cut_start);
    Touch(r.site);
    sites_[r.site].live_bytes -= cut;
    sites_[r.site].live_held -= cut;
    if (r.cohort == cohort_) {
      sites_[r.site].young_bytes -= cut;
      young_.Add(r.site);
    }
    mmap_live_ -= cut;
    uint32_t& pieces = object_pieces_[r.object];
    --pieces;
    if (r_start < start) {
      ranges_[r_start] = Range{start, r.site, r.object, r.cohort};
      ++pieces;
    }
    const bool last = r.end > end;
    if (last) {
      ranges_.emplace(end, Range{r.end, r.site, r.object, r.cohort});
      ++pieces;
    }
    if (pieces == 0) {
      sites_[r.site].live_count -= 1;
      object_pieces_.erase(r.object);
    }
    if (last) break;  // ranges are disjoint: nothing further overlaps
  }
  return first_site;
}

void HeapReplay::Apply(const reader::Event& e) {
  switch (e.tag) {
    case format::kTagAlloc: {
      RemoveLive(e.addr);
      const double p = SampleProbability(e.size, e.interval);
      const double bytes = static_cast<double>(UsableBytes(rounding_, e.kind, e.size)) / p;
      const double count = 1.0 / p;
      const uint32_t site = SiteIndex(Kind::kHost, e.stack, e.ts);
      Touch(site);
      Accumulator& s = sites_[site];
      ++s.samples;
      if (e.kind == format::kKindPymalloc) ++s.pymalloc_samples;
      s.alloc_bytes += bytes;
      s.alloc_count += count;
      s.live_bytes += bytes;
      s.live_count += count;
      s.live_held += bytes / count;
      s.live_var += ObjectVar(bytes, count);
      s.young_bytes += bytes;
      young_.Add(site);
      if (in_step_) {
        s.step_alloc_bytes += bytes;
        s.step_alloc_count += count;
        s.step_alloc_bytes_var += bytes * bytes * (1 - p);
        s.step_alloc_count_var += count * count * (1 - p);
      }
      host_live_ += bytes;
      live_[e.addr] = Live{site, cohort_, bytes, count, e.size};
      break;
    }
    case format::kTagFree:
      RemoveLive(e.addr);
      break;
    case format::kTagMmap: {
      if (e.size == 0) break;
      const uint64_t end = End(e.addr, e.size);
      RemoveRange(e.addr, end);  // MAP_FIXED over an existing mapping
      // PROT_NONE (the event's new_addr: the record's prot) reserves address
      // space: no memory until access is given (a later MMAP record of the
      // committed part), and over memory it decommits it.
      if (e.new_addr == 0) break;
      const uint32_t site = SiteIndex(Kind::kMmap, e.stack, e.ts);
      Touch(site);
      Accumulator& s = sites_[site];
      ++s.samples;
      s.alloc_bytes += static_cast<double>(e.size);
      s.alloc_count += 1;
      if (in_step_) {
        s.step_alloc_bytes += static_cast<double>(e.size);
        s.step_alloc_count += 1;
      }
      AddRange(e.addr, end, site);
      break;
    }
    case format::kTagMunmap:
      RemoveRange(e.addr, End(e.addr, e.size));
      break;
    case format::kTagMremap: {
      const int64_t site = RemoveRange(e.addr, End(e.addr, e.size));
      if (site < 0) break;  // not an anonymous mapping we track
      Touch(static_cast<uint32_t>(site));
      Accumulator& s = sites_[site];
      if (e.new_len > e.size) s.alloc_bytes += static_cast<double>(e.new_len - e.size);
      RemoveRange(e.new_addr, End(e.new_addr, e.new_len));
      AddRange(e.new_addr, End(e.new_addr, e.new_len), static_cast<uint32_t>(site));
      break;
    }
    default:
      break;
  }
}

}  // namespace memstep::analysis

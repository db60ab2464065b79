// SiteMarks: keeps a replay's per-site accumulators as they were at chosen
// moments ("marks"), so one pass can keep the sites at a moment it learns
// only later was the one it wanted (a peak), instead of replaying again up
// to it (docs/architecture.md "Streaming reports").
//
// The replay calls Touch(site) before it changes a site; a mark journals the
// site's value the first time it changes after the mark. SitesAt(m) is the
// current sites with the journaled values put back, truncated to the sites
// that existed at the mark: exactly the sites at the last Mark(m). Memory: at
// most one saved accumulator per site per mark; a mark costs nothing until a
// site changes. Thread-compatible.

#ifndef MEMSTEP_SRC_ANALYSIS_SITE_MARKS_H_
#define MEMSTEP_SRC_ANALYSIS_SITE_MARKS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace memstep::analysis {

template <typename Acc>
class SiteMarks {
 public:
  // A new mark, not yet marked (the id of a dropped one may come back).
  size_t New() {
    if (!free_.empty()) {
      const size_t m = free_.back();
      free_.pop_back();
      return m;
    }
    journals_.emplace_back();
    return journals_.size() - 1;
  }
  // Mark m now holds `sites` as they are.
  void Mark(size_t m, const std::vector<Acc>& sites) {
    Journal& j = journals_[m];
    if (++j.epoch == 0) {  // wrapped: stamps of 2^32 marks ago would match
      std::fill(j.stamp.begin(), j.stamp.end(), 0);
      j.epoch = 1;
    }
    j.sites_at_mark = sites.size();
    if (j.stamp.size() < sites.size()) j.stamp.resize(sites.size(), 0);
    j.saved.clear();
    if (!j.marked) active_.push_back(m);
    j.marked = true;
  }
  bool marked(size_t m) const { return m < journals_.size() && journals_[m].marked; }
  // The sites at the last Mark(m), from the current `sites`.
  std::vector<Acc> SitesAt(size_t m, const std::vector<Acc>& sites) const {
    const Journal& j = journals_[m];
    std::vector<Acc> out(sites.begin(), sites.begin() + static_cast<ptrdiff_t>(j.sites_at_mark));
    for (const auto& [site, value] : j.saved) out[site] = value;
    return out;
  }
  // Frees mark m: its id may be returned by New again.
  void Drop(size_t m) {
    Journal& j = journals_[m];
    if (j.marked) active_.erase(std::find(active_.begin(), active_.end(), m));
    j = Journal{};
    free_.push_back(m);
  }
  // Before sites[site] changes.
  void Touch(uint32_t site, const std::vector<Acc>& sites) {
    for (size_t m : active_) {
      Journal& j = journals_[m];
      if (site >= j.sites_at_mark || j.stamp[site] == j.epoch) continue;
      j.stamp[site] = j.epoch;
      j.saved.emplace_back(site, sites[site]);
    }
  }

 private:
  struct Journal {
    bool marked = false;
    uint32_t epoch = 0;
    size_t sites_at_mark = 0;
    std::vector<uint32_t> stamp;  // == epoch: saved since the mark
    std::vector<std::pair<uint32_t, Acc>> saved;
  };
  std::vector<Journal> journals_;
  std::vector<size_t> active_;  // the marked ones
  std::vector<size_t> free_;    // dropped ids
};

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_SITE_MARKS_H_

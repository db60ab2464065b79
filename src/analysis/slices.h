// SliceTracker: a host call site's sampled allocations split by the step and
// the stage they were made in (analysis::SiteSlice), for exports that label
// samples with them (pprof). Filled only with Options::site_slices.
//
// Worked example (T = 0: every allocation recorded, weights 1):
//   STEP 4 begin
//   ALLOC stack 7 addr A size 100 stage "forward"   slice (7, 4, forward): alloc 100, live 100
//   ALLOC stack 7 addr B size 50  stage ""          slice (7, 4, ""):      alloc 50,  live 50
//   STEP 4 end
//   ALLOC stack 7 addr C size 10                    slice (7, -1, ""):     alloc 10,  live 10
//   FREE A                                          slice (7, 4, forward): live 0
// The weights are the replay's (HeapReplay: size/p bytes, 1/p allocations),
// and an ALLOC over a live address or a FREE removes what was live there, as
// the replay does, so a site's slices sum to its Site totals.
//
// Bounded: at most max_slices slices (default kDefaultMaxSlices). When a new
// slice would pass it, the steps are grouped in buckets twice as wide
// (1, 2, 4, ... steps: a slice then covers steps [step, step_last]) and the
// slices of one bucket merged, sums unchanged; so memory follows the sites
// and stages, not the run's length (an hour-long run has 10^5 steps).
//
// Thread-compatible. Memory: one entry per live sampled allocation and one
// per (stack, step bucket, stage) with a sample.

#ifndef MEMSTEP_SRC_ANALYSIS_SLICES_H_
#define MEMSTEP_SRC_ANALYSIS_SLICES_H_

#include <cstdint>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "src/analysis/analysis.h"
#include "src/analysis/replay.h"
#include "src/reader/reader.h"

namespace memstep::analysis {

class SliceTracker {
 public:
  static constexpr size_t kDefaultMaxSlices = size_t{1} << 20;
  explicit SliceTracker(size_t max_slices = kDefaultMaxSlices)
      : max_slices_(max_slices < 1 ? 1 : max_slices) {}

  // The rounding of the trace's allocator (replay.h UsableBytes); kRequest until set.
  void set_rounding(HostRounding r) { rounding_ = r; }

  // Applies one event of `t` in seq order: STEP records open and close
  // steps, ALLOC and FREE records change the slices; others are ignored.
  void Apply(const reader::Event& e, const reader::Trace& t);

  // The slices of host stack `stack`, ordered by (step, stage).
  std::vector<SiteSlice> SlicesOf(uint64_t stack) const;

  // Steps per slice (a power of two; 1 until the bound was reached).
  int64_t step_bucket() const { return bucket_; }

 private:
  struct Live {
    uint32_t slice;
    double bytes;
    double count;
  };
  using Key = std::tuple<uint64_t, int64_t, uint64_t>;  // stack, step, stage string id

  void Remove(uint64_t addr);
  int64_t BucketOf(int64_t step) const { return step < 0 ? -1 : step / bucket_ * bucket_; }
  // Doubles the bucket until the slices fit max_slices_ (or a bucket spans
  // 2^40 steps: what is left is one slice per stack and stage).
  void Coarsen();

  size_t max_slices_;
  int64_t bucket_ = 1;
  int64_t open_step_ = -1;
  HostRounding rounding_ = HostRounding::kRequest;
  absl::flat_hash_map<Key, uint32_t> index_;
  std::vector<SiteSlice> slices_;
  std::vector<Key> keys_;  // slices_[i]'s key
  absl::flat_hash_map<uint64_t, std::vector<uint32_t>> by_stack_;
  absl::flat_hash_map<uint64_t, Live> live_;
};

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_SLICES_H_

// DeviceReplay: replay of one process's device allocation records
// (DEV_ALLOC, DEV_FREE, in seq order) into live bytes per (kind, device), per
// device ("resident" bytes) and per call site.
//
// Every device allocation is recorded with its size, so the totals per kind,
// device and step are exact. Only sampled ones carry a stack (DEV_ALLOC
// `sampled`, docs/gpu.md "Sampling"): the sites are Horvitz-Thompson
// estimates, each sample standing for size / p bytes and 1 / p allocations,
// p = 1 - exp(-(size+1)/T) (T = its `interval`; 0: p = 1, exact), with the
// sampling variance (size/p)^2 (1 - p) kept for intervals. Unsampled
// allocations count in the totals and in no site. An allocation is identified by (kind, addr):
// a cudaMalloc pointer, a pinned host pointer and a VMM handle may share a
// numeric value. Resident bytes of a device are its device + device_vmm +
// device_pool + device_managed bytes; pinned host memory lives in host RAM
// and is counted on its own (pinned()).
//
// Worked example (MiB; every allocation here sampled with T = 0, p = 1):
//   DEV_ALLOC device      dev 0 addr A  8 stack 5   live(device,0) = 8, resident(0) = 8
//   DEV_ALLOC pinned_host dev -1 addr H  2 stack 6  pinned = 2 (not resident)
//   DEV_ALLOC device_vmm  dev 0 addr 1 20 stack 7   (addr = the cuMemCreate handle)
//                                                   resident(0) = 28
//   DEV_FREE  device      dev 0 addr A  8           resident(0) = 20, site 5 live 0
//   DEV_FREE  device      dev 0 addr B  4           never seen, size recorded: applied to
//                                                   live(device,0) = 0 (floored at 0),
//                                                   resident(0) = 20; unmatched_frees = 1
//   DEV_FREE  device      dev 0 addr C  0           never seen, no size: ignored_frees = 1
//   DEV_ALLOC device      dev 0 addr D  4 ...       and again at D while D is live: the
//                                                   first one is freed (its FREE was lost)
//   DEV_ALLOC device      dev 0 addr E  1 sampled 0 resident(0) = 21, in no site
//   DEV_ALLOC device      dev 0 addr F  1 stack 8,  p = 1 - exp(-(1 MiB + 1) / 8 MiB) = 0.1175:
//                         interval 8 MiB            site 8 live 8.51 MiB (1 / p = 8.51
//                                                   allocations), resident(0) = 22 (exact)
// Kinds other than format::DeviceKind's are kept as sites ("device_unknown")
// but in no total. Cohorts: set_cohort(k) tags what is allocated from then on
// (the analysis passes the step row) and ForEachLive reports each live
// sampled allocation's, as HeapReplay's do for host sites.
//
// Thread-compatible. Memory: one entry per live device allocation, one per
// site (with changed_sites()'s byte and list entry) and one per (kind, device).

#ifndef MEMSTEP_SRC_ANALYSIS_DEVICE_REPLAY_H_
#define MEMSTEP_SRC_ANALYSIS_DEVICE_REPLAY_H_

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "src/analysis/site_marks.h"
#include "src/analysis/step_series.h"
#include "src/reader/reader.h"

namespace memstep::analysis {

// device, device_vmm, device_pool, device_managed: memory on the GPU.
bool IsResidentKind(uint8_t kind);

class DeviceReplay {
 public:
  struct SiteKey {
    uint8_t kind;
    int32_t device;
    uint64_t stack;
    bool operator==(const SiteKey& o) const {
      return kind == o.kind && device == o.device && stack == o.stack;
    }
    template <typename H>
    friend H AbslHashValue(H h, const SiteKey& k) {
      return H::combine(std::move(h), k.kind, k.device, k.stack);
    }
  };
  struct SiteAcc {
    SiteKey key;
    uint8_t api = 0;  // of its first sample
    uint64_t first_ts = 0;
    uint64_t samples = 0;    // sampled allocations
    double alloc_count = 0;  // estimates (exact when every sample has p = 1)
    double alloc_bytes = 0;
    double live_count = 0;
    double live_bytes = 0;
    double live_held = 0;  // the live samples' own bytes (HeapReplay::Accumulator)
    double live_var = 0;   // sampling variance of live_bytes
    // Churn: what was allocated while set_in_step(true) held, with the
    // Horvitz-Thompson variances ((s/p)^2 (1-p), (1/p)^2 (1-p) per sample),
    // as HeapReplay::Accumulator's.
    double step_alloc_bytes = 0;
    double step_alloc_count = 0;
    double step_alloc_bytes_var = 0;
    double step_alloc_count_var = 0;
  };
  // Cumulative traffic of one device's resident kinds.
  struct Traffic {
    uint64_t alloc_bytes = 0;
    uint64_t alloc_count = 0;
    uint64_t free_bytes = 0;
    uint64_t free_count = 0;
  };

  // Applies DEV_ALLOC and DEV_FREE; returns false (and changes nothing) for
  // any other record.
  bool Apply(const reader::Event& e);
  // Allocations from now on are made in a step (churn) or not.
  void set_in_step(bool in_step) { in_step_ = in_step; }
  // Allocations from now on belong to cohort `c` (the analysis passes the
  // step row, as to HeapReplay::set_cohort).
  void set_cohort(uint32_t c) { cohort_ = c; }
  // Calls fn(site index, cohort, estimated bytes, 1 / p) for every live
  // sampled allocation (LiveCohorts, step_series.h).
  template <typename Fn>
  void ForEachLive(Fn fn) const {
    for (const auto& [key, l] : allocations_) {
      if (l.site != kNoSite) {
        fn(l.site, l.cohort, static_cast<double>(l.size) * l.weight, l.weight, l.size);
      }
    }
  }
  size_t live_allocations() const { return allocations_.size(); }

  const std::vector<SiteAcc>& sites() const { return sites_; }
  // The sites whose accumulator may have changed since the last
  // ClearChanged() (each once; HeapReplay::changed_sites).
  const std::vector<uint32_t>& changed_sites() const { return changed_.list(); }
  void ClearChanged() { changed_.Clear(); }
  // Marks (site_marks.h): SitesAt(m) is sites() as it was at the last
  // Mark(m) (the analysis keeps the sites at device peaks with them).
  size_t NewMark() { return marks_.New(); }
  void Mark(size_t m) { marks_.Mark(m, sites_); }
  bool marked(size_t m) const { return marks_.marked(m); }
  std::vector<SiteAcc> SitesAt(size_t m) const { return marks_.SitesAt(m, sites_); }
  void DropMark(size_t m) { marks_.Drop(m); }
  // Live bytes of `kind` on `device` (0 if never seen).
  uint64_t live(uint8_t kind, int32_t device) const;
  // Resident bytes of `device`, and summed over devices.
  uint64_t resident(int32_t device) const;
  uint64_t resident_total() const { return resident_total_; }
  uint64_t pinned() const { return pinned_; }
  // Devices that had a resident allocation or free, ascending, with their
  // traffic.
  const std::map<int32_t, Traffic>& devices() const { return traffic_; }
  // (kind, device) pairs seen, ascending, with their live bytes.
  const std::map<std::pair<uint8_t, int32_t>, uint64_t>& live_by_kind() const { return live_; }
  // The largest sampling interval T of any sample (0: all exact).
  uint64_t max_interval() const { return max_interval_; }
  uint64_t unmatched_frees() const { return unmatched_frees_; }
  uint64_t ignored_frees() const { return ignored_frees_; }

 private:
  static constexpr uint32_t kNoSite = UINT32_MAX;
  struct Live {
    uint32_t site;  // kNoSite: not sampled
    uint64_t size;
    double weight;  // 1 / p
    uint8_t kind;
    int32_t device;
    uint32_t cohort;
  };
  // Takes a live allocation out of its site (if it has one) and the totals.
  void Drop(const Live& l);
  uint32_t SiteIndex(const reader::Event& e);
  // Subtracts `size` from the totals of (kind, device), floored at 0.
  void Remove(uint8_t kind, int32_t device, uint64_t size);
  // Before sites_[site] changes.
  void Touch(uint32_t site) {
    marks_.Touch(site, sites_);
    changed_.Add(site);
  }

  std::vector<SiteAcc> sites_;
  SiteMarks<SiteAcc> marks_;
  ChangedSites changed_;  // since ClearChanged()
  absl::flat_hash_map<SiteKey, uint32_t> site_index_;
  absl::flat_hash_map<std::pair<uint8_t, uint64_t>, Live> allocations_;  // (kind, addr)
  std::map<std::pair<uint8_t, int32_t>, uint64_t> live_;
  std::map<int32_t, uint64_t> resident_;
  std::map<int32_t, Traffic> traffic_;
  uint64_t resident_total_ = 0;
  uint64_t pinned_ = 0;
  uint64_t unmatched_frees_ = 0;
  uint64_t ignored_frees_ = 0;
  uint64_t max_interval_ = 0;
  bool in_step_ = false;
  uint32_t cohort_ = 0;
};

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_DEVICE_REPLAY_H_

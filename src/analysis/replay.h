// HeapReplay: replays one process's sequenced events (reader::Event, in seq
// order) into estimated live bytes per call site.
//
// Worked example (T = 512 KiB, sizes in bytes, glibc: a request of 4096
// bytes is a block of 4104 usable bytes, UsableBytes):
//   ALLOC addr=A size=4096 interval=524288 stack=7
//     p = 1 - exp(-(4096+1)/524288) = 0.00778; weight: 4104/p = 527 238 bytes,
//     1/p = 128.5 allocations. Site (host, 7) live += 527 238.
//   ALLOC addr=B size=2 MiB interval=0 stack=9        (p = 1: always recorded)
//     Site (host, 9) live += 2 097 152.
//   FREE addr=A                                       site 7 live -= 527 238
//   MMAP addr=0x10000 len=0x4000 stack=3              site (mmap, 3) live = 16 KiB
//   MUNMAP addr=0x11000 len=0x1000                    splits the range in two:
//     [0x10000,0x11000) and [0x12000,0x14000); site 3 live = 12 KiB
//   MREMAP 0x12000,0x2000 -> 0x40000,0x8000           moves that part (still
//     site 3) and grows it: site 3 live = 4 KiB + 32 KiB = 36 KiB.
//   MMAP addr=0x40000 len=0x4000 prot=0 stack=5       PROT_NONE: address space, not
//     memory; over site 3's range it decommits it: site 3 live = 20 KiB, no site 5.
//     (The library writes an MMAP record with the new prot, and the caller's
//     stack, for each part of a reservation that mprotect commits.)
// Cohorts: set_cohort(k) tags what is allocated from then on (the analysis
// passes the step row); ForEachLive reports each live object's cohort and its estimated bytes and
// count (1/p), and
// Accumulator::young_bytes is what is live from the current cohort (so
// live_bytes - young_bytes is the part allocated before the step began).
// A FREE of an address that was never sampled is ignored (the common case).
// An ALLOC over an address still live replaces it (its FREE was not seen).
//
// Thread-compatible. Memory: one entry per sampled live allocation and per
// live anonymous mapping range, plus one Accumulator and two ChangedSites entries per site.

#ifndef MEMSTEP_SRC_ANALYSIS_REPLAY_H_
#define MEMSTEP_SRC_ANALYSIS_REPLAY_H_

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "src/analysis/site_marks.h"
#include "src/analysis/step_series.h"
#include "src/reader/reader.h"

namespace memstep::analysis {

// Horvitz-Thompson inclusion probability of an allocation of `size` bytes
// drawn with mean interval `interval` (0: recorded with probability 1).
double SampleProbability(uint64_t size, uint64_t interval);

// How the process's allocator rounds a request up to the block it hands out.
// The exact counters count usable bytes (malloc_usable_size, pymalloc's size
// class), while an ALLOC record carries the request: each sample stands for
// its usable size over p (p from the request, as drawn), so that site
// estimates and the exact heap are in one unit (docs/analysis.md "Bytes:
// usable, not requested"). kRequest: the allocator is not known.
enum class HostRounding : uint8_t { kRequest, kGlibc, kJemalloc };
// From the header's ALLOCATOR TLV (which the library always writes): "glibc"
// or "jemalloc"; kRequest without it (the allocator is not known).
HostRounding HostRoundingOf(const reader::Trace& t);
// The usable bytes of a block of `size` requested bytes of ALLOC kind `kind`
// (format::AllocKind): glibc max(24, round_up(size + 8, 16) - 8) below
// 128 KiB, the request from there (glibc may mmap such a block, rounding it
// to pages, or not, by its sliding threshold: under 3 % either way);
// jemalloc its size class (8, 16..128 by 16, then four classes per
// doubling); pymalloc (kind 4, any allocator) round_up(size, 16). Alignment
// beyond 16 is not modelled.
uint64_t UsableBytes(HostRounding r, uint8_t kind, uint64_t size);

// HtSumInterval (growth.h): the 95 % interval of a sum of sampled weights.

class HeapReplay {
 public:
  enum class Kind : uint8_t { kHost = 0, kMmap = 1 };
  struct SiteKey {
    Kind kind;
    uint64_t stack;
    bool operator==(const SiteKey& o) const { return kind == o.kind && stack == o.stack; }
    template <typename H>
    friend H AbslHashValue(H h, const SiteKey& k) {
      return H::combine(std::move(h), k.kind, k.stack);
    }
  };
  struct Accumulator {
    SiteKey key;
    uint64_t first_ts = 0;  // first event of the site (for module lookup)
    uint64_t samples = 0;
    uint64_t pymalloc_samples = 0;  // ALLOC records of kind kKindPymalloc among them
    double alloc_bytes = 0;
    double alloc_count = 0;
    double live_bytes = 0;
    double live_count = 0;
    // The bytes the live samples hold themselves (each one's usable size,
    // unweighted; mappings exact): a buffer replaced each step by a larger
    // one, sampled, holds its size in each row it was sampled in, whatever
    // T it was drawn at (ClassifyReplacedGrowth).
    double live_held = 0;
    // Horvitz-Thompson sampling variance of live_bytes: the sum over the
    // live samples of (s/p)^2 (1 - p) (exact pieces of mappings add 0).
    double live_var = 0;
    double young_bytes = 0;  // live bytes allocated in the current cohort
    // Churn: what was allocated while set_in_step(true) held, with the
    // Horvitz-Thompson variances of the byte and count estimates
    // ((s/p)^2 (1-p) and (1/p)^2 (1-p) per sample; mappings are exact).
    double step_alloc_bytes = 0;
    double step_alloc_count = 0;
    double step_alloc_bytes_var = 0;
    double step_alloc_count_var = 0;
  };

  // The rounding of the trace's allocator (UsableBytes); kRequest until set.
  void set_rounding(HostRounding r) { rounding_ = r; }

  // Applies one event; non-heap events (STEP, STAGE, COUNTER) are ignored.
  void Apply(const reader::Event& e);

  // Allocations and mappings made from now on belong to cohort `c` (the
  // analysis uses the index of the step in progress). Changing the cohort
  // makes every live byte "old": young_bytes restarts at 0. O(sites whose
  // young_bytes changed in the cohort ending), not O(sites).
  void set_cohort(uint32_t c);
  // While true, allocations also count in Accumulator::step_alloc_* (the
  // analysis sets it while a selected step is open).
  void set_in_step(bool in_step) { in_step_ = in_step; }

  // Calls fn(site index, cohort, estimated bytes, 1 / p, requested size)
  // for every live sampled allocation and every live piece of an anonymous
  // mapping (1 / p = 1, its length).
  template <typename Fn>
  void ForEachLive(Fn fn) const {
    for (const auto& [addr, l] : live_) fn(l.site, l.cohort, l.bytes, l.count, l.size);
    for (const auto& [start, r] : ranges_) {
      fn(r.site, r.cohort, static_cast<double>(r.end - start), 1.0, r.end - start);
    }
  }

  const std::vector<Accumulator>& sites() const { return sites_; }
  // The sites whose accumulator may have changed since the last
  // ClearChanged() (each once; a site not listed is as it was then): what
  // the analysis reads at a step end instead of every site (issue 11).
  const std::vector<uint32_t>& changed_sites() const { return changed_.list(); }
  void ClearChanged() { changed_.Clear(); }

  // Marks (site_marks.h): SitesAt(m) is sites() as it was at the last
  // Mark(m), set_cohort's young_bytes included.
  size_t NewMark() { return marks_.New(); }
  void Mark(size_t m) { marks_.Mark(m, sites_); }
  bool marked(size_t m) const { return marks_.marked(m); }
  std::vector<Accumulator> SitesAt(size_t m) const { return marks_.SitesAt(m, sites_); }
  void DropMark(size_t m) { marks_.Drop(m); }
  double host_live_bytes() const { return host_live_; }
  double mmap_live_bytes() const { return mmap_live_; }
  size_t live_allocations() const { return live_.size(); }
  size_t mmap_ranges() const { return ranges_.size(); }

 private:
  struct Live {
    uint32_t site;
    uint32_t cohort;
    double bytes;   // usable bytes / p
    double count;   // 1 / p
    uint64_t size;  // the request (its T follows from it and p)
  };
  // A piece of an anonymous mapping. A mapping is one live object while any
  // of its pieces remain: a partial munmap shrinks or splits it, and the
  // object's count goes only when its last piece does.
  struct Range {
    uint64_t end;
    uint32_t site;
    uint64_t object;  // which MMAP/MREMAP created it
    uint32_t cohort;
  };

  // Before sites_[site] changes.
  void Touch(uint32_t site) {
    marks_.Touch(site, sites_);
    changed_.Add(site);
  }
  uint32_t SiteIndex(Kind kind, uint64_t stack, uint64_t ts);
  void RemoveLive(uint64_t addr);
  void AddRange(uint64_t start, uint64_t end, uint32_t site);
  // Removes [start, end) from the mapped ranges; returns the site of the first
  // range it overlapped, or -1.
  int64_t RemoveRange(uint64_t start, uint64_t end);

  std::vector<Accumulator> sites_;
  absl::flat_hash_map<SiteKey, uint32_t> site_index_;
  absl::flat_hash_map<uint64_t, Live> live_;
  std::map<uint64_t, Range> ranges_;                       // start -> range, disjoint
  absl::flat_hash_map<uint64_t, uint32_t> object_pieces_;  // object -> pieces in ranges_
  uint64_t next_object_ = 0;
  uint32_t cohort_ = 0;
  bool in_step_ = false;
  HostRounding rounding_ = HostRounding::kRequest;
  double host_live_ = 0;
  double mmap_live_ = 0;
  SiteMarks<Accumulator> marks_;
  ChangedSites changed_;  // since ClearChanged()
  // Sites whose young_bytes changed since the cohort began: the others hold
  // +0.0, as set_cohort left them (or as created).
  ChangedSites young_;
};

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_REPLAY_H_

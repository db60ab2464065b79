// RSS growth explained (docs/analysis.md "RSS growth explained"): splits a
// process's RSS growth per step into the exact heap live bytes, the
// allocator's free space (fragmentation: free chunks inside the heap; caching:
// free memory the allocator would hand back or reuse first: glibc's top
// chunks, jemalloc's dirty and muzzy pages), anonymous mappings, file-backed
// pages and memstep's own memory, classifies it LEAK / FRAGMENTATION /
// CACHING / FILE / MEMSTEP / UNEXPLAINED, and names the growing heap sites
// that pin fragmented free space.
//
// Worked example (the PyTorch loop of docs/analysis.md, per step over the
// 60-step window): RSS +766 KiB; exact live +17.1 KiB (rising, p < 0.01);
// glibc arena 0's free chunks but its top +654 KiB (rising), its top +16 B;
// memstep's own +71.9 KiB, taken off first. The largest rising component of
// the rest is the free space inside the heap: FRAGMENTATION, and the growing
// site (the kept tensors' storage) is named as its pin with the ratio
// 654 / 17.1 = 38x. Had the live bytes been flat, the same RSS growth would
// never be LEAK.
//
// Inputs come from the step-end COUNTER records written by
// preload/steps/alloc_stats.cc (docs/format.md "Step-end allocator
// statistics"); rows without them (rate-limited collection) are skipped by
// the slopes, which take each row's step index as x.

#ifndef MEMSTEP_SRC_ANALYSIS_RSS_EXPLAIN_H_
#define MEMSTEP_SRC_ANALYSIS_RSS_EXPLAIN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "src/analysis/growth.h"

namespace memstep::reader {
struct Trace;
}

namespace memstep::analysis {

// The allocator's statistics at one step end, mapped onto the components.
struct RowAllocStats {
  bool has = false;          // a collection was recorded at this step end
  std::string allocator;     // "glibc", "jemalloc", "" (resident split only)
  int64_t anon_bytes = -1;   // resident anonymous bytes
  int64_t file_bytes = -1;   // resident file-backed + shmem bytes
  int rss_source = 0;        // 1 smaps_rollup, 2 statm (anon/file), 0 unknown
  int64_t frag_bytes = -1;   // glibc: free chunks but the tops; jemalloc: active - allocated
  int64_t cache_bytes = -1;  // glibc: the arenas' top chunks (keepcost: the main one's
                             // only, without ARENA_STATS); jemalloc: dirty + muzzy
  int64_t own_bytes = -1;    // memstep's own resident memory, the sampled blocks' bytes excluded
  int64_t cost_ns = -1;      // what the collection cost in the process
  int64_t smaps_ns = -1;     // what its smaps_rollup read cost (when it read it)
  int64_t own_ns = -1;       // what measuring memstep's own memory cost
  struct Arena {
    int64_t system = 0, free = 0, top = 0;
  };
  std::vector<Arena> arenas;  // glibc's arenas (ARENA_STATS), arena 0 the main one
};

// One row per step row of the process (index as its StepRow list).
std::vector<RowAllocStats> StepAllocStats(const reader::Trace& t,
                                          const absl::flat_hash_map<uint64_t, size_t>& row_of_step,
                                          size_t rows);

// A heap site that grows while fragmented free space grows: the likely pin.
struct RssPin {
  uint64_t site_id = 0;       // Report::sites id (0: the exact heap, no site named)
  double bytes_per_step = 0;  // the site's growth rate
  double ratio = 0;           // fragmentation growth / the site's growth
};

struct RssExplain {
  // "LEAK", "FRAGMENTATION", "CACHING", "FILE", "MEMSTEP" (memstep's own
  // memory), "UNEXPLAINED", or "" (RSS does not grow significantly, or too
  // few steps). Never "LEAK" unless the exact live bytes (heap or anonymous
  // mappings) rise with it.
  std::string verdict;
  std::string allocator;    // "glibc", "jemalloc" or "" (no allocator statistics)
  std::string reason;       // one line: what decided it
  size_t window_begin = 0;  // rows [window_begin, window_begin + window)
  size_t window = 0;
  size_t stat_rows = 0;  // rows of the window with allocator statistics
  // Growth per step over the window (Theil-Sen, step index as x); NaN-free,
  // 0 when unknown (see the has_* flags).
  double rss_per_step = 0;
  double live_per_step = 0;   // exact heap live bytes
  double frag_per_step = 0;   // allocator free space inside the heap
  double cache_per_step = 0;  // allocator free space it would return or reuse first
  double mmap_per_step = 0;   // anonymous mappings memstep counts
  double file_per_step = 0;   // resident file-backed (+ shmem) pages
  double anon_per_step = 0;   // resident anonymous pages (evidence; includes the above)
  double own_per_step = 0;    // memstep's own resident memory
  double other_per_step = 0;  // rss - all of the above but anon
  // RSS at the window's last row minus at its first.
  double rise_bytes = 0;
  // The RSS rate's 95 % interval excludes 0. A verdict with an interval
  // reaching 0 (an uneven rise: a staircase, or one that slows) stands on
  // the rise over the window; its rate is not established.
  bool rate_established = false;
  bool has_allocator = false;  // frag/cache known
  bool has_file = false;       // file (and anon) known
  bool has_own = false;        // own known
  std::string file_source;     // "smaps_rollup" or "statm": the rows file/anon were fitted on
  // The glibc arena whose free space (inside + top) grows most (-1: none
  // known), its growth per step split, and how many arenas there were.
  int arena = -1;
  size_t arenas = 0;
  double arena_frag_per_step = 0, arena_top_per_step = 0, arena_in_use_per_step = 0;
  // One-sided Mann-Kendall p of each component rising (1: unknown).
  double live_p = 1, frag_p = 1, cache_p = 1, mmap_p = 1, file_p = 1, own_p = 1;
  double median_cost_ns = 0;   // the collection's cost in the process (median), 0 unknown
  double median_smaps_ns = 0;  // of which smaps_rollup (median over the reads), 0 unknown
  double median_own_ns = 0;    // of which memstep's own memory, 0 unknown
  std::vector<RssPin> pins;    // largest first
};

// A growing heap site of the process, for the pins.
struct RssSite {
  uint64_t site_id = 0;
  double slope = 0;
  GrowthClass cls = GrowthClass::kNoTrend;
};

struct RssInput {
  std::vector<double> rss, live, mmap;  // per row
  std::vector<RowAllocStats> stats;     // per row (may be empty)
  Growth rss_growth;                    // classified RSS series (window, trend)
  Growth live_growth;
  std::vector<RssSite> sites;
};

// `options`: the call-site bounds (RSS must grow at least min_rate and
// min_window_growth over the window); p_value for every component's trend.
RssExplain ExplainRss(const RssInput& in, const GrowthOptions& options);

// The class the reports print for RSS (text and JSON `rss_growth.class`
// alike): the verdict when there is one; otherwise "GROWS" for a rising
// series (never "LEAK": only the split can say that) or the trend's class.
std::string RssClassName(const Growth& rss_growth, const RssExplain& x);

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_RSS_EXPLAIN_H_

// The planted facts: what each planted function of planted.cc allocates.
// Shared by the planted program (which makes the allocations) and the tests
// (which assert the analysis finds exactly these numbers), so the two cannot
// drift apart.

#ifndef MEMSTEP_TESTS_E2E_PLANTED_FACTS_H_
#define MEMSTEP_TESTS_E2E_PLANTED_FACTS_H_

#include <cstddef>
#include <cstdint>

namespace memstep::e2e::facts {

// mode "sites" (interval 1: every number exact). The whole mode writes about
// 160 KiB of records in a few ms, within one 256 KiB per-thread ring of the
// preload library (it is drained every MEMSTEP_FLUSH_MS): keep it so, or
// records are dropped and the exact checks fail.
inline constexpr int kLeakCount = 3000;
inline constexpr size_t kLeakSize = 1000;
inline constexpr int kChurnCount = 1000;
inline constexpr size_t kChurnSize = 777;
inline constexpr int kCallocCount = 500;
inline constexpr size_t kCallocN = 48;
inline constexpr size_t kCallocElem = 10;
inline constexpr int kReallocCount = 300;
inline constexpr size_t kReallocSeedSize = 111;
inline constexpr size_t kReallocGrowSize = 4321;
inline constexpr int kMemalignCount = 200;
inline constexpr size_t kMemalignSize = 2048;
inline constexpr int kAlignedCount = 150;
inline constexpr int kAlignedFreed = 50;
inline constexpr size_t kAlignedSize = 4096;
inline constexpr int kNewArrayCount = 200;
inline constexpr size_t kNewArrayElems = 321;  // x 4 bytes = 1284
inline constexpr int kMmapPartialCount = 10;
inline constexpr size_t kMmapPartialLen = 64 << 10;
inline constexpr size_t kMmapPartialCut = 16 << 10;  // munmap'ed head of each
inline constexpr int kMmapFullCount = 4;
inline constexpr size_t kMmapFullLen = 32 << 10;
// A PROT_NONE reservation (address space, no memory), parts of which
// mprotect commits (PlantedCommit8x256K) and later decommits (the last 2).
inline constexpr size_t kReserveLen = size_t{1} << 30;
inline constexpr int kCommitCount = 8;
inline constexpr size_t kCommitLen = 256 << 10;
inline constexpr int kDecommitCount = 2;

// mode "sampled" (default interval).
inline constexpr long kSampledChurnCount = 400 * 1024;  // 400 MiB in 1 KiB blocks
inline constexpr size_t kSampledChurnSize = 1024;
inline constexpr long kSampledLeakCount = 96 * 128;  // 96 MiB in 8 KiB blocks
inline constexpr size_t kSampledLeakSize = 8192;
inline constexpr int kBigCount = 6;                  // >= S_always: exact
inline constexpr size_t kBigSize = (3 << 19) + 123;  // 1.5 MiB + 123

// mode "steps": one thread; blocks whose usable size equals their size
// (65528 + 8 bytes of chunk header = 64 KiB, below the mmap threshold).
inline constexpr long kSteps = 10;
inline constexpr size_t kStepBlock = 65528;
inline constexpr int kStepBatchBlocks = 64;  // data:      ~4 MiB, freed at step end
inline constexpr int kStepActBlocks = 384;   // forward:  ~24 MiB, freed in backward
inline constexpr int kStepGradBlocks = 128;  // backward:  ~8 MiB, freed at step end
inline constexpr int kStepLeakBlocks = 32;   // optimizer: ~2 MiB, leaked

// modes "fork" and "exec".
inline constexpr size_t kParentSize = 6666;
inline constexpr int kForkChildCount = 10;
inline constexpr size_t kForkChildSize = 4444;
inline constexpr int kExecCount = 7;
inline constexpr size_t kExecSize = 5555;

// mode "threads": thread N allocates ThreadCount(N) blocks of ThreadSize(N),
// frees the first half.
inline constexpr long kThreads = 16;
constexpr int ThreadCount(int n) { return 200 + 20 * n; }
constexpr size_t ThreadSize(int n) { return 1000 + 16 * static_cast<size_t>(n) + 1; }

// mode "dlopen": planted_dso.cc's PlantedDsoAlloc allocates kDsoSize (always
// recorded) and frees it, once per iteration.
inline constexpr long kDlopenIterations = 100;
inline constexpr int kDlopenNeighbours = 4;
inline constexpr size_t kDsoSize = (5 << 18) + 77;  // 1.25 MiB + 77

// mode "stripped": libplanted_stripped.so (planted_stripped_dso.cc with every
// symbol table stripped) keeps kStrippedCount blocks of kStrippedSize bytes,
// allocated by a hidden function no symbol names any more.
inline constexpr int kStrippedCount = 5;
inline constexpr size_t kStrippedSize = 33333;

// mode "signal".
inline constexpr int kSignalMainCount = 3000;  // ~100 KiB of records: fits a ring
inline constexpr size_t kSignalMainSize = 100;
inline constexpr size_t kSignalHandlerSize = 333;

// mode "progress".
inline constexpr size_t kProgressSize = 4040;

// mode "progressive": default T_steady = 512 KiB, so T_warm = 128 KiB.
inline constexpr long kProgSteps = 80;
inline constexpr int kProgLeakBlocks = 100;
inline constexpr size_t kProgLeakSize = 4000;
inline constexpr int kProgChurnBlocks = 4000;
inline constexpr size_t kProgChurnSize = 1000;
inline constexpr int kProgBoostAt = 50;

// Mode "quiet-thread": a worker thread that allocates little (kQuietBlocks
// blocks of kQuietSize a step, freed in the step) beside a main thread that
// calls memstep_boost(kQuietBoostSteps) in step kQuietBoostAt, after the
// schedule decayed to T_steady.
inline constexpr long kQuietSteps = 200;
inline constexpr int kQuietBlocks = 32;
inline constexpr size_t kQuietSize = 520;
inline constexpr long kQuietBoostAt = 180;
inline constexpr uint32_t kQuietBoostSteps = 10;

// Mode "hunt": the leak hunt's planted loop.
inline constexpr long kHuntSteps = 60;
inline constexpr int kHuntStepMs = 10;
inline constexpr int kHuntChurnBlocks = 1100;
// Mode "hunt-grow": the hunt's loop with a buffer reallocated kGrowPerStep
// bytes larger every step (PlantedGrowBuffer: nothing old kept, so the
// hunt's tally never sees it) and kRenewBlocks blocks of kRenewSize made
// anew every kRenewEvery steps, the old ones freed (PlantedRenew: an
// epoch's index list).
inline constexpr size_t kGrowPerStep = 4096;
inline constexpr int kRenewBlocks = 400;
inline constexpr size_t kRenewSize = 256;
inline constexpr int kRenewEvery = 20;
inline constexpr uint32_t kProgBoostSteps = 5;

// Modes "rss-frag", "rss-cache", "rss-leak", "rss-file": RSS growth explained
// (docs/analysis.md). kRssSteps steps of about kRssStepMs each: long enough
// that the step-end statistics, rate-limited to 1 % of wall time by their
// own cost (0.1-0.5 ms on a loaded 2-core machine), are at 10 or more.
//   rss-frag: per step kRssFragBlocks medium blocks of kRssFragBase + step *
//     kRssFragGrow bytes (each step's larger than any hole left before),
//     allocated one after the other and touched, then each shrunk in place
//     by realloc to its first kRssPinSize bytes, which are kept
//     (PlantedRssPin): the freed rest of each is a hole pinned between two
//     kept blocks, never reused, never trimmed.
//   rss-cache: M_TRIM_THRESHOLD and M_MMAP_THRESHOLD raised; per step one
//     block of (step + 1) x kRssCacheUnit bytes, touched and freed: it
//     merges into the main arena's top chunk, which only grows.
//   rss-leak: per step kRssLeakBlocks blocks of kRssLeakSize bytes, touched
//     and kept (PlantedRssLeak).
//   rss-file: a file of kRssSteps x kRssFileUnit bytes (unlinked, in $TMPDIR
//     or /tmp) mapped MAP_SHARED; per step the next kRssFileUnit bytes of the
//     mapping are written: file-backed (page cache or shmem) pages grow, the
//     heap does not.
inline constexpr long kRssSteps = 60;
inline constexpr int kRssStepMs = 20;
inline constexpr int kRssFragBlocks = 32;
inline constexpr size_t kRssFragBase = 32768;
inline constexpr size_t kRssFragGrow = 1024;
inline constexpr size_t kRssPinSize = 1024;
inline constexpr size_t kRssCacheUnit = 512 * 1024;
inline constexpr int kRssLeakBlocks = 16;
inline constexpr size_t kRssFileUnit = 512 * 1024;
inline constexpr size_t kRssLeakSize = 32768;

// churn LEAK: kHotSteps steps; in stage "forward" of each,
//   PlantedChurnHot makes kHotPerStep allocations of kHotSize bytes, each
//   freed at once (the hot allocator to pool), and PlantedChurnLeak keeps
//   LEAK bytes in kHotLeakBlock-byte blocks (0: none; `memstep diff`'s
//   planted regression).
inline constexpr long kHotSteps = 50;
inline constexpr long kHotPerStep = 2000;
inline constexpr size_t kHotSize = 256;
inline constexpr size_t kHotLeakBlock = 4096;

}  // namespace memstep::e2e::facts

#endif  // MEMSTEP_TESTS_E2E_PLANTED_FACTS_H_

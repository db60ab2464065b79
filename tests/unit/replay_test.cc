#include "src/analysis/replay.h"

#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/analysis/device_replay.h"

namespace memstep::analysis {
namespace {

using reader::Event;

Event Alloc(uint64_t seq, uint64_t stack, uint64_t addr, uint64_t size, uint64_t interval) {
  Event e;
  e.tag = format::kTagAlloc;
  e.seq = seq;
  e.stack = stack;
  e.addr = addr;
  e.size = size;
  e.interval = interval;
  return e;
}
Event Free(uint64_t addr) {
  Event e;
  e.tag = format::kTagFree;
  e.addr = addr;
  return e;
}
Event Mmap(uint64_t stack, uint64_t addr, uint64_t len, uint64_t prot = 3) {
  Event e;
  e.tag = format::kTagMmap;
  e.stack = stack;
  e.addr = addr;
  e.size = len;
  e.new_addr = prot;  // the record's prot (reader.cc): 3 PROT_READ | PROT_WRITE
  return e;
}
Event Munmap(uint64_t addr, uint64_t len) {
  Event e;
  e.tag = format::kTagMunmap;
  e.addr = addr;
  e.size = len;
  return e;
}
Event Mremap(uint64_t old_addr, uint64_t old_len, uint64_t new_addr, uint64_t new_len) {
  Event e;
  e.tag = format::kTagMremap;
  e.addr = old_addr;
  e.size = old_len;
  e.new_addr = new_addr;
  e.new_len = new_len;
  return e;
}

TEST(SampleProbabilityTest, Values) {
  EXPECT_EQ(SampleProbability(100, 0), 1.0);
  EXPECT_NEAR(SampleProbability(4095, 524288), 1 - std::exp(-4096.0 / 524288), 1e-15);
  EXPECT_NEAR(SampleProbability(1 << 30, 524288), 1.0, 1e-12);
}

// The model of usable sizes (UsableBytes) against the allocators themselves:
// glibc's own malloc and malloc_usable_size (looked up in libc.so.6, past any
// sanitizer's interceptors), for every size below 4 KiB and a spread up to its
// 128 KiB bound (below M_MMAP_THRESHOLD's least value, so never mmapped).
// jemalloc's classes: PlantedSites.JemallocUsableSizesAreTheModels (jemalloc
// cannot be dlopened into a running process: its TLS is static).
TEST(UsableBytesTest, GlibcModelIsGlibcsUsableSize) {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(libc, nullptr) << dlerror();
  using MallocFn = void* (*)(size_t);
  using FreeFn = void (*)(void*);
  using UsableFn = size_t (*)(void*);
  auto real_malloc = reinterpret_cast<MallocFn>(dlsym(libc, "malloc"));
  auto real_free = reinterpret_cast<FreeFn>(dlsym(libc, "free"));
  auto real_usable = reinterpret_cast<UsableFn>(dlsym(libc, "malloc_usable_size"));
  ASSERT_TRUE(real_malloc != nullptr && real_free != nullptr && real_usable != nullptr);
  std::vector<size_t> sizes;
  for (size_t s = 0; s < 4096; ++s) sizes.push_back(s);
  for (size_t s = 4096; s < 128 * 1024; s += 1021) sizes.push_back(s);
  sizes.push_back(128 * 1024 - 1);
  for (size_t s : sizes) {
    void* p = real_malloc(s);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(UsableBytes(HostRounding::kGlibc, format::kKindMalloc, s), real_usable(p)) << s;
    real_free(p);
  }
  dlclose(libc);
  // From 128 KiB: the request (glibc may have mmapped the block, or not).
  EXPECT_EQ(UsableBytes(HostRounding::kGlibc, format::kKindMalloc, 128 * 1024), 128u * 1024);
  EXPECT_EQ(UsableBytes(HostRounding::kGlibc, format::kKindCalloc, 1 << 20), 1u << 20);
}

// CPython's small-object allocator hands out multiples of 16 bytes (its
// ALIGNMENT on 64-bit platforms), whatever the process's malloc; a request
// of 0 goes to malloc, so any record of kind pymalloc is 1..512 bytes.
TEST(UsableBytesTest, PymallocSizeClassesAndUnknownAllocators) {
  for (HostRounding r : {HostRounding::kRequest, HostRounding::kGlibc, HostRounding::kJemalloc}) {
    EXPECT_EQ(UsableBytes(r, format::kKindPymalloc, 1), 16u);
    EXPECT_EQ(UsableBytes(r, format::kKindPymalloc, 16), 16u);
    EXPECT_EQ(UsableBytes(r, format::kKindPymalloc, 17), 32u);
    EXPECT_EQ(UsableBytes(r, format::kKindPymalloc, 500), 512u);
    EXPECT_EQ(UsableBytes(r, format::kKindPymalloc, 512), 512u);
  }
  EXPECT_EQ(UsableBytes(HostRounding::kRequest, format::kKindMalloc, 33), 33u);
  EXPECT_EQ(UsableBytes(HostRounding::kGlibc, format::kKindMalloc, ~uint64_t{0}), ~uint64_t{0});
  EXPECT_EQ(UsableBytes(HostRounding::kJemalloc, format::kKindMalloc, ~uint64_t{0} - 5),
            ~uint64_t{0} - 5);
}

// A sample stands for its usable size over p, p from the request as drawn;
// its cohort's T (LiveCohorts) comes back exactly from the request.
TEST(HeapReplayTest, SamplesStandForTheirUsableSize) {
  for (HostRounding r : {HostRounding::kRequest, HostRounding::kGlibc}) {
    HeapReplay replay;
    replay.set_rounding(r);
    replay.set_cohort(0);
    replay.Apply(Alloc(0, 7, 0x1000, 33, 256));
    Event py = Alloc(1, 7, 0x2000, 20, 256);
    py.kind = format::kKindPymalloc;
    replay.Apply(py);
    const double p33 = SampleProbability(33, 256), p20 = SampleProbability(20, 256);
    const double usable33 = r == HostRounding::kGlibc ? 40 : 33;
    ASSERT_EQ(replay.sites().size(), 1u);
    const HeapReplay::Accumulator& a = replay.sites()[0];
    EXPECT_DOUBLE_EQ(a.live_bytes, usable33 / p33 + 32 / p20);
    EXPECT_DOUBLE_EQ(a.live_count, 1 / p33 + 1 / p20);
    EXPECT_DOUBLE_EQ(a.live_var, usable33 * usable33 / p33 / p33 * (1 - p33) +
                                     32.0 * 32 / p20 / p20 * (1 - p20));
    const auto cohorts = LiveCohorts([&](auto fn) { replay.ForEachLive(fn); }, 1, 1, 2);
    ASSERT_EQ(cohorts[0].size(), 1u);
    EXPECT_NEAR(cohorts[0][0].min_interval, 256.0, 1e-9);
    EXPECT_DOUBLE_EQ(cohorts[0][0].bytes, a.live_bytes);
    EXPECT_EQ(cohorts[0][0].block, 0);  // no block recorded with p = 1
    // The bytes the samples hold themselves: their usable sizes, whatever
    // T they were drawn at (ClassifyReplacedGrowth reads them).
    EXPECT_NEAR(a.live_held, usable33 + 32, 1e-9);
    replay.Apply(Free(0x1000));
    EXPECT_NEAR(replay.sites()[0].live_bytes, 32 / p20, 1e-9);
    EXPECT_NEAR(replay.sites()[0].live_held, 32, 1e-9);
    replay.Apply(Free(0x2000));
    EXPECT_EQ(replay.sites()[0].live_held, 0);
  }
}

TEST(HeapReplayTest, ExactBytesAtProbabilityOne) {
  HeapReplay r;
  r.Apply(Alloc(0, 1, 0x10, 100, 0));
  r.Apply(Alloc(1, 1, 0x20, 200, 0));
  r.Apply(Alloc(2, 2, 0x30, 1000, 0));
  // Its cohort's largest block recorded with p = 1 (GrowthInput::
  // end_block_by_cohort), while both of site 0's are live.
  const auto cohorts = LiveCohorts([&](auto fn) { r.ForEachLive(fn); }, 2, 1, 3);
  ASSERT_EQ(cohorts[0].size(), 1u);
  EXPECT_EQ(cohorts[0][0].block, 200);
  EXPECT_EQ(cohorts[0][0].bytes, 300);
  r.Apply(Free(0x20));
  r.Apply(Free(0x999));  // never sampled: ignored
  ASSERT_EQ(r.sites().size(), 2u);
  EXPECT_EQ(r.sites()[0].samples, 2u);
  EXPECT_EQ(r.sites()[0].alloc_bytes, 300);
  EXPECT_EQ(r.sites()[0].alloc_count, 2);
  EXPECT_EQ(r.sites()[0].live_bytes, 100);
  EXPECT_EQ(r.sites()[0].live_count, 1);
  EXPECT_EQ(r.sites()[1].live_bytes, 1000);
  EXPECT_EQ(r.host_live_bytes(), 1100);
  // An ALLOC over a live address replaces it (its FREE was lost).
  r.Apply(Alloc(3, 2, 0x10, 50, 0));
  EXPECT_EQ(r.sites()[0].live_bytes, 0);
  EXPECT_EQ(r.sites()[1].live_bytes, 1050);
  EXPECT_EQ(r.live_allocations(), 2u);
}

// Horvitz-Thompson: simulate Poisson byte sampling of a known workload many
// times and check the estimate of live bytes is unbiased. With 300 trials the
// mean must be within 4 standard errors of the truth (false-failure rate
// below 1e-4; the seed is fixed, so the test is deterministic anyway).
TEST(HeapReplayTest, HorvitzThompsonEstimateIsUnbiased) {
  constexpr uint64_t kInterval = 64 * 1024;
  constexpr int kTrials = 300;
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> log_size(std::log(8.0), std::log(256.0 * 1024));
  std::vector<uint64_t> sizes(3000);
  double truth_live = 0, truth_count = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    sizes[i] = static_cast<uint64_t>(std::exp(log_size(rng)));
    if (i % 3 != 0) {
      truth_live += static_cast<double>(sizes[i]);
      truth_count += 1;
    }
  }
  std::uniform_real_distribution<double> u(0, 1);
  double sum = 0, sum_sq = 0, sum_count = 0, sum_count_sq = 0;
  for (int t = 0; t < kTrials; ++t) {
    HeapReplay r;
    uint64_t seq = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (u(rng) < SampleProbability(sizes[i], kInterval)) {
        r.Apply(Alloc(seq++, 1, 0x1000 + 16 * i, sizes[i], kInterval));
      }
    }
    for (size_t i = 0; i < sizes.size(); i += 3) r.Apply(Free(0x1000 + 16 * i));
    sum += r.host_live_bytes();
    sum_sq += r.host_live_bytes() * r.host_live_bytes();
    const double count = r.sites().empty() ? 0 : r.sites()[0].live_count;
    sum_count += count;
    sum_count_sq += count * count;
  }
  const double mean = sum / kTrials;
  const double sd = std::sqrt(sum_sq / kTrials - mean * mean);
  EXPECT_LT(std::fabs(mean - truth_live), 4 * sd / std::sqrt(kTrials))
      << "mean " << mean << " truth " << truth_live << " sd " << sd;
  EXPECT_LT(std::fabs(mean - truth_live) / truth_live, 0.02);
  // Counts are unbiased too, but small objects weigh up to T/size each.
  const double mean_count = sum_count / kTrials;
  const double sd_count = std::sqrt(sum_count_sq / kTrials - mean_count * mean_count);
  EXPECT_LT(std::fabs(mean_count - truth_count), 4 * sd_count / std::sqrt(kTrials))
      << "mean " << mean_count << " truth " << truth_count << " sd " << sd_count;
}

TEST(HeapReplayTest, MmapIntervalArithmetic) {
  HeapReplay r;
  r.Apply(Mmap(3, 0x10000, 0x4000));  // [0x10000, 0x14000)
  EXPECT_EQ(r.mmap_live_bytes(), 0x4000);
  r.Apply(Munmap(0x11000, 0x1000));  // hole in the middle: two ranges
  EXPECT_EQ(r.mmap_live_bytes(), 0x3000);
  EXPECT_EQ(r.mmap_ranges(), 2u);
  EXPECT_EQ(r.sites()[0].live_bytes, 0x3000);
  EXPECT_EQ(r.sites()[0].live_held, 0x3000);  // mappings are exact
  r.Apply(Munmap(0x0, 0x10800));              // covers the head of the first range
  EXPECT_EQ(r.mmap_live_bytes(), 0x2800);
  r.Apply(Mremap(0x12000, 0x2000, 0x40000, 0x8000));  // move and grow
  EXPECT_EQ(r.mmap_live_bytes(), 0x800 + 0x8000);
  EXPECT_EQ(r.sites()[0].alloc_bytes, 0x4000 + 0x6000);
  r.Apply(Mremap(0x90000, 0x1000, 0xA0000, 0x2000));  // not ours: ignored
  EXPECT_EQ(r.mmap_live_bytes(), 0x800 + 0x8000);
  r.Apply(Mmap(4, 0x44000, 0x8000));  // MAP_FIXED over the tail of site 3's range
  EXPECT_EQ(r.sites()[0].live_bytes, 0x800 + 0x4000);
  EXPECT_EQ(r.sites()[0].live_held, 0x800 + 0x4000);
  EXPECT_EQ(r.sites()[1].live_bytes, 0x8000);
  r.Apply(Munmap(0x0, UINT64_MAX));  // everything, without overflow
  EXPECT_EQ(r.mmap_live_bytes(), 0);
  EXPECT_EQ(r.mmap_ranges(), 0u);
  EXPECT_EQ(r.sites()[0].live_bytes, 0);
  EXPECT_EQ(r.sites()[1].live_bytes, 0);
  EXPECT_EQ(r.sites()[1].live_held, 0);
  EXPECT_EQ(r.host_live_bytes(), 0);
}

// PROT_NONE mappings reserve address space: no memory, no site; over memory
// they decommit it. The library writes an MMAP record with the new prot for
// each part of a reservation that mprotect commits (recorder.cc).
TEST(HeapReplayTest, ProtNoneIsAddressSpaceNotMemory) {
  HeapReplay r;
  r.Apply(Mmap(1, 0x100000, 0x100000, 0));  // a 1 MiB reservation
  EXPECT_EQ(r.mmap_live_bytes(), 0);
  EXPECT_EQ(r.mmap_ranges(), 0u);
  EXPECT_TRUE(r.sites().empty());
  r.Apply(Mmap(2, 0x110000, 0x20000));  // mprotect(RW) of 128 KiB of it, from stack 2
  EXPECT_EQ(r.mmap_live_bytes(), 0x20000);
  ASSERT_EQ(r.sites().size(), 1u);
  EXPECT_EQ(r.sites()[0].key.stack, 2u);
  r.Apply(Mmap(3, 0x118000, 0x8000, 0));  // mprotect(PROT_NONE) of its last 32 KiB
  EXPECT_EQ(r.mmap_live_bytes(), 0x18000);
  EXPECT_EQ(r.sites()[0].live_bytes, 0x18000);
  EXPECT_EQ(r.sites().size(), 1u);
  r.Apply(Munmap(0x100000, 0x100000));  // the whole reservation
  EXPECT_EQ(r.mmap_live_bytes(), 0);
  EXPECT_EQ(r.sites()[0].live_count, 0);
}

TEST(HeapReplayTest, MremapShrinkInPlace) {
  HeapReplay r;
  r.Apply(Mmap(1, 0x100000, 0x10000));
  r.Apply(Mremap(0x100000, 0x10000, 0x100000, 0x4000));
  EXPECT_EQ(r.mmap_live_bytes(), 0x4000);
  EXPECT_EQ(r.sites()[0].alloc_bytes, 0x10000);
}

bool SameAccumulator(const HeapReplay::Accumulator& a, const HeapReplay::Accumulator& b) {
  return a.key == b.key && a.first_ts == b.first_ts && a.samples == b.samples &&
         a.pymalloc_samples == b.pymalloc_samples && a.alloc_bytes == b.alloc_bytes &&
         a.alloc_count == b.alloc_count && a.live_bytes == b.live_bytes &&
         a.live_count == b.live_count && a.live_var == b.live_var &&
         a.young_bytes == b.young_bytes && a.step_alloc_bytes == b.step_alloc_bytes &&
         a.step_alloc_count == b.step_alloc_count &&
         a.step_alloc_bytes_var == b.step_alloc_bytes_var &&
         a.step_alloc_count_var == b.step_alloc_count_var;
}

// Marks (the analysis keeps the sites at the heap's peak with them, instead
// of replaying the trace again up to it): SitesAt(m) is exactly sites() as
// it was at the last Mark(m), whatever changed since (frees, new samples,
// new sites, mappings split and moved, cohorts and steps), for several
// marks at once, re-marked and dropped. A random mix of 20,000 operations
// (fixed seed) on 40 stacks; at random moments each of three marks is
// re-marked and a copy of sites() taken; the copies must equal SitesAt
// field by field, then and at the end. The check is exact (the marks
// restore saved values, no arithmetic), so no tolerance.
TEST(HeapReplayTest, MarksKeepTheSitesAsTheyWere) {
  std::mt19937_64 rng(11);
  HeapReplay r;
  std::vector<size_t> marks = {r.NewMark(), r.NewMark(), r.NewMark()};
  std::vector<std::vector<HeapReplay::Accumulator>> expected(marks.size());
  std::vector<uint64_t> live, maps;
  uint64_t seq = 0;
  size_t checked = 0;
  for (int op = 0; op < 20000; ++op) {
    const uint64_t kind = rng() % 100;
    if (kind < 45) {
      const uint64_t addr = 0x1000 * (1 + rng() % 5000);
      r.Apply(Alloc(seq++, 1 + rng() % 40, addr, 16 + rng() % 100000, rng() % 2 ? 524288 : 0));
      live.push_back(addr);
    } else if (kind < 80 && !live.empty()) {
      const size_t j = rng() % live.size();
      r.Apply(Free(live[j]));
      live[j] = live.back();
      live.pop_back();
    } else if (kind < 88) {
      const uint64_t addr = 0x10000000 + 0x100000 * (rng() % 64);
      r.Apply(Mmap(100 + rng() % 5, addr, 0x1000 * (1 + rng() % 64)));
      maps.push_back(addr);
    } else if (kind < 93 && !maps.empty()) {
      const uint64_t addr = maps[rng() % maps.size()];
      r.Apply(Munmap(addr + 0x1000 * (rng() % 4), 0x1000 * (1 + rng() % 8)));
    } else if (kind < 95 && !maps.empty()) {
      const uint64_t addr = maps[rng() % maps.size()];
      r.Apply(Mremap(addr, 0x2000, 0x20000000 + 0x100000 * (rng() % 64), 0x8000));
    } else if (kind < 97) {
      r.set_cohort(static_cast<uint32_t>(rng() % 8));
      r.set_in_step(rng() % 2 == 0);
    } else {
      const size_t m = rng() % marks.size();
      r.Mark(marks[m]);
      expected[m] = r.sites();
    }
    if (op % 997 == 0) {
      for (size_t m = 0; m < marks.size(); ++m) {
        if (!r.marked(marks[m])) continue;
        const std::vector<HeapReplay::Accumulator> at = r.SitesAt(marks[m]);
        ASSERT_EQ(at.size(), expected[m].size()) << "op " << op << " mark " << m;
        for (size_t i = 0; i < at.size(); ++i) {
          ASSERT_TRUE(SameAccumulator(at[i], expected[m][i])) << "op " << op << " site " << i;
        }
        ++checked;
      }
    }
    if (op == 15000) {  // a dropped mark's id comes back unmarked, and marks from scratch
      r.DropMark(marks[0]);
      marks[0] = r.NewMark();
      EXPECT_FALSE(r.marked(marks[0]));
      r.Mark(marks[0]);
      expected[0] = r.sites();
    }
  }
  EXPECT_GT(checked, 40u);
  EXPECT_GT(r.sites().size(), 40u);  // host and mmap sites
}

// The same marks on the device replay (the analysis keeps the device sites
// at each device's peak and each stage's best peak with them): sampled and
// counted DEV_ALLOCs on two devices, frees, allocations over a live address
// and frees of unknown addresses; 10,000 operations, fixed seed, exact.
TEST(DeviceReplayTest, MarksKeepTheSitesAsTheyWere) {
  std::mt19937_64 rng(13);
  DeviceReplay r;
  std::vector<size_t> marks = {r.NewMark(), r.NewMark()};
  std::vector<std::vector<DeviceReplay::SiteAcc>> expected(marks.size());
  size_t checked = 0;
  for (int op = 0; op < 10000; ++op) {
    Event e;
    e.kind = format::kDevDevice;
    e.device = static_cast<int32_t>(rng() % 2);
    e.addr = 0x1000 * (1 + rng() % 300);
    const uint64_t kind = rng() % 100;
    if (kind < 50) {
      e.tag = format::kTagDevAlloc;
      e.stack = 1 + rng() % 30;
      e.size = 1 + rng() % (1 << 24);
      e.sampled = rng() % 4 != 0;
      e.interval = rng() % 2 ? 1 << 20 : 0;
      r.set_in_step(rng() % 2 == 0);
      r.Apply(e);
    } else if (kind < 95) {
      e.tag = format::kTagDevFree;
      r.Apply(e);
    } else {
      const size_t m = rng() % marks.size();
      r.Mark(marks[m]);
      expected[m] = r.sites();
    }
    if (op % 501 == 0) {
      for (size_t m = 0; m < marks.size(); ++m) {
        if (!r.marked(marks[m])) continue;
        const std::vector<DeviceReplay::SiteAcc> at = r.SitesAt(marks[m]);
        ASSERT_EQ(at.size(), expected[m].size());
        for (size_t i = 0; i < at.size(); ++i) {
          const DeviceReplay::SiteAcc& a = at[i];
          const DeviceReplay::SiteAcc& b = expected[m][i];
          ASSERT_TRUE(a.key == b.key && a.samples == b.samples && a.alloc_count == b.alloc_count &&
                      a.alloc_bytes == b.alloc_bytes && a.live_count == b.live_count &&
                      a.live_bytes == b.live_bytes && a.live_var == b.live_var &&
                      a.step_alloc_bytes == b.step_alloc_bytes &&
                      a.step_alloc_count_var == b.step_alloc_count_var)
              << "op " << op << " site " << i;
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 20u);
  EXPECT_GT(r.sites().size(), 30u);
}

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The step-end work follows the changes (issue 11): after a step that
// touched 3 of 1,000 sites, the analysis reads 3 sites, and set_cohort
// resets only the young bytes of the sites that had some.
TEST(HeapReplayTest, ChangedSitesAreTheOnesTheStepTouched) {
  HeapReplay r;
  r.set_cohort(0);
  uint64_t seq = 0;
  for (uint64_t site = 1; site <= 1000; ++site) r.Apply(Alloc(seq++, site, site << 12, 64, 0));
  EXPECT_EQ(r.changed_sites().size(), 1000u);
  r.ClearChanged();
  r.set_cohort(1);  // all 1,000 had young bytes: reset, so changed
  EXPECT_EQ(r.changed_sites().size(), 1000u);
  r.ClearChanged();
  r.Apply(Alloc(seq++, 7, 0x900000, 32, 0));
  r.Apply(Free(uint64_t{8} << 12));
  r.Apply(Mmap(5000, 0x7000000, 0x3000));
  EXPECT_EQ(r.changed_sites().size(), 3u);  // sites 7, 8 and the mapping's
  r.ClearChanged();
  r.set_cohort(2);  // only site 7 and the mapping's had young bytes
  EXPECT_EQ(r.changed_sites().size(), 2u);
  for (const HeapReplay::Accumulator& a : r.sites()) EXPECT_TRUE(SameBits(a.young_bytes, 0.0));
  r.ClearChanged();
  r.set_cohort(3);  // a step with no event: nothing to read
  EXPECT_TRUE(r.changed_sites().empty());
}

// A site that changed_sites() does not list is bit for bit what it was at
// the last ClearChanged(), and set_cohort leaves every young_bytes +0.0, as
// when it reset every site: random host and mapping operations, cohorts
// revisited, 20,000 operations, fixed seed.
TEST(HeapReplayTest, UnlistedSitesAreUnchanged) {
  std::mt19937_64 rng(21);
  HeapReplay r;
  std::vector<HeapReplay::Accumulator> before;
  uint64_t seq = 0;
  uint32_t cohort = 0;
  size_t checked = 0;
  auto same = [](const HeapReplay::Accumulator& a, const HeapReplay::Accumulator& b) {
    return SameBits(a.live_bytes, b.live_bytes) && SameBits(a.young_bytes, b.young_bytes) &&
           SameBits(a.live_count, b.live_count) && SameBits(a.live_var, b.live_var) &&
           SameBits(a.alloc_bytes, b.alloc_bytes) && a.samples == b.samples &&
           SameBits(a.step_alloc_bytes, b.step_alloc_bytes);
  };
  for (int op = 0; op < 20000; ++op) {
    const uint64_t kind = rng() % 100;
    const uint64_t addr = 0x1000 * (1 + rng() % 400);
    if (kind < 45) {
      r.Apply(Alloc(seq++, 1 + rng() % 200, addr, 1 + rng() % 5000, rng() % 2 ? 4096 : 0));
    } else if (kind < 80) {
      r.Apply(Free(addr));
    } else if (kind < 86) {
      r.Apply(Mmap(1000 + rng() % 20, 0x10000000 + addr * 16, 0x1000 * (1 + rng() % 8)));
    } else if (kind < 90) {
      r.Apply(Munmap(0x10000000 + addr * 16, 0x1000 * (1 + rng() % 4)));
    } else if (kind < 92) {
      r.Apply(Mremap(0x10000000 + addr * 16, 0x2000, 0x20000000 + addr * 16, 0x4000));
    } else if (kind < 96) {
      const auto c = static_cast<uint32_t>(rng() % 6);
      r.set_cohort(c);
      r.set_in_step(rng() % 2 == 0);
      if (c != cohort) {
        for (const HeapReplay::Accumulator& a : r.sites()) {
          ASSERT_TRUE(SameBits(a.young_bytes, 0.0)) << op;
        }
      }
      cohort = c;
    } else {  // a step end: compare, then start over
      std::vector<bool> listed(r.sites().size(), false);
      for (uint32_t s : r.changed_sites()) listed[s] = true;
      for (size_t s = 0; s < before.size(); ++s) {
        if (!listed[s]) {
          ASSERT_TRUE(same(r.sites()[s], before[s])) << "op " << op << " site " << s;
        }
      }
      for (size_t s = before.size(); s < r.sites().size(); ++s) ASSERT_TRUE(listed[s]);
      before = r.sites();
      r.ClearChanged();
      ++checked;
    }
  }
  EXPECT_GT(checked, 500u);
  EXPECT_GT(r.sites().size(), 150u);
}

// The same for the device replay: DEV_ALLOC and DEV_FREE list their site.
TEST(DeviceReplayTest, ChangedSitesAreTheOnesTouched) {
  DeviceReplay r;
  Event e;
  e.tag = format::kTagDevAlloc;
  e.kind = format::kDevDevice;
  e.sampled = 1;
  for (uint64_t k = 1; k <= 500; ++k) {
    e.stack = k;
    e.addr = k << 20;
    e.size = 1 << 20;
    r.Apply(e);
  }
  EXPECT_EQ(r.changed_sites().size(), 500u);
  r.ClearChanged();
  e.tag = format::kTagDevFree;
  e.addr = uint64_t{9} << 20;
  r.Apply(e);
  e.sampled = 0;  // counted, in no site
  e.tag = format::kTagDevAlloc;
  e.addr = 1ull << 40;
  r.Apply(e);
  ASSERT_EQ(r.changed_sites().size(), 1u);
  EXPECT_EQ(r.changed_sites()[0], 8u);  // stack 9: the ninth site
  EXPECT_EQ(r.sites()[8].live_bytes, 0);
}

}  // namespace
}  // namespace memstep::analysis

#include "src/analysis/replay.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

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
Event Mmap(uint64_t stack, uint64_t addr, uint64_t len) {
  Event e;
  e.tag = format::kTagMmap;
  e.stack = stack;
  e.addr = addr;
  e.size = len;
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

TEST(HeapReplayTest, ExactBytesAtProbabilityOne) {
  HeapReplay r;
  r.Apply(Alloc(0, 1, 0x10, 100, 0));
  r.Apply(Alloc(1, 1, 0x20, 200, 0));
  r.Apply(Alloc(2, 2, 0x30, 1000, 0));
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
  r.Apply(Munmap(0x0, 0x10800));  // covers the head of the first range
  EXPECT_EQ(r.mmap_live_bytes(), 0x2800);
  r.Apply(Mremap(0x12000, 0x2000, 0x40000, 0x8000));  // move and grow
  EXPECT_EQ(r.mmap_live_bytes(), 0x800 + 0x8000);
  EXPECT_EQ(r.sites()[0].alloc_bytes, 0x4000 + 0x6000);
  r.Apply(Mremap(0x90000, 0x1000, 0xA0000, 0x2000));  // not ours: ignored
  EXPECT_EQ(r.mmap_live_bytes(), 0x800 + 0x8000);
  r.Apply(Mmap(4, 0x44000, 0x8000));  // MAP_FIXED over the tail of site 3's range
  EXPECT_EQ(r.sites()[0].live_bytes, 0x800 + 0x4000);
  EXPECT_EQ(r.sites()[1].live_bytes, 0x8000);
  r.Apply(Munmap(0x0, UINT64_MAX));  // everything, without overflow
  EXPECT_EQ(r.mmap_live_bytes(), 0);
  EXPECT_EQ(r.mmap_ranges(), 0u);
  EXPECT_EQ(r.sites()[0].live_bytes, 0);
  EXPECT_EQ(r.sites()[1].live_bytes, 0);
  EXPECT_EQ(r.host_live_bytes(), 0);
}

TEST(HeapReplayTest, MremapShrinkInPlace) {
  HeapReplay r;
  r.Apply(Mmap(1, 0x100000, 0x10000));
  r.Apply(Mremap(0x100000, 0x10000, 0x100000, 0x4000));
  EXPECT_EQ(r.mmap_live_bytes(), 0x4000);
  EXPECT_EQ(r.sites()[0].alloc_bytes, 0x10000);
}

}  // namespace
}  // namespace memstep::analysis

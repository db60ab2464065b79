// DevMap (preload/cuda_table.h), the open-addressing map behind the device
// address tables: insert/replace/find/remove against a reference std::map
// under heavy collisions and wrap-around, the 3/4 capacity limit, Reset.

#include "preload/cuda_table.h"

#include <cstdint>
#include <map>
#include <random>

#include "gtest/gtest.h"

namespace memstep::preload::cuda {
namespace {

TEST(DevMapTest, PutFindReplaceRemove) {
  DevMap m;
  ASSERT_TRUE(m.Init(4));  // 16 slots
  DevMap::Entry old;
  EXPECT_TRUE(m.Put(0x7000, 11, 12, &old));
  EXPECT_EQ(old.key, 0u);
  ASSERT_NE(m.Find(0x7000), nullptr);
  EXPECT_EQ(m.Find(0x7000)->a, 11u);
  EXPECT_TRUE(m.Put(0x7000, 21, 22, &old));  // replace: the old entry comes back
  EXPECT_EQ(old.key, 0x7000u);
  EXPECT_EQ(old.a, 11u);
  EXPECT_EQ(old.b, 12u);
  DevMap::Entry gone;
  EXPECT_TRUE(m.Remove(0x7000, &gone));
  EXPECT_EQ(gone.a, 21u);
  EXPECT_EQ(gone.b, 22u);
  EXPECT_FALSE(m.Remove(0x7000, &gone));
  EXPECT_EQ(m.Find(0x7000), nullptr);
  EXPECT_FALSE(m.Put(0, 1, 1, &old));  // key 0 means "empty"
}

TEST(DevMapTest, FullAtThreeQuarters) {
  DevMap m;
  ASSERT_TRUE(m.Init(4));
  DevMap::Entry old;
  for (uint64_t k = 1; k <= 12; ++k) EXPECT_TRUE(m.Put(k, k, k, &old)) << k;
  EXPECT_FALSE(m.Put(13, 13, 13, &old));  // 13 / 16 > 3/4: refused, nothing changed
  EXPECT_EQ(m.Find(13), nullptr);
  EXPECT_TRUE(m.Put(5, 50, 50, &old));  // a replacement needs no room
  EXPECT_EQ(old.a, 5u);
  DevMap::Entry gone;
  EXPECT_TRUE(m.Remove(1, &gone));
  EXPECT_TRUE(m.Put(13, 13, 13, &old));
  for (uint64_t k = 2; k <= 13; ++k) ASSERT_NE(m.Find(k), nullptr) << k;
}

// Random operations on a small map (long probe chains that wrap around the
// end of the array) must agree with std::map at every step.
TEST(DevMapTest, AgreesWithReferenceUnderChurn) {
  DevMap m;
  ASSERT_TRUE(m.Init(8));  // 256 slots, at most 192 keys
  std::map<uint64_t, uint64_t> ref;
  std::mt19937_64 rng(12345);
  for (int i = 0; i < 200000; ++i) {
    uint64_t key = 1 + rng() % 300;  // handles (small) and pointers alike
    if (i % 7 == 0) key <<= 21;      // 2 MiB-aligned device pointers
    DevMap::Entry e;
    if (rng() % 2 == 0) {
      bool had = ref.count(key) != 0;
      bool stored = m.Put(key, i, ~key, &e);
      if (!had && ref.size() >= 192) {
        ASSERT_FALSE(stored);
        continue;
      }
      ASSERT_TRUE(stored);
      ASSERT_EQ(e.key != 0, had);
      ref[key] = i;
    } else {
      bool removed = m.Remove(key, &e);
      ASSERT_EQ(removed, ref.erase(key) == 1);
    }
  }
  for (const auto& [key, value] : ref) {
    const DevMap::Entry* e = m.Find(key);
    ASSERT_NE(e, nullptr) << key;
    EXPECT_EQ(e->a, value);
    EXPECT_EQ(e->b, ~key);
  }
}

TEST(DevMapTest, ResetEmptiesTheMap) {
  DevMap m;
  ASSERT_TRUE(m.Init(6));
  DevMap::Entry old;
  for (uint64_t k = 1; k <= 40; ++k) ASSERT_TRUE(m.Put(k * 4096, k, k, &old));
  m.Reset();
  for (uint64_t k = 1; k <= 40; ++k) EXPECT_EQ(m.Find(k * 4096), nullptr);
  for (uint64_t k = 1; k <= 48; ++k) EXPECT_TRUE(m.Put(k, k, k, &old));  // full capacity again
}

}  // namespace
}  // namespace memstep::preload::cuda

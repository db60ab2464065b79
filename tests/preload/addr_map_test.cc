// preload/core/addr_map.h, the one hash map behind memstep's address tables, in
// both of its uses: the host block tables (ShardedAddrMap<uint64_t, 6>:
// g_big, g_blocks) and the device tables (ShardedAddrMap<DevBlock, 4> for
// pointers, AddrMap<VmmHandle> and AddrMap<VmmMapping> under one lock).
// Insert/replace/find/remove against a reference std::map under heavy
// collisions and wrap-around, the 3/4 capacity limit, Reset, shards filling
// independently, concurrent use and the fork lock protocol.

#include "preload/core/addr_map.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "preload/cuda/cuda_internal.h"

// The entries below name only the fields a test checks; the rest are 0.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace memstep::preload {
namespace {

using cuda::DevBlock;
using cuda::VmmHandle;
using cuda::VmmMapping;

// ---- AddrMap (device VMM tables; each shard of a ShardedAddrMap) ----

TEST(AddrMapTest, PutFindReplaceRemove) {
  AddrMap<VmmHandle> m;
  ASSERT_TRUE(m.Init(4));  // 16 slots
  EXPECT_EQ(m.Capacity(), 16u);
  VmmHandle old{};
  EXPECT_EQ(m.Put(0x7000, VmmHandle{11, 0, 1, false}, &old), PutResult::kAdded);
  ASSERT_NE(m.Find(0x7000), nullptr);
  EXPECT_EQ(m.Find(0x7000)->size, 11u);
  m.Find(0x7000)->mappings = 2;  // updated in place
  // Replace: the old value comes back.
  EXPECT_EQ(m.Put(0x7000, VmmHandle{21, 3, 0, true}, &old), PutResult::kReplaced);
  EXPECT_EQ(old.size, 11u);
  EXPECT_EQ(old.device, 0);
  EXPECT_EQ(old.mappings, 2u);
  EXPECT_FALSE(old.released);
  EXPECT_EQ(m.Size(), 1u);
  VmmHandle gone{};
  EXPECT_TRUE(m.Remove(0x7000, &gone));
  EXPECT_EQ(gone.size, 21u);
  EXPECT_EQ(gone.device, 3);
  EXPECT_TRUE(gone.released);
  EXPECT_FALSE(m.Remove(0x7000, &gone));
  EXPECT_EQ(m.Find(0x7000), nullptr);
  EXPECT_EQ(m.Size(), 0u);
  EXPECT_EQ(m.Put(0, VmmHandle{1, 1, 1, false}), PutResult::kRefused);  // key 0 means "empty"
  EXPECT_EQ(m.Find(0), nullptr);
  EXPECT_FALSE(m.Remove(0, nullptr));
}

TEST(AddrMapTest, UninitialisedRefusesEverything) {
  AddrMap<uint64_t> m;
  EXPECT_EQ(m.Put(0x1000, 1), PutResult::kRefused);
  EXPECT_EQ(m.Find(0x1000), nullptr);
  EXPECT_FALSE(m.Remove(0x1000, nullptr));
  EXPECT_EQ(m.Capacity(), 0u);
}

TEST(AddrMapTest, FullAtThreeQuarters) {
  AddrMap<VmmMapping> m;
  ASSERT_TRUE(m.Init(4));
  for (uint64_t k = 1; k <= 12; ++k) EXPECT_EQ(m.Put(k, VmmMapping{k, k}), PutResult::kAdded) << k;
  // 13 / 16 > 3/4: refused, nothing changed.
  EXPECT_EQ(m.Put(13, VmmMapping{13, 13}), PutResult::kRefused);
  EXPECT_EQ(m.Find(13), nullptr);
  EXPECT_EQ(m.Size(), 12u);
  VmmMapping old{};
  EXPECT_EQ(m.Put(5, VmmMapping{50, 50}, &old), PutResult::kReplaced);  // needs no room
  EXPECT_EQ(old.size, 5u);
  EXPECT_EQ(old.handle, 5u);
  EXPECT_TRUE(m.Remove(1, nullptr));
  EXPECT_EQ(m.Put(13, VmmMapping{13, 13}), PutResult::kAdded);
  for (uint64_t k = 2; k <= 13; ++k) ASSERT_NE(m.Find(k), nullptr) << k;
  EXPECT_EQ(m.Find(5)->size, 50u);
}

// Random operations on a small map (long probe chains that wrap around the
// end of the array) must agree with std::map at every step. Keys: small
// integers (VMM handles), 2 MiB-aligned device pointers and 16-byte aligned
// heap addresses; the map is also used with a hash skip (as a shard).
void Churn(int hash_skip) {
  AddrMap<DevBlock> m;
  ASSERT_TRUE(m.Init(8, hash_skip));  // 256 slots, at most 192 keys
  std::map<uint64_t, uint64_t> ref;
  std::mt19937_64 rng(12345 + hash_skip);
  for (int i = 0; i < 200000; ++i) {
    uint64_t key = 1 + rng() % 300;
    if (i % 7 == 0) key <<= 21;                       // 2 MiB-aligned device pointers
    if (i % 7 == 1) key = 0x7f0000000010 + key * 16;  // heap blocks
    DevBlock old{};
    if (rng() % 2 == 0) {
      const bool had = ref.count(key) != 0;
      const DevBlock block{static_cast<uint64_t>(i), static_cast<int32_t>(key % 8),
                           static_cast<uint8_t>(key % 5 + 1)};
      const PutResult put = m.Put(key, block, &old);
      if (!had && ref.size() >= 192) {
        ASSERT_EQ(put, PutResult::kRefused);
        continue;
      }
      ASSERT_EQ(put, had ? PutResult::kReplaced : PutResult::kAdded);
      if (had) {
        ASSERT_EQ(old.size, ref[key]);
      }
      ref[key] = i;
    } else {
      const bool removed = m.Remove(key, &old);
      auto it = ref.find(key);
      ASSERT_EQ(removed, it != ref.end());
      if (removed) {
        ASSERT_EQ(old.size, it->second);
        ref.erase(it);
      }
    }
    ASSERT_EQ(m.Size(), ref.size());
  }
  for (const auto& [key, size] : ref) {
    const DevBlock* b = m.Find(key);
    ASSERT_NE(b, nullptr) << key;
    EXPECT_EQ(b->size, size);
    EXPECT_EQ(b->device, static_cast<int32_t>(key % 8));
    EXPECT_EQ(b->kind, key % 5 + 1);
  }
}

TEST(AddrMapTest, AgreesWithReferenceUnderChurn) { Churn(0); }
TEST(AddrMapTest, AgreesWithReferenceUnderChurnAsShard) { Churn(6); }

TEST(AddrMapTest, ResetEmptiesTheMap) {
  AddrMap<VmmMapping> m;
  ASSERT_TRUE(m.Init(6));
  for (uint64_t k = 1; k <= 40; ++k) {
    ASSERT_EQ(m.Put(k * 4096, VmmMapping{k, k}), PutResult::kAdded);
  }
  m.Reset();
  EXPECT_EQ(m.Size(), 0u);
  for (uint64_t k = 1; k <= 40; ++k) EXPECT_EQ(m.Find(k * 4096), nullptr);
  for (uint64_t k = 1; k <= 48; ++k) {  // full capacity again
    EXPECT_EQ(m.Put(k, VmmMapping{k, k}), PutResult::kAdded) << k;
  }
}

// ---- ShardedAddrMap (host g_big / g_blocks, device pointer table) ----

TEST(ShardedAddrMapTest, InsertRemove) {
  ShardedAddrMap<uint64_t, 6> t;
  ASSERT_TRUE(t.Init(8));  // 64 x 256 slots
  std::vector<uint64_t> keys;
  for (uint64_t i = 1; i <= 5000; ++i) keys.push_back(i * 0x100000 + (i % 3) * 16);
  for (uint64_t k : keys) ASSERT_TRUE(t.Insert(k, k * 2));
  EXPECT_EQ(t.Size(), keys.size());
  for (size_t i = 0; i < keys.size(); i += 2) {
    uint64_t v = 0;
    ASSERT_TRUE(t.Remove(keys[i], &v));
    EXPECT_EQ(v, keys[i] * 2);
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(t.Contains(keys[i]), i % 2 == 1) << i;
    uint64_t got = 7;
    EXPECT_EQ(t.Get(keys[i], &got), i % 2 == 1) << i;  // a copy, the entry stays
    EXPECT_EQ(got, i % 2 == 1 ? keys[i] * 2 : 7) << i;
  }
  EXPECT_EQ(t.Size(), keys.size() / 2);
  uint64_t v;
  EXPECT_FALSE(t.Get(0, &v));
  EXPECT_FALSE(t.Remove(12345, &v));
  EXPECT_FALSE(t.Insert(0, 1));
}

TEST(ShardedAddrMapTest, FullShardRefuses) {
  ShardedAddrMap<uint64_t, 6> t;
  ASSERT_TRUE(t.Init(4));  // 16 slots, so 12 keys, per shard
  int inserted = 0;
  for (uint64_t i = 1; i <= 100000; ++i) inserted += t.Insert(i << 12, 0);
  EXPECT_EQ(inserted, 64 * 12);  // every shard filled up to its own limit
  EXPECT_EQ(t.Size(), 64u * 12);
  // A present key still takes a new value in a full shard.
  for (uint64_t i = 1; i <= 100000; ++i) {
    if (!t.Contains(i << 12)) continue;
    EXPECT_EQ(t.Put(i << 12, 7), PutResult::kReplaced);
    uint64_t v = 0;
    EXPECT_TRUE(t.Remove(i << 12, &v));
    EXPECT_EQ(v, 7u);
    break;
  }
}

TEST(ShardedAddrMapTest, DevicePointerTable) {
  ShardedAddrMap<DevBlock, 4> ptrs;
  ASSERT_TRUE(ptrs.Init(6));  // 16 x 64 slots
  DevBlock old{};
  EXPECT_EQ(ptrs.Put(0x7f0000200000, DevBlock{1 << 20, 0, 1}, &old), PutResult::kAdded);
  EXPECT_TRUE(ptrs.Contains(0x7f0000200000));
  // The free of the first went unseen: the new allocation replaces it.
  EXPECT_EQ(ptrs.Put(0x7f0000200000, DevBlock{4096, 1, 5}, &old), PutResult::kReplaced);
  EXPECT_EQ(old.size, 1u << 20);
  EXPECT_EQ(old.device, 0);
  EXPECT_EQ(old.kind, 1);
  DevBlock freed{};
  EXPECT_TRUE(ptrs.Remove(0x7f0000200000, &freed));
  EXPECT_EQ(freed.size, 4096u);
  EXPECT_EQ(freed.device, 1);
  EXPECT_EQ(freed.kind, 5);
  EXPECT_FALSE(ptrs.Contains(0x7f0000200000));
  for (uint64_t k = 1; k <= 300; ++k) ASSERT_TRUE(ptrs.Insert(k << 21, DevBlock{k, -1, 2}));
  EXPECT_EQ(ptrs.Size(), 300u);
  ptrs.Reset();  // fork child
  EXPECT_EQ(ptrs.Size(), 0u);
  for (uint64_t k = 1; k <= 300; ++k) EXPECT_FALSE(ptrs.Contains(k << 21));
}

// Threads insert and remove their own keys, all shards shared; every key is
// found with its value while present and gone after.
TEST(ShardedAddrMapTest, ConcurrentThreads) {
  ShardedAddrMap<uint64_t, 6> t;
  ASSERT_TRUE(t.Init(10));
  constexpr int kThreads = 4;
  constexpr uint64_t kKeys = 4000;
  std::vector<std::thread> th;
  for (int w = 0; w < kThreads; ++w) {
    th.emplace_back([&t, w] {
      for (int round = 0; round < 20; ++round) {
        for (uint64_t i = 1; i <= kKeys; ++i) {
          uint64_t key = (i * kThreads + w) * 16;
          ASSERT_TRUE(t.Insert(key, key + round));
        }
        for (uint64_t i = 1; i <= kKeys; ++i) {
          uint64_t key = (i * kThreads + w) * 16, v = 0;
          ASSERT_TRUE(t.Remove(key, &v));
          ASSERT_EQ(v, key + round);
        }
      }
    });
  }
  for (auto& x : th) x.join();
  EXPECT_EQ(t.Size(), 0u);
}

// The fork handlers' protocol: LockAll holds every shard (another thread
// waits), UnlockAll releases them; ResetLocks frees locks a thread that no
// longer exists (in a fork child) held, keeping the contents.
TEST(ShardedAddrMapTest, ForkLockProtocol) {
  ShardedAddrMap<uint64_t, 6> t;
  ASSERT_TRUE(t.Init(8));
  ASSERT_TRUE(t.Insert(0x5000, 1));
  t.LockAll();
  std::atomic<bool> done{false};
  std::thread other([&] {
    t.Insert(0x6000, 2);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.load());
  t.UnlockAll();
  other.join();
  EXPECT_TRUE(done.load());
  t.LockAll();
  t.ResetLocks();  // as in the fork child
  EXPECT_EQ(t.Size(), 2u);
  EXPECT_TRUE(t.Contains(0x5000));
  EXPECT_TRUE(t.Contains(0x6000));
}

}  // namespace
}  // namespace memstep::preload

// Sharded open-addressing set of block addresses: the always-recorded big
// blocks (size >= S_always) and sampled blocks that had to come from the real
// allocator because the region was exhausted. free() consults it only for
// blocks whose usable size is >= S_always, so it is off the common path.
//
// Contract: memory from one raw mmap at Init; 64 shards, each a linear-probing
// table with backward-shift deletion (no tombstones) under its own spinlock.
// Insert fails (returns false) when a shard is 3/4 full: the caller then does
// not record the block. Never allocates after Init.

#ifndef MEMSTEP_PRELOAD_ADDR_TABLE_H_
#define MEMSTEP_PRELOAD_ADDR_TABLE_H_

#include <stddef.h>
#include <stdint.h>

#include "preload/base.h"

namespace memstep::preload {

class AddrTable {
 public:
  static constexpr int kShards = 64;

  // Capacity per shard is a power of two. Returns false if memory is missing.
  bool Init(size_t per_shard);
  bool Insert(uintptr_t addr, uint64_t value);
  // Removes addr; returns true and its value if it was present.
  bool Remove(uintptr_t addr, uint64_t* value);
  bool Contains(uintptr_t addr);
  size_t Size();

  void LockAll();
  void UnlockAll();
  void ResetLocks();

 private:
  struct Slot {
    uintptr_t key;  // 0 = empty
    uint64_t value;
  };
  struct alignas(64) Shard {
    SpinLock lock;
    size_t count = 0;  // protected by lock
    Slot* slots = nullptr;
  };
  static uint64_t Mix(uintptr_t a) { return (a >> 4) * 0x9E3779B97F4A7C15ull; }
  Shard& ShardOf(uintptr_t a) { return shards_[(Mix(a) >> 58) & (kShards - 1)]; }
  size_t mask_ = 0;
  Shard shards_[kShards];
};

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_ADDR_TABLE_H_

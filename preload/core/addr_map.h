// AddrMap: the one open-addressing hash map behind memstep's address tables,
// key -> Value, where the key is an address (or a VMM handle) and 0 marks an
// empty slot. Users:
//  - host (ShardedAddrMap, 64 shards): g_big, address -> usable size of the
//    always-recorded big blocks and of sampled blocks from the real allocator
//    (recorder.cc); g_blocks, address -> packed site weight of every tracked
//    sampled block (sites.cc).
//  - device (cuda_account.cc): the pointer table (ShardedAddrMap, 16 shards,
//    address -> DevBlock) and the VMM tables (AddrMap under one lock, handle
//    -> VmmHandle and mapping VA -> VmmMapping).
//
// Contract:
//  - Memory: one RawMmap of 2^bits slots per AddrMap at Init, committed on
//    touch; nothing is allocated after Init and the map never grows. No
//    libstdc++, no exceptions: header-only, usable inside libmemstep.so.
//  - Linear probing from a Fibonacci (multiplicative) hash of the key, with
//    backward-shift deletion (no tombstones): a probe chain ends at the first
//    empty slot.
//  - A new key is refused, nothing changed, when the map would pass 3/4 full;
//    replacing the value of a present key always succeeds.
//  - AddrMap does not lock: its user holds a lock that covers it.
//    ShardedAddrMap puts 2^kShardBits AddrMaps each under its own SpinLock,
//    with LockAll / UnlockAll / ResetLocks for the fork handlers.
//  - Value: a trivially copyable type (an integer or a plain struct).

#ifndef MEMSTEP_PRELOAD_ADDR_MAP_H_
#define MEMSTEP_PRELOAD_ADDR_MAP_H_

#include <stddef.h>
#include <stdint.h>

#include "preload/core/base.h"

namespace memstep::preload {

// What Put did.
enum class PutResult : uint8_t {
  kRefused,   // key 0, no memory, or a new key with the map 3/4 full: nothing changed
  kAdded,     // a new key
  kReplaced,  // the key was present: its value was replaced
};

// Fibonacci hashing: the top bits of key * 2^64/phi are well mixed, also for
// keys whose low bits are all zero (16-byte or 2 MiB aligned addresses).
inline uint64_t AddrHash(uint64_t key) { return key * 0x9E3779B97F4A7C15ull; }

template <typename Value>
class AddrMap {
 public:
  struct Slot {
    uint64_t key;  // 0 = empty
    Value value;
  };

  // 2^bits slots. The home slot of a key is taken from the hash's bits below
  // its top `hash_skip` (ShardedAddrMap picks the shard with those). False if
  // the memory cannot be reserved.
  bool Init(int bits, int hash_skip = 0) {
    bits_ = bits;
    hash_skip_ = hash_skip;
    mask_ = (size_t{1} << bits) - 1;
    count_ = 0;
    slots_ = static_cast<Slot*>(RawMmap(Bytes()));
    return slots_ != nullptr;
  }

  // Commits the slots' pages now (MADV_POPULATE_WRITE, Linux 5.14+; a no-op
  // before), without changing them: safe while other threads use the map.
  // Slots are spread by the hash, so a burst of new keys otherwise takes a
  // page fault for nearly every key until the map's pages are all touched.
  void Populate() {
    if (slots_ != nullptr) RawPopulate(slots_, Bytes());
  }

  // Empties the map onto fresh zero pages (a fork child that starts over).
  void Reset() {
    if (slots_ == nullptr) return;
    RawMunmap(slots_, Bytes());
    Init(bits_, hash_skip_);
  }

  // Inserts key -> value or replaces the value of a present key; *previous
  // (when not null) gets the replaced value.
  PutResult Put(uint64_t key, const Value& value, Value* previous = nullptr) {
    if (slots_ == nullptr || key == 0) return PutResult::kRefused;
    size_t i = Home(key);
    while (slots_[i].key != 0 && slots_[i].key != key) i = (i + 1) & mask_;
    if (slots_[i].key == key) {
      if (previous != nullptr) *previous = slots_[i].value;
      slots_[i].value = value;
      return PutResult::kReplaced;
    }
    if ((count_ + 1) * 4 > (mask_ + 1) * 3) return PutResult::kRefused;
    ++count_;
    slots_[i].key = key;
    slots_[i].value = value;
    return PutResult::kAdded;
  }

  // The value of key, in place (valid until the next Put or Remove); null if absent.
  Value* Find(uint64_t key) {
    if (slots_ == nullptr || key == 0) return nullptr;
    for (size_t i = Home(key); slots_[i].key != 0; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].value;
    }
    return nullptr;
  }

  // Removes key; true and its value in *removed (when not null) if it was present.
  bool Remove(uint64_t key, Value* removed) {
    if (slots_ == nullptr || key == 0) return false;
    size_t hole = Home(key);
    while (slots_[hole].key != key) {
      if (slots_[hole].key == 0) return false;
      hole = (hole + 1) & mask_;
    }
    if (removed != nullptr) *removed = slots_[hole].value;
    // Backward shift: a later slot of the chain moves into the hole unless its
    // home lies cyclically in (hole, j], so every probe chain stays unbroken.
    for (size_t j = (hole + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
      size_t home = Home(slots_[j].key);
      bool between = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!between) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Slot{};
    --count_;
    return true;
  }

  size_t Size() const { return count_; }
  size_t Capacity() const { return slots_ == nullptr ? 0 : mask_ + 1; }

 private:
  size_t Bytes() const { return (mask_ + 1) * sizeof(Slot); }
  size_t Home(uint64_t key) const {
    return static_cast<size_t>((AddrHash(key) << hash_skip_) >> (64 - bits_));
  }

  Slot* slots_ = nullptr;
  size_t mask_ = 0;
  size_t count_ = 0;
  int bits_ = 0;
  int hash_skip_ = 0;
};

// 2^kShardBits AddrMaps, each under its own SpinLock; a key's shard is the
// top kShardBits of its hash, its home slot in the shard the bits below.
template <typename Value, int kShardBits>
class ShardedAddrMap {
 public:
  static constexpr int kShards = 1 << kShardBits;

  // 2^bits slots per shard. False if memory is missing.
  bool Init(int bits) {
    for (Shard& s : shards_) {
      if (!s.map.Init(bits, kShardBits)) return false;
    }
    return true;
  }

  PutResult Put(uint64_t key, const Value& value, Value* previous = nullptr) {
    Shard& s = ShardOf(key);
    SpinLockHolder h(&s.lock);
    return s.map.Put(key, value, previous);
  }
  // Put that only says whether key -> value is now in the map.
  bool Insert(uint64_t key, const Value& value) { return Put(key, value) != PutResult::kRefused; }
  bool Remove(uint64_t key, Value* removed) {
    Shard& s = ShardOf(key);
    SpinLockHolder h(&s.lock);
    return s.map.Remove(key, removed);
  }
  bool Contains(uint64_t key) {
    Shard& s = ShardOf(key);
    SpinLockHolder h(&s.lock);
    return s.map.Find(key) != nullptr;
  }
  // The value of key in *out (a copy); false if absent.
  bool Get(uint64_t key, Value* out) {
    Shard& s = ShardOf(key);
    SpinLockHolder h(&s.lock);
    const Value* v = s.map.Find(key);
    if (v == nullptr) return false;
    *out = *v;
    return true;
  }
  void Populate() {
    for (Shard& s : shards_) s.map.Populate();
  }
  size_t Size() {
    size_t n = 0;
    for (Shard& s : shards_) {
      SpinLockHolder h(&s.lock);
      n += s.map.Size();
    }
    return n;
  }

  // Fork handlers: LockAll before fork, UnlockAll in the parent, ResetLocks
  // (and Reset, to start over empty) in the child.
  void LockAll() {
    for (Shard& s : shards_) s.lock.Lock();
  }
  void UnlockAll() {
    for (int i = kShards - 1; i >= 0; --i) shards_[i].lock.Unlock();
  }
  void ResetLocks() {
    for (Shard& s : shards_) s.lock.Reset();
  }
  void Reset() {  // locks reset or held
    for (Shard& s : shards_) s.map.Reset();
  }

 private:
  struct alignas(64) Shard {
    SpinLock lock;
    AddrMap<Value> map;  // protected by lock
  };
  Shard& ShardOf(uint64_t key) { return shards_[AddrHash(key) >> (64 - kShardBits)]; }

  Shard shards_[kShards];
};

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_ADDR_MAP_H_

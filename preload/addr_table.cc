#include "preload/addr_table.h"

namespace memstep::preload {

bool AddrTable::Init(size_t per_shard) {
  size_t bytes = per_shard * sizeof(Slot) * kShards;
  char* mem = static_cast<char*>(RawMmap(bytes));
  if (mem == nullptr) return false;
  mask_ = per_shard - 1;
  for (int i = 0; i < kShards; ++i) {
    shards_[i].slots = reinterpret_cast<Slot*>(mem + i * per_shard * sizeof(Slot));
    shards_[i].count = 0;
  }
  return true;
}

bool AddrTable::Insert(uintptr_t addr, uint64_t value) {
  if (mask_ == 0 || addr == 0) return false;
  Shard& s = ShardOf(addr);
  SpinLockHolder h(&s.lock);
  if ((s.count + 1) * 4 > (mask_ + 1) * 3) return false;
  size_t i = Mix(addr) & mask_;
  while (s.slots[i].key != 0) {
    if (s.slots[i].key == addr) {
      s.slots[i].value = value;
      return true;
    }
    i = (i + 1) & mask_;
  }
  s.slots[i].key = addr;
  s.slots[i].value = value;
  ++s.count;
  return true;
}

bool AddrTable::Remove(uintptr_t addr, uint64_t* value) {
  if (mask_ == 0) return false;
  Shard& s = ShardOf(addr);
  SpinLockHolder h(&s.lock);
  size_t i = Mix(addr) & mask_;
  while (s.slots[i].key != addr) {
    if (s.slots[i].key == 0) return false;
    i = (i + 1) & mask_;
  }
  *value = s.slots[i].value;
  // Backward-shift deletion keeps every probe chain unbroken.
  size_t hole = i;
  size_t j = i;
  for (;;) {
    j = (j + 1) & mask_;
    if (s.slots[j].key == 0) break;
    size_t home = Mix(s.slots[j].key) & mask_;
    // Move j into the hole if its home is not in (hole, j] cyclically.
    bool between = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!between) {
      s.slots[hole] = s.slots[j];
      hole = j;
    }
  }
  s.slots[hole].key = 0;
  s.slots[hole].value = 0;
  --s.count;
  return true;
}

bool AddrTable::Contains(uintptr_t addr) {
  if (mask_ == 0) return false;
  Shard& s = ShardOf(addr);
  SpinLockHolder h(&s.lock);
  size_t i = Mix(addr) & mask_;
  while (s.slots[i].key != 0) {
    if (s.slots[i].key == addr) return true;
    i = (i + 1) & mask_;
  }
  return false;
}

size_t AddrTable::Size() {
  size_t n = 0;
  for (Shard& s : shards_) {
    SpinLockHolder h(&s.lock);
    n += s.count;
  }
  return n;
}

void AddrTable::LockAll() {
  for (Shard& s : shards_) s.lock.Lock();
}
void AddrTable::UnlockAll() {
  for (int i = kShards - 1; i >= 0; --i) shards_[i].lock.Unlock();
}
void AddrTable::ResetLocks() {
  for (Shard& s : shards_) s.lock.Reset();
}

}  // namespace memstep::preload

// DevMap: the open-addressing map behind memstep's device-memory tables
// (cuda_account.cc): 64-bit keys (0 = empty), two 64-bit values.
//
// Contract: the caller locks; never allocates after Init (one RawMmap of
// 2^bits entries, committed on touch); linear probing with backward-shift
// deletion (no tombstones); Put fails, changing nothing, at 3/4 full.

#ifndef MEMSTEP_PRELOAD_CUDA_TABLE_H_
#define MEMSTEP_PRELOAD_CUDA_TABLE_H_

#include <stddef.h>
#include <stdint.h>

#include "preload/base.h"

namespace memstep::preload::cuda {

class DevMap {
 public:
  struct Entry {
    uint64_t key = 0;  // 0 = empty
    uint64_t a = 0, b = 0;
  };
  bool Init(int bits) {
    bits_ = bits;
    mask_ = (size_t{1} << bits) - 1;
    e_ = static_cast<Entry*>(RawMmap(Bytes()));
    count_ = 0;
    return e_ != nullptr;
  }
  void Reset() {  // fork child: fresh zero pages
    if (e_ == nullptr) return;
    RawMunmap(e_, Bytes());
    Init(bits_);
  }
  // Inserts or replaces; *old gets a replaced entry (key 0 if none). False
  // (nothing changed) when the map is 3/4 full.
  bool Put(uint64_t key, uint64_t a, uint64_t b, Entry* old) {
    old->key = 0;
    if (e_ == nullptr || key == 0) return false;
    size_t i = Home(key);
    while (e_[i].key != 0 && e_[i].key != key) i = (i + 1) & mask_;
    if (e_[i].key == key) {
      *old = e_[i];
    } else {
      if ((count_ + 1) * 4 > (mask_ + 1) * 3) return false;
      ++count_;
    }
    e_[i] = {key, a, b};
    return true;
  }
  Entry* Find(uint64_t key) {
    if (e_ == nullptr || key == 0) return nullptr;
    for (size_t i = Home(key); e_[i].key != 0; i = (i + 1) & mask_) {
      if (e_[i].key == key) return &e_[i];
    }
    return nullptr;
  }
  bool Remove(uint64_t key, Entry* out) {
    Entry* e = Find(key);
    if (e == nullptr) return false;
    *out = *e;
    // Backward-shift deletion keeps probe chains unbroken (no tombstones).
    size_t hole = static_cast<size_t>(e - e_);
    for (size_t j = (hole + 1) & mask_; e_[j].key != 0; j = (j + 1) & mask_) {
      size_t home = Home(e_[j].key);
      bool between = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!between) {
        e_[hole] = e_[j];
        hole = j;
      }
    }
    e_[hole] = {0, 0, 0};
    --count_;
    return true;
  }

 private:
  size_t Bytes() const { return (mask_ + 1) * sizeof(Entry); }
  size_t Home(uint64_t k) const { return (k * 0x9E3779B97F4A7C15ull) >> (64 - bits_); }
  Entry* e_ = nullptr;
  size_t mask_ = 0;
  size_t count_ = 0;
  int bits_ = 0;
};

}  // namespace memstep::preload::cuda

#endif  // MEMSTEP_PRELOAD_CUDA_TABLE_H_

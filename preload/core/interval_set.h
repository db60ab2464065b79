// Live anonymous mappings as a sorted array of disjoint [start, end) ranges,
// for the exact mmap_live_bytes counter (munmap may cut any part of them),
// and the PROT_NONE ones apart (reserved address space, recorder.cc).
//
// Contract: thread-safe (one spinlock; mmap/munmap are rare compared with
// malloc), memory from one raw mmap at Init, never allocates afterwards. When
// full, Add drops the range (the counter then undercounts it).

#ifndef MEMSTEP_PRELOAD_INTERVAL_SET_H_
#define MEMSTEP_PRELOAD_INTERVAL_SET_H_

#include <stddef.h>
#include <stdint.h>

#include "preload/core/base.h"

namespace memstep::preload {

class IntervalSet {
 public:
  bool Init(size_t capacity);
  // Adds [start, end) (replacing any overlap); returns the net change in bytes.
  int64_t Add(uintptr_t start, uintptr_t end);
  // Removes every byte of [start, end); returns the bytes removed.
  uint64_t Remove(uintptr_t start, uintptr_t end);
  // The parts of [start, end) the set holds, in order, at most `cap` of them
  // into `out` as [out[2k], out[2k+1]); returns how many. To go on past
  // `cap`, call again from the last part's end.
  size_t Overlaps(uintptr_t start, uintptr_t end, uintptr_t* out, size_t cap);
  size_t size() const { return n_; }

  void Lock() { lock_.Lock(); }
  void Unlock() { lock_.Unlock(); }
  void ResetLock() { lock_.Reset(); }

 private:
  struct Range {
    uintptr_t start;
    uintptr_t end;
  };
  uint64_t RemoveLocked(uintptr_t start, uintptr_t end);
  size_t LowerBound(uintptr_t end_gt) const;  // first range with end > x

  SpinLock lock_;
  Range* r_ = nullptr;
  size_t n_ = 0;  // protected by lock_
  size_t cap_ = 0;
};

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_INTERVAL_SET_H_

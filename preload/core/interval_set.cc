#include "preload/core/interval_set.h"

#include <string.h>

namespace memstep::preload {

bool IntervalSet::Init(size_t capacity) {
  r_ = static_cast<Range*>(RawMmap(capacity * sizeof(Range)));
  cap_ = r_ == nullptr ? 0 : capacity;
  n_ = 0;
  return r_ != nullptr;
}

size_t IntervalSet::LowerBound(uintptr_t x) const {
  size_t lo = 0, hi = n_;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (r_[mid].end > x) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

uint64_t IntervalSet::RemoveLocked(uintptr_t start, uintptr_t end) {
  uint64_t removed = 0;
  size_t i = LowerBound(start);
  while (i < n_ && r_[i].start < end) {
    Range cur = r_[i];
    uintptr_t lo = cur.start > start ? cur.start : start;
    uintptr_t hi = cur.end < end ? cur.end : end;
    removed += hi - lo;
    bool keep_left = cur.start < start;
    bool keep_right = cur.end > end;
    if (keep_left && keep_right) {
      if (n_ == cap_) {  // cannot split: drop the right part
        r_[i].end = start;
        removed += cur.end - end;
        return removed;
      }
      memmove(&r_[i + 2], &r_[i + 1], (n_ - i - 1) * sizeof(Range));
      r_[i].end = start;
      r_[i + 1].start = end;
      r_[i + 1].end = cur.end;
      ++n_;
      return removed;
    }
    if (keep_left) {
      r_[i].end = start;
      ++i;
    } else if (keep_right) {
      r_[i].start = end;
      ++i;
    } else {
      memmove(&r_[i], &r_[i + 1], (n_ - i - 1) * sizeof(Range));
      --n_;
    }
  }
  return removed;
}

int64_t IntervalSet::Add(uintptr_t start, uintptr_t end) {
  if (start >= end) return 0;
  SpinLockHolder h(&lock_);
  int64_t removed = static_cast<int64_t>(RemoveLocked(start, end));
  if (n_ == cap_) return -removed;
  size_t i = LowerBound(start);
  memmove(&r_[i + 1], &r_[i], (n_ - i) * sizeof(Range));
  r_[i].start = start;
  r_[i].end = end;
  ++n_;
  return static_cast<int64_t>(end - start) - removed;
}

uint64_t IntervalSet::Remove(uintptr_t start, uintptr_t end) {
  if (start >= end) return 0;
  SpinLockHolder h(&lock_);
  return RemoveLocked(start, end);
}

size_t IntervalSet::Overlaps(uintptr_t start, uintptr_t end, uintptr_t* out, size_t cap) {
  if (start >= end) return 0;
  SpinLockHolder h(&lock_);
  size_t k = 0;
  for (size_t i = LowerBound(start); i < n_ && r_[i].start < end && k < cap; ++i, ++k) {
    out[2 * k] = r_[i].start > start ? r_[i].start : start;
    out[2 * k + 1] = r_[i].end < end ? r_[i].end : end;
  }
  return k;
}

}  // namespace memstep::preload

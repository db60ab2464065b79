#include "preload/core/region.h"

#include <string.h>

namespace memstep::preload {

void Region::Init(char* base, size_t size) {
  base_ = base;
  size_ = size;
  boot_size_ = size < kBootstrapBytes ? size : kBootstrapBytes;
  boot_used_.store(0, std::memory_order_relaxed);
  live_bytes_.store(0, std::memory_order_relaxed);
  span_ = 0;
  spans_begin_ = 0;
  spans_size_ = 0;
  if (size <= kBootstrapBytes) return;
  // Each span needs span bytes of blocks plus span/16*4 (class 0) + ... of
  // metadata; 17 spans + span/2 of metadata fit in (size - bootstrap).
  size_t avail = size - kBootstrapBytes;
  size_t span = kMaxBlock;
  while ((span * 2) * kNumClasses + span < avail) span *= 2;
  if (span * kNumClasses + span / 2 > avail) return;  // too small: bootstrap only
  span_ = span;
  spans_begin_ = reinterpret_cast<uintptr_t>(base) + kBootstrapBytes;
  spans_size_ = span * kNumClasses;
  char* meta = base + kBootstrapBytes + spans_size_;
  for (int c = 0; c < kNumClasses; ++c) {
    Class& k = classes_[c];
    k.begin = base + kBootstrapBytes + span * c;
    k.carved = 0;
    k.free_list = nullptr;
    k.meta = reinterpret_cast<uint32_t*>(meta);
    meta += (span >> (kMinShift + c)) * sizeof(uint32_t);
  }
}

void* Region::BootstrapAlloc(size_t size, size_t align) {
  if (align < 16) align = 16;
  size_t used = boot_used_.load(std::memory_order_relaxed);
  for (;;) {
    // 16-byte header before the block holds its size.
    size_t start = (used + 16 + align - 1) & ~(align - 1);
    size_t end = start + ((size + 15) & ~size_t{15});
    if (end > boot_size_ || end < start) return nullptr;
    if (boot_used_.compare_exchange_weak(used, end, std::memory_order_relaxed)) {
      uint64_t sz = size;
      memcpy(base_ + start - 8, &sz, sizeof(sz));
      return base_ + start;
    }
  }
}

int Region::ClassOf(size_t size, size_t align) {
  size_t need = size > align ? size : align;
  if (need > kMaxBlock) return -1;
  if (need <= (size_t{1} << kMinShift)) return 0;
  int shift = 64 - __builtin_clzll(static_cast<unsigned long long>(need - 1));
  return shift - kMinShift;
}

void* Region::Alloc(size_t size, size_t align) {
  if (span_ == 0) return nullptr;
  int c = ClassOf(size, align);
  if (c < 0) return nullptr;
  Class& k = classes_[c];
  size_t block = size_t{1} << (kMinShift + c);
  void* p;
  {
    SpinLockHolder h(&k.lock);
    if (k.free_list != nullptr) {
      p = k.free_list;
      k.free_list = *static_cast<void**>(p);
    } else {
      if (k.carved + block > span_) return nullptr;
      p = k.begin + k.carved;
      k.carved += block;
    }
    size_t idx = static_cast<size_t>(static_cast<char*>(p) - k.begin) >> (kMinShift + c);
    k.meta[idx] = static_cast<uint32_t>(size) + 1;
  }
  live_bytes_.fetch_add(size, std::memory_order_relaxed);
  return p;
}

size_t Region::RequestedSize(const void* p) const {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (IsBootstrap(p)) {
    uint64_t sz;
    memcpy(&sz, static_cast<const char*>(p) - 8, sizeof(sz));
    return sz;
  }
  if (!InSpans(a)) return 0;
  size_t off = a - spans_begin_;
  int c = static_cast<int>(off / span_);
  const Class& k = classes_[c];
  size_t idx = (off - span_ * c) >> (kMinShift + c);
  uint32_t m = __atomic_load_n(&k.meta[idx], __ATOMIC_RELAXED);
  return m == 0 ? 0 : m - 1;
}

bool Region::Free(void* p, size_t* requested) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (!InSpans(a)) return false;  // bootstrap block or outside: never reused
  size_t off = a - spans_begin_;
  int c = static_cast<int>(off / span_);
  Class& k = classes_[c];
  size_t block_off = off - span_ * c;
  if ((block_off & ((size_t{1} << (kMinShift + c)) - 1)) != 0) return false;  // interior
  size_t idx = block_off >> (kMinShift + c);
  SpinLockHolder h(&k.lock);
  uint32_t m = k.meta[idx];
  if (m == 0) return false;  // double free: ignore rather than corrupt the list
  k.meta[idx] = 0;
  *static_cast<void**>(p) = k.free_list;
  k.free_list = p;
  *requested = m - 1;
  live_bytes_.fetch_sub(m - 1, std::memory_order_relaxed);
  return true;
}

void Region::LockAll() {
  for (Class& k : classes_) k.lock.Lock();
}
void Region::UnlockAll() {
  for (int c = kNumClasses - 1; c >= 0; --c) classes_[c].lock.Unlock();
}
void Region::ResetLocks() {
  for (Class& k : classes_) k.lock.Reset();
}

}  // namespace memstep::preload

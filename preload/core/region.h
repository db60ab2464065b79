// The sampled-block region: memstep serves every sampled allocation below
// S_always from one virtual range it owns, so that free() can tell "was this
// sampled?" with one subtraction and one compare, with no table lookup.
//
// Layout of [base, base + size) (base 1 MiB aligned):
//   bootstrap area (1 MiB): bump allocator for allocations made while the
//     real allocator is unknown (inside dlsym); its blocks are never reused.
//   17 class spans of span_ bytes each: class c serves blocks of 16 << c bytes
//     (16 B .. 1 MiB), naturally aligned to their size, so any alignment up to
//     the class size is honoured.
//   per-class metadata: one u32 per block (requested size + 1; 0 = free),
//     never in the user's bytes.
// Free blocks are kept on per-class intrusive free lists (the link lives in
// the freed block), protected by one spinlock per class. This is the slow
// path: only sampled allocations get here.
//
// Contract: no allocation from the hooked heap (memory is the caller's
// reservation, touched on demand); thread-safe; Alloc returns nullptr when the
// size/alignment cannot be served or the class span is exhausted (the caller
// then falls back to the real allocator). Testable standalone.

#ifndef MEMSTEP_PRELOAD_REGION_H_
#define MEMSTEP_PRELOAD_REGION_H_

#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "preload/core/base.h"

namespace memstep::preload {

class Region {
 public:
  static constexpr int kNumClasses = 17;
  static constexpr int kMinShift = 4;                   // 16 bytes
  static constexpr size_t kMaxBlock = size_t{1} << 20;  // 1 MiB
  static constexpr size_t kBootstrapBytes = size_t{1} << 20;
  static constexpr size_t kAlign = size_t{1} << 20;

  // Lays the region out over [base, base + size). `base` must be kAlign
  // aligned. A region smaller than the bootstrap area plus one 1 MiB span per
  // class has a bootstrap area only (Alloc always fails). Not thread-safe.
  void Init(char* base, size_t size);

  uintptr_t base() const { return reinterpret_cast<uintptr_t>(base_); }
  size_t size() const { return size_; }
  size_t span() const { return span_; }
  bool Contains(const void* p) const { return reinterpret_cast<uintptr_t>(p) - base() < size_; }
  bool IsBootstrap(const void* p) const {
    return reinterpret_cast<uintptr_t>(p) - base() < boot_size_;
  }

  // Bump allocation from the bootstrap area (zeroed memory, never reused).
  void* BootstrapAlloc(size_t size, size_t align);

  // A block of at least `size` bytes aligned to `align` (a power of two), or
  // nullptr. Records `size` as the block's requested size.
  void* Alloc(size_t size, size_t align);

  // Requested size of a live block (bootstrap blocks: their size).
  size_t RequestedSize(const void* p) const;

  // Releases a live block and stores its requested size. Bootstrap blocks and
  // blocks that are not live (double free) are ignored (returns false).
  bool Free(void* p, size_t* requested);

  // Requested bytes of the live blocks (bootstrap blocks excluded): the
  // program's data the region holds. Relaxed: a statistic.
  size_t LiveBytes() const { return live_bytes_.load(std::memory_order_relaxed); }

  // Calls f(start, len) for each part of the region that may be resident: the
  // bootstrap area used so far, each class's carved blocks and their
  // metadata (reads `carved` without the class locks: a statistic).
  template <typename F>
  void ForEachUsedRange(F f) const {
    f(reinterpret_cast<uintptr_t>(base_), boot_used_.load(std::memory_order_relaxed));
    for (int c = 0; c < kNumClasses && span_ != 0; ++c) {
      const Class& k = classes_[c];
      const size_t carved = __atomic_load_n(&k.carved, __ATOMIC_RELAXED);
      if (carved == 0) continue;
      f(reinterpret_cast<uintptr_t>(k.begin), carved);
      f(reinterpret_cast<uintptr_t>(k.meta), (carved >> (kMinShift + c)) * sizeof(uint32_t));
    }
  }

  // Class of a request, or -1 if it does not fit a class.
  static int ClassOf(size_t size, size_t align);

  // Fork support: all class locks, in a fixed order.
  void LockAll();
  void UnlockAll();
  void ResetLocks();

 private:
  struct Class {
    SpinLock lock;
    char* begin = nullptr;      // first block
    size_t carved = 0;          // bytes carved by the bump pointer; protected by lock
    void* free_list = nullptr;  // protected by lock
    uint32_t* meta = nullptr;   // requested size + 1 per block index
  };
  bool InSpans(uintptr_t a) const { return a - spans_begin_ < spans_size_; }

  char* base_ = nullptr;
  size_t size_ = 0;
  size_t boot_size_ = 0;
  std::atomic<size_t> boot_used_{0};
  std::atomic<size_t> live_bytes_{0};  // requested bytes of live class blocks
  size_t span_ = 0;
  uintptr_t spans_begin_ = 0;
  size_t spans_size_ = 0;
  Class classes_[kNumClasses];
};

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_REGION_H_

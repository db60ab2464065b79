// The dictionary: interned stacks and strings, and the append-only log of
// dictionary records (kTagString, kTagStack, kTagMapping, kTagMappingGone)
// that the writer drains into dict chunks.
//
// Contract:
//  - Lookups of known stacks/strings are lock-free: a slot's hash is published
//    with a release store after its other fields, and read with acquire.
//  - A new entry takes lock_ briefly: it appends the definition record to the
//    log and then publishes the slot, so a definition is always in the log
//    before the id can be used by any record (the writer's cycle order then
//    guarantees definitions precede use in the file).
//  - The log is never truncated: a fork child re-emits it from offset 0, so
//    its own trace defines every id it inherited.
//  - Memory: raw mmap at Init (virtual, committed on touch), never the hooked
//    heap. When a table or the log is full, Intern* returns 0 ("none").

#ifndef MEMSTEP_PRELOAD_DICTIONARY_H_
#define MEMSTEP_PRELOAD_DICTIONARY_H_

#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "preload/core/base.h"

namespace memstep::preload {

class Dictionary {
 public:
  static constexpr size_t kMaxStringLen = 4096;
  static constexpr uint32_t kMaxFrames = 64;

  bool Init(size_t log_bytes, size_t stack_slots, size_t string_slots);

  // Stack id (>= 1) of the frame array, or 0 when full / n == 0.
  uint32_t InternStack(const uint64_t* ips, uint32_t n);
  // String id (>= 1), or 0 when full. The empty string is id 0.
  uint32_t InternString(const char* s, size_t n);
  // Appends a complete dictionary record (mappings). False when full.
  bool AppendRecord(const uint8_t* rec, size_t n);

  // The log: records stored as u32 length + bytes. Bytes below End() are
  // immutable. End() is an acquire load.
  size_t End() const { return log_end_.load(std::memory_order_acquire); }
  const uint8_t* log() const { return log_; }

  size_t stack_count() const { return stack_count_; }
  size_t string_count() const { return string_count_; }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

  void Lock() { lock_.Lock(); }
  void Unlock() { lock_.Unlock(); }
  void ResetLock() { lock_.Reset(); }

 private:
  struct Slot {
    std::atomic<uint64_t> hash;  // 0 = empty; published last (release)
    uint32_t id;
    uint32_t len;  // frames (stacks) or bytes (strings)
    uint64_t off;  // into pool_
  };
  bool AppendLocked(const uint8_t* rec, size_t n);  // lock_ held
  uint32_t Intern(Slot* slots, size_t mask, size_t* count, uint32_t* next_id, bool is_stack,
                  const void* data, size_t bytes, uint32_t len);

  SpinLock lock_;
  uint8_t* log_ = nullptr;
  size_t log_cap_ = 0;
  std::atomic<size_t> log_end_{0};  // written under lock_
  uint8_t* pool_ = nullptr;         // frame arrays and string bytes
  size_t pool_cap_ = 0;
  size_t pool_used_ = 0;  // protected by lock_
  Slot* stacks_ = nullptr;
  size_t stack_mask_ = 0;
  size_t stack_count_ = 0;      // protected by lock_
  uint32_t next_stack_id_ = 1;  // protected by lock_
  Slot* strings_ = nullptr;
  size_t string_mask_ = 0;
  size_t string_count_ = 0;      // protected by lock_
  uint32_t next_string_id_ = 1;  // protected by lock_
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_DICTIONARY_H_

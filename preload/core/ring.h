// Per-thread single-producer single-consumer byte ring of complete records.
//
// Contract: the owning thread is the only producer (Push); the consumer is
// whoever holds the writer's flush lock (the writer thread, or the final flush
// at exit). Push never blocks and never allocates: when the record does not
// fit it is dropped and counted (reported later as kTagLost). head and tail
// are free-running byte counters; head is published with release after the
// bytes, so a consumer that loads head with acquire sees whole records only.
// Memory: one raw mmap per ring (struct + data), reused after its thread
// exits and the writer has drained it.

#ifndef MEMSTEP_PRELOAD_RING_H_
#define MEMSTEP_PRELOAD_RING_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <atomic>

#include "preload/core/base.h"

namespace memstep::preload {

struct Ring {
  static constexpr size_t kCap = size_t{256} << 10;  // power of two
  enum State : uint32_t { kFree = 0, kActive = 1, kExited = 2 };

  alignas(64) std::atomic<uint64_t> head{0};  // written by the producer
  alignas(64) std::atomic<uint64_t> tail{0};  // written by the consumer
  std::atomic<uint64_t> lost_records{0};      // producer increments
  std::atomic<uint64_t> lost_bytes{0};
  std::atomic<uint32_t> state{kFree};
  uint32_t tid = 0;
  uint64_t reported_records = 0;  // consumer-owned
  uint64_t reported_bytes = 0;
  uint8_t* data = nullptr;

  bool Push(const uint8_t* rec, size_t n) {
    if (TryPush(rec, n)) return true;
    CountLost(n);
    return false;
  }

  void CountLost(size_t n) {
    lost_records.fetch_add(1, std::memory_order_relaxed);
    lost_bytes.fetch_add(n, std::memory_order_relaxed);
  }

  // Like Push, but a record that does not fit is neither written nor counted.
  bool TryPush(const uint8_t* rec, size_t n) {
    uint64_t h = head.load(std::memory_order_relaxed);
    uint64_t t = tail.load(std::memory_order_acquire);
    if (h + n - t > kCap) return false;
    size_t pos = static_cast<size_t>(h & (kCap - 1));
    size_t first = kCap - pos < n ? kCap - pos : n;
    memcpy(data + pos, rec, first);
    memcpy(data, rec + first, n - first);
    head.store(h + n, std::memory_order_release);
    return true;
  }

  // Bytes waiting for the consumer (approximate from the producer's side).
  size_t Used() const {
    return static_cast<size_t>(head.load(std::memory_order_relaxed) -
                               tail.load(std::memory_order_relaxed));
  }

  // Consumer: copies bytes [from, to) out (to - from <= kCap).
  void CopyOut(uint64_t from, uint64_t to, uint8_t* out) const {
    size_t n = static_cast<size_t>(to - from);
    size_t pos = static_cast<size_t>(from & (kCap - 1));
    size_t first = kCap - pos < n ? kCap - pos : n;
    memcpy(out, data + pos, first);
    memcpy(out + first, data, n - first);
  }

  // Reuse by a new thread. head and tail keep running (they are equal: the
  // ring was drained), so a consumer holding a stale head snapshot still sees
  // a consistent [tail, head) range; lost counters stay cumulative (the
  // consumer reports deltas).
  void Reuse(uint32_t owner) { tid = owner; }

  // Fork child only (no consumer is running): drops undrained records.
  void DropAll(uint32_t owner) {
    tail.store(head.load(std::memory_order_relaxed), std::memory_order_relaxed);
    reported_records = lost_records.load(std::memory_order_relaxed);
    reported_bytes = lost_bytes.load(std::memory_order_relaxed);
    tid = owner;
  }
};

// The kept lane: one process-wide byte queue for the records that must reach
// the trace even when their thread's ring is full (a writer starved on a
// loaded machine): step, stage, epoch, counter, alert, snapshot and the other
// control records, frees and unmaps (a lost free would leave its block live
// forever: a false leak), mappings and device records (device totals are
// exact). Only sampled ALLOC records are ever dropped for a full ring.
//
// Contract: producers (any thread) append under `lock`, which is held only
// for the copy, never while waiting: a producer never waits for the writer
// (it may hold g_api_lock, which the writer's time windows take). Entries are
// u32 length + one complete record, so the consumer (the flush cycle, under
// flush_mu) appends them to chunks one record at a time. head is published
// with release after the bytes. When the lane is full too (the writer has not
// run for a long time: 16 MiB is ~100,000 step records), the record is counted
// in lost_records (a LOST record with cause 3) and the producer goes on.
// Memory: one raw mmap made when recording starts (virtual until touched).
struct KeptLane {
  static constexpr size_t kCap = size_t{16} << 20;  // power of two

  SpinLock lock;                          // producers
  std::atomic<uint64_t> head{0};          // producers, under lock
  std::atomic<uint64_t> tail{0};          // the consumer
  std::atomic<uint64_t> lost_records{0};  // producers
  std::atomic<uint64_t> lost_bytes{0};
  uint64_t reported_records = 0;  // consumer-owned
  uint64_t reported_bytes = 0;
  uint8_t* data = nullptr;

  static constexpr size_t kMaxRecord = size_t{64} << 10;

  // Appends the record; false when it does not fit (nothing written, nothing
  // counted: see CountLost).
  bool TryPush(const uint8_t* rec, size_t n) {
    if (data == nullptr || n > kMaxRecord) return false;
    const uint32_t len = static_cast<uint32_t>(n);
    SpinLockHolder hold(&lock);
    uint64_t h = head.load(std::memory_order_relaxed);
    uint64_t t = tail.load(std::memory_order_acquire);
    if (h + 4 + n - t > kCap) return false;
    Put(h, reinterpret_cast<const uint8_t*>(&len), 4);
    Put(h + 4, rec, n);
    head.store(h + 4 + n, std::memory_order_release);
    return true;
  }

  void CountLost(size_t n) {
    lost_records.fetch_add(1, std::memory_order_relaxed);
    lost_bytes.fetch_add(n, std::memory_order_relaxed);
  }

  // Consumer: copies n bytes at counter `from` out.
  void Get(uint64_t from, uint8_t* out, size_t n) const {
    size_t pos = static_cast<size_t>(from & (kCap - 1));
    size_t first = kCap - pos < n ? kCap - pos : n;
    memcpy(out, data + pos, first);
    memcpy(out + first, data, n - first);
  }

  // Fork child only (no consumer, no other producer): drops undrained records.
  void DropAll() {
    lock.Reset();
    tail.store(head.load(std::memory_order_relaxed), std::memory_order_relaxed);
    reported_records = lost_records.load(std::memory_order_relaxed);
    reported_bytes = lost_bytes.load(std::memory_order_relaxed);
  }

 private:
  void Put(uint64_t at, const uint8_t* p, size_t n) {
    size_t pos = static_cast<size_t>(at & (kCap - 1));
    size_t first = kCap - pos < n ? kCap - pos : n;
    memcpy(data + pos, p, first);
    memcpy(data, p + first, n - first);
  }
};

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_RING_H_

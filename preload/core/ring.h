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

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_RING_H_

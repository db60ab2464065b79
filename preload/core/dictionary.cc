#include "preload/core/dictionary.h"

#include <string.h>

#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

bool Dictionary::Init(size_t log_bytes, size_t stack_slots, size_t string_slots) {
  log_ = static_cast<uint8_t*>(RawMmap(log_bytes));
  pool_cap_ = log_bytes;
  pool_ = static_cast<uint8_t*>(RawMmap(pool_cap_));
  stacks_ = static_cast<Slot*>(RawMmap(stack_slots * sizeof(Slot)));
  strings_ = static_cast<Slot*>(RawMmap(string_slots * sizeof(Slot)));
  if (log_ == nullptr || pool_ == nullptr || stacks_ == nullptr || strings_ == nullptr) {
    log_cap_ = 0;
    return false;
  }
  log_cap_ = log_bytes;
  stack_mask_ = stack_slots - 1;
  string_mask_ = string_slots - 1;
  return true;
}

bool Dictionary::AppendLocked(const uint8_t* rec, size_t n) {
  size_t end = log_end_.load(std::memory_order_relaxed);
  if (log_cap_ == 0 || end + 4 + n > log_cap_) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  uint32_t len = static_cast<uint32_t>(n);
  memcpy(log_ + end, &len, 4);
  memcpy(log_ + end + 4, rec, n);
  log_end_.store(end + 4 + n, std::memory_order_release);
  return true;
}

bool Dictionary::AppendRecord(const uint8_t* rec, size_t n) {
  SpinLockHolder h(&lock_);
  return AppendLocked(rec, n);
}

uint32_t Dictionary::Intern(Slot* slots, size_t mask, size_t* count, uint32_t* next_id,
                            bool is_stack, const void* data, size_t bytes, uint32_t len) {
  if (log_cap_ == 0) return 0;
  uint64_t hash = HashBytes(data, bytes, is_stack ? 1 : 2);
  if (hash == 0) hash = 1;
  // Lock-free probe: published slots are immutable.
  size_t i = hash & mask;
  for (;;) {
    uint64_t h = slots[i].hash.load(std::memory_order_acquire);
    if (h == 0) break;
    if (h == hash && slots[i].len == len && memcmp(pool_ + slots[i].off, data, bytes) == 0) {
      return slots[i].id;
    }
    i = (i + 1) & mask;
  }
  SpinLockHolder lock(&lock_);
  // Re-probe under the lock: another thread may have inserted it meanwhile.
  i = hash & mask;
  for (;;) {
    uint64_t h = slots[i].hash.load(std::memory_order_relaxed);
    if (h == 0) break;
    if (h == hash && slots[i].len == len && memcmp(pool_ + slots[i].off, data, bytes) == 0) {
      return slots[i].id;
    }
    i = (i + 1) & mask;
  }
  if ((*count + 1) * 4 > (mask + 1) * 3 || pool_used_ + bytes + 8 > pool_cap_) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  uint32_t id = *next_id;
  // Definition record first.
  uint8_t rec[16 + kMaxFrames * fmt::kMaxVarint + kMaxStringLen];
  fmt::RecordEncoder e(rec, sizeof(rec));
  bool encoded;
  if (is_stack) {
    fmt::StackRecord def;
    def.id = id;
    def.ips.values = static_cast<const uint64_t*>(data);
    def.ips.count = len;
    encoded = fmt::Encode(e, def);
  } else {
    fmt::StringRecord def;  // len == bytes for a string
    def.id = id;
    def.text = fmt::ByteView{static_cast<const uint8_t*>(data), bytes};
    encoded = fmt::Encode(e, def);
  }
  if (!encoded || !AppendLocked(rec, e.size())) return 0;
  size_t off = (pool_used_ + 7) & ~size_t{7};
  memcpy(pool_ + off, data, bytes);
  pool_used_ = off + bytes;
  slots[i].id = id;
  slots[i].len = len;
  slots[i].off = off;
  slots[i].hash.store(hash, std::memory_order_release);
  ++*count;
  ++*next_id;
  return id;
}

uint32_t Dictionary::InternStack(const uint64_t* ips, uint32_t n) {
  if (n == 0) return 0;
  if (n > kMaxFrames) n = kMaxFrames;
  return Intern(stacks_, stack_mask_, &stack_count_, &next_stack_id_, true, ips,
                n * sizeof(uint64_t), n);
}

uint32_t Dictionary::InternString(const char* s, size_t n) {
  if (n == 0) return 0;
  if (n > kMaxStringLen) n = kMaxStringLen;
  return Intern(strings_, string_mask_, &string_count_, &next_string_id_, false, s, n,
                static_cast<uint32_t>(n));
}

}  // namespace memstep::preload

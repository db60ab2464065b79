// TraceBuilder: writes memstep traces in memory with the record encoders of
// src/format/records.h (the ones preload/ uses), for the tests and
// the worked example of docs/format.md. Not used by the profiler itself
// (preload/ has its own writer).
//
// Contract: produces byte-exact traces of the current version (header, TLVs, header CRC,
// chunks with CRC-32C, raw or zstd payloads). Sequenced records get
// consecutive `seq` numbers from 0 unless set_next_seq() says otherwise.
// Records accumulate in the current chunk until Flush(); a chunk holds at most
// kMaxChunkRawLen bytes (it is flushed automatically when full).

#ifndef MEMSTEP_TESTS_UNIT_TRACE_BUILDER_H_
#define MEMSTEP_TESTS_UNIT_TRACE_BUILDER_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::reader {

struct TraceHeaderInfo {
  uint32_t pid = 100;
  uint32_t ppid = 1;
  uint32_t flags = format::kFlagGlibcMalloc;
  uint64_t start_mono_ns = 1000;
  uint64_t start_real_ns = 1700000000000000000ull;
  uint64_t sample_interval = 0;
  uint64_t always_bytes = 1 << 20;
  uint16_t version_major = format::kVersionMajor;
  std::vector<std::pair<uint16_t, std::string>> tlvs;  // written in order, then END
};

// The value of a kTlvProfiler header TLV: start and end (u64,
// little-endian), then the build-id bytes.
std::string ProfilerTlv(uint64_t start, uint64_t end, const std::string& build_id);

class TraceBuilder {
 public:
  explicit TraceBuilder(const TraceHeaderInfo& info = {}, uint8_t codec = format::kCodecZstd);

  void set_next_seq(uint64_t seq) { seq_ = seq; }
  void set_codec(uint8_t codec) { codec_ = codec; }

  void String(uint64_t id, const std::string& s);
  void Mapping(uint64_t id, uint64_t ts, uint64_t start, uint64_t end, uint64_t load_bias,
               uint64_t path_str, const std::string& build_id);
  void MappingGone(uint64_t id, uint64_t ts);
  void Stack(uint64_t id, const std::vector<uint64_t>& ips);
  void Alloc(uint64_t ts, uint64_t stack, uint64_t addr, uint64_t size, uint64_t interval = 0,
             uint64_t kind = 0, uint64_t step = 0, uint64_t stage_str = 0, uint64_t tid = 1);
  void Free(uint64_t ts, uint64_t addr, uint64_t tid = 1);
  void Mmap(uint64_t ts, uint64_t stack, uint64_t addr, uint64_t len, uint64_t step = 0,
            uint64_t stage_str = 0, uint64_t tid = 1);
  void Munmap(uint64_t ts, uint64_t addr, uint64_t len, uint64_t tid = 1);
  void Mremap(uint64_t ts, uint64_t stack, uint64_t old_addr, uint64_t old_len, uint64_t new_addr,
              uint64_t new_len, uint64_t tid = 1);
  // A sampled allocation with p = 1 unless told (`sampled` false: counted
  // only, as the library writes the allocations its sampler skipped).
  void DevAlloc(uint64_t ts, uint64_t stack, uint8_t kind, int32_t device, uint64_t addr,
                uint64_t size, uint8_t api, uint64_t aux = 0, uint64_t step = 0,
                uint64_t stage_str = 0, uint64_t tid = 1, uint64_t interval = 0,
                bool sampled = true);
  void MemSnapshot(uint64_t ts, uint8_t cause, int32_t device, uint64_t requested,
                   uint64_t free_bytes, uint64_t total_bytes, uint64_t step = 0,
                   uint64_t stage_str = 0, uint8_t api = 0, uint64_t error = 0);
  void DevFree(uint64_t ts, uint8_t kind, int32_t device, uint64_t addr, uint64_t size, uint8_t api,
               uint64_t tid = 1);
  void DevFail(uint64_t ts, uint64_t stack, uint8_t kind, int32_t device, uint64_t size,
               uint8_t api, uint64_t error, uint64_t step = 0, uint64_t stage_str = 0,
               uint64_t tid = 1);
  void DevInfo(uint64_t ts, uint64_t step, int32_t device, uint64_t free_bytes,
               uint64_t total_bytes, uint64_t pool_reserved = 0, uint64_t pool_used = 0);
  void Step(uint64_t ts, uint64_t step, int phase, const format::Counters& c, uint64_t tid = 1);
  void Stage(uint64_t ts, uint64_t stage_str, uint64_t step, int phase, const format::Counters& c,
             uint64_t tid = 1);
  void Counter(uint64_t ts, uint64_t name_str, int64_t value, uint64_t tid = 1);
  void Rate(uint64_t ts, uint64_t interval);
  void Epoch(uint64_t ts, uint64_t epoch, uint64_t tid = 1);
  void Alert(uint64_t ts, uint64_t step, uint8_t rule, uint64_t value, uint64_t threshold,
             uint64_t stage_str = 0, uint64_t site_stack = 0);
  // sites: {stack, live_bytes_est, live_count_est}.
  void SiteSnapshot(uint64_t ts, uint64_t step, uint8_t cause, uint64_t stage_str,
                    const std::vector<std::array<uint64_t, 3>>& sites);
  void Lost(uint64_t ts, uint64_t records, uint64_t bytes, uint64_t cause);
  void Notice(uint64_t ts, uint64_t code, uint64_t message_str);
  void Trailer(uint64_t ts, const format::Counters& c, bool clean_exit);
  // Appends any record as it is (seq included): for fields the helpers above
  // do not take.
  template <typename R>
  void Put(const R& record, size_t max_bytes = 512) {
    Reserve(max_bytes);
    format::Encode(enc_, record);
  }
  // Appends raw record bytes (for malformed-input tests).
  void RawBytes(const std::vector<uint8_t>& bytes);

  // Ends the current chunk (no-op when empty).
  void Flush(uint8_t kind = format::kChunkData);
  // Flushes and returns the whole file so far.
  const std::vector<uint8_t>& Finish();
  // Byte offsets where each chunk starts (after Finish()).
  const std::vector<size_t>& chunk_offsets() const { return chunk_offsets_; }
  size_t header_len() const { return header_len_; }

 private:
  void Reserve(size_t bytes);  // flushes first when the chunk lacks room
  uint64_t NextSeq() { return seq_++; }

  std::vector<uint8_t> out_;
  std::vector<uint8_t> buf_;
  format::RecordEncoder enc_;
  std::vector<size_t> chunk_offsets_;
  size_t header_len_ = 0;
  uint8_t codec_;
  uint32_t chunk_seq_ = 0;
  uint64_t seq_ = 0;
};

}  // namespace memstep::reader

#endif  // MEMSTEP_TESTS_UNIT_TRACE_BUILDER_H_

#include "src/reader/trace_builder.h"

#include <zstd.h>

#include <cstring>

namespace memstep::reader {

using format::RecordEncoder;

namespace {
void Append(std::vector<uint8_t>& out, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
}  // namespace

TraceBuilder::TraceBuilder(const TraceHeaderInfo& info, uint8_t codec)
    : buf_(format::kMaxChunkRawLen), enc_(buf_.data(), buf_.size()), codec_(codec) {
  format::FileHeader h{};
  memcpy(h.magic, format::kFileMagic, sizeof(h.magic));
  h.version_major = info.version_major;
  h.version_minor = format::kVersionMinor;
  h.start_mono_ns = info.start_mono_ns;
  h.start_real_ns = info.start_real_ns;
  h.pid = info.pid;
  h.ppid = info.ppid;
  h.page_size = 4096;
  h.flags = info.flags;
  h.sample_interval = info.sample_interval;
  h.always_bytes = info.always_bytes;
  std::vector<uint8_t> tlvs;
  auto put_tlv = [&](uint16_t type, const std::string& v) {
    uint32_t len = static_cast<uint32_t>(v.size());
    Append(tlvs, &type, 2);
    Append(tlvs, &len, 4);
    Append(tlvs, v.data(), v.size());
  };
  for (const auto& [type, value] : info.tlvs) put_tlv(type, value);
  put_tlv(format::kTlvEnd, "");
  h.header_len = static_cast<uint32_t>(sizeof(h) + tlvs.size() + 4);
  Append(out_, &h, sizeof(h));
  Append(out_, tlvs.data(), tlvs.size());
  uint32_t crc = format::Crc32c(out_.data(), out_.size());
  Append(out_, &crc, 4);
  header_len_ = out_.size();
}

RecordEncoder& TraceBuilder::Begin(uint8_t tag) {
  // Worst-case record: 64 frames of 10 bytes plus a few fields.
  if (enc_.size() + 2048 > buf_.size()) Flush();
  enc_.Begin(tag);
  return enc_;
}

void TraceBuilder::End() { enc_.End(); }

void TraceBuilder::String(uint64_t id, const std::string& s) {
  auto& e = Begin(format::kTagString);
  e.U(id);
  e.U(s.size());
  e.Bytes(s.data(), s.size());
  End();
}

void TraceBuilder::Mapping(uint64_t id, uint64_t ts, uint64_t start, uint64_t end,
                           uint64_t load_bias, uint64_t path_str, const std::string& build_id) {
  auto& e = Begin(format::kTagMapping);
  e.U(id); e.U(ts); e.U(start); e.U(end); e.U(load_bias); e.U(path_str);
  e.U(build_id.size());
  e.Bytes(build_id.data(), build_id.size());
  End();
}

void TraceBuilder::MappingGone(uint64_t id, uint64_t ts) {
  auto& e = Begin(format::kTagMappingGone);
  e.U(id); e.U(ts);
  End();
}

void TraceBuilder::Stack(uint64_t id, const std::vector<uint64_t>& ips) {
  auto& e = Begin(format::kTagStack);
  e.U(id);
  e.U(ips.size());
  for (uint64_t ip : ips) e.U(ip);
  End();
}

void TraceBuilder::Alloc(uint64_t ts, uint64_t stack, uint64_t addr, uint64_t size,
                         uint64_t interval, uint64_t kind, uint64_t step, uint64_t stage_str,
                         uint64_t tid) {
  auto& e = Begin(format::kTagAlloc);
  e.U(ts); e.U(NextSeq()); e.U(tid); e.U(stack); e.U(addr); e.U(size); e.U(interval);
  e.U(kind); e.U(step); e.U(stage_str);
  End();
}

void TraceBuilder::Free(uint64_t ts, uint64_t addr, uint64_t tid) {
  auto& e = Begin(format::kTagFree);
  e.U(ts); e.U(NextSeq()); e.U(tid); e.U(addr);
  End();
}

void TraceBuilder::Mmap(uint64_t ts, uint64_t stack, uint64_t addr, uint64_t len, uint64_t step,
                        uint64_t stage_str, uint64_t tid) {
  auto& e = Begin(format::kTagMmap);
  e.U(ts); e.U(NextSeq()); e.U(tid); e.U(stack); e.U(addr); e.U(len);
  e.U(3);     // PROT_READ | PROT_WRITE
  e.U(0x22);  // MAP_PRIVATE | MAP_ANONYMOUS
  e.U(step); e.U(stage_str);
  End();
}

void TraceBuilder::Munmap(uint64_t ts, uint64_t addr, uint64_t len, uint64_t tid) {
  auto& e = Begin(format::kTagMunmap);
  e.U(ts); e.U(NextSeq()); e.U(tid); e.U(addr); e.U(len);
  End();
}

void TraceBuilder::Mremap(uint64_t ts, uint64_t stack, uint64_t old_addr, uint64_t old_len,
                          uint64_t new_addr, uint64_t new_len, uint64_t tid) {
  auto& e = Begin(format::kTagMremap);
  e.U(ts); e.U(NextSeq()); e.U(tid); e.U(stack); e.U(old_addr); e.U(old_len);
  e.U(new_addr); e.U(new_len); e.U(0); e.U(0);
  End();
}

void TraceBuilder::DevAlloc(uint64_t ts, uint64_t stack, uint8_t kind, int32_t device,
                            uint64_t addr, uint64_t size, uint8_t api, uint64_t aux,
                            uint64_t step, uint64_t stage_str, uint64_t tid) {
  auto& e = Begin(format::kTagDevAlloc);
  e.U(ts); e.U(NextSeq()); e.U(tid); e.U(stack); e.U(kind); e.S(device); e.U(addr);
  e.U(size); e.U(api); e.U(aux); e.U(step); e.U(stage_str);
  End();
}

void TraceBuilder::DevFree(uint64_t ts, uint8_t kind, int32_t device, uint64_t addr,
                           uint64_t size, uint8_t api, uint64_t tid) {
  auto& e = Begin(format::kTagDevFree);
  e.U(ts); e.U(NextSeq()); e.U(tid); e.U(kind); e.S(device); e.U(addr); e.U(size); e.U(api);
  End();
}

void TraceBuilder::DevFail(uint64_t ts, uint64_t stack, uint8_t kind, int32_t device,
                           uint64_t size, uint8_t api, uint64_t error, uint64_t step,
                           uint64_t stage_str, uint64_t tid) {
  auto& e = Begin(format::kTagDevFail);
  e.U(ts); e.U(NextSeq()); e.U(tid); e.U(stack); e.U(kind); e.S(device); e.U(size);
  e.U(api); e.U(error); e.U(step); e.U(stage_str);
  End();
}

void TraceBuilder::DevInfo(uint64_t ts, uint64_t step, int32_t device, uint64_t free_bytes,
                           uint64_t total_bytes, uint64_t pool_reserved, uint64_t pool_used) {
  auto& e = Begin(format::kTagDevInfo);
  e.U(ts); e.U(NextSeq()); e.U(step); e.S(device); e.U(free_bytes); e.U(total_bytes);
  e.U(pool_reserved); e.U(pool_used);
  End();
}

void TraceBuilder::Step(uint64_t ts, uint64_t step, int phase, const format::Counters& c,
                        uint64_t tid) {
  auto& e = Begin(format::kTagStep);
  e.U(ts); e.U(NextSeq()); e.U(tid); e.U(step); e.U(phase);
  e.PutCounters(c);
  End();
}

void TraceBuilder::Stage(uint64_t ts, uint64_t stage_str, uint64_t step, int phase,
                         const format::Counters& c, uint64_t tid) {
  auto& e = Begin(format::kTagStage);
  e.U(ts); e.U(NextSeq()); e.U(tid); e.U(stage_str); e.U(step); e.U(phase);
  e.PutCounters(c);
  End();
}

void TraceBuilder::Counter(uint64_t ts, uint64_t name_str, int64_t value, uint64_t tid) {
  auto& e = Begin(format::kTagCounter);
  e.U(ts); e.U(NextSeq()); e.U(tid); e.U(name_str); e.S(value);
  End();
}

void TraceBuilder::Rate(uint64_t ts, uint64_t interval) {
  auto& e = Begin(format::kTagRate);
  e.U(ts); e.U(interval);
  End();
}

void TraceBuilder::Epoch(uint64_t ts, uint64_t epoch, uint64_t tid) {
  auto& e = Begin(format::kTagEpoch);
  e.U(ts); e.U(NextSeq()); e.U(tid); e.U(epoch);
  End();
}

void TraceBuilder::Alert(uint64_t ts, uint64_t step, uint8_t rule, uint64_t value,
                         uint64_t threshold, uint64_t stage_str, uint64_t site_stack) {
  auto& e = Begin(format::kTagAlert);
  e.U(ts); e.U(NextSeq()); e.U(step); e.U(rule); e.U(value); e.U(threshold);
  e.U(stage_str); e.U(site_stack);
  End();
}

void TraceBuilder::SiteSnapshot(uint64_t ts, uint64_t step, uint8_t cause, uint64_t stage_str,
                                const std::vector<std::array<uint64_t, 3>>& sites) {
  auto& e = Begin(format::kTagSiteSnapshot);
  e.U(ts); e.U(NextSeq()); e.U(step); e.U(cause); e.U(stage_str); e.U(sites.size());
  for (const auto& s : sites) {
    e.U(s[0]); e.U(s[1]); e.U(s[2]);
  }
  End();
}

void TraceBuilder::Lost(uint64_t ts, uint64_t records, uint64_t bytes, uint64_t cause) {
  auto& e = Begin(format::kTagLost);
  e.U(ts); e.U(records); e.U(bytes); e.U(cause);
  End();
}

void TraceBuilder::Notice(uint64_t ts, uint64_t code, uint64_t message_str) {
  auto& e = Begin(format::kTagNotice);
  e.U(ts); e.U(code); e.U(message_str);
  End();
}

void TraceBuilder::Trailer(uint64_t ts, const format::Counters& c, bool clean_exit) {
  auto& e = Begin(format::kTagTrailer);
  e.U(ts);
  e.PutCounters(c);
  e.U(clean_exit ? 1 : 0);
  End();
}

void TraceBuilder::RawBytes(const std::vector<uint8_t>& bytes) {
  if (enc_.size() + bytes.size() > buf_.size()) Flush();
  enc_.Bytes(bytes.data(), bytes.size());
}

void TraceBuilder::Flush(uint8_t kind) {
  if (enc_.size() == 0) return;
  const uint32_t raw_len = static_cast<uint32_t>(enc_.size());
  std::vector<uint8_t> payload;
  if (codec_ == format::kCodecZstd) {
    payload.resize(ZSTD_compressBound(raw_len));
    size_t n = ZSTD_compress(payload.data(), payload.size(), buf_.data(), raw_len, 1);
    payload.resize(ZSTD_isError(n) ? 0 : n);
  } else {
    payload.assign(buf_.begin(), buf_.begin() + raw_len);
  }
  format::ChunkHeader ch;
  format::FillChunkHeader(&ch, chunk_seq_++, codec_, kind, 0, payload.data(),
                          static_cast<uint32_t>(payload.size()), raw_len);
  chunk_offsets_.push_back(out_.size());
  Append(out_, &ch, sizeof(ch));
  Append(out_, payload.data(), payload.size());
  enc_.Reset();
}

const std::vector<uint8_t>& TraceBuilder::Finish() {
  Flush();
  return out_;
}

}  // namespace memstep::reader

#include "tests/unit/trace_builder.h"

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

std::string ProfilerTlv(uint64_t start, uint64_t end, const std::string& build_id) {
  std::string v(16, '\0');
  for (int i = 0; i < 8; ++i) {
    v[i] = static_cast<char>(start >> (8 * i));
    v[8 + i] = static_cast<char>(end >> (8 * i));
  }
  return v + build_id;
}

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

void TraceBuilder::Reserve(size_t bytes) {
  if (enc_.size() + bytes > buf_.size()) Flush();
}

namespace {

format::ByteView View(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

void TraceBuilder::String(uint64_t id, const std::string& s) {
  format::StringRecord r;
  r.id = id;
  r.text = View(s);
  Put(r, s.size() + 32);
}

void TraceBuilder::Mapping(uint64_t id, uint64_t ts, uint64_t start, uint64_t end,
                           uint64_t load_bias, uint64_t path_str, const std::string& build_id) {
  format::MappingRecord r;
  r.id = id;
  r.ts = ts;
  r.start = start;
  r.end = end;
  r.load_bias = load_bias;
  r.path_str = path_str;
  r.build_id = View(build_id);
  Put(r, build_id.size() + 128);
}

void TraceBuilder::MappingGone(uint64_t id, uint64_t ts) {
  format::MappingGoneRecord r;
  r.id = id;
  r.ts = ts;
  Put(r);
}

void TraceBuilder::Stack(uint64_t id, const std::vector<uint64_t>& ips) {
  format::StackRecord r;
  r.id = id;
  r.ips.values = ips.data();
  r.ips.count = ips.size();
  Put(r, ips.size() * format::kMaxVarint + 32);
}

void TraceBuilder::Alloc(uint64_t ts, uint64_t stack, uint64_t addr, uint64_t size,
                         uint64_t interval, uint64_t kind, uint64_t step, uint64_t stage_str,
                         uint64_t tid) {
  format::AllocRecord r;
  r.ts = ts;
  r.seq = NextSeq();
  r.tid = static_cast<uint32_t>(tid);
  r.stack = stack;
  r.addr = addr;
  r.size = size;
  r.interval = interval;
  r.kind = static_cast<uint8_t>(kind);
  r.step = step;
  r.stage_str = stage_str;
  Put(r);
}

void TraceBuilder::Free(uint64_t ts, uint64_t addr, uint64_t tid) {
  format::FreeRecord r;
  r.ts = ts;
  r.seq = NextSeq();
  r.tid = static_cast<uint32_t>(tid);
  r.addr = addr;
  Put(r);
}

void TraceBuilder::Mmap(uint64_t ts, uint64_t stack, uint64_t addr, uint64_t len, uint64_t step,
                        uint64_t stage_str, uint64_t tid) {
  format::MmapRecord r;
  r.ts = ts;
  r.seq = NextSeq();
  r.tid = static_cast<uint32_t>(tid);
  r.stack = stack;
  r.addr = addr;
  r.len = len;
  r.prot = 3;      // PROT_READ | PROT_WRITE
  r.flags = 0x22;  // MAP_PRIVATE | MAP_ANONYMOUS
  r.step = step;
  r.stage_str = stage_str;
  Put(r);
}

void TraceBuilder::Munmap(uint64_t ts, uint64_t addr, uint64_t len, uint64_t tid) {
  format::MunmapRecord r;
  r.ts = ts;
  r.seq = NextSeq();
  r.tid = static_cast<uint32_t>(tid);
  r.addr = addr;
  r.len = len;
  Put(r);
}

void TraceBuilder::Mremap(uint64_t ts, uint64_t stack, uint64_t old_addr, uint64_t old_len,
                          uint64_t new_addr, uint64_t new_len, uint64_t tid) {
  format::MremapRecord r;
  r.ts = ts;
  r.seq = NextSeq();
  r.tid = static_cast<uint32_t>(tid);
  r.stack = stack;
  r.old_addr = old_addr;
  r.old_len = old_len;
  r.new_addr = new_addr;
  r.new_len = new_len;
  Put(r);
}

void TraceBuilder::DevAlloc(uint64_t ts, uint64_t stack, uint8_t kind, int32_t device,
                            uint64_t addr, uint64_t size, uint8_t api, uint64_t aux, uint64_t step,
                            uint64_t stage_str, uint64_t tid, uint64_t interval, bool sampled) {
  format::DevAllocRecord r;
  r.interval = interval;
  r.sampled = sampled ? 1 : 0;
  r.ts = ts;
  r.seq = NextSeq();
  r.tid = static_cast<uint32_t>(tid);
  r.stack = stack;
  r.kind = kind;
  r.device = device;
  r.addr = addr;
  r.size = size;
  r.api = api;
  r.aux = aux;
  r.step = step;
  r.stage_str = stage_str;
  Put(r);
}

void TraceBuilder::MemSnapshot(uint64_t ts, uint8_t cause, int32_t device, uint64_t requested,
                               uint64_t free_bytes, uint64_t total_bytes, uint64_t step,
                               uint64_t stage_str, uint8_t api, uint64_t error) {
  format::MemSnapshotRecord r;
  r.ts = ts;
  r.seq = NextSeq();
  r.tid = 1;
  r.step = step;
  r.stage_str = stage_str;
  r.cause = cause;
  r.device = device;
  r.requested = requested;
  r.free = free_bytes;
  r.total = total_bytes;
  r.api = api;
  r.error = error;
  Put(r);
}

void TraceBuilder::DevFree(uint64_t ts, uint8_t kind, int32_t device, uint64_t addr, uint64_t size,
                           uint8_t api, uint64_t tid) {
  format::DevFreeRecord r;
  r.ts = ts;
  r.seq = NextSeq();
  r.tid = static_cast<uint32_t>(tid);
  r.kind = kind;
  r.device = device;
  r.addr = addr;
  r.size = size;
  r.api = api;
  Put(r);
}

void TraceBuilder::DevFail(uint64_t ts, uint64_t stack, uint8_t kind, int32_t device, uint64_t size,
                           uint8_t api, uint64_t error, uint64_t step, uint64_t stage_str,
                           uint64_t tid) {
  format::DevFailRecord r;
  r.ts = ts;
  r.seq = NextSeq();
  r.tid = static_cast<uint32_t>(tid);
  r.stack = stack;
  r.kind = kind;
  r.device = device;
  r.size = size;
  r.api = api;
  r.error = error;
  r.step = step;
  r.stage_str = stage_str;
  Put(r);
}

void TraceBuilder::DevInfo(uint64_t ts, uint64_t step, int32_t device, uint64_t free_bytes,
                           uint64_t total_bytes, uint64_t pool_reserved, uint64_t pool_used) {
  format::DevInfoRecord r;
  r.ts = ts;
  r.seq = NextSeq();
  r.step = step;
  r.device = device;
  r.free = free_bytes;
  r.total = total_bytes;
  r.pool_reserved = pool_reserved;
  r.pool_used = pool_used;
  Put(r);
}

void TraceBuilder::Step(uint64_t ts, uint64_t step, int phase, const format::Counters& c,
                        uint64_t tid) {
  format::StepRecord r;
  r.ts = ts;
  r.seq = NextSeq();
  r.tid = static_cast<uint32_t>(tid);
  r.step = step;
  r.phase = static_cast<uint8_t>(phase);
  r.counters = c;
  Put(r);
}

void TraceBuilder::Stage(uint64_t ts, uint64_t stage_str, uint64_t step, int phase,
                         const format::Counters& c, uint64_t tid) {
  format::StageRecord r;
  r.ts = ts;
  r.seq = NextSeq();
  r.tid = static_cast<uint32_t>(tid);
  r.stage_str = stage_str;
  r.step = step;
  r.phase = static_cast<uint8_t>(phase);
  r.counters = c;
  Put(r);
}

void TraceBuilder::Counter(uint64_t ts, uint64_t name_str, int64_t value, uint64_t tid) {
  format::CounterRecord r;
  r.ts = ts;
  r.seq = NextSeq();
  r.tid = static_cast<uint32_t>(tid);
  r.name_str = name_str;
  r.value = value;
  Put(r);
}

void TraceBuilder::Rate(uint64_t ts, uint64_t interval) {
  format::RateRecord r;
  r.ts = ts;
  r.interval = interval;
  Put(r);
}

void TraceBuilder::Epoch(uint64_t ts, uint64_t epoch, uint64_t tid) {
  format::EpochRecord r;
  r.ts = ts;
  r.seq = NextSeq();
  r.tid = static_cast<uint32_t>(tid);
  r.epoch = epoch;
  Put(r);
}

void TraceBuilder::Alert(uint64_t ts, uint64_t step, uint8_t rule, uint64_t value,
                         uint64_t threshold, uint64_t stage_str, uint64_t site_stack) {
  format::AlertRecord r;
  r.ts = ts;
  r.seq = NextSeq();
  r.step = step;
  r.rule = rule;
  r.value = value;
  r.threshold = threshold;
  r.stage_str = stage_str;
  r.site_stack = site_stack;
  Put(r);
}

void TraceBuilder::SiteSnapshot(uint64_t ts, uint64_t step, uint8_t cause, uint64_t stage_str,
                                const std::vector<std::array<uint64_t, 3>>& sites) {
  format::SiteSnapshotRecord r;
  r.ts = ts;
  r.seq = NextSeq();
  r.step = step;
  r.cause = cause;
  r.stage_str = stage_str;
  static_assert(sizeof(std::array<uint64_t, 3>) == 3 * sizeof(uint64_t), "contiguous triples");
  r.sites.values = sites.empty() ? nullptr : sites[0].data();
  r.sites.count = sites.size();
  Put(r, sites.size() * 3 * format::kMaxVarint + 64);
}

void TraceBuilder::Lost(uint64_t ts, uint64_t records, uint64_t bytes, uint64_t cause) {
  format::LostRecord r;
  r.ts = ts;
  r.records = records;
  r.bytes = bytes;
  r.cause = cause;
  Put(r);
}

void TraceBuilder::Notice(uint64_t ts, uint64_t code, uint64_t message_str) {
  format::NoticeRecord r;
  r.ts = ts;
  r.code = code;
  r.message_str = message_str;
  Put(r);
}

void TraceBuilder::Trailer(uint64_t ts, const format::Counters& c, bool clean_exit) {
  format::TrailerRecord r;
  r.ts = ts;
  r.counters = c;
  r.clean_exit = clean_exit ? 1 : 0;
  Put(r);
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

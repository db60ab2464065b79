#include "src/reader/reader.h"

#include <sys/mman.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "src/format/records.h"
#include "src/reader/reader_internal.h"
#include "src/reader/run_files.h"

namespace memstep::reader {
namespace {

using format::RecordDecoder;
using internal::ChunkRecords;

constexpr size_t kMaxHeaderLen = 1 << 20;

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}
uint64_t LoadU64(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

// ---- records: one Take per kind files a decoded record (records.h) ----

std::string Text(const format::ByteView& v) {
  return std::string(reinterpret_cast<const char*>(v.data), static_cast<size_t>(v.size));
}

void Push(ChunkRecords& c, const Event& e) {
  c.max_ts = std::max(c.max_ts, e.ts);
  c.events.push_back(e);
}

uint32_t KeepCounters(ChunkRecords& c, const format::Counters& k) {
  c.counters.push_back(k);
  return static_cast<uint32_t>(c.counters.size() - 1);
}

// Fields every event-carrying record has.
template <typename R>
Event Common(uint8_t tag, const R& r) {
  Event e;
  e.tag = tag;
  e.ts = r.ts;
  e.seq = r.seq;
  e.tid = r.tid;
  return e;
}

bool Take(const format::StringRecord& r, ChunkRecords& c) {
  if (!c.keep_dictionary) return true;
  c.strings.emplace_back(r.id, Text(r.text));
  return true;
}

bool Take(const format::MappingRecord& r, ChunkRecords& c) {
  Mapping m;
  m.id = r.id;
  m.ts = r.ts;
  m.start = r.start;
  m.end = r.end;
  m.load_bias = r.load_bias;
  m.build_id = Text(r.build_id);
  c.max_ts = std::max(c.max_ts, m.ts);
  c.mappings.emplace_back(std::move(m), r.path_str);
  return true;
}

bool Take(const format::MappingGoneRecord& r, ChunkRecords& c) {
  c.mappings_gone.emplace_back(r.id, r.ts);
  c.max_ts = std::max(c.max_ts, r.ts);
  return true;
}

bool Take(const format::StackRecord& r, ChunkRecords& c) {
  if (!c.keep_dictionary) return true;
  std::vector<uint64_t> ips;
  ips.reserve(static_cast<size_t>(r.ips.count));
  format::ListReader list(r.ips, 1);
  for (uint64_t ip; list.Next(&ip);) ips.push_back(ip);
  c.stacks.emplace_back(r.id, std::move(ips));
  return true;
}

bool Take(const format::AllocRecord& r, ChunkRecords& c) {
  Event e = Common(format::kTagAlloc, r);
  e.stack = r.stack;
  e.addr = r.addr;
  e.size = r.size;
  e.interval = r.interval;
  e.kind = r.kind;
  e.step = r.step;
  e.str = r.stage_str;
  Push(c, e);
  return true;
}

bool Take(const format::FreeRecord& r, ChunkRecords& c) {
  Event e = Common(format::kTagFree, r);
  e.addr = r.addr;
  Push(c, e);
  return true;
}

bool Take(const format::MmapRecord& r, ChunkRecords& c) {
  Event e = Common(format::kTagMmap, r);
  e.stack = r.stack;
  e.addr = r.addr;
  e.size = r.len;
  e.new_addr = r.prot;
  e.new_len = r.flags;
  e.step = r.step;
  e.str = r.stage_str;
  Push(c, e);
  return true;
}

bool Take(const format::MunmapRecord& r, ChunkRecords& c) {
  Event e = Common(format::kTagMunmap, r);
  e.addr = r.addr;
  e.size = r.len;
  Push(c, e);
  return true;
}

bool Take(const format::MremapRecord& r, ChunkRecords& c) {
  Event e = Common(format::kTagMremap, r);
  e.stack = r.stack;
  e.addr = r.old_addr;
  e.size = r.old_len;
  e.new_addr = r.new_addr;
  e.new_len = r.new_len;
  e.step = r.step;
  e.str = r.stage_str;
  Push(c, e);
  return true;
}

bool Take(const format::DevAllocRecord& r, ChunkRecords& c) {
  Event e = Common(format::kTagDevAlloc, r);
  e.stack = r.stack;
  e.kind = r.kind;
  e.device = r.device;
  e.addr = r.addr;
  e.size = r.size;
  e.api = r.api;
  e.aux = r.aux;
  e.step = r.step;
  e.str = r.stage_str;
  e.sampled = r.sampled;
  e.interval = r.interval;
  Push(c, e);
  return true;
}

bool Take(const format::DevFreeRecord& r, ChunkRecords& c) {
  Event e = Common(format::kTagDevFree, r);
  e.kind = r.kind;
  e.device = r.device;
  e.addr = r.addr;
  e.size = r.size;
  e.api = r.api;
  Push(c, e);
  return true;
}

bool Take(const format::DevFailRecord& r, ChunkRecords& c) {
  if (r.error > INT64_MAX) return false;
  Event e = Common(format::kTagDevFail, r);
  e.stack = r.stack;
  e.kind = r.kind;
  e.device = r.device;
  e.size = r.size;
  e.api = r.api;
  e.value = static_cast<int64_t>(r.error);
  e.step = r.step;
  e.str = r.stage_str;
  Push(c, e);
  return true;
}

bool Take(const format::MemSnapshotRecord& r, ChunkRecords& c) {
  if (r.error > INT64_MAX) return false;
  Event e = Common(format::kTagMemSnapshot, r);
  e.step = r.step;
  e.str = r.stage_str;
  e.kind = r.cause;
  e.device = r.device;
  e.size = r.requested;
  e.new_addr = r.free;
  e.new_len = r.total;
  e.api = r.api;
  e.value = static_cast<int64_t>(r.error);
  Push(c, e);
  return true;
}

bool Take(const format::DevInfoRecord& r, ChunkRecords& c) {
  DeviceInfo i;
  i.ts = r.ts;
  i.seq = r.seq;
  i.step = r.step;
  i.device = r.device;
  i.free_bytes = r.free;
  i.total_bytes = r.total;
  i.pool_reserved = r.pool_reserved;
  i.pool_used = r.pool_used;
  c.max_ts = std::max(c.max_ts, i.ts);
  c.device_info.push_back(i);
  return true;
}

bool Take(const format::HuntRecord& r, ChunkRecords& c) {
  if (r.phase > 1 || r.outcome > format::kHuntGaveUp) return false;
  c.max_ts = std::max(c.max_ts, r.ts);
  c.hunts.push_back(r);
  return true;
}

bool Take(const format::ArenaStatsRecord& r, ChunkRecords& c) {
  ArenaStats a;
  a.ts = r.ts;
  a.seq = r.seq;
  a.tid = r.tid;
  a.arenas.resize(static_cast<size_t>(r.arenas.count));
  format::ListReader list(r.arenas, 4);
  for (ArenaStats::Arena& x : a.arenas) {
    list.Next(&x.system);
    list.Next(&x.free);
    list.Next(&x.top);
    list.Next(&x.free_chunks);
  }
  c.max_ts = std::max(c.max_ts, a.ts);
  c.arena_stats.push_back(std::move(a));
  return true;
}

bool Take(const format::StepRecord& r, ChunkRecords& c) {
  if (r.phase > 1) return false;
  Event e = Common(format::kTagStep, r);
  e.step = r.step;
  e.phase = r.phase;
  e.counters = KeepCounters(c, r.counters);
  Push(c, e);
  return true;
}

bool Take(const format::StageRecord& r, ChunkRecords& c) {
  if (r.phase > 1) return false;
  Event e = Common(format::kTagStage, r);
  e.str = r.stage_str;
  e.step = r.step;
  e.phase = r.phase;
  e.counters = KeepCounters(c, r.counters);
  Push(c, e);
  return true;
}

bool Take(const format::CounterRecord& r, ChunkRecords& c) {
  Event e = Common(format::kTagCounter, r);
  e.str = r.name_str;
  e.value = r.value;
  Push(c, e);
  return true;
}

bool Take(const format::EpochRecord& r, ChunkRecords& c) {
  Event e = Common(format::kTagEpoch, r);
  e.step = r.epoch;
  Push(c, e);
  return true;
}

bool Take(const format::AlertRecord& r, ChunkRecords& c) {
  Alert a;
  a.ts = r.ts;
  a.seq = r.seq;
  a.step = r.step;
  a.rule = r.rule;
  a.value = r.value;
  a.threshold = r.threshold;
  a.site_stack = r.site_stack;
  c.max_ts = std::max(c.max_ts, a.ts);
  c.alerts.emplace_back(std::move(a), r.stage_str);
  return true;
}

bool Take(const format::SiteSnapshotRecord& r, ChunkRecords& c) {
  SiteSnapshot s;
  s.ts = r.ts;
  s.seq = r.seq;
  s.step = r.step;
  s.cause = r.cause;
  s.sites.resize(static_cast<size_t>(r.sites.count));
  format::ListReader list(r.sites, 3);
  for (auto& site : s.sites) {
    list.Next(&site.stack);
    list.Next(&site.live_bytes);
    list.Next(&site.live_count);
  }
  c.max_ts = std::max(c.max_ts, s.ts);
  c.snapshots.emplace_back(std::move(s), r.stage_str);
  return true;
}

bool Take(const format::RateRecord& r, ChunkRecords& c) {
  Rate rate;
  rate.ts = r.ts;
  rate.interval = r.interval;
  c.max_ts = std::max(c.max_ts, rate.ts);
  c.rates.push_back(rate);
  return true;
}

bool Take(const format::LostRecord& r, ChunkRecords& c) {
  Lost l;
  l.ts = r.ts;
  l.records = r.records;
  l.bytes = r.bytes;
  l.cause = r.cause;
  c.max_ts = std::max(c.max_ts, l.ts);
  c.lost.push_back(l);
  return true;
}

bool Take(const format::NoticeRecord& r, ChunkRecords& c) {
  Notice n;
  n.ts = r.ts;
  n.code = r.code;
  c.max_ts = std::max(c.max_ts, n.ts);
  c.notices.emplace_back(std::move(n), r.message_str);
  return true;
}

bool Take(const format::TrailerRecord& r, ChunkRecords& c) {
  c.trailer.ts = r.ts;
  c.trailer.counters = r.counters;
  c.trailer.clean_exit = r.clean_exit != 0;
  c.has_trailer = true;
  c.max_ts = std::max(c.max_ts, c.trailer.ts);
  return true;
}

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "FastU reads varints as LE words");

// ---- the fast path: records of varints only, far from the chunk's end ----
//
// Most records are ALLOC and FREE: a dozen varints each, mostly one or two
// bytes. When the chunk has at least a whole record's worst case (10 bytes
// per varint) left, the fields are read without a bounds check per byte.
// What the fast path accepts and rejects is exactly what format::Decode
// does (a varint of more than 64 bits, a value out of its field's range):
// reader_test and the fuzz target check both paths.

// An unsigned LEB128 varint at p (at least 10 readable bytes); false when it
// runs past 10 bytes or overflows 64 bits, as RecordDecoder::U. Varints of
// up to 8 bytes (56 bits: every timestamp, address and size in practice)
// are read as one little-endian word: the first byte with its high bit
// clear ends the varint, and three mask-and-shift steps pack the 7-bit
// groups together.
[[gnu::always_inline]] inline bool FastU(const uint8_t*& p, uint64_t* out) {
  uint64_t w;
  memcpy(&w, p, 8);
  if ((w & 0x80) == 0) {
    *out = w & 0x7F;
    p += 1;
    return true;
  }
  const uint64_t stops = ~w & 0x8080808080808080ull;
  if (stops != 0) {
    const int bits = __builtin_ctzll(stops) + 1;  // 8 x the varint's length
    uint64_t x = bits == 64 ? w : w & ((uint64_t{1} << bits) - 1);
    x &= 0x7F7F7F7F7F7F7F7Full;
    x = ((x & 0x7F007F007F007F00ull) >> 1) | (x & 0x007F007F007F007Full);
    x = ((x & 0x3FFF00003FFF0000ull) >> 2) | (x & 0x00003FFF00003FFFull);
    x = ((x & 0x0FFFFFFF00000000ull) >> 4) | (x & 0x000000000FFFFFFFull);
    *out = x;
    p += bits / 8;
    return true;
  }
  uint64_t v = 0;  // 9 or 10 bytes
  for (int shift = 0; shift < 64; shift += 7) {
    const uint64_t b = *p++;
    if (shift == 63 && b > 1) return false;
    v |= (b & 0x7F) << shift;
    if (b < 0x80) {
      *out = v;
      return true;
    }
  }
  return false;
}

template <typename T>
[[gnu::always_inline]] inline bool FastUnsigned(const uint8_t*& p, T* out) {
  uint64_t v;
  if (!FastU(p, &v) || v > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
  *out = static_cast<T>(v);
  return true;
}

template <typename T>
[[gnu::always_inline]] inline bool FastSigned(const uint8_t*& p, T* out) {
  uint64_t u;
  if (!FastU(p, &u)) return false;
  const int64_t v = format::UnZigZag(u);
  if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
      v > static_cast<int64_t>(std::numeric_limits<T>::max())) {
    return false;
  }
  *out = static_cast<T>(v);
  return true;
}

inline bool FastCounters(const uint8_t*& p, format::Counters* c) {
  return FastU(p, &c->alloc_bytes) && FastU(p, &c->alloc_count) && FastU(p, &c->free_bytes) &&
         FastU(p, &c->free_count) && FastU(p, &c->live_bytes) && FastU(p, &c->peak_bytes) &&
         FastU(p, &c->mmap_live_bytes) && FastU(p, &c->rss_bytes);
}

// Per record: whether it has varints only, how many, and its fast decoder
// (records with BYTES or LIST fields always take format::Decode).
#define MS_U(type, name) +1
#define MS_S(type, name) +1
#define MS_COUNTERS(name) +8
#define MS_BYTES(name, max) +1000000
#define MS_LIST(name, width, max, count_doc, item_doc) +1000000
#define MEMSTEP_FAST_COUNT(Name, tag, doc, fields) constexpr int kVarints##Name = 0 fields;
MEMSTEP_RECORDS(MEMSTEP_FAST_COUNT)
#undef MEMSTEP_FAST_COUNT
#undef MS_U
#undef MS_S
#undef MS_COUNTERS
#undef MS_BYTES
#undef MS_LIST

inline bool FastUnsupported() { return false; }
#define MS_U(type, name) &&FastUnsigned(p, &r->name)
#define MS_S(type, name) &&FastSigned(p, &r->name)
#define MS_COUNTERS(name) &&FastCounters(p, &r->name)
#define MS_BYTES(name, max) &&FastUnsupported()
#define MS_LIST(name, width, max, count_doc, item_doc) &&FastUnsupported()
#define MEMSTEP_FAST_DECODE(Name, tag, doc, fields)                                     \
  [[maybe_unused]] inline bool FastDecode(const uint8_t*& p, format::Name##Record* r) { \
    return true fields;                                                                 \
  }
MEMSTEP_RECORDS(MEMSTEP_FAST_DECODE)
#undef MEMSTEP_FAST_DECODE
#undef MS_U
#undef MS_S
#undef MS_COUNTERS
#undef MS_BYTES
#undef MS_LIST

template <typename R, int kVarints>
bool DecodeAs(RecordDecoder& d, ChunkRecords& c) {
  R r;
  if constexpr (kVarints < 1000000) {
    if (d.remaining() >= 10 * static_cast<size_t>(kVarints)) {
      const uint8_t* p = d.pos();
      if (!FastDecode(p, &r)) return false;
      const uint8_t* unused;
      d.Bytes(static_cast<size_t>(p - d.pos()), &unused);  // within remaining()
      return Take(r, c);
    }
  }
  return format::Decode(d, &r) && Take(r, c);
}

// Decodes one record (tag already read). Returns false on malformed input;
// unknown tags cannot be skipped (records carry no length).
bool DecodeRecord(uint8_t tag, RecordDecoder& d, ChunkRecords& c) {
  switch (tag) {
#define MEMSTEP_DECODE_CASE(Name, t, doc, fields) \
  case format::t:                                 \
    return DecodeAs<format::Name##Record, kVarints##Name>(d, c);
    MEMSTEP_RECORDS(MEMSTEP_DECODE_CASE)
#undef MEMSTEP_DECODE_CASE
    default:
      return false;
  }
}

bool DecodeRecords(const uint8_t* p, size_t n, ChunkRecords& c, uint64_t budget) {
  RecordDecoder d(p, n);
  uint64_t count = 0;
  while (!d.AtEnd()) {
    uint8_t tag;
    if (!d.Byte(&tag) || !DecodeRecord(tag, d, c)) return false;
    if (++count > budget) return false;
  }
  return true;
}

}  // namespace

namespace internal {

void Merge(ChunkRecords& c, Trace& t, bool with_bulk) {
  for (auto& [id, s] : c.strings) t.strings[id] = std::move(s);
  for (auto& [id, ips] : c.stacks) t.stacks[id] = std::move(ips);
  for (auto& [m, path_id] : c.mappings) {
    m.path = t.String(path_id);
    if (path_id != 0 && m.path.empty()) ++t.unknown_refs;
    t.mappings.push_back(std::move(m));
  }
  for (auto [id, ts] : c.mappings_gone) {
    bool found = false;
    for (auto it = t.mappings.rbegin(); it != t.mappings.rend(); ++it) {
      if (it->id == id && it->gone_ts == UINT64_MAX) {
        it->gone_ts = ts;
        found = true;
        break;
      }
    }
    if (!found) ++t.unknown_refs;
  }
  const uint32_t counter_base = static_cast<uint32_t>(t.counters.size());
  t.counters.insert(t.counters.end(), c.counters.begin(), c.counters.end());
  for (auto& e : c.events) {
    if (e.tag == format::kTagStep || e.tag == format::kTagStage) e.counters += counter_base;
    if (e.tag == format::kTagDevAlloc || e.tag == format::kTagDevFree ||
        e.tag == format::kTagDevFail) {
      t.device_kinds.emplace(e.kind, e.device);
      if (e.tag == format::kTagDevAlloc && e.sampled) {
        t.max_dev_interval = std::max(t.max_dev_interval, e.interval);
      }
    }
    if (with_bulk || !IsBulkTag(e.tag)) t.events.push_back(e);
  }
  t.lost.insert(t.lost.end(), c.lost.begin(), c.lost.end());
  t.rates.insert(t.rates.end(), c.rates.begin(), c.rates.end());
  for (auto& [n, msg_id] : c.notices) {
    n.message = t.String(msg_id);
    if (msg_id != 0 && n.message.empty()) ++t.unknown_refs;
    t.notices.push_back(std::move(n));
  }
  for (auto& [a, stage_id] : c.alerts) {
    a.stage = t.String(stage_id);
    if (stage_id != 0 && a.stage.empty()) ++t.unknown_refs;
    t.alerts.push_back(std::move(a));
  }
  for (auto& [s, stage_id] : c.snapshots) {
    s.stage = t.String(stage_id);
    if (stage_id != 0 && s.stage.empty()) ++t.unknown_refs;
    t.snapshots.push_back(std::move(s));
  }
  for (const DeviceInfo& i : c.device_info) t.device_info.push_back(i);
  t.hunts.insert(t.hunts.end(), c.hunts.begin(), c.hunts.end());
  for (ArenaStats& a : c.arena_stats) t.arena_stats.push_back(std::move(a));
  if (c.has_trailer) {
    t.has_trailer = true;
    t.trailer = c.trailer;
  }
  t.max_ts = std::max(t.max_ts, c.max_ts);
}

uint64_t UnknownRefsOf(const Event& e, const Trace& t) {
  uint64_t n = 0;
  const bool str_unknown = e.str != 0 && !t.strings.contains(e.str);
  switch (e.tag) {
    case format::kTagAlloc:
    case format::kTagMmap:
    case format::kTagMremap:
    case format::kTagDevAlloc:
    case format::kTagDevFail:
      n += e.stack != 0 && !t.stacks.contains(e.stack);
      n += str_unknown;
      break;
    case format::kTagStage:
    case format::kTagCounter:
    case format::kTagMemSnapshot:
      n += str_unknown;
      break;
    default:
      break;
  }
  return n;
}

uint64_t UnknownSideRefs(const Trace& t) {
  uint64_t n = 0;
  for (const Alert& a : t.alerts) {
    if (a.site_stack != 0 && !t.stacks.contains(a.site_stack)) ++n;
  }
  for (const SiteSnapshot& s : t.snapshots) {
    for (const auto& site : s.sites) {
      if (site.stack != 0 && !t.stacks.contains(site.stack)) ++n;
    }
  }
  return n;
}

void SortSideLists(Trace& t) {
  std::stable_sort(t.alerts.begin(), t.alerts.end(),
                   [](const Alert& a, const Alert& b) { return a.seq < b.seq; });
  std::stable_sort(t.snapshots.begin(), t.snapshots.end(),
                   [](const SiteSnapshot& a, const SiteSnapshot& b) { return a.seq < b.seq; });
  std::stable_sort(t.device_info.begin(), t.device_info.end(),
                   [](const DeviceInfo& a, const DeviceInfo& b) { return a.seq < b.seq; });
  std::stable_sort(t.hunts.begin(), t.hunts.end(),
                   [](const Hunt& a, const Hunt& b) { return a.seq < b.seq; });
  std::stable_sort(t.arena_stats.begin(), t.arena_stats.end(),
                   [](const ArenaStats& a, const ArenaStats& b) { return a.seq < b.seq; });
}

void ChunkRecords::Clear() {
  strings.clear();
  stacks.clear();
  mappings.clear();
  mappings_gone.clear();
  events.clear();
  counters.clear();
  lost.clear();
  notices.clear();
  rates.clear();
  alerts.clear();
  snapshots.clear();
  device_info.clear();
  hunts.clear();
  arena_stats.clear();
  has_trailer = false;
  trailer = Trailer{};
  max_ts = 0;
}

ChunkDecoder::ChunkDecoder() : dctx(ZSTD_createDCtx(), ZSTD_freeDCtx) {}

}  // namespace internal

const std::string& Trace::String(uint64_t id) const {
  static const std::string* const kEmpty = new std::string();
  auto it = strings.find(id);
  return it == strings.end() ? *kEmpty : it->second;
}

std::string Trace::RankValue(const std::string& key) const {
  size_t pos = 0;
  while (pos < rank_env.size()) {
    size_t end = rank_env.find('\0', pos);
    if (end == std::string::npos) end = rank_env.size();
    std::string_view kv(rank_env.data() + pos, end - pos);
    if (kv.size() > key.size() && kv.substr(0, key.size()) == key && kv[key.size()] == '=') {
      return std::string(kv.substr(key.size() + 1));
    }
    pos = end + 1;
  }
  return "";
}

namespace {

// One header TLV's value into `trace`; unknown types are skipped.
void SetHeaderTlv(uint16_t type, std::string value, Trace* trace) {
  switch (type) {
    case format::kTlvCmdline:
      trace->cmdline = std::move(value);
      break;
    case format::kTlvHostname:
      trace->hostname = std::move(value);
      break;
    case format::kTlvRankEnv:
      trace->rank_env = std::move(value);
      break;
    case format::kTlvExe:
      trace->exe = std::move(value);
      break;
    case format::kTlvParentTrace:
      trace->parent_trace = std::move(value);
      break;
    case format::kTlvAllocator:
      trace->allocator = std::move(value);
      break;
    case format::kTlvPythonDir:
      trace->python_dir = std::move(value);
      break;
    case format::kTlvProfiler: {
      // u64 start, u64 end, build-id: malformed values are ignored.
      const auto* v = reinterpret_cast<const uint8_t*>(value.data());
      if (value.size() < 16 || value.size() - 16 > format::kMaxBuildIdBytes) break;
      const uint64_t start = LoadU64(v), end = LoadU64(v + 8);
      if (start >= end) break;
      trace->profiler_start = start;
      trace->profiler_end = end;
      trace->profiler_build_id = value.substr(16);
      break;
    }
    default:
      break;  // unknown TLVs are skipped
  }
}

}  // namespace

absl::StatusOr<size_t> ParseHeader(const uint8_t* data, size_t size, Trace* trace,
                                   bool verify_crc) {
  if (size < sizeof(format::FileHeader) ||
      memcmp(data, format::kFileMagic, sizeof(format::kFileMagic)) != 0) {
    if (size >= 8 && memcmp(data, format::kFileMagic, 8) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("truncated memstep trace header (", size, " bytes)"));
    }
    return absl::InvalidArgumentError("not a memstep trace (bad magic)");
  }
  format::FileHeader h;
  memcpy(&h, data, sizeof(h));
  if (h.version_major != format::kVersionMajor) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported memstep trace version ", h.version_major, ".", h.version_minor,
                     " (this reader supports ", format::kVersionMajor, ".x)"));
  }
  if (h.header_len < sizeof(h) + 4 || h.header_len > kMaxHeaderLen) {
    return absl::InvalidArgumentError(
        absl::StrCat("corrupt memstep trace header (header_len ", h.header_len, ")"));
  }
  if (h.header_len > size) {
    return absl::InvalidArgumentError(
        absl::StrCat("truncated memstep trace header (", size, " of ", h.header_len, " bytes)"));
  }
  const size_t crc_at = h.header_len - 4;
  if (verify_crc && format::Crc32c(data, crc_at) != LoadU32(data + crc_at)) {
    return absl::InvalidArgumentError("corrupt memstep trace header (CRC mismatch)");
  }
  trace->header = h;
  size_t pos = sizeof(h);
  while (pos < crc_at) {
    if (crc_at - pos < 6) {
      return absl::InvalidArgumentError("corrupt memstep trace header (partial TLV)");
    }
    const uint16_t type = LoadU16(data + pos);
    const uint32_t len = LoadU32(data + pos + 2);
    pos += 6;
    if (len > crc_at - pos) {
      return absl::InvalidArgumentError("corrupt memstep trace header (TLV overruns header)");
    }
    if (type == format::kTlvEnd) break;
    SetHeaderTlv(type, std::string(reinterpret_cast<const char*>(data + pos), len), trace);
    pos += len;
  }
  return static_cast<size_t>(h.header_len);
}

namespace internal {

#if defined(__x86_64__)
namespace {
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(const uint8_t* p, size_t n) {
  uint64_t crc = 0xFFFFFFFFu;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    crc = _mm_crc32_u64(crc, w);
  }
  uint32_t c = static_cast<uint32_t>(crc);
  for (; n > 0; --n) c = _mm_crc32_u8(c, *p++);
  return ~c;
}
}  // namespace
#endif

uint32_t PayloadCrc32c(const uint8_t* data, size_t n) {
#if defined(__x86_64__)
  static const bool kSse42 = __builtin_cpu_supports("sse4.2");
  if (kSse42) return Crc32cSse42(data, n);
#endif
  return format::Crc32c(data, n);
}

ChunkScan ScanChunks(const uint8_t* data, size_t size, size_t offset, const ReaderOptions& options,
                     ChunkDecoder& decoder, ChunkSink& sink, uint64_t* chunks,
                     std::vector<std::string>* warnings, uint64_t* budget) {
  size_t pos = offset;
  ChunkScan scan;
  while (pos < size) {
    if (size - pos < sizeof(format::ChunkHeader)) {
      scan.problem = "file ends inside a chunk header";
      scan.incomplete = true;
      break;
    }
    format::ChunkHeader ch;
    memcpy(&ch, data + pos, sizeof(ch));
    if (ch.magic != format::kChunkMagic) {
      scan.problem = "bad chunk magic";
      break;
    }
    if (options.verify_crc && format::Crc32c(&ch, 32) != ch.header_crc32c) {
      scan.problem = "chunk header CRC mismatch";
      break;
    }
    if (ch.raw_len > format::kMaxChunkRawLen ||
        (ch.codec == format::kCodecRaw && ch.payload_len != ch.raw_len) ||
        (ch.codec == format::kCodecZstd &&
         ch.payload_len > ZSTD_compressBound(format::kMaxChunkRawLen)) ||
        ch.codec > format::kCodecZstd) {
      scan.problem = "bad chunk lengths or codec";
      break;
    }
    const size_t payload_at = pos + sizeof(ch);
    if (ch.payload_len > size - payload_at) {
      scan.problem = "file ends inside a chunk";
      scan.incomplete = true;
      break;
    }
    const uint8_t* payload = data + payload_at;
    if (options.verify_crc && PayloadCrc32c(payload, ch.payload_len) != ch.payload_crc32c) {
      scan.problem = "chunk payload CRC mismatch";
      break;
    }
    const uint8_t* records = payload;
    if (ch.codec == format::kCodecZstd) {
      decoder.raw.resize(ch.raw_len);
      size_t got = ZSTD_decompressDCtx(decoder.dctx.get(), decoder.raw.data(), decoder.raw.size(),
                                       payload, ch.payload_len);
      if (ZSTD_isError(got) || got != ch.raw_len) {
        scan.problem = "chunk does not decompress";
        break;
      }
      records = decoder.raw.data();
    }
    if (ch.seq != *chunks) {
      warnings->push_back(
          absl::StrCat("chunk at offset ", pos, " has seq ", ch.seq, ", expected ", *chunks));
    }
    ChunkRecords& c = decoder.records;
    c.Clear();
    if (!DecodeRecords(records, ch.raw_len, c, *budget)) {
      scan.problem = *budget == 0 ? "too many records" : "malformed record in chunk";
      break;
    }
    *budget -= c.events.size();
    ++*chunks;
    pos = payload_at + ch.payload_len;
    if (!sink.Take(ch, c)) break;
  }
  scan.next_offset = pos;
  return scan;
}

}  // namespace internal

namespace {

// Merges every chunk into a Trace, events included (unsorted).
class MergeSink : public internal::ChunkSink {
 public:
  explicit MergeSink(Trace& t) : t_(t) {}
  bool Take(const format::ChunkHeader&, internal::ChunkRecords& c) override {
    internal::Merge(c, t_, /*with_bulk=*/true);
    return true;
  }

 private:
  Trace& t_;
};

}  // namespace

bool IsBulkTag(uint8_t tag) {
  switch (tag) {
    case format::kTagAlloc:
    case format::kTagFree:
    case format::kTagMmap:
    case format::kTagMunmap:
    case format::kTagMremap:
    case format::kTagDevAlloc:
    case format::kTagDevFree:
      return true;
    default:
      return false;
  }
}

ChunkScan ParseChunks(const uint8_t* data, size_t size, size_t offset, Trace* trace,
                      const ReaderOptions& options) {
  internal::ChunkDecoder decoder;
  MergeSink sink(*trace);
  uint64_t budget = options.max_records;
  return internal::ScanChunks(data, size, offset, options, decoder, sink, &trace->chunks,
                              &trace->warnings, &budget);
}

absl::StatusOr<Trace> ParseTrace(const uint8_t* data, size_t size, const ReaderOptions& options) {
  Trace t;
  absl::StatusOr<size_t> header_len = ParseHeader(data, size, &t, options.verify_crc);
  if (!header_len.ok()) return header_len.status();

  const ChunkScan scan = ParseChunks(data, size, *header_len, &t, options);
  const size_t pos = scan.next_offset;
  if (pos < size) {
    t.truncated = true;
    t.truncated_at_offset = pos;
    t.warnings.push_back(absl::StrCat("truncated at offset ", pos, " (", scan.problem, "); read ",
                                      t.chunks, " chunks before it"));
  }
  std::stable_sort(t.events.begin(), t.events.end(),
                   [](const Event& a, const Event& b) { return a.seq < b.seq; });
  internal::SortSideLists(t);
  for (const Event& e : t.events) t.unknown_refs += internal::UnknownRefsOf(e, t);
  t.unknown_refs += internal::UnknownSideRefs(t);
  if (t.unknown_refs > 0) {
    t.warnings.push_back(absl::StrCat(t.unknown_refs, " references to undefined ids"));
  }
  return t;
}

absl::StatusOr<Trace> ReadTraceFile(const std::string& path, const ReaderOptions& options) {
  TraceFile file;
  if (absl::Status st = MapTraceFile(path, &file); !st.ok()) return st;
  absl::StatusOr<Trace> trace = ParseTrace(file.data, file.size, options);
  munmap(const_cast<uint8_t*>(file.data), file.size);
  if (!trace.ok()) {
    return absl::Status(trace.status().code(), absl::StrCat(path, ": ", trace.status().message()));
  }
  return trace;
}

}  // namespace memstep::reader

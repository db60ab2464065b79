// Every record kind of the trace, defined once: its tag, its name in
// docs/format.md, and its fields in wire order. From this one table come a
// typed struct per record (AllocRecord, StepRecord, ...), its encoder
// (Encode), its decoder (Decode) and the field list docs/format.md shows
// (FieldSignature; a test checks the document against it). Adding a field to
// a record is one line here plus its uses: a writer that does not set it
// writes 0, a reader that does not read it ignores it, and the wire layout,
// the decoder and the document follow.
//
// Field kinds, in the table:
//   MS_U(type, name)            unsigned LEB128 varint; decoding fails when the
//                               value does not fit `type`
//   MS_S(type, name)            zig-zag LEB128 varint, signed, likewise
//   MS_COUNTERS(name)           the 8 unsigned fields of Counters (format.h)
//   MS_BYTES(name, max)         u length (<= max), then that many bytes
//   MS_LIST(name, width, max, count_doc, item_doc)
//                               u count (<= max), then count groups of `width`
//                               unsigned varints
// Decoded BYTES and LIST fields are views into the decoder's input (valid as
// long as it is). Freestanding like format.h: compiled into libmemstep.so.

#ifndef MEMSTEP_SRC_FORMAT_RECORDS_H_
#define MEMSTEP_SRC_FORMAT_RECORDS_H_

#include <cstddef>
#include <cstdint>
#include <limits>

#include "src/format/format.h"

namespace memstep::format {

inline constexpr uint64_t kMaxBuildIdBytes = 256;
inline constexpr uint64_t kMaxSnapshotSites = kMaxChunkRawLen / 3;
// ARENA_STATS: arenas listed (libmemstep.so sums any beyond 63 into the last).
inline constexpr uint64_t kMaxArenaStats = 64;

// clang-format off
#define MEMSTEP_RECORDS(R)                                                                        \
  R(String, kTagString, "STRING",                                                                 \
    MS_U(uint64_t, id) MS_BYTES(text, kMaxChunkRawLen))                                           \
  R(Mapping, kTagMapping, "MAPPING",                                                              \
    MS_U(uint64_t, id) MS_U(uint64_t, ts) MS_U(uint64_t, start) MS_U(uint64_t, end)               \
    MS_U(uint64_t, load_bias) MS_U(uint64_t, path_str) MS_BYTES(build_id, kMaxBuildIdBytes))      \
  R(MappingGone, kTagMappingGone, "MAPPING_GONE",                                                 \
    MS_U(uint64_t, id) MS_U(uint64_t, ts))                                                        \
  R(Stack, kTagStack, "STACK",                                                                    \
    MS_U(uint64_t, id) MS_LIST(ips, 1, kMaxFrames, "nframes", "u ip"))                            \
  R(Alloc, kTagAlloc, "ALLOC",                                                                    \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint32_t, tid) MS_U(uint64_t, stack)              \
    MS_U(uint64_t, addr) MS_U(uint64_t, size) MS_U(uint64_t, interval) MS_U(uint8_t, kind)        \
    MS_U(uint64_t, step) MS_U(uint64_t, stage_str))                                               \
  R(Free, kTagFree, "FREE",                                                                       \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint32_t, tid) MS_U(uint64_t, addr))              \
  R(Mmap, kTagMmap, "MMAP",                                                                       \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint32_t, tid) MS_U(uint64_t, stack)              \
    MS_U(uint64_t, addr) MS_U(uint64_t, len) MS_U(uint64_t, prot) MS_U(uint64_t, flags)           \
    MS_U(uint64_t, step) MS_U(uint64_t, stage_str))                                               \
  R(Munmap, kTagMunmap, "MUNMAP",                                                                 \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint32_t, tid) MS_U(uint64_t, addr)               \
    MS_U(uint64_t, len))                                                                          \
  R(Mremap, kTagMremap, "MREMAP",                                                                 \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint32_t, tid) MS_U(uint64_t, stack)              \
    MS_U(uint64_t, old_addr) MS_U(uint64_t, old_len) MS_U(uint64_t, new_addr)                     \
    MS_U(uint64_t, new_len) MS_U(uint64_t, step) MS_U(uint64_t, stage_str))                       \
  R(DevAlloc, kTagDevAlloc, "DEV_ALLOC",                                                          \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint32_t, tid) MS_U(uint64_t, stack)              \
    MS_U(uint8_t, kind) MS_S(int32_t, device) MS_U(uint64_t, addr) MS_U(uint64_t, size)           \
    MS_U(uint8_t, api) MS_U(uint64_t, aux) MS_U(uint64_t, step) MS_U(uint64_t, stage_str)         \
    MS_U(uint8_t, sampled) MS_U(uint64_t, interval))                                              \
  R(DevFree, kTagDevFree, "DEV_FREE",                                                             \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint32_t, tid) MS_U(uint8_t, kind)                \
    MS_S(int32_t, device) MS_U(uint64_t, addr) MS_U(uint64_t, size) MS_U(uint8_t, api))           \
  R(DevFail, kTagDevFail, "DEV_FAIL",                                                             \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint32_t, tid) MS_U(uint64_t, stack)              \
    MS_U(uint8_t, kind) MS_S(int32_t, device) MS_U(uint64_t, size) MS_U(uint8_t, api)             \
    MS_U(uint64_t, error) MS_U(uint64_t, step) MS_U(uint64_t, stage_str))                         \
  R(Step, kTagStep, "STEP",                                                                       \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint32_t, tid) MS_U(uint64_t, step)               \
    MS_U(uint8_t, phase) MS_COUNTERS(counters))                                                   \
  R(Stage, kTagStage, "STAGE",                                                                    \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint32_t, tid) MS_U(uint64_t, stage_str)          \
    MS_U(uint64_t, step) MS_U(uint8_t, phase) MS_COUNTERS(counters))                              \
  R(Counter, kTagCounter, "COUNTER",                                                              \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint32_t, tid) MS_U(uint64_t, name_str)           \
    MS_S(int64_t, value))                                                                         \
  R(ArenaStats, kTagArenaStats, "ARENA_STATS",                                                    \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint32_t, tid)                                    \
    MS_LIST(arenas, 4, kMaxArenaStats, "n", "(u system, u free, u top, u free_chunks)"))          \
  R(Rate, kTagRate, "RATE",                                                                       \
    MS_U(uint64_t, ts) MS_U(uint64_t, interval))                                                  \
  R(Epoch, kTagEpoch, "EPOCH",                                                                    \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint32_t, tid) MS_U(uint64_t, epoch))             \
  R(Alert, kTagAlert, "ALERT",                                                                    \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint64_t, step) MS_U(uint8_t, rule)               \
    MS_U(uint64_t, value) MS_U(uint64_t, threshold) MS_U(uint64_t, stage_str)                     \
    MS_U(uint64_t, site_stack))                                                                   \
  R(SiteSnapshot, kTagSiteSnapshot, "SITE_SNAPSHOT",                                              \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint64_t, step) MS_U(uint8_t, cause)              \
    MS_U(uint64_t, stage_str)                                                                     \
    MS_LIST(sites, 3, kMaxSnapshotSites, "n", "(u stack, u live_bytes_est, u live_count_est)"))   \
  R(DevInfo, kTagDevInfo, "DEV_INFO",                                                             \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint64_t, step) MS_S(int32_t, device)             \
    MS_U(uint64_t, free) MS_U(uint64_t, total) MS_U(uint64_t, pool_reserved)                      \
    MS_U(uint64_t, pool_used))                                                                    \
  R(Hunt, kTagHunt, "HUNT",                                                                       \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint64_t, step) MS_U(uint8_t, phase)              \
    MS_U(uint8_t, outcome) MS_U(uint64_t, interval) MS_U(uint64_t, rate) MS_U(uint64_t, growth)   \
    MS_U(uint64_t, explained) MS_U(uint64_t, samples) MS_U(uint64_t, sites)                       \
    MS_U(uint64_t, stack_ns) MS_U(uint8_t, memory))                                               \
  R(MemSnapshot, kTagMemSnapshot, "MEM_SNAPSHOT",                                                 \
    MS_U(uint64_t, ts) MS_U(uint64_t, seq) MS_U(uint32_t, tid) MS_U(uint64_t, step)               \
    MS_U(uint64_t, stage_str) MS_U(uint8_t, cause) MS_S(int32_t, device)                          \
    MS_U(uint64_t, requested) MS_U(uint64_t, free) MS_U(uint64_t, total) MS_U(uint8_t, api)       \
    MS_U(uint64_t, error))                                                                        \
  R(Lost, kTagLost, "LOST",                                                                       \
    MS_U(uint64_t, ts) MS_U(uint64_t, records) MS_U(uint64_t, bytes) MS_U(uint64_t, cause))       \
  R(Notice, kTagNotice, "NOTICE",                                                                 \
    MS_U(uint64_t, ts) MS_U(uint64_t, code) MS_U(uint64_t, message_str))                          \
  R(Trailer, kTagTrailer, "TRAILER",                                                              \
    MS_U(uint64_t, ts) MS_COUNTERS(counters) MS_U(uint64_t, clean_exit))
// clang-format on

// A BYTES field: `size` bytes at `data`.
struct ByteView {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

// A LIST field: `count` groups of its width. To encode, point `values` at
// count x width numbers; a decoded list keeps its varints (`wire`), read
// back with ListReader.
struct ListView {
  const uint64_t* values = nullptr;
  const uint8_t* wire = nullptr;
  size_t wire_len = 0;
  uint64_t count = 0;
};

// Reads a ListView's count x width numbers in order; Next is false after
// the last one.
class ListReader {
 public:
  ListReader(const ListView& v, uint64_t width)
      : d_(v.wire, v.wire_len), values_(v.values), left_(v.count * width) {}
  bool Next(uint64_t* out) {
    if (left_ == 0) return false;
    --left_;
    if (values_ != nullptr) {
      *out = *values_++;
      return true;
    }
    return d_.U(out);
  }

 private:
  RecordDecoder d_;
  const uint64_t* values_;
  uint64_t left_;
};

namespace internal {

template <typename T>
inline bool DecodeUnsigned(RecordDecoder& d, T* out) {
  uint64_t v;
  if (!d.U(&v) || v > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
  *out = static_cast<T>(v);
  return true;
}

template <typename T>
inline bool DecodeSigned(RecordDecoder& d, T* out) {
  int64_t v;
  if (!d.S(&v) || v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
      v > static_cast<int64_t>(std::numeric_limits<T>::max())) {
    return false;
  }
  *out = static_cast<T>(v);
  return true;
}

inline bool DecodeBytes(RecordDecoder& d, uint64_t max, ByteView* out) {
  uint64_t n;
  const uint8_t* p;
  if (!d.U(&n) || n > max || !d.Bytes(static_cast<size_t>(n), &p)) return false;
  out->data = p;
  out->size = n;
  return true;
}

inline bool DecodeList(RecordDecoder& d, uint64_t width, uint64_t max, ListView* out) {
  uint64_t n;
  if (!d.U(&n) || n > max || n > d.remaining() / width) return false;  // >= 1 byte each
  const uint8_t* start = d.pos();
  for (uint64_t i = 0; i < n * width; ++i) {
    uint64_t v;
    if (!d.U(&v)) return false;
  }
  out->values = nullptr;
  out->wire = start;
  out->wire_len = static_cast<size_t>(d.pos() - start);
  out->count = n;
  return true;
}

inline void EncodeList(RecordEncoder& e, uint64_t width, const ListView& v) {
  e.U(v.count);
  ListReader r(v, width);
  uint64_t x;
  while (r.Next(&x)) e.U(x);
}

}  // namespace internal

// ---- the generated code ----

#define MS_U(type, name) type name = 0;
#define MS_S(type, name) type name = 0;
#define MS_COUNTERS(name) Counters name = {};
#define MS_BYTES(name, max) ByteView name;
#define MS_LIST(name, width, max, count_doc, item_doc) ListView name;
#define MEMSTEP_RECORD_STRUCT(Name, tag, doc, fields) \
  struct Name##Record {                               \
    static constexpr Tag kTag = tag;                  \
    fields                                            \
  };
MEMSTEP_RECORDS(MEMSTEP_RECORD_STRUCT)
#undef MEMSTEP_RECORD_STRUCT
#undef MS_U
#undef MS_S
#undef MS_COUNTERS
#undef MS_BYTES
#undef MS_LIST

// Encode(e, record): the tag and every field; false (nothing written) when
// the buffer is full.
#define MS_U(type, name) e.U(static_cast<uint64_t>(r.name));
#define MS_S(type, name) e.S(static_cast<int64_t>(r.name));
#define MS_COUNTERS(name) e.PutCounters(r.name);
#define MS_BYTES(name, max) \
  e.U(r.name.size);         \
  e.Bytes(r.name.data, static_cast<size_t>(r.name.size));
#define MS_LIST(name, width, max, count_doc, item_doc) internal::EncodeList(e, width, r.name);
#define MEMSTEP_RECORD_ENCODE(Name, tag, doc, fields)           \
  inline bool Encode(RecordEncoder& e, const Name##Record& r) { \
    e.Begin(tag);                                               \
    fields return e.End();                                      \
  }
MEMSTEP_RECORDS(MEMSTEP_RECORD_ENCODE)
#undef MEMSTEP_RECORD_ENCODE
#undef MS_U
#undef MS_S
#undef MS_COUNTERS
#undef MS_BYTES
#undef MS_LIST

// Decode(d, &record): every field after the tag byte (which the caller has
// read); false on truncated or out-of-range input.
#define MS_U(type, name) &&internal::DecodeUnsigned(d, &r->name)
#define MS_S(type, name) &&internal::DecodeSigned(d, &r->name)
#define MS_COUNTERS(name) &&d.GetCounters(&r->name)
#define MS_BYTES(name, max) &&internal::DecodeBytes(d, max, &r->name)
#define MS_LIST(name, width, max, count_doc, item_doc) \
  &&internal::DecodeList(d, width, max, &r->name)
#define MEMSTEP_RECORD_DECODE(Name, tag, doc, fields) \
  inline bool Decode(RecordDecoder& d, Name##Record* r) { return true fields; }
MEMSTEP_RECORDS(MEMSTEP_RECORD_DECODE)
#undef MEMSTEP_RECORD_DECODE
#undef MS_U
#undef MS_S
#undef MS_COUNTERS
#undef MS_BYTES
#undef MS_LIST

// The field list of a record as docs/format.md's table shows it
// ("u ts, u seq, ..."), or nullptr for an unknown tag.
#define MS_U(type, name) ", u " #name
#define MS_S(type, name) ", s " #name
#define MS_COUNTERS(name) ", Counters"
#define MS_BYTES(name, max) ", u " #name "_len, " #name "_len bytes"
#define MS_LIST(name, width, max, count_doc, item_doc) \
  ", u " count_doc ", " item_doc " \u00d7 " count_doc
inline const char* FieldSignature(uint8_t tag) {
#define MEMSTEP_RECORD_SIGNATURE(Name, t, doc, fields) \
  if (tag == t) return (fields) + 2;
  MEMSTEP_RECORDS(MEMSTEP_RECORD_SIGNATURE)
#undef MEMSTEP_RECORD_SIGNATURE
  return nullptr;
}
#undef MS_U
#undef MS_S
#undef MS_COUNTERS
#undef MS_BYTES
#undef MS_LIST

// kMaxEncodedSize<R>: the most bytes Encode can write for an R record (the
// tag, every varint at its type's widest, BYTES and LIST fields at their
// maximum). A writer with a fixed buffer sizes it with this, so adding a field
// to a record grows the buffer with it instead of making Encode fail (and the
// record go unwritten) at run time.
constexpr uint64_t MaxVarintBytes(uint64_t bits) { return (bits + 6) / 7; }
template <class R>
struct MaxEncoded;
#define MS_U(type, name) +MaxVarintBytes(8 * sizeof(type))
#define MS_S(type, name) +MaxVarintBytes(8 * sizeof(type))
#define MS_COUNTERS(name) +(sizeof(Counters) / sizeof(uint64_t)) * kMaxVarint
#define MS_BYTES(name, max) +kMaxVarint + (max)
#define MS_LIST(name, width, max, count_doc, item_doc) +kMaxVarint + (max) * (width)*kMaxVarint
#define MEMSTEP_RECORD_MAX(Name, tag, doc, fields)        \
  template <>                                             \
  struct MaxEncoded<Name##Record> {                       \
    static constexpr uint64_t kSize = uint64_t{1} fields; \
  };
MEMSTEP_RECORDS(MEMSTEP_RECORD_MAX)
#undef MEMSTEP_RECORD_MAX
#undef MS_U
#undef MS_S
#undef MS_COUNTERS
#undef MS_BYTES
#undef MS_LIST
template <class R>
inline constexpr size_t kMaxEncodedSize = static_cast<size_t>(MaxEncoded<R>::kSize);

// The name of a record tag as docs/format.md writes it ("ALLOC"), or nullptr.
inline const char* RecordName(uint8_t tag) {
#define MEMSTEP_RECORD_NAME(Name, t, doc, fields) \
  if (tag == t) return doc;
  MEMSTEP_RECORDS(MEMSTEP_RECORD_NAME)
#undef MEMSTEP_RECORD_NAME
  return nullptr;
}

}  // namespace memstep::format

#endif  // MEMSTEP_SRC_FORMAT_RECORDS_H_

// Internals shared by the reader's files (reader.cc: the chunk loop and the
// record decoder; stream.cc: the streaming pass). Not for use outside
// src/reader.
//
// One chunk loop: ScanChunks validates, decompresses and decodes chunk after
// chunk, and hands each whole chunk's records to a ChunkSink. ParseChunks
// (whole-trace and tailing readers) uses the sink that merges into a Trace;
// the streaming reader (stream.cc) uses sinks that keep dictionaries and
// control events and pass bulk events through a reorder window.

#ifndef MEMSTEP_SRC_READER_READER_INTERNAL_H_
#define MEMSTEP_SRC_READER_READER_INTERNAL_H_

#include <zstd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/format/format.h"
#include "src/reader/reader.h"

namespace memstep::reader::internal {

// Records of one chunk, merged into the Trace only if the whole chunk decodes.
struct ChunkRecords {
  // false: STRING and STACK records are decoded (checked) but not kept, for
  // passes that re-read a trace whose dictionaries are known already.
  bool keep_dictionary = true;
  std::vector<std::pair<uint64_t, std::string>> strings;
  std::vector<std::pair<uint64_t, std::vector<uint64_t>>> stacks;
  std::vector<std::pair<Mapping, uint64_t>> mappings;        // mapping, path string id
  std::vector<std::pair<uint64_t, uint64_t>> mappings_gone;  // id, ts
  std::vector<Event> events;
  std::vector<format::Counters> counters;
  std::vector<Lost> lost;
  std::vector<std::pair<Notice, uint64_t>> notices;  // notice, message string id
  std::vector<Rate> rates;
  std::vector<std::pair<Alert, uint64_t>> alerts;            // alert, stage string id
  std::vector<std::pair<SiteSnapshot, uint64_t>> snapshots;  // snapshot, stage string id
  std::vector<DeviceInfo> device_info;
  std::vector<Hunt> hunts;
  std::vector<ArenaStats> arena_stats;
  bool has_trailer = false;
  Trailer trailer;
  uint64_t max_ts = 0;

  // Empties every list (keeping capacity) for the next chunk.
  void Clear();
};

// Receives each whole valid chunk's records, in file order.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  // `header`: the chunk's header (its ts: when the writer emitted it).
  // Returns false to stop the loop after this chunk.
  virtual bool Take(const format::ChunkHeader& header, ChunkRecords& records) = 0;
};

// Decompression state reused across chunks and calls.
struct ChunkDecoder {
  ChunkDecoder();
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx;
  std::vector<uint8_t> raw;
  ChunkRecords records;
};

// The chunk loop: chunks of data[offset, size) until the data ends, a chunk
// is incomplete or invalid (ChunkScan says which), or the sink asks to stop.
// `*chunks` numbers the chunks (a chunk seq that differs is a warning in
// `*warnings`); `*budget` is the records still allowed (ReaderOptions::
// max_records), decremented by each chunk's sequenced records.
ChunkScan ScanChunks(const uint8_t* data, size_t size, size_t offset, const ReaderOptions& options,
                     ChunkDecoder& decoder, ChunkSink& sink, uint64_t* chunks,
                     std::vector<std::string>* warnings, uint64_t* budget);

// format::Crc32c of data[0, n), with the CPU's CRC-32C instruction where
// it has one (SSE 4.2 on x86-64): the chunk payloads' check.
uint32_t PayloadCrc32c(const uint8_t* data, size_t n);

// Merges one chunk's records into `t` (dictionaries, side lists, trailer,
// control events); its bulk events (IsBulkTag) too when `with_bulk`.
void Merge(ChunkRecords& c, Trace& t, bool with_bulk);

// Sorts the side lists (alerts, snapshots, device info, hunts, arena stats)
// by seq, stably.
void SortSideLists(Trace& t);

// Counts references to undefined stack and string ids in `e` against `t`.
uint64_t UnknownRefsOf(const Event& e, const Trace& t);
// The same for the side lists (alerts' and snapshots' stacks).
uint64_t UnknownSideRefs(const Trace& t);

}  // namespace memstep::reader::internal

#endif  // MEMSTEP_SRC_READER_READER_INTERNAL_H_

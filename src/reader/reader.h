// Reader of memstep trace files (src/format/format.h, docs/format.md).
//
// Contract:
//  - Never crashes, never reads out of bounds and never allocates in
//    proportion to an untrusted length field: every length is checked against
//    the bytes actually present and against the format's limits
//    (kMaxChunkRawLen, kMaxFrames) before it is used.
//  - A file that is not a trace (short, bad magic, unsupported major version,
//    bad header CRC or malformed header TLVs) is an error (absl::Status with a
//    message fit for the user).
//  - Chunks are all-or-nothing. Reading stops at the first chunk that is
//    incomplete or invalid (bad magic, CRC mismatch, bad length, undecodable
//    payload or record); everything before it is kept, and `truncated` /
//    `truncated_at_offset` name the first unreadable byte.
//  - Sequenced records (ALLOC, FREE, MMAP, MUNMAP, MREMAP, STEP, STAGE,
//    COUNTER, EPOCH, DEV_ALLOC, DEV_FREE, DEV_FAIL) are delivered in `events`, sorted by their
//    global `seq` (stable for equal seq). ALERT, SITE_SNAPSHOT, DEV_INFO and ARENA_STATS records go
//    to `alerts`, `snapshots`, `device_info` and `arena_stats`, each sorted
//    by seq. v1 loads and sorts per file: memory is about 100 bytes
//    per sequenced record plus the dictionaries, bounded by
//    ReaderOptions::max_events.
//  - References to undefined stack, string or mapping ids are tolerated and
//    counted in `unknown_refs`.
// Thread-compatible; no global state.

#ifndef MEMSTEP_SRC_READER_READER_H_
#define MEMSTEP_SRC_READER_READER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::reader {

// One sequenced record. Field use by tag (unused fields are 0):
//   ALLOC   stack addr size interval kind step str(stage)
//   FREE    addr
//   MMAP    stack addr size(len) prot flags step str(stage)
//   MUNMAP  addr size(len)
//   MREMAP  stack addr(old) size(old_len) new_addr new_len step str(stage)
//   STEP    step phase counters
//   STAGE   str(stage) step phase counters
//   COUNTER str(name) value
//   EPOCH   step (= the epoch number)
//   DEV_ALLOC  stack kind device addr size api aux step str(stage)
//   DEV_FREE   kind device addr size api
//   DEV_FAIL   stack kind device size api value(= error code) step str(stage)
struct Event {
  uint8_t tag = 0;
  uint8_t kind = 0;   // ALLOC: format::AllocKind; DEV_*: format::DeviceKind
  uint8_t phase = 0;  // STEP/STAGE: 0 begin, 1 end
  // DEV_ALLOC: 1 a sample (stack, weight from `interval`), 0 counted only.
  uint8_t sampled = 0;
  uint32_t tid = 0;
  uint64_t ts = 0;  // ns since trace start
  uint64_t seq = 0;
  uint64_t stack = 0;
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t interval = 0;  // ALLOC, DEV_ALLOC: T of the sample (0: p = 1)
  uint64_t new_addr = 0;  // MREMAP; MMAP: prot; MEM_SNAPSHOT: free device bytes
  uint64_t new_len = 0;   // MREMAP; MMAP: flags; MEM_SNAPSHOT: total device bytes
  uint64_t step = 0;
  uint64_t str = 0;
  // COUNTER: its value; DEV_FAIL, MEM_SNAPSHOT: the error code.
  // MEM_SNAPSHOT: kind is the cause (format::MemSnapshotCause), size the
  // requested bytes.
  int64_t value = 0;
  uint32_t counters = 0;  // STEP/STAGE: index into Trace::counters
  int32_t device = -1;    // DEV_*: CUDA device ordinal, -1 unknown
  uint8_t api = 0;        // DEV_*: format::DeviceApi
  uint64_t aux = 0;       // DEV_ALLOC: pool handle (kDevPool)
};

// Device memory as the driver reported it at a step end (kTagDevInfo).
struct DeviceInfo {
  uint64_t ts = 0;
  uint64_t seq = 0;
  uint64_t step = 0;
  int32_t device = -1;
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
  uint64_t pool_reserved = 0;
  uint64_t pool_used = 0;
};

// glibc's arenas at a step end (kTagArenaStats; docs/format.md "Step-end
// allocator statistics"), just before that step's STEP end record.
struct ArenaStats {
  struct Arena {
    uint64_t system = 0;       // bytes the arena got from the system
    uint64_t free = 0;         // free chunks, its top chunk included
    uint64_t top = 0;          // its top chunk
    uint64_t free_chunks = 0;  // free chunks other than the top
  };
  uint64_t ts = 0;
  uint64_t seq = 0;
  uint32_t tid = 0;
  std::vector<Arena> arenas;  // arena 0 is the main arena
};

// A leak hunt began or ended (kTagHunt; docs/analysis.md "Leak hunt"): the
// record as decoded (docs/format.md has its fields).
using Hunt = format::HuntRecord;

struct Mapping {
  uint64_t id = 0;
  uint64_t ts = 0;
  uint64_t gone_ts = UINT64_MAX;  // MAPPING_GONE time, or never
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t load_bias = 0;
  std::string path;
  std::string build_id;  // raw bytes
};

struct Lost {
  uint64_t ts = 0;
  uint64_t records = 0;
  uint64_t bytes = 0;
  uint64_t cause = 0;
};

struct Notice {
  uint64_t ts = 0;
  uint64_t code = 0;
  std::string message;
};

struct Rate {
  uint64_t ts = 0;
  uint64_t interval = 0;
};

// An online alert (kTagAlert) fired in the profiled process.
struct Alert {
  uint64_t ts = 0;
  uint64_t seq = 0;
  uint64_t step = 0;
  uint8_t rule = 0;  // format::AlertRule
  uint64_t value = 0;
  uint64_t threshold = 0;
  std::string stage;        // kAlertStagePeak; "" otherwise
  uint64_t site_stack = 0;  // top growing site's stack id, 0 = unknown
};

// Top call sites by estimated live bytes at a peak (kTagSiteSnapshot).
struct SiteSnapshot {
  struct Site {
    uint64_t stack = 0;
    uint64_t live_bytes = 0;  // estimate
    uint64_t live_count = 0;  // estimate
  };
  uint64_t ts = 0;
  uint64_t seq = 0;
  uint64_t step = 0;
  uint8_t cause = 0;  // format::SnapshotCause
  std::string stage;  // kSnapshotStagePeak: the stage; else usually ""
  std::vector<Site> sites;
};

struct Trailer {
  uint64_t ts = 0;
  format::Counters counters{};
  bool clean_exit = false;
};

struct Trace {
  format::FileHeader header{};
  std::string cmdline;  // argv joined with '\0' (TLV 1)
  std::string hostname;
  std::string rank_env;  // "RANK=..\0LOCAL_RANK=..\0..."
  std::string exe;
  std::string parent_trace;
  std::string allocator;
  // TLV 7 (kTlvProfiler): the profiler's own object in the process, its
  // [start, end) and build-id (raw bytes, "" if none); 0, 0 when the trace
  // does not say (traces written before it existed).
  uint64_t profiler_start = 0;
  uint64_t profiler_end = 0;
  std::string profiler_build_id;
  // TLV 8 (kTlvPythonDir): memstep's Python directory, "" when the trace
  // does not say (no `memstep run`, or written before it existed).
  std::string python_dir;

  absl::flat_hash_map<uint64_t, std::string> strings;
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> stacks;  // innermost first
  std::vector<Mapping> mappings;                                // in file order
  std::vector<Event> events;                                    // sorted by seq
  std::vector<format::Counters> counters;                       // referenced by Event::counters
  std::vector<Lost> lost;
  std::vector<Notice> notices;
  std::vector<Rate> rates;
  std::vector<Alert> alerts;            // sorted by seq
  std::vector<SiteSnapshot> snapshots;  // sorted by seq
  std::vector<DeviceInfo> device_info;  // sorted by seq
  std::vector<Hunt> hunts;              // sorted by seq
  std::vector<ArenaStats> arena_stats;  // sorted by seq
  bool has_trailer = false;
  Trailer trailer;

  uint64_t chunks = 0;  // valid chunks read
  uint64_t max_ts = 0;  // largest record timestamp seen
  bool truncated = false;
  uint64_t truncated_at_offset = 0;
  uint64_t unknown_refs = 0;  // references to undefined ids
  std::vector<std::string> warnings;

  // ScanTrace (streaming): `events` holds the control events only (every
  // sequenced record that is not IsBulkTag), `bulk_events` counts the rest,
  // and EventStream re-reads them from data[data_begin, data_end).
  bool control_only = false;
  // Every (format::DeviceKind, device) of a DEV_ALLOC, DEV_FREE or DEV_FAIL
  // record, and the largest `interval` of a sampled DEV_ALLOC.
  std::set<std::pair<uint8_t, int32_t>> device_kinds;
  uint64_t max_dev_interval = 0;
  uint64_t bulk_events = 0;
  size_t data_begin = 0;
  size_t data_end = 0;
  size_t peak_window = 0;  // most bulk events the reorder window held at once

  // The string for `id`, "" for 0 or an unknown id.
  const std::string& String(uint64_t id) const;
  // The value of `key` in rank_env ("RANK" -> "3"), "" if absent.
  std::string RankValue(const std::string& key) const;
};

struct ReaderOptions {
  // Stop (as if truncated, with a warning) after this many records.
  uint64_t max_records = uint64_t{1} << 28;
  // Fuzzing only: accept chunks whose CRCs do not match, so that mutations
  // reach the decompressor and the record decoder.
  bool verify_crc = true;
};

// Parses a whole trace held in memory.
absl::StatusOr<Trace> ParseTrace(const uint8_t* data, size_t size,
                                 const ReaderOptions& options = {});

// Reads and parses the trace file at `path` (mapped read-only).
absl::StatusOr<Trace> ReadTraceFile(const std::string& path, const ReaderOptions& options = {});

// Where ParseChunks stopped: `next_offset` is the first byte not consumed
// (the end of the last whole valid chunk). `incomplete`: the bytes there are
// the start of a chunk that the data does not hold entirely (a writer still
// appending it: parse again from `next_offset` once the file has grown);
// otherwise, when next_offset < size, the chunk there is invalid (`problem`).
struct ChunkScan {
  size_t next_offset = 0;
  bool incomplete = false;
  std::string problem;
};

// Parses the whole chunks of data[offset, size) (offset: a chunk boundary,
// e.g. the header length or a previous next_offset) and merges their records
// into `trace`, appending: sequenced records are NOT sorted (ParseTrace sorts
// once at the end) and unknown references are not counted. Stops at the
// first incomplete or invalid chunk. `trace->chunks` numbers the chunks
// across calls. For incremental readers (src/reader/tailer.h).
ChunkScan ParseChunks(const uint8_t* data, size_t size, size_t offset, Trace* trace,
                      const ReaderOptions& options = {});

// True for the records a trace has many of, one per sampled allocation,
// free, mapping or device call: ALLOC, FREE, MMAP, MUNMAP, MREMAP, DEV_ALLOC,
// DEV_FREE ("bulk"). The other sequenced records ("control": STEP, STAGE,
// COUNTER, EPOCH, DEV_FAIL, MEM_SNAPSHOT) are a few per step.
bool IsBulkTag(uint8_t tag);

// ---- Streaming (docs/architecture.md "Streaming reports") ----
//
// A trace too large to hold is read in passes: ScanTrace reads it once and
// keeps what is small (header, dictionaries, side lists, control events:
// memory in proportion to unique stacks, strings, mappings and steps), and
// EventStream re-reads its bulk events in seq order through a bounded
// reorder window, as often as an analysis needs.
//
// The reorder window (docs/format.md "Ordering invariants"): the writer puts
// a record into the first flush cycle that snapshots its thread's buffer
// after the record was pushed, and takes the record's seq and ts just
// before pushing it. So a record is never written more than one flush
// period plus one cycle's duration after its ts: once a chunk written at
// time C has been read, no record still to come has ts < C - D for D above
// that bound. The window holds a record until a chunk written more than
// D = max(min_window_ns, 2 x the largest gap between consecutive chunks)
// after its ts has been read, then releases it in seq order. A record that
// arrives after a larger seq was released breaks the bound: the stream
// stops with an error (FailedPrecondition) and callers fall back to
// ParseTrace (whole-file sort).

struct StreamOptions {
  StreamOptions() { reader.max_records = UINT64_MAX; }  // memory does not grow with records
  ReaderOptions reader;
  uint64_t min_window_ns = 2000000000;  // 2 s
  // The data is a read-only file mapping (reader::RunFiles): pages behind
  // the pass are dropped from the process (madvise MADV_DONTNEED; the page
  // cache keeps them), so the file's size does not count in its memory.
  // Never set it for other memory: MADV_DONTNEED zeroes anonymous pages.
  bool release_mapped_pages = false;
};

// Bytes of the file read so far (for a progress bar); called once per chunk.
using ProgressFn = std::function<void(uint64_t bytes_done)>;

// One streaming pass over a whole trace held in memory (mapped): everything
// ParseTrace returns, with control_only set, `events` holding the control
// events (sorted by seq) and bulk events counted, checked for references
// and for the reorder window, and dropped. On a reorder-window violation the
// result is FailedPrecondition (the message names the records).
absl::StatusOr<Trace> ScanTrace(const uint8_t* data, size_t size, const StreamOptions& options = {},
                                const ProgressFn& progress = nullptr);

// The bulk events of a scanned trace, re-read in seq order. `data` must
// outlive the stream; [begin, end) is a Trace's [data_begin, data_end).
class EventStream {
 public:
  EventStream(const uint8_t* data, size_t begin, size_t end, const StreamOptions& options = {},
              ProgressFn progress = nullptr);
  ~EventStream();
  EventStream(const EventStream&) = delete;
  EventStream& operator=(const EventStream&) = delete;

  // The next bulk event in seq order; false at the end, or on an error
  // (status(): a reorder-window violation or a chunk that no longer reads).
  bool Next(Event* e);
  const absl::Status& status() const;
  size_t peak_window() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Size of the file header (fixed part, TLVs and CRC) at the start of `data`,
// or an error if it is not a valid memstep header.
absl::StatusOr<size_t> ParseHeader(const uint8_t* data, size_t size, Trace* trace,
                                   bool verify_crc = true);

}  // namespace memstep::reader

#endif  // MEMSTEP_SRC_READER_READER_H_

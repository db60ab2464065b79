// TraceTailer: reads a trace file that is still being written, incrementally.
//
// The profiled process's writer appends whole chunks to its trace; a reader
// may see the last one half written. Each Poll() reads only the bytes added
// since the last whole chunk it parsed (pread from that offset), decodes the
// new whole chunks with the reader's codec (ParseChunks, reader.h) and hands
// their records over in `batch()`, sorted by seq; the caller consumes them and
// the next Poll() starts a new batch. A chunk the file does not hold entirely
// yet is incomplete, not corrupt: it is read again at the next Poll(). An
// invalid chunk (CRC, codec, record) is retried while the file keeps
// growing, and reported (`corrupt()`, tailing stops) once a Poll() finds the
// file unchanged with the same invalid chunk.
//
// Cost per Poll(): one fstat, and work proportional to the new bytes (plus
// at most one incomplete chunk read again), never to the length of the run.
// Memory: the dictionaries (strings, stacks, mappings) of the trace, which
// later chunks refer to, and the current batch.
// Thread-compatible.

#ifndef MEMSTEP_SRC_READER_TAILER_H_
#define MEMSTEP_SRC_READER_TAILER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "src/reader/reader.h"

namespace memstep::reader {

class TraceTailer {
 public:
  explicit TraceTailer(std::string path) : path_(std::move(path)) {}
  ~TraceTailer();
  TraceTailer(const TraceTailer&) = delete;
  TraceTailer& operator=(const TraceTailer&) = delete;

  // Reads what was appended since the last call. Returns an error only when
  // the file is not a memstep trace (bad magic, unsupported version, corrupt
  // header) or cannot be opened; a header not yet complete (or an empty file)
  // is "nothing yet" (ok, header_ready() false).
  absl::Status Poll();

  const std::string& path() const { return path_; }
  bool header_ready() const { return header_ready_; }
  // The header fields, dictionaries (strings, stacks, mappings: kept across
  // polls) and, in events/alerts/snapshots/device_info/counters/..., the
  // records of the last Poll() only (sorted by seq).
  const Trace& trace() const { return trace_; }
  // Offset of the first byte not yet parsed (a chunk boundary).
  uint64_t offset() const { return offset_; }
  // Bytes read from the file by the last Poll() and in total.
  uint64_t last_bytes_read() const { return last_read_; }
  uint64_t total_bytes_read() const { return total_read_; }
  // Whether the last Poll() read up to the end of the file as fstat saw it
  // (it reads at most 64 MiB per call).
  bool reached_end() const { return reached_end_; }
  // An invalid chunk at offset() that did not go away (its problem), or "".
  const std::string& corrupt() const { return corrupt_; }

 private:
  void ClearBatch();

  std::string path_;
  int fd_ = -1;
  Trace trace_;
  bool header_ready_ = false;
  uint64_t offset_ = 0;
  uint64_t last_read_ = 0;
  uint64_t total_read_ = 0;
  bool reached_end_ = false;
  // An invalid chunk seen at offset_ when the file had this size.
  uint64_t invalid_size_ = UINT64_MAX;
  std::string corrupt_;
  std::vector<uint8_t> buf_;
};

}  // namespace memstep::reader

#endif  // MEMSTEP_SRC_READER_TAILER_H_

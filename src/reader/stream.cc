// The streaming reader: ScanTrace (one pass: everything small) and
// EventStream (bulk events re-read in seq order through the reorder window).
// reader.h has the contract and the window's bound.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "src/reader/reader.h"
#include "src/reader/reader_internal.h"

namespace memstep::reader {
namespace {

using internal::ChunkRecords;

// Holds bulk events until a chunk written long enough after them was read,
// and releases them in seq order (stable for equal seq: arrival order).
//
// Records are nearly sorted: each thread's records reach the file in its
// seq order, and only threads interleave. So the window keeps sorted runs
// (a FIFO ring of events in non-decreasing seq, one per thread as long as
// the thread's records come in order; a record below its thread's last seq
// starts a new run, so any order still sorts) and merges them with a small
// binary heap over the runs' heads: a push appends to a ring, a pop takes
// the smallest head and sifts one run index down a heap of about as many
// entries as there are threads, instead of sifting every held event.
class ReorderWindow {
 public:
  explicit ReorderWindow(uint64_t min_window_ns) : min_window_ns_(min_window_ns) {}

  // A chunk written at `chunk_ts` was read: its events follow with Push.
  void BeginChunk(uint64_t chunk_ts) {
    if (have_ts_ && chunk_ts > latest_ts_) max_gap_ = std::max(max_gap_, chunk_ts - latest_ts_);
    latest_ts_ = have_ts_ ? std::max(latest_ts_, chunk_ts) : chunk_ts;
    have_ts_ = true;
    const uint64_t window = std::max(min_window_ns_, 2 * max_gap_);
    horizon_ = latest_ts_ > window ? latest_ts_ - window : 0;
  }

  // False when `e` comes after a larger seq was released (the bound broke).
  bool Push(const Event& e) {
    if (released_any_ && e.seq < last_released_) {
      late_ = e;
      return false;
    }
    uint32_t r;
    if (e.tid == last_tid_ && last_run_ != kNone) {
      r = last_run_;
    } else {
      auto [it, inserted] = run_of_tid_.try_emplace(e.tid, kNone);
      if (it->second == kNone) it->second = NewRun(e.tid);
      r = it->second;
    }
    if (!runs_[r].Empty() && runs_[r].last_seq > e.seq) {
      // Out of order within the thread: a run of its own from here on (the
      // old one drains and is recycled).
      runs_[r].retired = true;
      r = NewRun(e.tid);
      run_of_tid_[e.tid] = r;
    }
    last_tid_ = e.tid;
    last_run_ = r;
    Run& run = runs_[r];
    const bool was_empty = run.Empty();
    run.PushBack(e, arrival_++);
    if (was_empty) HeapInsert(HeadOf(r));
    ++held_;
    peak_ = std::max(peak_, held_);
    return true;
  }

  // The next event in seq order if the latest chunk's time releases it
  // (any held event when `all`).
  bool Pop(bool all, Event* out) {
    if (heap_.empty()) return false;
    const uint32_t r = heap_.front().run;
    Run& run = runs_[r];
    const Run::Item& item = run.Front();
    if (!all && item.e.ts >= horizon_) return false;
    *out = item.e;
    run.PopFront();
    --held_;
    last_released_ = std::max(last_released_, out->seq);
    released_any_ = true;
    if (run.Empty()) {
      HeapRemoveTop();
      // An empty run is recycled, its thread's too (it starts a new one when
      // its next record comes): memory follows the threads with held
      // records, not every thread the trace ever had.
      if (run.retired) {
        run.retired = false;
      } else {
        run_of_tid_.erase(run.tid);
      }
      free_runs_.push_back(r);
      if (last_run_ == r) last_run_ = kNone;
    } else {
      heap_.front() = HeadOf(r);
      SiftDown(0);
    }
    return true;
  }

  size_t peak() const { return peak_; }
  std::string Violation() const {
    return absl::StrCat("record seq ", late_.seq, " (ts ", late_.ts, " ns) arrives after seq ",
                        last_released_, " was released: the trace breaks the reorder bound (",
                        std::max(min_window_ns_, 2 * max_gap_) / 1000000, " ms)");
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;

  // A FIFO of events in non-decreasing seq (a ring that doubles when full).
  struct Run {
    struct Item {
      Event e;
      uint64_t arrival;
    };
    std::vector<Item> ring;  // capacity a power of two
    size_t head = 0, size = 0;
    uint64_t last_seq = 0;
    bool retired = false;  // no thread appends to it any more
    uint32_t tid = 0;      // the thread whose records it holds

    bool Empty() const { return size == 0; }
    const Item& Front() const { return ring[head]; }
    void PushBack(const Event& e, uint64_t arrival) {
      if (size == ring.size()) Grow();
      Item& it = ring[(head + size) & (ring.size() - 1)];
      it.e = e;
      it.arrival = arrival;
      ++size;
      last_seq = e.seq;
    }
    void PopFront() {
      head = (head + 1) & (ring.size() - 1);
      --size;
    }
    void Grow() {
      std::vector<Item> bigger(ring.empty() ? 64 : 2 * ring.size());
      for (size_t i = 0; i < size; ++i) bigger[i] = ring[(head + i) & (ring.size() - 1)];
      ring.swap(bigger);
      head = 0;
    }
  };

  uint32_t NewRun(uint32_t tid) {
    uint32_t r;
    if (!free_runs_.empty()) {
      r = free_runs_.back();
      free_runs_.pop_back();
    } else {
      r = static_cast<uint32_t>(runs_.size());
      runs_.emplace_back();
    }
    runs_[r].tid = tid;
    return r;
  }

  // A run in the heap, by the (seq, arrival) of its first record.
  struct Head {
    uint64_t seq;
    uint64_t arrival;
    uint32_t run;
  };
  Head HeadOf(uint32_t r) const {
    const Run::Item& x = runs_[r].Front();
    return Head{x.e.seq, x.arrival, r};
  }
  static bool Before(const Head& a, const Head& b) {
    return a.seq != b.seq ? a.seq < b.seq : a.arrival < b.arrival;
  }
  void HeapInsert(const Head& h) {
    size_t i = heap_.size();
    heap_.push_back(h);
    while (i > 0) {
      const size_t parent = (i - 1) / 2;
      if (!Before(heap_[i], heap_[parent])) break;
      std::swap(heap_[i], heap_[parent]);
      i = parent;
    }
  }
  void HeapRemoveTop() {
    heap_.front() = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) SiftDown(0);
  }
  void SiftDown(size_t i) {
    const size_t n = heap_.size();
    for (;;) {
      size_t best = i;
      const size_t l = 2 * i + 1, r = l + 1;
      if (l < n && Before(heap_[l], heap_[best])) best = l;
      if (r < n && Before(heap_[r], heap_[best])) best = r;
      if (best == i) return;
      std::swap(heap_[i], heap_[best]);
      i = best;
    }
  }

  const uint64_t min_window_ns_;
  std::vector<Run> runs_;
  std::vector<uint32_t> free_runs_;
  std::vector<Head> heap_;  // runs with held events, by their first
  absl::flat_hash_map<uint32_t, uint32_t> run_of_tid_;
  uint32_t last_tid_ = 0;
  uint32_t last_run_ = kNone;
  uint64_t arrival_ = 0;
  size_t held_ = 0;
  uint64_t latest_ts_ = 0;
  uint64_t max_gap_ = 0;
  uint64_t horizon_ = 0;
  bool have_ts_ = false;
  bool released_any_ = false;
  uint64_t last_released_ = 0;
  size_t peak_ = 0;
  Event late_;
};

uint64_t ChunkBytes(const format::ChunkHeader& h) { return sizeof(h) + h.payload_len; }

// One decoded chunk, handed from the pipeline's thread to its consumer.
struct DecodedChunk {
  format::ChunkHeader header;
  ChunkRecords records;
};

// Runs the chunk loop (ScanChunks) on a thread of its own, up to kAhead
// chunks ahead of the consumer (the scan or a stream): decompression and
// decoding overlap with the reorder window and the analysis. The consumer
// takes chunks in file order with Next.
class ChunkPipeline {
 public:
  ChunkPipeline(const uint8_t* data, size_t begin, size_t end, const ReaderOptions& options,
                bool keep_dictionary, bool release_pages)
      : data_(data),
        begin_(begin),
        end_(end),
        options_(options),
        keep_(keep_dictionary),
        release_(release_pages) {
    worker_ = std::thread([this] { Run(); });
  }
  ~ChunkPipeline() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  // The next chunk in file order; null at the end (scan() says where the
  // loop stopped and why).
  std::unique_ptr<DecodedChunk> Next() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !queue_.empty() || done_; });
    if (queue_.empty()) return nullptr;
    std::unique_ptr<DecodedChunk> c = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return c;
  }
  // Hands a chunk the consumer is done with back, so that the worker decodes
  // into its buffers (no allocation per chunk once they have grown).
  void Recycle(std::unique_ptr<DecodedChunk> c) {
    std::lock_guard<std::mutex> lock(mu_);
    if (spares_.size() < kAhead + 2) spares_.push_back(std::move(c));
  }
  // After Next returned null.
  const ChunkScan& scan() const { return scan_; }
  uint64_t chunks() const { return chunks_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  static constexpr size_t kAhead = 4;

  // Takes one chunk's records and stops the loop after it.
  struct OneChunk : public internal::ChunkSink {
    bool Take(const format::ChunkHeader& h, ChunkRecords& c) override {
      got = spare != nullptr ? std::move(spare) : std::make_unique<DecodedChunk>();
      got->header = h;
      std::swap(got->records, c);
      c.keep_dictionary = keep;
      return false;
    }
    bool keep = true;
    std::unique_ptr<DecodedChunk> spare;  // a recycled chunk to swap buffers with
    std::unique_ptr<DecodedChunk> got;
  };

  void Run() {
    internal::ChunkDecoder decoder;
    decoder.records.keep_dictionary = keep_;
    uint64_t budget = options_.max_records;
    size_t pos = begin_;
    ChunkScan scan;
    scan.next_offset = pos;
    for (;;) {
      OneChunk sink;
      sink.keep = keep_;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!spares_.empty()) {
          sink.spare = std::move(spares_.back());
          spares_.pop_back();
        }
      }
      scan = internal::ScanChunks(data_, end_, pos, options_, decoder, sink, &chunks_, &warnings_,
                                  &budget);
      if (sink.got == nullptr) break;  // the end, or a chunk that does not read
      pos = scan.next_offset;
      if (release_) Release(pos);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return queue_.size() < kAhead || stop_; });
      if (stop_) break;
      queue_.push_back(std::move(sink.got));
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    scan_ = scan;
    done_ = true;
    cv_.notify_all();
  }

  // Drops the mapped pages before `pos` from the process, 64 MiB at a time.
  void Release(size_t pos) {
    constexpr size_t kStep = size_t{64} << 20;
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t base = reinterpret_cast<uintptr_t>(data_);
    const uintptr_t upto = (base + pos) & ~(page - 1);
    if (upto < released_ + kStep || upto <= base) return;
    const uintptr_t from = std::max(released_, (base + page - 1) & ~(page - 1));
    if (upto > from) madvise(reinterpret_cast<void*>(from), upto - from, MADV_DONTNEED);
    released_ = upto;
  }

  const uint8_t* data_;
  const size_t begin_, end_;
  const ReaderOptions options_;
  const bool keep_;
  const bool release_;
  uintptr_t released_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<DecodedChunk>> queue_;
  std::vector<std::unique_ptr<DecodedChunk>> spares_;
  bool stop_ = false;
  bool done_ = false;
  ChunkScan scan_;
  uint64_t chunks_ = 0;                // the worker's until done_
  std::vector<std::string> warnings_;  // the worker's until done_
  std::thread worker_;
};

// ScanTrace's sink: merges everything but bulk events, which it checks
// against the window and for references, counts and drops.
class ScanSink {
 public:
  ScanSink(Trace& t, uint64_t min_window_ns, size_t offset, const ProgressFn& progress)
      : t_(t), window_(min_window_ns), done_(offset), progress_(progress) {}

  bool Take(const format::ChunkHeader& h, ChunkRecords& c) {
    internal::Merge(c, t_, /*with_bulk=*/false);
    window_.BeginChunk(h.base_mono_ns);
    for (const Event& e : c.events) {
      if (!IsBulkTag(e.tag)) continue;
      ++t_.bulk_events;
      NoteRefs(e);
      if (!window_.Push(e)) {
        violation_ = window_.Violation();
        return false;
      }
    }
    for (Event e; window_.Pop(false, &e);) {
    }
    done_ += ChunkBytes(h);
    if (progress_) progress_(done_);
    return true;
  }

  // References still undefined at the end of the file (ParseTrace counts
  // them against the whole file's dictionaries, so this does too).
  uint64_t UnknownRefs() const {
    uint64_t n = 0;
    for (const auto& [id, count] : missing_stacks_) n += t_.stacks.contains(id) ? 0 : count;
    for (const auto& [id, count] : missing_strings_) n += t_.strings.contains(id) ? 0 : count;
    return n;
  }
  const std::string& violation() const { return violation_; }
  size_t peak() const { return window_.peak(); }

 private:
  void NoteRefs(const Event& e) {
    if (e.tag == format::kTagFree || e.tag == format::kTagMunmap || e.tag == format::kTagDevFree) {
      return;
    }
    if (e.stack != 0 && !t_.stacks.contains(e.stack)) ++missing_stacks_[e.stack];
    if (e.str != 0 && !t_.strings.contains(e.str)) ++missing_strings_[e.str];
  }

  Trace& t_;
  ReorderWindow window_;
  uint64_t done_;
  const ProgressFn& progress_;
  std::string violation_;
  absl::flat_hash_map<uint64_t, uint64_t> missing_stacks_, missing_strings_;
};

}  // namespace

absl::StatusOr<Trace> ScanTrace(const uint8_t* data, size_t size, const StreamOptions& options,
                                const ProgressFn& progress) {
  Trace t;
  t.control_only = true;
  absl::StatusOr<size_t> header_len = ParseHeader(data, size, &t, options.reader.verify_crc);
  if (!header_len.ok()) return header_len.status();
  ScanSink sink(t, options.min_window_ns, *header_len, progress);
  ChunkPipeline pipeline(data, *header_len, size, options.reader, /*keep_dictionary=*/true,
                         options.release_mapped_pages);
  while (std::unique_ptr<DecodedChunk> c = pipeline.Next()) {
    if (!sink.Take(c->header, c->records)) {
      return absl::FailedPreconditionError(sink.violation());
    }
    pipeline.Recycle(std::move(c));
  }
  const ChunkScan& scan = pipeline.scan();
  t.chunks = pipeline.chunks();
  t.warnings.insert(t.warnings.end(), pipeline.warnings().begin(), pipeline.warnings().end());
  t.data_begin = *header_len;
  t.data_end = scan.next_offset;
  t.peak_window = sink.peak();
  if (scan.next_offset < size) {
    t.truncated = true;
    t.truncated_at_offset = scan.next_offset;
    t.warnings.push_back(absl::StrCat("truncated at offset ", scan.next_offset, " (", scan.problem,
                                      "); read ", t.chunks, " chunks before it"));
  }
  std::stable_sort(t.events.begin(), t.events.end(),
                   [](const Event& a, const Event& b) { return a.seq < b.seq; });
  internal::SortSideLists(t);
  for (const Event& e : t.events) t.unknown_refs += internal::UnknownRefsOf(e, t);
  t.unknown_refs += internal::UnknownSideRefs(t) + sink.UnknownRefs();
  if (t.unknown_refs > 0) {
    t.warnings.push_back(absl::StrCat(t.unknown_refs, " references to undefined ids"));
  }
  return t;
}

// Pulls chunks from the pipeline into the window.
struct EventStream::Impl {
  Impl(const uint8_t* d, size_t b, size_t e, const StreamOptions& o, ProgressFn p)
      : end(e),
        done(b),
        progress(std::move(p)),
        window(o.min_window_ns),
        pipeline(d, b, e, o.reader, /*keep_dictionary=*/false, o.release_mapped_pages) {}

  // The next event in seq order; false when nothing is left.
  bool Next(Event* e) {
    while (status.ok()) {
      if (window.Pop(drained, e)) return true;
      if (drained) return false;
      std::unique_ptr<DecodedChunk> c = pipeline.Next();
      if (c == nullptr) {
        drained = true;
        if (pipeline.scan().next_offset < end) {
          status = absl::DataLossError(absl::StrCat("chunk at offset ", pipeline.scan().next_offset,
                                                    " no longer reads (", pipeline.scan().problem,
                                                    "): was the file changed?"));
        }
        continue;
      }
      window.BeginChunk(c->header.base_mono_ns);
      for (const Event& ev : c->records.events) {
        if (IsBulkTag(ev.tag) && !window.Push(ev)) {
          status = absl::FailedPreconditionError(window.Violation());
          return false;
        }
      }
      done += ChunkBytes(c->header);
      if (progress) progress(done);
      pipeline.Recycle(std::move(c));
    }
    return false;
  }

  const size_t end;
  uint64_t done;  // bytes of the file read (the header counts)
  ProgressFn progress;
  ReorderWindow window;
  ChunkPipeline pipeline;
  absl::Status status;
  bool drained = false;
};

EventStream::EventStream(const uint8_t* data, size_t begin, size_t end,
                         const StreamOptions& options, ProgressFn progress)
    : impl_(std::make_unique<Impl>(data, begin, end, options, std::move(progress))) {}

EventStream::~EventStream() = default;

bool EventStream::Next(Event* e) { return impl_->Next(e); }

const absl::Status& EventStream::status() const { return impl_->status; }

size_t EventStream::peak_window() const { return impl_->window.peak(); }

}  // namespace memstep::reader

// TraceEvents: every sequenced event of one trace in seq order, as the
// analysis passes read it (docs/architecture.md "Streaming reports").
//
// The Trace (reader::ScanTrace) holds the control events (STEP, STAGE,
// COUNTER, EPOCH, DEV_FAIL, MEM_SNAPSHOT) in memory; the bulk events
// (reader::IsBulkTag: ALLOC, FREE, MMAP, ...) are re-read from the mapped
// file by a reader::EventStream on every pass, or, when the file breaks the
// reorder window, come from a vector loaded whole. ForEach merges the two by
// seq (control first on equal seq) and applies what RenumberRepeatedSteps
// and SelectTrace did to the control events to each bulk event, so a pass
// sees what the whole-file reader would have given it.
//
// An event's index is its position in that merged order: the same in every
// pass, so a pass may name an event (a peak) that a later pass stops at.
//
// Memory: the stream's reorder window (reader.h) and nothing per event.
// Thread-compatible.

#ifndef MEMSTEP_SRC_ANALYSIS_EVENTS_H_
#define MEMSTEP_SRC_ANALYSIS_EVENTS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "src/format/format.h"
#include "src/reader/reader.h"

namespace memstep::analysis {

// What RenumberRepeatedSteps and SelectTrace do to bulk events.
struct BulkTransform {
  // Renumbering: program step number -> (seq from which it meant, new
  // number), in seq order; empty: steps are not renumbered.
  absl::flat_hash_map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> steps;
  // Selection: events from this seq on are cut; with a stage filter, ALLOC,
  // MMAP and DEV_ALLOC records whose stage string is not one of `stage_ids`
  // are dropped, and so are the DEV_FREEs of the dropped DEV_ALLOCs (the
  // replay would subtract an allocation it never saw; docs/analysis.md
  // "Selection"). MUNMAP and MREMAP stay: an unknown range unmaps nothing.
  uint64_t cut_seq = UINT64_MAX;
  bool stage_filter = false;
  absl::flat_hash_set<uint64_t> stage_ids;

  // The renumbered step that `raw` named at `seq`.
  uint64_t StepAt(uint64_t raw, uint64_t seq) const;
  // The device allocations (kind, address) a pass's stage filter dropped and
  // whose free it has not seen yet: one per pass, fed in seq order.
  using Dropped = absl::flat_hash_set<std::pair<uint8_t, uint64_t>>;
  // Applies the transform; false: the event is dropped.
  bool Apply(reader::Event& e, Dropped* dropped) const;
};

class TraceEvents {
 public:
  // Streaming: the bulk events of `data` (the mapped file) as `t` says.
  TraceEvents(const reader::Trace& t, const uint8_t* data, reader::StreamOptions options = {});
  // Whole-file fallback: `bulk` holds the bulk events in seq order.
  TraceEvents(const reader::Trace& t, std::vector<reader::Event> bulk);

  BulkTransform& transform() { return transform_; }
  // Called with the pass (2, 3, ...: the scan is pass 1) and its bytes read
  // so far, once per chunk (a progress bar).
  using PassProgressFn = std::function<void(int pass, uint64_t bytes_done)>;
  void set_progress(PassProgressFn progress) { progress_ = std::move(progress); }

  // Calls f(index, event) for every event in seq order until f returns
  // false. An error of the stream (the file changed under the report) is
  // kept in status() and ends the pass.
  template <typename F>
  void ForEachUntil(F&& f) const {
    const std::vector<reader::Event>& control = t_.events;
    size_t c = 0, index = 0;
    reader::Event b;
    Cursor cursor(*this);
    bool have_b = cursor.Next(&b);
    while (c < control.size() || have_b) {
      if (have_b && (c == control.size() || b.seq < control[c].seq)) {
        if (!f(index++, static_cast<const reader::Event&>(b))) return;
        have_b = cursor.Next(&b);
      } else {
        if (!f(index++, control[c++])) return;
      }
    }
  }
  // The same over every event.
  template <typename F>
  void ForEach(F&& f) const {
    ForEachUntil([&](size_t i, const reader::Event& e) {
      f(i, e);
      return true;
    });
  }

  const absl::Status& status() const { return status_; }
  size_t peak_window() const { return peak_window_; }
  uint64_t passes() const { return passes_; }

 private:
  // The bulk events of one pass, transformed.
  class Cursor {
   public:
    explicit Cursor(const TraceEvents& owner);
    ~Cursor();
    bool Next(reader::Event* e);

   private:
    const TraceEvents& owner_;
    std::unique_ptr<reader::EventStream> stream_;
    size_t next_ = 0;
    BulkTransform::Dropped dropped_;
  };

  const reader::Trace& t_;
  const uint8_t* data_ = nullptr;
  reader::StreamOptions options_;
  std::vector<reader::Event> bulk_;
  bool streaming_ = false;
  BulkTransform transform_;
  PassProgressFn progress_;
  mutable absl::Status status_;
  mutable size_t peak_window_ = 0;
  mutable uint64_t passes_ = 0;
};

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_EVENTS_H_

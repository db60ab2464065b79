#include "src/analysis/events.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace memstep::analysis {

uint64_t BulkTransform::StepAt(uint64_t raw, uint64_t seq) const {
  auto h = steps.find(raw);
  if (h == steps.end()) return raw;
  const auto& v = h->second;
  auto it = std::upper_bound(v.begin(), v.end(), std::make_pair(seq, UINT64_MAX));
  return it == v.begin() ? raw : std::prev(it)->second;
}

bool BulkTransform::Apply(reader::Event& e, Dropped* dropped) const {
  if (e.seq >= cut_seq) return false;
  if (stage_filter) {
    switch (e.tag) {
      case format::kTagAlloc:
      case format::kTagMmap:
        if (!stage_ids.contains(e.str)) return false;
        break;
      case format::kTagDevAlloc:
        if (!stage_ids.contains(e.str)) {
          dropped->insert(std::make_pair(e.kind, e.addr));
          return false;
        }
        dropped->erase(std::make_pair(e.kind, e.addr));  // the address is reused
        break;
      case format::kTagDevFree:
        if (dropped->erase(std::make_pair(e.kind, e.addr)) != 0) return false;
        break;
      default:
        break;
    }
  }
  if (!steps.empty()) {
    switch (e.tag) {
      case format::kTagAlloc:
      case format::kTagMmap:
      case format::kTagMremap:
      case format::kTagDevAlloc:
        e.step = StepAt(e.step, e.seq);
        break;
      default:
        break;
    }
  }
  return true;
}

TraceEvents::TraceEvents(const reader::Trace& t, const uint8_t* data, reader::StreamOptions options)
    : t_(t), data_(data), options_(options), streaming_(true) {}

TraceEvents::TraceEvents(const reader::Trace& t, std::vector<reader::Event> bulk)
    : t_(t), bulk_(std::move(bulk)) {}

TraceEvents::Cursor::Cursor(const TraceEvents& owner) : owner_(owner) {
  ++owner_.passes_;
  if (owner_.streaming_ && owner_.status_.ok()) {
    reader::ProgressFn progress;
    if (owner_.progress_) {
      const int pass = static_cast<int>(owner_.passes_) + 1;
      progress = [&owner, pass](uint64_t done) { owner.progress_(pass, done); };
    }
    stream_ = std::make_unique<reader::EventStream>(owner_.data_, owner_.t_.data_begin,
                                                    owner_.t_.data_end, owner_.options_,
                                                    std::move(progress));
  }
}

TraceEvents::Cursor::~Cursor() {
  if (stream_ != nullptr) {
    owner_.peak_window_ = std::max(owner_.peak_window_, stream_->peak_window());
  }
}

bool TraceEvents::Cursor::Next(reader::Event* e) {
  if (owner_.streaming_) {
    if (stream_ == nullptr) return false;
    while (stream_->Next(e)) {
      if (owner_.transform_.Apply(*e, &dropped_)) return true;
    }
    if (!stream_->status().ok() && owner_.status_.ok()) owner_.status_ = stream_->status();
    return false;
  }
  while (next_ < owner_.bulk_.size()) {
    *e = owner_.bulk_[next_++];
    if (owner_.transform_.Apply(*e, &dropped_)) return true;
  }
  return false;
}

}  // namespace memstep::analysis

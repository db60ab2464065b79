#include "src/analysis/renumber.h"

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "src/format/format.h"

namespace memstep::analysis {

namespace {

// The NOTICE the profiler writes when the program's first step marker ends
// the time windows (preload/steps/api.cc).
constexpr char kWindowsStopped[] = "time windows stopped";

// Time windows stand in for steps until the program marks its own. Their rows
// cover start-up (imports, model build), not training steps, and they are
// numbered from 0 like the program's own: they are dropped, so the program's
// step numbers stay as it gave them. The program's first step is the last
// STEP begin at or before the notice (the same boundary ends the window,
// begins the step, then writes the notice).
void DropWindowsBeforeProgramSteps(reader::Trace* t) {
  uint64_t stop_ts = 0;
  bool stopped = false;
  for (const reader::Notice& n : t->notices) {
    if (n.message.rfind(kWindowsStopped, 0) == 0) {
      stop_ts = n.ts;
      stopped = true;
      break;
    }
  }
  if (!stopped) return;
  uint64_t first_seq = 0;
  bool found = false;
  for (const reader::Event& e : t->events) {
    if (e.tag == format::kTagStep && e.phase == 0 && e.ts <= stop_ts) {
      first_seq = e.seq;
      found = true;
    }
  }
  if (!found) return;
  t->events.erase(std::remove_if(t->events.begin(), t->events.end(),
                                 [&](const reader::Event& e) {
                                   return e.tag == format::kTagStep && e.seq < first_seq;
                                 }),
                  t->events.end());
}

bool StepsRepeat(const reader::Trace& t) {
  absl::flat_hash_set<uint64_t> ended, open;
  for (const reader::Event& e : t.events) {
    if (e.tag != format::kTagStep) continue;
    if (e.phase == 0) {
      if (ended.contains(e.step)) return true;
      open.insert(e.step);
    } else {
      if (!open.erase(e.step) && ended.contains(e.step)) return true;
      ended.insert(e.step);
    }
  }
  return false;
}

bool NamesStep(uint8_t tag) {
  switch (tag) {
    case format::kTagAlloc:
    case format::kTagMmap:
    case format::kTagMremap:
    case format::kTagStage:
    case format::kTagDevAlloc:
    case format::kTagDevFail:
    case format::kTagMemSnapshot:
      return true;
    default:
      return false;
  }
}

}  // namespace

bool RenumberRepeatedSteps(reader::Trace* t, BulkTransform* bulk) {
  DropWindowsBeforeProgramSteps(t);
  if (!StepsRepeat(*t)) return false;
  // program's number -> (seq from which it meant, new number), in seq order.
  absl::flat_hash_map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> history;
  absl::flat_hash_map<uint64_t, uint64_t> current;
  absl::flat_hash_set<uint64_t> open;
  uint64_t next = 0;
  auto assign = [&](uint64_t raw, uint64_t seq) {
    const uint64_t g = next++;
    current[raw] = g;
    history[raw].emplace_back(seq, g);
    return g;
  };
  for (reader::Event& e : t->events) {
    if (e.tag == format::kTagStep) {
      const uint64_t raw = e.step;
      if (e.phase == 0) {
        e.step = assign(raw, e.seq);
        open.insert(raw);
      } else {
        // An end whose begin was never recorded (or ended already) is a step
        // of its own.
        e.step = open.erase(raw) ? current[raw] : assign(raw, e.seq);
      }
    } else if (NamesStep(e.tag)) {
      auto it = current.find(e.step);
      if (it != current.end()) e.step = it->second;
    }
  }
  auto at = [&](uint64_t raw, uint64_t seq) {
    auto h = history.find(raw);
    if (h == history.end()) return raw;
    const auto& v = h->second;
    auto it = std::upper_bound(v.begin(), v.end(), std::make_pair(seq, UINT64_MAX));
    return it == v.begin() ? raw : std::prev(it)->second;
  };
  for (reader::Alert& a : t->alerts) a.step = at(a.step, a.seq);
  for (reader::SiteSnapshot& s : t->snapshots) s.step = at(s.step, s.seq);
  for (reader::DeviceInfo& i : t->device_info) i.step = at(i.step, i.seq);
  for (reader::Hunt& h : t->hunts) h.step = at(h.step, h.seq);
  if (bulk != nullptr) bulk->steps = std::move(history);
  return true;
}

}  // namespace memstep::analysis

// Chrome trace-event JSON (the "JSON Array/Object Format" that
// ui.perfetto.dev and chrome://tracing open): the run on a time line.
//
// Per process (pid = the traced process's pid):
//   thread 0 "steps"          one complete slice ("ph":"X") per step
//   thread T "stages (tid T)" one slice per stage run, on the thread that ran
//                             it (nested stages nest)
//   counters ("ph":"C")       "host live" / "mmap live" / "RSS" (bytes) at
//                             every step and stage boundary (exact counters),
//                             "device N live" at every step end
//   instants ("ph":"i")       "ALERT <rule>" and failed device allocations
//                             ("device OOM" for out-of-memory)
// Timestamps are microseconds since the earliest process's start (wall
// clock), so ranks of one job line up. Worked example, one step of pid 7
// from 0.001 s to 0.003 s with a 2 MiB peak:
//   {"ph":"X","cat":"step","name":"step 0","pid":7,"tid":0,"ts":1000.000,
//    "dur":2000.000,"args":{"step":0,"peak_bytes":2097152}}

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "src/report/formats.h"
#include "src/report/json_writer.h"
#include "src/report/report.h"

namespace memstep::report {
namespace {

using internal::JsonWriter;

// Timestamps on one clock: each process's times are from its own start;
// the trace's are microseconds from the earliest start.
class CommonClock {
 public:
  explicit CommonClock(const analysis::Report& report) {
    uint64_t base_ns = UINT64_MAX;
    for (const analysis::ProcessSummary& p : report.processes) {
      base_ns = std::min(base_ns, p.start_real_ns);
    }
    for (const analysis::ProcessSummary& p : report.processes) {
      offset_us_[p.pid] = static_cast<double>(p.start_real_ns - base_ns) / 1e3;
    }
  }
  double Us(uint32_t pid, double time_s) { return offset_us_[pid] + time_s * 1e6; }

 private:
  std::map<uint32_t, double> offset_us_;  // pid -> its trace start on the common clock
};

// The events of "traceEvents", one per line: Begin opens an event and writes
// its "ph" (and "s", the scope, for instants); Micros writes a time field.
class EventWriter {
 public:
  // Keeps the text for Take, or streams it to `sink`.
  explicit EventWriter(CommonClock& clock) : clock_(clock) {}
  EventWriter(CommonClock& clock, TextSink sink) : clock_(clock), w_(std::move(sink)) {}

  JsonWriter& Begin(const char* ph) {
    w_.NewLine();
    w_.BeginObject();
    w_.Field("ph", ph);
    if (ph[0] == 'i') w_.Field("s", "p");
    return w_;
  }
  void Micros(const char* key, double us) {
    w_.Key(key);
    w_.Fixed(us, 3);
  }
  void Ts(uint32_t pid, double time_s) { Micros("ts", clock_.Us(pid, time_s)); }
  // {"name":NAME} as "args", closing the event.
  void EndWithName(const std::string& name) {
    w_.Key("args");
    w_.BeginObject();
    w_.Field("name", name);
    w_.EndObject();
    w_.EndObject();
  }

  JsonWriter& Open(const std::string& path) {
    w_.BeginObject();
    w_.Field("displayTimeUnit", "ms");
    w_.Key("otherData");
    w_.BeginObject();
    w_.Field("source", "memstep");
    w_.Field("path", path);
    w_.EndObject();
    w_.Key("traceEvents");
    w_.BeginArray();
    return w_;
  }
  // Closes the document; Take then returns it, or Finish flushes it.
  void Close() {
    w_.NewLine();
    w_.EndArray();
    w_.EndObject();
    w_.EndLine();
  }
  std::string Take() { return w_.Take(); }
  bool Finish() { return w_.Finish(); }

 private:
  CommonClock& clock_;
  JsonWriter w_;
};

// A metadata event ("ph":"M") for a process or thread: {"name":NAME} as args.
void AddMetadata(EventWriter& e, const char* what, uint32_t pid, uint32_t tid,
                 const std::string& name) {
  JsonWriter& w = e.Begin("M");
  w.Field("name", what);
  w.Field("pid", pid);
  w.Field("tid", tid);
  e.EndWithName(name);
}

// Process and thread names (metadata events).
void AddProcessNames(const analysis::Report& report, EventWriter& e) {
  for (const analysis::ProcessSummary& p : report.processes) {
    std::string name = absl::StrCat("pid ", p.pid);
    if (!p.rank.empty()) absl::StrAppend(&name, " rank ", p.rank);
    if (!p.cmdline.empty()) absl::StrAppend(&name, ": ", p.cmdline.substr(0, 200));
    AddMetadata(e, "process_name", p.pid, 0, name);
    AddMetadata(e, "thread_name", p.pid, 0, "steps");
    JsonWriter& w = e.Begin("M");
    w.Field("name", "thread_sort_index");
    w.Field("pid", p.pid);
    w.Field("tid", 0);
    w.Key("args");
    w.BeginObject();
    w.Field("sort_index", -1);
    w.EndObject();
    w.EndObject();
  }
}

// One complete slice ("ph":"X"): a step (tid 0) or a stage run.
void AddSlice(EventWriter& e, const analysis::TimelineSpan& s, const char* cat,
              const std::string& name, uint32_t tid) {
  JsonWriter& w = e.Begin("X");
  w.Field("cat", cat);
  w.Field("name", name);
  w.Field("pid", s.pid);
  w.Field("tid", tid);
  e.Ts(s.pid, s.begin_s);
  e.Micros("dur", std::max(0.0, (s.end_s - s.begin_s) * 1e6));
  w.Key("args");
  w.BeginObject();
  w.Field("step", s.step);
  w.Field("peak_bytes", s.peak_bytes);
  w.EndObject();
  w.EndObject();
}

// Step and stage slices (stage threads get a name once). Returns each
// step's end: (pid, step) -> seconds.
std::map<std::pair<uint32_t, uint64_t>, double> AddSlices(const analysis::Report& report,
                                                          EventWriter& e) {
  std::set<std::pair<uint32_t, uint32_t>> stage_threads;
  std::map<std::pair<uint32_t, uint64_t>, double> step_end;
  for (const analysis::TimelineSpan& s : report.spans) {
    if (s.stage.empty()) {
      step_end[{s.pid, s.step}] = s.end_s;
      AddSlice(e, s, "step", absl::StrCat("step ", s.step), 0);
      continue;
    }
    if (stage_threads.insert({s.pid, s.tid}).second) {
      AddMetadata(e, "thread_name", s.pid, s.tid, absl::StrCat("stages (tid ", s.tid, ")"));
    }
    AddSlice(e, s, "stage", s.stage, s.tid);
  }
  return step_end;
}

// One counter event ("ph":"C"): {"bytes":BYTES} at a time of process pid.
void AddCounter(EventWriter& e, const std::string& name, uint32_t pid, double time_s,
                uint64_t bytes) {
  JsonWriter& w = e.Begin("C");
  w.Field("name", name);
  w.Field("pid", pid);
  e.Ts(pid, time_s);
  w.Key("args");
  w.BeginObject();
  w.Field("bytes", bytes);
  w.EndObject();
  w.EndObject();
}

// Counters: exact host counters at every boundary; RSS only where the
// process recorded it; device and pinned host bytes at step ends.
void AddCounters(const analysis::Report& report,
                 const std::map<std::pair<uint32_t, uint64_t>, double>& step_end, EventWriter& e) {
  std::set<uint32_t> has_rss;
  for (const analysis::TimelinePoint& p : report.timeline) {
    if (p.rss_bytes > 0) has_rss.insert(p.pid);
  }
  for (const analysis::TimelinePoint& p : report.timeline) {
    AddCounter(e, "host live", p.pid, p.time_s, p.live_bytes);
    AddCounter(e, "mmap live", p.pid, p.time_s, p.mmap_live_bytes);
    if (has_rss.count(p.pid)) AddCounter(e, "RSS", p.pid, p.time_s, p.rss_bytes);
  }
  for (const analysis::StepRow& row : report.steps) {
    auto end = step_end.find({row.pid, row.step});
    if (end == step_end.end()) continue;
    for (const analysis::DeviceStep& d : row.devices) {
      AddCounter(e, absl::StrCat("device ", d.device, " live"), row.pid, end->second,
                 d.live_bytes_end);
    }
    if (row.pinned_host_peak_bytes > 0 || row.pinned_host_live_bytes_end > 0) {
      AddCounter(e, "pinned host live", row.pid, end->second, row.pinned_host_live_bytes_end);
    }
  }
}

// Instants ("ph":"i", process scope): alerts and failed device allocations.
// Returns the writer with "args" open for the caller's fields.
JsonWriter& BeginInstant(EventWriter& e, const char* cat, const std::string& name, uint32_t pid,
                         double time_s) {
  JsonWriter& w = e.Begin("i");
  w.Field("cat", cat);
  w.Field("name", name);
  w.Field("pid", pid);
  w.Field("tid", 0);
  e.Ts(pid, time_s);
  w.Key("args");
  w.BeginObject();
  return w;
}

void AddInstants(const analysis::Report& report, EventWriter& e) {
  for (const analysis::AlertRow& a : report.alerts) {
    JsonWriter& w = BeginInstant(e, "alert", absl::StrCat("ALERT ", a.rule), a.pid, a.time_s);
    w.Field("step", a.step);
    w.Field("value", a.value);
    w.Field("threshold", a.threshold);
    w.Field("stage", a.stage);
    w.Field("site", a.site_id);
    w.EndObject();
    w.EndObject();
  }
  for (const analysis::DeviceFailure& f : report.device_failures) {
    const bool oom = f.error_name == "out of memory";
    JsonWriter& w = BeginInstant(e, "device_failure",
                                 oom ? "device OOM" : "device allocation failed", f.pid, f.time_s);
    w.Field("api", f.api);
    w.Field("kind", analysis::SiteKindName(f.kind));
    w.Field("device", f.device);
    w.Field("size", f.size);
    w.Field("error", f.error);
    w.Field("step", f.step);
    w.Field("stage", f.stage);
    w.Field("site", f.site_id);
    w.EndObject();
    w.EndObject();
  }
}

// The whole document.
void WriteEvents(const analysis::Report& report, EventWriter& e) {
  e.Open(report.path);
  AddProcessNames(report, e);
  const auto step_end = AddSlices(report, e);
  AddCounters(report, step_end, e);
  AddInstants(report, e);
  e.Close();
}

}  // namespace

std::string FormatPerfetto(const analysis::Report& report) {
  CommonClock clock(report);
  EventWriter e(clock);
  WriteEvents(report, e);
  return e.Take();
}

bool WritePerfetto(const analysis::Report& report, const TextSink& sink) {
  CommonClock clock(report);
  EventWriter e(clock, sink);
  WriteEvents(report, e);
  return e.Finish();
}

}  // namespace memstep::report

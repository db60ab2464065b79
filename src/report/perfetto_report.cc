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
#include "absl/strings/str_format.h"
#include "src/report/formats.h"
#include "src/report/report.h"

namespace memstep::report {
namespace {

std::string Str(const std::string& s) { return absl::StrCat("\"", JsonEscape(s), "\""); }

std::string Micros(double us) { return absl::StrFormat("%.3f", us); }

class EventWriter {
 public:
  void Add(const std::string& event) {
    absl::StrAppend(&out_, first_ ? "\n" : ",\n", event);
    first_ = false;
  }
  std::string Finish(const std::string& path) {
    return absl::StrCat(
        "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"source\":\"memstep\",\"path\":", Str(path),
        "},\"traceEvents\":[", out_, "\n]}\n");
  }

 private:
  std::string out_;
  bool first_ = true;
};

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
  std::string Ts(uint32_t pid, double time_s) { return Micros(offset_us_[pid] + time_s * 1e6); }

 private:
  std::map<uint32_t, double> offset_us_;  // pid -> its trace start on the common clock
};

// Process and thread names (metadata events).
void AddProcessNames(const analysis::Report& report, EventWriter& w) {
  for (const analysis::ProcessSummary& p : report.processes) {
    std::string name = absl::StrCat("pid ", p.pid);
    if (!p.rank.empty()) absl::StrAppend(&name, " rank ", p.rank);
    if (!p.cmdline.empty()) absl::StrAppend(&name, ": ", p.cmdline.substr(0, 200));
    w.Add(absl::StrCat("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":", p.pid,
                       ",\"tid\":0,\"args\":{\"name\":", Str(name), "}}"));
    w.Add(absl::StrCat("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":", p.pid,
                       ",\"tid\":0,\"args\":{\"name\":\"steps\"}}"));
    w.Add(absl::StrCat("{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":", p.pid,
                       ",\"tid\":0,\"args\":{\"sort_index\":-1}}"));
  }
}

// Step and stage slices (stage threads get a name once). Returns each
// step's end: (pid, step) -> seconds.
std::map<std::pair<uint32_t, uint64_t>, double> AddSlices(const analysis::Report& report,
                                                          CommonClock& clock, EventWriter& w) {
  std::set<std::pair<uint32_t, uint32_t>> stage_threads;
  std::map<std::pair<uint32_t, uint64_t>, double> step_end;
  for (const analysis::TimelineSpan& s : report.spans) {
    const double dur_us = std::max(0.0, (s.end_s - s.begin_s) * 1e6);
    if (s.stage.empty()) {
      step_end[{s.pid, s.step}] = s.end_s;
      w.Add(absl::StrCat("{\"ph\":\"X\",\"cat\":\"step\",\"name\":\"step ", s.step,
                         "\",\"pid\":", s.pid, ",\"tid\":0,\"ts\":", clock.Ts(s.pid, s.begin_s),
                         ",\"dur\":", Micros(dur_us), ",\"args\":{\"step\":", s.step,
                         ",\"peak_bytes\":", s.peak_bytes, "}}"));
      continue;
    }
    if (stage_threads.insert({s.pid, s.tid}).second) {
      w.Add(absl::StrCat("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":", s.pid,
                         ",\"tid\":", s.tid, ",\"args\":{\"name\":\"stages (tid ", s.tid, ")\"}}"));
    }
    w.Add(absl::StrCat("{\"ph\":\"X\",\"cat\":\"stage\",\"name\":", Str(s.stage),
                       ",\"pid\":", s.pid, ",\"tid\":", s.tid,
                       ",\"ts\":", clock.Ts(s.pid, s.begin_s), ",\"dur\":", Micros(dur_us),
                       ",\"args\":{\"step\":", s.step, ",\"peak_bytes\":", s.peak_bytes, "}}"));
  }
  return step_end;
}

// Counters: exact host counters at every boundary; RSS only where the
// process recorded it; device and pinned host bytes at step ends.
void AddCounters(const analysis::Report& report,
                 const std::map<std::pair<uint32_t, uint64_t>, double>& step_end,
                 CommonClock& clock, EventWriter& w) {
  std::set<uint32_t> has_rss;
  for (const analysis::TimelinePoint& p : report.timeline) {
    if (p.rss_bytes > 0) has_rss.insert(p.pid);
  }
  for (const analysis::TimelinePoint& p : report.timeline) {
    const std::string at = absl::StrCat(",\"pid\":", p.pid, ",\"ts\":", clock.Ts(p.pid, p.time_s));
    w.Add(absl::StrCat("{\"ph\":\"C\",\"name\":\"host live\"", at,
                       ",\"args\":{\"bytes\":", p.live_bytes, "}}"));
    w.Add(absl::StrCat("{\"ph\":\"C\",\"name\":\"mmap live\"", at,
                       ",\"args\":{\"bytes\":", p.mmap_live_bytes, "}}"));
    if (has_rss.count(p.pid)) {
      w.Add(absl::StrCat("{\"ph\":\"C\",\"name\":\"RSS\"", at, ",\"args\":{\"bytes\":", p.rss_bytes,
                         "}}"));
    }
  }
  for (const analysis::StepRow& row : report.steps) {
    auto end = step_end.find({row.pid, row.step});
    if (end == step_end.end()) continue;
    const std::string at =
        absl::StrCat(",\"pid\":", row.pid, ",\"ts\":", clock.Ts(row.pid, end->second));
    for (const analysis::DeviceStep& d : row.devices) {
      w.Add(absl::StrCat("{\"ph\":\"C\",\"name\":\"device ", d.device, " live\"", at,
                         ",\"args\":{\"bytes\":", d.live_bytes_end, "}}"));
    }
    if (row.pinned_host_peak_bytes > 0 || row.pinned_host_live_bytes_end > 0) {
      w.Add(absl::StrCat("{\"ph\":\"C\",\"name\":\"pinned host live\"", at,
                         ",\"args\":{\"bytes\":", row.pinned_host_live_bytes_end, "}}"));
    }
  }
}

// Instants: alerts and failed device allocations.
void AddInstants(const analysis::Report& report, CommonClock& clock, EventWriter& w) {
  for (const analysis::AlertRow& a : report.alerts) {
    w.Add(absl::StrCat("{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"alert\",\"name\":",
                       Str(absl::StrCat("ALERT ", a.rule)), ",\"pid\":", a.pid,
                       ",\"tid\":0,\"ts\":", clock.Ts(a.pid, a.time_s), ",\"args\":{\"step\":",
                       a.step, ",\"value\":", a.value, ",\"threshold\":", a.threshold,
                       ",\"stage\":", Str(a.stage), ",\"site\":", a.site_id, "}}"));
  }
  for (const analysis::DeviceFailure& f : report.device_failures) {
    const bool oom = f.error_name == "out of memory";
    w.Add(absl::StrCat("{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"device_failure\",\"name\":",
                       Str(oom ? "device OOM" : "device allocation failed"), ",\"pid\":", f.pid,
                       ",\"tid\":0,\"ts\":", clock.Ts(f.pid, f.time_s),
                       ",\"args\":{\"api\":", Str(f.api),
                       ",\"kind\":", Str(analysis::SiteKindName(f.kind)), ",\"device\":", f.device,
                       ",\"size\":", f.size, ",\"error\":", f.error, ",\"step\":", f.step,
                       ",\"stage\":", Str(f.stage), ",\"site\":", f.site_id, "}}"));
  }
}

}  // namespace

std::string FormatPerfetto(const analysis::Report& report) {
  CommonClock clock(report);
  EventWriter w;
  AddProcessNames(report, w);
  const auto step_end = AddSlices(report, clock, w);
  AddCounters(report, step_end, clock, w);
  AddInstants(report, clock, w);
  return w.Finish(report.path);
}

}  // namespace memstep::report

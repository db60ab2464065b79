// `memstep run --metrics-file PATH`: the run's live state as a Prometheus
// text file (node_exporter's textfile collector), rewritten atomically at
// step boundaries while `memstep run` waits for its command.

#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/format/format.h"
#include "tools/memstep/live_view.h"

namespace memstep::cli {
namespace {

using analysis::LiveModel;
using analysis::LiveProcess;

// How often `memstep run` looks at the run directory while it waits.
constexpr long kPollMs = 250;

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.15g", v);
}

// One metric family: HELP and TYPE once, then its samples.
class Family {
 public:
  Family(std::string* out, const char* name, const char* type, const char* help)
      : out_(out), name_(name) {
    absl::StrAppend(out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void Sample(const LiveProcess& p, double value, const char* extra_label = nullptr,
              const std::string& extra_value = "") {
    absl::StrAppend(out_, name_, "{host=\"", EscapeLabelValue(p.host), "\",rank=\"",
                    EscapeLabelValue(p.rank), "\",pid=\"", p.pid, "\"");
    if (extra_label != nullptr) {
      absl::StrAppend(out_, ",", extra_label, "=\"", EscapeLabelValue(extra_value), "\"");
    }
    absl::StrAppend(out_, "} ", Number(value), "\n");
  }

 private:
  std::string* out_;
  const char* name_;
};

bool Started(const LiveProcess& p) {
  return p.state != LiveProcess::State::kStarting && p.state != LiveProcess::State::kUnreadable;
}

// The per-process gauges and counters: name, type, help, value, and whether
// the value exists only once the process marked a step.
struct Gauge {
  const char* name;
  const char* type;
  const char* help;
  double (*get)(const LiveProcess&);
  bool needs_step;
};
constexpr Gauge kGauges[] = {
    {"memstep_process_running", "gauge", "1 while the process runs, 0 once it exited or is gone.",
     [](const LiveProcess& p) { return p.state == LiveProcess::State::kRunning ? 1.0 : 0.0; },
     false},
    {"memstep_step", "gauge", "Latest training step the process began or ended.",
     [](const LiveProcess& p) { return static_cast<double>(p.step); }, true},
    {"memstep_steps_completed_total", "counter", "Steps the process completed (STEP ends).",
     [](const LiveProcess& p) { return static_cast<double>(p.steps_done); }, false},
    {"memstep_host_live_bytes", "gauge",
     "Live host heap bytes, exact, at the latest step or stage boundary.",
     [](const LiveProcess& p) { return static_cast<double>(p.host_live); }, true},
    {"memstep_host_step_peak_bytes", "gauge",
     "Peak live host heap bytes within the latest completed step.",
     [](const LiveProcess& p) { return static_cast<double>(p.step_peak); }, true},
    {"memstep_mmap_live_bytes", "gauge", "Live anonymous mmap bytes, exact.",
     [](const LiveProcess& p) { return static_cast<double>(p.mmap_live); }, true},
    {"memstep_rss_bytes", "gauge", "Resident set size at the latest boundary.",
     [](const LiveProcess& p) { return static_cast<double>(p.rss); }, true},
    {"memstep_device_live_bytes", "gauge",
     "Live device bytes (device, managed, VMM and pool allocations, all devices), exact.",
     [](const LiveProcess& p) { return static_cast<double>(p.device_live); }, false},
    {"memstep_device_peak_bytes", "gauge", "Largest live device bytes seen.",
     [](const LiveProcess& p) { return static_cast<double>(p.device_peak); }, false},
    {"memstep_growth_bytes_per_step", "gauge",
     "Growth of live host bytes per step: Theil-Sen slope over the last 50 step ends.",
     [](const LiveProcess& p) { return p.growth_per_step; }, true},
    {"memstep_device_growth_bytes_per_step", "gauge",
     "Growth of live device bytes per step: Theil-Sen slope over the last 50 step ends.",
     [](const LiveProcess& p) { return p.device_growth_per_step; }, true},
    {"memstep_last_record_timestamp_seconds", "gauge",
     "Wall-clock time of the latest record read from the process's trace.",
     [](const LiveProcess& p) { return static_cast<double>(p.last_record_real_ns) / 1e9; }, false},
};
}  // namespace

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatPrometheus(const LiveModel& model) {
  std::vector<const LiveProcess*> ps;
  for (const LiveProcess& p : model.processes()) {
    if (Started(p)) ps.push_back(&p);
  }
  std::string out;
  for (const Gauge& g : kGauges) {
    Family f(&out, g.name, g.type, g.help);
    for (const LiveProcess* p : ps) {
      if (!g.needs_step || p->has_step) f.Sample(*p, g.get(*p));
    }
  }
  {
    Family f(&out, "memstep_stage_peak_bytes", "gauge",
             "Peak live host heap bytes in the latest run of each stage.");
    for (const LiveProcess* p : ps) {
      for (const analysis::LiveStage& s : p->stages) {
        f.Sample(*p, static_cast<double>(s.last_peak), "stage", s.name);
      }
    }
  }
  {
    Family f(&out, "memstep_stage_max_peak_bytes", "gauge",
             "Largest peak live host heap bytes of each stage so far.");
    for (const LiveProcess* p : ps) {
      for (const analysis::LiveStage& s : p->stages) {
        f.Sample(*p, static_cast<double>(s.max_peak), "stage", s.name);
      }
    }
  }
  {
    Family f(&out, "memstep_alerts_total", "counter",
             "Online alerts the process raised, by rule (memstep run --alert-*).");
    for (const LiveProcess* p : ps) {
      for (uint8_t rule = format::kAlertGrowth; rule <= format::kAlertDevicePeak; ++rule) {
        const char* name = analysis::AlertRuleName(rule);
        auto it = p->alerts_by_rule.find(name);
        f.Sample(*p, it == p->alerts_by_rule.end() ? 0.0 : static_cast<double>(it->second), "rule",
                 name);
      }
    }
  }
  return out;
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(tmp, ": ", strerror(errno)));
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return absl::UnavailableError(absl::StrCat(tmp, ": ", strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat(tmp, ": ", strerror(err)));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("rename to ", path, ": ", strerror(err)));
  }
  return absl::OkStatus();
}

int WaitForChild(pid_t child, const std::string& run_dir, const std::string& metrics_file,
                 int* status) {
  if (metrics_file.empty()) {
    while (waitpid(child, status, 0) < 0) {
      if (errno != EINTR) return errno;
    }
    return 0;
  }
  analysis::LiveOptions options;
  options.top_sites = 0;  // no sites, no symbolization: the metrics do not name sites
  options.symbolize = false;
  analysis::LiveModel model(run_dir, options);
  bool warned = false;
  auto write = [&] {
    absl::Status s = WriteFileAtomically(metrics_file, FormatPrometheus(model));
    if (!s.ok() && !warned) {
      warned = true;
      std::cerr << "memstep: warning: --metrics-file: cannot write the metrics (" << s.message()
                << "); the job goes on without them\n";
    }
  };
  write();  // the file exists from the start: the job is up, no step yet
  uint64_t steps = 0;
  for (;;) {
    pid_t r = waitpid(child, status, WNOHANG);
    if (r == child) break;
    if (r < 0 && errno != EINTR) return errno;
    if (model.Refresh().ok() && model.steps_done() != steps) {
      steps = model.steps_done();
      write();
    }
    timespec pause = {0, kPollMs * 1000000L};
    nanosleep(&pause, nullptr);
  }
  // The final state: everything the processes wrote before they ended.
  for (int i = 0; i < 64; ++i) {
    if (!model.Refresh().ok() || model.caught_up()) break;
  }
  write();
  return 0;
}

}  // namespace memstep::cli

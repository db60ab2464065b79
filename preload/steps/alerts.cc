// Online alerts, evaluated at every step end after warm-up:
//   growth      Theil-Sen slope of exact host live bytes at step end over the
//               last kGrowthWindow post-warm-up steps (needs kMinGrowthPoints)
//   peak        the step's exact peak live bytes
//   stage-peak  the peak of stage NAME within the step (if the stage ran)
//   device-peak the step's exact peak of device-resident bytes (device +
//               managed + VMM physical + pool logical; CudaLastStepPeak)
// A rule fires once per crossing: it re-arms when its value is back at or
// below the threshold at a later step end. Firing prints one line on stderr,
// pushes a kTagAlert record, queues MEMSTEP_ALERT_COMMAND for the writer
// thread, and with MEMSTEP_ALERT_ABORT=1 flushes the trace and aborts.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "preload/core/fds.h"
#include "preload/cuda/cuda.h"
#include "preload/host/recorder.h"
#include "preload/steps/config.h"
#include "src/format/format.h"
#include "src/format/records.h"

extern char** environ;

namespace memstep::preload {

namespace fmt = ::memstep::format;

namespace {

constexpr int kGrowthWindow = 50;
constexpr int kMinGrowthPoints = 10;
constexpr int kMaxQueued = 8;
constexpr int kMaxChildren = 16;

struct Fired {
  uint8_t rule;
  uint64_t value;
  uint64_t threshold;
  uint64_t step;
  int stage_rule;  // index into stage_rules, or -1
};

SpinLock g_alert_lock;  // everything below
uint64_t g_ended = 0;   // step ends seen
uint64_t g_ring[kGrowthWindow];
int g_ring_n = 0, g_ring_pos = 0;
bool g_growth_armed = true, g_peak_armed = true, g_device_peak_armed = true;
bool g_stage_armed[kMaxStagePeakRules];
uint64_t g_stage_max[kMaxStagePeakRules];  // this step's peak, 0 = stage did not run
uint32_t g_stage_ids[kMaxStagePeakRules];

Fired g_queue[kMaxQueued];  // alert commands for the writer
int g_queued = 0;
pid_t g_children[kMaxChildren];

double Select(double* a, int n, int k) {  // k-th smallest (quickselect)
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    double pivot = a[(lo + hi) / 2];
    int i = lo, j = hi;
    while (i <= j) {
      while (a[i] < pivot) ++i;
      while (a[j] > pivot) --j;
      if (i <= j) {
        double tmp = a[i];
        a[i++] = a[j];
        a[j--] = tmp;
      }
    }
    if (k <= j) {
      hi = j;
    } else if (k >= i) {
      lo = i;
    } else {
      return a[k];
    }
  }
  return a[k];
}

// Theil-Sen slope (bytes per step) of the ring, oldest first.
double GrowthSlope() {
  double v[kGrowthWindow];
  int n = g_ring_n;
  int start = (g_ring_pos - n + kGrowthWindow) % kGrowthWindow;
  for (int i = 0; i < n; ++i) v[i] = static_cast<double>(g_ring[(start + i) % kGrowthWindow]);
  static double slopes[kGrowthWindow * (kGrowthWindow - 1) / 2];  // g_alert_lock
  int m = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) slopes[m++] = (v[j] - v[i]) / (j - i);
  }
  if (m == 0) return 0;
  double hi = Select(slopes, m, m / 2);
  if (m % 2 != 0) return hi;
  return (Select(slopes, m, m / 2 - 1) + hi) / 2;
}

void Human(char* out, size_t cap, uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) v /= 1024.0, ++u;
  if (u == 0) {
    snprintf(out, cap, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    snprintf(out, cap, "%.2f %s", v, kUnits[u]);
  }
}

const char* RuleName(uint8_t rule) {
  switch (rule) {
    case fmt::kAlertGrowth:
      return "growth";
    case fmt::kAlertPeak:
      return "peak";
    case fmt::kAlertDevicePeak:
      return "device-peak";
    default:
      return "stage-peak";
  }
}

void Report(ThreadState& t, const Fired& f, uint32_t site) {
  char value[32], threshold[32], line[512];
  Human(value, sizeof(value), f.value);
  Human(threshold, sizeof(threshold), f.threshold);
  const char* per = f.rule == fmt::kAlertGrowth ? "/step" : "";
  char site_text[64] = "";
  if (site != 0) {
    snprintf(site_text, sizeof(site_text), " (%s: stack %u)",
             f.rule == fmt::kAlertGrowth ? "top growing site" : "top site", site);
  }
  const char* stage = f.stage_rule >= 0 ? g_features.stage_rules[f.stage_rule].name : "";
  int n = snprintf(line, sizeof(line), "memstep: ALERT %s%s%s: %s%s > %s%s at step %llu%s\n",
                   RuleName(f.rule), f.stage_rule >= 0 ? " " : "", stage, value, per, threshold,
                   per, static_cast<unsigned long long>(f.step), site_text);
  if (n > 0) SayOnStderr(line, static_cast<size_t>(n) < sizeof(line) ? n : sizeof(line) - 1);
  uint8_t buf[fmt::kMaxEncodedSize<fmt::AlertRecord>];
  fmt::AlertRecord rec;
  rec.ts = NowRel();
  rec.seq = NextSeq();
  rec.step = f.step;
  rec.rule = f.rule;
  rec.value = f.value;
  rec.threshold = f.threshold;
  rec.stage_str = f.stage_rule >= 0 ? g_stage_ids[f.stage_rule] : 0;
  rec.site_stack = site;
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
}

void Spawn(const Fired& f) {
  static char vars[5][640];
  static char* envp[4096];
  const char* stage = f.stage_rule >= 0 ? g_features.stage_rules[f.stage_rule].name : "";
  snprintf(vars[0], sizeof(vars[0]), "MEMSTEP_ALERT_RULE=%s%s%s", RuleName(f.rule),
           stage[0] != '\0' ? ":" : "", stage);
  snprintf(vars[1], sizeof(vars[1]), "MEMSTEP_ALERT_VALUE=%llu",
           static_cast<unsigned long long>(f.value));
  snprintf(vars[2], sizeof(vars[2]), "MEMSTEP_ALERT_THRESHOLD=%llu",
           static_cast<unsigned long long>(f.threshold));
  snprintf(vars[3], sizeof(vars[3]), "MEMSTEP_ALERT_STEP=%llu",
           static_cast<unsigned long long>(f.step));
  snprintf(vars[4], sizeof(vars[4]), "MEMSTEP_DISABLE=1");  // no trace of the command
  int n = 0;
  for (auto& v : vars) envp[n++] = v;
  for (char** e = environ; e != nullptr && *e != nullptr && n < 4095; ++e) {
    if (strncmp(*e, "MEMSTEP_ALERT_", 14) == 0 || strncmp(*e, "MEMSTEP_DISABLE=", 16) == 0) {
      continue;
    }
    envp[n++] = *e;
  }
  envp[n] = nullptr;
  char* argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"), g_features.alert_command,
                  nullptr};
  // The command gets the program's standard descriptors (from the writer
  // thread, which works in a table of its own, borrowed: core/fds.h), else
  // /dev/null; nothing else of the program's.
  posix_spawn_file_actions_t actions;
  if (posix_spawn_file_actions_init(&actions) != 0) return;
  int borrowed[3];
  for (int fd = 0; fd < 3; ++fd) {
    borrowed[fd] = BorrowProgramFd(fd, 3);
    if (borrowed[fd] >= 0) {
      posix_spawn_file_actions_adddup2(&actions, borrowed[fd], fd);
    } else {
      posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);
    }
  }
  pid_t pid;
  const int rc = posix_spawn(&pid, "/bin/sh", &actions, nullptr, argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  for (int fd : borrowed) {
    if (fd >= 0) close(fd);
  }
  if (rc != 0) return;
  for (pid_t& c : g_children) {
    if (c == 0) {
      c = pid;
      return;
    }
  }
  // No slot: the child stays unreaped until exit (a zombie, never a stolen one).
}

}  // namespace

void InitAlerts() {
  for (int i = 0; i < g_features.num_stage_rules; ++i) {
    g_stage_armed[i] = true;
    g_stage_ids[i] = InternStage(g_features.stage_rules[i].name);
  }
}

void AlertsStageEnd(uint32_t stage_id, uint64_t peak) {
  if (g_features.num_stage_rules == 0 || stage_id == 0) return;
  SpinLockHolder h(&g_alert_lock);
  for (int i = 0; i < g_features.num_stage_rules; ++i) {
    if (g_stage_ids[i] == stage_id && peak > g_stage_max[i]) g_stage_max[i] = peak;
  }
}

void AlertsStepEnd(ThreadState& t, uint64_t step, uint64_t live_end, uint64_t step_peak) {
  const FeatureConfig& c = g_features;
  Fired fired[3 + kMaxStagePeakRules];
  int nf = 0;
  bool baseline = false;
  {
    SpinLockHolder h(&g_alert_lock);
    ++g_ended;
    uint64_t stage_max[kMaxStagePeakRules];
    for (int i = 0; i < c.num_stage_rules; ++i) {
      stage_max[i] = g_stage_max[i];
      g_stage_max[i] = 0;
    }
    if (g_ended <= c.warmup_steps) return;
    baseline = g_ended == c.warmup_steps + 1;
    g_ring[g_ring_pos] = live_end;
    g_ring_pos = (g_ring_pos + 1) % kGrowthWindow;
    if (g_ring_n < kGrowthWindow) ++g_ring_n;
    if (c.alert_growth > 0 && g_ring_n >= kMinGrowthPoints) {
      double slope = GrowthSlope();
      if (slope > static_cast<double>(c.alert_growth)) {
        if (g_growth_armed) {
          fired[nf++] = {fmt::kAlertGrowth, static_cast<uint64_t>(slope), c.alert_growth, step, -1};
        }
        g_growth_armed = false;
      } else {
        g_growth_armed = true;
      }
    }
    if (c.alert_peak > 0) {
      if (step_peak > c.alert_peak) {
        if (g_peak_armed) fired[nf++] = {fmt::kAlertPeak, step_peak, c.alert_peak, step, -1};
        g_peak_armed = false;
      } else {
        g_peak_armed = true;
      }
    }
    if (c.alert_device_peak > 0) {
      uint64_t device_peak = CudaLastStepPeak();
      if (device_peak > c.alert_device_peak) {
        if (g_device_peak_armed) {
          fired[nf++] = {fmt::kAlertDevicePeak, device_peak, c.alert_device_peak, step, -1};
        }
        g_device_peak_armed = false;
      } else {
        g_device_peak_armed = true;
      }
    }
    for (int i = 0; i < c.num_stage_rules; ++i) {
      if (stage_max[i] == 0) continue;  // the stage did not run in this step
      if (stage_max[i] > c.stage_rules[i].bytes) {
        if (g_stage_armed[i]) {
          fired[nf++] = {fmt::kAlertStagePeak, stage_max[i], c.stage_rules[i].bytes, step, i};
        }
        g_stage_armed[i] = false;
      } else {
        g_stage_armed[i] = true;
      }
    }
    if (c.alert_command[0] != '\0') {
      for (int i = 0; i < nf && g_queued < kMaxQueued; ++i) g_queue[g_queued++] = fired[i];
    }
  }
  if (baseline) SitesSetBaseline();
  if (nf == 0) return;
  for (int i = 0; i < nf; ++i) {
    // The site table holds host allocations only: a device alert names none.
    bool device = fired[i].rule == fmt::kAlertDevicePeak;
    Report(t, fired[i], device ? 0 : SitesTop(fired[i].rule == fmt::kAlertGrowth));
  }
  if (c.alert_command[0] != '\0') WakeWriter();
  if (c.alert_abort) {
    WriterCycle(false);  // the alert record reaches the file first
    static const char kMsg[] =
        "memstep: aborting the process because of the alert above (MEMSTEP_ALERT_ABORT=1)\n";
    SayOnStderr(kMsg, sizeof(kMsg) - 1);
    if (c.alert_command[0] != '\0') Spawn(fired[0]);  // best effort; not waited on
    abort();
  }
}

void AlertsForkChild() {
  g_alert_lock.Reset();
  for (pid_t& c : g_children) c = 0;  // the parent's children, not ours
  g_queued = 0;
}

void AlertsWriterPoll() {
  for (pid_t& c : g_children) {
    if (c != 0 && waitpid(c, nullptr, WNOHANG) != 0) c = 0;
  }
  Fired local[kMaxQueued];
  int n;
  {
    SpinLockHolder h(&g_alert_lock);
    n = g_queued;
    for (int i = 0; i < n; ++i) local[i] = g_queue[i];
    g_queued = 0;
  }
  for (int i = 0; i < n; ++i) Spawn(local[i]);
}

}  // namespace memstep::preload

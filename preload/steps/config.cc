// Configuration of the step features (MEMSTEP_* variables), their
// freestanding parsers, time windows and notice records.

#include "preload/steps/config.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "preload/core/fds.h"
#include "preload/cuda/cuda.h"
#include "preload/host/recorder.h"
#include "preload/steps/env.h"
#include "src/format/format.h"
#include "src/format/quantity.h"
#include "src/format/records.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

FeatureConfig g_features = {20,
                            0,
                            0,
                            {},
                            0,
                            "",
                            false,
                            uint64_t{10} * 1000000000u,
                            uint64_t{8} << 20,
                            5,
                            10,
                            true,
                            true,
                            true,
                            "^(train[_ ]?)?step|^iteration|^iter",
                            0,
                            0,
                            0,
                            0};

std::atomic<bool> g_user_steps{false};

namespace {

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool UnitIs(const char* u, const char* want) {
  while (*u != '\0' && *want != '\0' && Lower(*u) == *want) ++u, ++want;
  return *u == '\0' && *want == '\0';
}

// Parses "D[.D]" into mantissa and scale (value = mant / scale); stops at the
// first other character.
const char* ParseDecimal(const char* s, uint64_t* mant, uint64_t* scale) {
  uint64_t m = 0, sc = 1;
  const char* start = s;
  while (*s >= '0' && *s <= '9') {
    if (m > UINT64_MAX / 10 - 10) return nullptr;
    m = m * 10 + static_cast<uint64_t>(*s++ - '0');
  }
  if (*s == '.') {
    ++s;
    while (*s >= '0' && *s <= '9') {
      if (sc < 1000000000u && m < UINT64_MAX / 100) {
        m = m * 10 + static_cast<uint64_t>(*s - '0');
        sc *= 10;
      }
      ++s;
    }
  }
  if (s == start) return nullptr;
  *mant = m;
  *scale = sc;
  return s;
}

}  // namespace

bool ParseSize(const char* s, uint64_t* out) {
  // The one grammar of sizes (src/format/quantity.h), as the CLI reads them.
  namespace fmt = ::memstep::format;
  if (s == nullptr) return false;
  fmt::Quantity q;
  if (fmt::ParseQuantity(s, fmt::kAcceptSize | fmt::kAcceptFraction, &q) != nullptr) return false;
  if (!q.fits) return false;
  *out = q.bytes;
  return true;
}

bool ParseSeconds(const char* s, uint64_t* ns) {
  if (s == nullptr) return false;
  uint64_t m, sc;
  const char* end = ParseDecimal(s, &m, &sc);
  if (end == nullptr || (*end != '\0' && !UnitIs(end, "s"))) return false;
  if (m > UINT64_MAX / 1000000000u) return false;
  *ns = m * 1000000000u / sc;
  return true;
}

namespace {

void ParseStageRules(const char* s) {
  // "forward=2GiB,backward=3GiB"
  while (s != nullptr && *s != '\0' && g_features.num_stage_rules < kMaxStagePeakRules) {
    const char* comma = strchr(s, ',');
    size_t len = comma != nullptr ? static_cast<size_t>(comma - s) : StrLen(s);
    const char* eq = static_cast<const char*>(memchr(s, '=', len));
    char value[64];
    if (eq != nullptr && eq > s && static_cast<size_t>(eq - s) < 64 &&
        len - static_cast<size_t>(eq - s) - 1 < sizeof(value)) {
      FeatureConfig::StagePeakRule& r = g_features.stage_rules[g_features.num_stage_rules];
      size_t nlen = static_cast<size_t>(eq - s);
      memcpy(r.name, s, nlen);
      r.name[nlen] = '\0';
      size_t vlen = len - nlen - 1;
      memcpy(value, eq + 1, vlen);
      value[vlen] = '\0';
      if (ParseSize(value, &r.bytes) && r.bytes > 0) {
        ++g_features.num_stage_rules;
      } else {
        EnvReject("MEMSTEP_ALERT_STAGE_PEAK", value, "a positive size in STAGE=SIZE");
      }
    } else {
      EnvReject("MEMSTEP_ALERT_STAGE_PEAK", s, "a list of STAGE=SIZE");
    }
    s = comma != nullptr ? comma + 1 : nullptr;
  }
}

bool EnvOn(const char* name, bool dflt) {
  const char* v = getenv(name);
  if (v == nullptr || v[0] == '\0') return dflt;
  return v[0] != '0';
}

}  // namespace

namespace {

// "12", "USR2", "SIGUSR2" -> the signal number; 0 for "0"; -1 otherwise.
int ParseSignal(const char* s) {
  if (s[0] == 'S' && s[1] == 'I' && s[2] == 'G') s += 3;
  if (UnitIs(s, "usr1")) return SIGUSR1;
  if (UnitIs(s, "usr2")) return SIGUSR2;
  uint64_t m, sc;
  const char* end = ParseDecimal(s, &m, &sc);
  if (end == nullptr || *end != '\0' || sc != 1 || m >= 65) return -1;
  return static_cast<int>(m);
}

}  // namespace

void ReadFeatureConfig() {
  uint64_t v;
  g_features.device_interval = kDefaultDeviceInterval;
  // No snapshot signal unless asked for: a handler of memstep's would change
  // what the program sees (sigaction's old action, Python's getsignal() is
  // None, so CPython's test_threadsignals cannot restore it) and what the
  // signal does (SIGUSR2 no longer ends a program that left it at default).
  g_features.snapshot_signal = 0;
  if (EnvSize("MEMSTEP_DEVICE_SAMPLE_INTERVAL", &v)) g_features.device_interval = v;
  if (EnvSize("MEMSTEP_DEVICE_SAMPLE_WARM", &v)) g_features.device_warm_interval = v;
  if (const char* sig = getenv("MEMSTEP_SNAPSHOT_SIGNAL"); sig != nullptr && sig[0] != '\0') {
    const int n = ParseSignal(sig);
    // Signals the program cannot give up, or that stop it, are refused.
    if (n < 0 || n == SIGKILL || n == SIGSTOP || n == SIGSEGV || n == SIGBUS || n == SIGFPE ||
        n == SIGILL || n == SIGABRT || n == SIGCHLD || n == SIGPIPE) {
      EnvReject("MEMSTEP_SNAPSHOT_SIGNAL", sig, "a signal number, USR1, USR2, or 0 (none)");
    } else {
      g_features.snapshot_signal = n;
    }
  }
  if (EnvCount("MEMSTEP_WARMUP", &v)) g_features.warmup_steps = v;
  if (EnvSize("MEMSTEP_ALERT_GROWTH", &v)) g_features.alert_growth = v;
  if (EnvSize("MEMSTEP_ALERT_PEAK", &v)) g_features.alert_peak = v;
  if (EnvSize("MEMSTEP_ALERT_DEVICE_PEAK", &v)) g_features.alert_device_peak = v;
  ParseStageRules(getenv("MEMSTEP_ALERT_STAGE_PEAK"));
  const char* cmd = getenv("MEMSTEP_ALERT_COMMAND");
  if (cmd != nullptr && StrLen(cmd) < sizeof(g_features.alert_command)) {
    memcpy(g_features.alert_command, cmd, StrLen(cmd) + 1);
  }
  g_features.alert_abort = EnvOn("MEMSTEP_ALERT_ABORT", false);
  if (EnvSeconds("MEMSTEP_WINDOW", &v)) g_features.window_ns = v;
  if (EnvSize("MEMSTEP_SNAPSHOT_MIN_BYTES", &v)) g_features.snap_min_bytes = v;
  if (EnvCount("MEMSTEP_SNAPSHOT_RATIO_PCT", &v)) g_features.snap_ratio_pct = v;
  if (EnvCount("MEMSTEP_SNAPSHOT_RUN_RATIO_PCT", &v)) g_features.run_ratio_pct = v;
  g_features.sites = EnvOn("MEMSTEP_SITES", true);
  g_features.alloc_stats = EnvOn("MEMSTEP_ALLOC_STATS", true);
  g_features.nvtx = EnvOn("MEMSTEP_NVTX", true);
  const char* re = getenv("MEMSTEP_STEP_RANGE");
  if (re != nullptr && re[0] != '\0' && StrLen(re) < sizeof(g_features.step_range)) {
    memcpy(g_features.step_range, re, StrLen(re) + 1);
  }
}

void InitFeatures() {
  InitSnapshotSignal();
  InitSites();
  InitAlerts();
  InitNvtx();
}

void EmitNoticeRecord(ThreadState& t, const char* message) {
  uint32_t id = g_dict.InternString(message, StrLen(message));
  uint8_t buf[fmt::kMaxEncodedSize<fmt::NoticeRecord>];
  fmt::NoticeRecord rec;
  rec.ts = NowRel();
  rec.code = 0;
  rec.message_str = id;
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
}

void SayNotice(ThreadState& t, const char* message, bool record) {
  if (!g_config.quiet) {
    char line[512];
    size_t n = 0;
    for (const char* p = "memstep: "; *p != '\0';) line[n++] = *p++;
    for (const char* p = message; *p != '\0' && n < sizeof(line) - 1;) line[n++] = *p++;
    line[n++] = '\n';
    SayOnStderr(line, n);
  }
  if (record && Recording()) {
    EnsureThread(t);
    EmitNoticeRecord(t, message);
  }
}

namespace {
// Writer-thread state of the time windows.
uint64_t g_next_window = 0;  // MonoNs deadline of the next boundary; 0 = not started
uint64_t g_window_step = 0;
bool g_window_open = false;
}  // namespace

void WindowsWriterPoll() {
  if (g_features.window_ns == 0 || g_user_steps.load(std::memory_order_acquire)) return;
  uint64_t now = MonoNs();
  if (g_next_window == 0) {
    g_next_window = now + g_features.window_ns;
    return;
  }
  if (now < g_next_window) return;
  ThreadState& t = t_state;
  if (g_window_open) StepBoundaryInternal(t, g_window_step++, false);
  // The program may have marked its first step meanwhile: then stop here.
  if (g_user_steps.load(std::memory_order_acquire)) return;
  StepBoundaryInternal(t, g_window_step, true);
  g_window_open = true;
  g_next_window += g_features.window_ns;
  if (g_next_window < now) g_next_window = now + g_features.window_ns;
}

}  // namespace memstep::preload

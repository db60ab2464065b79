// `memstep run`: prepares the run directory and the environment, runs the
// command with libmemstep.so preloaded, forwards SIGINT/SIGTERM (sent to
// memstep itself, not by the terminal, which signals the whole foreground
// process group anyway) and exits with the command's status.

#include <errno.h>
#include <regex.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tools/memstep/cli.h"
#include "tools/memstep/live_view.h"
#include "tools/memstep/options.h"

#ifndef MEMSTEP_BIN_TO_PYTHON
#define MEMSTEP_BIN_TO_PYTHON "../share/memstep/python"
#endif

namespace memstep::cli {
namespace {

volatile sig_atomic_t g_child = 0;

std::string Absolute(const std::string& path);

void Forward(int sig, siginfo_t* info, void*) {
  // A terminal's ^C already reached the child (same process group).
  if (info != nullptr && info->si_code == SI_KERNEL) return;
  if (g_child > 0) kill(g_child, sig);
}

int Error(const std::string& message) {
  std::cerr << "memstep: error: " << message << "\n";
  return kExitError;
}

// Options of issue 3 (steps, alerts, NVTX, Python), appended to RunUsage().
std::string StepUsage() {
  return "\nstep options (each has an environment variable; the option wins):\n"
         "  --warmup STEPS          steps before alerts are evaluated   MEMSTEP_WARMUP (20)\n"
         "  --alert-growth BYTES    alert when host live bytes grow more MEMSTEP_ALERT_GROWTH\n"
         "                          than BYTES per step (Theil-Sen over the last 50 steps)\n"
         "  --alert-peak BYTES      alert when a step's peak exceeds     MEMSTEP_ALERT_PEAK\n"
         "  --alert-device-peak BYTES\n"
         "                          alert when a step's device peak      "
         "MEMSTEP_ALERT_DEVICE_PEAK\n"
         "                          (device + managed + VMM + pool bytes of one device)\n"
         "                          exceeds BYTES\n"
         "  --alert-stage-peak STAGE=BYTES  alert when STAGE's peak in a step exceeds BYTES;\n"
         "                          repeatable                           MEMSTEP_ALERT_STAGE_PEAK\n"
         "                          (\"forward=2GiB,backward=3GiB\")\n"
         "  --alert-command CMD     run CMD (/bin/sh -c) on each alert  MEMSTEP_ALERT_COMMAND\n"
         "                          with MEMSTEP_ALERT_RULE/VALUE/THRESHOLD/STEP set; never waited "
         "on\n"
         "  --alert-abort           abort the program after an alert    MEMSTEP_ALERT_ABORT=1\n"
         "  --window SECONDS        without step markers, time windows  MEMSTEP_WINDOW (10)\n"
         "                          act as steps (0 = off)\n"
         "  --step-range REGEX      NVTX ranges matching REGEX (POSIX ERE, case-insensitive)\n"
         "                          mark steps; others are stages        MEMSTEP_STEP_RANGE\n"
         "                          (default ^(train[_ ]?)?step|^iteration|^iter)\n"
         "  --no-python-hooks       no zero-code PyTorch step hooks     MEMSTEP_PYTHON_HOOKS=0\n"
         "Alerts print one line on stderr (\"memstep: ALERT growth: ...\") and never stop the\n"
         "program unless --alert-abort. NVTX_INJECTION64_PATH is set to libmemstep.so unless\n"
         "already set. Python: PYTHONPATH gets <python>/startup and <python>, where <python>\n"
         "is $MEMSTEP_PYTHON_DIR, <bin>/../python or <bin>/" MEMSTEP_BIN_TO_PYTHON
         "; its\n"
         "start-up hook also hooks Python's own allocator (pymalloc), also with\n"
         "--no-python-hooks; MEMSTEP_PYMEM=0 leaves it alone.\n";
}

int UsageError(const std::string& message) {
  std::cerr << "memstep: error: " << message << "\n" << RunUsage() << StepUsage();
  return kExitError;
}

bool IsDir(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string Env(const char* name) {
  const char* v = getenv(name);
  return v != nullptr ? v : "";
}

// What `memstep run` was asked: each setting from its MEMSTEP_* variable,
// then from the options (an option wins over its variable).
struct RunSettings {
  std::string out_dir = Env("MEMSTEP_OUT");
  std::string interval = Env("MEMSTEP_SAMPLE_INTERVAL");
  std::string warm = Env("MEMSTEP_SAMPLE_WARM");
  std::string flush = Env("MEMSTEP_FLUSH_MS");
  std::string hunt = Env("MEMSTEP_HUNT_BUDGET");
  std::string metrics_file = Env("MEMSTEP_METRICS_FILE");
  std::string warmup = Env("MEMSTEP_WARMUP");
  std::string growth = Env("MEMSTEP_ALERT_GROWTH");
  std::string peak = Env("MEMSTEP_ALERT_PEAK");
  std::string device_peak = Env("MEMSTEP_ALERT_DEVICE_PEAK");
  std::string alert_command = Env("MEMSTEP_ALERT_COMMAND");
  std::string window = Env("MEMSTEP_WINDOW");
  std::string step_range = Env("MEMSTEP_STEP_RANGE");
  // MEMSTEP_ALERT_STAGE_PEAK, replaced by the --alert-stage-peak options.
  std::vector<std::string> stage_peaks = NonEmpty(Env("MEMSTEP_ALERT_STAGE_PEAK"));
  bool stage_peaks_from_options = false;
  bool fixed_interval = Env("MEMSTEP_PROGRESSIVE") == "0";
  bool abort_on_alert = !Env("MEMSTEP_ALERT_ABORT").empty() && Env("MEMSTEP_ALERT_ABORT") != "0";
  bool python_hooks = Env("MEMSTEP_PYTHON_HOOKS") != "0";

  static std::vector<std::string> NonEmpty(const std::string& v) {
    return v.empty() ? std::vector<std::string>{} : std::vector<std::string>{v};
  }
};

// The options of `memstep run` that take a value, and the setting each sets.
constexpr struct {
  const char* name;
  std::string RunSettings::*setting;
} kValuedRunOptions[] = {
    {"--out", &RunSettings::out_dir},
    {"--warmup", &RunSettings::warmup},
    {"--alert-growth", &RunSettings::growth},
    {"--alert-peak", &RunSettings::peak},
    {"--alert-device-peak", &RunSettings::device_peak},
    {"--alert-stage-peak", nullptr},  // repeatable: ApplyRunOption
    {"--alert-command", &RunSettings::alert_command},
    {"--window", &RunSettings::window},
    {"--step-range", &RunSettings::step_range},
    {"--sample-interval", &RunSettings::interval},
    {"--sample-warm", &RunSettings::warm},
    {"--flush-ms", &RunSettings::flush},
    {"--hunt-budget", &RunSettings::hunt},
    {"--metrics-file", &RunSettings::metrics_file},
};

FlagSet RunFlags() {
  FlagSet flags;
  flags.switches = {"--alert-abort", "--no-python-hooks", "--fixed-interval"};
  for (const auto& option : kValuedRunOptions) flags.valued.push_back(option.name);
  flags.stop_at_operand = true;
  return flags;
}

void ApplyRunOption(const Arg& arg, RunSettings* s) {
  if (arg.name == "--alert-abort") s->abort_on_alert = true;
  if (arg.name == "--no-python-hooks") s->python_hooks = false;
  if (arg.name == "--fixed-interval") s->fixed_interval = true;
  for (const auto& option : kValuedRunOptions) {
    if (arg.name == option.name && option.setting != nullptr) s->*option.setting = arg.value;
  }
  if (arg.name == "--alert-stage-peak") {
    if (!s->stage_peaks_from_options) s->stage_peaks.clear();  // options replace the variable
    s->stage_peaks_from_options = true;
    s->stage_peaks.push_back(arg.value);
  }
}

// The child's environment: name -> value, set over the inherited one.
using ChildEnv = std::vector<std::pair<std::string, std::string>>;

// A size or count setting that must be at least 1, as its decimal value.
absl::Status AddPositive(const char* var, const std::string& text, const char* label,
                         absl::StatusOr<uint64_t> (*parse)(const std::string&),
                         const char* too_small, ChildEnv* env) {
  if (text.empty()) return absl::OkStatus();
  absl::StatusOr<uint64_t> v = parse(text);
  if (!v.ok() || *v == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": ", v.ok() ? too_small : v.status().message()));
  }
  env->emplace_back(var, absl::StrCat(*v));
  return absl::OkStatus();
}

// The sampling settings: T_steady, T_warm, the writer's flush period.
absl::Status AddSamplingEnv(const RunSettings& s, ChildEnv* env) {
  constexpr char kAtLeast1[] = "must be at least 1";
  if (absl::Status st =
          AddPositive("MEMSTEP_SAMPLE_INTERVAL", s.interval,
                      "--sample-interval / MEMSTEP_SAMPLE_INTERVAL", ParseBytes, kAtLeast1, env);
      !st.ok()) {
    return st;
  }
  if (absl::Status st =
          AddPositive("MEMSTEP_SAMPLE_WARM", s.warm, "--sample-warm / MEMSTEP_SAMPLE_WARM",
                      ParseBytes, kAtLeast1, env);
      !st.ok()) {
    return st;
  }
  env->emplace_back("MEMSTEP_PROGRESSIVE", s.fixed_interval ? "0" : "1");
  return AddPositive("MEMSTEP_FLUSH_MS", s.flush, "--flush-ms / MEMSTEP_FLUSH_MS", ParseUint,
                     kAtLeast1, env);
}

// --alert-stage-peak / MEMSTEP_ALERT_STAGE_PEAK: "forward=2GiB,backward=3GiB"
// in each of `lists`, as STAGE=BYTES rules with BYTES in decimal.
absl::Status AddStagePeakEnv(const std::vector<std::string>& lists, ChildEnv* env) {
  constexpr char kLabel[] = "--alert-stage-peak / MEMSTEP_ALERT_STAGE_PEAK";
  std::vector<std::string> rules;
  for (const std::string& list : lists) {
    for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipEmpty())) {
      size_t eq = item.find('=');
      if (eq == absl::string_view::npos || eq == 0 || eq >= 64) {
        return absl::InvalidArgumentError(
            absl::StrCat(kLabel, ": '", item, "' is not STAGE=BYTES"));
      }
      absl::StatusOr<uint64_t> v = ParseBytes(std::string(item.substr(eq + 1)));
      if (!v.ok() || *v == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(kLabel, ": ", v.ok() ? "must be positive" : v.status().message()));
      }
      rules.push_back(absl::StrCat(item.substr(0, eq), "=", *v));
    }
  }
  if (rules.size() > 16) return absl::InvalidArgumentError("--alert-stage-peak: at most 16 stages");
  if (!rules.empty()) env->emplace_back("MEMSTEP_ALERT_STAGE_PEAK", absl::StrJoin(rules, ","));
  return absl::OkStatus();
}

// The alert settings: warm-up, growth and peak thresholds, command, abort.
absl::Status AddAlertEnv(const RunSettings& s, ChildEnv* env) {
  if (!s.warmup.empty()) {
    absl::StatusOr<uint64_t> v = ParseUint(s.warmup);
    if (!v.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--warmup / MEMSTEP_WARMUP: ", v.status().message()));
    }
    env->emplace_back("MEMSTEP_WARMUP", absl::StrCat(*v));
  }
  struct SizeOption {
    const char* var;
    const char* label;
    const std::string* text;
  };
  const SizeOption sizes[] = {
      {"MEMSTEP_ALERT_GROWTH", "--alert-growth / MEMSTEP_ALERT_GROWTH", &s.growth},
      {"MEMSTEP_ALERT_PEAK", "--alert-peak / MEMSTEP_ALERT_PEAK", &s.peak},
      {"MEMSTEP_ALERT_DEVICE_PEAK", "--alert-device-peak / MEMSTEP_ALERT_DEVICE_PEAK",
       &s.device_peak}};
  for (const auto& [var, label, text] : sizes) {
    if (absl::Status st = AddPositive(var, *text, label, ParseBytes, "must be positive", env);
        !st.ok()) {
      return st;
    }
  }
  if (absl::Status st = AddStagePeakEnv(s.stage_peaks, env); !st.ok()) return st;
  if (!s.alert_command.empty()) env->emplace_back("MEMSTEP_ALERT_COMMAND", s.alert_command);
  if (s.abort_on_alert) env->emplace_back("MEMSTEP_ALERT_ABORT", "1");
  return absl::OkStatus();
}

// How steps are found without markers: time windows, NVTX range names.
absl::Status AddStepMarkingEnv(const RunSettings& s, ChildEnv* env) {
  if (!s.window.empty()) {
    double seconds;
    if (!absl::SimpleAtod(s.window, &seconds) || !(seconds >= 0) || seconds > 1e9 ||
        s.window.find_first_not_of("0123456789.") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--window / MEMSTEP_WINDOW: '", s.window,
                       "' is not a number of seconds (examples: 10, 0.5; 0 = off)"));
    }
    env->emplace_back("MEMSTEP_WINDOW", s.window);
  }
  if (!s.step_range.empty()) {
    regex_t re;
    int rc = regcomp(&re, s.step_range.c_str(), REG_EXTENDED | REG_ICASE | REG_NOSUB);
    if (rc != 0) {
      char msg[256];
      regerror(rc, &re, msg, sizeof(msg));
      return absl::InvalidArgumentError(
          absl::StrCat("--step-range / MEMSTEP_STEP_RANGE: '", s.step_range, "': ", msg));
    }
    regfree(&re);
    env->emplace_back("MEMSTEP_STEP_RANGE", s.step_range);
  }
  return absl::OkStatus();
}

// The Python helper's directory: $MEMSTEP_PYTHON_DIR, else the build tree's
// copy (build/python), else the installed one; "" when none exists.
std::string PythonDir() {
  std::string dir = Env("MEMSTEP_PYTHON_DIR");
  if (dir.empty()) {
    const std::string exe_dir = ExeDir();
    for (const std::string& rel : {std::string("/../python"), absl::StrCat("/", kBinToPython)}) {
      if (IsDir(exe_dir + rel)) return Absolute(exe_dir + rel);
    }
  }
  return dir.empty() || !IsDir(dir) ? "" : Absolute(dir);
}

// The start-up hook goes on PYTHONPATH either way: with --no-python-hooks
// (MEMSTEP_PYTHON_HOOKS=0) it installs no PyTorch hooks but still hooks
// Python's own allocator (unless MEMSTEP_PYMEM=0).
void AddPythonEnv(bool python_hooks, ChildEnv* env) {
  if (!python_hooks) env->emplace_back("MEMSTEP_PYTHON_HOOKS", "0");
  const std::string dir = PythonDir();
  if (dir.empty()) return;  // no hooks installed: skip silently
  std::string path = absl::StrCat(dir, "/startup:", dir);
  if (std::string old = Env("PYTHONPATH"); !old.empty()) absl::StrAppend(&path, ":", old);
  env->emplace_back("PYTHONPATH", path);
  // The traces record it (format.h kTlvPythonDir): the report leaves the
  // hooks' frames out of the program's stacks.
  env->emplace_back("MEMSTEP_PYTHON_DIR", dir);
  if (python_hooks) env->emplace_back("MEMSTEP_PYTHON_HOOKS", "1");
}

// Validates every setting and returns the child's MEMSTEP_* environment, or
// the usage error naming the option and its variable.
absl::StatusOr<ChildEnv> PrepareChildEnv(const RunSettings& s) {
  ChildEnv env;
  for (absl::Status st :
       {AddSamplingEnv(s, &env), AddAlertEnv(s, &env), AddStepMarkingEnv(s, &env)}) {
    if (!st.ok()) return st;
  }
  AddPythonEnv(s.python_hooks, &env);
  if (!s.hunt.empty()) {
    absl::StatusOr<double> pct = ParsePercent(s.hunt);
    if (!pct.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--hunt-budget / MEMSTEP_HUNT_BUDGET: ", pct.status().message(), " (0 = no leak hunt)"));
    }
    env.emplace_back("MEMSTEP_HUNT_BUDGET", absl::StrCat(*pct));
  }
  return env;
}

std::string DefaultRunDir() {
  char stamp[32];
  time_t now = time(nullptr);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  return absl::StrCat("memstep-", stamp, "-", getpid());
}

// Whether execvp would find `name`: a path containing '/' must exist, a bare
// name must be an executable regular file in a $PATH directory. (execvp stays
// the judge: this only avoids creating a run directory for a typo.)
bool CommandExists(const std::string& name) {
  if (name.empty()) return false;
  if (name.find('/') != std::string::npos) return access(name.c_str(), F_OK) == 0;
  const char* path = getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/bin:/usr/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return true;
    }
    start = end + 1;
  }
  return false;
}

// mkdir -p; returns errno of the failing step or 0.
int MakeDirs(const std::string& path) {
  std::string partial;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    partial = path.substr(0, slash);
    pos = slash + 1;
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) return errno;
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return errno;
  if (!S_ISDIR(st.st_mode)) return ENOTDIR;
  return 0;
}

std::string Absolute(const std::string& path) {
  char real[PATH_MAX];
  if (realpath(path.c_str(), real) != nullptr) return real;
  return path;
}

// The run directory (created like mkdir -p, and writable) as an absolute
// path; `out_dir` "" = memstep-YYYYmmdd-HHMMSS-PID here.
absl::StatusOr<std::string> PrepareRunDir(std::string out_dir) {
  if (out_dir.empty()) out_dir = DefaultRunDir();
  if (int err = MakeDirs(out_dir); err != 0) {
    return absl::InternalError(
        absl::StrCat("cannot create run directory ", out_dir, ": ", strerror(err)));
  }
  if (access(out_dir.c_str(), W_OK | X_OK) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot write to run directory ", out_dir, ": ", strerror(errno)));
  }
  return Absolute(out_dir);
}

// Replaces this (forked) process by the command `argv` with `env` set over
// the inherited environment; on failure exits 127 (not found) or 126.
[[noreturn]] void ExecTraced(const std::vector<char*>& argv, const ChildEnv& env) {
  for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
  execvp(argv[0], argv.data());
  const int err = errno;
  fprintf(stderr, "memstep: error: %s: %s\n", argv[0],
          err == ENOENT ? "command not found" : strerror(err));
  _exit(err == ENOENT ? kExitNotFound : 126);
}

// Forks the traced command; the signals memstep receives (kill, not the
// terminal's) are forwarded to it. Returns its pid, or -1 with errno.
pid_t SpawnTraced(std::vector<std::string> command, const std::string& lib,
                  const std::string& run_dir, ChildEnv env) {
  std::string preload = lib;
  if (const char* old = getenv("LD_PRELOAD"); old != nullptr && *old != '\0') {
    absl::StrAppend(&preload, ":", old);
  }
  env.emplace(env.begin(), "LD_PRELOAD", preload);
  env.emplace(env.begin() + 1, "MEMSTEP_DIR", run_dir);
  std::vector<char*> argv;
  for (std::string& a : command) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Forwarding handlers are installed before fork with the signals blocked,
  // so that none is lost between fork and g_child being set; the child
  // restores the defaults before exec.
  constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  sigset_t block, saved;
  sigemptyset(&block);
  for (int sig : kForwarded) sigaddset(&block, sig);
  sigprocmask(SIG_BLOCK, &block, &saved);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = Forward;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_actions[4];
  for (int k = 0; k < 4; ++k) sigaction(kForwarded[k], &sa, &old_actions[k]);

  std::cout.flush();
  std::cerr.flush();
  pid_t child = fork();
  if (child == 0) {
    for (int k = 0; k < 4; ++k) sigaction(kForwarded[k], &old_actions[k], nullptr);
    sigprocmask(SIG_SETMASK, &saved, nullptr);
    // The library is also the NVTX injection library; never replace the user's.
    setenv("NVTX_INJECTION64_PATH", lib.c_str(), 0);
    ExecTraced(argv, env);
  }
  const int err = errno;
  if (child > 0) g_child = child;
  sigprocmask(SIG_SETMASK, &saved, nullptr);
  errno = err;
  return child;
}

}  // namespace

int RunMain(const std::vector<std::string>& args) {
  RunSettings settings;
  absl::StatusOr<ParsedArgs> parsed = ParseArgs(args, RunFlags(), [&settings](const Arg& arg) {
    ApplyRunOption(arg, &settings);
    return absl::OkStatus();
  });
  if (!parsed.ok()) return UsageError(std::string(parsed.status().message()));
  if (parsed->help) {
    std::cout << RunUsage() << StepUsage();
    return kExitOk;
  }
  if (parsed->rest >= args.size()) {
    return UsageError("no command given (memstep run -- COMMAND ARGS...)");
  }
  const std::vector<std::string> command(args.begin() + static_cast<long>(parsed->rest),
                                         args.end());
  absl::StatusOr<ChildEnv> env = PrepareChildEnv(settings);
  if (!env.ok()) return UsageError(std::string(env.status().message()));
  absl::StatusOr<std::string> lib = FindPreloadLibrary(ExeDir());
  if (!lib.ok()) return Error(std::string(lib.status().message()));
  // A command that cannot be found fails before the run directory exists, so
  // a typo leaves no empty run behind.
  if (!CommandExists(command[0])) {
    std::cerr << "memstep: error: " << command[0] << ": command not found\n";
    return kExitNotFound;
  }
  absl::StatusOr<std::string> run_dir = PrepareRunDir(settings.out_dir);
  if (!run_dir.ok()) return Error(std::string(run_dir.status().message()));

  const pid_t child = SpawnTraced(command, *lib, *run_dir, *env);
  if (child < 0) return Error(absl::StrCat("fork: ", strerror(errno)));
  int status = 0;
  if (int err = WaitForChild(child, *run_dir, settings.metrics_file, &status); err != 0) {
    return Error(absl::StrCat("waitpid: ", strerror(err)));
  }
  std::cerr << "memstep: run directory: " << *run_dir << "\n"
            << "memstep: see the report with: memstep report " << *run_dir << "\n";
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitError;
}

}  // namespace memstep::cli

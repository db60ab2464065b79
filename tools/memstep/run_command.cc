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

// Child environment for the step features: name -> value ("" = leave as is).
struct StepEnv {
  std::vector<std::pair<std::string, std::string>> set;
};

// Validates the step options (already merged with their variables) and
// fills `env`. Returns an error message, or "" when all are valid.
std::string PrepareStepEnv(const std::string& warmup, const std::string& growth,
                           const std::string& peak, const std::string& device_peak,
                           const std::vector<std::string>& stage_peaks, const std::string& command,
                           bool abort_on_alert, const std::string& window,
                           const std::string& step_range, bool python_hooks, StepEnv* env) {
  if (!warmup.empty()) {
    absl::StatusOr<uint64_t> v = ParseUint(warmup);
    if (!v.ok()) return absl::StrCat("--warmup / MEMSTEP_WARMUP: ", v.status().message());
    env->set.emplace_back("MEMSTEP_WARMUP", absl::StrCat(*v));
  }
  struct SizeOption {
    const char* option;
    const char* var;
    const std::string* text;
  };
  const SizeOption sizes[] = {{"--alert-growth", "MEMSTEP_ALERT_GROWTH", &growth},
                              {"--alert-peak", "MEMSTEP_ALERT_PEAK", &peak},
                              {"--alert-device-peak", "MEMSTEP_ALERT_DEVICE_PEAK", &device_peak}};
  for (const auto& [option, var, text] : sizes) {
    if (text->empty()) continue;
    absl::StatusOr<uint64_t> v = ParseBytes(*text);
    if (!v.ok() || *v == 0) {
      return absl::StrCat(option, " / ", var, ": ",
                          v.ok() ? "must be positive" : v.status().message());
    }
    env->set.emplace_back(var, absl::StrCat(*v));
  }
  std::vector<std::string> rules;
  for (const std::string& list : stage_peaks) {
    for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipEmpty())) {
      size_t eq = item.find('=');
      if (eq == absl::string_view::npos || eq == 0 || eq >= 64) {
        return absl::StrCat("--alert-stage-peak / MEMSTEP_ALERT_STAGE_PEAK: '", item,
                            "' is not STAGE=BYTES");
      }
      absl::StatusOr<uint64_t> v = ParseBytes(std::string(item.substr(eq + 1)));
      if (!v.ok() || *v == 0) {
        return absl::StrCat("--alert-stage-peak / MEMSTEP_ALERT_STAGE_PEAK: ",
                            v.ok() ? "must be positive" : v.status().message());
      }
      rules.push_back(absl::StrCat(item.substr(0, eq), "=", *v));
    }
  }
  if (rules.size() > 16) return "--alert-stage-peak: at most 16 stages";
  if (!rules.empty()) env->set.emplace_back("MEMSTEP_ALERT_STAGE_PEAK", absl::StrJoin(rules, ","));
  if (!command.empty()) env->set.emplace_back("MEMSTEP_ALERT_COMMAND", command);
  if (abort_on_alert) env->set.emplace_back("MEMSTEP_ALERT_ABORT", "1");
  if (!window.empty()) {
    double seconds;
    if (!absl::SimpleAtod(window, &seconds) || !(seconds >= 0) || seconds > 1e9 ||
        window.find_first_not_of("0123456789.") != std::string::npos) {
      return absl::StrCat("--window / MEMSTEP_WINDOW: '", window,
                          "' is not a number of seconds (examples: 10, 0.5; 0 = off)");
    }
    env->set.emplace_back("MEMSTEP_WINDOW", window);
  }
  if (!step_range.empty()) {
    regex_t re;
    int rc = regcomp(&re, step_range.c_str(), REG_EXTENDED | REG_ICASE | REG_NOSUB);
    if (rc != 0) {
      char msg[256];
      regerror(rc, &re, msg, sizeof(msg));
      return absl::StrCat("--step-range / MEMSTEP_STEP_RANGE: '", step_range, "': ", msg);
    }
    regfree(&re);
    env->set.emplace_back("MEMSTEP_STEP_RANGE", step_range);
  }
  // The start-up hook goes on PYTHONPATH either way: with --no-python-hooks
  // (MEMSTEP_PYTHON_HOOKS=0) it installs no PyTorch hooks but still hooks
  // Python's own allocator (unless MEMSTEP_PYMEM=0).
  std::string dir = Env("MEMSTEP_PYTHON_DIR");
  if (dir.empty()) {
    const std::string exe_dir = ExeDir();
    // The build tree's copy (build/python), then the installed one.
    for (const std::string& rel : {std::string("/../python"), absl::StrCat("/", kBinToPython)}) {
      if (IsDir(exe_dir + rel)) {
        dir = Absolute(exe_dir + rel);
        break;
      }
    }
  }
  if (!python_hooks) env->set.emplace_back("MEMSTEP_PYTHON_HOOKS", "0");
  if (dir.empty() || !IsDir(dir)) return "";  // no hooks installed: skip silently
  std::string path = absl::StrCat(dir, "/startup:", dir);
  if (std::string old = Env("PYTHONPATH"); !old.empty()) absl::StrAppend(&path, ":", old);
  env->set.emplace_back("PYTHONPATH", path);
  if (python_hooks) env->set.emplace_back("MEMSTEP_PYTHON_HOOKS", "1");
  return "";
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

}  // namespace

int RunMain(const std::vector<std::string>& args) {
  std::string out_dir;
  std::string interval_text;
  std::string warm_text = Env("MEMSTEP_SAMPLE_WARM");
  const std::string progressive_env = Env("MEMSTEP_PROGRESSIVE");
  bool fixed_interval = !progressive_env.empty() && progressive_env == "0";
  std::string flush_text;
  std::string hunt_text = Env("MEMSTEP_HUNT_BUDGET");
  if (const char* e = getenv("MEMSTEP_OUT")) out_dir = e;
  if (const char* e = getenv("MEMSTEP_SAMPLE_INTERVAL")) interval_text = e;
  if (const char* e = getenv("MEMSTEP_FLUSH_MS")) flush_text = e;
  std::string metrics_file = Env("MEMSTEP_METRICS_FILE");
  std::string warmup = Env("MEMSTEP_WARMUP"), growth = Env("MEMSTEP_ALERT_GROWTH"),
              peak = Env("MEMSTEP_ALERT_PEAK"), device_peak = Env("MEMSTEP_ALERT_DEVICE_PEAK"),
              alert_command = Env("MEMSTEP_ALERT_COMMAND"), window = Env("MEMSTEP_WINDOW"),
              step_range = Env("MEMSTEP_STEP_RANGE");
  std::vector<std::string> stage_peaks;
  bool stage_peaks_from_options = false;
  if (std::string e = Env("MEMSTEP_ALERT_STAGE_PEAK"); !e.empty()) stage_peaks.push_back(e);
  const std::string abort_env = Env("MEMSTEP_ALERT_ABORT");
  bool abort_on_alert = !abort_env.empty() && abort_env != "0";
  const std::string hooks_env = Env("MEMSTEP_PYTHON_HOOKS");
  bool python_hooks = hooks_env.empty() || hooks_env != "0";
  std::string stage_peak_value;

  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      std::cout << RunUsage() << StepUsage();
      return kExitOk;
    }
    std::string* target = nullptr;
    std::string name = a;
    std::string value;
    bool has_value = false;
    if (size_t eq = a.find('='); absl::StartsWith(a, "--") && eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_value = true;
    }
    if (a == "--alert-abort") {
      abort_on_alert = true;
      continue;
    }
    if (a == "--no-python-hooks") {
      python_hooks = false;
      continue;
    }
    if (a == "--fixed-interval") {
      fixed_interval = true;
      continue;
    }
    if (name == "--out") {
      target = &out_dir;
    } else if (name == "--warmup") {
      target = &warmup;
    } else if (name == "--alert-growth") {
      target = &growth;
    } else if (name == "--alert-peak") {
      target = &peak;
    } else if (name == "--alert-device-peak") {
      target = &device_peak;
    } else if (name == "--alert-stage-peak") {
      target = &stage_peak_value;
    } else if (name == "--alert-command") {
      target = &alert_command;
    } else if (name == "--window") {
      target = &window;
    } else if (name == "--step-range") {
      target = &step_range;
    } else if (name == "--sample-interval") {
      target = &interval_text;
    } else if (name == "--sample-warm") {
      target = &warm_text;
    } else if (name == "--flush-ms") {
      target = &flush_text;
    } else if (name == "--hunt-budget") {
      target = &hunt_text;
    } else if (name == "--metrics-file") {
      target = &metrics_file;
    } else if (absl::StartsWith(a, "-")) {
      return UsageError(absl::StrCat("unknown option '", a, "'"));
    } else {
      break;  // the command starts here
    }
    if (!has_value) {
      if (i + 1 >= args.size()) return UsageError(absl::StrCat(a, " needs a value"));
      value = args[++i];
    }
    *target = value;
    if (target == &stage_peak_value) {
      if (!stage_peaks_from_options) stage_peaks.clear();  // options replace the variable
      stage_peaks_from_options = true;
      stage_peaks.push_back(value);
    }
  }
  if (i >= args.size()) return UsageError("no command given (memstep run -- COMMAND ARGS...)");
  std::vector<std::string> command(args.begin() + static_cast<long>(i), args.end());

  std::string interval;
  if (!interval_text.empty()) {
    absl::StatusOr<uint64_t> v = ParseBytes(interval_text);
    if (!v.ok() || *v == 0) {
      return UsageError(absl::StrCat("--sample-interval / MEMSTEP_SAMPLE_INTERVAL: ",
                                     v.ok() ? "must be at least 1" : v.status().message()));
    }
    interval = absl::StrCat(*v);
  }
  std::string warm;
  if (!warm_text.empty()) {
    absl::StatusOr<uint64_t> v = ParseBytes(warm_text);
    if (!v.ok() || *v == 0) {
      return UsageError(absl::StrCat("--sample-warm / MEMSTEP_SAMPLE_WARM: ",
                                     v.ok() ? "must be at least 1" : v.status().message()));
    }
    warm = absl::StrCat(*v);
  }
  std::string flush;
  if (!flush_text.empty()) {
    absl::StatusOr<uint64_t> v = ParseUint(flush_text);
    if (!v.ok() || *v == 0) {
      return UsageError(absl::StrCat("--flush-ms / MEMSTEP_FLUSH_MS: ",
                                     v.ok() ? "must be at least 1" : v.status().message()));
    }
    flush = absl::StrCat(*v);
  }

  StepEnv step_env;
  if (std::string err =
          PrepareStepEnv(warmup, growth, peak, device_peak, stage_peaks, alert_command,
                         abort_on_alert, window, step_range, python_hooks, &step_env);
      !err.empty()) {
    return UsageError(err);
  }

  absl::StatusOr<std::string> lib = FindPreloadLibrary(ExeDir());
  if (!lib.ok()) return Error(std::string(lib.status().message()));

  // A command that cannot be found fails before the run directory exists, so
  // a typo leaves no empty run behind.
  if (!CommandExists(command[0])) {
    std::cerr << "memstep: error: " << command[0] << ": command not found\n";
    return kExitNotFound;
  }

  if (out_dir.empty()) out_dir = DefaultRunDir();
  if (int err = MakeDirs(out_dir); err != 0) {
    return Error(absl::StrCat("cannot create run directory ", out_dir, ": ", strerror(err)));
  }
  if (access(out_dir.c_str(), W_OK | X_OK) != 0) {
    return Error(absl::StrCat("cannot write to run directory ", out_dir, ": ", strerror(errno)));
  }
  const std::string run_dir = Absolute(out_dir);

  std::string preload = *lib;
  if (const char* old = getenv("LD_PRELOAD"); old != nullptr && *old != '\0') {
    absl::StrAppend(&preload, ":", old);
  }

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
  std::string hunt;
  if (!hunt_text.empty()) {
    absl::StatusOr<double> pct = ParsePercent(hunt_text);
    if (!pct.ok()) {
      return UsageError(absl::StrCat(
          "--hunt-budget / MEMSTEP_HUNT_BUDGET: ", pct.status().message(), " (0 = no leak hunt)"));
    }
    hunt = absl::StrCat(*pct);
  }

  pid_t child = fork();
  if (child < 0) return Error(absl::StrCat("fork: ", strerror(errno)));
  if (child == 0) {
    for (int k = 0; k < 4; ++k) sigaction(kForwarded[k], &old_actions[k], nullptr);
    sigprocmask(SIG_SETMASK, &saved, nullptr);
    setenv("LD_PRELOAD", preload.c_str(), 1);
    setenv("MEMSTEP_DIR", run_dir.c_str(), 1);
    if (!interval.empty()) setenv("MEMSTEP_SAMPLE_INTERVAL", interval.c_str(), 1);
    if (!warm.empty()) setenv("MEMSTEP_SAMPLE_WARM", warm.c_str(), 1);
    setenv("MEMSTEP_PROGRESSIVE", fixed_interval ? "0" : "1", 1);
    if (!flush.empty()) setenv("MEMSTEP_FLUSH_MS", flush.c_str(), 1);
    if (!hunt.empty()) setenv("MEMSTEP_HUNT_BUDGET", hunt.c_str(), 1);
    for (const auto& [name, value] : step_env.set) setenv(name.c_str(), value.c_str(), 1);
    // The library is also the NVTX injection library; never replace the user's.
    setenv("NVTX_INJECTION64_PATH", lib->c_str(), 0);
    std::vector<char*> argv;
    for (std::string& a : command) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    const int err = errno;
    fprintf(stderr, "memstep: error: %s: %s\n", argv[0],
            err == ENOENT ? "command not found" : strerror(err));
    _exit(err == ENOENT ? kExitNotFound : 126);
  }
  g_child = child;
  sigprocmask(SIG_SETMASK, &saved, nullptr);

  int status = 0;
  if (int err = WaitForChild(child, run_dir, metrics_file, &status); err != 0) {
    return Error(absl::StrCat("waitpid: ", strerror(err)));
  }
  std::cerr << "memstep: run directory: " << run_dir << "\n"
            << "memstep: see the report with: memstep report " << run_dir << "\n";
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitError;
}

}  // namespace memstep::cli

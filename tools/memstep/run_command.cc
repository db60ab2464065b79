// `memstep run`: prepares the run directory and the environment, runs the
// command with libmemstep.so preloaded, forwards SIGINT/SIGTERM (sent to
// memstep itself, not by the terminal, which signals the whole foreground
// process group anyway) and exits with the command's status.

#include <errno.h>
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
#include "absl/strings/str_cat.h"
#include "tools/memstep/cli.h"

namespace memstep::cli {
namespace {

volatile sig_atomic_t g_child = 0;

void Forward(int sig, siginfo_t* info, void*) {
  // A terminal's ^C already reached the child (same process group).
  if (info != nullptr && info->si_code == SI_KERNEL) return;
  if (g_child > 0) kill(g_child, sig);
}

int Error(const std::string& message) {
  std::cerr << "memstep: error: " << message << "\n";
  return kExitError;
}

int UsageError(const std::string& message) {
  std::cerr << "memstep: error: " << message << "\n" << RunUsage();
  return kExitError;
}

std::string DefaultRunDir() {
  char stamp[32];
  time_t now = time(nullptr);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  return absl::StrCat("memstep-", stamp, "-", getpid());
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
    if (mkdir(partial.c_str(), 0777) != 0 && errno != EEXIST) return errno;
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
  std::string flush_text;
  if (const char* e = getenv("MEMSTEP_OUT")) out_dir = e;
  if (const char* e = getenv("MEMSTEP_SAMPLE_INTERVAL")) interval_text = e;
  if (const char* e = getenv("MEMSTEP_FLUSH_MS")) flush_text = e;

  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      std::cout << RunUsage();
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
    if (name == "--out") {
      target = &out_dir;
    } else if (name == "--sample-interval") {
      target = &interval_text;
    } else if (name == "--flush-ms") {
      target = &flush_text;
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
  std::string flush;
  if (!flush_text.empty()) {
    absl::StatusOr<uint64_t> v = ParseUint(flush_text);
    if (!v.ok() || *v == 0) {
      return UsageError(absl::StrCat("--flush-ms / MEMSTEP_FLUSH_MS: ",
                                     v.ok() ? "must be at least 1" : v.status().message()));
    }
    flush = absl::StrCat(*v);
  }

  absl::StatusOr<std::string> lib = FindPreloadLibrary(ExeDir());
  if (!lib.ok()) return Error(std::string(lib.status().message()));

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
  pid_t child = fork();
  if (child < 0) return Error(absl::StrCat("fork: ", strerror(errno)));
  if (child == 0) {
    for (int k = 0; k < 4; ++k) sigaction(kForwarded[k], &old_actions[k], nullptr);
    sigprocmask(SIG_SETMASK, &saved, nullptr);
    setenv("LD_PRELOAD", preload.c_str(), 1);
    setenv("MEMSTEP_DIR", run_dir.c_str(), 1);
    if (!interval.empty()) setenv("MEMSTEP_SAMPLE_INTERVAL", interval.c_str(), 1);
    if (!flush.empty()) setenv("MEMSTEP_FLUSH_MS", flush.c_str(), 1);
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
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return Error(absl::StrCat("waitpid: ", strerror(errno)));
  }
  std::cerr << "memstep: run directory: " << run_dir << "\n"
            << "memstep: see the report with: memstep report " << run_dir << "\n";
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitError;
}

}  // namespace memstep::cli

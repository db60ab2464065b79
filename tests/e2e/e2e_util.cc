#include "tests/e2e/e2e_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace memstep::e2e {
namespace {

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

int RemainingMs(int64_t deadline_ms) {
  int64_t left = deadline_ms - NowMs();
  return left > 0 ? static_cast<int>(left) : 0;
}

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

bool IsAllocatorFrame(const analysis::Frame& frame) {
  return frame.function.rfind("operator new", 0) == 0 ||
         frame.function.rfind("operator delete", 0) == 0 || Contains(frame.module, "libc.so") ||
         Contains(frame.module, "libstdc++") || Contains(frame.module, "libmemstep");
}

}  // namespace

std::string PreloadLibrary() { return MEMSTEP_E2E_PRELOAD; }
std::string PlantedProgram() { return MEMSTEP_E2E_PLANTED; }
std::string PlantedDso() { return MEMSTEP_E2E_DSO; }
std::string MemstepCli() { return MEMSTEP_E2E_CLI; }
std::string ExampleProgram() { return MEMSTEP_E2E_EXAMPLE; }

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string tmpl = absl::StrCat(base != nullptr && *base ? base : "/tmp", "/memstep_e2e.XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    perror("mkdtemp");
    abort();
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::vector<std::string> TempDir::Files(std::string_view suffix) const {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(path_, ec)) {
    std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      files.push_back(entry.path().string());
    }
  }
  return files;
}

std::vector<std::string> TracedEnv(const std::string& dir, uint64_t interval) {
  // MEMSTEP_SEED: the sampler's gaps come from a fixed seed, never from the
  // clock (a test that wants other seeds appends its own; the last wins).
  std::vector<std::string> env = {absl::StrCat("LD_PRELOAD=", PreloadLibrary()),
                                  absl::StrCat("MEMSTEP_DIR=", dir), "MEMSTEP_SEED=1"};
  if (interval != 0) env.push_back(absl::StrCat("MEMSTEP_SAMPLE_INTERVAL=", interval));
  return env;
}

void PreloadAfter(std::vector<std::string>* env, const std::string& lib) {
  if (lib.empty()) return;
  for (std::string& kv : *env) {
    if (kv.rfind("LD_PRELOAD=", 0) == 0) kv += ":" + lib;
  }
}

Child Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  // Build argv and envp before fork: the child only calls async-signal-safe
  // functions.
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    merged[kv.substr(0, kv.find('='))] = kv;
  }
  for (const std::string& kv : env) merged[kv.substr(0, kv.find('='))] = kv;
  std::vector<std::string> env_strings;
  for (auto& [name, kv] : merged) env_strings.push_back(kv);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = argv;
  std::vector<char*> args;
  for (auto& s : argv_strings) args.push_back(s.data());
  args.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) abort();
  Child child;
  child.pid = fork();
  if (child.pid < 0) abort();
  if (child.pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  child.out_fd = fds[0];
  child.pidfd = static_cast<int>(syscall(SYS_pidfd_open, child.pid, 0));
  return child;
}

ChildResult Wait(Child* child, int timeout_s) {
  ChildResult result;
  const int64_t deadline = NowMs() + int64_t{timeout_s} * 1000;
  bool exited = false;
  bool eof = child->out_fd < 0;
  char buf[4096];
  // Read output until EOF and the child has exited (a grandchild holding the
  // pipe open does not keep us waiting once the child is gone).
  while (!(exited && eof)) {
    pollfd fds[2] = {{child->pidfd, POLLIN, 0}, {eof ? -1 : child->out_fd, POLLIN, 0}};
    int n = poll(fds, 2, RemainingMs(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      result.timed_out = true;
      // A hang is worth its stacks: every thread's backtrace, when gdb is
      // installed, before the kill.
      if (access("/usr/bin/gdb", X_OK) == 0) {
        std::string cmd = "timeout -k 5 60 /usr/bin/gdb -p " + std::to_string(child->pid) +
                          " -batch -nx -ex 'thread apply all bt' 2>&1";
        if (FILE* f = popen(cmd.c_str(), "r")) {
          result.output += "\n--- timed out; gdb backtraces ---\n";
          size_t got;
          while ((got = fread(buf, 1, sizeof(buf), f)) > 0) result.output.append(buf, got);
          pclose(f);
        }
      }
      kill(child->pid, SIGKILL);
      break;
    }
    if (fds[1].revents != 0) {
      ssize_t r = read(child->out_fd, buf, sizeof(buf));
      if (r > 0) {
        result.output.append(buf, static_cast<size_t>(r));
      } else if (r == 0 || errno != EINTR) {
        eof = true;
      }
    }
    if (fds[0].revents != 0) {
      exited = true;
      // Drain what is already buffered, then stop.
      int flags = fcntl(child->out_fd, F_GETFL);
      fcntl(child->out_fd, F_SETFL, flags | O_NONBLOCK);
      ssize_t r;
      while (!eof && (r = read(child->out_fd, buf, sizeof(buf))) > 0) {
        result.output.append(buf, static_cast<size_t>(r));
      }
      eof = true;
    }
  }
  int status = 0;
  while (waitpid(child->pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  close(child->out_fd);
  close(child->pidfd);
  child->out_fd = child->pidfd = -1;
  return result;
}

ChildResult RunChild(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                     int timeout_s) {
  Child child = Spawn(argv, env);
  return Wait(&child, timeout_s);
}

absl::StatusOr<reader::Trace> RunForOneTrace(const TempDir& dir,
                                             const std::vector<std::string>& argv,
                                             const std::vector<std::string>& env) {
  const ChildResult r = RunChild(argv, env);
  if (r.timed_out || r.exit_code != 0) {
    return absl::InternalError(absl::StrCat(r.timed_out ? "timed out" : "exit code ",
                                            r.timed_out ? "" : absl::StrCat(r.exit_code), ": ",
                                            r.output));
  }
  const std::vector<std::string> files = dir.Files(".trace");
  if (files.size() != 1) {
    return absl::InternalError(absl::StrCat(files.size(), " traces, want 1: ", r.output));
  }
  return reader::ReadTraceFile(files[0]);
}

bool ReadLine(int fd, std::string* line, int timeout_s) {
  const int64_t deadline = NowMs() + int64_t{timeout_s} * 1000;
  line->clear();
  for (;;) {
    pollfd p = {fd, POLLIN, 0};
    int n = poll(&p, 1, RemainingMs(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    char c;
    ssize_t r = read(fd, &c, 1);  // byte-wise: the rest stays in the pipe
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    if (c == '\n') return true;
    line->push_back(c);
  }
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

bool WaitForGrowth(const std::string& path, int64_t size, int timeout_s, int drain_fd) {
  const int64_t deadline = NowMs() + int64_t{timeout_s} * 1000;
  int ifd = inotify_init1(IN_CLOEXEC);
  if (ifd < 0) return false;
  bool grown = false;
  if (inotify_add_watch(ifd, path.c_str(), IN_MODIFY) >= 0) {
    // Checked after the watch is in place, so no write can slip between.
    while (!(grown = FileSize(path) > size)) {
      pollfd p[2] = {{ifd, POLLIN, 0}, {drain_fd, POLLIN, 0}};
      int n = poll(p, 2, RemainingMs(deadline));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      char bytes[4096];
      if (p[0].revents != 0) (void)!read(ifd, bytes, sizeof(bytes));
      if (p[1].revents & POLLIN) {
        (void)!read(drain_fd, bytes, sizeof(bytes));
      } else if (p[1].revents != 0) {
        drain_fd = -1;  // EOF or error: stop polling it
      }
    }
  }
  close(ifd);
  return grown;
}

double Usable(size_t size, analysis::HostRounding r) {
  return static_cast<double>(analysis::UsableBytes(r, format::kKindMalloc, size));
}

SiteTotals FindSites(const analysis::Report& report, std::string_view function,
                     std::optional<analysis::SiteKind> kind) {
  SiteTotals totals;
  for (const analysis::Site& site : report.sites) {
    if (kind.has_value() && site.kind != *kind) continue;
    bool match = false;
    for (const analysis::Frame& frame : site.frames) {
      if (IsAllocatorFrame(frame)) continue;
      match = frame.function.find(function) != std::string::npos;
      break;
    }
    if (!match) continue;
    ++totals.sites;
    totals.samples += site.samples;
    totals.alloc_bytes += site.alloc_bytes;
    totals.alloc_count += site.alloc_count;
    totals.live_bytes_end += site.live_bytes_end;
    totals.live_count_end += site.live_count_end;
    totals.matches.push_back(&site);
  }
  return totals;
}

std::string DescribeSites(const analysis::Report& report, int max_sites) {
  std::string out;
  int n = 0;
  for (const analysis::Site& site : report.sites) {
    if (n++ == max_sites) break;
    absl::StrAppend(&out, "  site ", site.id, " ", analysis::SiteKindName(site.kind), " alloc ",
                    site.alloc_bytes, " B x", site.alloc_count, " live ", site.live_bytes_end,
                    " B x", site.live_count_end, ":");
    int f = 0;
    for (const analysis::Frame& frame : site.frames) {
      if (f++ == 4) break;
      absl::StrAppend(&out, " ", frame.function);
    }
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "  (", report.sites.size(), " sites, ", report.processes.size(),
                  " processes)\n");
  return out;
}

bool ClassifierTested(const analysis::Site& site) {
  const analysis::Growth& g = site.growth;
  return g.cls != analysis::GrowthClass::kInsufficient &&
         g.reason != "never above the window growth threshold" &&
         (g.window_samples < 0 || g.window_samples >= analysis::GrowthOptions{}.min_samples);
}

}  // namespace memstep::e2e

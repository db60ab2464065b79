// Helpers for the end-to-end tests: a fresh temporary directory, spawning a
// planted program under libmemstep.so with a watchdog, and finding a planted
// site in an analysis Report by function name.
//
// Contract: nothing here sleeps. Children are waited for with a pidfd and
// poll(2) against a deadline; a child that outlives its deadline is SIGKILLed
// and reported as timed_out, so a hang fails the test instead of hanging
// ctest. Paths of the built artifacts come from compile definitions set in
// CMakeLists.txt.

#ifndef MEMSTEP_TESTS_E2E_E2E_UTIL_H_
#define MEMSTEP_TESTS_E2E_E2E_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "src/analysis/analysis.h"
#include "src/analysis/replay.h"
#include "src/reader/reader.h"

namespace memstep::e2e {

// Built artifacts.
std::string PreloadLibrary();  // <build>/lib/libmemstep.so
std::string PlantedProgram();  // <build>/bin/e2e_planted
std::string PlantedDso();      // <build>/lib/libplanted_dso.so
std::string MemstepCli();      // <build>/bin/memstep ("" when not built)
std::string ExampleProgram();  // <build>/bin/memstep_example_train

// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Regular files directly in the directory whose name ends with `suffix`.
  std::vector<std::string> Files(std::string_view suffix = ".trace") const;

 private:
  std::string path_;
};

struct ChildResult {
  bool timed_out = false;
  int exit_code = -1;   // when the child exited
  int term_signal = 0;  // when a signal ended it
  std::string output;   // stdout and stderr, interleaved
};

// Environment for a traced child: LD_PRELOAD=<libmemstep.so>, MEMSTEP_DIR=dir,
// MEMSTEP_SEED=1 (no test draws its samples from the clock) and
// MEMSTEP_SAMPLE_INTERVAL=interval when interval != 0.
std::vector<std::string> TracedEnv(const std::string& dir, uint64_t interval);
// Appends `lib` to LD_PRELOAD in `env` (after libmemstep.so: with an
// allocator such as jemalloc, it becomes the real allocator memstep forwards
// to). Nothing when `lib` is empty.
void PreloadAfter(std::vector<std::string>* env, const std::string& lib);

// A running child whose stdout+stderr come through `out_fd`.
struct Child {
  pid_t pid = -1;
  int pidfd = -1;
  int out_fd = -1;
};

// Starts argv[0] (a path) with the current environment plus `env`
// ("NAME=value", overriding).
Child Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env);

// Collects the child's output and waits for it; SIGKILLs it after timeout_s.
ChildResult Wait(Child* child, int timeout_s = 60);

// Spawn + Wait.
ChildResult RunChild(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                     int timeout_s = 60);

// Reads one '\n'-terminated line from fd into *line, waiting at most
// timeout_s; false at EOF or timeout.
// RunChild, then the one trace it left in `dir`, read: an error status when
// the child timed out or exited non-zero (with its output) or left no trace
// or several.
absl::StatusOr<reader::Trace> RunForOneTrace(const TempDir& dir,
                                             const std::vector<std::string>& argv,
                                             const std::vector<std::string>& env);

bool ReadLine(int fd, std::string* line, int timeout_s);

// Blocks until `path` (an existing file) grows beyond `size` bytes, using
// inotify; false after timeout_s. Meanwhile reads and discards what arrives on
// drain_fd (when >= 0), so a child writing progress there never blocks.
bool WaitForGrowth(const std::string& path, int64_t size, int timeout_s, int drain_fd = -1);
int64_t FileSize(const std::string& path);

// Sum over every site of `kind` (nullopt = any) allocated directly by `function`:
// its innermost frame outside the allocator (operator new, libc, libstdc++,
// libmemstep) has a function name containing `function`. Allocations made
// by callees of `function` (say, a std::vector growing) do not count.
struct SiteTotals {
  int sites = 0;
  uint64_t samples = 0;
  double alloc_bytes = 0;
  double alloc_count = 0;
  double live_bytes_end = 0;
  double live_count_end = 0;
  std::vector<const analysis::Site*> matches;
};
SiteTotals FindSites(const analysis::Report& report, std::string_view function,
                     std::optional<analysis::SiteKind> kind = std::nullopt);

// What a sampled block of `size` requested bytes counts for in a site's
// bytes: the usable size the allocator gives the request
// (analysis::UsableBytes, glibc unless told; UsableBytesTest checks it
// against glibc and jemalloc themselves).
double Usable(size_t size, analysis::HostRounding r = analysis::HostRounding::kGlibc);

// A short description of the report's top sites, for failure messages.
std::string DescribeSites(const analysis::Report& report, int max_sites = 12);

// Whether the growth classifier could have called `site` LEAK: enough steps
// after warm-up, long-lived bytes that reached the growth bound, and the
// window samples a LEAK needs (docs/analysis.md "Classes"). Only such a site
// can be a false LEAK (tests/coverage_bound.h, MaxFalseLeaks).
bool ClassifierTested(const analysis::Site& site);

}  // namespace memstep::e2e

#endif  // MEMSTEP_TESTS_E2E_E2E_UTIL_H_

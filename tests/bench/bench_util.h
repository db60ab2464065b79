// Shared bits of the memstep benchmark programs: a monotonic clock, an
// optimisation barrier, argument parsing, and the one-line result format the
// driver (run_all.sh) parses:
//   RESULT name=<bench> key=value key=value ...
// Benchmarks measure in-process with clock_gettime; they are not tests and
// assert nothing.

#ifndef MEMSTEP_TESTS_BENCH_BENCH_UTIL_H_
#define MEMSTEP_TESTS_BENCH_BENCH_UTIL_H_

#include <time.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace memstep::bench {

inline double NowSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Keeps the compiler from eliding a malloc/free pair.
inline void Escape(void* p) { asm volatile("" : : "g"(p) : "memory"); }

// Returns the value of `--name V` in argv, or `fallback`.
inline int64_t FlagInt(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (strcmp(argv[i], name) == 0) return strtoll(argv[i + 1], nullptr, 10);
  }
  return fallback;
}

}  // namespace memstep::bench

#endif  // MEMSTEP_TESTS_BENCH_BENCH_UTIL_H_

// malloc_free_bench: ns per malloc/free pair of 32 bytes, one thread.
//   malloc_free_bench [--pairs N (default 20,000,000)] [--rounds R (default 5)]
// The pairs are split into R rounds and the fastest round is reported, which
// filters out interference from other processes on a shared machine. The
// driver runs it bare and under memstep and subtracts: the difference is the
// cost memstep adds to an unsampled (or rarely sampled) pair.

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "tests/bench/bench_util.h"

int main(int argc, char** argv) {
  using namespace memstep::bench;  // NOLINT
  const int64_t pairs = FlagInt(argc, argv, "--pairs", 20000000);
  // Warm the thread cache and the profiler's per-thread state.
  for (int i = 0; i < 100000; ++i) {
    void* p = malloc(32);
    Escape(p);
    free(p);
  }
  const int64_t rounds = std::max<int64_t>(1, FlagInt(argc, argv, "--rounds", 5));
  const int64_t per_round = std::max<int64_t>(1, pairs / rounds);
  double total = 0, best = 1e300;
  for (int64_t r = 0; r < rounds; ++r) {
    const double start = NowSeconds();
    for (int64_t i = 0; i < per_round; ++i) {
      void* p = malloc(32);
      Escape(p);
      free(p);
    }
    const double seconds = NowSeconds() - start;
    total += seconds;
    best = std::min(best, seconds * 1e9 / static_cast<double>(per_round));
  }
  printf("RESULT name=malloc_free pairs=%lld seconds=%.4f ns_per_pair=%.2f mean_ns=%.2f\n",
         static_cast<long long>(per_round * rounds), total, best,
         total * 1e9 / static_cast<double>(per_round * rounds));
  return 0;
}

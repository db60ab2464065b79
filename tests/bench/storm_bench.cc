// storm_bench: the extreme allocation-heavy multi-threaded workload. N threads
// each run tight bursts of small malloc/free (16..256 bytes, mixed), holding
// each block in a 32-entry ring for a while so frees are not just LIFO.
//   storm_bench [--threads N (default nproc)] [--allocs-per-thread M]
//               [--rounds R (default 3)]
// Prints the total allocation rate (allocations per second, all threads),
// measured from the first thread starting (all are ready) to the last one
// finishing;
// M is split into R rounds (fresh threads each) and the best round counts.

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "tests/bench/bench_util.h"

namespace {

// Each thread times itself (start after the barrier, end after its last
// free): the main thread may be scheduled late on a small machine.
struct Span {
  double start = 0, end = 0;
};

void Storm(int64_t allocs, uint64_t seed, pthread_barrier_t* barrier, Span* span) {
  void* ring[32] = {};
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  pthread_barrier_wait(barrier);
  span->start = memstep::bench::NowSeconds();
  for (int64_t i = 0; i < allocs; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    size_t size = 16 + (x & 0xF0);  // 16..256, multiples of 16
    void*& slot = ring[(x >> 8) & 31];
    free(slot);
    slot = malloc(size);
    memstep::bench::Escape(slot);
  }
  for (void* p : ring) free(p);
  span->end = memstep::bench::NowSeconds();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace memstep::bench;  // NOLINT
  const int threads = static_cast<int>(
      FlagInt(argc, argv, "--threads", static_cast<int64_t>(std::thread::hardware_concurrency())));
  const int64_t rounds = std::max<int64_t>(1, FlagInt(argc, argv, "--rounds", 3));
  const int64_t per_round =
      std::max<int64_t>(1, FlagInt(argc, argv, "--allocs-per-thread", 50000000) / rounds);
  const double allocs = static_cast<double>(per_round) * threads;
  double total_seconds = 0, best = 0;
  for (int64_t r = 0; r < rounds; ++r) {
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, nullptr, static_cast<unsigned>(threads + 1));
    std::vector<std::thread> pool;
    std::vector<Span> spans(threads);
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back(Storm, per_round, r * threads + t + 1, &barrier, &spans[t]);
    }
    pthread_barrier_wait(&barrier);
    for (auto& t : pool) t.join();
    pthread_barrier_destroy(&barrier);
    double start = spans[0].start, end = spans[0].end;
    for (const Span& s : spans) {
      start = std::min(start, s.start);
      end = std::max(end, s.end);
    }
    const double seconds = end - start;
    total_seconds += seconds;
    best = std::max(best, allocs / seconds);
  }
  printf("RESULT name=storm threads=%d allocs=%.0f seconds=%.4f allocs_per_s=%.0f mean_rate=%.0f\n",
         threads, allocs * rounds, total_seconds, best, allocs * rounds / total_seconds);
  return 0;
}

// memstep_hook_bench: ns per malloc/free pair, bare vs with libmemstep.so.
//
//   memstep_hook_bench                 measure this process as it is
//   memstep_hook_bench --compare LIB   run itself bare and with LD_PRELOAD=LIB
//                                      (same workload, same machine) and print
//                                      both and the difference
// Workloads: "pair32": 20M x (malloc(32); free) in one thread; "storm": T
// threads (default: hardware threads) doing malloc/free of mixed small sizes
// with 64 live blocks each. The full suite (ratios vs heaptrack etc.) lives in
// tests/bench.

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <thread>
#include <vector>

namespace {

uint64_t Now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Called through a volatile pointer so the compiler cannot elide the pair.
void* (*volatile g_malloc)(size_t) = malloc;
void (*volatile g_free)(void*) = free;

double Pair32(long n) {
  for (long i = 0; i < n / 10; ++i) g_free(g_malloc(32));  // warm up
  uint64_t t0 = Now();
  for (long i = 0; i < n; ++i) g_free(g_malloc(32));
  return static_cast<double>(Now() - t0) / static_cast<double>(n);
}

double Storm(int threads, long per_thread) {
  std::vector<std::thread> th;
  uint64_t t0 = Now();
  for (int t = 0; t < threads; ++t) {
    th.emplace_back([per_thread, t] {
      void* live[64] = {};
      uint32_t x = 2463534242u + static_cast<uint32_t>(t);
      for (long i = 0; i < per_thread; ++i) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        int slot = static_cast<int>(x & 63);
        g_free(live[slot]);
        live[slot] = g_malloc((x >> 8) % 256 + 8);
      }
      for (void* p : live) g_free(p);
    });
  }
  for (auto& t : th) t.join();
  double secs = static_cast<double>(Now() - t0) / 1e9;
  return static_cast<double>(threads) * static_cast<double>(per_thread) / secs / 1e6;  // M pairs/s
}

int Measure(long n, int threads) {
  double best_pair = 1e9, best_storm = 0;
  for (int rep = 0; rep < 3; ++rep) {
    double p = Pair32(n);
    if (p < best_pair) best_pair = p;
    double s = Storm(threads, n / threads);
    if (s > best_storm) best_storm = s;
  }
  printf("pair32_ns=%.2f storm_mpairs_per_s=%.1f threads=%d\n", best_pair, best_storm, threads);
  return 0;
}

bool RunChild(const char* self, const char* preload, long n, int threads, double* pair,
              double* storm) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    if (preload != nullptr) setenv("LD_PRELOAD", preload, 1);
    char nbuf[32], tbuf[32];
    snprintf(nbuf, sizeof(nbuf), "%ld", n);
    snprintf(tbuf, sizeof(tbuf), "%d", threads);
    execl(self, self, "--n", nbuf, "--threads", tbuf, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  char buf[512] = {};
  size_t len = 0;
  ssize_t r;
  while (len < sizeof(buf) - 1 && (r = read(fds[0], buf + len, sizeof(buf) - 1 - len)) > 0)
    len += r;
  close(fds[0]);
  int status;
  waitpid(pid, &status, 0);
  int th;
  return sscanf(buf, "pair32_ns=%lf storm_mpairs_per_s=%lf threads=%d", pair, storm, &th) == 3;
}

}  // namespace

int main(int argc, char** argv) {
  long n = 20000000;
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads < 1) threads = 1;
  const char* compare = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
      n = atol(argv[++i]);
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--compare") == 0 && i + 1 < argc)
      compare = argv[++i];
  }
  if (compare == nullptr) return Measure(n, threads);
  double bp, bs, pp, ps;
  if (!RunChild("/proc/self/exe", nullptr, n, threads, &bp, &bs) ||
      !RunChild("/proc/self/exe", compare, n, threads, &pp, &ps)) {
    fprintf(stderr, "child run failed\n");
    return 1;
  }
  printf("bare:      pair32 %.2f ns/pair, storm %.1f M pairs/s (%d threads)\n", bp, bs, threads);
  printf("preloaded: pair32 %.2f ns/pair, storm %.1f M pairs/s\n", pp, ps);
  printf("added: %.2f ns/pair; storm slowdown %.2fx\n", pp - bp, bs / ps);
  return 0;
}

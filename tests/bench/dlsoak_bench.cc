// dlsoak_bench: the dlopen/dlclose soak (issue 12, item 6) as a program whose
// result can be compared with and without memstep.
//
//   dlsoak_bench --lib PATH [--seconds S] [--min-rounds N]
//
// Runs rounds until S seconds have passed (at least N rounds, default 1). A
// round is one step (MEMSTEP_STEP_BEGIN/END, round number = step number) in
// which 16 threads each dlopen PATH, call its dlsoak_work() and dlclose it
// 200 times, while 8 threads each make 40,000 allocations of 16..4096 bytes
// through a 64-slot ring (frees not LIFO) from a fixed-seed generator,
// writing and reading back every block. Every thread is new in every round
// (thread create/exit too). A round's work does not depend on timing, so
// every round's checksum is the same number, with or without memstep.
//
// Prints one line:
//   RESULT name=dlsoak rounds=R checksum=C errors=E allocs=A dlopens=D
// checksum: the first round's; errors: rounds whose checksum differs from
// the first's, plus wrong values read back or returned; allocs: the malloc
// calls the allocating threads made (a floor for memstep's exact count);
// dlopens: dlopen calls. Exits 1 when errors > 0.

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>

#include "memstep/memstep.h"

namespace {

constexpr int kDlThreads = 16;
constexpr int kAllocThreads = 8;
constexpr int kDlPerThread = 200;
constexpr int kAllocsPerThread = 40000;
constexpr int kSlots = 64;

const char* g_lib = nullptr;
std::atomic<uint64_t> g_errors{0};

struct Work {
  int index = 0;
  uint64_t sum = 0;
};

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

using WorkFn = uint64_t (*)(uint64_t);

void* DlLoop(void* arg) {
  Work* w = static_cast<Work*>(arg);
  for (int i = 0; i < kDlPerThread; ++i) {
    void* h = dlopen(g_lib, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      fprintf(stderr, "dlsoak: dlopen %s: %s\n", g_lib, dlerror());
      exit(2);
    }
    WorkFn fn = reinterpret_cast<WorkFn>(dlsym(h, "dlsoak_work"));
    if (fn == nullptr) {
      fprintf(stderr, "dlsoak: dlsym dlsoak_work: %s\n", dlerror());
      exit(2);
    }
    const uint64_t n = static_cast<uint64_t>(w->index * kDlPerThread + i) % 997 + 1;
    const uint64_t got = fn(n);
    if (got != n * (n + 1) / 2) g_errors.fetch_add(1);
    w->sum += Mix(got);
    if (dlclose(h) != 0) g_errors.fetch_add(1);
  }
  return nullptr;
}

void* AllocLoop(void* arg) {
  Work* w = static_cast<Work*>(arg);
  uint64_t rng = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(w->index + 1);
  unsigned char* slot[kSlots] = {};
  size_t len[kSlots] = {};
  for (int i = 0; i < kAllocsPerThread; ++i) {
    rng = Mix(rng + static_cast<uint64_t>(i));
    const int k = static_cast<int>(rng % kSlots);
    if (slot[k] != nullptr) {
      // Read back what was written: a corrupted block is an error.
      const unsigned char want = static_cast<unsigned char>(len[k] * 31 + 7);
      if (slot[k][0] != want || slot[k][len[k] - 1] != want) g_errors.fetch_add(1);
      w->sum += Mix(len[k] ^ slot[k][len[k] / 2]);
      free(slot[k]);
    }
    len[k] = 16 + (rng >> 20) % 4081;
    slot[k] = static_cast<unsigned char*>(malloc(len[k]));
    if (slot[k] == nullptr) {
      fprintf(stderr, "dlsoak: malloc failed\n");
      exit(2);
    }
    memset(slot[k], static_cast<int>(static_cast<unsigned char>(len[k] * 31 + 7)), len[k]);
  }
  for (int k = 0; k < kSlots; ++k) free(slot[k]);
  return nullptr;
}

double Now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

uint64_t Round() {
  pthread_t th[kDlThreads + kAllocThreads];
  Work work[kDlThreads + kAllocThreads];
  for (int i = 0; i < kDlThreads + kAllocThreads; ++i) {
    work[i].index = i;
    if (pthread_create(&th[i], nullptr, i < kDlThreads ? DlLoop : AllocLoop, &work[i]) != 0) {
      fprintf(stderr, "dlsoak: pthread_create failed\n");
      exit(2);
    }
  }
  uint64_t sum = 0;
  for (int i = 0; i < kDlThreads + kAllocThreads; ++i) {
    pthread_join(th[i], nullptr);
    sum += work[i].sum;  // order-independent
  }
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  long min_rounds = 1;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--lib") == 0 && i + 1 < argc) {
      g_lib = argv[++i];
    } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = atof(argv[++i]);
    } else if (strcmp(argv[i], "--min-rounds") == 0 && i + 1 < argc) {
      min_rounds = atol(argv[++i]);
    } else {
      fprintf(stderr, "usage: dlsoak_bench --lib PATH [--seconds S] [--min-rounds N]\n");
      return 2;
    }
  }
  if (g_lib == nullptr || !(seconds >= 0) || min_rounds < 1) {
    fprintf(stderr, "usage: dlsoak_bench --lib PATH [--seconds S] [--min-rounds N]\n");
    return 2;
  }
  const double start = Now();
  uint64_t first = 0;
  long rounds = 0;
  uint64_t differing = 0;
  while (rounds < min_rounds || Now() - start < seconds) {
    MEMSTEP_STEP_BEGIN(rounds);
    const uint64_t sum = Round();
    MEMSTEP_STEP_END(rounds);
    if (rounds == 0) first = sum;
    differing += sum != first;
    ++rounds;
  }
  const uint64_t errors = g_errors.load() + differing;
  printf("RESULT name=dlsoak rounds=%ld checksum=%016llx errors=%llu allocs=%llu dlopens=%llu\n",
         rounds, static_cast<unsigned long long>(first), static_cast<unsigned long long>(errors),
         static_cast<unsigned long long>(rounds) * kAllocThreads * kAllocsPerThread,
         static_cast<unsigned long long>(rounds) * kDlThreads * kDlPerThread);
  return errors == 0 ? 0 : 1;
}

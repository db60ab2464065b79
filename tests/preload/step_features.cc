// Programs for the step-feature tests of libmemstep.so (issue 3), run under
// LD_PRELOAD by run_case.sh; each subcommand exits 0 on success.
//
//   epochs        two epochs of three steps
//   alert-growth  40 steps that each keep 2 MiB; waits (deadline 20 s) for the
//                 file $ALERT_FILE that MEMSTEP_ALERT_COMMAND writes
//   alert-peak    30 steps: step peaks of 16 MiB at steps 15 and 25, forward
//                 peaks of 8 MiB at steps 10-12 and 20-22 (4 MiB otherwise)
//   snapshot      5 steps whose forward stage holds 24 MiB in 12345-byte blocks
//                 (the planted site) among churn and a small resident site
//   windows       allocates without markers for 600 ms, then marks steps 100-102

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <vector>

#include "memstep/memstep.h"

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

namespace {

uint64_t NowMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

// Touches the block so the compiler cannot drop the allocation.
void* Alloc(size_t n) {
  void* p = malloc(n);
  CHECK(p != nullptr);
  memset(p, 1, n < 64 ? n : 64);
  return p;
}

__attribute__((noinline)) void Churn(int n) {
  for (int i = 0; i < n; ++i) free(Alloc(200));
}

int Epochs() {
  uint64_t step = 0;
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    MEMSTEP_EPOCH_BEGIN(epoch);
    for (int i = 0; i < 3; ++i, ++step) {
      MEMSTEP_STEP_BEGIN(step);
      Churn(100);
      MEMSTEP_STEP_END(step);
    }
  }
  puts("epochs ok");
  return 0;
}

__attribute__((noinline)) void Leak(std::vector<void*>* kept, size_t bytes) {
  for (size_t done = 0; done < bytes; done += 65536) kept->push_back(Alloc(65536));
}

int AlertGrowth() {
  std::vector<void*> kept;
  kept.reserve(4096);
  for (uint64_t step = 0; step < 40; ++step) {
    MEMSTEP_STEP_BEGIN(step);
    Leak(&kept, 2 << 20);
    Churn(100);
    MEMSTEP_STEP_END(step);
  }
  const char* file = getenv("ALERT_FILE");
  if (file != nullptr) {
    uint64_t deadline = NowMs() + 20000;
    while (access(file, R_OK) != 0) {
      CHECK(NowMs() < deadline);
      usleep(2000);
    }
  }
  for (void* p : kept) free(p);
  puts("alert-growth ok");
  return 0;
}

__attribute__((noinline)) void Temporary(size_t bytes) {
  std::vector<void*> tmp;
  for (size_t done = 0; done < bytes; done += 65536) tmp.push_back(Alloc(65536));
  for (void* p : tmp) free(p);
}

int AlertPeak() {
  for (uint64_t step = 0; step < 30; ++step) {
    MEMSTEP_STEP_BEGIN(step);
    MEMSTEP_STAGE_BEGIN("forward");
    bool big = (step >= 10 && step <= 12) || (step >= 20 && step <= 22);
    Temporary(big ? 8 << 20 : 4 << 20);
    MEMSTEP_STAGE_END("forward");
    if (step == 15 || step == 25) Temporary(16 << 20);
    MEMSTEP_STEP_END(step);
  }
  puts("alert-peak ok");
  return 0;
}

__attribute__((noinline)) void Planted(std::vector<void*>* held, size_t bytes) {
  for (size_t done = 0; done < bytes; done += 12345) held->push_back(Alloc(12345));
}

__attribute__((noinline)) void Resident(std::vector<void*>* held, size_t bytes) {
  for (size_t done = 0; done < bytes; done += 1000) held->push_back(Alloc(1000));
}

int Snapshot() {
  std::vector<void*> resident;
  Resident(&resident, 1 << 20);
  for (uint64_t step = 0; step < 5; ++step) {
    MEMSTEP_STEP_BEGIN(step);
    MEMSTEP_STAGE_BEGIN("forward");
    std::vector<void*> held;
    held.reserve(4096);
    for (int i = 0; i < 8; ++i) {
      Planted(&held, 3 << 20);
      Churn(2000);
    }
    MEMSTEP_STAGE_END("forward");
    MEMSTEP_STAGE_BEGIN("backward");
    for (void* p : held) free(p);
    Churn(2000);
    MEMSTEP_STAGE_END("backward");
    MEMSTEP_STEP_END(step);
  }
  for (void* p : resident) free(p);
  puts("snapshot ok");
  return 0;
}

int Windows() {
  uint64_t end = NowMs() + 600;
  while (NowMs() < end) Churn(1000);
  for (uint64_t step = 100; step < 103; ++step) {
    MEMSTEP_STEP_BEGIN(step);
    Churn(100);
    MEMSTEP_STEP_END(step);
  }
  puts("windows ok");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s epochs|alert-growth|alert-peak|snapshot|windows\n", argv[0]);
    return 2;
  }
  const char* cmd = argv[1];
  if (strcmp(cmd, "epochs") == 0) return Epochs();
  if (strcmp(cmd, "alert-growth") == 0) return AlertGrowth();
  if (strcmp(cmd, "alert-peak") == 0) return AlertPeak();
  if (strcmp(cmd, "snapshot") == 0) return Snapshot();
  if (strcmp(cmd, "windows") == 0) return Windows();
  fprintf(stderr, "unknown subcommand %s\n", cmd);
  return 2;
}

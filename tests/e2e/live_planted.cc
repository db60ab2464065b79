// live_planted: a training loop that steps slowly, for `memstep top` and
// `memstep run --metrics-file` (tests/e2e/live_test.py).
//
//   live_planted STEPS PERIOD_MS LEAK_BYTES STOP_FILE
// Runs STEPS steps (0: until STOP_FILE exists), one every PERIOD_MS
// milliseconds (the pace of a real job, not a synchronisation). Each step has
// two stages, "forward" (a 4 MiB temporary) and "backward" (1 MiB), and
// LivePlantedLeakSite() keeps LEAK_BYTES per step forever (in 16 KiB blocks).
// Stops early when STOP_FILE exists.

#include <sys/stat.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "memstep/memstep.h"

namespace {

std::vector<void*>* g_kept = new std::vector<void*>();

__attribute__((noinline)) void LivePlantedLeakSite(size_t bytes) {
  for (size_t done = 0; done < bytes; done += 16384) {
    void* p = malloc(16384);
    memset(p, 1, 16384);
    g_kept->push_back(p);
  }
}

// (The asm keeps GCC from removing the malloc/memset/free as dead.)
__attribute__((noinline)) void Temporary(size_t bytes) {
  void* p = malloc(bytes);
  memset(p, 2, bytes);
  asm volatile("" : : "r"(p) : "memory");
  free(p);
}

bool Exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s STEPS PERIOD_MS LEAK_BYTES STOP_FILE\n", argv[0]);
    return 2;
  }
  const long steps = atol(argv[1]);
  const long period_ms = atol(argv[2]);
  const size_t leak = static_cast<size_t>(atol(argv[3]));
  const char* stop = argv[4];
  for (long step = 0; steps == 0 || step < steps; ++step) {
    if (Exists(stop)) break;
    MEMSTEP_STEP_BEGIN(static_cast<uint64_t>(step));
    MEMSTEP_STAGE_BEGIN("forward");
    Temporary(4 << 20);
    MEMSTEP_STAGE_END("forward");
    MEMSTEP_STAGE_BEGIN("backward");
    Temporary(1 << 20);
    LivePlantedLeakSite(leak);
    MEMSTEP_STAGE_END("backward");
    MEMSTEP_STEP_END(static_cast<uint64_t>(step));
    timespec pause = {period_ms / 1000, (period_ms % 1000) * 1000000L};
    nanosleep(&pause, nullptr);
  }
  printf("live_planted: done\n");
  return 0;
}

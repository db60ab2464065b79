// libplanted_dso.so: loaded and unloaded in a loop by `e2e_planted dlopen`.
// PlantedDsoAlloc allocates kDsoSize bytes (>= S_always, so always recorded)
// and frees them, so its site must symbolize from a module that is no longer
// mapped when the trace is analysed.

#include <cstdlib>
#include <cstring>

#include "tests/e2e/planted_facts.h"

extern "C" __attribute__((noinline, visibility("default"))) void PlantedDsoAlloc() {
  void* p = malloc(memstep::e2e::facts::kDsoSize);
  asm volatile("" : : "g"(p) : "memory");
  memset(p, 1, 64);
  free(p);
}

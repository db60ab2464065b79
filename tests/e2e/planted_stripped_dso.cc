// libplanted_stripped_dso.so, of which tests/e2e/CMakeLists.txt makes a copy
// with every symbol table stripped (objcopy --strip-all):
// libplanted_stripped.so, loaded by `e2e_planted stripped PATH`.
// PlantedStrippedEntry is exported, so the copy's .dynsym still names it;
// PlantedStrippedHidden, which allocates, is hidden: in the copy no symbol
// covers it, and its frame must read "libplanted_stripped.so+0xOFFSET".

#include <cstdlib>
#include <cstring>

#include "tests/e2e/planted_facts.h"

namespace {
void* g_kept[memstep::e2e::facts::kStrippedCount];
}  // namespace

extern "C" __attribute__((noinline, noclone, visibility("hidden"))) void PlantedStrippedHidden(
    int i) {
  void* p = malloc(memstep::e2e::facts::kStrippedSize);
  asm volatile("" : : "g"(p) : "memory");
  memset(p, 2, 64);
  g_kept[i] = p;  // after the call: not a tail call
}

extern "C" __attribute__((noinline, visibility("default"))) void PlantedStrippedEntry() {
  for (int i = 0; i < memstep::e2e::facts::kStrippedCount; ++i) {
    PlantedStrippedHidden(i);
    asm volatile("" ::: "memory");
  }
}

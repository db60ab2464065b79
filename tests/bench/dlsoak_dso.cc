// The library dlsoak_bench loads and unloads: it allocates from its
// constructor, its function and its destructor, and its function's result
// is fixed (1 + 2 + ... + n), so a wrong call shows.
#include <stdint.h>
#include <stdlib.h>

namespace {
void* g_buf = nullptr;
__attribute__((constructor)) void Init() { g_buf = malloc(1000); }
__attribute__((destructor)) void Fini() { free(g_buf); }
}  // namespace

extern "C" __attribute__((visibility("default"))) uint64_t dlsoak_work(uint64_t n) {
  uint64_t* v = static_cast<uint64_t*>(malloc(n * sizeof(uint64_t)));
  if (v == nullptr) return 0;
  for (uint64_t i = 0; i < n; ++i) v[i] = i + 1;
  uint64_t sum = 0;
  for (uint64_t i = 0; i < n; ++i) sum += v[i];
  free(v);
  return sum;
}

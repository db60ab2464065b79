// A library the dlopen storm test loads and unloads in a loop: it allocates
// from its constructor, its function and its destructor.
#include <stdlib.h>
#include <string.h>

namespace {
void* g_buf = nullptr;
__attribute__((constructor)) void Init() { g_buf = malloc(1000); }
__attribute__((destructor)) void Fini() { free(g_buf); }
}  // namespace

extern "C" __attribute__((visibility("default"))) size_t memstep_test_dso_work(size_t n) {
  char* p = static_cast<char*>(malloc(n));
  memset(p, 1, n);
  size_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<size_t>(p[i]);
  free(p);
  return sum;
}

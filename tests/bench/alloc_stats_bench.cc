// What the step-end allocator statistics cost (docs/analysis.md "RSS growth
// explained"), without memstep: mallinfo2() against malloc_info() written
// into a fopencookie FILE whose write function only scans the bytes (as
// preload/steps/alloc_stats.cc parses them), and /proc/self/statm against
// /proc/self/smaps_rollup, on a heap with a given number of free chunks.
//
// usage: alloc_stats_bench [FREE_CHUNKS [REPEATS]]   (default 2000 1000)
// Prints one line per method: the median time of one call in microseconds.

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

size_t g_lines = 0;

ssize_t CountLines(void*, const char* buf, size_t size) {
  for (size_t i = 0; i < size; ++i) g_lines += buf[i] == '\n';
  return static_cast<ssize_t>(size);
}

void ReadFile(const char* path) {
  char buf[4096];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  while (read(fd, buf, sizeof(buf)) > 0) {
  }
  close(fd);
}

template <typename F>
double MedianUs(int repeats, F f) {
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::micro>(b - a).count());
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int chunks = argc > 1 ? atoi(argv[1]) : 2000;
  const int repeats = argc > 2 ? atoi(argv[2]) : 1000;
  // Free chunks pinned between kept ones: malloc big, keep a small one after
  // each, free the big ones (sizes vary so that they land in many bins).
  std::vector<void*> kept, big;
  for (int i = 0; i < chunks; ++i) {
    big.push_back(malloc(2048 + 64 * (i % 200)));
    kept.push_back(malloc(32));
  }
  for (void* p : big) free(p);
  static char iobuf[4096];
  cookie_io_functions_t io = {nullptr, CountLines, nullptr, nullptr};
  FILE* f = fopencookie(nullptr, "w", io);
  if (f == nullptr || setvbuf(f, iobuf, _IOFBF, sizeof(iobuf)) != 0) return 1;
  const double mi2 = MedianUs(repeats, [] {
    struct mallinfo2 m = mallinfo2();
    if (m.arena == 1) abort();
  });
  const double info = MedianUs(repeats, [f] {
    malloc_info(0, f);
    fflush(f);
  });
  const double statm = MedianUs(repeats, [] { ReadFile("/proc/self/statm"); });
  const double smaps = MedianUs(repeats, [] { ReadFile("/proc/self/smaps_rollup"); });
  struct mallinfo2 m = mallinfo2();
  printf("free chunks %zu, malloc_info lines per call %zu\n", m.ordblks,
         g_lines / static_cast<size_t>(repeats));
  printf("mallinfo2     %8.1f us\n", mi2);
  printf("malloc_info   %8.1f us\n", info);
  printf("statm         %8.1f us\n", statm);
  printf("smaps_rollup  %8.1f us\n", smaps);
  for (void* p : kept) free(p);
  return 0;
}

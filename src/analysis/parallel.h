// ParallelChunks: runs fn(lo, hi) over [0, n) in chunks of `chunk` indices
// on up to hardware_concurrency() threads (the calling thread is one), each
// thread taking the next chunk when it finishes one. For work that is
// independent per index and writes only its own outputs, so the result is
// the same, bit for bit, with any number of threads. A report's per-site
// statistics run here after the trace's decoding has ended, when the
// decoder's core is free (docs/architecture.md "Streaming reports").

#ifndef MEMSTEP_SRC_ANALYSIS_PARALLEL_H_
#define MEMSTEP_SRC_ANALYSIS_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <system_error>
#include <thread>
#include <vector>

namespace memstep::analysis {

template <class Fn>
void ParallelChunks(size_t n, size_t chunk, Fn fn) {
  chunk = std::max<size_t>(chunk, 1);
  const size_t chunks = (n + chunk - 1) / chunk;
  const size_t threads =
      std::min<size_t>({chunks, std::max(std::thread::hardware_concurrency(), 1u), 8});
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < chunks;)
      fn(k * chunk, std::min(n, (k + 1) * chunk));
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no thread to be had: the calling thread does the rest
    }
  }
  work();
  for (std::thread& h : helpers) h.join();
}

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_PARALLEL_H_

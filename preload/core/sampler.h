// Byte-based Poisson sampler (the tcmalloc/jemalloc scheme), one per thread.
//
// Contract: no allocation, no locks, no system calls; one instance per thread
// (not thread-safe by design). The fast path is in the hooks: a thread-local
// countdown `bytes_until_sample -= size + 1` and a branch on `< 0`. This class
// only draws the gaps, in the NOINLINE slow path.
//
// Math: gaps are exponential with mean T bytes, gap = ceil(-T * ln(u)) with u
// uniform in (0, 1] from 53 random bits. An allocation of s bytes then spans
// s + 1 points of a Poisson process of rate 1/T and is sampled with probability
// p = 1 - exp(-(s + 1) / T); its unbiased weight is s / p. T = 1 (or 0) means
// "record every allocation": the gap is always 0.

#ifndef MEMSTEP_PRELOAD_SAMPLER_H_
#define MEMSTEP_PRELOAD_SAMPLER_H_

#include <math.h>
#include <stdint.h>

namespace memstep::preload {

class Sampler {
 public:
  static uint64_t SplitMix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }

  void Seed(uint64_t seed) {
    state_ = SplitMix64(seed);
    if (state_ == 0) state_ = 0x2545F4914F6CDD1Dull;
  }

  // xorshift64*.
  uint64_t Next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545F4914F6CDD1Dull;
  }

  // Uniform in (0, 1], 53 bits.
  double NextUniform() {
    return static_cast<double>((Next() >> 11) + 1) * (1.0 / 9007199254740992.0);
  }

  // Next gap in bytes for mean interval `mean` (>= 0).
  int64_t NextGap(uint64_t mean) {
    if (mean <= 1) return 0;
    double g = ceil(-static_cast<double>(mean) * log(NextUniform()));
    if (g > 4.0e18) return INT64_MAX / 2;
    return static_cast<int64_t>(g);
  }

  uint64_t state() const { return state_; }

 private:
  uint64_t state_;  // zero until Seed(); no initializer: lives in static TLS
};

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_SAMPLER_H_

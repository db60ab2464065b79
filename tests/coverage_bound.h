// Acceptance bounds of statistical tests, derived from a stated error rate
// (docs/testing.md). Nothing here is tuned to a measured count.
//
// MinCovered: the acceptance bound of a coverage test (docs/analysis.md
// "Intervals of the estimates"): an interval with a stated coverage q covers
// the truth in Binomial(k, q) of k independent seeds; a test accepts down to
// the largest c with P(Binomial(k, q) < c) <= false_failure, so that a
// correct interval fails it with probability <= false_failure.
//
// MaxSuccesses: the upper bound, the smallest c with P(Binomial(n, p) > c)
// <= false_failure. A count that is exactly Binomial(n, p) (for instance the
// sampled blocks among n allocations of one size, each drawn independently
// with p = 1 - exp(-(s+1)/T)) lies in [MinCovered(n, p, r/2),
// MaxSuccesses(n, p, r/2)] but with probability <= r.
//
// BernsteinHalfWidth: for a sum of independent terms with total variance <= v,
// each within max_dev of its mean, P(|sum - mean| >= t) <= 2 exp(-t^2 / (2 (v
// + max_dev t / 3))) (Bernstein's inequality); the t at which that bound
// equals `rate`. No normal approximation: it holds for skewed, sparse
// Horvitz-Thompson sums too.

#ifndef MEMSTEP_TESTS_COVERAGE_BOUND_H_
#define MEMSTEP_TESTS_COVERAGE_BOUND_H_

#include <cmath>

namespace memstep::testing {

inline int MinCovered(int k, double coverage = 0.95, double false_failure = 0.001) {
  double cdf = 0;  // P(X <= c - 1)
  int c = 0;
  for (int x = 0; x <= k; ++x) {
    const double log_pmf = std::lgamma(k + 1.0) - std::lgamma(x + 1.0) - std::lgamma(k - x + 1.0) +
                           x * std::log(coverage) + (k - x) * std::log1p(-coverage);
    if (cdf + std::exp(log_pmf) > false_failure) break;
    cdf += std::exp(log_pmf);
    c = x + 1;
  }
  return c;
}

inline int MaxSuccesses(int n, double p, double false_failure) {
  return n - MinCovered(n, 1 - p, false_failure);
}

// The stated false-LEAK rate of the growth classifier (docs/testing.md
// "False LEAK sites"): a call site whose series does not grow is classified
// LEAK with probability at most kFalseLeakRate, per site the classifier
// tested (enough steps after warm-up, a long-lived series that reached the
// growth bound, and the 10 window samples a LEAK needs; the other sites are
// NO_TREND or INSUFFICIENT whatever their samples and cannot be LEAK). Sites are counted as
// independent draws: the sampler's exponential gaps are memoryless, so the samples of different
// sites are independent. k tested sites show more than MaxFalseLeaks(k) false LEAK sites with
// probability <= false_failure.
inline constexpr double kFalseLeakRate = 1e-3;

inline int MaxFalseLeaks(int tested, double false_failure = 1e-4) {
  return MaxSuccesses(tested, kFalseLeakRate, false_failure);
}

inline double BernsteinHalfWidth(double variance, double max_dev, double rate) {
  const double l = std::log(2 / rate);
  const double b = 2 * l * max_dev / 3;
  return (b + std::sqrt(b * b + 8 * l * variance)) / 2;
}

}  // namespace memstep::testing

#endif  // MEMSTEP_TESTS_COVERAGE_BOUND_H_

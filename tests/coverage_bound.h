// The acceptance bound of a coverage test (docs/analysis.md "Intervals of the
// estimates"): an interval with a stated coverage q covers the truth in
// Binomial(k, q) of k independent seeds; a test accepts down to the largest c
// with P(Binomial(k, q) < c) <= false_failure, so that a correct interval
// fails it with probability <= false_failure. Nothing here is tuned to a
// measured count.

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

}  // namespace memstep::testing

#endif  // MEMSTEP_TESTS_COVERAGE_BOUND_H_

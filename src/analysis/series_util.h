// Small helpers shared by the host and device analyses (analysis.cc,
// device_analysis.cc).

#ifndef MEMSTEP_SRC_ANALYSIS_SERIES_UTIL_H_
#define MEMSTEP_SRC_ANALYSIS_SERIES_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <vector>

namespace memstep::analysis::internal {

// Median of `v` (the mean of the middle two for an even count); 0 if empty.
inline uint64_t MedianOf(std::vector<uint64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Steps (and seconds) until `limit` at `rate` bytes/step from `used`; -1 n/a.
inline void Project(double rate, double used, double limit, double step_s, double* steps,
                    double* seconds) {
  *steps = *seconds = -1;
  if (rate <= 0 || limit <= 0) return;
  *steps = std::max(0.0, (limit - used) / rate);
  if (step_s > 0) *seconds = *steps * step_s;
}

}  // namespace memstep::analysis::internal

#endif  // MEMSTEP_SRC_ANALYSIS_SERIES_UTIL_H_

// Calibration of sampled leak rates to the exact heap growth.
//
// A call site's bytes/step comes from sampled allocations, so its precision
// is limited by how many of the leaked bytes were sampled: a 100 KiB/step
// leak over 200 steps at T = 512 KiB gives about 40 samples, a relative
// standard deviation near 16 %. The process's live heap, however, is counted
// exactly. When the LEAK sites of a process account for its exact growth
// within the sampling uncertainty (the common case: one leak, or a few),
// their rates are rescaled so that they sum to the exact slope; each keeps
// its sampled share. When they do not (growth spread over sites too small to
// be classified, or sites the exact heap series does not cover), nothing
// changes. A ratio estimator, as in survey sampling's calibration to known
// totals; docs/analysis.md states the rule.
//
// Contract: pure function of its inputs.

#ifndef MEMSTEP_SRC_ANALYSIS_CALIBRATE_H_
#define MEMSTEP_SRC_ANALYSIS_CALIBRATE_H_

#include <vector>

#include "src/analysis/growth.h"

namespace memstep::analysis {

struct CalibrationResult {
  bool applied = false;
  double sampled_sum = 0;  // sum of the LEAK sites' sampled slopes
  double tolerance = 0;    // |exact - sampled_sum| allowed (3 standard deviations)
  double factor = 1;       // exact slope / sampled_sum when applied
};

// `exact`: the process's exact heap live series, classified. `sites`: the
// growth of every heap (malloc-family) call site of that process; only LEAK
// ones take part. On success each LEAK site's slope and CI are rescaled and
// marked calibrated (Growth::calibrated, Growth::sampled_slope keeps the raw
// estimate); a single LEAK site takes the exact series' upper bound and the
// lower of the two lower bounds (growth elsewhere, under the test's power,
// can only make its share smaller).
CalibrationResult CalibrateLeakRates(const Growth& exact, const std::vector<Growth*>& sites);

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_CALIBRATE_H_

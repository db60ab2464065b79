#include "src/analysis/calibrate.h"

#include <cmath>

namespace memstep::analysis {

namespace {
constexpr double kZ95 = 1.96;  // 95 % half-widths
constexpr double kZ3 = 3.0;    // the tolerance
}  // namespace

CalibrationResult CalibrateLeakRates(const Growth& exact, const std::vector<Growth*>& sites) {
  CalibrationResult r;
  if (exact.cls != GrowthClass::kLeak || !(exact.slope > 0)) return r;
  std::vector<Growth*> leaks;
  double var = 0;  // of the sum, from each site's 95 % half-width
  for (Growth* g : sites) {
    if (g == nullptr || g->cls != GrowthClass::kLeak || !(g->slope > 0)) continue;
    leaks.push_back(g);
    r.sampled_sum += g->slope;
    // The Theil-Sen interval assumes independent residuals; a sampled leak is
    // a random walk (each step's sampled count is Poisson), so its slope is
    // less certain than that: its relative error is about 1/sqrt(samples)
    // for the window's samples still live. Use the wider of the two.
    const double ts_half = (g->slope_high - g->slope_low) / 2;
    const double samples = g->window_samples > 1 ? g->window_samples : 1;
    const double poisson_half = kZ95 * g->slope / std::sqrt(samples);
    const double half = ts_half > poisson_half ? ts_half : poisson_half;
    var += half * half;
  }
  if (leaks.empty()) return r;
  const double exact_half = (exact.slope_high - exact.slope_low) / 2;
  // Three standard deviations: a sampled sum this far from the exact slope is
  // not sampling noise (growth elsewhere), and inside it rescaling is safe.
  r.tolerance = kZ3 / kZ95 * std::sqrt(var + exact_half * exact_half);
  if (std::fabs(exact.slope - r.sampled_sum) > r.tolerance) return r;
  r.factor = exact.slope / r.sampled_sum;
  r.applied = true;
  for (Growth* g : leaks) {
    g->sampled_slope = g->slope;
    g->calibrated = true;
    if (leaks.size() == 1) {
      g->slope = exact.slope;
      g->slope_low = exact.slope_low;
      g->slope_high = exact.slope_high;
    } else {
      g->slope *= r.factor;
      g->slope_low *= r.factor;
      g->slope_high *= r.factor;
    }
  }
  return r;
}

}  // namespace memstep::analysis

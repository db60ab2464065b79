#include "src/analysis/calibrate.h"

#include <algorithm>
#include <cmath>

namespace memstep::analysis {

namespace {
constexpr double kZ95 = 1.96;  // 95 % half-widths
constexpr double kZ3 = 3.0;    // the tolerance
}  // namespace

CalibrationResult CalibrateLeakRates(const Growth& exact, const std::vector<Growth*>& sites) {
  CalibrationResult r;
  // An exact series with level shifts set aside (TrendTestExact) has a range
  // of rates, not one: its regular step and its net rate with the shifts (a
  // collection that frees garbage piled up since the last one): no total to
  // calibrate to.
  if (exact.cls != GrowthClass::kLeak || !(exact.slope > 0) || exact.level_shifts > 0) return r;
  // A LEAK site's (or line's) rate b is what the window's cohorts kept, their
  // inverse-variance Horvitz-Thompson mean (growth.cc): unbiased, and the
  // rate the report gives. Not the plain sum of the window's cohorts over the
  // window (used until the rate was that mean): with T changing inside the
  // window (a hunt, a screening that targeted a site late) that sum rests on
  // the sparse rows too and reads far off (635 B/step against 1,659 for a
  // caller line, whose calibration it refused).
  std::vector<Growth*> leaks;
  for (Growth* g : sites) {
    if (g == nullptr || g->cls != GrowthClass::kLeak || !(g->slope > 0)) continue;
    leaks.push_back(g);
    r.sampled_sum += g->slope;
  }
  if (leaks.empty() || !(r.sampled_sum > 0)) return r;
  // Is the exact slope consistent with the sites' sampled ones? Under that
  // hypothesis site i's true rate is b_i * G / S, so it expects n_i * G / S
  // samples and its estimate has a standard deviation of about
  // b_i * sqrt(G / S) / sqrt(n_i). The wider of that and the half-width of
  // the site's own interval counts.
  const double scale = std::sqrt(exact.slope / r.sampled_sum);
  double var = 0;  // of the sum, from each site's 95 % half-width
  for (const Growth* g : leaks) {
    const double own_half = (g->slope_high - g->slope_low) / 2;
    // What its samples are worth (small ones about one each; blocks recorded
    // with p = 1 without bound, so no Poisson term).
    const double samples = std::max({g->window_samples, g->window_effective_samples, 1.0});
    const double poisson_half = kZ95 * g->slope * scale / std::sqrt(samples);
    const double half = std::max(own_half, poisson_half);
    var += half * half;
  }
  const double exact_half = (exact.slope_high - exact.slope_low) / 2;
  // Three standard deviations: a sampled sum this far from the exact slope is
  // not sampling noise (growth elsewhere), and inside it rescaling is safe.
  r.tolerance = kZ3 / kZ95 * std::sqrt(var + exact_half * exact_half);
  if (std::fabs(exact.slope - r.sampled_sum) > r.tolerance) return r;
  r.factor = exact.slope / r.sampled_sum;
  r.applied = true;
  // The test above cannot tell "nothing else grows" from "something else
  // grows by less than the sites' noise": with a site known to 16 %, 20 % of
  // the growth may be in sites too small to classify (a record's object
  // beside the row of floats it holds: the row's line took the whole 872
  // B/step [835, 921] against its ~690). That growth can only make a site's
  // share smaller, so a calibrated interval keeps its own lower bound when
  // that is lower; the upper bound is the calibrated one (for several
  // sites, the higher of the two).
  for (Growth* g : leaks) {
    const double own_low = g->slope_low;
    const double own_high = g->slope_high;
    g->sampled_slope = g->slope;
    g->calibrated = true;
    if (leaks.size() == 1) {
      g->slope = exact.slope;
      g->slope_low = std::min(own_low, exact.slope_low);
      g->slope_high = exact.slope_high;
    } else {  // its share of the exact slope; the hull of its own interval and the scaled one
      g->slope *= r.factor;
      g->slope_low = std::min(own_low, own_low * r.factor);
      g->slope_high = std::max(own_high, own_high * r.factor);
    }
  }
  return r;
}

}  // namespace memstep::analysis

#include "src/analysis/growth.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "src/analysis/trend.h"

namespace memstep::analysis {
namespace {

std::vector<double> Slice(const std::vector<double>& y, size_t a, size_t b) {
  return std::vector<double>(y.begin() + static_cast<ptrdiff_t>(a),
                             y.begin() + static_cast<ptrdiff_t>(b));
}

double Sum(const std::vector<double>& v, size_t a, size_t b) {
  double s = 0;
  for (size_t i = a; i < b && i < v.size(); ++i) s += v[i];
  return s;
}

// At most `max_points` evenly spaced points of y[a, b).
std::vector<double> Thin(const std::vector<double>& y, size_t a, size_t b, size_t max_points) {
  const size_t n = b - a;
  if (n <= max_points) return Slice(y, a, b);
  std::vector<double> out(max_points);
  for (size_t i = 0; i < max_points; ++i) out[i] = y[a + i * (n - 1) / (max_points - 1)];
  return out;
}

std::string Kib(double bytes) { return absl::StrFormat("%.1f KiB", bytes / 1024); }

}  // namespace

const char* GrowthClassName(GrowthClass c) {
  switch (c) {
    case GrowthClass::kLeak: return "LEAK";
    case GrowthClass::kBoundedGrowth: return "BOUNDED_GROWTH";
    case GrowthClass::kWarmupOnly: return "WARMUP_ONLY";
    case GrowthClass::kNoTrend: return "NO_TREND";
    case GrowthClass::kInsufficient: break;
  }
  return "INSUFFICIENT";
}

Growth ClassifyGrowth(const GrowthInput& in, size_t warmup, const GrowthOptions& o) {
  Growth g;
  const std::vector<double>& y = in.y;
  const size_t n = y.size();
  g.warmup = std::min(warmup, n);
  for (double v : y) g.capacity = std::max(g.capacity, v);
  const bool cohorts = !in.end_bytes_by_cohort.empty();
  g.warmup_bytes = cohorts ? Sum(in.end_bytes_by_cohort, 0, g.warmup) : 0;
  g.retained_bytes = g.window_samples = g.window_bytes = cohorts ? 0 : -1;
  const size_t after = n - g.warmup;
  if (after < o.min_window || after < 4) {
    g.cls = GrowthClass::kInsufficient;
    g.reason = absl::StrFormat("%d steps after warm-up (W = %d), need %d", after, g.warmup,
                               o.min_window);
    return g;
  }
  const size_t N = std::min(o.max_window, after);
  const size_t ws = n - N;
  const size_t half = N / 2;
  g.window = N;
  g.window_begin = ws;
  TrendResult t = TrendTest(Slice(y, ws, n));
  g.p_value = t.p_increasing;
  g.z = t.z;
  g.slope = t.slope;
  g.slope_low = t.slope_low;
  g.slope_high = t.slope_high;
  TrendResult h1 = TrendTest(Slice(y, ws, ws + half));
  TrendResult h2 = TrendTest(Slice(y, ws + half, n));
  g.slope_first_half = h1.slope;
  g.slope_second_half = h2.slope;
  g.retained_bytes = cohorts ? Sum(in.end_bytes_by_cohort, ws, ws + half) : -1;
  g.window_samples = cohorts ? Sum(in.end_samples_by_cohort, ws, n) : -1;
  g.window_bytes = cohorts ? Sum(in.end_bytes_by_cohort, ws, n) : -1;

  if (t.p_increasing < o.p_value && t.slope > 0) {
    const bool rate_ok = t.slope >= o.min_rate;
    const bool growth_ok = t.slope * static_cast<double>(N) >= o.min_window_growth;
    const bool samples_ok = !cohorts || g.window_samples >= o.min_samples;
    if (!rate_ok || !growth_ok || !samples_ok) {
      g.cls = GrowthClass::kNoTrend;
      g.reason = !rate_ok     ? absl::StrFormat("trend of %s/step below the %s/step threshold",
                                                Kib(t.slope), Kib(o.min_rate))
                 : !growth_ok ? absl::StrFormat("window growth %s below %s",
                                                Kib(t.slope * static_cast<double>(N)),
                                                Kib(o.min_window_growth))
                              : absl::StrFormat("only %.0f live samples from the window, need %.0f",
                                                g.window_samples, o.min_samples);
      return g;
    }
    // Persistence, allowing for sampling noise: fails only when the second
    // half's upper bound is below `persistence` x the first half's lower one.
    const bool persistent = h2.slope_high >= o.persistence * h1.slope_low;
    const bool retained =
        !cohorts || g.retained_bytes >= o.retention * t.slope * static_cast<double>(half);
    if (persistent && retained) {
      g.cls = GrowthClass::kLeak;
      g.reason = absl::StrFormat("p = %.2g, %s/step over %d steps, persistent and retained",
                                 t.p_increasing, Kib(t.slope), N);
    } else {
      g.cls = GrowthClass::kBoundedGrowth;
      g.reason = !persistent
                     ? absl::StrFormat("slowing: second half %s/step vs first half %s/step",
                                       Kib(h2.slope), Kib(h1.slope))
                     : absl::StrFormat("not retained: %s of the first half's allocations live "
                                       "at the end",
                                       Kib(g.retained_bytes));
    }
    return g;
  }
  // No trend in the window. Did it grow after warm-up, before the window?
  if (ws > g.warmup) {
    TrendResult whole = TrendTest(Thin(y, g.warmup, n, 256));
    double mean = Sum(y, ws, n) / static_cast<double>(N);
    if (whole.p_increasing < o.p_value && mean - y[g.warmup] >= o.min_window_growth) {
      g.cls = GrowthClass::kBoundedGrowth;
      g.reason = "grew after warm-up, flat in the window";
      return g;
    }
  }
  if (g.warmup > 0) {
    double warm_growth;
    if (cohorts) {
      warm_growth = g.warmup_bytes;
    } else {
      auto [lo, hi] = std::minmax_element(y.begin(), y.begin() + static_cast<ptrdiff_t>(g.warmup) + 1);
      warm_growth = *hi - *lo;
    }
    if (warm_growth >= o.min_window_growth) {
      g.cls = GrowthClass::kWarmupOnly;
      g.reason = absl::StrFormat("%s from warm-up steps, flat since", Kib(warm_growth));
      return g;
    }
  }
  g.cls = GrowthClass::kNoTrend;
  g.reason = absl::StrFormat("no significant trend (p = %.2g)", t.p_increasing);
  return g;
}

}  // namespace memstep::analysis

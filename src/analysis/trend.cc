#include "src/analysis/trend.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace memstep::analysis {
namespace {

constexpr double kZ975 = 1.959963984540054;

double Median(std::vector<double>& v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + mid)) / 2;
  return m;
}

// Average ranks (1-based) with ties sharing their mean rank.
std::vector<double> Ranks(const std::vector<double>& x) {
  const size_t n = x.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> r(n);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && x[order[j + 1]] == x[order[i]]) ++j;
    const double rank = (static_cast<double>(i) + static_cast<double>(j)) / 2 + 1;
    for (size_t k = i; k <= j; ++k) r[order[k]] = rank;
    i = j + 1;
  }
  return r;
}

// Tie correction term sum t(t-1)(2t+5) over groups of equal values.
double TieTerm(const std::vector<double>& x) {
  std::vector<double> s = x;
  std::sort(s.begin(), s.end());
  double term = 0;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    while (j + 1 < s.size() && s[j + 1] == s[i]) ++j;
    const double t = static_cast<double>(j - i + 1);
    term += t * (t - 1) * (2 * t + 5);
    i = j + 1;
  }
  return term;
}

// Residual sum of squares of the least-squares line through (i, x_i),
// i in [a, b), from prefix sums of x and i*x and x^2.
struct Prefix {
  std::vector<double> sx, sxx, six;
  explicit Prefix(const std::vector<double>& x)
      : sx(x.size() + 1), sxx(x.size() + 1), six(x.size() + 1) {
    for (size_t i = 0; i < x.size(); ++i) {
      sx[i + 1] = sx[i] + x[i];
      sxx[i + 1] = sxx[i] + x[i] * x[i];
      six[i + 1] = six[i] + static_cast<double>(i) * x[i];
    }
  }
  // Returns the SSE and the slope of the fit over [a, b).
  double Sse(size_t a, size_t b, double* slope) const {
    const double n = static_cast<double>(b - a);
    const double si = (static_cast<double>(a + b - 1)) * n / 2;        // sum of i
    double sii = 0;                                                    // sum of i^2 over [a, b)
    auto sq = [](double m) { return (m - 1) * m * (2 * m - 1) / 6; };  // sum_{i<m} i^2
    sii = sq(static_cast<double>(b)) - sq(static_cast<double>(a));
    const double sy = sx[b] - sx[a], syy = sxx[b] - sxx[a], siy = six[b] - six[a];
    const double vii = sii - si * si / n;
    const double viy = siy - si * sy / n;
    const double vyy = syy - sy * sy / n;
    const double b1 = vii > 0 ? viy / vii : 0;
    if (slope != nullptr) *slope = b1;
    return std::max(0.0, vyy - b1 * viy);
  }
};

}  // namespace

double NormalUpperTail(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

double TheilSenSlope(const std::vector<double>& x) {
  const size_t n = x.size();
  if (n < 2) return 0;
  std::vector<double> slopes;
  slopes.reserve(n * (n - 1) / 2);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) slopes.push_back((x[j] - x[i]) / static_cast<double>(j - i));
  }
  return Median(slopes);
}

namespace {

// The pairwise slopes (x[j] - x[i]) / (j - i), i < j, sorted, and in *s the
// Mann-Kendall S (the number of rising pairs minus the falling ones).
std::vector<double> SortedPairwiseSlopes(const std::vector<double>& x, double* s) {
  const size_t n = x.size();
  std::vector<double> slopes;
  slopes.reserve(n * (n - 1) / 2);
  *s = 0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      const double d = x[j] - x[i];
      *s += (d > 0) - (d < 0);
      slopes.push_back(d / static_cast<double>(j - i));
    }
  }
  std::sort(slopes.begin(), slopes.end());
  return slopes;
}

// The weighted sums of the rank autocorrelations r_k of the detrended series
// (Hamed-Rao), and r_1.
struct RankLags {
  double sum = 0;     // over the significant lags: the test's correction
  double ci_sum = 0;  // over the initial run of positive lags: the interval's
  double r1 = 0;
};

RankLags RankAutocorrelation(const std::vector<double>& x, double slope) {
  const size_t n = x.size();
  const double nd = static_cast<double>(n);
  RankLags lags;
  std::vector<double> detrended(n);
  for (size_t i = 0; i < n; ++i) detrended[i] = x[i] - slope * static_cast<double>(i);
  std::vector<double> ranks = Ranks(detrended);
  const double mean = (nd + 1) / 2;
  double denom = 0;
  for (double v : ranks) denom += (v - mean) * (v - mean);
  // For the slope's interval: the same weighted sum over the initial run of
  // positive rank autocorrelations (lags 1, 2, ... until the first r_k <= 0,
  // Geyer's truncation), significant or not. The test's sum keeps only the
  // significant lags; that is right for a p-value but leaves out the many
  // small positive lags of a slowly mixing series (objects that live a few
  // steps), and an AR(1) series with phi = 0.3 then had its 95 % slope
  // interval cover the truth in ~90 % of runs (docs/analysis.md "Intervals").
  bool positive_run = true;
  if (denom > 0) {
    const double bound = kZ975 / std::sqrt(nd);
    for (size_t k = 1; k + 2 < n; ++k) {
      double num = 0;
      for (size_t i = 0; i + k < n; ++i) num += (ranks[i] - mean) * (ranks[i + k] - mean);
      const double rk = num / denom;
      if (k == 1) lags.r1 = rk;
      const double nk = static_cast<double>(n - k);
      positive_run = positive_run && rk > 0;
      if (positive_run) lags.ci_sum += nk * (nk - 1) * (nk - 2) * rk;
      if (std::fabs(rk) <= bound) continue;
      lags.sum += nk * (nk - 1) * (nk - 2) * rk;
    }
  }
  return lags;
}

// A slowly mixing series has a long tail of small positive lags that the
// empirical sum truncates early; an AR(1) fitted to the lag-1 rank
// autocorrelation (bias-corrected: E[r1] ~ phi - (1 + 4 phi) / n) carries
// that tail, phi^k, to every lag: its weighted sum.
double Ar1TailSum(double r1, size_t n) {
  const double nd = static_cast<double>(n);
  double ar_sum = 0;
  const double phi = std::min(0.95, std::max(0.0, (r1 * nd + 1) / (nd - 4)));
  double pk = 1;
  for (size_t k = 1; k + 2 < n && phi > 0; ++k) {
    pk *= phi;
    if (pk < 1e-9) break;
    const double nk = static_cast<double>(n - k);
    ar_sum += nk * (nk - 1) * (nk - 2) * pk;
  }
  return ar_sum;
}

// The 97.5 % quantile for the reported interval. Where autocorrelation
// inflates the variance, the inflation is itself estimated from few
// effectively independent points (n / factor): Student's t quantile with
// n / factor - 2 degrees of freedom (Cornish-Fisher expansion) instead of the
// normal one. Independent residuals (factor 1) keep the normal quantile:
// Var(S) is then known.
double ReportQuantile(double report_factor, double nd) {
  double q = kZ975;
  if (report_factor > 1) {
    const double dof = std::max(2.0, nd / report_factor - 2);
    const double z3 = kZ975 * kZ975 * kZ975, z5 = z3 * kZ975 * kZ975;
    q = kZ975 + (z3 + kZ975) / (4 * dof) + (5 * z5 + 16 * z3 + 3 * kZ975) / (96 * dof * dof);
  }
  return q;
}

}  // namespace

TrendResult TrendTest(const std::vector<double>& x) {
  TrendResult r;
  const size_t n = x.size();
  r.n = n;
  if (n < 3) {
    r.slope = r.slope_low = r.slope_high = r.ci_low = r.ci_high = TheilSenSlope(x);
    return r;
  }
  double s = 0;
  const std::vector<double> slopes = SortedPairwiseSlopes(x, &s);
  r.s = s;
  const size_t m = slopes.size();
  r.slope = m % 2 ? slopes[m / 2] : (slopes[m / 2 - 1] + slopes[m / 2]) / 2;

  // Var(S), corrected for ties and (Hamed-Rao) for the autocorrelation of the
  // ranks of the detrended series.
  const double nd = static_cast<double>(n);
  double var = (nd * (nd - 1) * (2 * nd + 5) - TieTerm(x)) / 18;
  const RankLags lags = RankAutocorrelation(x, r.slope);
  r.hamed_rao = std::max(1.0, 1 + 2 * lags.sum / (nd * (nd - 1) * (nd - 2)));
  r.var_s = var * r.hamed_rao;
  // The interval takes the larger factor of the run of positive lags and the
  // AR(1) tail.
  const double ar_sum = Ar1TailSum(lags.r1, n);
  const double ci_factor = std::max(r.hamed_rao, 1 + 2 * lags.ci_sum / (nd * (nd - 1) * (nd - 2)));
  const double report_factor = std::max(ci_factor, 1 + 2 * ar_sum / (nd * (nd - 1) * (nd - 2)));
  if (r.var_s > 0) {
    r.z = s > 0 ? (s - 1) / std::sqrt(r.var_s) : s < 0 ? (s + 1) / std::sqrt(r.var_s) : 0;
  }
  r.p_increasing = NormalUpperTail(r.z);

  // Gilbert's interval from the (corrected) variance of S.
  const double md = static_cast<double>(m);
  auto at_rank = [&](double rank) {  // 1-based, rounded and clamped
    double k = std::round(rank);
    k = std::min(std::max(k, 1.0), md);
    return slopes[static_cast<size_t>(k) - 1];
  };
  const double c = kZ975 * std::sqrt(var * ci_factor);
  r.slope_low = at_rank((md - c) / 2);
  r.slope_high = at_rank((md + c) / 2 + 1);
  // The reported interval: the same ranks with the quantile and factor for
  // reporting, never narrower than Gilbert's.
  const double cr = ReportQuantile(report_factor, nd) * std::sqrt(var * report_factor);
  r.ci_low = std::min(r.slope_low, at_rank((md - cr) / 2));
  r.ci_high = std::max(r.slope_high, at_rank((md + cr) / 2 + 1));
  return r;
}

size_t DetectWarmup(const std::vector<double>& x, double max_fraction, size_t min_after) {
  const size_t n = x.size();
  if (n < min_after + 3) return 0;
  Prefix p(x);
  const double sse_one = p.Sse(0, n, nullptr);
  if (sse_one <= 0) return 0;
  const size_t last =
      std::min(static_cast<size_t>(max_fraction * static_cast<double>(n)), n - min_after);
  double best = sse_one;
  size_t best_k = 0;
  for (size_t k = 2; k <= last; ++k) {
    double s1, s2;
    const double sse = p.Sse(0, k, &s1) + p.Sse(k, n, &s2);
    if (sse < best && s1 > s2 && s1 > 0) {
      best = sse;
      best_k = k;
    }
  }
  return best < 0.25 * sse_one ? best_k : 0;
}

}  // namespace memstep::analysis

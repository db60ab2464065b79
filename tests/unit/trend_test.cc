// The trend statistics' O(n log n) path against the all-pairs one it
// replaces for long series (trend.h): the reference below is the O(n^2) code
// the analysis used before (kept here verbatim, only renamed), and both of
// today's methods (internal::PairMethod) must reproduce it: S, Var(S), the
// Hamed-Rao factors, z and p exactly, the slopes exactly or within the
// rounding bound trend.h states. Random series with fixed seeds: ties (integer
// values drawn from a small range), missing rows (strictly increasing
// positions with gaps, as rss_explain.cc fits them), trends, AR(1) noise and
// steps; no test here depends on an error rate.

#include "src/analysis/trend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "gtest/gtest.h"

namespace memstep::analysis {
namespace reference {

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

}  // namespace

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

// rss_explain.cc's SlopeXY as it was.
double SlopeXY(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<double> s;
  for (size_t i = 0; i < x.size(); ++i) {
    for (size_t j = i + 1; j < x.size(); ++j) {
      if (x[j] != x[i]) s.push_back((y[j] - y[i]) / (x[j] - x[i]));
    }
  }
  if (s.empty()) return 0;
  const size_t mid = s.size() / 2;
  std::nth_element(s.begin(), s.begin() + mid, s.end());
  double m = s[mid];
  if (s.size() % 2 == 0) {
    m = (m + *std::max_element(s.begin(), s.begin() + mid)) / 2;
  }
  return m;
}

}  // namespace reference

namespace {

using internal::PairMethod;

// A random series of n points: trend + noise (AR(1) with phi) + steps,
// rounded to multiples of `quantum` (quantum 1 with a small range: many ties).
std::vector<double> Series(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  const int kind = static_cast<int>(seed % 5);
  const double slope = (u(rng) - 0.3) * 4096, phi = u(rng) * 0.9, sd = u(rng) * 65536;
  std::normal_distribution<double> noise(0, sd);
  std::vector<double> y(n);
  double e = 0, level = 1 << 20;
  for (size_t i = 0; i < n; ++i) {
    e = phi * e + noise(rng);
    if (u(rng) < 0.02) level += (u(rng) - 0.5) * 1e6;
    double v = level + slope * static_cast<double>(i) + e;
    switch (kind) {
      case 0:  // byte counts
        v = std::round(v);
        break;
      case 1:  // few distinct values: ties everywhere
        v = std::floor(u(rng) * 4) + (i > n / 2 ? 1 : 0);
        break;
      case 2:  // page multiples
        v = std::round(v / 4096) * 4096;
        break;
      case 3:  // sampled estimates: fractional
        v = v * 1.0000001 + u(rng);
        break;
      default:  // flat stretches
        v = (i / 7) % 3 == 0 ? 1e6 : std::round(v);
        break;
    }
    y[i] = v;
  }
  return y;
}

void ExpectSame(const TrendResult& want, const TrendResult& got, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(want.n, got.n);
  EXPECT_EQ(want.s, got.s);
  EXPECT_EQ(want.var_s, got.var_s);
  EXPECT_EQ(want.hamed_rao, got.hamed_rao);
  EXPECT_EQ(want.z, got.z);
  EXPECT_EQ(want.p_increasing, got.p_increasing);
  EXPECT_EQ(want.slope, got.slope);
  EXPECT_EQ(want.slope_low, got.slope_low);
  EXPECT_EQ(want.slope_high, got.slope_high);
  EXPECT_EQ(want.ci_low, got.ci_low);
  EXPECT_EQ(want.ci_high, got.ci_high);
}

TEST(TrendPairsTest, BothMethodsReproduceTheQuadraticReference) {
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    const size_t n = 3 + static_cast<size_t>((seed * 7919) % 400);
    const std::vector<double> y = Series(n, seed);
    const TrendResult want = reference::TrendTest(y);
    const std::string what = "seed " + std::to_string(seed) + " n " + std::to_string(n);
    ExpectSame(want, internal::TrendTestWith(y, PairMethod::kAllPairs), what + " all pairs");
    ExpectSame(want, internal::TrendTestWith(y, PairMethod::kCounting), what + " counting");
    ExpectSame(want, TrendTest(y), what + " auto");
    EXPECT_EQ(reference::TheilSenSlope(y), TheilSenSlope(y)) << what;
  }
}

TEST(TrendPairsTest, LongSeriesCountingEqualsReference) {
  for (uint64_t seed : {11, 12, 13, 14, 15}) {
    const std::vector<double> y = Series(2500, seed);
    ExpectSame(reference::TrendTest(y), TrendTest(y), "seed " + std::to_string(seed));
  }
}

// TrendTest's shortcut for a constant series (no pair listed or counted)
// gives what the quadratic reference computes, bit for bit.
TEST(TrendPairsTest, ConstantSeriesShortcutEqualsReference) {
  for (size_t n : {3, 4, 5, 17, 80, 81, 256, 3000}) {
    for (double v : {0.0, -0.0, 1.0, 4096.0, -3.5, 1e300}) {
      const std::vector<double> y(n, v);
      const std::string what = "n " + std::to_string(n) + " v " + std::to_string(v);
      ExpectSame(reference::TrendTest(y), TrendTest(y), what);
      ExpectSame(internal::TrendTestWith(y, PairMethod::kAllPairs), TrendTest(y), what);
    }
  }
}

TEST(TrendPairsTest, EdgeCases) {
  const std::vector<std::vector<double>> cases = {{},
                                                  {5},
                                                  {1, 2},
                                                  {2, 1, 2},
                                                  {7, 7, 7, 7, 7},
                                                  {0, 1, 0, 1, 0, 1, 0, 1},
                                                  {1, 3, 2, 5, 4, 6},
                                                  {-1e300, 0, 1e300, 0, -1e300},
                                                  {1e-300, 2e-300, 1e-300, 3e-300}};
  for (const std::vector<double>& y : cases) {
    ExpectSame(reference::TrendTest(y), internal::TrendTestWith(y, PairMethod::kCounting),
               "n " + std::to_string(y.size()));
  }
  std::vector<double> flat(1000, 3.0);
  ExpectSame(reference::TrendTest(flat), TrendTest(flat), "flat 1000");
  std::vector<double> two(1000);
  for (size_t i = 0; i < two.size(); ++i) two[i] = i % 2 ? 1.0 : 0.0;
  ExpectSame(reference::TrendTest(two), TrendTest(two), "alternating 1000");
}

// Missing rows: positions with gaps (rss_explain.cc fits the rows that have
// statistics at their row index).
TEST(TrendPairsTest, SlopeWithMissingRowsEqualsReference) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0, 1);
    const size_t n = 2 + static_cast<size_t>((seed * 104729) % 600);
    const std::vector<double> full = Series(n, seed + 1000);
    std::vector<double> pos, y;
    const double missing = u(rng) * 0.5;
    for (size_t i = 0; i < n; ++i) {
      if (u(rng) < missing) continue;
      pos.push_back(static_cast<double>(i));
      y.push_back(full[i]);
    }
    const double want = reference::SlopeXY(pos, y);
    EXPECT_EQ(want, internal::TheilSenSlopeWith(pos, y, PairMethod::kCounting)) << seed;
    EXPECT_EQ(want, internal::TheilSenSlopeWith(pos, y, PairMethod::kAllPairs)) << seed;
    EXPECT_EQ(want, TheilSenSlopeXY(pos, y)) << seed;
  }
  // Repeated positions are skipped pairs (the counting method lists them).
  const std::vector<double> pos = {0, 1, 1, 2, 3, 3, 4}, y = {1, 2, 9, 3, 5, 1, 6};
  EXPECT_EQ(reference::SlopeXY(pos, y), TheilSenSlopeXY(pos, y));
  EXPECT_EQ(0.0, TheilSenSlopeXY({2, 2, 2}, {1, 2, 3}));
}

}  // namespace
}  // namespace memstep::analysis

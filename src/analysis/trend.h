// Trend statistics for per-step series: the Hamed-Rao modified Mann-Kendall
// test, the Theil-Sen slope with its confidence interval, and a warm-up
// changepoint. Used by the growth classifier (growth.h).
//
// Worked example (x = 1, 3, 2, 5, 4, 6; one value per step):
//   Mann-Kendall S = sum over pairs i<j of sign(x_j - x_i): 15 pairs,
//     13 up and 2 down: S = 11. Var(S) = n(n-1)(2n+5)/18 = 6*5*17/18 = 28.33
//     (no ties). Hamed-Rao: detrend with the Sen slope, rank the residuals and
//     add the significant (|r_k| > 1.96/sqrt(n)) rank autocorrelations:
//     Var*(S) = Var(S) * (1 + 2/(n(n-1)(n-2)) sum (n-k)(n-k-1)(n-k-2) r_k),
//     the factor clamped to >= 1 (never more confident than plain MK; here
//     no lag is significant, factor 1). z = (S - 1)/sqrt(Var*) = 1.88;
//     one-sided p = 1 - Phi(z) = 0.030.
//   Theil-Sen slope = median of the 15 pairwise slopes (x_j - x_i)/(j - i)
//     = 1. 95 % interval (Gilbert 1987): C = 1.96 sqrt(Var*) = 10.43, ranks
//     (15 - C)/2 = 2 and (15 + C)/2 + 1 = 14 of the sorted slopes (rounded,
//     clamped to [1, 15]): [-1, 2]. For the interval only, Var(S) takes the
//     Hamed-Rao sum over the initial run of positive rank autocorrelations
//     (significant or not; never less than the test's factor): residuals
//     that persist a few steps would otherwise make it too narrow (here the
//     lag-1 autocorrelation is negative: no change).
//   Warm-up: 0,50,100,100,101,100,... -> the two-segment least-squares fit
//     splits at index 3, the first index of the flat segment.
//
// Cost: series of up to internal::kAllPairsMax points list every pair
// (O(n^2) time and memory: fewer instructions at that size). Longer ones
// count pairs instead: S from the inversions of the series (merge sort),
// each needed order statistic of the pairwise slopes (the median, the
// interval's ranks) by counting the pairs below a candidate slope in
// O(n log n) and bisecting on the value, and the rank autocorrelations of
// every lag by exact number-theoretic transforms: O(n log n) time, O(n)
// memory (tests/bench/trend_bench.cc; a 256-point window takes a third of
// the all-pairs instructions).
// Both give the same S, Var(S), p-value and ranks; the slopes are equal but
// for a rounding bound stated at internal::PairMethod (docs/analysis.md
// "Cost of the trend statistics").
//
// Contract: pure functions. Empty or one-point series give p = 1 and slope 0.

#ifndef MEMSTEP_SRC_ANALYSIS_TREND_H_
#define MEMSTEP_SRC_ANALYSIS_TREND_H_

#include <cstddef>
#include <vector>

namespace memstep::analysis {

struct TrendResult {
  size_t n = 0;
  double s = 0;          // Mann-Kendall S
  double var_s = 0;      // Var(S) with tie and Hamed-Rao corrections
  double hamed_rao = 1;  // variance correction factor n/n* (>= 1)
  double z = 0;
  double p_increasing = 1;  // one-sided p-value of "no trend" against "increasing"
  double slope = 0;         // Theil-Sen, units of x per index
  // 95 % confidence interval of the slope with the variance corrected over
  // the initial run of positive rank autocorrelations: what the growth
  // classification's persistence test compares (its behaviour is tuned on it).
  double slope_low = 0;
  double slope_high = 0;
  // The interval reported to the user: also carries an AR(1) tail fitted to
  // the lag-1 rank autocorrelation, with Student's t quantile for the few
  // effectively independent points of a slowly mixing series (equal to the
  // one above for independent residuals; docs/analysis.md "Intervals").
  double ci_low = 0;
  double ci_high = 0;
  // TrendTestExact only: the jumps it set aside as level shifts, and the sum
  // of their departures from the series' median step (bytes; a collection
  // that freed 54 KiB in a series rising 11 KiB a step: -65 KiB).
  size_t level_shifts = 0;
  double level_shift_sum = 0;
};

// Mann-Kendall with the Hamed-Rao variance correction, and Theil-Sen slope.
TrendResult TrendTest(const std::vector<double>& x);

// TrendTest for a series counted exactly (a process's live bytes: no
// sampling noise in it) that rises by regular steps but for a few isolated
// jumps: a garbage collection that frees what piled up since the last one,
// a buffer kept once. One such jump in a series that otherwise rises by
// nearly the same step every time ranks every residual before it above every
// one after it, and the Hamed-Rao and AR(1) corrections read that as noise
// persisting over the whole series: the interval reached 0 for a heap rising
// 11 KiB a step on which one collection freed 54 KiB. A jump here is a first
// difference d_i that departs from the median step m by more than both
// 8 robust standard deviations of the steps (1.4826 x their median absolute
// departure) and m itself (a smaller departure leaves every pairwise slope
// of a regular rise positive, so it cannot take the interval to 0). They are
// set aside only while they are few (at most max(2, (n - 1) / 16)), m > 0, and
// the sum of their sizes |d_i| is at most 0.4 of the growth between them (the
// sum of the other d_i): the falls of a cache emptied to its floor undo the
// rises before them, at least half the growth of any window that holds one
// (docs/analysis.md "Level shifts"). Then the series is tested as segments
// between the jumps (as the seasonal Kendall test does its seasons: S and
// Var(S) summed over them, the slope and its interval from the pairs within
// one segment, the residuals' autocorrelation over the whole series with the
// segments' median residuals aligned), and the interval (both of them) is
// widened to hold the window's net rate with the jumps,
// (x_last - x_first) / (n - 1): the rate if such events recur. Otherwise, or
// for n < 10 or n > 2048, TrendTest(x).
//
// With `piles`, a series that piles up a varying amount every step (n >= 10;
// its mean step above 0, its median step at least a third of it, no fall
// above the median step and all its falls under a tenth of its rises, the
// steps' lag-1 autocorrelation not below -1/4) is a random walk with drift:
// the levels' interval reads its wandering as persisting noise (it reached
// 0 for a heap piling 0-16 KiB a step). Its rate is then its mean step, with
// Student's t interval from the steps (their variance inflated for a
// positive lag-1 autocorrelation); the p-value stays the levels'. One-off
// rises (each over 3 times every smaller step) are set aside as level
// shifts, and, with `one_off_falls`, so are falls above the median step (a
// collection), at most max(2, (n - 1) / 16) in all and the falls summing to
// at most 0.4 of the steps left; the interval then holds the net rate
// (docs/analysis.md "Piles"). A sampled series, whose unsampled rows read
// 0, passes false.
TrendResult TrendTestExact(const std::vector<double>& x, bool piles = true,
                           bool one_off_falls = true);

// Theil-Sen slope only (median of pairwise slopes); 0 for n < 2.
double TheilSenSlope(const std::vector<double>& x);

// Theil-Sen slope of the points (pos_i, y_i), pos non-decreasing: the median
// of (y_j - y_i) / (pos_j - pos_i) over the pairs i < j with pos_j != pos_i;
// 0 when there is none.
double TheilSenSlopeXY(const std::vector<double>& pos, const std::vector<double>& y);

// One-sided upper tail of the standard normal: 1 - Phi(z).
double NormalUpperTail(double z);

// The first index after a warm-up phase of `x` (0 when none): the split of
// the best two-segment least-squares linear fit, taken only when it lies in
// the first `max_fraction` of the series, leaves at least `min_after` points
// after it, explains at least 75 % of the one-line residual sum of squares,
// and the first segment rises faster than the second.
size_t DetectWarmup(const std::vector<double>& x, double max_fraction = 0.25,
                    size_t min_after = 30);

namespace internal {

// Series longer than this count pairs instead of listing them.
inline constexpr size_t kAllPairsMax = 80;

// How the pairwise statistics are computed. kAllPairs lists every pair (the
// reference); kCounting counts them in O(n log n) (strictly increasing
// positions and finite values only; otherwise it lists them). kAuto: listing
// up to kAllPairsMax points, counting above. Counting gives the same S,
// Var(S), Hamed-Rao factors and p-value (integers and exact sums), and the
// same slopes up to rounding: a selected slope can differ only when it lies
// within about 2^-60 (max|y| + |slope| max pos) of a bisection point, by at
// most that much (tests/unit/trend_test.cc checks equality on random series).
enum class PairMethod { kAuto, kAllPairs, kCounting };

TrendResult TrendTestWith(const std::vector<double>& x, PairMethod method);
double TheilSenSlopeWith(const std::vector<double>& pos, const std::vector<double>& y,
                         PairMethod method);

}  // namespace internal

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_TREND_H_

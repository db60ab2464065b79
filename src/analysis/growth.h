// Growth classifier: is a per-step series (one call site's estimated live
// bytes, or a process's exact live bytes or RSS) leaking, filling a bounded
// cache, holding warm-up memory, or flat? Definitions follow
// shared/research/sampling-and-format.md section 6.10; docs/analysis.md states
// them with the defaults and the deviations.
//
// Worked example (T = 512 KiB, W = 20, 120 steps; a site leaking 100 KiB of
// small objects per step under 50 MiB/step of churn freed the next step):
//   window      last N = min(256, 120 - 20) = 100 steps (rows 20..119);
//               N >= 30, so the series is classifiable.
//   1 trend     Hamed-Rao Mann-Kendall on y[20..119]: z = 5.1, p = 2e-7 < 0.01.
//   2 effect    Theil-Sen b = 97 KiB/step (95 % CI 71..125 KiB) >= min_rate
//               (16 KiB/step); b*N = 9.5 MiB >= min_window_growth (1 MiB);
//               21 sampled allocations from rows 20..119 still live at the
//               end >= min_samples (10).
//   3 persist   b(rows 70..119) = 102 KiB, b(rows 20..69) = 93 KiB; the
//               second half's upper CI >= 0.5 x the first half's lower CI.
//   4 retain    allocations of rows 20..69 still live at the end: 5.0 MiB
//               >= 0.25 x b x N/2 = 1.2 MiB.
//   -> LEAK, 97 KiB/step [71, 125].
// A cache filling at 2 MiB/step until row 250 of 400 fails 3 (second half
// flat) -> BOUNDED_GROWTH with capacity max y. A series flat after W whose
// live bytes at the end were mostly allocated before W -> WARMUP_ONLY.
// Anything else (including a significant trend too small to matter) ->
// NO_TREND; fewer than 30 steps after W -> INSUFFICIENT.
//
// Contract: pure function of its inputs; O(n) in the series and O(N log N) in
// the window (N <= 256; trend.h).

#ifndef MEMSTEP_SRC_ANALYSIS_GROWTH_H_
#define MEMSTEP_SRC_ANALYSIS_GROWTH_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/analysis/step_series.h"

namespace memstep::analysis {

enum class GrowthClass : uint8_t {
  kInsufficient = 0,
  kNoTrend = 1,
  kWarmupOnly = 2,
  kBoundedGrowth = 3,
  kLeak = 4,
};

// "LEAK", "BOUNDED_GROWTH", "WARMUP_ONLY", "NO_TREND", "INSUFFICIENT".
const char* GrowthClassName(GrowthClass c);

struct GrowthOptions {
  size_t max_window = 256;             // N = min(max_window, steps after W)
  size_t min_window = 30;              // fewer steps after W: INSUFFICIENT
  double p_value = 0.01;               // one-sided trend test level
  double min_rate = 16 * 1024;         // bytes/step (research note: 64 KiB for big runs)
  double min_window_growth = 1 << 20;  // b*N bytes (research note: 8 MiB)
  double min_samples = 10;             // sampled allocations from window cohorts live at the end
                                       // (or samples worth as many: Growth)
  double persistence = 0.5;            // second-half slope vs first-half slope
  double retention = 0.25;             // first-half cohorts live at the end vs b*N/2
  // Call sites: the second half's persistence bound is widened by the
  // sampling uncertainty of what its cohorts kept (a half sampled sparsely
  // after a leak hunt is flat for want of samples). Set when the exact heap
  // itself is LEAK: a site's sparse half is then given the benefit of the
  // doubt, never while the exact heap stopped growing.
  bool widen_sparse_halves = false;
  // Exact series: a series that piles up a varying amount every step takes
  // its rate's interval from its steps (trend.h TrendTestExact). Off for
  // RSS, which rises by pages and by the allocator's arenas: a few large
  // steps carry its mean, and the levels' robust slope holds its rate.
  bool piles = true;
};

// The 95 % interval of a Horvitz-Thompson sum R of sampled weights (a site's
// live bytes at a moment, or the bytes its cohorts kept), from its sampling
// variance var = sum over the samples of (s/p)^2 (1 - p), and `interval`
// (T; 0 for exact counts), which adds one sample's worth of bytes (1.5 T) so
// that an object class with no sample at all is not read as certainly absent
// (with no sample the upper bound is 1.96 x 1.5 T, about the Poisson bound
// for zero events). A score interval: the variance is taken as a function of
// the true value theta, c theta + (1.5 T)^2 with c = var / R (the variance
// per estimated byte), and the interval is every theta with
// (R - theta)^2 <= 1.96^2 (c theta + (1.5 T)^2). It is asymmetric: a low
// estimate rests on few samples, whose plug-in variance is small too, and
// the symmetric R +- 1.96 sqrt(var) then missed the truth mostly from below
// (docs/analysis.md "Intervals of the estimates"). The low end is floored at 0.
struct HtInterval {
  double low = 0;
  double high = 0;
};
HtInterval HtSumInterval(double estimate, double var, double interval);

struct GrowthInput {
  std::vector<double> y;  // value at the end of each step (row)
  // Cohorts (call-site series only; leave empty for process-level series,
  // which then skip the detectability and retention checks): estimated bytes
  // and sampled allocations live at the end of the last step, by the row in
  // which they were allocated (before the first step: row 0).
  std::vector<double> end_bytes_by_cohort;
  std::vector<double> end_samples_by_cohort;
  // Horvitz-Thompson variance of end_bytes_by_cohort (sum of (s/p)^2 (1 - p)
  // over its samples); empty: estimated as bytes^2 / samples.
  std::vector<double> end_var_by_cohort;
  // The sampling interval T in force in each row (the largest, when it
  // changed within the row); empty: unknown. One more sample's worth of
  // bytes (T) is added to the uncertainty of a cohort rate, so that rows
  // sampled sparsely never read as "nothing retained".
  std::vector<double> interval_by_row;
  // The smallest sampling interval T among each cohort's samples live at the
  // end (0: none, or recorded with p = 1); empty: unknown (TargetRows).
  std::vector<double> end_interval_by_cohort;
  // The largest block recorded with p = 1 among each cohort's samples live
  // at the end (0: none); empty: none. A leak's rate over the window counts
  // its blocks, and a window may hold one more or one fewer of them than
  // the rate gives it (a 64 MiB block every eighth step: 6 or 7 in 55
  // steps): its interval allows one block more or less (RateOfCohorts).
  std::vector<double> end_block_by_cohort;
  // A sum of sites (a Python line): each site's own input. The cohorts'
  // rate is then the sum of each part's, each weighted by its own rows' T:
  // one set of weights for the sum would weigh one site's cohorts by rows
  // another site's samples chose (a line's small sites targeted by a hunt
  // from the row of one 64 MiB block of its big one read 4x its rate).
  std::vector<GrowthInput> parts;
};

// Sets in->end_*_by_cohort for `rows` rows from a site's cohort cells
// (LiveCohorts, step_series.h; null: none live).
void SetCohorts(const std::vector<CohortCell>* cells, size_t rows, GrowthInput* in);

// A leak hunt that screens (docs/analysis.md "Leak hunt") samples the
// allocations of the Python contexts it targets at its screening T
// (`screen_by_row`, the screen-interval COUNTER in force in each row, 0 when
// none), smaller than the T every other site is sampled at (the rows'
// interval_by_row). A site targeted in a row therefore has that row's T at
// the screening T. Which rows: from the row after the first row whose cohort
// has a sample drawn at exactly the screening T (no untargeted sample is:
// each is thinned to its row's T) to the hunt's end. Sets in->interval_by_row
// accordingly (after SetCohorts). That first row keeps its T: chosen for the
// sample in it, at the screening T's weight it would lean the rate up.
void TargetRows(const std::vector<double>& screen_by_row, GrowthInput* in);

// The per-step rate of what the cohorts of rows [from, to) kept to the end,
// unbiased (inverse-variance mean over the cohorts; docs/analysis.md).
double KeptRate(const GrowthInput& in, size_t from, size_t to);

struct Growth {
  GrowthClass cls = GrowthClass::kInsufficient;
  size_t warmup = 0;        // W: rows before the analysis
  size_t window_begin = 0;  // first row of the window
  size_t window = 0;        // N
  double p_value = 1;
  double z = 0;
  double slope = 0;      // Theil-Sen bytes/step over the window
  double slope_low = 0;  // 95 % CI
  double slope_high = 0;
  double slope_first_half = 0;   // call sites: the Horvitz-Thompson rate of
  double slope_second_half = 0;  // each half's cohorts live at the end
  double retained_bytes = 0;     // first-half cohorts live at the end (-1: not checked)
  double window_samples = 0;     // window cohorts' samples live at the end (-1: not checked)
  double window_bytes = 0;       // their estimated bytes (-1: not checked); / window = the
                                 // unbiased (Horvitz-Thompson) rate of what stayed
  // What those samples are worth: window_bytes^2 over their Horvitz-Thompson
  // variance, about window_samples for small blocks, without bound (1e12)
  // for blocks recorded with p = 1; and how many of the window's rows they
  // were born in. A site passes the sample bound with min_samples samples
  // (or samples worth that many), born in at least 3 rows.
  double window_effective_samples = 0;
  size_t window_sample_rows = 0;
  double warmup_bytes = 0;  // bytes live at the end allocated before W (site series)
  double capacity = 0;      // max y over the run (BOUNDED_GROWTH: estimated capacity)
  std::string reason;       // one line: which test decided the class
  // The window's trend test and effect size passed (the class is then LEAK or
  // BOUNDED_GROWTH, or NO_TREND only because the rate's interval reaches 0:
  // strongly autocorrelated residuals, as in a heap that garbage collection
  // saws down every few steps).
  bool rises = false;
  // Exact series: the jumps the window's trend test set aside as level
  // shifts, and the sum of their departures from the median step
  // (TrendTestExact, trend.h); 0 when none.
  size_t level_shifts = 0;
  double level_shift_bytes = 0;
  // Set by CalibrateLeakRates (calibrate.h): slope and CI were rescaled to the
  // exact heap growth; sampled_slope is the raw sampled estimate.
  bool calibrated = false;
  double sampled_slope = 0;
  // Set by ClassifyReplacedGrowth: the class and rate rest on the site's
  // whole live series, not on what its cohorts kept (a buffer that grows by
  // being reallocated or replaced by a larger copy).
  bool replaced = false;
};

// Classifies `in` with warm-up `warmup` rows (already resolved by the caller:
// configured or detected, whichever is later).
Growth ClassifyGrowth(const GrowthInput& in, size_t warmup, const GrowthOptions& options = {});

// A call site's series with its cohorts, or an exact series (no cohorts):
// NO_TREND at once when neither its largest value nor what its cohorts kept
// per step over the steps after warm-up, times those steps, reaches
// options.min_window_growth (a leak sampled densely for a few steps by a hunt
// and sparsely after it has a low series but a high kept rate);
// ClassifyGrowth otherwise.
Growth ClassifySiteGrowth(const GrowthInput& in, size_t warmup, const GrowthOptions& options);

// A call site whose live bytes grow although it keeps nothing old: one
// buffer reallocated larger, or replaced by a larger copy, every step or
// every few (bytearray.extend, a growing std::vector, a history kept as
// `h = torch.cat([h, x])`). What is live at its step ends was born in the
// last step or the last few, so its long-lived series and its cohorts show
// nothing kept, and `site` (its class from them) is not LEAK. What its
// samples hold at each row end rises: `held`, the usable bytes of the
// site's live samples themselves, unweighted (HeapReplay::Accumulator::
// live_held), which is the buffer's size in each row it was sampled in,
// whatever T it was drawn at (a hunt's targets are drawn at its screening
// T, not the row's; their Horvitz-Thompson weights read at the row's T
// made a growing string sampled at every step read 0).
// Returns `site` as LEAK with `replaced` set, its rate and interval the
// Theil-Sen slope of `held` (in whole bytes)
// over the window and its 95 % interval from TrendTestExact (the AR(1) tail: the row-to-row
// sampling noise is in the residuals; and the few jumps of rows sampled while the buffer was
// smaller than T set aside), when over the window of `site`:
//   - at least 3/4 of the rows end with live bytes at the site (a buffer
//     live at every step end is sampled at most of them; the noise of a
//     site sampled now and then is not a trend);
//   - the trend test at p < 1e-4 (every site's whole series is tested, and
//     a T that fell inside the window fakes a rise in ranks), and the
//     effect-size bounds of `o`; a series on its line but for a few rows
//     (half its residuals within 1 % of the rise) is tested without the
//     Hamed-Rao factor and the AR(1) tail (growth.cc NearlyExact);
//   - persistence, as for any call site (the second half's upper bound not
//     below o.persistence x the first half's lower bound);
//   - the bytes live at the end that were born before the window's second
//     half are under o.retention x the growth over a half: it is the buffer
//     that grows, not objects it keeps (which its cohorts would classify);
//   - the interval above 0.
// Otherwise `site` unchanged. `in`: the site's cohorts (SetCohorts), rows
// as `held`.
Growth ClassifyReplacedGrowth(const StepSeries& held, const GrowthInput& in, const Growth& site,
                              const GrowthOptions& o);

// The bounds a call site is held to: `site`, or the exact series' smaller
// ones when the exact series it counts toward (the heap, for host sites; the
// device's tensor blocks or resident bytes, for device sites) grows
// (`exact_class` LEAK or BOUNDED_GROWTH, or `exact_rises`: its trend test and
// effect size passed but its rate's interval reaches 0): then a small leak
// that a leak hunt sampled densely can be named at its site, while on a run
// whose exact series does not grow no site is held to less than the site
// bounds. Sparse halves get the benefit of the doubt (widen_sparse_halves)
// when the exact series is LEAK, or rises with a rate interval reaching 0.
GrowthOptions SiteBounds(const GrowthOptions& site, const GrowthOptions& exact,
                         GrowthClass exact_class, bool exact_rises = false);

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_GROWTH_H_

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

// The rows of [a, b) whose cohorts hold a sample live at the end.
size_t SampleRows(const GrowthInput& in, size_t a, size_t b) {
  size_t rows = 0;
  for (size_t i = a; i < std::min(b, in.end_samples_by_cohort.size()); ++i) {
    rows += in.end_samples_by_cohort[i] > 0;
  }
  return rows;
}

constexpr double kZ95 = 1.959964;
// Window samples' worth when none has sampling variance.
constexpr double kUnbounded = 1e12;
// The fewest steps whose samples can stand for min_samples (ClassifyGrowth).
constexpr size_t kMinSampleRows = 3;

// The Horvitz-Thompson rate (bytes/row) of what stayed: the cohorts of rows
// [a, b) live at the end, over b - a rows, and its 95 % half-width from the
// sampling variance plus one sample's worth of bytes (the mean T of those
// rows, times 1.5: with no sample at all the upper bound is ~3 T, the
// Poisson bound for zero events).
struct CohortRate {
  double rate = 0;
  double low = 0;  // 95 % interval of the rate
  double high = 0;
  double half_width = 0;  // its upper half-width, high - rate
};

// One site's cohorts (RateOfCohorts): the weighted mean rate, the variance
// of its sum over the n rows, and the mean T its interval's one-sample term
// takes; false without weight.
bool SiteCohortRate(const GrowthInput& in, size_t a, size_t b, double* rate, double* var_sum,
                    double* mean_t, double* block) {
  // Each cohort's kept bytes K_i is an unbiased estimate of the per-step rate
  // with variance about rate x T_i (T_i: the sampling interval of its step).
  // When T changed inside the window (progressive warm-up, a leak hunt that
  // sampled a few steps densely and then decayed), the inverse-variance mean
  // sum(K_i / T_i) / sum(1 / T_i) is still unbiased and rests on the densely
  // sampled cohorts instead of averaging them with nearly empty ones; with one
  // T throughout it is the plain mean.
  // (The per-row weight 1/T is divided out again only when T changes: the
  // same value, fewer divisions; this runs for every site over its rows.)
  double wsum = 0, wbytes = 0, wvar = 0;
  const bool have_var = !in.end_var_by_cohort.empty();
  const size_t end = std::min(b, in.end_bytes_by_cohort.size());
  double t_prev = 1.0, w = 1.0;
  for (size_t i = a; i < end; ++i) {
    const double k = in.end_bytes_by_cohort[i];
    double v = 0;
    if (have_var) {
      v = in.end_var_by_cohort[i];
    } else if (i < in.end_samples_by_cohort.size() && in.end_samples_by_cohort[i] > 0) {
      v = k * k / in.end_samples_by_cohort[i];
    }
    const double t = i < in.interval_by_row.size() ? std::max(in.interval_by_row[i], 1.0) : 1.0;
    if (t != t_prev) {
      t_prev = t;
      w = 1 / t;
    }
    wsum += w;
    wbytes += w * k;
    wvar += w * w * v;
    if (i < in.end_block_by_cohort.size()) *block = std::max(*block, in.end_block_by_cohort[i]);
  }
  if (wsum <= 0) return false;
  const double n = static_cast<double>(b - a);
  *rate = wbytes / wsum;
  // As n cohorts of the harmonic mean interval: the same score interval as a
  // sum of n kept amounts (HtSumInterval), scaled back to one step.
  *var_sum = wvar / (wsum * wsum) * n * n;
  *mean_t = n / wsum;
  return true;
}

CohortRate RateOfCohorts(const GrowthInput& in, size_t a, size_t b, bool blocks = false) {
  CohortRate r;
  if (b <= a) return r;
  double rate = 0, var_sum = 0, mean_t = 0, block = 0;
  if (in.parts.empty()) {
    if (!SiteCohortRate(in, a, b, &rate, &var_sum, &mean_t, &block)) return r;
  } else {
    // A sum of sites: the sum of their rates and variances; the one-sample
    // term at the smallest of their mean T (the finest of their samples).
    bool any = false;
    for (const GrowthInput& part : in.parts) {
      double pr = 0, pv = 0, pt = 0;
      if (!SiteCohortRate(part, a, b, &pr, &pv, &pt, &block)) continue;
      rate += pr;
      var_sum += pv;
      mean_t = any ? std::min(mean_t, pt) : pt;
      any = true;
    }
    if (!any) return r;
  }
  const double n = static_cast<double>(b - a);
  r.rate = rate;
  // `blocks`: the one-sample term is at least one of the largest blocks
  // recorded with p = 1 (GrowthInput::end_block_by_cohort): with no sampling
  // variance their rate is still uncertain by one block over the window.
  // Only the reported rate's interval takes it; the halves' (persistence,
  // retention) keep one sample's worth.
  const double one = blocks ? std::max(mean_t, block / 1.5) : mean_t;
  const HtInterval ci = HtSumInterval(r.rate * n, var_sum, one);
  r.low = ci.low / n;
  r.high = ci.high / n;
  r.half_width = r.high - r.rate;
  return r;
}

}  // namespace

void TargetRows(const std::vector<double>& screen_by_row, GrowthInput* in) {
  const size_t rows = std::min(
      {screen_by_row.size(), in->interval_by_row.size(), in->end_interval_by_cohort.size()});
  bool targeted = false;
  for (size_t r = 0; r < rows; ++r) {
    const double S = screen_by_row[r];
    if (!(S > 0)) {
      targeted = false;  // the hunt ended: its targets with it
      continue;
    }
    if (targeted) in->interval_by_row[r] = std::min(in->interval_by_row[r], S);
    const double own = in->end_interval_by_cohort[r];
    // A sample drawn at the screening T: only a targeted context's are
    // (every other one was thinned to its row's T). Its row keeps its T:
    // chosen for the sample it holds, at the screening T's weight it would
    // lean the rate up by that sample (a line summing a dozen sites targeted
    // late read a third above its rate); the rows after it are chosen by
    // nothing in them.
    if (!targeted && own > 0 && std::fabs(own - S) <= 1e-3 * S && S < in->interval_by_row[r]) {
      targeted = true;
    }
  }
}

void SetCohorts(const std::vector<CohortCell>* cells, size_t rows, GrowthInput* in) {
  in->end_bytes_by_cohort.assign(rows, 0.0);
  in->end_samples_by_cohort.assign(rows, 0.0);
  in->end_var_by_cohort.assign(rows, 0.0);
  in->end_interval_by_cohort.assign(rows, 0.0);
  in->end_block_by_cohort.assign(rows, 0.0);
  if (cells == nullptr) return;
  for (const CohortCell& cell : *cells) {
    if (cell.row >= rows) continue;
    in->end_bytes_by_cohort[cell.row] = cell.bytes;
    in->end_samples_by_cohort[cell.row] = cell.samples;
    in->end_var_by_cohort[cell.row] = cell.var;
    in->end_interval_by_cohort[cell.row] = cell.min_interval;
    in->end_block_by_cohort[cell.row] = cell.block;
  }
}

double KeptRate(const GrowthInput& in, size_t from, size_t to) {
  return RateOfCohorts(in, from, to).rate;
}

HtInterval HtSumInterval(double estimate, double var, double interval) {
  const double z2 = kZ95 * kZ95;
  const double c = estimate > 0 && var > 0 ? var / estimate : 0.0;
  const double a2 = 2.25 * interval * interval;
  const double center = std::max(estimate, 0.0) + z2 * c / 2;
  const double spread = std::sqrt(z2 * c * std::max(estimate, 0.0) + z2 * z2 * c * c / 4 + z2 * a2);
  return HtInterval{std::max(0.0, center - spread), center + spread};
}

const char* GrowthClassName(GrowthClass c) {
  switch (c) {
    case GrowthClass::kLeak:
      return "LEAK";
    case GrowthClass::kBoundedGrowth:
      return "BOUNDED_GROWTH";
    case GrowthClass::kWarmupOnly:
      return "WARMUP_ONLY";
    case GrowthClass::kNoTrend:
      return "NO_TREND";
    case GrowthClass::kInsufficient:
      break;
  }
  return "INSUFFICIENT";
}

namespace {

// The trend tests of one series' window (its last N rows, from ws) and of
// its two halves, and for call sites what the window's cohorts kept.
struct Window {
  size_t n = 0, N = 0, ws = 0, half = 0;
  bool cohorts = false;
  TrendResult t, h1, h2;
  CohortRate kept, kept1, kept2;
};

// Tests the window and its halves; fills g's window, slopes and bytes.
Window FitWindow(const GrowthInput& in, const GrowthOptions& o, Growth* g) {
  Window w;
  const std::vector<double>& y = in.y;
  w.n = y.size();
  w.cohorts = !in.end_bytes_by_cohort.empty();
  w.N = std::min(o.max_window, w.n - g->warmup);
  w.ws = w.n - w.N;
  w.half = w.N / 2;
  const size_t n = w.n, N = w.N, ws = w.ws, half = w.half;
  const bool cohorts = w.cohorts;
  g->window = N;
  g->window_begin = ws;
  // An exact series (no cohorts) sets a few isolated jumps aside as level
  // shifts (TrendTestExact): a collection mid-run no longer hides its rise.
  // Not in the halves: a jump widens a half's interval, which only makes the
  // persistence test easier to pass, and a half's few steps would let a
  // cache's fall pass for a shift more often.
  w.t = cohorts ? TrendTest(Slice(y, ws, n)) : TrendTestExact(Slice(y, ws, n), o.piles);
  g->level_shifts = w.t.level_shifts;
  g->level_shift_bytes = w.t.level_shift_sum;
  g->p_value = w.t.p_increasing;
  g->z = w.t.z;
  g->slope = w.t.slope;
  g->slope_low = w.t.ci_low;
  g->slope_high = w.t.ci_high;
  // The halves' trend tests only matter for a window that rises (ClassifyRise);
  // otherwise only their slopes are reported.
  const bool rises = w.t.p_increasing < o.p_value && w.t.slope > 0;
  if (rises) {
    w.h1 = TrendTest(Slice(y, ws, ws + half));
    w.h2 = TrendTest(Slice(y, ws + half, n));
  } else if (!cohorts) {
    w.h1.slope = TheilSenSlope(Slice(y, ws, ws + half));
    w.h2.slope = TheilSenSlope(Slice(y, ws + half, n));
  }
  g->slope_first_half = w.h1.slope;
  g->slope_second_half = w.h2.slope;
  g->retained_bytes = cohorts ? Sum(in.end_bytes_by_cohort, ws, ws + half) : -1;
  g->window_samples = cohorts ? Sum(in.end_samples_by_cohort, ws, n) : -1;
  g->window_bytes = cohorts ? Sum(in.end_bytes_by_cohort, ws, n) : -1;
  if (cohorts) {
    // What the window's samples are worth: B^2 / V, the number of equal
    // Poisson samples whose sum is known as well (each small sample counts
    // about 1; a block recorded with p = 1, such as every one of S_always or
    // more, has no sampling variance and counts without bound), and in how
    // many rows they were born.
    double var = 0;
    const size_t vend = std::min(n, in.end_var_by_cohort.size());
    for (size_t i = ws; i < vend; ++i) var += in.end_var_by_cohort[i];
    const double b = g->window_bytes;
    g->window_effective_samples = !(b > 0)                       ? 0
                                  : in.end_var_by_cohort.empty() ? g->window_samples
                                  : var > 0                      ? b * b / var
                                                                 : kUnbounded;
    g->window_sample_rows = SampleRows(in, ws, n);
  }

  // Call sites: what the window's cohorts kept, per step (the last row's
  // cohort is left out: what it allocated had no step to be freed in).
  const size_t kept_end = N > 2 ? n - 1 : n;
  w.kept = cohorts ? RateOfCohorts(in, ws, kept_end, true) : CohortRate{};
  w.kept1 = cohorts ? RateOfCohorts(in, ws, ws + half) : CohortRate{};
  w.kept2 = cohorts ? RateOfCohorts(in, ws + half, kept_end) : CohortRate{};
  if (cohorts) {
    g->slope_first_half = w.kept1.rate;
    g->slope_second_half = w.kept2.rate;
  }
  return w;
}

// A significant rise too small to report (rate, growth over the window or,
// for call sites, live samples under their bounds): NO_TREND, saying which.
bool TooSmall(const Window& w, double effect, const GrowthOptions& o, Growth* g) {
  const bool rate_ok = effect >= o.min_rate;
  const bool growth_ok = effect * static_cast<double>(w.N) >= o.min_window_growth;
  // Enough samples: min_samples of them, or samples worth that many (blocks
  // recorded with certainty, or nearly), born in at least kMinSampleRows
  // steps either way: one or two events are not a trend, however exactly
  // known or densely sampled (a list renewed each epoch and sampled densely
  // from one epoch on, while a hunt ran, is many samples born in one step).
  const bool enough =
      g->window_samples >= o.min_samples || g->window_effective_samples >= o.min_samples;
  const bool spread = g->window_sample_rows >= kMinSampleRows;
  const bool samples_ok = !w.cohorts || (enough && spread);
  if (rate_ok && growth_ok && samples_ok) return false;
  g->cls = GrowthClass::kNoTrend;
  g->reason = !rate_ok     ? absl::StrFormat("trend of %s/step below the %s/step threshold",
                                             Kib(effect), Kib(o.min_rate))
              : !growth_ok ? absl::StrFormat("window growth %s below %s",
                                             Kib(effect * static_cast<double>(w.N)),
                                             Kib(o.min_window_growth))
              : !enough    ? absl::StrFormat(
                                 "only %.0f live samples from the window (worth %.1f, born in %d "
                                    "steps), need %.0f (or samples worth that many, born in %d steps)",
                                 g->window_samples, g->window_effective_samples, g->window_sample_rows,
                                 o.min_samples, kMinSampleRows)
                        : absl::StrFormat(
                              "its %.0f live samples from the window were born in %d "
                              "step%s: an event, not a trend (need samples born in %d steps)",
                              g->window_samples, g->window_sample_rows,
                              g->window_sample_rows == 1 ? "" : "s", kMinSampleRows);
  return true;
}

// A window that rises significantly, enough to report: LEAK when the growth
// persists and is retained, else BOUNDED_GROWTH (or a LEAK at the second
// half's rate for an exact series that slowed but still grows).
void ClassifyRise(const Window& w, const GrowthOptions& o, Growth* g) {
  const TrendResult &t = w.t, &h1 = w.h1, &h2 = w.h2;
  const bool cohorts = w.cohorts;
  const size_t N = w.N, half = w.half;
  // Persistence, allowing for sampling noise: fails only when the second
  // half's upper bound is below `persistence` x the first half's lower one.
  // Call sites, when the exact heap is LEAK (widen_sparse_halves): the
  // second half's bound is widened by the sampling uncertainty of what its
  // cohorts kept (and one sample's worth of bytes), so that a half sampled
  // sparsely (after a leak hunt, say) never reads as slowing; a cache that
  // stopped growing because it frees as much as it allocates still does.
  // The widened bound starts from the larger of the series' bound and what
  // the half's cohorts kept (their inverse-variance rate): a half sampled
  // densely and then sparsely (a hunt that targeted the site, then decayed)
  // has a series flat over the sparse rows for want of samples, while that
  // rate rests on the dense rows.
  const bool widen = cohorts && o.widen_sparse_halves;
  const double h2_high =
      widen ? std::max(h2.slope_high, w.kept2.rate) + w.kept2.half_width : h2.slope_high;
  const bool persistent = h2_high >= o.persistence * h1.slope_low;
  // Retention, with the same benefit of the doubt for a sparse half.
  const double retained_hi =
      g->retained_bytes + (widen ? w.kept1.half_width * static_cast<double>(half) : 0.0);
  const bool retained =
      !cohorts || retained_hi >= o.retention * t.slope * static_cast<double>(half);
  if (persistent && retained) {
    g->cls = GrowthClass::kLeak;
    if (cohorts) {
      // The leak's rate: what the window's cohorts kept per step, unbiased,
      // with its sampling interval (docs/analysis.md "Intervals").
      g->slope = w.kept.rate;
      g->slope_low = w.kept.low;
      g->slope_high = w.kept.high;
    }
    g->reason = absl::StrFormat("p = %.2g, %s/step over %d steps, persistent and retained",
                                t.p_increasing, Kib(g->slope), N);
  } else if (!cohorts && !persistent && h2.p_increasing < o.p_value && h2.slope >= o.min_rate &&
             h2.slope * static_cast<double>(N - half) >= o.min_window_growth / 2) {
    // An exact series (no sampling: a random walk of samples cannot fake
    // it) that slowed, but whose second half still grows significantly by
    // itself (a leak under a cache that filled, say): a leak at the second
    // half's rate, the one that goes on.
    g->cls = GrowthClass::kLeak;
    g->slope = h2.slope;
    g->slope_low = h2.ci_low;
    g->slope_high = h2.ci_high;
    g->reason = absl::StrFormat(
        "p = %.2g, slowed from %s/step but still growing %s/step over the last %d steps",
        h2.p_increasing, Kib(h1.slope), Kib(h2.slope), N - half);
  } else {
    g->cls = GrowthClass::kBoundedGrowth;
    g->reason = !persistent ? absl::StrFormat("slowing: second half %s/step vs first half %s/step",
                                              Kib(h2.slope), Kib(h1.slope))
                            : absl::StrFormat(
                                  "not retained: %s of the first half's allocations live "
                                  "at the end",
                                  Kib(g->retained_bytes));
  }
}

// A leak that started inside the window (at an epoch's end, after an
// evaluation, when a schedule changed): flat over the window's first half,
// rising over its second. The whole window's line misses it: an exact
// series' interval, widened by the hinge's residuals, reaches 0 (a heap
// flat for 30 steps, then growing 8.3 KiB a step, read NO_TREND, [-32 B,
// 8.8 KiB]), and a site's first-half cohorts keep nothing (BOUNDED_GROWTH,
// "not retained"). LEAK at the second half's rate when that half rises by
// itself: its own trend test (the exact one for an exact series, so that a
// jump is no rise), its interval above 0 and its effect bounds, for a site
// its cohorts' rate above 0 from samples born in kMinSampleRows of its rows;
// and the first half does not rise, or rises at under half the second
// half's rate (upper bound against lower bound). A LEAK already takes the
// second half's rate on the latter only. False otherwise, `g` unchanged.
bool ClassifyOnset(const GrowthInput& in, const Window& w, const GrowthOptions& o, bool leak,
                   Growth* g) {
  const size_t rest = w.N - w.half;
  if (rest < 10) return false;
  // A site's halves as FitWindow tested them; an exact series' by the exact
  // test, as its window.
  const TrendResult h2 =
      w.cohorts ? w.h2 : TrendTestExact(Slice(in.y, w.ws + w.half, w.n), o.piles);
  const TrendResult h1 =
      w.cohorts ? w.h1 : TrendTestExact(Slice(in.y, w.ws, w.ws + w.half), o.piles);
  // (The first half's bound without the AR(1) tail, made for the reported
  // interval: a heap rising 0.1 KiB a step with one jump read [-0.3, 8.4].)
  double rate = h2.slope, low = h2.ci_low, high = h2.ci_high, before_high = h1.slope_high;
  if (w.cohorts) {
    if (SampleRows(in, w.ws + w.half, w.n) < kMinSampleRows ||
        Sum(in.end_samples_by_cohort, w.ws + w.half, w.n) < o.min_samples) {
      return false;
    }
    // The reported interval, as for any LEAK site: one block more or less
    // (RateOfCohorts with blocks).
    const CohortRate kept = RateOfCohorts(in, w.ws + w.half, w.N > 2 ? w.n - 1 : w.n, true);
    rate = kept.rate;
    low = kept.low;
    high = kept.high;
    before_high = w.kept1.high;
    // The series itself rises at that rate: a full FIFO cache keeps all of
    // its recent cohorts and none of its old ones, as a leak that started
    // does, but its series is flat (the trend test of its half is then
    // significant by chance only: 1 in 100 seeds of GrowthTest's cache).
    if (h2.slope_high < o.persistence * kept.rate) return false;
  }
  // Started: the first half does not rise, or it rose at under half the
  // second half's rate, its upper bound against the second's lower bound
  // (o.persistence, the slowing test's factor turned round: a real heap rose
  // 205 B a step before the leak began, while a steady exact leak's halves
  // of 16.9 and 17.0 KiB/step have intervals apart). A LEAK already takes
  // the second half's rate on the latter only: the window's average counts
  // the steps before the leak began (a PyTorch loop keeping 17 KiB a step
  // from step 30 of 60 read 7.9 KiB/step at its line). A site's series is a
  // staircase of samples whose own interval reaches 0: only its p-value is
  // asked, its rate and interval are its cohorts'.
  const bool rose = before_high < o.persistence * low;
  const bool started = leak ? rose : h1.p_increasing >= o.p_value || rose;
  if (!started || !(h2.p_increasing < o.p_value) || !(low > 0) || rate < o.min_rate ||
      rate * static_cast<double>(rest) < o.min_window_growth / 2) {
    return false;
  }
  g->cls = GrowthClass::kLeak;
  g->slope = rate;
  g->slope_low = low;
  g->slope_high = high;
  g->reason = absl::StrFormat(
      "p = %.2g, %s inside the window: %s/step over its first %d steps, %s/step over the "
      "last %d",
      h2.p_increasing, h1.p_increasing >= o.p_value ? "started" : "rose",
      Kib(w.cohorts ? w.kept1.rate : h1.slope), w.half, Kib(rate), rest);
  return true;
}

// A window with no trend: BOUNDED_GROWTH when the series grew after warm-up
// before the window, WARMUP_ONLY when it grew during warm-up, else NO_TREND.
void ClassifyFlat(const GrowthInput& in, const Window& w, const GrowthOptions& o, Growth* g) {
  const std::vector<double>& y = in.y;
  // Did it grow after warm-up, before the window?
  // (The trend test only when the growth is large enough to matter: its
  // result is used nowhere else.)
  if (w.ws > g->warmup) {
    const double mean = Sum(y, w.ws, w.n) / static_cast<double>(w.N);
    if (mean - y[g->warmup] >= o.min_window_growth &&
        TrendTest(Thin(y, g->warmup, w.n, 256)).p_increasing < o.p_value) {
      g->cls = GrowthClass::kBoundedGrowth;
      g->reason = "grew after warm-up, flat in the window";
      return;
    }
  }
  if (g->warmup > 0) {
    double warm_growth;
    if (w.cohorts) {
      warm_growth = g->warmup_bytes;
    } else {
      auto [lo, hi] =
          std::minmax_element(y.begin(), y.begin() + static_cast<ptrdiff_t>(g->warmup) + 1);
      warm_growth = *hi - *lo;
    }
    if (warm_growth >= o.min_window_growth) {
      g->cls = GrowthClass::kWarmupOnly;
      g->reason = absl::StrFormat("%s from warm-up steps, flat since", Kib(warm_growth));
      return;
    }
  }
  g->cls = GrowthClass::kNoTrend;
  g->reason = absl::StrFormat("no significant trend (p = %.2g)", w.t.p_increasing);
}

}  // namespace

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
    g.reason =
        absl::StrFormat("%d steps after warm-up (W = %d), need %d", after, g.warmup, o.min_window);
    return g;
  }
  const Window w = FitWindow(in, o, &g);
  // The effect size: the Theil-Sen slope, or for call sites the kept rate
  // when larger (a rate that changed during the window, as in a leak hunt,
  // leaves flat stretches that pull the Theil-Sen slope down).
  const double effect = cohorts ? std::max(w.t.slope, w.kept.rate) : w.t.slope;
  if (w.t.p_increasing < o.p_value && w.t.slope > 0) {
    if (!TooSmall(w, effect, o, &g)) {
      g.rises = true;
      ClassifyRise(w, o, &g);
      const bool leak = g.cls == GrowthClass::kLeak && g.slope_low > 0;
      if (g.cls == GrowthClass::kLeak || g.cls == GrowthClass::kBoundedGrowth) {
        ClassifyOnset(in, w, o, leak, &g);
      }
    }
  } else {
    ClassifyFlat(in, w, o, &g);
  }
  // A LEAK's printed interval is the one its class rests on: the reported
  // 95 % interval of its rate (the Theil-Sen interval with the AR(1) tail, or
  // for call sites the Horvitz-Thompson interval of what the cohorts kept),
  // which is the one whose coverage is tested (docs/analysis.md "Intervals").
  // A trend the Mann-Kendall test finds significant but whose rate interval
  // still reaches 0 is not a leak (the test's variance keeps only the
  // significant lags; a slowly mixing series has more).
  if (g.cls == GrowthClass::kLeak && !(g.slope_low > 0)) {
    g.reason = absl::StrFormat(
        "p = %.2g, but the rate's 95 %% interval [%s, %s] reaches 0: growth not established",
        g.p_value, Kib(g.slope_low), Kib(g.slope_high));
    g.cls = GrowthClass::kNoTrend;
  }
  if (g.level_shifts > 0) {
    absl::StrAppendFormat(&g.reason,
                          "; %d level shift%s (%s in all) set aside, the interval holds the "
                          "window's net rate with %s",
                          g.level_shifts, g.level_shifts == 1 ? "" : "s", Kib(g.level_shift_bytes),
                          g.level_shifts == 1 ? "it" : "them");
  }
  return g;
}

Growth ClassifySiteGrowth(const GrowthInput& in, size_t warmup, const GrowthOptions& o) {
  const size_t rows = in.y.size();
  const double top = std::max(
      in.y.empty() ? 0 : *std::max_element(in.y.begin(), in.y.end()),
      rows > warmup + 1 ? KeptRate(in, warmup, rows - 1) * static_cast<double>(rows - warmup)
                        : 0.0);
  if (top < o.min_window_growth && rows >= warmup + o.min_window) {
    Growth g;
    g.cls = GrowthClass::kNoTrend;  // too small to pass the effect-size test
    g.warmup = warmup;
    g.capacity = top;
    g.reason = "never above the window growth threshold";
    return g;
  }
  return ClassifyGrowth(in, warmup, o);
}

// A series that lies on its Theil-Sen line but for a few rows (a buffer
// sampled with p < 1 while smaller than T, exact from then on, the noisy
// rows too many to set aside as level shifts): when the residuals of half
// its rows are within 1 % of the window's rise, the Hamed-Rao and AR(1)
// corrections, made for noise that persists, read the few outlying rows as
// such (np.append of 8 KiB a step, exact for its last 34 of 47 rows, and a
// torch.cat history of 4 KiB a step were rejected). Then `t` with the
// Mann-Kendall p-value without the Hamed-Rao factor and the slope's interval
// without the AR(1) tail; otherwise `t` unchanged.
TrendResult NearlyExact(const std::vector<double>& y, TrendResult t) {
  const size_t n = y.size();
  if (n < 10 || !(t.slope > 0) || !(t.hamed_rao > 1)) return t;
  std::vector<double> r(n);
  for (size_t k = 0; k < n; ++k) r[k] = y[k] - t.slope * static_cast<double>(k);
  std::vector<double> c = r;
  std::nth_element(c.begin(), c.begin() + static_cast<ptrdiff_t>(n / 2), c.end());
  const double mid = c[n / 2];
  for (size_t k = 0; k < n; ++k) r[k] = std::fabs(r[k] - mid);
  std::nth_element(r.begin(), r.begin() + static_cast<ptrdiff_t>(n / 2), r.end());
  const double rise = t.slope * static_cast<double>(n - 1);
  if (!(r[n / 2] <= 0.01 * rise)) return t;
  const double z = t.z * std::sqrt(t.hamed_rao);
  t.z = z;
  t.p_increasing = 0.5 * std::erfc(z / std::sqrt(2.0));
  t.ci_low = t.slope_low;
  t.ci_high = t.slope_high;
  return t;
}

// The level of ClassifyReplacedGrowth's trend test, stricter than the
// site's 0.01: every site's whole series is tested beside its long-lived
// one, and a sampled series whose T fell inside the window (a hunt) holds
// samples at more of its later rows, which ranks read as a rise though each
// row's estimate is unbiased (a PyTorch backward site sampled at 512 KiB and
// then at a hunt's T read p = 4.5e-4). Not stricter still: a buffer sampled
// with p = 1 at most rows rises by the same bytes every step, and the
// Hamed-Rao correction reads the few rows that differ (sampled while the
// buffer was smaller than T) as noise that persists (a torch.cat history of
// 4 KiB a step read p = 1.5e-6, its correction factor 5.8).
constexpr double kReplacedP = 1e-4;

// The first row of the longest part of `y` up to its end that holds bytes
// at 3/4 of its rows or more (0: the whole; y.size(): none). The whole
// window is tested when it is held so; else that part, when it is at least
// half the window: a buffer that a leak hunt targeted inside the window is
// sampled at every step end from then on, and sparsely before (a string
// rebuilt each step, 1 KiB larger, targeted at the 29th of 80 steps: held
// at 51 of 72 rows).
size_t HeldFrom(const std::vector<double>& y) {
  const size_t N = y.size();
  size_t from = N, count = 0;
  for (size_t k = N; k-- > 0;) {
    count += y[k] > 0;
    if (4 * count >= 3 * (N - k)) from = k;
  }
  return from;
}

Growth ClassifyReplacedGrowth(const StepSeries& held, const GrowthInput& in, const Growth& site,
                              const GrowthOptions& o) {
  const size_t n = in.y.size();
  if (site.cls == GrowthClass::kLeak || site.cls == GrowthClass::kInsufficient) return site;
  if (n < site.warmup + std::max<size_t>(o.min_window, 4)) return site;
  size_t N = std::min(o.max_window, n - site.warmup);
  size_t ws = n - N;
  std::vector<double> y(N);
  for (size_t k = 0; k < N; ++k) {
    // The bytes the samples hold, whatever T each was drawn at (a hunt's
    // targets are sampled at its screening T, every other site at the row's
    // T), in whole bytes. A sum less its frees leaves ~1e-11 where nothing
    // is live (not a sample, but to ranks and pairwise slopes a value above
    // 0): on a buffer that rises by the same bytes every step, such residues
    // are all its residuals have, and their ranks, ordered by the rounding,
    // read to the Hamed-Rao and AR(1) corrections as noise that persists (a
    // torch.cat history of 32 KiB a step read p = 2e-4, its interval
    // [-8.0 KiB, 32 KiB]; in whole bytes p = 3e-14, [32, 32]).
    const double v = ws + k < held.size() ? held[ws + k] : 0.0;
    y[k] = v >= 1 ? std::round(v) : 0.0;
  }
  const size_t from = HeldFrom(y);
  if (from == N || (from > 0 && N - from < std::max(o.min_window, N / 2))) return site;
  y.erase(y.begin(), y.begin() + static_cast<ptrdiff_t>(from));
  ws += from;
  N -= from;
  const size_t rows_held =
      static_cast<size_t>(std::count_if(y.begin(), y.end(), [](double v) { return v > 0; }));
  const size_t half = N / 2;
  // The test of an exact series (TrendTestExact): the rows of a buffer
  // recorded with p = 1 rise by the same bytes every step, and the few rows
  // sampled while it was smaller than T are the isolated jumps it sets
  // aside (TrendTest read a 32 KiB/step history, exact but for its first 6
  // rows, as [-4.8 KiB, 32 KiB]; this test, [31.2 KiB, 32 KiB]). A series
  // with sampling noise in many rows has no such jumps and gets TrendTest.
  // (No one-off falls: a fall to a row that drew no sample is sampling, not
  // a collection.)
  TrendResult t = TrendTestExact(y, o.piles, false);
  if (!(t.p_increasing < kReplacedP) || !(t.ci_low > 0)) t = NearlyExact(y, t);
  if (!(t.p_increasing < kReplacedP) || !(t.slope >= o.min_rate) ||
      t.slope * static_cast<double>(N) < o.min_window_growth || !(t.ci_low > 0)) {
    return site;
  }
  const TrendResult h1 = TrendTest(Slice(y, 0, half));
  const TrendResult h2 = TrendTest(Slice(y, half, N));
  if (h2.slope_high < o.persistence * h1.slope_low) return site;
  const double old_bytes = Sum(in.end_bytes_by_cohort, 0, ws + half);
  if (old_bytes >= o.retention * t.slope * static_cast<double>(half)) return site;
  Growth g = site;
  g.cls = GrowthClass::kLeak;
  g.replaced = true;
  g.window_begin = ws;
  g.window = N;
  g.p_value = t.p_increasing;
  g.z = t.z;
  g.slope = t.slope;
  g.slope_low = t.ci_low;
  g.slope_high = t.ci_high;
  g.slope_first_half = h1.slope;
  g.slope_second_half = h2.slope;
  g.retained_bytes = old_bytes;
  // The rows whose end held a sample of the buffer: what the rate rests on
  // (calibrate.h weighs a rate's Poisson term by it).
  g.window_effective_samples = static_cast<double>(rows_held);
  for (double v : y) g.capacity = std::max(g.capacity, v);
  g.reason = absl::StrFormat(
      "p = %.2g, its live bytes rise %s/step over %d steps in blocks born anew: a buffer "
      "reallocated or replaced by a larger copy (%s live at the end born before the window's "
      "second half)",
      t.p_increasing, Kib(t.slope), N, Kib(old_bytes));
  return g;
}

GrowthOptions SiteBounds(const GrowthOptions& site, const GrowthOptions& exact,
                         GrowthClass exact_class, bool exact_rises) {
  GrowthOptions o = site;
  if (exact_class == GrowthClass::kLeak || exact_class == GrowthClass::kBoundedGrowth ||
      exact_rises) {
    o.min_rate = std::min(o.min_rate, exact.min_rate);
    o.min_window_growth = std::min(o.min_window_growth, exact.min_window_growth);
  }
  // Sparse halves: while the exact series grows on (LEAK, or a significant
  // rise whose rate's interval reaches 0 only for its autocorrelation), not
  // when it slowed (BOUNDED_GROWTH) or does not rise.
  o.widen_sparse_halves =
      exact_class == GrowthClass::kLeak || (exact_class == GrowthClass::kNoTrend && exact_rises);
  return o;
}

}  // namespace memstep::analysis

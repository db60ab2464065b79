#include "src/analysis/trend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <utility>

namespace memstep::analysis {
namespace {

constexpr double kZ975 = 1.959963984540054;
// Up to this many points the rank autocorrelations are summed directly
// (O(n^2), fewer instructions than the transforms below this size).
constexpr size_t kDirectLagsMax = 2048;
// TrendTestExact lists its segments' pairs (O(n^2)); longer series take
// TrendTest (growth windows are at most 256 rows).
constexpr size_t kSegmentedMax = 2048;

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

std::vector<double> Positions(size_t n) {
  std::vector<double> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<double>(i);
  return p;
}

// ---------------------------------------------------------------------------
// Pairwise slopes s_ij = (y_j - y_i) / (p_j - p_i), i < j: the k-th smallest.

// Every pair listed: O(n^2) time and memory. The reference the counting
// method is tested against, and the faster one for short series.
class AllPairs {
 public:
  AllPairs(const std::vector<double>& pos, const std::vector<double>& y) {
    const size_t n = y.size();
    slopes_.reserve(n * (n - 1) / 2);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = i + 1; j < n; ++j) {
        if (pos[j] != pos[i]) slopes_.push_back((y[j] - y[i]) / (pos[j] - pos[i]));
      }
    }
  }
  // Only the pairs within one segment [starts[g], starts[g + 1]) (starts
  // ascending, from 0): a series cut at known level shifts.
  AllPairs(const std::vector<double>& pos, const std::vector<double>& y,
           const std::vector<size_t>& starts) {
    for (size_t g = 0; g < starts.size(); ++g) {
      const size_t end = g + 1 < starts.size() ? starts[g + 1] : y.size();
      for (size_t i = starts[g]; i < end; ++i) {
        for (size_t j = i + 1; j < end; ++j) {
          if (pos[j] != pos[i]) slopes_.push_back((y[j] - y[i]) / (pos[j] - pos[i]));
        }
      }
    }
  }
  uint64_t count() const { return slopes_.size(); }
  // The k-th smallest (1-based, 1 <= k <= count()).
  double Select(uint64_t k) {
    auto it = slopes_.begin() + static_cast<ptrdiff_t>(k - 1);
    std::nth_element(slopes_.begin(), it, slopes_.end());
    return *it;
  }

 private:
  std::vector<double> slopes_;
};

// Pairs with i < j and key[j] < key[i] (strict inversions), and with
// key[j] == key[i], by merge sort: O(n log n). Sorts `key`.
template <typename T>
std::pair<uint64_t, uint64_t> Inversions(std::vector<T>& key, std::vector<T>& buf) {
  const size_t n = key.size();
  buf.resize(n);
  uint64_t inv = 0;
  for (size_t width = 1; width < n; width *= 2) {
    for (size_t lo = 0; lo < n; lo += 2 * width) {
      const size_t mid = std::min(lo + width, n), hi = std::min(lo + 2 * width, n);
      size_t a = lo, b = mid, o = lo;
      while (a < mid && b < hi) {
        if (key[b] < key[a]) {
          inv += mid - a;
          buf[o++] = key[b++];
        } else {
          buf[o++] = key[a++];
        }
      }
      while (a < mid) buf[o++] = key[a++];
      while (b < hi) buf[o++] = key[b++];
    }
    key.swap(buf);
  }
  uint64_t ties = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && key[j] == key[i]) ++j;
    const uint64_t t = j - i;
    ties += t * (t - 1) / 2;
    i = j;
  }
  return {inv, ties};
}

// Doubles as unsigned integers in the same order, and back.
uint64_t Ordered(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u >> 63 ? ~u : u | (uint64_t{1} << 63);
}
double FromOrdered(uint64_t k) {
  const uint64_t u = k >> 63 ? k & ~(uint64_t{1} << 63) : ~k;
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}

// The counting method (positions strictly increasing): s_ij < t exactly when
// z_j < z_i for z = y - t p, so the pairs below t are the inversions of z,
// counted in O(n log n). Selection: a bracket [L, H] around the k-th slope
// from a fixed-seed random sample of pairs, narrowed by bisection on the
// slope value until at most max(8n, 2048) pairs lie in it; those pairs are
// then listed (the pairs whose order by z changes between t = L and t = H,
// found by an insertion sort in O(n + their number)) and their slopes
// computed exactly as AllPairs computes them. O(n log n) expected. The z
// are computed in long double; a pair whose slope lies within rounding of L
// or H may be counted on the wrong side of it, which changes the result only
// when the k-th slope itself lies within that rounding of L or H (then by at
// most that rounding: about 2^-60 (max|y| + |t| max p)).
class CountingPairs {
 public:
  CountingPairs(const std::vector<double>& pos, const std::vector<double>& y)
      : pos_(pos), y_(y), n_(y.size()), m_(static_cast<uint64_t>(n_) * (n_ - 1) / 2) {
    lo0_ = std::numeric_limits<double>::infinity();
    hi0_ = -lo0_;
    // Every pair's slope is a weighted mean of the consecutive ones.
    for (size_t i = 0; i + 1 < n_; ++i) {
      const double s = Slope(i, i + 1);
      lo0_ = std::min(lo0_, s);
      hi0_ = std::max(hi0_, s);
    }
    // A fixed-seed sample of pairs (splitmix64; any sample gives the same
    // result, only the number of counts depends on it).
    uint64_t state = 0x6d656d7374657001ULL ^ n_;
    auto next = [&state](uint64_t below) {
      uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      z ^= z >> 31;
      return static_cast<uint64_t>((static_cast<unsigned __int128>(z) * below) >> 64);
    };
    const size_t samples = static_cast<size_t>(
        std::min<uint64_t>(m_, std::max<uint64_t>(2 * static_cast<uint64_t>(n_), 512)));
    sample_.reserve(samples);
    for (size_t s = 0; s < samples; ++s) {
      const size_t i = next(n_);
      size_t j = next(n_ - 1);
      if (j >= i) ++j;
      sample_.push_back(Slope(std::min(i, j), std::max(i, j)));
    }
    std::sort(sample_.begin(), sample_.end());
    z_.resize(n_);
  }
  uint64_t count() const { return m_; }

  double Select(uint64_t k) {
    const uint64_t budget = std::max<uint64_t>(8 * static_cast<uint64_t>(n_), 2048);
    // The tightest bracket the counts made so far give (lt non-decreasing
    // in t: the last t below the k-th pair, the first at or above it).
    double lo = lo0_, hi = hi0_;
    uint64_t below_lo = 0, upto_hi = 0;
    bool have_lo = false, have_hi = false;
    for (const auto& [t, c] : counts_) {
      if (c.first < k) {
        lo = t;
        below_lo = c.first;
        have_lo = true;
      } else if (!have_hi && c.second >= k) {
        hi = t;
        upto_hi = c.second;
        have_hi = true;
      }
    }
    // Narrowed by the sample's quantile of the k-th pair, +-3 sd.
    const double size = static_cast<double>(sample_.size());
    const double q = (static_cast<double>(k) - 0.5) / static_cast<double>(m_);
    const double margin = 3 * std::sqrt(size * q * (1 - q)) + 2;
    const double a = std::floor(q * size - margin), b = std::ceil(q * size + margin);
    for (double at : {a, b}) {
      if (at < 0 || at >= size) continue;
      const double t = sample_[static_cast<size_t>(at)];
      if (!(t > lo && t < hi) || (have_lo && have_hi && upto_hi - below_lo <= budget)) continue;
      const auto [lt, le] = CountAt(t);
      if (lt < k && le >= k) {  // the k-th slope is t itself: no bisection
        lo = hi = t;
        below_lo = lt;
        upto_hi = le;
        have_lo = have_hi = true;
        break;
      }
      if (lt < k) {
        lo = t;
        below_lo = lt;
        have_lo = true;
      } else {
        hi = t;
        upto_hi = le;
        have_hi = true;
      }
    }
    if (!have_lo) below_lo = CountAt(lo).first;
    if (!have_hi) upto_hi = CountAt(hi).second;
    if (below_lo >= k) return lo;  // (rounding at the extremes)
    if (upto_hi < k) return hi;
    // Bisection on the value, halving the doubles between lo and hi (at
    // most 64 steps; it lands on exactly representable ties such as 0).
    while (upto_hi - below_lo > budget) {
      const uint64_t kl = Ordered(lo), kh = Ordered(hi);
      if (kh - kl < 2) break;  // adjacent values: a cluster of (nearly) equal slopes
      const double mid = FromOrdered(kl + (kh - kl) / 2);
      const auto [lt, le] = CountAt(mid);
      if (lt >= k) {
        hi = mid;
        upto_hi = le;
      } else if (le < k) {
        lo = mid;
        below_lo = lt;
      } else {  // the k-th slope is mid itself
        lo = hi = mid;
        below_lo = lt;
        upto_hi = le;
      }
    }
    // The pairs in [lo, hi]: all of them, or for a cluster of more equal
    // slopes than the budget, the first `budget` of them (all equal up to
    // rounding).
    const bool cluster = upto_hi - below_lo > budget;
    std::vector<double> band = Band(lo, hi, budget, cluster);
    if (band.empty()) return CountAt(lo).second >= k ? lo : hi;  // (rounding)
    if (cluster) return band[std::min<size_t>(band.size() - 1, band.size() / 2)];
    const uint64_t r = std::min<uint64_t>(std::max<uint64_t>(k - below_lo, 1), band.size());
    auto it = band.begin() + static_cast<ptrdiff_t>(r - 1);
    std::nth_element(band.begin(), it, band.end());
    return *it;
  }

 private:
  double Slope(size_t i, size_t j) const { return (y_[j] - y_[i]) / (pos_[j] - pos_[i]); }
  long double Z(size_t i, double t) const {
    return static_cast<long double>(y_[i]) -
           static_cast<long double>(t) * static_cast<long double>(pos_[i]);
  }
  // Count(t), remembered: the brackets of later selections start from them.
  std::pair<uint64_t, uint64_t> CountAt(double t) {
    auto it = counts_.find(t);
    if (it == counts_.end()) it = counts_.emplace(t, Count(t)).first;
    return it->second;
  }
  // {pairs with slope < t, pairs with slope <= t}.
  std::pair<uint64_t, uint64_t> Count(double t) {
    z_.resize(n_);
    for (size_t i = 0; i < n_; ++i) z_[i] = Z(i, t);
    const auto [inv, ties] = Inversions(z_, buf_);
    return {inv, inv + ties};
  }
  // The slopes in [lo, hi]: ordered by (z at lo, position), a pair i < j has
  // i first when s_ij >= lo; by (z at hi, position descending), j first when
  // s_ij <= hi. The pairs the insertion sort from the first order to the
  // second swaps are those in [lo, hi].
  std::vector<double> Band(double lo, double hi, uint64_t budget, bool first_only) const {
    std::vector<long double> zl(n_), zh(n_);
    for (size_t i = 0; i < n_; ++i) {
      zl[i] = Z(i, lo);
      zh[i] = Z(i, hi);
    }
    std::vector<size_t> order(n_);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return zl[a] < zl[b]; });
    auto before = [&](size_t a, size_t b) { return zh[a] < zh[b] || (zh[a] == zh[b] && a > b); };
    std::vector<double> band;
    uint64_t swaps = 0;
    const uint64_t limit = 2 * budget + n_;
    for (size_t a = 1; a < n_; ++a) {
      const size_t cur = order[a];
      size_t b = a;
      while (b > 0 && before(cur, order[b - 1])) {
        const size_t u = order[b - 1];
        if (u < cur) band.push_back(Slope(u, cur));
        if (first_only && band.size() >= budget) return band;
        order[b] = u;
        --b;
        if (++swaps > limit) return band;  // (rounding made the orders disagree)
      }
      order[b] = cur;
    }
    return band;
  }

  const std::vector<double>& pos_;
  const std::vector<double>& y_;
  size_t n_;
  uint64_t m_;
  double lo0_, hi0_;
  std::vector<double> sample_;
  std::vector<long double> z_, buf_;
  std::map<double, std::pair<uint64_t, uint64_t>> counts_;
};

bool StrictlyIncreasing(const std::vector<double>& pos) {
  for (size_t i = 1; i < pos.size(); ++i) {
    if (!(pos[i] > pos[i - 1])) return false;
  }
  return true;
}

bool AllFinite(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double d) { return std::isfinite(d); });
}

bool UseCounting(const std::vector<double>& pos, const std::vector<double>& y,
                 internal::PairMethod method) {
  if (method == internal::PairMethod::kAllPairs) return false;
  if (method == internal::PairMethod::kAuto && y.size() <= internal::kAllPairsMax) return false;
  return StrictlyIncreasing(pos) && AllFinite(y) && AllFinite(pos);
}

// The median of the slopes (the mean of the middle two for an even count).
template <typename Pairs>
double MedianSlope(Pairs& pairs) {
  const uint64_t m = pairs.count();
  if (m == 0) return 0;
  const double upper = pairs.Select(m / 2 + 1);
  return m % 2 ? upper : (upper + pairs.Select(m / 2)) / 2;
}

// ---------------------------------------------------------------------------
// Exact autocorrelations of an integer series by number-theoretic transforms
// modulo two primes (c 2^k + 1 below 2^62), combined by the Chinese remainder
// theorem: exact for |c_k| below 2^120, O(n log n).

struct Montgomery {
  uint64_t p, np, r2;
  explicit Montgomery(uint64_t prime) : p(prime) {
    uint64_t inv = p;  // p^-1 mod 2^64 (Newton)
    for (int i = 0; i < 6; ++i) inv *= 2 - p * inv;
    np = ~inv + 1;
    const uint64_t r = static_cast<uint64_t>((static_cast<unsigned __int128>(1) << 64) % p);
    r2 = static_cast<uint64_t>(static_cast<unsigned __int128>(r) * r % p);
  }
  uint64_t Reduce(unsigned __int128 t) const {
    const uint64_t m = static_cast<uint64_t>(t) * np;
    const uint64_t u = static_cast<uint64_t>((t + static_cast<unsigned __int128>(m) * p) >> 64);
    return u >= p ? u - p : u;
  }
  uint64_t Mul(uint64_t a, uint64_t b) const {
    return Reduce(static_cast<unsigned __int128>(a) * b);
  }
  uint64_t To(uint64_t a) const { return Mul(a % p, r2); }
  uint64_t From(uint64_t a) const { return Reduce(a); }
  uint64_t Pow(uint64_t base_m, uint64_t e) const {  // Montgomery form in and out
    uint64_t r = To(1);
    for (; e > 0; e >>= 1, base_m = Mul(base_m, base_m)) {
      if (e & 1) r = Mul(r, base_m);
    }
    return r;
  }
};

// In-place transform of `a` (Montgomery form, size a power of two).
void Ntt(std::vector<uint64_t>& a, const Montgomery& mg, uint64_t generator, bool inverse) {
  const size_t n = a.size();
  for (size_t i = 1, j = 0; i < n; ++i) {
    size_t bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) std::swap(a[i], a[j]);
  }
  const uint64_t p = mg.p;
  for (size_t len = 2; len <= n; len <<= 1) {
    uint64_t w = mg.Pow(mg.To(generator), (p - 1) / len);
    if (inverse) w = mg.Pow(w, p - 2);
    for (size_t i = 0; i < n; i += len) {
      uint64_t wk = mg.To(1);
      for (size_t k = 0; k < len / 2; ++k) {
        const uint64_t u = a[i + k], v = mg.Mul(a[i + k + len / 2], wk);
        a[i + k] = u + v >= p ? u + v - p : u + v;
        a[i + k + len / 2] = u >= v ? u - v : u + p - v;
        wk = mg.Mul(wk, w);
      }
    }
  }
  if (inverse) {
    const uint64_t inv_n = mg.Pow(mg.To(n), p - 2);
    for (uint64_t& v : a) v = mg.Mul(v, inv_n);
  }
}

// c_k = sum_i a_i a_{i+k} (k = 0..n-1) modulo `prime`.
std::vector<uint64_t> AutocorrelationMod(const std::vector<int64_t>& a, uint64_t prime,
                                         uint64_t generator) {
  const size_t n = a.size();
  size_t size = 1;
  while (size < 2 * n) size <<= 1;
  const Montgomery mg(prime);
  auto residue = [&](int64_t v) {
    const uint64_t m = v >= 0 ? static_cast<uint64_t>(v) % prime
                              : (prime - static_cast<uint64_t>(-v) % prime) % prime;
    return mg.To(m);
  };
  std::vector<uint64_t> fa(size, 0), fb(size, 0);
  for (size_t i = 0; i < n; ++i) {
    fa[i] = residue(a[i]);
    fb[i] = residue(a[n - 1 - i]);
  }
  Ntt(fa, mg, generator, false);
  Ntt(fb, mg, generator, false);
  for (size_t i = 0; i < size; ++i) fa[i] = mg.Mul(fa[i], fb[i]);
  Ntt(fa, mg, generator, true);
  std::vector<uint64_t> c(n);
  for (size_t k = 0; k < n; ++k) c[k] = mg.From(fa[n - 1 - k]);
  return c;
}

// c_k = sum_i a_i a_{i+k} exactly (|c_k| < 2^120), as long double.
std::vector<long double> ExactAutocorrelation(const std::vector<int64_t>& a) {
  constexpr uint64_t kP1 = 4179340454199820289ULL;  // 29 * 2^57 + 1, generator 3
  constexpr uint64_t kP2 = 1945555039024054273ULL;  // 27 * 2^56 + 1, generator 5
  const std::vector<uint64_t> r1 = AutocorrelationMod(a, kP1, 3);
  uint64_t max_abs = 0;
  for (int64_t v : a) max_abs = std::max<uint64_t>(max_abs, v < 0 ? -static_cast<uint64_t>(v) : v);
  const long double bound = static_cast<long double>(max_abs) * max_abs * a.size();
  if (bound < 1e18L) {  // |c_k| < p1 / 2: one prime is exact
    std::vector<long double> c(a.size());
    for (size_t k = 0; k < a.size(); ++k) {
      c[k] = r1[k] > kP1 / 2 ? -static_cast<long double>(kP1 - r1[k])
                             : static_cast<long double>(r1[k]);
    }
    return c;
  }
  const std::vector<uint64_t> r2 = AutocorrelationMod(a, kP2, 5);
  // Garner: x = r1 + p1 * ((r2 - r1) p1^-1 mod p2), in [0, p1 p2).
  const Montgomery m2(kP2);
  const uint64_t p1_inv = m2.Pow(m2.To(kP1 % kP2), kP2 - 2);  // Montgomery form
  const unsigned __int128 prod = static_cast<unsigned __int128>(kP1) * kP2;
  std::vector<long double> c(a.size());
  for (size_t k = 0; k < a.size(); ++k) {
    const uint64_t d = (r2[k] + kP2 - r1[k] % kP2) % kP2;
    const uint64_t t = m2.From(m2.Mul(m2.To(d), p1_inv));
    const unsigned __int128 x = r1[k] + static_cast<unsigned __int128>(kP1) * t;
    c[k] = x > prod / 2 ? -static_cast<long double>(prod - x) : static_cast<long double>(x);
  }
  return c;
}

}  // namespace

double NormalUpperTail(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

double TheilSenSlope(const std::vector<double>& x) {
  return internal::TheilSenSlopeWith(Positions(x.size()), x, internal::PairMethod::kAuto);
}

double TheilSenSlopeXY(const std::vector<double>& pos, const std::vector<double>& y) {
  return internal::TheilSenSlopeWith(pos, y, internal::PairMethod::kAuto);
}

namespace {

// The weighted sums of the rank autocorrelations r_k of the detrended series
// (Hamed-Rao), and r_1.
struct RankLags {
  double sum = 0;     // over the significant lags: the test's correction
  double ci_sum = 0;  // over the initial run of positive lags: the interval's
  double r1 = 0;
};

RankLags RankAutocorrelation(const std::vector<double>& x, double slope, bool exact_transform) {
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
    // The numerators sum_i (R_i - mean)(R_{i+k} - mean) are a quarter of the
    // autocorrelations c_k of the integers a_i = 2 R_i - (n + 1) (ranks are
    // multiples of 1/2): computed exactly, directly (O(n^2); every partial
    // sum an integer below 2^53, so in any order) or by exact transforms
    // (O(n log n)).
    std::vector<int64_t> a(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = static_cast<int64_t>(std::llround(2 * ranks[i])) - static_cast<int64_t>(n + 1);
    }
    std::vector<long double> c;
    if (exact_transform) {
      c = ExactAutocorrelation(a);
    } else {
      const std::vector<double> ad(a.begin(), a.end());
      c.assign(n, 0);
      for (size_t k = 1; k + 2 < n; ++k) {
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        const size_t len = n - k;
        size_t i = 0;
        for (; i + 4 <= len; i += 4) {
          s0 += ad[i] * ad[i + k];
          s1 += ad[i + 1] * ad[i + 1 + k];
          s2 += ad[i + 2] * ad[i + 2 + k];
          s3 += ad[i + 3] * ad[i + 3 + k];
        }
        for (; i < len; ++i) s0 += ad[i] * ad[i + k];
        c[k] = static_cast<long double>((s0 + s1) + (s2 + s3));
      }
    }
    for (size_t k = 1; k + 2 < n; ++k) {
      const double num = static_cast<double>(c[k] / 4);
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

// The AR(1) coefficient from a lag-1 autocorrelation r1 of n points,
// bias-corrected (E[r1] ~ phi - (1 + 4 phi) / n), clamped to [0, most].
double Ar1Phi(double r1, double n, double most) {
  return std::min(most, std::max(0.0, (r1 * n + 1) / (n - 4)));
}

// A slowly mixing series has a long tail of small positive lags that the
// empirical sum truncates early; an AR(1) fitted to the lag-1 rank
// autocorrelation (Ar1Phi) carries that tail, phi^k, to every lag: its
// weighted sum.
double Ar1TailSum(double r1, size_t n) {
  const double nd = static_cast<double>(n);
  double ar_sum = 0;
  const double phi = Ar1Phi(r1, nd, 0.95);
  double pk = 1;
  for (size_t k = 1; k + 2 < n && phi > 0; ++k) {
    pk *= phi;
    if (pk < 1e-9) break;
    const double nk = static_cast<double>(n - k);
    ar_sum += nk * (nk - 1) * (nk - 2) * pk;
  }
  return ar_sum;
}

// Student's t 97.5 % quantile with `dof` degrees of freedom (at least 2),
// by its Cornish-Fisher expansion about the normal one.
double T975(double dof) {
  dof = std::max(2.0, dof);
  const double z3 = kZ975 * kZ975 * kZ975, z5 = z3 * kZ975 * kZ975;
  return kZ975 + (z3 + kZ975) / (4 * dof) + (5 * z5 + 16 * z3 + 3 * kZ975) / (96 * dof * dof);
}

// The 97.5 % quantile for the reported interval. Where autocorrelation
// inflates the variance, the inflation is itself estimated from few
// effectively independent points (n / factor): Student's t quantile with
// n / factor - 2 degrees of freedom instead of the normal one. Independent
// residuals (factor 1) keep the normal quantile: Var(S) is then known.
double ReportQuantile(double report_factor, double nd) {
  return report_factor > 1 ? T975(nd / report_factor - 2) : kZ975;
}

}  // namespace

namespace {

// Mann-Kendall S: the rising pairs minus the falling ones.
double MannKendallS(const std::vector<double>& x, bool counting) {
  const size_t n = x.size();
  if (counting) {  // O(n log n): the falling pairs are the inversions
    std::vector<double> key = x, buf;
    const auto [falling, ties] = Inversions(key, buf);
    const uint64_t pairs = static_cast<uint64_t>(n) * (n - 1) / 2;
    return static_cast<double>(pairs - ties - falling) - static_cast<double>(falling);
  }
  double s = 0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      const double d = x[j] - x[i];
      s += (d > 0) - (d < 0);
    }
  }
  return s;
}

// The statistics from Mann-Kendall S, its variance without the
// autocorrelation correction, the pairwise slopes and, given the slope, the
// rank autocorrelations of the residuals: the one path both TrendTest and
// TrendTestExact's segmented test take.
template <typename Pairs, typename LagsOf>
TrendResult TrendFrom(size_t n, double s, double var, Pairs& pairs, LagsOf lags_of) {
  TrendResult r;
  r.n = n;
  r.s = s;
  const uint64_t m = pairs.count();
  r.slope = MedianSlope(pairs);

  // Var(S), corrected (Hamed-Rao) for the autocorrelation of the ranks of
  // the detrended series.
  const double nd = static_cast<double>(n);
  const RankLags lags = lags_of(r.slope);
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
  if (m == 0) return r;

  // Gilbert's interval from the (corrected) variance of S.
  const double md = static_cast<double>(m);
  auto at_rank = [&](double rank) {  // 1-based, rounded and clamped
    double k = std::round(rank);
    k = std::min(std::max(k, 1.0), md);
    return pairs.Select(static_cast<uint64_t>(k));
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

template <typename Pairs>
TrendResult TrendOf(const std::vector<double>& x, Pairs& pairs, bool counting) {
  const size_t n = x.size();
  const double nd = static_cast<double>(n);
  const double var = (nd * (nd - 1) * (2 * nd + 5) - TieTerm(x)) / 18;
  return TrendFrom(n, MannKendallS(x, counting), var, pairs,
                   [&](double slope) { return RankAutocorrelation(x, slope, n > kDirectLagsMax); });
}

// A constant series (the window of most call sites: nothing allocated or
// freed in it), whose statistics need no pair: every pairwise difference is
// 0, so S = 0 and every slope is 0; one tie group of n values, so
// Var(S) = (n(n-1)(2n+5) - n(n-1)(2n+5)) / 18 = 0 and z = 0, p = 1/2; the
// ranks are all equal, so no rank autocorrelation (factor 1). What the
// general path computes for it, bit for bit (trend_test checks), without
// its O(n log n) work.
bool Constant(const std::vector<double>& x) {
  if (!std::isfinite(x[0])) return false;
  for (double v : x) {
    if (!(v == x[0])) return false;
  }
  return true;
}

TrendResult ConstantTrend(size_t n) {
  TrendResult r;
  r.n = n;
  r.hamed_rao = 1;
  r.p_increasing = NormalUpperTail(0);
  return r;
}

}  // namespace

namespace internal {

TrendResult TrendTestWith(const std::vector<double>& x, PairMethod method) {
  const size_t n = x.size();
  if (n < 3) {
    TrendResult r;
    r.n = n;
    r.slope = r.slope_low = r.slope_high = r.ci_low = r.ci_high =
        TheilSenSlopeWith(Positions(n), x, method);
    return r;
  }
  if (method == PairMethod::kAuto && Constant(x)) return ConstantTrend(n);
  const std::vector<double> pos = Positions(n);
  if (UseCounting(pos, x, method)) {
    CountingPairs pairs(pos, x);
    return TrendOf(x, pairs, true);
  }
  AllPairs pairs(pos, x);
  return TrendOf(x, pairs, false);
}

double TheilSenSlopeWith(const std::vector<double>& pos, const std::vector<double>& y,
                         PairMethod method) {
  if (y.size() < 2 || pos.size() != y.size()) return 0;
  if (UseCounting(pos, y, method)) {
    CountingPairs pairs(pos, y);
    return MedianSlope(pairs);
  }
  AllPairs pairs(pos, y);
  return MedianSlope(pairs);
}

}  // namespace internal

TrendResult TrendTest(const std::vector<double>& x) {
  return internal::TrendTestWith(x, internal::PairMethod::kAuto);
}

namespace {

// The median of v (the mean of the middle two for an even count); reorders v.
double MedianOf(std::vector<double>& v) {
  const size_t h = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(h), v.end());
  const double upper = v[h];
  if (v.size() % 2) return upper;
  return (upper + *std::max_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(h))) / 2;
}

}  // namespace

namespace {

// Level shifts an exact series of `steps` steps may set aside: at most
// max(2, steps / 16), summing to at most kShiftShare of the other steps'
// growth (the levels' test sums every jump, a pile its one-off falls; no
// cache emptied when full passes that: docs/analysis.md "Level shifts").
size_t MostShifts(size_t steps) { return std::max<size_t>(2, steps / 16); }
constexpr double kShiftShare = 0.4;

TrendResult TrendTestLevels(const std::vector<double>& x) {
  const size_t n = x.size();
  if (n < 10 || n > kSegmentedMax || !AllFinite(x)) return TrendTest(x);
  std::vector<double> d(n - 1);
  for (size_t i = 0; i + 1 < n; ++i) d[i] = x[i + 1] - x[i];
  std::vector<double> work = d;
  const double m = MedianOf(work);
  if (!(m > 0)) return TrendTest(x);
  for (size_t i = 0; i < work.size(); ++i) work[i] = std::fabs(d[i] - m);
  const double robust_sd = 1.4826 * MedianOf(work);
  const double threshold = std::max(8 * robust_sd, m);
  const size_t most = MostShifts(n - 1);
  std::vector<size_t> starts = {0};
  double jumps = 0, regular = 0, sum = 0;
  for (size_t i = 0; i + 1 < n; ++i) {
    const double dev = d[i] - m;
    if (std::fabs(dev) <= threshold) {
      regular += d[i];
      continue;
    }
    starts.push_back(i + 1);
    jumps += std::fabs(d[i]);
    sum += dev;
  }
  const size_t count = starts.size() - 1;
  if (count == 0 || count > most || !(jumps <= kShiftShare * regular)) return TrendTest(x);
  // The segments between the jumps, tested as blocks of one series (as the
  // seasonal Kendall test does its seasons): S and Var(S) summed over them,
  // the slope and its interval from the pairs within a segment only, so no
  // shift's size enters them; the autocorrelation of the residuals taken over
  // the whole series with each segment's median residual aligned.
  double s = 0, var = 0;
  for (size_t g = 0; g < starts.size(); ++g) {
    const size_t end = g + 1 < starts.size() ? starts[g + 1] : n;
    const std::vector<double> seg(x.begin() + static_cast<ptrdiff_t>(starts[g]),
                                  x.begin() + static_cast<ptrdiff_t>(end));
    const double k = static_cast<double>(seg.size());
    s += MannKendallS(seg, false);
    var += (k * (k - 1) * (2 * k + 5) - TieTerm(seg)) / 18;
  }
  AllPairs pairs(Positions(n), x, starts);
  TrendResult r = TrendFrom(n, s, var, pairs, [&](double slope) {
    std::vector<double> aligned(n);
    for (size_t g = 0; g < starts.size(); ++g) {
      const size_t end = g + 1 < starts.size() ? starts[g + 1] : n;
      std::vector<double> res;
      for (size_t i = starts[g]; i < end; ++i) res.push_back(x[i] - slope * static_cast<double>(i));
      const double offset = MedianOf(res);
      for (size_t i = starts[g]; i < end; ++i) aligned[i] = x[i] - offset;
    }
    return RankAutocorrelation(aligned, slope, false);
  });
  const double net = (x[n - 1] - x[0]) / static_cast<double>(n - 1);
  r.slope_low = std::min(r.slope_low, net);
  r.slope_high = std::max(r.slope_high, net);
  r.ci_low = std::min(r.ci_low, net);
  r.ci_high = std::max(r.ci_high, net);
  r.level_shifts = count;
  r.level_shift_sum = sum;
  return r;
}

// One-off rises among a pile's steps: a step more than 3 times every other
// (the interpreter's start-up in the first row, a buffer kept once), at most
// max(2, steps / 16) of them, to set aside as level shifts. A heavy tail's
// largest step is not (an exponential step's largest of 59 is 3 times the
// next in 0.25 % of windows). Returns the smallest of them (steps at or
// above it are the rises; infinity: none) and sets `count`.
double OneOffRises(const std::vector<double>& steps, size_t* count) {
  std::vector<double> sorted = steps;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  const size_t most = MostShifts(steps.size());
  size_t k = 0;
  while (k < most && k + 1 < sorted.size() && sorted[k] > 0 && sorted[k] > 3 * sorted[k + 1]) ++k;
  *count = k;
  return k > 0 ? sorted[k - 1] : std::numeric_limits<double>::infinity();
}

// One-off falls among a pile's steps, given its one-off rises' `cut`: the
// falls larger than the median of the other steps (a collection of what
// piled up over several steps), to set aside as level shifts when, with the
// rises, they are at most max(2, steps / 16) and sum to at most 0.4 of the
// steps left: the levels' bound, which no cache emptied when full passes.
// Returns the largest of them (steps at or below it are the falls; minus
// infinity: none) and adds them to `count`.
double OneOffFalls(const std::vector<double>& steps, double cut, size_t* count) {
  std::vector<double> rest;
  for (double d : steps) {
    if (d < cut) rest.push_back(d);
  }
  std::vector<double> work = rest;
  const double median = MedianOf(work);
  constexpr double kNone = -std::numeric_limits<double>::infinity();
  if (!(median > 0)) return kNone;
  size_t falls = 0;
  double fallen = 0, kept = 0, largest = kNone;
  for (double d : rest) {
    if (-d > median) {
      ++falls;
      fallen -= d;
      largest = std::max(largest, d);
    } else {
      kept += d;
    }
  }
  const size_t most = MostShifts(steps.size());
  if (falls == 0 || *count + falls > most || !(fallen <= kShiftShare * kept)) return kNone;
  *count += falls;
  return largest;
}

// The interval of a pile's rate, from its steps. Each step of an exact
// series that only piles up (a leak of a varying amount a step: batches of
// varying size, variable-length text) adds an independent amount, so the
// series is a random walk with drift: its residuals about any line wander,
// and the levels' interval, which reads that as noise persisting over the
// whole series, widened to the smallest and the largest step (a heap piling
// 0-16 KiB a step, 12 KiB on average, read [-32 B, 22.7 KiB]: one small free
// took it below 0). The steps themselves are then the independent draws:
// their mean is the rate, with Student's t interval, the variance inflated
// by (1 + r1) / (1 - r1) for a positive lag-1 autocorrelation r1 of the
// steps (bursts), the degrees of freedom deflated by the same factor. The
// trend test's p-value stays the levels'. A large step of a pile is one of
// its draws (a heavy tail), not a level shift to set aside, unless it rises
// more than 3 times every other step; a fall larger than the median step (a
// collection) is set aside when few and small enough (OneOffFalls).
void PileInterval(const std::vector<double>& x, bool one_off_falls, TrendResult* r) {
  const size_t n = x.size();
  if (n < 10 || !AllFinite(x)) return;
  std::vector<double> steps(n - 1);
  for (size_t i = 0; i + 1 < n; ++i) steps[i] = x[i + 1] - x[i];
  size_t shifts = 0;
  const double cut = OneOffRises(steps, &shifts);
  const double floor =
      one_off_falls ? OneOffFalls(steps, cut, &shifts) : -std::numeric_limits<double>::infinity();
  auto one_off = [&](double d) { return d >= cut || d <= floor; };
  std::vector<double> regular;
  double rises = 0, falls = 0, largest_fall = 0, sum = 0, shift_sum = 0;
  for (double d : steps) {
    if (one_off(d)) {
      shift_sum += d;
      continue;
    }
    regular.push_back(d);
    sum += d;
    (d > 0 ? rises : falls) += std::fabs(d);
    largest_fall = std::max(largest_fall, -d);
  }
  const size_t k = regular.size();
  const double kd = static_cast<double>(k);
  const double mean = sum / kd;
  // A pile adds at most steps: its median step is at least a third of its
  // mean (a step uniform in [0, 2m] or exponential has median m or 0.69 m;
  // a third leaves room for a sample's median to fall short). A staircase
  // (most steps flat, a few jumps carrying the mean: RSS taking pages, a
  // buffer kept every third step) has median 0, and the t interval of a
  // mean carried by a few jumps does not hold its rate (its levels' interval
  // does, or says it cannot). And, its one-off falls aside, it gives back
  // little: its falls (a few transient blocks freed) are each under its
  // median step and come to at most a tenth of its rises (a buffer replaced
  // by a smaller one every few steps: no pile).
  std::vector<double> work = regular;
  const double median = MedianOf(work);
  if (!(mean > 0) || !(10 * falls <= rises) || !(3 * median >= mean) || !(largest_fall <= median)) {
    return;
  }
  double ss = 0, lag = 0, last = 0;
  bool have_last = false;
  for (double d : steps) {
    if (one_off(d)) {  // a jump's neighbours are not made adjacent
      have_last = false;
      continue;
    }
    const double e = d - mean;
    ss += e * e;
    if (have_last) lag += e * last;
    last = e;
    have_last = true;
  }
  // A line plus stationary noise has steps that alternate (lag-1
  // autocorrelation -1/2: each step's noise is undone by the next), a pile's
  // are independent (0) or come in bursts (above 0): the levels' interval
  // holds the former's rate, the steps' the latter's. (r1 bias-corrected as
  // for the levels.)
  if (!(ss > 0) || lag / ss < -0.25) return;
  const double r1 = Ar1Phi(lag / ss, kd, 0.9);
  const double factor = (1 + r1) / (1 - r1);
  const double se = std::sqrt(ss / (kd - 1) / kd * factor);
  const double half = T975(kd / factor - 1) * se;
  r->slope = mean;
  r->slope_low = r->ci_low = mean - half;
  r->slope_high = r->ci_high = mean + half;
  r->level_shifts = shifts;
  // (Their departures from the median step, as the levels' test sums them.)
  r->level_shift_sum = shift_sum - static_cast<double>(shifts) * median;
  if (shifts > 0) {  // the rate if such events recur, as for the levels
    const double net = (x[n - 1] - x[0]) / static_cast<double>(n - 1);
    r->slope_low = r->ci_low = std::min(r->ci_low, net);
    r->slope_high = r->ci_high = std::max(r->ci_high, net);
  }
}

}  // namespace

TrendResult TrendTestExact(const std::vector<double>& x, bool piles, bool one_off_falls) {
  TrendResult r = TrendTestLevels(x);
  if (piles) PileInterval(x, one_off_falls, &r);
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

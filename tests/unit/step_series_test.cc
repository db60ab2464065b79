// StepSeries (src/analysis/step_series.h): the change-point storage of the
// per-site step series reads back exactly what a dense vector holds, for
// every way the analysis and the tests write it, and stores only changes.

#include "src/analysis/step_series.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace memstep::analysis {
namespace {

bool SameBits(const StepSeries& s, const std::vector<double>& d) {
  if (s.size() != d.size()) return false;
  size_t k = 0;
  for (double v : s) {
    if (!StepSeries::Same(v, d[k])) return false;
    if (!StepSeries::Same(s[k], d[k])) return false;
    ++k;
  }
  return k == d.size() && StepSeries::Same(s[d.size()], 0.0);
}

TEST(StepSeriesTest, InOrderSetsMatchADenseVector) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t rows = 1 + rng() % 60;
    StepSeries s(rows);
    std::vector<double> d(rows, 0.0);
    // Rows in increasing order, some skipped (left 0), values often repeated.
    for (size_t k = 0; k < rows; ++k) {
      if (rng() % 4 == 0) continue;
      const double v = rng() % 3 == 0 ? 0.0 : static_cast<double>(rng() % 4) * 1.5;
      s.Set(k, v);
      d[k] = v;
      ASSERT_TRUE(SameBits(s, d)) << trial << " row " << k;
    }
    EXPECT_EQ(s.Dense(), d);
    EXPECT_TRUE(s == d);
    EXPECT_TRUE(StepSeries::FromDense(d) == s);
  }
}

TEST(StepSeriesTest, AnyOrderSetsResizeAndShift) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    StepSeries s;
    std::vector<double> d;
    for (int op = 0; op < 40; ++op) {
      const size_t k = rng() % 30;
      const double v = static_cast<double>(rng() % 3);
      switch (rng() % 4) {
        case 0:
        case 1:  // Set anywhere, past the end too
          s.Set(k, v);
          if (k >= d.size()) d.resize(k + 1, 0.0);
          d[k] = v;
          break;
        case 2:
          s.resize(k);
          d.resize(k, 0.0);
          break;
        default:
          s.assign(k, v);
          d.assign(k, v);
      }
      ASSERT_TRUE(SameBits(s, d)) << trial << " op " << op;
    }
    const size_t offset = rng() % 5, rows = d.size() + offset + rng() % 5;
    std::vector<double> shifted(rows, 0.0);
    for (size_t k = 0; k < d.size(); ++k) shifted[offset + k] = d[k];
    EXPECT_TRUE(SameBits(s.Shifted(offset, rows), shifted)) << trial;
  }
}

TEST(StepSeriesTest, KeepsBitsAndStoresOnlyChanges) {
  StepSeries s(1000);
  s.Set(3, -0.0);  // differs from 0.0 in its bits: kept
  s.Set(4, std::nan(""));
  s.Set(5, 7.0);
  for (size_t k = 6; k < 1000; ++k) s.Set(k, 7.0);
  EXPECT_TRUE(std::signbit(s[3]));
  EXPECT_TRUE(std::isnan(s[4]));
  EXPECT_EQ(s[999], 7.0);
  EXPECT_EQ(s.changes().size(), 3u);  // -0.0 at 3, NaN at 4, 7 from 5 on
  StepSeries zeros(100000);
  EXPECT_TRUE(zeros.changes().empty());
  EXPECT_EQ(zeros[99999], 0.0);
}

}  // namespace
}  // namespace memstep::analysis

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

TEST(ChangedSitesTest, ListsEachSiteOnceUntilCleared) {
  ChangedSites c;
  c.Add(5);
  c.Add(2);
  c.Add(5);
  EXPECT_EQ(c.list(), (std::vector<uint32_t>{5, 2}));
  c.Clear();
  EXPECT_TRUE(c.list().empty());
  c.Add(5);
  EXPECT_EQ(c.list(), (std::vector<uint32_t>{5}));
}

// StepEndSeries gives, bit for bit, what the dense way gives (every site's
// row Set at every step end), when only the changed sites (and a few more)
// are recorded: step ends in row order, rows revisited, rows with no step
// end, sites that appear late, -0.0 and NaN values; fixed seed.
TEST(StepEndSeriesTest, MatchesSettingEverySiteAtEveryStepEnd) {
  std::mt19937_64 rng(11);
  const double kValues[] = {0.0, -0.0, 1.5, 3.0, std::nan(""), 1e300};
  for (int trial = 0; trial < 300; ++trial) {
    const size_t rows = rng() % 40;
    const int order = trial % 3;  // 0: rows in order, 1: random rows, 2: in order with gaps
    const size_t ends = order == 1 ? rng() % 60 : rows;
    std::vector<double> value;  // the sites' current values
    std::vector<StepSeries> dense;
    StepEndSeries rec;
    size_t row = 0, sites_at_end = 0;
    for (size_t j = 0; j < ends; ++j) {
      while (value.size() < 30 && rng() % 3 == 0) value.push_back(0.0);  // new sites
      std::vector<bool> changed(value.size(), false);
      for (size_t s = 0; s < value.size(); ++s) {
        if (rng() % 4 == 0) {
          value[s] = kValues[rng() % 6];
          changed[s] = true;
        } else if (rng() % 20 == 0) {
          changed[s] = true;  // listed but unchanged: recording it is harmless
        }
      }
      if (order == 1) {
        row = rng() % (rows + 2);  // some past the last row: dropped
      } else if (order == 2 && rng() % 5 == 0) {
        ++row;  // a row with no step end
      }
      if (order != 1 && row >= rows) break;
      dense.resize(value.size(), StepSeries(rows));
      for (size_t s = 0; s < value.size(); ++s) {
        if (row < rows) dense[s].Set(row, value[s]);
      }
      rec.EndStep(row);
      for (size_t s = 0; s < value.size(); ++s) {
        if (changed[s] || j == 0) rec.Record(static_cast<uint32_t>(s), value[s]);
      }
      sites_at_end = value.size();
      if (order != 1) ++row;
    }
    // Sites first recorded after a step end that had them: Record only when
    // changed is enough, since the value before the first Record is 0.
    const std::vector<StepSeries> got = rec.Finish(rows, sites_at_end);
    ASSERT_EQ(got.size(), dense.size()) << trial;
    for (size_t s = 0; s < got.size(); ++s) {
      ASSERT_TRUE(SameBits(got[s], dense[s].Dense())) << "trial " << trial << " site " << s;
      ASSERT_TRUE(got[s] == dense[s]) << "trial " << trial << " site " << s;  // same change points
    }
  }
}

// Memory follows the changes: 10,000 sites, 2,000 step ends in row order,
// 3 sites changing per step: about 6,000 change points, not 20 million rows.
TEST(StepEndSeriesTest, StoresOnlyChanges) {
  const size_t kSites = 10000, kRows = 2000;
  StepEndSeries rec;
  for (size_t row = 0; row < kRows; ++row) {
    rec.EndStep(row);
    for (size_t k = 0; k < 3; ++k) {
      const auto site = static_cast<uint32_t>((row * 3 + k) * 7919 % kSites);
      rec.Record(site, static_cast<double>(row + 1));
    }
  }
  const std::vector<StepSeries> got = rec.Finish(kRows, kSites);
  size_t changes = 0;
  for (const StepSeries& s : got) {
    changes += s.changes().size();
    ASSERT_EQ(s.size(), kRows);
  }
  EXPECT_EQ(changes, kRows * 3);
  // Site 0 changes at row 0 (value 1) and keeps it until its next change.
  EXPECT_EQ(got[0][0], 1.0);
  EXPECT_EQ(got[0][1], 1.0);
}

}  // namespace
}  // namespace memstep::analysis

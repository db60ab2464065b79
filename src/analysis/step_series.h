// A per-step series stored by its change points: one (row, value) pair where
// the value differs from the row before (the rows before the first pair are
// 0). A call site's live bytes at each step end change only in the steps
// where one of its sampled allocations was made or freed, and most sites
// touch few steps: the series then costs memory in the number of changes,
// not in the number of steps (issue 11 "Scale"; docs/analysis.md "Memory of
// the per-site series"). Reads give exactly the values stored (compared bit
// for bit, so -0.0 and NaN survive), so a dense vector and this give the same
// report.
//
// Cost: Set in increasing rows O(1) amortized (an earlier row: O(changes));
// operator[] O(log changes); iteration over all rows O(rows + changes).

#ifndef MEMSTEP_SRC_ANALYSIS_STEP_SERIES_H_
#define MEMSTEP_SRC_ANALYSIS_STEP_SERIES_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <utility>
#include <vector>

namespace memstep::analysis {

class StepSeries {
 public:
  struct Change {
    uint32_t row;
    double value;
  };

  StepSeries() = default;
  // `rows` zeros.
  explicit StepSeries(size_t rows) : rows_(rows) {}
  static StepSeries FromDense(const std::vector<double>& v) {
    StepSeries s(v.size());
    for (size_t k = 0; k < v.size(); ++k) {
      if (!Same(v[k], s.Last())) s.changes_.push_back({static_cast<uint32_t>(k), v[k]});
    }
    return s;
  }

  size_t size() const { return rows_; }
  bool empty() const { return rows_ == 0; }
  // The stored change points, rows increasing.
  const std::vector<Change>& changes() const { return changes_; }

  // `rows` rows of `value` (vector::assign).
  void assign(size_t rows, double value) {
    rows_ = rows;
    changes_.clear();
    if (rows > 0 && !Same(value, 0.0)) changes_.push_back({0, value});
  }
  // Grows with zeros or drops rows (vector::resize).
  void resize(size_t rows) {
    if (rows < rows_) {
      while (!changes_.empty() && changes_.back().row >= rows) changes_.pop_back();
    } else if (rows > rows_ && !Same(Last(), 0.0)) {
      changes_.push_back({static_cast<uint32_t>(rows_), 0.0});
    }
    rows_ = rows;
  }

  // Row k's value (0 past the end).
  double operator[](size_t k) const {
    if (k >= rows_) return 0.0;
    auto it = std::upper_bound(changes_.begin(), changes_.end(), k,
                               [](size_t row, const Change& c) { return row < c.row; });
    return it == changes_.begin() ? 0.0 : std::prev(it)->value;
  }

  // Sets row k (grows the series to k + 1 rows when shorter).
  void Set(size_t k, double value) {
    if (k >= rows_) {  // past the end: the rows between are 0
      if (k > rows_ && !Same(Last(), 0.0)) {
        changes_.push_back({static_cast<uint32_t>(rows_), 0.0});
      }
      rows_ = k + 1;
      if (!Same(value, Last())) changes_.push_back({static_cast<uint32_t>(k), value});
      return;
    }
    if (!changes_.empty() && changes_.back().row > k) {
      // A change after row k: rebuild densely (rare: tests, small series).
      std::vector<double> dense = Dense();
      dense[k] = value;
      *this = FromDense(dense);
      return;
    }
    // The common case, rows set in increasing order: every change is at or
    // before row k, and the rows after k keep the value they had.
    const double after = Last();
    if (!changes_.empty() && changes_.back().row == k) changes_.pop_back();
    if (!Same(value, Last())) changes_.push_back({static_cast<uint32_t>(k), value});
    if (k + 1 < rows_ && !Same(after, value)) {
      changes_.push_back({static_cast<uint32_t>(k + 1), after});
    }
  }

  std::vector<double> Dense() const {
    std::vector<double> out;
    out.reserve(rows_);
    for (double v : *this) out.push_back(v);
    return out;
  }

  // Every row's value in order.
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = double;
    using difference_type = std::ptrdiff_t;
    using pointer = const double*;
    using reference = double;
    const_iterator(const StepSeries* s, size_t row) : s_(s), row_(row) {
      while (next_ < s_->changes_.size() && s_->changes_[next_].row <= row_) {
        value_ = s_->changes_[next_++].value;
      }
    }
    double operator*() const { return value_; }
    const_iterator& operator++() {
      ++row_;
      if (next_ < s_->changes_.size() && s_->changes_[next_].row == row_) {
        value_ = s_->changes_[next_++].value;
      }
      return *this;
    }
    bool operator==(const const_iterator& o) const { return row_ == o.row_; }
    bool operator!=(const const_iterator& o) const { return row_ != o.row_; }

   private:
    const StepSeries* s_;
    size_t row_;
    size_t next_ = 0;
    double value_ = 0.0;
  };
  const_iterator begin() const { return const_iterator(this, 0); }
  const_iterator end() const { return const_iterator(this, rows_); }

  // This series moved `offset` rows later in a series of `rows` rows (the
  // rows before it 0).
  StepSeries Shifted(size_t offset, size_t rows) const {
    StepSeries s(rows);
    for (const Change& c : changes_) {
      if (c.row + offset < rows)
        s.changes_.push_back({static_cast<uint32_t>(c.row + offset), c.value});
    }
    if (rows_ + offset < rows && !Same(s.Last(), 0.0)) {
      s.changes_.push_back({static_cast<uint32_t>(rows_ + offset), 0.0});
    }
    return s;
  }

  // A series of `rows` rows from its change points: rows increasing and
  // below `rows`, each value differing (bit for bit) from the one before
  // (the first from 0). O(changes).
  static StepSeries FromChanges(size_t rows, std::vector<Change> changes) {
    StepSeries s(rows);
    s.changes_ = std::move(changes);
    return s;
  }

  // Frees what the change points no longer use.
  void ShrinkToFit() { changes_.shrink_to_fit(); }

  friend bool operator==(const StepSeries& a, const std::vector<double>& b) {
    if (a.size() != b.size()) return false;
    size_t k = 0;
    for (double v : a) {
      if (!(v == b[k++])) return false;
    }
    return true;
  }
  friend bool operator==(const StepSeries& a, const StepSeries& b) {
    if (a.rows_ != b.rows_ || a.changes_.size() != b.changes_.size()) return false;
    for (size_t i = 0; i < a.changes_.size(); ++i) {
      if (a.changes_[i].row != b.changes_[i].row || !Same(a.changes_[i].value, b.changes_[i].value))
        return false;
    }
    return true;
  }

  // Bit-for-bit equality (0.0 and -0.0 differ; a NaN equals itself).
  static bool Same(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

 private:
  double Last() const { return changes_.empty() ? 0.0 : changes_.back().value; }

  size_t rows_ = 0;
  std::vector<Change> changes_;
};

// The sites changed since the last Clear(), each listed once, in the order of
// their first change. A replay calls Add before it changes a site, so a pass
// can visit at a step end only the sites that changed in the step (issue 11:
// the work follows the changes, not steps x sites). Add O(1) amortized,
// Clear O(listed). Memory: one byte per site plus the list.
class ChangedSites {
 public:
  void Add(uint32_t site) {
    if (site >= listed_.size()) listed_.resize(static_cast<size_t>(site) + 1, 0);
    if (listed_[site] != 0) return;
    listed_[site] = 1;
    list_.push_back(site);
  }
  const std::vector<uint32_t>& list() const { return list_; }
  void Clear() {
    for (uint32_t s : list_) listed_[s] = 0;
    list_.clear();
  }

 private:
  std::vector<uint8_t> listed_;
  std::vector<uint32_t> list_;
};

// Per-site series of a value read at step ends, recorded for the sites that
// may have changed only. Finish gives what setting every site's row at every
// step end would give (the dense way: StepSeries(rows) per site, then
// Set(row, value) for every site at every step end): row r holds a site's
// value at the last step end in row r, and 0 when no step end fell in row r
// or the site did not exist yet. A site not recorded at a step end keeps the
// value recorded before (0 before its first).
//
// Worked example (3 rows, step ends in rows 0, 1, 2; site 4 changed in
// steps 0 and 2 only):
//   EndStep(0); Record(4, 8)       site 4: (end 0, 8)
//   EndStep(1)                     nothing recorded: site 4 still 8
//   EndStep(2); Record(4, 0)       site 4: (end 0, 8) (end 2, 0)
//   Finish(3, 5)[4]                rows 8, 8, 0: changes (0, 8) (2, 0)
//
// Cost: Record O(1) amortized. Finish: when the step ends came in row order,
// one per row (the usual case), O(sites + changes); otherwise (rows revisited
// or skipped) O(rows log changes) per site with a change, exact either way.
// Memory: one change point per recorded change, plus one row per step end.
class StepEndSeries {
 public:
  // A step end in row `row`: the Records that follow are its values.
  void EndStep(size_t row) { row_of_end_.push_back(row); }
  // Site `site`'s value at the current step end (after an EndStep).
  void Record(uint32_t site, double value) {
    if (site >= by_site_.size()) by_site_.resize(static_cast<size_t>(site) + 1);
    std::vector<StepSeries::Change>& c = by_site_[site];
    const double last = c.empty() ? 0.0 : c.back().value;
    if (StepSeries::Same(value, last)) return;
    const auto end = static_cast<uint32_t>(row_of_end_.size() - 1);
    if (!c.empty() && c.back().row == end) {  // recorded twice at one step end
      c.pop_back();
      if (StepSeries::Same(value, c.empty() ? 0.0 : c.back().value)) return;
    }
    c.push_back({end, value});
  }
  size_t step_ends() const { return row_of_end_.size(); }

  // The series of sites [0, sites), `rows` rows each; step ends in a row at
  // or past `rows` are dropped. Leaves this empty.
  std::vector<StepSeries> Finish(size_t rows, size_t sites) {
    std::vector<StepSeries> out(sites, StepSeries(rows));
    // last[r]: the last step end in row r (-1: none).
    std::vector<int64_t> last(rows, -1);
    for (size_t j = 0; j < row_of_end_.size(); ++j) {
      if (row_of_end_[j] < rows) last[row_of_end_[j]] = static_cast<int64_t>(j);
    }
    bool in_order = true;
    for (size_t r = 0; r < rows && in_order; ++r) {
      in_order = last[r] >= 0 && (r == 0 || last[r] > last[r - 1]);
    }
    // In order: the change at step end j first shows in the first row whose
    // last step end is j or later.
    std::vector<uint32_t> first_row;
    if (in_order) {
      first_row.resize(row_of_end_.size());
      size_t r = 0;
      for (size_t j = 0; j < row_of_end_.size(); ++j) {
        while (r < rows && last[r] < static_cast<int64_t>(j)) ++r;
        first_row[j] = static_cast<uint32_t>(r);
      }
    }
    for (size_t s = 0; s < sites && s < by_site_.size(); ++s) {
      std::vector<StepSeries::Change> c = std::move(by_site_[s]);
      if (c.empty()) continue;
      out[s] = in_order ? InOrder(c, first_row, rows) : Revisited(c, last, rows);
    }
    by_site_.clear();
    row_of_end_.clear();
    return out;
  }

 private:
  static StepSeries InOrder(const std::vector<StepSeries::Change>& c,
                            const std::vector<uint32_t>& first_row, size_t rows) {
    std::vector<StepSeries::Change> out;
    auto before_back = [&out] { return out.size() >= 2 ? out[out.size() - 2].value : 0.0; };
    for (const StepSeries::Change& ch : c) {
      const uint32_t r = first_row[ch.row];
      if (r >= rows) break;                       // first_row does not decrease
      if (!out.empty() && out.back().row == r) {  // a later value of that row
        out.back().value = ch.value;
        if (StepSeries::Same(ch.value, before_back())) out.pop_back();
      } else if (!StepSeries::Same(ch.value, out.empty() ? 0.0 : out.back().value)) {
        out.push_back({r, ch.value});
      }
    }
    out.shrink_to_fit();
    return StepSeries::FromChanges(rows, std::move(out));
  }
  static StepSeries Revisited(const std::vector<StepSeries::Change>& c,
                              const std::vector<int64_t>& last, size_t rows) {
    std::vector<double> dense(rows, 0.0);
    for (size_t r = 0; r < rows; ++r) {
      if (last[r] < 0) continue;
      auto it =
          std::upper_bound(c.begin(), c.end(), static_cast<uint64_t>(last[r]),
                           [](uint64_t j, const StepSeries::Change& ch) { return j < ch.row; });
      if (it != c.begin()) dense[r] = std::prev(it)->value;
    }
    StepSeries s = StepSeries::FromDense(dense);
    s.ShrinkToFit();
    return s;
  }

  std::vector<size_t> row_of_end_;
  std::vector<std::vector<StepSeries::Change>> by_site_;  // Change::row: the step end
};

// A site's allocations live at the end of the run that were made in one row
// (their cohort): estimated bytes, sampled allocations and the bytes'
// Horvitz-Thompson variance. Kept only for the rows that have one.
struct CohortCell {
  uint32_t row = 0;
  double bytes = 0;
  double samples = 0;
  double var = 0;
  double min_interval = 0;  // the smallest T its samples were drawn with (0: none, or p = 1)
  double block = 0;         // its largest block recorded with p = 1 (0: none)
};

// A replay's sampled allocations live now, summed per site and cohort:
// `for_each_live(fn)` calls fn(site, cohort, estimated bytes, 1 / p, requested size) for each
// (HeapReplay::ForEachLive, DeviceReplay::ForEachLive); cohorts >= `rows` and
// sites >= `sites` are left out; `expected`: how many there are, to reserve.
// Each cell's variance is the Horvitz-Thompson one, (s/p)^2 (1 - p) per
// sample. The replays list their allocations in a hash table's order, which
// changes from run to run (the table's hash is seeded per process): summed in
// that order, the sums' last bits changed too (JSON `retained_bytes` differed
// between two reports of one trace). Sorted first, every run adds them in one
// order.
template <typename ForEach>
std::vector<std::vector<CohortCell>> LiveCohorts(ForEach for_each_live, size_t sites, size_t rows,
                                                 size_t expected) {
  struct Live {
    uint32_t site, cohort;
    uint64_t bytes, count;  // the doubles' bits: a total order, NaN included
    uint64_t size;          // the request
  };
  std::vector<Live> live;
  live.reserve(expected);
  for_each_live([&](uint32_t site, uint32_t cohort, double bytes, double count, uint64_t size) {
    if (cohort >= rows || site >= sites) return;
    Live l{site, cohort, 0, 0, size};
    std::memcpy(&l.bytes, &bytes, sizeof bytes);
    std::memcpy(&l.count, &count, sizeof count);
    live.push_back(l);
  });
  std::sort(live.begin(), live.end(), [](const Live& a, const Live& b) {
    if (a.site != b.site) return a.site < b.site;
    if (a.cohort != b.cohort) return a.cohort < b.cohort;
    if (a.bytes != b.bytes) return a.bytes < b.bytes;
    if (a.count != b.count) return a.count < b.count;
    return a.size < b.size;
  });
  std::vector<std::vector<CohortCell>> out(sites);
  for (const Live& l : live) {
    double bytes, count;
    std::memcpy(&bytes, &l.bytes, sizeof bytes);
    std::memcpy(&count, &l.count, sizeof count);
    std::vector<CohortCell>& cells = out[l.site];
    if (cells.empty() || cells.back().row != l.cohort) cells.push_back(CohortCell{l.cohort});
    CohortCell& c = cells.back();
    c.bytes += bytes;
    c.samples += 1;
    // Var of one sample's estimate size/p: (size/p)^2 (1 - p), p = 1/count.
    if (count > 1) {
      c.var += bytes * bytes * (1 - 1 / count);
      // Its T, from p = 1 - exp(-(size + 1) / T) with the request's size
      // (its bytes are usable bytes / p: replay.h UsableBytes).
      const double p = 1 / count;
      const double T = (static_cast<double>(l.size) + 1) / -std::log1p(-p);
      if (std::isfinite(T) && T > 0 && (c.min_interval == 0 || T < c.min_interval)) {
        c.min_interval = T;
      }
    } else {
      c.block = std::max(c.block, bytes);
    }
  }
  for (std::vector<CohortCell>& cells : out) cells.shrink_to_fit();
  return out;
}

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_STEP_SERIES_H_

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
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
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

// A site's allocations live at the end of the run that were made in one row
// (their cohort): estimated bytes, sampled allocations and the bytes'
// Horvitz-Thompson variance. Kept only for the rows that have one.
struct CohortCell {
  uint32_t row = 0;
  double bytes = 0;
  double samples = 0;
  double var = 0;
};

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_STEP_SERIES_H_

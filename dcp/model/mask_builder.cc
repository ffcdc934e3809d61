// SPDX-License-Identifier: Apache-2.0
// Builds a normalised SequenceMask from raw affine intervals.
#include "dcp/model/mask_builder.h"

#include <algorithm>
#include <cassert>
#include <optional>
#include <string>

#include "dcp/core/error.h"

namespace dcp {
namespace {

// A linear function c + k*i of the row with k in {-1, 0, 1}: its sign can change only at i = -c/k.
// Cutting at that row and the next isolates the zero, so on every piece between cuts the sign of
// the function is constant.
void add_sign_cuts(TokenCount c, TokenCount k, TokenCount lo, TokenCount hi,
                   std::vector<TokenCount>& cuts) {
  if (k == 0) return;
  const TokenCount root = k > 0 ? -c : c;
  if (root > lo && root < hi) cuts.push_back(root);
  if (root + 1 > lo && root + 1 < hi) cuts.push_back(root + 1);
}

// One bound (begin or end) of an interval as value0 + slope * row.
struct Bound {
  TokenCount value0;
  std::int8_t slope;
  TokenCount at(TokenCount row) const { return value0 + slope * row; }
  friend bool operator==(const Bound&, const Bound&) = default;
};

// The single bound that equals `a` on rows [a_begin, a_end) and `b` on rows [b_begin, b_end)
// (b_begin == a_end), if one with slope 0 or 1 exists. A run of more than one row fixes its
// function; two single rows fix the slope by their difference.
std::optional<Bound> join_bounds(Bound a, TokenCount a_rows, Bound b, TokenCount b_row0,
                                 TokenCount b_rows) {
  if (a_rows > 1 || b_rows > 1) {
    const Bound joined = a_rows > 1 ? a : b;
    const bool fits_a = a_rows > 1 || joined.at(b_row0 - 1) == a.at(b_row0 - 1);
    const bool fits_b = b_rows > 1 || joined.at(b_row0) == b.at(b_row0);
    if (fits_a && fits_b && (a_rows == 1 || b_rows == 1 || a == b)) return joined;
    return std::nullopt;
  }
  const TokenCount diff = b.at(b_row0) - a.at(b_row0 - 1);
  if (diff != 0 && diff != 1) return std::nullopt;
  const auto slope = static_cast<std::int8_t>(diff);
  return Bound{b.at(b_row0) - slope * b_row0, slope};
}

}  // namespace

MaskBuilder::MaskBuilder(TokenCount length) : length_(length) { assert(length >= 1); }

void MaskBuilder::add(TokenCount row_begin, TokenCount row_end,
                      std::span<const AffineInterval> raw) {
  assert(row_begin == rows_added_ && row_end <= length_);
  if (row_begin >= row_end) return;
  // Step 1: cut wherever emptiness, order or overlap of any interval pair can change.
  cuts_.clear();
  cuts_.push_back(row_begin);
  // One row, or constant intervals (every slope 0), never need a cut: skip the O(K^2) scan that
  // would make a mask-file row with thousands of intervals quadratic.
  const bool constant_rows =
      row_end - row_begin == 1 || std::all_of(raw.begin(), raw.end(), [](const AffineInterval& x) {
        return x.begin_slope == 0 && x.end_slope == 0;
      });
  for (std::size_t a = 0; a < (constant_rows ? 0 : raw.size()); ++a) {
    const AffineInterval& x = raw[a];
    add_sign_cuts(x.end0 - x.begin0, x.end_slope - x.begin_slope, row_begin, row_end, cuts_);
    for (std::size_t b = 0; b < raw.size(); ++b) {
      if (a == b) continue;
      const AffineInterval& y = raw[b];
      add_sign_cuts(x.begin0 - y.begin0, x.begin_slope - y.begin_slope, row_begin, row_end, cuts_);
      add_sign_cuts(x.end0 - y.end0, x.end_slope - y.end_slope, row_begin, row_end, cuts_);
      add_sign_cuts(x.end0 - y.begin0, x.end_slope - y.begin_slope, row_begin, row_end, cuts_);
    }
  }
  cuts_.push_back(row_end);
  std::sort(cuts_.begin(), cuts_.end());
  cuts_.erase(std::unique(cuts_.begin(), cuts_.end()), cuts_.end());
  // Step 2: normalise each piece; relations between bounds are constant on it.
  for (std::size_t p = 0; p + 1 < cuts_.size(); ++p) add_piece(cuts_[p], cuts_[p + 1], raw);
  rows_added_ = row_end;
}

void MaskBuilder::add_row(TokenCount row, std::span<const Interval> intervals) {
  constant_.clear();
  for (const Interval& interval : intervals) {
    constant_.push_back({interval.begin, interval.end, 0, 0});
  }
  add(row, row + 1, constant_);
}

void MaskBuilder::add_piece(TokenCount row_begin, TokenCount row_end,
                            std::span<const AffineInterval> raw) {
  const TokenCount r = row_begin;  // representative row
  live_.clear();
  for (const AffineInterval& x : raw) {
    if (x.end_at(r) > x.begin_at(r)) live_.push_back(x);
  }
  std::sort(live_.begin(), live_.end(), [r](const AffineInterval& x, const AffineInterval& y) {
    if (x.begin_at(r) != y.begin_at(r)) return x.begin_at(r) < y.begin_at(r);
    return x.end_at(r) < y.end_at(r);
  });
  merged_.clear();
  for (const AffineInterval& x : live_) {
    // Touching intervals merge too: [a, b) and [b, c) are one interval [a, c).
    if (!merged_.empty() && merged_.back().end_at(r) >= x.begin_at(r)) {
      AffineInterval& last = merged_.back();
      if (x.end_at(r) > last.end_at(r)) {
        last.end0 = x.end0;
        last.end_slope = x.end_slope;
      }
    } else {
      merged_.push_back(x);
    }
  }
#ifndef NDEBUG
  for (const AffineInterval& x : merged_) {
    assert(x.begin_at(row_begin) >= 0 && x.end_at(row_end - 1) <= length_);
  }
#endif
  append_segment(row_begin, row_end, merged_);
}

void MaskBuilder::append_segment(TokenCount row_begin, TokenCount row_end,
                                 std::span<const AffineInterval> normalised) {
  // Step 3: extend the previous segment when one affine form covers both.
  if (!segments_.empty()) {
    MaskSegment& last = segments_.back();
    if (last.interval_count == static_cast<std::int32_t>(normalised.size())) {
      bool joinable = true;
      joined_.resize(normalised.size());
      for (std::size_t k = 0; k < normalised.size() && joinable; ++k) {
        const AffineInterval& a = intervals_[static_cast<std::size_t>(last.first_interval) + k];
        const AffineInterval& b = normalised[k];
        const auto begin = join_bounds({a.begin0, a.begin_slope}, last.rows(),
                                       {b.begin0, b.begin_slope}, row_begin, row_end - row_begin);
        const auto end = join_bounds({a.end0, a.end_slope}, last.rows(), {b.end0, b.end_slope},
                                     row_begin, row_end - row_begin);
        if (!begin || !end) {
          joinable = false;
        } else {
          joined_[k] = {begin->value0, end->value0, begin->slope, end->slope};
        }
      }
      if (joinable) {
        std::copy(joined_.begin(), joined_.end(),
                  intervals_.begin() + static_cast<std::ptrdiff_t>(last.first_interval));
        last.row_end = row_end;
        return;
      }
    }
  }
  if (static_cast<std::int64_t>(segments_.size()) >= kMaxMaskSegments ||
      static_cast<std::int64_t>(intervals_.size() + normalised.size()) > kMaxMaskIntervals) {
    throw InvalidInput("the mask of a " + std::to_string(length_) +
                       "-token sequence needs more than " + std::to_string(kMaxMaskSegments) +
                       " row segments or " + std::to_string(kMaxMaskIntervals) + " intervals");
  }
  segments_.push_back({row_begin, row_end, static_cast<std::int32_t>(intervals_.size()),
                       static_cast<std::int32_t>(normalised.size())});
  intervals_.insert(intervals_.end(), normalised.begin(), normalised.end());
}

SequenceMask MaskBuilder::finish() && {
  assert(rows_added_ == length_);
  return SequenceMask(length_, std::move(segments_), std::move(intervals_));
}

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// The attention mask of one sequence as row segments of affine key intervals.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dcp/core/ids.h"

namespace dcp {

// A half-open key interval [begin, end) of sequence-local positions.
struct Interval {
  TokenCount begin = 0;
  TokenCount end = 0;

  TokenCount size() const { return end > begin ? end - begin : 0; }
  friend bool operator==(const Interval&, const Interval&) = default;
};

// A key interval whose bounds move with the query row i (sequence-local):
//   [begin0 + begin_slope * i, end0 + end_slope * i), slopes 0 or 1.
// Every built-in mask is a few of these per run of rows (causal is one: [0, i + 1)), which is what
// lets counting and tiling work per row range instead of per element.
struct AffineInterval {
  TokenCount begin0 = 0;
  TokenCount end0 = 0;
  std::int8_t begin_slope = 0;
  std::int8_t end_slope = 0;

  TokenCount begin_at(TokenCount row) const { return begin0 + begin_slope * row; }
  TokenCount end_at(TokenCount row) const { return end0 + end_slope * row; }
  Interval at(TokenCount row) const { return {begin_at(row), end_at(row)}; }
  friend bool operator==(const AffineInterval&, const AffineInterval&) = default;
};

// Rows [row_begin, row_end) that share one list of affine intervals.
struct MaskSegment {
  TokenCount row_begin = 0;
  TokenCount row_end = 0;
  std::int32_t first_interval = 0;
  std::int32_t interval_count = 0;

  TokenCount rows() const { return row_end - row_begin; }
};

// The mask of one sequence of `length` tokens. Built by MaskBuilder, which guarantees:
//   - segments cover rows [0, length) in order, without gaps;
//   - on every row of a segment its intervals are non-empty, sorted, pairwise disjoint and not
//     touching (end_k < begin_k+1), and inside [0, length);
//   - adjacent segments that could be written as one are merged.
// A segment may hold no interval: its rows attend to nothing.
class SequenceMask {
 public:
  SequenceMask() = default;
  SequenceMask(TokenCount length, std::vector<MaskSegment> segments,
               std::vector<AffineInterval> intervals);

  TokenCount length() const { return length_; }
  std::span<const MaskSegment> segments() const { return segments_; }
  std::span<const AffineInterval> intervals(const MaskSegment& segment) const {
    return std::span<const AffineInterval>(intervals_)
        .subspan(static_cast<std::size_t>(segment.first_interval),
                 static_cast<std::size_t>(segment.interval_count));
  }

  // Index of the segment holding `row`; requires 0 <= row < length().
  std::size_t segment_of(TokenCount row) const;
  // The normalised key intervals of one query row, appended to `out` after clearing it.
  void row_intervals(TokenCount row, std::vector<Interval>& out) const;
  // Unmasked (query, key) pairs of rows [row_begin, row_end) x keys [key_begin, key_end).
  PairCount count_pairs(TokenCount row_begin, TokenCount row_end, TokenCount key_begin,
                        TokenCount key_end) const;
  // Unmasked pairs of the whole sequence.
  PairCount total_pairs() const { return count_pairs(0, length_, 0, length_); }

 private:
  TokenCount length_ = 0;
  std::vector<MaskSegment> segments_;
  std::vector<AffineInterval> intervals_;
};

// Sum over rows i in [row_begin, row_end) of |[begin(i), end(i)) ∩ [key_begin, key_end)|, in O(1).
PairCount count_interval_pairs(const AffineInterval& interval, TokenCount row_begin,
                               TokenCount row_end, TokenCount key_begin, TokenCount key_end);

}  // namespace dcp

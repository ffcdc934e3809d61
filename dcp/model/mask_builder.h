// SPDX-License-Identifier: Apache-2.0
// Builds a normalised SequenceMask from raw, possibly unsorted or overlapping, affine intervals.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dcp/model/sequence_mask.h"

namespace dcp {

// Row segments and intervals of one sequence's mask at most. Built-in kinds need a handful; a mask
// file needs at most one segment per row. Beyond this a mask costs gigabytes to hold.
inline constexpr std::int64_t kMaxMaskSegments = std::int64_t{1} << 24;
inline constexpr std::int64_t kMaxMaskIntervals = std::int64_t{1} << 26;

// Rows are added in order: each add() continues where the previous one stopped, starting at 0.
// Intervals given to add() may be empty on some rows, unsorted and overlapping; the builder cuts
// the row range wherever their order, overlap or emptiness changes and merges each piece's
// intervals into the normal form SequenceMask documents. Cost per add(): O(K^2 log K) for K
// intervals, independent of the number of rows.
class MaskBuilder {
 public:
  explicit MaskBuilder(TokenCount length);

  // Rows [row_begin, row_end) attend to the union of `raw` (evaluated per row). Requires
  // row_begin == rows_added() and row_end <= length. Intervals must stay inside [0, length] on
  // these rows wherever they are non-empty (asserted in debug builds; callers validate user input).
  void add(TokenCount row_begin, TokenCount row_end, std::span<const AffineInterval> raw);
  // Throws InvalidInput once the mask would exceed kMaxMaskSegments or kMaxMaskIntervals.
  // One row with constant intervals (the mask-file path).
  void add_row(TokenCount row, std::span<const Interval> intervals);

  TokenCount rows_added() const { return rows_added_; }
  // Requires rows_added() == length.
  SequenceMask finish() &&;

 private:
  void add_piece(TokenCount row_begin, TokenCount row_end, std::span<const AffineInterval> raw);
  void append_segment(TokenCount row_begin, TokenCount row_end,
                      std::span<const AffineInterval> normalised);

  TokenCount length_;
  TokenCount rows_added_ = 0;
  std::vector<MaskSegment> segments_;
  std::vector<AffineInterval> intervals_;
  // Scratch space reused across calls.
  std::vector<TokenCount> cuts_;
  std::vector<AffineInterval> live_;
  std::vector<AffineInterval> merged_;
  std::vector<AffineInterval> constant_;
  std::vector<AffineInterval> joined_;
};

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// Test helpers: random mask specs and a check of SequenceMask's normal-form invariants.
#pragma once

#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/rng.h"

#include "dcp/model/mask_spec.h"
#include "dcp/model/sequence_mask.h"

namespace dcp::testing {

// A spec of the given kind with random parameters, degenerate ones included (window 1, sink larger
// than L, more answers than tokens, block or chunk larger than L, local 0, chunk 1).
inline MaskSpec random_spec(MaskKind kind, TokenCount length, Rng& rng) {
  MaskSpec spec;
  spec.kind = kind;
  const TokenCount span = 2 * length + 2;
  spec.window = rng.uniform_int(0, 3) == 0 ? 1 : rng.uniform_int(1, span);
  spec.sink = rng.uniform_int(0, 3) == 0 ? 0 : rng.uniform_int(0, span);
  spec.question = rng.uniform_int(0, 4) == 0 ? 0.0 : rng.uniform01() * 0.999;
  spec.answers = rng.uniform_int(0, 3) == 0 ? rng.uniform_int(length, span) : rng.uniform_int(1, 8);
  spec.block = rng.uniform_int(0, 3) == 0 ? rng.uniform_int(length, span) : rng.uniform_int(1, 40);
  spec.local = rng.uniform_int(0, 5);
  // Drawn for chunked only, so the other kinds' parameters stay independent of this kind.
  if (kind == MaskKind::kChunked) {
    const std::int64_t draw = rng.uniform_int(0, 3);
    spec.chunk = draw == 0 ? rng.uniform_int(length, span) : draw == 1 ? 1 : rng.uniform_int(1, 40);
  }
  return spec;
}

// Every row: intervals non-empty, sorted, disjoint and not touching, inside [0, L]; segments cover
// [0, L) in order.
inline void expect_normal_form(const SequenceMask& mask) {
  TokenCount next_row = 0;
  for (const MaskSegment& segment : mask.segments()) {
    ASSERT_EQ(segment.row_begin, next_row);
    ASSERT_LT(segment.row_begin, segment.row_end);
    next_row = segment.row_end;
  }
  ASSERT_EQ(next_row, mask.length());
  std::vector<Interval> row;
  for (TokenCount i = 0; i < mask.length(); ++i) {
    mask.row_intervals(i, row);
    for (std::size_t k = 0; k < row.size(); ++k) {
      ASSERT_GE(row[k].begin, 0) << "row " << i;
      ASSERT_LT(row[k].begin, row[k].end) << "row " << i;
      ASSERT_LE(row[k].end, mask.length()) << "row " << i;
      if (k > 0) {
        ASSERT_LT(row[k - 1].end, row[k].begin) << "row " << i;
      }
    }
  }
}

}  // namespace dcp::testing

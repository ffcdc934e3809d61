// SPDX-License-Identifier: Apache-2.0
// MaskBuilder normalises raw affine intervals exactly and keeps masks compact.
#include "dcp/model/mask_builder.h"

#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/rng.h"

#include "tests/testing/brute_force_mask.h"
#include "tests/testing/mask_checks.h"

namespace dcp {
namespace {

// A random affine interval that stays inside [0, L] on rows [r0, r1) wherever it is non-empty:
// the builder's contract. Bounds are clamped by construction of the offsets.
AffineInterval random_affine(Rng& rng, TokenCount length, TokenCount r0, TokenCount r1) {
  AffineInterval x;
  x.begin_slope = static_cast<std::int8_t>(rng.uniform_int(0, 1));
  x.end_slope = static_cast<std::int8_t>(rng.uniform_int(0, 1));
  // begin(r0) in [0, L], begin(r1 - 1) <= L, same for end.
  const TokenCount rows = r1 - r0;
  const TokenCount begin_hi = length - x.begin_slope * (rows - 1);
  const TokenCount end_hi = length - x.end_slope * (rows - 1);
  x.begin0 = rng.uniform_int(0, std::max<TokenCount>(0, begin_hi)) - x.begin_slope * r0;
  x.end0 = rng.uniform_int(0, std::max<TokenCount>(0, end_hi)) - x.end_slope * r0;
  return x;
}

TEST(MaskBuilder, NormalisesRandomUnsortedOverlappingAffineIntervals) {
  Rng rng(42);
  for (int trial = 0; trial < 400; ++trial) {
    const TokenCount length = rng.uniform_int(1, 120);
    MaskBuilder builder(length);
    std::vector<char> expected(static_cast<std::size_t>(length * length), 0);
    TokenCount row = 0;
    while (row < length) {
      const TokenCount end = std::min(length, row + rng.uniform_int(1, 40));
      // Rows where an interval would leave [0, L] are avoided by giving each range its own bounds.
      if (end - row > length) break;
      std::vector<AffineInterval> raw;
      const auto count = rng.uniform_int(0, 5);
      for (int k = 0; k < count; ++k) raw.push_back(random_affine(rng, length, row, end));
      for (TokenCount i = row; i < end; ++i) {
        for (const AffineInterval& x : raw) {
          for (TokenCount j = std::max<TokenCount>(0, x.begin_at(i));
               j < std::min(length, x.end_at(i)); ++j) {
            expected[static_cast<std::size_t>(i * length + j)] = 1;
          }
        }
      }
      builder.add(row, end, raw);
      row = end;
    }
    const SequenceMask mask = std::move(builder).finish();
    testing::expect_normal_form(mask);
    ASSERT_EQ(testing::dense_mask(mask), expected) << "trial " << trial;
  }
}

TEST(MaskBuilder, MergesRowByRowCausalIntoOneSegment) {
  const TokenCount length = 1000;
  MaskBuilder builder(length);
  for (TokenCount i = 0; i < length; ++i) {
    const Interval row[] = {{0, i + 1}};
    builder.add_row(i, row);
  }
  const SequenceMask mask = std::move(builder).finish();
  ASSERT_EQ(mask.segments().size(), 1u);
  EXPECT_EQ(mask.total_pairs(), length * (length + 1) / 2);
}

TEST(MaskBuilder, HandlesRowsWithTwentyThousandIntervals) {
  // 100 rows of 20000 unit intervals (each of 200 distinct ones repeated): rows are normalised by
  // sorting, not by comparing every pair, so this takes milliseconds, not minutes.
  std::vector<Interval> row;
  for (TokenCount k = 0; k < 20000; ++k) row.push_back({(k * 7) % 200 * 2, (k * 7) % 200 * 2 + 1});
  MaskBuilder builder(400);
  for (TokenCount i = 0; i < 100; ++i) builder.add_row(i, row);
  const Interval none[] = {{0, 0}};
  for (TokenCount i = 100; i < 400; ++i) builder.add_row(i, none);
  const SequenceMask mask = std::move(builder).finish();
  EXPECT_EQ(mask.segments().size(), 2u);
  EXPECT_EQ(mask.total_pairs(), 100 * 200);
}

TEST(MaskBuilder, MergesTouchingAndDuplicateIntervalsOfARow) {
  MaskBuilder builder(10);
  const Interval row0[] = {{5, 7}, {0, 2}, {2, 4}, {6, 9}, {0, 1}};
  builder.add_row(0, row0);
  const Interval empty[] = {{3, 3}};
  for (TokenCount i = 1; i < 10; ++i) builder.add_row(i, empty);
  const SequenceMask mask = std::move(builder).finish();
  std::vector<Interval> row;
  mask.row_intervals(0, row);
  EXPECT_EQ(row, (std::vector<Interval>{{0, 4}, {5, 9}}));
  mask.row_intervals(5, row);
  EXPECT_TRUE(row.empty());
  EXPECT_EQ(mask.segments().size(), 2u);
}

TEST(CountIntervalPairs, MatchesEnumerationForEverySlopeCombination) {
  Rng rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    AffineInterval x;
    x.begin_slope = static_cast<std::int8_t>(rng.uniform_int(0, 1));
    x.end_slope = static_cast<std::int8_t>(rng.uniform_int(0, 1));
    x.begin0 = rng.uniform_int(-30, 30);
    x.end0 = rng.uniform_int(-30, 60);
    const TokenCount r0 = rng.uniform_int(0, 40);
    const TokenCount r1 = r0 + rng.uniform_int(0, 40);
    const TokenCount c0 = rng.uniform_int(-10, 60);
    const TokenCount c1 = c0 + rng.uniform_int(0, 40);
    PairCount expected = 0;
    for (TokenCount i = r0; i < r1; ++i) {
      expected += std::max<TokenCount>(0, std::min(x.end_at(i), c1) - std::max(x.begin_at(i), c0));
    }
    ASSERT_EQ(count_interval_pairs(x, r0, r1, c0, c1), expected)
        << "[" << x.begin0 << "+" << int{x.begin_slope} << "i, " << x.end0 << "+"
        << int{x.end_slope} << "i) rows [" << r0 << "," << r1 << ") cols [" << c0 << "," << c1
        << ")";
  }
}

}  // namespace
}  // namespace dcp

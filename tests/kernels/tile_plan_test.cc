// SPDX-License-Identifier: Apache-2.0
// Sub-tile plans and row masking agree with a per-element reading of the mask.
#include "dcp/kernels/cpu/tile_plan.h"

#include <algorithm>
#include <limits>

#include <gtest/gtest.h>

#include "tests/kernels/attention_case.h"

namespace dcp::kernels {
namespace {

using testing::MaskData;

void expect_plan_matches_mask(const MaskData& mask, std::int32_t q_tokens, std::int32_t kv_tokens,
                              std::int32_t qc, std::int32_t kc) {
  const TilePlan plan = plan_tile(mask.view(), q_tokens, kv_tokens, qc, kc);
  ASSERT_EQ(plan.q_chunks, (q_tokens + qc - 1) / qc);
  ASSERT_EQ(plan.kv_chunks, (kv_tokens + kc - 1) / kc);
  for (std::int32_t a = 0; a < plan.q_chunks; ++a) {
    for (std::int32_t b = 0; b < plan.kv_chunks; ++b) {
      // The tight bounding box of the attended elements of this chunk pair, by brute force.
      std::int32_t q_lo = q_tokens, q_hi = -1, k_lo = kv_tokens, k_hi = -1;
      std::int64_t count = 0;
      for (std::int32_t r = a * qc; r < std::min(q_tokens, (a + 1) * qc); ++r) {
        for (std::int32_t c = b * kc; c < std::min(kv_tokens, (b + 1) * kc); ++c) {
          if (!mask.attends(r, c)) continue;
          ++count;
          q_lo = std::min(q_lo, r);
          q_hi = std::max(q_hi, r + 1);
          k_lo = std::min(k_lo, c);
          k_hi = std::max(k_hi, c + 1);
        }
      }
      const SubTile& cell = plan.cell(a, b);
      if (count == 0) {
        EXPECT_TRUE(cell.empty());
        continue;
      }
      ASSERT_FALSE(cell.empty());
      EXPECT_EQ(cell.q_begin, q_lo);
      EXPECT_EQ(cell.q_end, q_hi);
      EXPECT_EQ(cell.k_begin, k_lo);
      EXPECT_EQ(cell.k_end, k_hi);
      EXPECT_EQ(cell.partial, count != cell.area());
    }
  }
}

TEST(TilePlan, FullTilesHaveOnlyFullUntrimmedCells) {
  const TilePlan plan = plan_tile({}, 10, 7, 4, 3);
  ASSERT_EQ(plan.cells.size(), 9u);
  for (const SubTile& cell : plan.cells) EXPECT_FALSE(cell.partial || cell.empty());
  EXPECT_EQ(plan.cell(2, 2).q_end, 10);
  EXPECT_EQ(plan.cell(2, 2).k_end, 7);
}

TEST(TilePlan, ClassifiesCausalAndRandomMasksLikeABruteForceScan) {
  expect_plan_matches_mask(testing::causal_mask(37, 37, 0), 37, 37, 8, 8);
  expect_plan_matches_mask(testing::causal_mask(20, 50, 10), 20, 50, 7, 16);
  Rng rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    const auto q = static_cast<std::int32_t>(rng.uniform_int(1, 40));
    const auto k = static_cast<std::int32_t>(rng.uniform_int(1, 40));
    const MaskData mask = testing::random_mask(rng, q, k, 3, 0.2);
    expect_plan_matches_mask(mask, q, k, static_cast<std::int32_t>(rng.uniform_int(1, 9)),
                             static_cast<std::int32_t>(rng.uniform_int(1, 9)));
  }
}

TEST(TilePlan, MaskRowSetsExactlyTheUnattendedKeysToNegativeInfinity) {
  Rng rng(4);
  const MaskData mask = testing::random_mask(rng, 30, 60, 4, 0.1);
  for (std::int32_t r = 0; r < 30; ++r) {
    for (std::int32_t begin = 0; begin < 60; begin += 7) {
      const std::int32_t end = std::min(60, begin + 13);
      std::vector<float> row(static_cast<std::size_t>(end - begin), 1.0f);
      mask_row(mask.view(), r, begin, end, row.data());
      for (std::int32_t c = begin; c < end; ++c) {
        const float want = mask.attends(r, c) ? 1.0f : -std::numeric_limits<float>::infinity();
        EXPECT_EQ(row[static_cast<std::size_t>(c - begin)], want) << r << " " << c;
      }
    }
  }
}

}  // namespace
}  // namespace dcp::kernels

// SPDX-License-Identifier: Apache-2.0
// The automatic block size balances memory and compute and is deterministic.
#include "dcp/model/block_size_heuristic.h"

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "dcp/model/mask_spec.h"

namespace dcp {
namespace {

BlockSizeChoice choose(const std::vector<TokenCount>& lengths, const char* mask,
                       std::int32_t devices, std::int32_t head_block_size = 1,
                       TokenCount max_block = 4096) {
  const SequenceBatch batch(lengths);
  BlockSizeOptions options;
  options.devices = devices;
  options.max_block = max_block;
  return choose_block_size(AttentionShape{}, batch, build_batch_mask(parse_mask_spec(mask), batch),
                           head_block_size, options);
}

TEST(LptImbalance, IsMaxOverMeanOfLargestFirstPacking) {
  EXPECT_DOUBLE_EQ(lpt_imbalance({5, 5, 5, 5}, 2), 1.0);
  EXPECT_DOUBLE_EQ(lpt_imbalance({7, 1}, 2), 7.0 / 4.0);
  EXPECT_DOUBLE_EQ(lpt_imbalance({3, 3, 2, 2, 2}, 2), 7.0 / 6.0);  // {3,2,2} and {3,2}
  EXPECT_DOUBLE_EQ(lpt_imbalance({}, 3), 1.0);
  EXPECT_DOUBLE_EQ(lpt_imbalance({4}, 4), 4.0);  // three devices idle
}

TEST(BlockSizeHeuristic, GoesFinerThanAMemoryOnlyRuleWhenComputeWouldBeUnbalanced) {
  // 96K + 16K + 16K causal tokens on 4 devices, all 8 q heads in one head block. At B = 32768 the
  // token blocks (3 x 32K, 2 x 16K) pack perfectly, which is where the reference's memory-only rule
  // stops; but the 96K sequence's 6 tiles and the short ones' 2 do not balance compute (LPT 1.26).
  const std::vector<TokenCount> lengths = {98304, 16384, 16384};
  EXPECT_DOUBLE_EQ(lpt_imbalance({32768, 32768, 32768, 16384, 16384}, 4), 1.0);
  const BlockSizeChoice choice = choose(lengths, "causal", 4, /*head_block_size=*/8, 65536);
  EXPECT_TRUE(choice.meets_targets);
  EXPECT_LT(choice.block_size, 32768);
  EXPECT_LE(choice.memory_imbalance, 1.2 + 1e-9);
  EXPECT_LE(choice.compute_imbalance, 1.1 + 1e-9);
}

TEST(BlockSizeHeuristic, PrefersTheLargestBlockThatMeetsBothTargets) {
  // 32 equal 4096-token sequences on 8 devices: B = 4096 is balanced in both.
  const BlockSizeChoice choice = choose(std::vector<TokenCount>(32, 4096), "causal", 8);
  EXPECT_EQ(choice.block_size, 4096);
  EXPECT_TRUE(choice.meets_targets);
  EXPECT_EQ(choice.candidates_tried, 1);
}

TEST(BlockSizeHeuristic, NeverExceedsTheNextPowerOfTwoOfTheLongestSequence) {
  const BlockSizeChoice choice = choose({100, 90, 80}, "causal", 2);
  EXPECT_LE(choice.block_size, 128);
}

TEST(BlockSizeHeuristic, ReportsTheBestReachableWhenTargetsAreImpossible) {
  // One 10-token sequence cannot be spread over 8 devices at any block size >= 16.
  const BlockSizeChoice choice = choose({10}, "causal", 8);
  EXPECT_FALSE(choice.meets_targets);
  EXPECT_EQ(choice.block_size, 16);
}

TEST(BlockSizeHeuristic, IsDeterministic) {
  const std::vector<TokenCount> lengths = {45613, 9419, 30000, 2000, 500};
  const BlockSizeChoice a = choose(lengths, "lambda", 16);
  const BlockSizeChoice b = choose(lengths, "lambda", 16);
  EXPECT_EQ(a.block_size, b.block_size);
  EXPECT_EQ(a.compute_imbalance, b.compute_imbalance);
}

TEST(BlockSizeHeuristic, RejectsZeroDevices) {
  EXPECT_THROW(choose({100}, "causal", 0), InvalidInput);
}

}  // namespace
}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// Token blocks cover every token once; head blocks map onto their kv heads.
#include "dcp/model/block_layout.h"

#include <cmath>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

namespace dcp {
namespace {

TEST(BlockLayout, CutsEachSequenceIntoBlocksWithAPartialLastBlock) {
  const SequenceBatch batch({10, 4, 8});
  const BlockLayout layout(batch, 4);
  ASSERT_EQ(layout.block_count(), 3 + 1 + 2);
  EXPECT_EQ(layout.blocks_in(0), 3);
  EXPECT_EQ(layout.first_block(1), 3);
  EXPECT_EQ(layout.first_block(2), 4);
  const TokenBlock& last_of_first = layout.block(2);
  EXPECT_EQ(last_of_first.tokens, 2);
  EXPECT_EQ(last_of_first.begin, 8);
  EXPECT_EQ(layout.block(layout.block_id(2, 1)).packed_begin, 14 + 4);
  TokenCount covered = 0;
  for (const TokenBlock& block : layout.blocks()) {
    EXPECT_EQ(block.packed_begin, covered);
    covered += block.tokens;
  }
  EXPECT_EQ(covered, batch.total_tokens());
}

TEST(BlockLayout, ABlockSizeBeyondTheSequenceGivesOneBlock) {
  const BlockLayout layout(SequenceBatch({1000}), INT64_MAX);
  ASSERT_EQ(layout.block_count(), 1);
  EXPECT_EQ(layout.block(0).tokens, 1000);
}

TEST(BlockLayout, RejectsABlockSizeOfZero) {
  EXPECT_THROW(BlockLayout(SequenceBatch({5}), 0), InvalidInput);
}

TEST(BlockLayout, CutsEachSequenceWithItsOwnBlockSize) {
  const SequenceBatch batch({10, 7});
  const BlockLayout layout(batch, std::vector<TokenCount>{4, 7});
  EXPECT_EQ(layout.block_size(), 7) << "the largest";
  EXPECT_EQ(layout.block_size(0), 4);
  EXPECT_EQ(layout.block_size(1), 7);
  ASSERT_EQ(layout.block_count(), 3 + 1);
  EXPECT_EQ(layout.block(2).tokens, 2);
  EXPECT_EQ(layout.block(3).packed_begin, 10);
  EXPECT_EQ(layout.block(3).tokens, 7);
  EXPECT_THROW(BlockLayout(batch, std::vector<TokenCount>{4}), InvalidInput);
  EXPECT_THROW(BlockLayout(batch, std::vector<TokenCount>{4, 0}), InvalidInput);
}

TEST(SequenceBatch, RejectsAnEmptyBatchAndNonPositiveLengths) {
  EXPECT_THROW(SequenceBatch({}), InvalidInput);
  try {
    SequenceBatch({3, 0});
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 1 has length 0"), std::string::npos);
  }
}

TEST(HeadBlocking, MapsEachQHeadBlockToItsKvHeadBlock) {
  AttentionShape shape;
  shape.q_heads = 8;
  shape.kv_heads = 2;
  const HeadBlocking one(shape, 1);
  EXPECT_EQ(one.count(), 8);
  EXPECT_EQ(one.kv_count(), 2);
  for (HeadBlockIndex k = 0; k < 8; ++k) EXPECT_EQ(one.kv_block_of(k), k / 4);
  const HeadBlocking eight(shape, 8);
  EXPECT_EQ(eight.count(), 1);
  EXPECT_EQ(eight.kv_count(), 1);
  EXPECT_EQ(eight.kv_block_of(0), 0);
  shape.q_heads = 12;
  shape.kv_heads = 4;  // groups of 3
  EXPECT_THROW(HeadBlocking(shape, 2), InvalidInput);
  EXPECT_THROW(HeadBlocking(shape, 5), InvalidInput);
  EXPECT_THROW(HeadBlocking(shape, 0), InvalidInput);
  const HeadBlocking six(shape, 6);
  EXPECT_EQ(six.kv_block_size(), 2);
  EXPECT_EQ(six.kv_block_of(1), 1);
}

TEST(AttentionShape, RejectsQHeadsNotDivisibleByKvHeads) {
  AttentionShape shape;
  shape.q_heads = 6;
  shape.kv_heads = 4;
  EXPECT_THROW(validate(shape), InvalidInput);
  shape.kv_heads = 3;
  EXPECT_NO_THROW(validate(shape));
  EXPECT_DOUBLE_EQ(shape.effective_scale(), 1.0 / std::sqrt(128.0));
}

}  // namespace
}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// Work units against per-element enumeration, and the closed forms of causal attention.
#include "dcp/model/workload.h"

#include <map>
#include <tuple>

#include <gtest/gtest.h>

#include "dcp/core/error.h"
#include "dcp/core/rng.h"

#include "dcp/model/mask_spec.h"
#include "dcp/model/tensor.h"

#include "tests/testing/brute_force_mask.h"
#include "tests/testing/mask_checks.h"

namespace dcp {
namespace {

AttentionShape shape_8_2() {
  AttentionShape shape;
  shape.q_heads = 8;
  shape.kv_heads = 2;
  shape.head_dim = 128;
  return shape;
}

// Odd trials give every sequence its own block size.
TEST(Workload, TilesMatchPerElementEnumerationOnRandomBatches) {
  Rng rng(2024);
  for (int trial = 0; trial < 150; ++trial) {
    std::vector<TokenCount> lengths;
    const auto count = rng.uniform_int(1, 4);
    for (int s = 0; s < count; ++s) lengths.push_back(rng.uniform_int(1, 160));
    const auto kind = all_mask_kinds()[static_cast<std::size_t>(rng.uniform_int(0, 5))];
    const MaskSpec spec = testing::random_spec(kind, lengths[0], rng);
    std::vector<TokenCount> block_of(lengths.size(), rng.uniform_int(1, 70));
    if (trial % 2 == 1) {
      for (TokenCount& b : block_of) b = rng.uniform_int(1, 70);
    }
    const SequenceBatch batch(lengths);
    const Workload workload =
        trial % 2 == 1
            ? Workload(shape_8_2(), batch, build_batch_mask(spec, batch), block_of, 2)
            : Workload(shape_8_2(), batch, build_batch_mask(spec, batch), block_of[0], 2);
    SCOPED_TRACE(to_string(spec) + " B[0]=" + std::to_string(block_of[0]));

    // Oracle: every (seq, q block, kv block) with at least one allowed pair, counted per element.
    std::map<std::tuple<SeqIndex, TokenCount, TokenCount>, PairCount> expected;
    PairCount expected_total = 0;
    for (SeqIndex seq = 0; seq < batch.size(); ++seq) {
      const TokenCount length = batch.length(seq);
      const TokenCount block = block_of[static_cast<std::size_t>(seq)];
      const auto dense = testing::dense_mask(spec, length);
      for (TokenCount q = 0; q * block < length; ++q) {
        for (TokenCount kv = 0; kv * block < length; ++kv) {
          const PairCount pairs =
              testing::dense_count(dense, length, q * block, std::min(length, (q + 1) * block),
                                   kv * block, std::min(length, (kv + 1) * block));
          if (pairs > 0) expected[{seq, q, kv}] = pairs;
          expected_total += pairs;
        }
      }
    }
    ASSERT_EQ(static_cast<std::size_t>(workload.tile_count()), expected.size());
    ASSERT_EQ(workload.unmasked_pairs(), expected_total);
    auto it = expected.begin();  // std::map order == (seq, q_block, kv_block), the tile order
    for (const Tile& tile : workload.tiles()) {
      ASSERT_EQ(std::make_tuple(tile.seq, TokenCount{tile.q_block}, TokenCount{tile.kv_block}),
                it->first);
      ASSERT_EQ(tile.pairs, it->second);
      const TokenCount length = batch.length(tile.seq);
      const TokenCount block = block_of[static_cast<std::size_t>(tile.seq)];
      const TokenCount rows = std::min(length, (tile.q_block + 1) * block) - tile.q_block * block;
      const TokenCount cols = std::min(length, (tile.kv_block + 1) * block) - tile.kv_block * block;
      EXPECT_EQ(tile.kind == TileKind::kFull, tile.pairs == rows * cols);
      EXPECT_NE(tile.kind, TileKind::kEmpty);
      ++it;
    }
    EXPECT_EQ(workload.work_unit_count(), workload.tile_count() * 4);
  }
}

TEST(Workload, OneCausal128KSequenceWithBlock1024And8HeadsHas66048WorkUnits) {
  const SequenceBatch batch({131072});
  const Workload workload(shape_8_2(), batch, build_batch_mask(MaskSpec{}, batch), 1024, 1);
  EXPECT_EQ(workload.blocks().block_count(), 128);
  EXPECT_EQ(workload.tile_count(), 128 * 129 / 2);
  EXPECT_EQ(workload.work_unit_count(), 66048);
  EXPECT_EQ(workload.full_tile_count(), 128 * 127 / 2);  // all but the diagonal
  EXPECT_EQ(workload.unmasked_pairs(), PairCount{131072} * 131073 / 2);
  EXPECT_EQ(workload.forward_flops(), 4.0 * (PairCount{131072} * 131073 / 2) * 128 * 8);
  EXPECT_EQ(workload.backward_flops() * 2, workload.forward_flops() * 5);
}

TEST(Workload, WorkUnitIdsAreHeadBlockMajorOverTiles) {
  const SequenceBatch batch({300, 50});
  const Workload workload(shape_8_2(), batch, build_batch_mask(MaskSpec{}, batch), 64, 2);
  ASSERT_EQ(workload.heads().count(), 4);
  for (WorkUnitId id = 0; id < workload.work_unit_count(); ++id) {
    const WorkUnit unit = workload.work_unit(id);
    const Tile& tile = workload.tiles()[static_cast<std::size_t>(unit.tile)];
    EXPECT_EQ(workload.work_unit_id(unit.head_block, unit.tile), id);
    EXPECT_EQ(unit.seq, tile.seq);
    EXPECT_EQ(unit.q_block, tile.q_block);
    EXPECT_EQ(unit.kv_block, tile.kv_block);
    EXPECT_EQ(unit.pairs, tile.pairs);
  }
  EXPECT_EQ(workload.tiles_of(1).front().seq, 1);
  EXPECT_EQ(workload.first_tile(1), 5 * 6 / 2);  // 300 tokens / 64 = 5 blocks, causal
}

TEST(Workload, RejectsMasksThatDoNotMatchTheBatch) {
  const SequenceBatch batch({10, 20});
  EXPECT_THROW(
      Workload(shape_8_2(), batch, build_batch_mask(MaskSpec{}, SequenceBatch({10})), 4, 1),
      InvalidInput);
  EXPECT_THROW(
      Workload(shape_8_2(), batch, build_batch_mask(MaskSpec{}, SequenceBatch({10, 21})), 4, 1),
      InvalidInput);
}

TEST(TensorBytes, FollowTheShapeDtypeAndHeadBlocking) {
  AttentionShape shape = shape_8_2();
  const HeadBlocking one(shape, 1);
  EXPECT_EQ(bytes_per_token(TensorKind::kQ, shape, one), 256);
  EXPECT_EQ(bytes_per_token(TensorKind::kKV, shape, one), 512);
  EXPECT_EQ(bytes_per_token(TensorKind::kLse, shape, one), 4);
  EXPECT_EQ(bytes_per_token_all_heads(TensorKind::kQ, shape, one), 8 * 256);
  EXPECT_EQ(bytes_per_token_all_heads(TensorKind::kKV, shape, one), 2 * 512);
  EXPECT_EQ(bytes_per_token_all_heads(TensorKind::kDKV, shape, one), 2 * 512);
  shape.dtype = DType::kFp32;
  const HeadBlocking eight(shape, 8);  // one head block spanning both kv heads
  EXPECT_EQ(eight.kv_block_size(), 2);
  EXPECT_EQ(bytes_per_token(TensorKind::kKV, shape, eight), 2 * 2 * 128 * 4);
  EXPECT_EQ(bytes_per_token_all_heads(TensorKind::kO, shape, eight), 8 * 128 * 4);
  EXPECT_EQ(bytes_per_token_all_heads(TensorKind::kLse, shape, eight), 8 * 4);
  const BlockLayout layout(SequenceBatch({1500}), 1024);
  EXPECT_EQ(token_block_bytes(TensorKind::kQ, layout.block(1), shape, eight), 476 * 8 * 128 * 4);
}

}  // namespace
}  // namespace dcp

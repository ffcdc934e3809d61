// SPDX-License-Identifier: Apache-2.0
// The placement hypergraph of a workload.
#include "dcp/planner/placement/block_hypergraph.h"

#include <limits>

#include "dcp/core/error.h"

#include "dcp/model/tensor.h"

#include "dcp/planner/plan_header.h"

namespace dcp {

BlockHypergraph build_block_hypergraph(const Workload& workload, const StepPricing& pricing) {
  const BlockLayout& blocks = workload.blocks();
  const HeadBlocking& heads = workload.heads();
  const AttentionShape& shape = workload.shape();
  if (static_cast<std::int64_t>(blocks.block_count()) + workload.work_unit_count() >
      std::numeric_limits<VertexId>::max()) {
    throw InvalidInput("the workload has too many work units to place (" +
                       std::to_string(workload.work_unit_count()) + ")");
  }
  BlockHypergraph result;
  result.token_blocks = blocks.block_count();
  Hypergraph::Builder builder;

  // Step 1: vertices.
  std::int64_t block_bytes_per_token = 0;
  for (const TensorKind kind :
       {TensorKind::kQ, TensorKind::kKV, TensorKind::kO, TensorKind::kLse}) {
    block_bytes_per_token += bytes_per_token_all_heads(kind, shape, heads);
  }
  for (const TokenBlock& block : blocks.blocks()) {
    builder.add_vertex({0, block.tokens * block_bytes_per_token});
  }
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    builder.add_vertex({workload.work_unit(w).pairs * heads.head_block_size(), 0});
  }

  // Step 2: nets. Tiles of one sequence are ordered by (q block, kv block), so the tiles of a q
  // block are a contiguous run; tiles of a kv block are collected per sequence.
  const PlanHeader header = plan_header(workload, ClusterShape{1, 1}, "", 0, pricing.partial_dtype);
  const auto bytes = [&](SlotKind kind, std::int64_t tokens) {
    return value_bytes(header, kind, tokens);
  };
  std::vector<VertexId> pins;
  std::vector<std::vector<TileId>> tiles_by_kv;
  const auto add = [&](BlockId owner, NetKind kind, const NetBytes& moved) {
    if (pins.size() < 2) return;  // a token block nobody uses through this tensor
    builder.add_net(moved.forward() + moved.backward(), pins);
    result.net_owner.push_back(owner);
    result.net_kind.push_back(kind);
    result.net_bytes.push_back(moved);
  };
  for (SeqIndex seq = 0; seq < workload.batch().size(); ++seq) {
    const auto seq_tiles = workload.tiles_of(seq);
    const TileId first = workload.first_tile(seq);
    tiles_by_kv.assign(static_cast<std::size_t>(blocks.blocks_in(seq)), {});
    for (std::size_t t = 0; t < seq_tiles.size(); ++t) {
      tiles_by_kv[static_cast<std::size_t>(seq_tiles[t].kv_block)].push_back(
          first + static_cast<TileId>(t));
    }
    std::size_t run = 0;
    for (LocalBlockIndex b = 0; b < blocks.blocks_in(seq); ++b) {
      const BlockId block = blocks.block_id(seq, b);
      const std::int64_t tokens = blocks.block(block).tokens;
      const std::size_t run_begin = run;
      while (run < seq_tiles.size() && seq_tiles[run].q_block == b) ++run;
      for (HeadBlockIndex h = 0; h < heads.count(); ++h) {
        pins.assign(1, result.vertex_of_block(block));
        for (std::size_t t = run_begin; t < run; ++t) {
          pins.push_back(
              result.vertex_of_work_unit(workload.work_unit_id(h, first + static_cast<TileId>(t))));
        }
        add(block, NetKind::kQueryOutput,
            {bytes(SlotKind::kQ, tokens), bytes(SlotKind::kOut, tokens),
             bytes(SlotKind::kQGrad, tokens), bytes(SlotKind::kDQ, tokens)});
      }
      for (std::int32_t g = 0; g < heads.kv_count(); ++g) {
        pins.assign(1, result.vertex_of_block(block));
        for (HeadBlockIndex h = 0; h < heads.count(); ++h) {
          if (heads.kv_block_of(h) != g) continue;
          for (const TileId tile : tiles_by_kv[static_cast<std::size_t>(b)]) {
            pins.push_back(result.vertex_of_work_unit(workload.work_unit_id(h, tile)));
          }
        }
        add(block, NetKind::kKeyValue,
            {bytes(SlotKind::kKV, tokens), 0,
             pricing.kv_kept_for_backward ? 0 : bytes(SlotKind::kKV, tokens),
             bytes(SlotKind::kDKV, tokens)});
      }
    }
  }
  result.graph = std::move(builder).build();
  return result;
}

std::vector<std::int64_t> head_groups(const Workload& workload) {
  std::vector<std::int64_t> groups(static_cast<std::size_t>(workload.blocks().block_count()), -1);
  groups.reserve(groups.size() + static_cast<std::size_t>(workload.work_unit_count()));
  const HeadBlocking& heads = workload.heads();
  for (HeadBlockIndex h = 0; h < heads.count(); ++h) {
    for (TileId t = 0; t < workload.tile_count(); ++t)
      groups.push_back(static_cast<std::int64_t>(t) * heads.kv_count() + heads.kv_block_of(h));
  }
  return groups;
}

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// The block model of a batch: token blocks, head blocks, and the work units of attention.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/block_layout.h"
#include "dcp/model/sequence_batch.h"
#include "dcp/model/sequence_mask.h"

namespace dcp {

// How much of a (q block, kv block) tile the mask keeps. Empty tiles are never stored.
enum class TileKind : std::uint8_t { kEmpty, kPartial, kFull };
std::string_view to_string(TileKind kind);

// One (q block, kv block) pair of a sequence with at least one unmasked pair. The mask is the same
// for every head, so a tile stands for one work unit per head block.
struct Tile {
  SeqIndex seq = 0;
  LocalBlockIndex q_block = 0;
  LocalBlockIndex kv_block = 0;
  TileKind kind = TileKind::kEmpty;
  PairCount pairs = 0;  // exact unmasked (query, key) pairs, for one head
};

// A unit of attention work: one tile for one q head block.
struct WorkUnit {
  WorkUnitId id = 0;
  TileId tile = 0;
  SeqIndex seq = 0;
  HeadBlockIndex head_block = 0;
  LocalBlockIndex q_block = 0;
  LocalBlockIndex kv_block = 0;
  TileKind kind = TileKind::kEmpty;
  PairCount pairs = 0;
};

// Which (q block, kv block) tiles of a sequence a workload holds: those with an unmasked pair
// (dcp and static systems that skip masked tiles), or every pair of blocks of a sequence (static
// systems that compute fully masked tiles too, as TransformerEngine's path for arbitrary masks
// does; such tiles are kEmpty with 0 pairs and cost a full tile).
enum class TileSelection : std::uint8_t { kUnmasked, kEveryBlockPair };

// Tiles in one workload at most (24 bytes each): a larger block size is the fix, not more memory.
inline constexpr TileId kMaxTiles = 1 << 26;

// Everything the planner needs to know about one batch. Tiles are ordered by (seq, q_block,
// kv_block); work unit ids are head-block-major: id = head_block * tile_count() + tile.
class Workload {
 public:
  // Builds the tiles of every sequence with interval arithmetic per (q block, mask segment), never
  // per element. Throws InvalidInput if the shape, block size or head block size is invalid, or the
  // masks do not match the batch (count or lengths), or there would be more than kMaxTiles tiles.
  Workload(const AttentionShape& shape, SequenceBatch batch, std::vector<SequenceMask> masks,
           TokenCount block_size, std::int32_t head_block_size);
  // The same with block size block_sizes[s] for sequence s (see BlockLayout).
  Workload(const AttentionShape& shape, SequenceBatch batch, std::vector<SequenceMask> masks,
           const std::vector<TokenCount>& block_sizes, std::int32_t head_block_size,
           TileSelection selection = TileSelection::kUnmasked);

  const AttentionShape& shape() const { return shape_; }
  const SequenceBatch& batch() const { return batch_; }
  const SequenceMask& mask(SeqIndex seq) const { return masks_[static_cast<std::size_t>(seq)]; }
  const BlockLayout& blocks() const { return blocks_; }
  const HeadBlocking& heads() const { return heads_; }

  TileSelection tile_selection() const { return selection_; }
  std::span<const Tile> tiles() const { return tiles_; }
  TileId tile_count() const { return static_cast<TileId>(tiles_.size()); }
  // The tiles of one sequence, a contiguous range of tiles().
  std::span<const Tile> tiles_of(SeqIndex seq) const;
  TileId first_tile(SeqIndex seq) const { return tile_offsets_[static_cast<std::size_t>(seq)]; }

  WorkUnitId work_unit_count() const {
    return static_cast<WorkUnitId>(tiles_.size()) * heads_.count();
  }
  WorkUnit work_unit(WorkUnitId id) const {  // inline: asked for millions of times a plan
    const auto tile_id = static_cast<TileId>(id % tile_count());
    const auto head_block = static_cast<HeadBlockIndex>(id / tile_count());
    const Tile& tile = tiles_[static_cast<std::size_t>(tile_id)];
    return {id, tile_id, tile.seq, head_block, tile.q_block, tile.kv_block, tile.kind, tile.pairs};
  }
  WorkUnitId work_unit_id(HeadBlockIndex head_block, TileId tile) const {
    return static_cast<WorkUnitId>(head_block) * tile_count() + tile;
  }

  TileId full_tile_count() const { return full_tiles_; }
  // Unmasked pairs for one head: of the whole batch, and of one sequence.
  PairCount unmasked_pairs() const { return total_pairs_; }
  PairCount sequence_pairs(SeqIndex seq) const { return seq_pairs_[static_cast<std::size_t>(seq)]; }
  // Fraction of the L x L pairs of a sequence that are unmasked.
  double density(SeqIndex seq) const;

  // Forward and backward FLOPs of the whole batch over all q heads.
  double forward_flops() const;
  double backward_flops() const;

 private:
  void build();
  void build_tiles(SeqIndex seq, std::vector<PairCount>& scratch,
                   std::vector<LocalBlockIndex>& touched);

  AttentionShape shape_;
  SequenceBatch batch_;
  std::vector<SequenceMask> masks_;
  BlockLayout blocks_;
  HeadBlocking heads_;
  TileSelection selection_ = TileSelection::kUnmasked;
  std::vector<Tile> tiles_;
  std::vector<TileId> tile_offsets_;  // per sequence, plus the total
  std::vector<PairCount> seq_pairs_;
  PairCount total_pairs_ = 0;
  TileId full_tiles_ = 0;
};

}  // namespace dcp

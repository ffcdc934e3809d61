// SPDX-License-Identifier: Apache-2.0
// The block model of a batch: token blocks, head blocks, and the work units of attention.
#include "dcp/model/workload.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "dcp/core/error.h"

#include "dcp/model/tensor.h"

namespace dcp {

std::string_view to_string(TileKind kind) {
  switch (kind) {
    case TileKind::kEmpty:
      return "empty";
    case TileKind::kPartial:
      return "partial";
    case TileKind::kFull:
      return "full";
  }
  return "?";
}

namespace {

const AttentionShape& validated(const AttentionShape& shape) {
  validate(shape);
  return shape;
}

}  // namespace

Workload::Workload(const AttentionShape& shape, SequenceBatch batch,
                   std::vector<SequenceMask> masks, TokenCount block_size,
                   std::int32_t head_block_size)
    : shape_(validated(shape)),
      batch_(std::move(batch)),
      masks_(std::move(masks)),
      blocks_(batch_, block_size),
      heads_(shape_, head_block_size) {
  build();
}

Workload::Workload(const AttentionShape& shape, SequenceBatch batch,
                   std::vector<SequenceMask> masks, const std::vector<TokenCount>& block_sizes,
                   std::int32_t head_block_size, TileSelection selection)
    : shape_(validated(shape)),
      batch_(std::move(batch)),
      masks_(std::move(masks)),
      blocks_(batch_, block_sizes),
      heads_(shape_, head_block_size),
      selection_(selection) {
  build();
}

void Workload::build() {
  if (masks_.size() != static_cast<std::size_t>(batch_.size())) {
    throw InvalidInput("the mask has " + std::to_string(masks_.size()) + " sequences, the batch " +
                       std::to_string(batch_.size()));
  }
  for (SeqIndex seq = 0; seq < batch_.size(); ++seq) {
    if (mask(seq).length() != batch_.length(seq)) {
      throw InvalidInput("the mask of sequence " + std::to_string(seq) + " has length " +
                         std::to_string(mask(seq).length()) + ", the sequence " +
                         std::to_string(batch_.length(seq)));
    }
  }
  // Every tile holds at most B^2 pairs: reject hopeless block sizes before building anything.
  double min_tiles = 0;
  TokenCount smallest = blocks_.block_size();
  for (SeqIndex seq = 0; seq < batch_.size(); ++seq) {
    const auto b = static_cast<double>(blocks_.block_size(seq));
    const auto n = static_cast<double>(blocks_.blocks_in(seq));
    min_tiles += selection_ == TileSelection::kEveryBlockPair
                     ? n * n
                     : std::ceil(static_cast<double>(mask(seq).total_pairs()) / (b * b));
    smallest = std::min(smallest, blocks_.block_size(seq));
  }
  if (min_tiles > kMaxTiles) {
    throw InvalidInput("block size " + std::to_string(smallest) + " gives more than " +
                       std::to_string(kMaxTiles) + " tiles; use a larger block size");
  }
  std::vector<PairCount> scratch;
  std::vector<LocalBlockIndex> touched;
  tile_offsets_.reserve(static_cast<std::size_t>(batch_.size()) + 1);
  seq_pairs_.reserve(static_cast<std::size_t>(batch_.size()));
  for (SeqIndex seq = 0; seq < batch_.size(); ++seq) {
    tile_offsets_.push_back(static_cast<TileId>(tiles_.size()));
    build_tiles(seq, scratch, touched);
  }
  tile_offsets_.push_back(static_cast<TileId>(tiles_.size()));
}

void Workload::build_tiles(SeqIndex seq, std::vector<PairCount>& scratch,
                           std::vector<LocalBlockIndex>& touched) {
  const SequenceMask& seq_mask = mask(seq);
  const TokenCount length = batch_.length(seq);
  const TokenCount b = blocks_.block_size(seq);
  const LocalBlockIndex block_count = blocks_.blocks_in(seq);
  scratch.assign(static_cast<std::size_t>(block_count), 0);
  const auto segments = seq_mask.segments();
  std::size_t first_segment = 0;
  PairCount seq_total = 0;

  for (LocalBlockIndex q = 0; q < block_count; ++q) {
    const TokenCount row_begin = q * b;
    const TokenCount row_end = std::min(length, row_begin + b);
    while (segments[first_segment].row_end <= row_begin) ++first_segment;
    touched.clear();
    // Step 1: per mask segment overlapping the q block, per interval: the keys it reaches over
    // these rows form one range [begin(first row), end(last row)), since bounds only grow and no
    // row of a segment is empty; each kv block in that range gets its exact pair count in O(1).
    for (std::size_t s = first_segment; s < segments.size() && segments[s].row_begin < row_end;
         ++s) {
      const TokenCount a = std::max(segments[s].row_begin, row_begin);
      const TokenCount z = std::min(segments[s].row_end, row_end);
      for (const AffineInterval& interval : seq_mask.intervals(segments[s])) {
        const TokenCount key_lo = interval.begin_at(a);
        const TokenCount key_hi = interval.end_at(z - 1);
        for (TokenCount kv = key_lo / b; kv * b < key_hi; ++kv) {
          const PairCount pairs =
              count_interval_pairs(interval, a, z, kv * b, std::min(length, (kv + 1) * b));
          auto& slot = scratch[static_cast<std::size_t>(kv)];
          if (slot == 0 && pairs > 0) touched.push_back(static_cast<LocalBlockIndex>(kv));
          slot += pairs;
        }
      }
    }
    // Step 2: emit the touched kv blocks (or all of them) in order as tiles and reset the scratch.
    if (selection_ == TileSelection::kEveryBlockPair) {
      touched.resize(static_cast<std::size_t>(block_count));
      for (LocalBlockIndex kv = 0; kv < block_count; ++kv)
        touched[static_cast<std::size_t>(kv)] = kv;
    }
    std::sort(touched.begin(), touched.end());
    if (tiles_.size() + touched.size() > static_cast<std::size_t>(kMaxTiles)) {
      throw InvalidInput("block size " + std::to_string(b) + " gives more than " +
                         std::to_string(kMaxTiles) + " tiles; use a larger block size");
    }
    for (const LocalBlockIndex kv : touched) {
      auto& slot = scratch[static_cast<std::size_t>(kv)];
      const TokenCount kv_tokens = std::min(length, (kv + 1) * b) - kv * b;
      const bool full = slot == (row_end - row_begin) * kv_tokens;
      const TileKind kind = full        ? TileKind::kFull
                            : slot == 0 ? TileKind::kEmpty
                                        : TileKind::kPartial;
      tiles_.push_back({seq, q, kv, kind, slot});
      full_tiles_ += full ? 1 : 0;
      seq_total += slot;
      slot = 0;
    }
  }
  seq_pairs_.push_back(seq_total);
  total_pairs_ += seq_total;
}

std::span<const Tile> Workload::tiles_of(SeqIndex seq) const {
  const auto begin = static_cast<std::size_t>(tile_offsets_[static_cast<std::size_t>(seq)]);
  const auto end = static_cast<std::size_t>(tile_offsets_[static_cast<std::size_t>(seq) + 1]);
  return std::span<const Tile>(tiles_).subspan(begin, end - begin);
}

double Workload::density(SeqIndex seq) const {
  const auto length = static_cast<double>(batch_.length(seq));
  return static_cast<double>(sequence_pairs(seq)) / (length * length);
}

double Workload::forward_flops() const {
  return dcp::forward_flops(total_pairs_, shape_, heads_) * heads_.count();
}

double Workload::backward_flops() const {
  return dcp::backward_flops(total_pairs_, shape_, heads_) * heads_.count();
}

}  // namespace dcp

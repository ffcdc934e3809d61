// SPDX-License-Identifier: Apache-2.0
// Token blocks (each sequence cut into blocks of B tokens) and head blocks (q heads grouped by h).
#pragma once

#include <cstdint>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/sequence_batch.h"

namespace dcp {

// B tokens of one sequence (B may differ between sequences, see BlockLayout); the last block of a
// sequence holds the remainder. All heads' Q, K, V,
// O and LSE of these tokens live together on one device.
struct TokenBlock {
  SeqIndex seq = 0;
  LocalBlockIndex index = 0;    // within the sequence
  TokenCount begin = 0;         // first token, sequence-local
  TokenCount tokens = 0;        // 1..B
  TokenCount packed_begin = 0;  // first token in the packed batch
};

// Token blocks in one batch at most: beyond this a block size is a mistake, not a plan.
inline constexpr BlockId kMaxTokenBlocks = 1 << 24;

// Numbering: BlockId runs over sequence 0's blocks, then sequence 1's, ...
class BlockLayout {
 public:
  // Every sequence cut into blocks of block_size tokens. Throws InvalidInput if block_size < 1 or
  // the batch would need more than kMaxTokenBlocks blocks.
  BlockLayout(const SequenceBatch& batch, TokenCount block_size);

  // Sequence s cut into blocks of block_sizes[s] tokens: how static context parallelism cuts each
  // sequence into a fixed number of chunks. Throws InvalidInput if the count differs from the
  // batch's, a size is < 1, or there would be more than kMaxTokenBlocks blocks.
  BlockLayout(const SequenceBatch& batch, const std::vector<TokenCount>& block_sizes);

  // The largest block size: every block holds at most this many tokens.
  TokenCount block_size() const { return block_size_; }
  // The block size of one sequence.
  TokenCount block_size(SeqIndex seq) const { return block_sizes_[static_cast<std::size_t>(seq)]; }
  BlockId block_count() const { return static_cast<BlockId>(blocks_.size()); }
  LocalBlockIndex blocks_in(SeqIndex seq) const {
    return first_[static_cast<std::size_t>(seq) + 1] - first_[static_cast<std::size_t>(seq)];
  }
  BlockId first_block(SeqIndex seq) const { return first_[static_cast<std::size_t>(seq)]; }
  BlockId block_id(SeqIndex seq, LocalBlockIndex index) const { return first_block(seq) + index; }
  const TokenBlock& block(BlockId id) const { return blocks_[static_cast<std::size_t>(id)]; }
  const std::vector<TokenBlock>& blocks() const { return blocks_; }

 private:
  TokenCount block_size_ = 0;
  std::vector<TokenCount> block_sizes_;  // per sequence
  std::vector<BlockId> first_;           // per sequence, plus the total at the end
  std::vector<TokenBlock> blocks_;
};

// q heads in blocks of h consecutive heads. With GQA group size g = q_heads / kv_heads, a head
// block reads kv head block kv_block_of(k): one kv head when h <= g, h / g kv heads when h > g.
class HeadBlocking {
 public:
  // Throws InvalidInput unless h >= 1, h divides q_heads, and h divides g or g divides h (otherwise
  // a head block would straddle kv heads unevenly).
  HeadBlocking(const AttentionShape& shape, std::int32_t head_block_size);

  std::int32_t head_block_size() const { return size_; }
  HeadBlockIndex count() const { return count_; }
  // kv heads per kv head block, and the number of kv head blocks.
  std::int32_t kv_block_size() const { return kv_size_; }
  std::int32_t kv_count() const { return kv_count_; }
  std::int32_t kv_block_of(HeadBlockIndex head_block) const {
    return (head_block * size_ / group_) / kv_size_;
  }

 private:
  std::int32_t size_;
  std::int32_t group_;
  HeadBlockIndex count_;
  std::int32_t kv_size_;
  std::int32_t kv_count_;
};

}  // namespace dcp

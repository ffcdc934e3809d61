// SPDX-License-Identifier: Apache-2.0
// Token blocks and head blocks.
#include "dcp/model/block_layout.h"

#include <algorithm>
#include <string>

#include "dcp/core/error.h"

namespace dcp {

BlockLayout::BlockLayout(const SequenceBatch& batch, TokenCount block_size)
    : BlockLayout(batch,
                  std::vector<TokenCount>(static_cast<std::size_t>(batch.size()), block_size)) {}

BlockLayout::BlockLayout(const SequenceBatch& batch, const std::vector<TokenCount>& block_sizes)
    : block_sizes_(block_sizes) {
  if (block_sizes.size() != static_cast<std::size_t>(batch.size())) {
    throw InvalidInput("got " + std::to_string(block_sizes.size()) + " block sizes for " +
                       std::to_string(batch.size()) + " sequences");
  }
  first_.reserve(static_cast<std::size_t>(batch.size()) + 1);
  std::int64_t total = 0;
  for (SeqIndex seq = 0; seq < batch.size(); ++seq) {
    const TokenCount block_size = block_sizes[static_cast<std::size_t>(seq)];
    if (block_size < 1) {
      throw InvalidInput("block size must be >= 1, got " + std::to_string(block_size));
    }
    block_size_ = std::max(block_size_, block_size);
    first_.push_back(static_cast<BlockId>(total));
    const TokenCount length = batch.length(seq);
    const TokenCount count = 1 + (length - 1) / block_size;  // no overflow for any block_size
    if (total + count > kMaxTokenBlocks) {
      throw InvalidInput("block size " + std::to_string(block_size) +
                         " cuts the batch into more than " + std::to_string(kMaxTokenBlocks) +
                         " token blocks");
    }
    for (TokenCount b = 0; b < count; ++b) {
      const TokenCount begin = b * block_size;
      blocks_.push_back({seq, static_cast<LocalBlockIndex>(b), begin,
                         std::min(block_size, length - begin), batch.offset(seq) + begin});
    }
    total += count;
  }
  first_.push_back(static_cast<BlockId>(total));
}

HeadBlocking::HeadBlocking(const AttentionShape& shape, std::int32_t head_block_size)
    : size_(head_block_size), group_(shape.group_size()) {
  if (head_block_size < 1) {
    throw InvalidInput("head block size must be >= 1, got " + std::to_string(head_block_size));
  }
  if (shape.q_heads % head_block_size != 0) {
    throw InvalidInput("q heads " + std::to_string(shape.q_heads) +
                       " is not divisible by head block size " + std::to_string(head_block_size));
  }
  if (group_ % size_ != 0 && size_ % group_ != 0) {
    throw InvalidInput("head block size " + std::to_string(head_block_size) +
                       " must divide, or be a multiple of, the " + std::to_string(group_) +
                       " q heads per kv head");
  }
  count_ = shape.q_heads / size_;
  kv_size_ = size_ > group_ ? size_ / group_ : 1;
  kv_count_ = shape.kv_heads / kv_size_;
}

}  // namespace dcp

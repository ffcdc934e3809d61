// SPDX-License-Identifier: Apache-2.0
// A batch of packed sequences: their lengths and where each starts in the packed token order.
#pragma once

#include <span>
#include <vector>

#include "dcp/core/ids.h"

namespace dcp {

// Tokens in one batch at most. Mask files hold int32 positions, and every pair count of a batch
// this size fits in 64 bits.
inline constexpr TokenCount kMaxBatchTokens = TokenCount{1} << 31;

class SequenceBatch {
 public:
  // Throws InvalidInput if the batch is empty, a length is < 1 (naming its index and value), or the
  // batch holds more than kMaxBatchTokens tokens.
  explicit SequenceBatch(std::vector<TokenCount> lengths);

  SeqIndex size() const { return static_cast<SeqIndex>(lengths_.size()); }
  TokenCount length(SeqIndex seq) const { return lengths_[static_cast<std::size_t>(seq)]; }
  // First packed token of a sequence; offset(size()) is the total.
  TokenCount offset(SeqIndex seq) const { return offsets_[static_cast<std::size_t>(seq)]; }
  TokenCount total_tokens() const { return offsets_.back(); }
  // Each sequence's first packed token (size() entries).
  std::span<const TokenCount> offsets() const {
    return std::span<const TokenCount>(offsets_).first(lengths_.size());
  }
  TokenCount max_length() const { return max_length_; }
  std::span<const TokenCount> lengths() const { return lengths_; }

 private:
  std::vector<TokenCount> lengths_;
  std::vector<TokenCount> offsets_;
  TokenCount max_length_ = 0;
};

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// A batch of packed sequences.
#include "dcp/model/sequence_batch.h"

#include <algorithm>
#include <string>

#include "dcp/core/error.h"

namespace dcp {

SequenceBatch::SequenceBatch(std::vector<TokenCount> lengths) : lengths_(std::move(lengths)) {
  if (lengths_.empty()) throw InvalidInput("the batch has no sequences");
  if (lengths_.size() > static_cast<std::size_t>(INT32_MAX)) {
    throw InvalidInput("the batch has too many sequences: " + std::to_string(lengths_.size()));
  }
  offsets_.reserve(lengths_.size() + 1);
  offsets_.push_back(0);
  for (std::size_t i = 0; i < lengths_.size(); ++i) {
    if (lengths_[i] < 1) {
      throw InvalidInput("sequence " + std::to_string(i) + " has length " +
                         std::to_string(lengths_[i]) + "; lengths must be >= 1");
    }
    if (lengths_[i] > kMaxBatchTokens - offsets_.back()) {
      throw InvalidInput("sequence " + std::to_string(i) + " (length " +
                         std::to_string(lengths_[i]) + ") brings the batch past " +
                         std::to_string(kMaxBatchTokens) + " tokens");
    }
    offsets_.push_back(offsets_.back() + lengths_[i]);
  }
  max_length_ = *std::max_element(lengths_.begin(), lengths_.end());
}

}  // namespace dcp

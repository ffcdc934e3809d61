// SPDX-License-Identifier: Apache-2.0
// Chooses the token block size B for a batch when the user gives none.
#pragma once

#include <cstdint>
#include <vector>

#include "dcp/model/attention_shape.h"
#include "dcp/model/sequence_batch.h"
#include "dcp/model/sequence_mask.h"

namespace dcp {

struct BlockSizeOptions {
  std::int32_t devices = 8;     // devices the batch will be placed on
  double eps_memory = 0.2;      // target: LPT memory imbalance <= 1 + eps_memory
  double eps_compute = 0.1;     // target: LPT compute imbalance <= 1 + eps_compute
  TokenCount min_block = 256;   // smaller tiles waste attention-kernel throughput
  TokenCount max_block = 4096;  // larger ones starve the pipeline of stages
};

struct BlockSizeChoice {
  TokenCount block_size = 0;
  double memory_imbalance = 0;   // max / mean device tokens of a largest-first packing
  double compute_imbalance = 0;  // max / mean device pairs of a largest-first packing of work units
  bool meets_targets = false;    // both imbalances within their epsilon
  std::int32_t candidates_tried = 0;
};

// The largest power of two B in [min_block, max_block] (capped at the next power of two above the
// longest sequence) whose token blocks and work units both pack onto `devices` within the targets
// by longest-processing-time-first. The reference system looks only at memory: for 96K + 16K + 16K
// causal tokens on 4 devices with one head block it stops at B = 32768, where memory packs
// perfectly but compute is 1.26x unbalanced. Counting exact per-tile pairs makes the choice
// mask-aware. If no candidate meets both targets, the one with the smallest worse-of-the-two
// ratio to its target wins (the larger B on ties). Candidates are tried from the largest down;
// each costs one workload build (tens of microseconds at 128K tokens).
// Throws InvalidInput for devices < 1, a negative epsilon, or min_block > max_block or < 1.
BlockSizeChoice choose_block_size(const AttentionShape& shape, const SequenceBatch& batch,
                                  const std::vector<SequenceMask>& masks,
                                  std::int32_t head_block_size, const BlockSizeOptions& options);

// Largest-first (LPT) packing of items onto `bins` bins: max bin / mean bin (1.0 when all are 0).
double lpt_imbalance(std::vector<std::int64_t> items, std::int32_t bins);

}  // namespace dcp

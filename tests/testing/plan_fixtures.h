// SPDX-License-Identifier: Apache-2.0
// Small batches, workloads and plan options that the planner's and the search's tests share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "dcp/core/rng.h"

#include "dcp/model/cluster_presets.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/sequence_batch.h"
#include "dcp/model/workload.h"

#include "dcp/planner/plan_builder.h"

namespace dcp::testing {

// A batch with a 1-token sequence, one shorter than a block and a few random longer ones
// (shorter on many devices, where static strategies cut every sequence into 2P chunks).
inline SequenceBatch random_batch(std::uint64_t seed, std::int32_t devices = 8) {
  Rng rng(seed);
  std::vector<TokenCount> lengths = {1, 37};
  const TokenCount longest = devices > 8 ? 400 : 900;
  for (int i = 0; i < 3; ++i) lengths.push_back(rng.uniform_int(100, longest));
  std::swap(lengths[0], lengths[static_cast<std::size_t>(rng.uniform_int(0, 4))]);
  return SequenceBatch(lengths);
}

inline MaskSpec small_spec(MaskKind kind) {
  MaskSpec spec;
  spec.kind = kind;
  spec.window = 200;
  spec.sink = 16;
  spec.block = 48;
  spec.chunk = 96;
  return spec;
}

// The batch under small_spec(kind) at head dim 16, in blocks of 64 tokens and one head a block.
inline Workload small_workload(const SequenceBatch& batch, MaskKind kind, std::int32_t q_heads,
                               std::int32_t kv_heads) {
  AttentionShape shape;
  shape.q_heads = q_heads;
  shape.kv_heads = kv_heads;
  shape.head_dim = 16;
  return Workload(shape, batch, build_batch_mask(small_spec(kind), batch), 64, 1);
}

// `strategy` on the a100-p4de preset reshaped to `shape`, seed 7.
inline PlanOptions a100_plan_options(Strategy strategy, ClusterShape shape) {
  PlanOptions options;
  options.strategy = strategy;
  options.cluster = cluster_preset("a100-p4de");
  options.cluster.shape = shape;
  options.seed = 7;
  return options;
}

}  // namespace dcp::testing

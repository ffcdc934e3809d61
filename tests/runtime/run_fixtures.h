// SPDX-License-Identifier: Apache-2.0
// Batches, masks and helpers the runtime tests share.
#pragma once

#include <cstdint>
#include <vector>

#include "dcp/core/rng.h"

#include "dcp/model/cluster_presets.h"
#include "dcp/model/mask_builder.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/workload.h"

#include "dcp/runtime/batch_tensors.h"
#include "dcp/runtime/dense_reference.h"
#include "dcp/runtime/distributed_run.h"
#include "dcp/selection/plan_search.h"

namespace dcp::testing {

// A 1-token sequence, one shorter than a block (37 tokens, block 64) and three random longer ones.
inline SequenceBatch runtime_batch(std::uint64_t seed) {
  Rng rng(seed);
  std::vector<TokenCount> lengths = {1, 37};
  for (int i = 0; i < 3; ++i) lengths.push_back(rng.uniform_int(90, 400));
  std::swap(lengths[0], lengths[static_cast<std::size_t>(rng.uniform_int(0, 4))]);
  return SequenceBatch(lengths);
}

// Causal, except that the first `empty` rows attend to nothing and no row attends to them: rows
// with lse = -inf and keys with zero gradients.
inline SequenceMask causal_with_empty_rows(TokenCount length, TokenCount empty) {
  MaskBuilder builder(length);
  const TokenCount cut = std::min(empty, length);
  builder.add(0, cut, {});
  if (cut < length) {
    const AffineInterval after[] = {{cut, 1, 0, 1}};  // [cut, i + 1)
    builder.add(cut, length, after);
  }
  return std::move(builder).finish();
}

inline AttentionShape runtime_shape(DType dtype) {
  AttentionShape shape;
  shape.q_heads = 8;
  shape.kv_heads = 2;
  shape.head_dim = 16;
  shape.dtype = dtype;
  return shape;
}

inline MaskSpec runtime_spec(MaskKind kind) {
  MaskSpec spec;
  spec.kind = kind;
  spec.window = 120;
  spec.sink = 8;
  spec.block = 48;
  spec.chunk = 40;
  return spec;
}

inline runtime::BatchShape batch_shape(const Workload& workload) {
  return runtime::batch_shape_of(workload);
}

inline PlanOptions runtime_plan_options(Strategy strategy, ClusterShape world) {
  PlanOptions options;
  options.strategy = strategy;
  options.cluster = cluster_preset("a100-p4de");
  options.cluster.shape = world;
  options.seed = 5;
  return options;
}

}  // namespace dcp::testing

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

#include "dcp/planner/joined_plan.h"
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

// The workload's sequences dealt alternately to two groups of `devices` devices, each group's
// share planned alone by dcp-pure on a node of its own at its own block size (64 and 32 tokens;
// the second with 3 fetch launches, so that the groups' stage counts differ), ready for
// join_group_plans over a cluster of two such nodes. `plans` owns what `groups` points at: move the
// struct, never copy it.
struct TwoGroups {
  std::vector<BuiltPlan> plans;
  std::vector<GroupPlan> groups;
};
inline TwoGroups two_group_plans(const Workload& workload, std::int32_t devices) {
  TwoGroups out;
  out.plans.reserve(2);
  for (std::size_t g = 0; g < 2; ++g) {
    std::vector<std::size_t> sequences;
    std::vector<TokenCount> lengths;
    std::vector<SequenceMask> masks;
    for (SeqIndex seq = static_cast<SeqIndex>(g); seq < workload.batch().size(); seq += 2) {
      sequences.push_back(static_cast<std::size_t>(seq));
      lengths.push_back(workload.batch().length(seq));
      masks.push_back(workload.mask(seq));
    }
    const Workload share(workload.shape(), SequenceBatch(std::move(lengths)), std::move(masks),
                         g == 0 ? 64 : 32, workload.heads().head_block_size());
    PlanOptions options = a100_plan_options(Strategy::kDcpPure, {1, devices});
    options.seed = 11 + g;
    if (g == 1) options.schedule.fetch_launches = 3;
    out.plans.push_back(build_one_plan(share, options));
    out.groups.push_back(
        {&out.plans.back(), static_cast<DeviceId>(g) * devices, std::move(sequences)});
  }
  return out;
}

}  // namespace dcp::testing

// SPDX-License-Identifier: Apache-2.0
// The header every Program of a plan shares.
#include "dcp/planner/plan_header.h"

#include <string>
#include <utility>

#include "dcp/core/error.h"

namespace dcp {

PlanHeader plan_header(const Workload& workload, const ClusterShape& cluster, std::string strategy,
                       std::uint64_t seed, DType partial_dtype) {
  const AttentionShape& shape = workload.shape();
  const HeadBlocking& heads = workload.heads();
  PlanHeader header;
  header.strategy = std::move(strategy);
  header.seed = seed;
  header.cluster = cluster;
  header.q_heads = shape.q_heads;
  header.kv_heads = shape.kv_heads;
  header.head_dim = shape.head_dim;
  header.head_block_size = heads.head_block_size();
  header.kv_heads_per_block = heads.kv_block_size();
  header.dtype = shape.dtype;
  if (!partial_dtype_allowed(shape.dtype, partial_dtype)) {
    throw InvalidInput("partials travel in fp32 or the storage dtype (" +
                       std::string(to_string(shape.dtype)) + "), not " +
                       std::string(to_string(partial_dtype)));
  }
  header.partial_dtype = partial_dtype;
  header.softmax_scale = shape.effective_scale();
  header.total_tokens = workload.batch().total_tokens();
  header.sequences = workload.batch().size();
  header.token_blocks = workload.blocks().block_count();
  header.work_units = workload.work_unit_count();
  return header;
}

}  // namespace dcp

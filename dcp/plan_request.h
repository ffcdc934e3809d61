// SPDX-License-Identifier: Apache-2.0
// The library's entry: a request (a batch, its attention kinds, the shape and the planner's
// options) in, its plan out. The command line's plan, Python's dcp.plan and the plan queue plan
// through it.
#pragma once

#include <cstdint>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/model/attention_kind.h"
#include "dcp/model/attention_shape.h"

#include "dcp/planner/model_plan_builder.h"
#include "dcp/planner/plan_builder.h"

namespace dcp {

// Everything that decides a plan: the batch and its attention kinds (each kind's masks, one per
// sequence, and layers), the attention shape, the block model options and the planner options.
// A plan of one mask is one kind of the default name and one layer. The same request gives the
// same plan bytes.
struct PlanRequest {
  AttentionShape shape;
  std::vector<TokenCount> lengths;   // the batch's sequences
  std::vector<AttentionKind> kinds;  // validate_kinds's checks apply
  TokenCount block_size = 0;  // 0: chosen by the block-size heuristic for the cluster's devices
  std::int32_t head_block_size = 1;
  PlanOptions plan;
};

// The block model of the request, then its plan (make_kind_workloads, then build_model_plan: for
// one kind, build_plan's plan); with an automatic block size, dcp's own strategies plan at the
// sizes of sweep_block_sizes_when_automatic. Throws InvalidInput for an invalid shape, kind, mask,
// block size or cluster.
BuiltModelPlan plan_request(const PlanRequest& request);

}  // namespace dcp

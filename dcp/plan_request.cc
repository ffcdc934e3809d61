// SPDX-License-Identifier: Apache-2.0
// The library's entry: a request in, its plan out.
#include "dcp/plan_request.h"

#include "dcp/model/sequence_batch.h"

#include "dcp/selection/model_plan_search.h"
#include "dcp/selection/plan_search.h"
#include "dcp/workload_builder.h"

namespace dcp {

BuiltModelPlan plan_request(const PlanRequest& request) {
  WorkloadOptions options;
  options.block_size = request.block_size;
  options.head_block_size = request.head_block_size;
  options.auto_block.devices = request.plan.cluster.shape.devices();
  BuiltKinds built =
      make_kind_workloads(request.shape, SequenceBatch(request.lengths), request.kinds, options);
  PlanOptions plan = request.plan;
  sweep_block_sizes_when_automatic(plan, request.block_size == 0);
  return build_model_plan(built.kinds, plan);
}

}  // namespace dcp

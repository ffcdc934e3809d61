// SPDX-License-Identifier: Apache-2.0
// The static strategies' pipeline: layout (with a double ring's outer hops placed by the
// estimate), estimates and their lower bound, and Programs.
#include <utility>

#include "dcp/core/timing.h"

#include "dcp/planner/plan_builder.h"
#include "dcp/planner/plan_builder_internal.h"

namespace dcp {
using plan_building::compile_passes;
using plan_building::strategy_header;

PassEstimates static_plan_estimate(const StaticPlan& layout, const PlanOptions& options) {
  const PlanHeader header = strategy_header(layout.workload, options);
  return {estimate(layout.workload, layout.placement, options.cluster, header, layout.forward),
          estimate(layout.workload, layout.placement, options.cluster, header, layout.backward)};
}

double static_plan_lower_bound(const Workload& workload, const PlanOptions& options) {
  return static_estimate_lower_bound(options.strategy, workload, options.cluster, options.statics,
                                     strategy_header(workload, options));
}

StaticPlan static_layout(const Workload& workload, const PlanOptions& options,
                         PassEstimates* estimates) {
  StaticPlan plan = static_plan(options.strategy, workload, options.cluster.shape, options.statics);
  // A double ring's outer hops: in the round's first launch (static_plan's), or spread over the
  // round's launches, per pass whichever the estimate finds faster (spread_outer_hops).
  const bool double_ring = plan.ring.window > 1 && plan.ring.window < plan.ring.ring_size();
  if (!double_ring) {
    if (estimates != nullptr) *estimates = static_plan_estimate(plan, options);
    return plan;
  }
  const PlanHeader header = strategy_header(plan.workload, options);
  PassEstimates kept;
  for (const auto& [schedule, kept_estimate] :
       {std::pair{&plan.forward, &kept.forward}, std::pair{&plan.backward, &kept.backward}}) {
    *kept_estimate = estimate(plan.workload, plan.placement, options.cluster, header, *schedule);
    PassSchedule other = spread_outer_hops(plan.workload, plan.placement, plan.ring, *schedule);
    ScheduleEstimate other_estimate =
        estimate(plan.workload, plan.placement, options.cluster, header, other);
    if (other_estimate.seconds < kept_estimate->seconds) {
      *schedule = std::move(other);
      *kept_estimate = std::move(other_estimate);
    }
  }
  if (estimates != nullptr) *estimates = std::move(kept);
  return plan;
}

BuiltPlan build_static(StaticPlan layout, const PlanOptions& options,
                       const PassEstimates& estimates, Clock::time_point layout_start) {
  BuiltPlan built{
      Plan{}, std::move(layout.workload), std::move(layout.placement), true, {}, {}, {}, {}, {},
      {}};
  built.data_parallel = layout.data_parallel;
  built.timings.partition_ms = ms_since(layout_start);
  built.plan.header = strategy_header(built.workload, options);
  built.forward = {layout.forward.stages, 0, false, estimates.forward};
  built.backward = {layout.backward.stages, 0, false, estimates.backward};
  compile_passes(built, std::move(layout.forward), std::move(layout.backward), nullptr);
  built.timings.total_ms = ms_since(layout_start);
  return built;
}

}  // namespace dcp

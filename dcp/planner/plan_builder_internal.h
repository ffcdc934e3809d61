// SPDX-License-Identifier: Apache-2.0
// The planner's pieces that its plan builders share (plan_builder.cc, static_candidates.cc,
// structured_plan.cc, joined_plan.cc); not for other layers.
#pragma once

#include "dcp/planner/plan_builder.h"

namespace dcp::plan_building {

// The header options.strategy's plan of `workload` has (its values' sizes for the estimates).
PlanHeader strategy_header(const Workload& workload, const PlanOptions& options);

// Both passes' Programs from their schedules, on built's workload, placement and header (timed);
// the header's partial_routing is the schedules' (kReduceInNode where both route so). The
// schedules are then kept in built (BuiltPlan::forward_schedule, backward_schedule).
void compile_passes(BuiltPlan& built, PassSchedule forward, PassSchedule backward,
                    const KeptKv* kept);

}  // namespace dcp::plan_building

// SPDX-License-Identifier: Apache-2.0
// The planner's pieces that its files share (plan_builder.cc, own_plan_search.cc,
// structured_candidates.cc, static_candidates.cc, plan_selection.cc); not for other layers.
#pragma once

#include <string>

#include "dcp/core/timing.h"

#include "dcp/planner/plan_builder.h"

namespace dcp::plan_building {

// The header options.strategy's plan of `workload` has (its values' sizes for the estimates).
PlanHeader strategy_header(const Workload& workload, const PlanOptions& options);

// Both passes' Programs from their schedules, on built's workload, placement and header (timed).
void compile_passes(BuiltPlan& built, const PassSchedule& forward, const PassSchedule& backward,
                    const KeptKv* kept);

// dcp's own plan on built's workload and placement, its partials travelling in `partial_dtype`:
// the header, the kv kept, both passes' schedules and Programs (timed).
void schedule_and_compile(BuiltPlan& built, const PlanOptions& options, DType partial_dtype);

// options.strategy's plan of the workload as it is: dcp's placement, or the static layout.
BuiltPlan build_one(const Workload& workload, const PlanOptions& options);

// A static layout's Programs (timed from `start`).
BuiltPlan compile_static(StaticPlan layout, const PlanOptions& options, Clock::time_point start,
                         const PassEstimates& estimates);

// dcp's own plan: on the workload's blocks, or the fastest under the simulator of those at
// options.block_sizes (its own_candidates then hold every candidate's simulated times).
BuiltPlan build_own(const Workload& workload, const PlanOptions& options);

// kDcp's selection from dcp's own plan `best`, as build_own made it.
BuiltPlan select_static(const Workload& workload, const PlanOptions& options, BuiltPlan best,
                        Clock::time_point start);

}  // namespace dcp::plan_building

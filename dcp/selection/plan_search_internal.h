// SPDX-License-Identifier: Apache-2.0
// The search's pieces that its files share (own_plan_search.cc, plan_selection.cc); not for other
// layers.
#pragma once

#include "dcp/selection/plan_search.h"

namespace dcp::plan_search {

// dcp's own plan: on the workload's blocks, or the fastest under the simulator of those at
// options.block_sizes (its own_candidates then hold every candidate's simulated times).
BuiltPlan build_own(const Workload& workload, const PlanOptions& options);

}  // namespace dcp::plan_search

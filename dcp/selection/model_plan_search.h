// SPDX-License-Identifier: Apache-2.0
// dcp's search for the plan of a model with several attention kinds, decided by the simulated
// training step (the sum over kinds of layers x forward and backward time).
#pragma once

#include <vector>

#include "dcp/planner/model_plan_builder.h"

namespace dcp {

// One kind: build_plan's plan and search (the same plan bytes as a plan of one mask), under the
// kind's name and layer count. Several kinds, strategy kDcp or kDcpPure: dcp's plan of the kinds
// (build_one_model_plan) at each of PlanOptions::block_sizes (capped, as build_plan caps them,
// at the longest sequence's next power of two), or at the workloads' own blocks when none are
// given; the fastest simulated step is kept. kDcp also plans every static strategy that can run
// on the cluster for all kinds and keeps it where its step is faster (the kept plan's headers
// then name "dcp/<strategy>"), so dcp is never slower than a static strategy under the cost
// model. A static strategy: its plan of every kind. Throws InvalidInput as build_one_model_plan.
BuiltModelPlan build_model_plan(const std::vector<KindWorkload>& kinds, const PlanOptions& options);

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// One plan of a model with several attention kinds: one token placement, each kind's work placed,
// scheduled and compiled against it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dcp/model/workload.h"

#include "dcp/planner/plan_builder.h"
#include "dcp/program/model_plan.h"

namespace dcp {

// One kind of a model's attention as the planner takes it: its name, its layer count and its
// workload (the batch cut into the blocks every kind shares, under the kind's mask).
struct KindWorkload {
  std::string name;
  std::int32_t layers = 1;
  Workload workload;
};

struct BuiltModelPlan {
  ModelPlan plan;
  std::vector<BuiltPlan> kinds;  // per kind: its workload, placement, schedules and timings
  PlanTimings timings;           // summed over kinds; partition_ms once for the shared placement
  bool placement_within_bounds = true;  // every kind's compute and the memory within their caps
  // dcp's search (dcp/selection/model_plan_search.h): every plan it simulated, its times the
  // sums over kinds of layers x pass time (dcp's own named with their block size, "dcp (block
  // 2048)"); empty when nothing was searched. `kept`: the candidate kept.
  std::vector<PlanCandidate> candidates;
  std::string kept = "dcp";
};

// options.strategy's plan of every kind: for dcp and dcp-pure, place_kinds's placement and each
// kind's schedules and Programs on it (build_at_placement); for a static strategy, its plan of
// each kind (its layout ignores the mask, so the kinds share its token placement). No search: the
// workloads' blocks as they are. With one kind, build_one_plan's plan. Throws InvalidInput for
// kinds that do not share their blocks (check_same_blocks) or as build_one_plan does.
BuiltModelPlan build_one_model_plan(const std::vector<KindWorkload>& kinds,
                                    const PlanOptions& options);

// The kinds' workloads cut into blocks of `block_size` tokens.
std::vector<KindWorkload> reblocked(const std::vector<KindWorkload>& kinds, TokenCount block_size);
// One workload cut into blocks of `block_size` tokens (its mask, shape and head blocks kept).
Workload reblocked(const Workload& workload, TokenCount block_size);
// The kinds cut into `base`'s blocks (each sequence at base's size for it: a static layout's
// chunks too). Throws InvalidInput unless the kinds are of base's batch and shape.
std::vector<KindWorkload> on_blocks_of(const Workload& base,
                                       const std::vector<KindWorkload>& kinds);

}  // namespace dcp

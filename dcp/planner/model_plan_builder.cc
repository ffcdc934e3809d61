// SPDX-License-Identifier: Apache-2.0
#include "dcp/planner/model_plan_builder.h"

#include <utility>

#include "dcp/core/error.h"
#include "dcp/core/timing.h"

#include "dcp/planner/placement/kind_placement.h"

namespace dcp {
namespace {

void add(PlanTimings& total, const PlanTimings& kind) {
  total.schedule_forward_ms += kind.schedule_forward_ms;
  total.schedule_backward_ms += kind.schedule_backward_ms;
  total.compile_ms += kind.compile_ms;
}

std::vector<Workload> workloads_of(const std::vector<KindWorkload>& kinds) {
  std::vector<Workload> workloads;
  for (const KindWorkload& kind : kinds) workloads.push_back(kind.workload);
  return workloads;
}

}  // namespace

Workload reblocked(const Workload& workload, TokenCount block_size) {
  std::vector<SequenceMask> masks;
  masks.reserve(static_cast<std::size_t>(workload.batch().size()));
  for (SeqIndex seq = 0; seq < workload.batch().size(); ++seq) masks.push_back(workload.mask(seq));
  return Workload(workload.shape(), workload.batch(), std::move(masks), block_size,
                  workload.heads().head_block_size());
}

std::vector<KindWorkload> reblocked(const std::vector<KindWorkload>& kinds, TokenCount block_size) {
  std::vector<KindWorkload> result;
  for (const KindWorkload& kind : kinds) {
    result.push_back({kind.name, kind.layers, reblocked(kind.workload, block_size)});
  }
  return result;
}

std::vector<KindWorkload> on_blocks_of(const Workload& base,
                                       const std::vector<KindWorkload>& kinds) {
  const BlockLayout& blocks = base.blocks();
  std::vector<TokenCount> sizes;
  for (SeqIndex seq = 0; seq < base.batch().size(); ++seq) {
    sizes.push_back(blocks.block(blocks.block_id(seq, 0)).tokens);
  }
  std::vector<KindWorkload> result;
  for (const KindWorkload& kind : kinds) {
    std::vector<SequenceMask> masks;
    for (SeqIndex seq = 0; seq < kind.workload.batch().size(); ++seq) {
      masks.push_back(kind.workload.mask(seq));
    }
    result.push_back({kind.name, kind.layers,
                      Workload(base.shape(), base.batch(), std::move(masks), sizes,
                               base.heads().head_block_size())});
  }
  return result;
}

BuiltModelPlan build_one_model_plan(const std::vector<KindWorkload>& kinds,
                                    const PlanOptions& options) {
  const auto start = Clock::now();
  const std::vector<Workload> workloads = workloads_of(kinds);
  check_same_blocks(workloads);
  BuiltModelPlan result;
  if (is_dcp(options.strategy) && kinds.size() > 1) {
    validate(options.cluster);
    validate(options.schedule);
    const PlacementOptions placement_options = placement_options_of(options, workloads.front());
    std::vector<std::int32_t> layers;
    for (const KindWorkload& kind : kinds) layers.push_back(kind.layers);
    KindPlacementResult placed = place_kinds(workloads, layers, placement_options);
    result.timings.partition_ms = ms_since(start);
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      result.kinds.push_back(build_at_placement(workloads[k], std::move(placed.placements[k]),
                                                placed.within_bounds[k], options));
      result.placement_within_bounds = result.placement_within_bounds && placed.within_bounds[k];
    }
  } else {
    for (const Workload& workload : workloads) {
      result.kinds.push_back(build_one_plan(workload, options));
      result.placement_within_bounds =
          result.placement_within_bounds && result.kinds.back().placement_within_bounds;
      result.timings.partition_ms += result.kinds.back().timings.partition_ms;
    }
  }
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    add(result.timings, result.kinds[k].timings);
    result.plan.kinds.push_back({kinds[k].name, kinds[k].layers, result.kinds[k].plan});
  }
  result.timings.total_ms = ms_since(start);
  return result;
}

}  // namespace dcp

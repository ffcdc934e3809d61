// SPDX-License-Identifier: Apache-2.0
// The whole planner, timed per phase.
#include "dcp/planner/plan_builder.h"

#include "dcp/core/timing.h"

#include <optional>
#include <string>
#include <utility>

#include "dcp/core/error.h"

#include "dcp/planner/compile/compiler.h"
#include "dcp/sim/simulator.h"

namespace dcp {
namespace {

ScheduleSummary summarize(const ScheduledPass& scheduled) {
  return {scheduled.schedule.stages, scheduled.fetch_launches, scheduled.estimate};
}

}  // namespace

namespace {

BuiltPlan build_one(const Workload& workload, const PlanOptions& options) {
  const auto start = Clock::now();
  const ClusterShape& shape = options.cluster.shape;
  if (is_dcp(options.strategy)) {
    PlacementOptions placement_options = options.placement;
    placement_options.cluster = shape;
    placement_options.seed = options.seed;
    PlacementResult placed = place(workload, placement_options);
    BuiltPlan built{Plan{}, workload, std::move(placed.placement), placed.within_bounds, {},
                    {},     {},       {}};
    built.timings.partition_ms = ms_since(start);
    built.plan.header =
        plan_header(workload, shape, std::string(to_string(options.strategy)), options.seed);
    ScheduledPass passes[2];
    for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
      const auto begin = Clock::now();
      passes[pass == Pass::kForward ? 0 : 1] =
          schedule_pass(built.workload, built.placement, options.cluster, built.plan.header, pass,
                        options.schedule);
      (pass == Pass::kForward ? built.timings.schedule_forward_ms
                              : built.timings.schedule_backward_ms) = ms_since(begin);
    }
    const auto compile_start = Clock::now();
    built.plan.forward =
        compile_pass(built.workload, built.placement, built.plan.header, passes[0].schedule);
    built.plan.backward =
        compile_pass(built.workload, built.placement, built.plan.header, passes[1].schedule);
    built.timings.compile_ms = ms_since(compile_start);
    built.forward = summarize(passes[0]);
    built.backward = summarize(passes[1]);
    built.timings.total_ms = ms_since(start);
    return built;
  }
  StaticPlan layout = static_plan(options.strategy, workload, shape, options.masked_tiles);
  BuiltPlan built{Plan{}, std::move(layout.workload), std::move(layout.placement), true, {}, {},
                  {},     {}};
  built.timings.partition_ms = ms_since(start);
  built.plan.header =
      plan_header(built.workload, shape, std::string(to_string(options.strategy)), options.seed);
  const auto compile_start = Clock::now();
  built.plan.forward =
      compile_pass(built.workload, built.placement, built.plan.header, layout.forward);
  built.plan.backward =
      compile_pass(built.workload, built.placement, built.plan.header, layout.backward);
  built.timings.compile_ms = ms_since(compile_start);
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    const PassSchedule& schedule = pass == Pass::kForward ? layout.forward : layout.backward;
    (pass == Pass::kForward ? built.forward : built.backward) = ScheduleSummary{
        schedule.stages, 0,
        estimate(built.workload, built.placement, options.cluster, built.plan.header, schedule)};
  }
  built.timings.total_ms = ms_since(start);
  return built;
}

PlanCandidate simulated(const BuiltPlan& built, std::string strategy,
                        const ClusterSpec& cluster) {
  const sim::PlanSimulation simulation = sim::simulate(built.plan, cluster);
  return {std::move(strategy), true, "", simulation.forward.seconds,
          simulation.backward.seconds};
}

}  // namespace

BuiltPlan build_plan(const Workload& workload, const PlanOptions& options) {
  validate(options.cluster);
  if (options.strategy != Strategy::kDcp) return build_one(workload, options);
  const auto start = Clock::now();
  BuiltPlan best = build_one(workload, options);
  const auto select_start = Clock::now();
  PlanSelection selection;
  selection.candidates.push_back(simulated(best, "dcp", options.cluster));
  double best_seconds = selection.candidates.front().seconds();
  for (const Strategy strategy : kStaticStrategies) {
    PlanOptions static_options = options;
    static_options.strategy = strategy;
    const std::string name(to_string(strategy));
    std::optional<BuiltPlan> candidate;
    try {
      candidate.emplace(build_one(workload, static_options));
    } catch (const InvalidInput& e) {
      selection.candidates.push_back({name, false, e.what(), 0, 0});
      continue;
    }
    selection.candidates.push_back(simulated(*candidate, name, options.cluster));
    if (selection.candidates.back().seconds() < best_seconds) {
      best_seconds = selection.candidates.back().seconds();
      selection.kept = name;
      best = std::move(*candidate);
      best.plan.header.strategy = "dcp/" + name;
    }
  }
  selection.simulate_ms = ms_since(select_start);
  best.selection = std::move(selection);
  best.timings.total_ms = ms_since(start);
  return best;
}

}  // namespace dcp

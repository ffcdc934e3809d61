// SPDX-License-Identifier: Apache-2.0
// The entry of dcp's search, and its selection: its own plan against every static strategy's,
// screened by estimates and their lower bounds, the rest compiled and simulated; the fastest kept.
#include <algorithm>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/timing.h"

#include "dcp/planner/baselines/static_plans.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/selection/plan_search.h"
#include "dcp/selection/plan_search_internal.h"
#include "dcp/sim/simulator.h"
#include "dcp/sim/step_model.h"

namespace dcp {

void sweep_block_sizes_when_automatic(PlanOptions& plan, bool automatic_block_size) {
  if (automatic_block_size && is_dcp(plan.strategy) && plan.search.block_sizes.empty()) {
    plan.search.block_sizes.assign(std::begin(kBlockSizeSweep), std::end(kBlockSizeSweep));
  }
}

std::vector<sim::DeviceLayer> device_layers(const BuiltPlan& built,
                                            const sim::PlanSimulation& simulation,
                                            const PlanOptions& options) {
  const double per_token = seconds_per_token(options);
  const std::vector<TokenCount> tokens = device_tokens(built.workload, built.placement);
  std::vector<sim::DeviceLayer> devices(tokens.size());
  for (std::size_t d = 0; d < devices.size(); ++d) {
    devices[d] = {simulation.forward.devices[d].end, simulation.backward.devices[d].end,
                  per_token * static_cast<double>(tokens[d])};
  }
  return devices;
}

namespace plan_search {

sim::LockstepPasses token_seconds_of(const BuiltPlan& built, const sim::PlanSimulation& simulation,
                                     const PlanOptions& options) {
  if (seconds_per_token(options) == 0) return {};
  const sim::LockstepPasses passes =
      sim::lockstep_passes(device_layers(built, simulation, options));
  return {std::max(0.0, passes.forward - simulation.forward.seconds),
          std::max(0.0, passes.backward - simulation.backward.seconds)};
}

}  // namespace plan_search

namespace {

// The candidate's step: its simulated passes and the rest of the layer on its devices.
PlanCandidate simulated(const BuiltPlan& built, std::string strategy, const PlanOptions& options) {
  const sim::PlanSimulation simulation = sim::simulate(built.plan, options.cluster);
  PlanCandidate candidate{std::move(strategy),        true, "", true, 0, simulation.forward.seconds,
                          simulation.backward.seconds};
  const sim::LockstepPasses token = plan_search::token_seconds_of(built, simulation, options);
  candidate.token_seconds = token.forward + token.backward;
  candidate.token_forward_seconds = token.forward;
  candidate.estimate_seconds = candidate.seconds();
  return candidate;
}

// kDcp's selection from dcp's own plan `best`, as build_own made it.
BuiltPlan select_static(const Workload& workload, const PlanOptions& options, BuiltPlan best,
                        Clock::time_point start) {
  const std::vector<OwnCandidate> own_candidates = best.own_candidates;
  const auto select_start = Clock::now();
  PlanSelection selection;
  if (const OwnCandidate* kept = plan_search::kept_own(best)) {
    PlanCandidate own{"dcp", true, "", true, 0, kept->forward_seconds, kept->backward_seconds};
    own.token_seconds = kept->token_seconds;
    own.token_forward_seconds = kept->token_forward_seconds;
    selection.candidates.push_back(own);
  } else {  // one block size: not simulated yet
    selection.candidates.push_back(simulated(best, "dcp", options));
  }
  double best_seconds = selection.candidates.front().seconds();
  for (const Strategy strategy : kStaticStrategies) {
    PlanOptions static_options = options;
    static_options.strategy = strategy;
    const std::string name(to_string(strategy));
    const auto static_start = Clock::now();
    // Screen from the strategy's structure first: a bound of its estimate needs no layout.
    double bound = 0;
    try {
      bound = static_plan_lower_bound(workload, static_options) +
              mean_token_seconds(workload, static_options);
    } catch (const InvalidInput& e) {
      selection.candidates.push_back({name, false, e.what(), false, 0, 0, 0});
      continue;
    }
    if (bound >= options.search.screen_factor * best_seconds) {
      PlanCandidate screened{name, true, "", false, bound, 0, 0};
      screened.bounded = true;
      selection.candidates.push_back(screened);
      continue;
    }
    std::optional<StaticPlan> layout;
    PassEstimates estimates;
    try {
      layout.emplace(static_layout(workload, static_options, &estimates));
    } catch (const InvalidInput& e) {
      selection.candidates.push_back({name, false, e.what(), false, 0, 0, 0});
      continue;
    }
    // Screen: a static plan whose schedule estimate is far above dcp's simulated time is not
    // compiled and simulated (docs/cost_model.md; the estimate is within a few percent of the
    // simulation for static plans, whose time is transfers and whole-tile kernels).
    const double estimated =
        estimates.seconds() + token_seconds_of(layout->workload, layout->placement, options);
    if (estimated >= options.search.screen_factor * best_seconds) {
      selection.candidates.push_back({name, true, "", false, estimated, 0, 0});
      continue;
    }
    BuiltPlan candidate = build_static(std::move(*layout), static_options, estimates, static_start);
    PlanCandidate simulated_candidate = simulated(candidate, name, static_options);
    simulated_candidate.estimate_seconds = estimated;
    selection.candidates.push_back(simulated_candidate);
    if (simulated_candidate.seconds() < best_seconds) {
      best_seconds = simulated_candidate.seconds();
      selection.kept = name;
      best = std::move(candidate);
      best.plan.header.strategy = "dcp/" + name;
    }
  }
  selection.simulate_ms = ms_since(select_start);
  best.selection = std::move(selection);
  best.own_candidates = own_candidates;
  best.timings.total_ms = ms_since(start);
  return best;
}

}  // namespace

BuiltPlan build_plan(const Workload& workload, const PlanOptions& options) {
  // Here, so that build_own cannot take a bad option for a layout that cannot run.
  validate(options);
  if (!is_dcp(options.strategy)) return build_one_plan(workload, options);
  const auto start = Clock::now();
  BuiltPlan best = plan_search::build_own(workload, options);
  if (options.strategy == Strategy::kDcpPure) {
    best.timings.total_ms = ms_since(start);
    return best;
  }
  return select_static(workload, options, std::move(best), start);
}

BuiltPlan select_plan(const Workload& workload, const PlanOptions& options, BuiltPlan own) {
  if (options.strategy != Strategy::kDcp) {
    throw InvalidInput("select_plan is dcp's selection; the options name " +
                       std::string(to_string(options.strategy)));
  }
  validate(options);
  const auto start = Clock::now();
  own.plan.header.strategy = std::string(to_string(Strategy::kDcp));
  return select_static(workload, options, std::move(own), start);
}

}  // namespace dcp

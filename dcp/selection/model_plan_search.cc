// SPDX-License-Identifier: Apache-2.0
#include "dcp/selection/model_plan_search.h"

#include <algorithm>
#include <bit>
#include <optional>
#include <string>
#include <utility>

#include "dcp/core/error.h"
#include "dcp/core/timing.h"

#include "dcp/selection/plan_search.h"
#include "dcp/sim/model_simulation.h"

namespace dcp {
namespace {

// The candidate's step under the cluster: forward and backward summed over kinds x layers.
PlanCandidate simulated(const BuiltModelPlan& built, std::string strategy,
                        const ClusterSpec& cluster) {
  const sim::ModelSimulation simulation = sim::simulate(built.plan, cluster);
  PlanCandidate candidate;
  candidate.strategy = std::move(strategy);
  for (const sim::KindSimulation& kind : simulation.kinds) {
    candidate.forward_seconds += kind.layers * kind.passes.forward.seconds;
    candidate.backward_seconds += kind.layers * kind.passes.backward.seconds;
  }
  candidate.estimate_seconds = candidate.seconds();
  return candidate;
}

BuiltModelPlan one_kind(const KindWorkload& kind, const PlanOptions& options) {
  BuiltPlan built = build_plan(kind.workload, options);
  BuiltModelPlan result;
  result.plan.kinds.push_back({kind.name, kind.layers, built.plan});
  result.placement_within_bounds = built.placement_within_bounds;
  result.timings = built.timings;
  result.candidates = built.selection.candidates;
  result.kept = built.selection.kept;
  result.kinds.push_back(std::move(built));
  return result;
}

}  // namespace

BuiltModelPlan build_model_plan(const std::vector<KindWorkload>& kinds,
                                const PlanOptions& options) {
  if (kinds.empty()) throw InvalidInput("no attention kinds to plan");
  if (kinds.size() == 1) return one_kind(kinds.front(), options);
  if (!is_dcp(options.strategy)) return build_one_model_plan(kinds, options);
  const auto start = Clock::now();
  const Workload& first = kinds.front().workload;
  const auto top = static_cast<TokenCount>(std::bit_ceil(
      static_cast<std::uint64_t>(std::max<TokenCount>(1, first.batch().max_length()))));
  std::vector<TokenCount> sizes;
  for (const TokenCount size : options.block_sizes) {
    if (size < 1) throw InvalidInput("block size " + std::to_string(size) + " is not positive");
    const TokenCount effective = std::min(size, top);
    if (std::find(sizes.begin(), sizes.end(), effective) == sizes.end()) sizes.push_back(effective);
  }
  std::optional<BuiltModelPlan> best;
  std::vector<PlanCandidate> candidates;
  double best_seconds = 0;
  const auto consider = [&](BuiltModelPlan built, PlanCandidate candidate) {
    candidates.push_back(candidate);
    if (!best || candidate.seconds() < best_seconds) {
      best_seconds = candidate.seconds();
      best = std::move(built);
      best->kept = candidate.strategy;
    }
  };
  const std::string own(to_string(options.strategy));
  // dcp's own plans are named by their block size: "dcp (block 2048)".
  const auto own_at = [&](TokenCount size) {
    return own + " (block " + std::to_string(size) + ")";
  };
  if (sizes.empty()) {
    BuiltModelPlan built = build_one_model_plan(kinds, options);
    PlanCandidate candidate =
        simulated(built, own_at(first.blocks().block_size()), options.cluster);
    consider(std::move(built), std::move(candidate));
  }
  for (const TokenCount size : sizes) {
    std::optional<std::vector<KindWorkload>> cut;
    try {
      cut.emplace(reblocked(kinds, size));
    } catch (const InvalidInput&) {
      // Too many blocks or tiles at this size: a larger size may still fit.
      if (size == sizes.back() && !best) throw;
      continue;
    }
    BuiltModelPlan built = build_one_model_plan(*cut, options);
    PlanCandidate candidate = simulated(built, own_at(size), options.cluster);
    consider(std::move(built), std::move(candidate));
  }
  if (options.strategy == Strategy::kDcp) {
    for (const Strategy strategy : kStaticStrategies) {
      PlanOptions static_options = options;
      static_options.strategy = strategy;
      const std::string name(to_string(strategy));
      PlanCandidate screened;
      screened.strategy = name;
      screened.simulated = false;
      std::optional<BuiltModelPlan> built;
      try {
        // Screened as a plan of one mask is (plan_search.h): a bound of each kind's estimate from
        // the strategy's structure, weighted by the kind's layers.
        double bound = 0;
        for (const KindWorkload& kind : kinds) {
          bound += kind.layers * static_plan_lower_bound(kind.workload, static_options);
        }
        if (bound >= kScreenFactor * best_seconds) {
          screened.bounded = true;
          screened.estimate_seconds = bound;
          candidates.push_back(std::move(screened));
          continue;
        }
        built.emplace(build_one_model_plan(kinds, static_options));
      } catch (const InvalidInput& e) {
        screened.feasible = false;
        screened.reason = e.what();
        candidates.push_back(std::move(screened));
        continue;
      }
      PlanCandidate candidate = simulated(*built, name, options.cluster);
      if (candidate.seconds() < best_seconds) {
        for (KindPlan& kind : built->plan.kinds) kind.plan.header.strategy = "dcp/" + name;
      }
      consider(std::move(*built), std::move(candidate));
    }
  }
  best->candidates = std::move(candidates);
  best->timings.total_ms = ms_since(start);
  return std::move(*best);
}

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// Multilevel k-way partitioning.
#include "dcp/planner/partition/multilevel_partitioner.h"

#include <algorithm>
#include <unordered_map>

#include "dcp/planner/partition/balance.h"
#include "dcp/planner/partition/greedy_partitioner.h"
#include "dcp/planner/partition/rebalancer.h"

namespace dcp {
namespace {

// Better = within caps first, then lower km1.
bool better(bool balanced_a, Weight km1_a, bool balanced_b, Weight km1_b) {
  if (balanced_a != balanced_b) return balanced_a;
  return km1_a < km1_b;
}

}  // namespace

std::vector<PartId> MultilevelPartitioner::partition(const Hypergraph& graph,
                                                     const PartitionRequest& request) const {
  const PartId k = request.parts;
  if (k == 1 || graph.vertex_count() == 0) {
    return std::vector<PartId>(static_cast<std::size_t>(graph.vertex_count()), 0);
  }
  Rng rng(request.seed);
  Cycle best = run_cycle(graph, request, nullptr, rng);
  if (request.hint.size() == static_cast<std::size_t>(graph.vertex_count())) {
    Cycle refined = run_cycle(graph, request, &request.hint, rng);
    if (better(refined.balanced, refined.km1, best.balanced, best.km1)) best = std::move(refined);
  }
  for (std::int32_t cycle = 0; cycle < options_.vcycles; ++cycle) {
    Cycle again = run_cycle(graph, request, &best.parts, rng);
    if (!better(again.balanced, again.km1, best.balanced, best.km1)) break;
    best = std::move(again);
  }
  // Groups are a starting point; where no grouped cycle met the caps, try once without them.
  if (!best.balanced && !request.groups.empty()) {
    PartitionRequest ungrouped = request;
    ungrouped.groups.clear();
    Cycle plain = run_cycle(graph, ungrouped, nullptr, rng);
    if (better(plain.balanced, plain.km1, best.balanced, best.km1)) best = std::move(plain);
  }
  return std::move(best.parts);
}

MultilevelPartitioner::Cycle MultilevelPartitioner::run_cycle(const Hypergraph& graph,
                                                              const PartitionRequest& request,
                                                              const std::vector<PartId>* hint,
                                                              Rng& rng) const {
  const PartId k = request.parts;
  const std::vector<VertexWeight>& caps = request.max_part_weight;

  // Step 1: coarsen; with a hint, only inside its parts, so that the hint survives to the top.
  VertexWeight smallest_cap = caps.front();
  for (const VertexWeight& cap : caps) {
    smallest_cap.compute = std::min(smallest_cap.compute, cap.compute);
    smallest_cap.memory = std::min(smallest_cap.memory, cap.memory);
  }
  VertexWeight heaviest;
  for (VertexId v = 0; v < graph.vertex_count(); ++v) {
    heaviest.compute = std::max(heaviest.compute, graph.weight(v).compute);
    heaviest.memory = std::max(heaviest.memory, graph.weight(v).memory);
  }
  CoarseningOptions coarsening;
  coarsening.max_cluster_weight = {
      std::max(heaviest.compute, smallest_cap.compute / options_.cluster_fraction_of_part),
      std::max(heaviest.memory, smallest_cap.memory / options_.cluster_fraction_of_part)};
  std::vector<CoarseLevel> levels;
  std::vector<PartId> community;
  if (hint != nullptr) community = *hint;
  const Hypergraph* current = &graph;
  // Adds a level; with a hint, each coarse vertex takes the part of its fine vertices.
  const auto push_level = [&](CoarseLevel level) {
    if (hint != nullptr) {
      std::vector<PartId> coarse_community(static_cast<std::size_t>(level.graph.vertex_count()));
      for (std::size_t v = 0; v < level.coarse_of.size(); ++v)
        coarse_community[static_cast<std::size_t>(level.coarse_of[v])] = community[v];
      community = std::move(coarse_community);
    }
    levels.push_back(std::move(level));
    current = &levels.back().graph;
  };
  // The caller's groups are the first level, split where the hint's parts split them.
  if (request.groups.size() == static_cast<std::size_t>(graph.vertex_count())) {
    std::vector<VertexId> representative(static_cast<std::size_t>(graph.vertex_count()));
    std::unordered_map<std::int64_t, VertexId> first_of;
    for (VertexId v = 0; v < graph.vertex_count(); ++v) {
      const std::int64_t group = request.groups[static_cast<std::size_t>(v)];
      representative[static_cast<std::size_t>(v)] = v;
      if (group < 0) continue;
      const std::int64_t key =
          group * k + (hint != nullptr ? community[static_cast<std::size_t>(v)] : 0);
      representative[static_cast<std::size_t>(v)] = first_of.try_emplace(key, v).first->second;
    }
    push_level(contract(graph, representative));
  }
  const std::int64_t target = static_cast<std::int64_t>(options_.coarsest_vertices_per_part) * k;
  while (current->vertex_count() > target &&
         static_cast<std::int32_t>(levels.size()) < options_.max_levels) {
    coarsening.community = hint != nullptr ? &community : nullptr;
    std::optional<CoarseLevel> level = coarsen(*current, coarsening, rng);
    if (!level) break;
    push_level(std::move(*level));
  }

  // Step 2: the coarsest level: the hint itself, or several greedy tries; each rebalanced and
  // refined, the best kept.
  Cycle best;
  const std::int32_t tries = hint != nullptr ? 1 : options_.initial_tries;
  for (std::int32_t t = 0; t < tries; ++t) {
    Rng try_rng(rng.next_u64());
    PartitionedHypergraph candidate(
        *current, k, hint != nullptr ? community : greedy_partition(*current, request, try_rng));
    const bool balanced = rebalance(candidate, caps);
    fm_refine(candidate, caps, options_.fm);
    if (t == 0 || better(balanced, candidate.km1(), best.balanced, best.km1)) {
      best.parts = candidate.parts();
      best.balanced = balanced;
      best.km1 = candidate.km1();
    }
  }

  // Step 3: project level by level, rebalance where clusters broke the caps, refine.
  for (std::size_t i = levels.size(); i > 0; --i) {
    const Hypergraph& fine = i >= 2 ? levels[i - 2].graph : graph;
    const std::vector<VertexId>& coarse_of = levels[i - 1].coarse_of;
    std::vector<PartId> projected(static_cast<std::size_t>(fine.vertex_count()));
    for (VertexId v = 0; v < fine.vertex_count(); ++v) {
      projected[static_cast<std::size_t>(v)] =
          best.parts[static_cast<std::size_t>(coarse_of[static_cast<std::size_t>(v)])];
    }
    PartitionedHypergraph refined(fine, k, std::move(projected));
    best.balanced = rebalance(refined, caps);
    fm_refine(refined, caps, options_.fm);
    best.parts = refined.parts();
    best.km1 = refined.km1();
  }
  return best;
}

}  // namespace dcp

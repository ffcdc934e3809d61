// SPDX-License-Identifier: Apache-2.0
// Multilevel k-way partitioning.
#include "dcp/planner/partition/multilevel_partitioner.h"

#include <algorithm>

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
  const std::vector<VertexWeight>& caps = request.max_part_weight;
  if (k == 1 || graph.vertex_count() == 0) return std::vector<PartId>(static_cast<std::size_t>(graph.vertex_count()), 0);
  Rng rng(request.seed);

  // Step 1: coarsen.
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
  const Hypergraph* current = &graph;
  const std::int64_t target = static_cast<std::int64_t>(options_.coarsest_vertices_per_part) * k;
  while (current->vertex_count() > target && static_cast<std::int32_t>(levels.size()) < options_.max_levels) {
    std::optional<CoarseLevel> level = coarsen(*current, coarsening, rng);
    if (!level) break;
    levels.push_back(std::move(*level));
    current = &levels.back().graph;
  }

  // Step 2: initial partition of the coarsest level: several greedy tries, each rebalanced and
  // refined; keep the best.
  std::vector<PartId> parts;
  bool best_balanced = false;
  Weight best_km1 = 0;
  for (std::int32_t t = 0; t < options_.initial_tries; ++t) {
    Rng try_rng(rng.next_u64());
    PartitionedHypergraph candidate(*current, k, greedy_partition(*current, request, try_rng));
    const bool balanced = rebalance(candidate, caps);
    fm_refine(candidate, caps, options_.fm);
    if (t == 0 || better(balanced, candidate.km1(), best_balanced, best_km1)) {
      parts = candidate.parts();
      best_balanced = balanced;
      best_km1 = candidate.km1();
    }
  }

  // Step 3: project level by level, rebalance where clusters broke the caps, refine.
  for (std::size_t i = levels.size(); i > 0; --i) {
    const Hypergraph& fine = i >= 2 ? levels[i - 2].graph : graph;
    const std::vector<VertexId>& coarse_of = levels[i - 1].coarse_of;
    std::vector<PartId> projected(static_cast<std::size_t>(fine.vertex_count()));
    for (VertexId v = 0; v < fine.vertex_count(); ++v) {
      projected[static_cast<std::size_t>(v)] = parts[static_cast<std::size_t>(coarse_of[static_cast<std::size_t>(v)])];
    }
    PartitionedHypergraph refined(fine, k, std::move(projected));
    rebalance(refined, caps);
    fm_refine(refined, caps, options_.fm);
    parts = refined.parts();
  }
  return parts;
}

}  // namespace dcp

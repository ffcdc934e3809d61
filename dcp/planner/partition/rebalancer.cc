// SPDX-License-Identifier: Apache-2.0
// Restores both per-part caps by moving the cheapest vertices out of overloaded parts.
#include "dcp/planner/partition/rebalancer.h"

#include <algorithm>

#include "dcp/planner/partition/balance.h"
#include "dcp/planner/partition/fm_refiner.h"
#include "dcp/planner/partition/partitioner.h"

namespace dcp {

bool rebalance(PartitionedHypergraph& partition, const std::vector<VertexWeight>& caps) {
  const Hypergraph& graph = partition.graph();
  const PartId k = partition.k();
  struct Candidate {
    double key;
    VertexId v;
  };
  std::vector<Candidate> candidates;
  for (int round = 0; round < 8; ++round) {
    bool all_within = true;
    bool moved = false;
    for (PartId p = 0; p < k; ++p) {
      const VertexWeight& cap = caps[static_cast<std::size_t>(p)];
      if (within(partition.part_weight(p), cap)) continue;
      all_within = false;
      const bool compute_over = partition.part_weight(p).compute > cap.compute;
      candidates.clear();
      for (VertexId v = 0; v < graph.vertex_count(); ++v) {
        if (partition.part(v) != p) continue;
        const Weight size = compute_over ? graph.weight(v).compute : graph.weight(v).memory;
        if (size <= 0) continue;
        const auto [to, gain] = best_move(partition, v, caps);
        if (to < 0) continue;
        candidates.push_back({static_cast<double>(gain) / static_cast<double>(size), v});
      }
      std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
        return a.key > b.key || (a.key == b.key && a.v < b.v);
      });
      for (const Candidate& c : candidates) {
        const VertexWeight& load = partition.part_weight(p);
        if (compute_over ? load.compute <= cap.compute : load.memory <= cap.memory) break;
        const PartId to = best_move(partition, c.v, caps).first;
        if (to < 0) continue;
        partition.move(c.v, to);
        moved = true;
      }
    }
    if (all_within) return true;
    if (!moved) break;
  }
  for (PartId p = 0; p < k; ++p) {
    if (!within(partition.part_weight(p), caps[static_cast<std::size_t>(p)])) return false;
  }
  return true;
}

bool swap_rebalance(PartitionedHypergraph& partition, const std::vector<VertexWeight>& caps) {
  const Hypergraph& graph = partition.graph();
  const auto cap_of = [&](PartId p) -> const VertexWeight& {
    return caps[static_cast<std::size_t>(p)];
  };
  const auto memory = [&](VertexId v) { return graph.weight(v).memory; };
  // Each swap brings the part over its memory cap within it and keeps the other part within both
  // caps: the parts over their memory cap only shrink, so there are at most k swaps.
  while (true) {
    PartId over = -1;
    for (PartId p = 0; p < partition.k() && over < 0; ++p) {
      if (!within(partition.part_weight(p), cap_of(p))) over = p;
    }
    if (over < 0) return true;
    // Compute comes in small work units that single moves place; only memory, which comes in
    // whole token blocks, needs swaps.
    if (partition.part_weight(over).memory <= cap_of(over).memory) return false;
    VertexId best_v = -1, best_u = -1;
    Weight best_cost = 0;
    for (VertexId v = 0; v < graph.vertex_count(); ++v) {
      if (partition.part(v) != over || memory(v) <= 0) continue;
      for (VertexId u = 0; u < graph.vertex_count(); ++u) {
        const PartId q = partition.part(u);
        if (q == over || memory(u) <= 0 || memory(u) >= memory(v)) continue;
        if (partition.part_weight(over).memory - memory(v) + memory(u) > cap_of(over).memory) {
          continue;
        }
        VertexWeight there = partition.part_weight(q);
        there -= graph.weight(u);
        there += graph.weight(v);
        if (!within(there, cap_of(q))) continue;
        const Weight before = partition.km1();
        partition.move(v, q);
        partition.move(u, over);
        const Weight cost = partition.km1() - before;
        partition.move(u, q);
        partition.move(v, over);
        if (best_v < 0 || cost < best_cost) {
          best_v = v;
          best_u = u;
          best_cost = cost;
        }
      }
    }
    if (best_v < 0) return false;
    const PartId q = partition.part(best_u);
    partition.move(best_v, q);
    partition.move(best_u, over);
  }
}

}  // namespace dcp

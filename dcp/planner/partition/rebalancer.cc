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

}  // namespace dcp

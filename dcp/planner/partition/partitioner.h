// SPDX-License-Identifier: Apache-2.0
// Interface for k-way hypergraph partitioners under two balance constraints (compute, memory).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "dcp/planner/partition/hypergraph.h"

namespace dcp {

// What a partitioner is asked for: `parts` parts, each within its cap in both dimensions, with
// connectivity - 1 (km1) as small as possible. Caps are hard constraints: a partitioner returns a
// partition within them whenever it finds one; otherwise the closest it found (callers check).
struct PartitionRequest {
  PartId parts = 1;
  std::vector<VertexWeight> max_part_weight;  // one per part
  std::uint64_t seed = 0;
  // Optional: a partition to improve on (e.g. a structured placement). Partitioners that use it
  // return a result no worse than the hint after their own refinement of it.
  std::vector<PartId> hint;
  // Optional: vertices with the same group id (>= 0) are alike by construction, e.g. the work units
  // of one tile in the head blocks of one kv head block; a partitioner may start from them as
  // clusters. -1: no group. Refinement may still separate a group.
  std::vector<std::int64_t> groups;
};

// Whether adding `add` to a part keeps it within `cap` in every dimension `add` contributes to.
// A dimension it leaves alone does not block it: work without memory may join a part that is over
// its memory cap, which is what lets the rebalancer fix two dimensions at once.
inline bool fits(const VertexWeight& load, const VertexWeight& add, const VertexWeight& cap) {
  return (add.compute == 0 || load.compute + add.compute <= cap.compute) &&
         (add.memory == 0 || load.memory + add.memory <= cap.memory);
}

class Partitioner {
 public:
  virtual ~Partitioner() = default;
  // Returns the part of every vertex, in [0, request.parts). Deterministic for a given seed.
  virtual std::vector<PartId> partition(const Hypergraph& graph,
                                        const PartitionRequest& request) const = 0;
};

// kMultilevel: coarsening, greedy initial partitioning, k-way FM with a gain cache and a
//   rebalancer at every level (multilevel_partitioner.h).
// kGreedy: the initial partitioner alone on the whole hypergraph; the reference to compare with
//   and a fallback that needs no tuning.
enum class PartitionerKind { kMultilevel, kGreedy };
std::string_view to_string(PartitionerKind kind);
PartitionerKind parse_partitioner(std::string_view name);

std::unique_ptr<Partitioner> create_partitioner(PartitionerKind kind);

}  // namespace dcp

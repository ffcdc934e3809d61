// SPDX-License-Identifier: Apache-2.0
// Greedy growing: heaviest vertices first, each to the fitting part it is most connected to.
#pragma once

#include "dcp/core/rng.h"

#include "dcp/planner/partition/partitioner.h"

namespace dcp {

// Vertices are taken heaviest first (by their larger share of a part's cap; ties in a seeded
// random order) and put on the part that already holds pins of the most net weight among the
// parts where they fit; ties go to the emptier part. A vertex that fits nowhere goes where it
// overfills least. Used alone (PartitionerKind::kGreedy) and for the multilevel initial partition.
std::vector<PartId> greedy_partition(const Hypergraph& graph, const PartitionRequest& request,
                                     Rng& rng);

class GreedyPartitioner final : public Partitioner {
 public:
  std::vector<PartId> partition(const Hypergraph& graph,
                                const PartitionRequest& request) const override;
};

}  // namespace dcp

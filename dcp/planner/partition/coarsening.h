// SPDX-License-Identifier: Apache-2.0
// One coarsening step: cluster strongly connected vertices and contract the clusters.
#pragma once

#include <optional>
#include <vector>

#include "dcp/core/rng.h"

#include "dcp/planner/partition/hypergraph.h"

namespace dcp {

struct CoarseningOptions {
  VertexWeight max_cluster_weight;         // a cluster never exceeds this in either dimension
  std::int32_t max_rated_net_size = 1000;  // larger nets say little about locality and cost much
  // When set, only vertices of the same community are clustered (a V-cycle keeps a partition).
  const std::vector<PartId>* community = nullptr;
};

struct CoarseLevel {
  Hypergraph graph;
  std::vector<VertexId> coarse_of;  // fine vertex -> coarse vertex
};

// Visits vertices in a seeded random order; each unclustered vertex joins the neighbouring cluster
// with the highest heavy-edge rating sum w(e) / (|e| - 1) over shared nets whose weight stays
// within the cap. Contraction keeps each net once with its pins mapped and deduplicated and drops
// nets left with one pin. Returns nothing when clustering cannot shrink the vertex count by 5%.
std::optional<CoarseLevel> coarsen(const Hypergraph& graph, const CoarseningOptions& options,
                                   Rng& rng);

// Contracts the clusters given by `representative` (vertices with the same value form one cluster;
// values are vertex ids). Coarse vertices are numbered in order of their first fine vertex.
CoarseLevel contract(const Hypergraph& graph, const std::vector<VertexId>& representative);

}  // namespace dcp

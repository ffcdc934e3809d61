// SPDX-License-Identifier: Apache-2.0
// Multilevel k-way partitioning: coarsen, partition the coarsest level, refine while uncoarsening.
#pragma once

#include "dcp/planner/partition/coarsening.h"
#include "dcp/planner/partition/fm_refiner.h"
#include "dcp/planner/partition/partitioner.h"

namespace dcp {

struct MultilevelOptions {
  // Coarsening stops at this many vertices per part (or when a step shrinks by less than 5%).
  std::int32_t coarsest_vertices_per_part = 10;
  // A cluster holds at most 1/this of a part's cap in each dimension (or one vertex, if larger).
  std::int32_t cluster_fraction_of_part = 8;
  std::int32_t max_levels = 30;
  // Greedy initial partitions tried on the coarsest level; the best after refinement is kept.
  std::int32_t initial_tries = 8;
  // Extra V-cycles after the first: coarsen inside the best partition's parts (so that it
  // survives to the top), refine it again on the way down, keep it if better.
  std::int32_t vcycles = 3;
  FmOptions fm;
};

// Coarsening, initial partitioning and refinement (greedy tries, rebalancing, k-way FM) as
// documented in docs/partitioner.md; with a hint, a second V-cycle refines the hint and the better
// result wins. Deterministic for a given seed.
class MultilevelPartitioner final : public Partitioner {
 public:
  explicit MultilevelPartitioner(MultilevelOptions options = {}) : options_(options) {}
  std::vector<PartId> partition(const Hypergraph& graph,
                                const PartitionRequest& request) const override;

 private:
  struct Cycle {
    std::vector<PartId> parts;
    bool balanced = false;
    Weight km1 = 0;
  };
  // One V-cycle: coarsen (inside the hint's parts if given), partition the coarsest level (the
  // hint projected, or greedy tries), refine while uncoarsening.
  Cycle run_cycle(const Hypergraph& graph, const PartitionRequest& request,
                  const std::vector<PartId>* hint, Rng& rng) const;

  MultilevelOptions options_;
};

}  // namespace dcp

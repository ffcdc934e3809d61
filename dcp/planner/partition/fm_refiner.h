// SPDX-License-Identifier: Apache-2.0
// k-way Fiduciary-Mattheyses refinement of km1 with a gain cache, under per-part caps.
#pragma once

#include <vector>

#include "dcp/planner/partition/partitioned_hypergraph.h"

namespace dcp {

struct FmOptions {
  std::int32_t max_passes = 6;
  // A pass stops after this many moves without a new best km1, then rolls back to the best.
  std::int32_t max_moves_without_improvement = 350;
};

// Each pass: every boundary vertex enters a priority queue keyed by its best gain to a part where
// it fits; the best is moved and locked, the vertices whose cache entries the move changed are
// re-keyed, and moves continue through negative gains until the stop rule; then the pass rolls
// back to its best prefix. Passes repeat while they improve. Never breaks a cap that held, and
// never moves into a part over its cap. Returns the km1 improvement.
Weight fm_refine(PartitionedHypergraph& partition, const std::vector<VertexWeight>& caps,
                 const FmOptions& options);

// The best part other than v's own where v fits, with its gain; -1 if none. Ties go to the
// emptier part, then the lower id.
std::pair<PartId, Weight> best_move(const PartitionedHypergraph& partition, VertexId v,
                                    const std::vector<VertexWeight>& caps);

}  // namespace dcp

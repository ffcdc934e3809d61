// SPDX-License-Identifier: Apache-2.0
// Restores both per-part caps by moving the cheapest vertices out of overloaded parts.
#pragma once

#include <vector>

#include "dcp/planner/partition/partitioned_hypergraph.h"

namespace dcp {

// While a part exceeds its cap in a dimension, its vertices that carry weight in that dimension
// are ranked by km1 gain per unit of that weight when moved to the best part where they fit, and
// moved in that order until the part fits. Returns true if every part is within its cap.
bool rebalance(PartitionedHypergraph& partition, const std::vector<VertexWeight>& caps);

// What rebalance cannot do when no single token block fits anywhere else: while a part exceeds
// its memory cap, swap one of its vertices with one of less memory (but some) in another part,
// where the other part then fits both caps and this one its memory cap; the swap that raises km1
// least (ties: lowest vertex ids). A part over its compute cap only is left to rebalance. Returns
// true if every part is within its cap.
bool swap_rebalance(PartitionedHypergraph& partition, const std::vector<VertexWeight>& caps);

}  // namespace dcp

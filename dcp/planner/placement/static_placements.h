// SPDX-License-Identifier: Apache-2.0
// Placements that need no partitioner, computed for comparison: zigzag ring CP and greedy LPT.
#pragma once

#include "dcp/planner/placement/placement.h"

namespace dcp {

// Zigzag (ring-flash-attention, TransformerEngine p2p with DualChunkSwap): every sequence is cut
// into 2P chunks of L / 2P tokens; chunks r and 2P-1-r go to device r. A token block goes with the
// chunk holding its first token; a work unit runs on the device of its q block.
Placement zigzag_placement(const Workload& workload, const ClusterShape& cluster);

// Greedy largest-first: token blocks, largest first, each on the device with the least memory;
// then work units, heaviest first, each on the less loaded of the devices holding its q block and
// its kv block if that stays within (1 + eps_compute) x the mean compute, else on the least loaded
// device.
Placement greedy_placement(const Workload& workload, const ClusterShape& cluster,
                           double eps_compute);

}  // namespace dcp

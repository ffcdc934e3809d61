// SPDX-License-Identifier: Apache-2.0
// Where every token block and work unit of a batch runs, and what that placement costs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dcp/model/cluster.h"
#include "dcp/model/workload.h"

#include "dcp/planner/placement/block_hypergraph.h"

namespace dcp {

struct Placement {
  ClusterShape cluster;
  std::vector<DeviceId> token_block_device;  // indexed by BlockId
  std::vector<DeviceId> work_unit_device;    // indexed by WorkUnitId
};

// Throws InvalidInput unless every token block and work unit of `workload` has a device in range.
void validate(const Placement& placement, const Workload& workload);

// The tokens each device holds of `workload` under `placement`, by device id.
std::vector<TokenCount> device_tokens(const Workload& workload, const Placement& placement);
// The tokens of the device holding the most of `workload`'s tokens under `placement`.
TokenCount busiest_device_tokens(const Workload& workload, const Placement& placement);

struct DeviceLoad {
  DeviceId device = 0;
  std::int32_t node = 0;
  double compute = 0;       // forward FLOPs of the work units placed here
  std::int64_t memory = 0;  // bytes of the token blocks placed here (Q, KV, O, LSE of all heads)
  // Forward pass, as if every device exchanged with the owner directly (no relay or in-node
  // reduction): inputs fetched and partial outputs received, inputs sent and partials sent.
  std::int64_t bytes_in = 0;
  std::int64_t bytes_out = 0;
  std::int32_t token_blocks = 0;
  std::int64_t work_units = 0;
};

// Figures of one placement, computed from scratch from the nets (block_hypergraph.h) as dcp's
// Programs move them: an input tensor moves from its owner to every other device that reads it,
// crossing to each other node once and relayed inside it; partial outputs made on several devices
// of a node are reduced inside the node and cross to the owner's node once. Per pass, bytes moved
// between devices of different nodes count as inter-node, the rest as intra-node; km1 is the sum
// over both passes and both link classes (the partitioner's objective).
struct PlacementMetrics {
  std::vector<DeviceLoad> devices;
  double imbalance_compute = 1;  // max / mean over devices
  double imbalance_memory = 1;
  std::int64_t bytes_inter_node = 0;  // forward pass
  std::int64_t bytes_intra_node = 0;
  std::int64_t backward_bytes_inter_node = 0;
  std::int64_t backward_bytes_intra_node = 0;
  std::int64_t km1 = 0;
  std::int32_t devices_without_data = 0;
};

// Prices the step as build_block_hypergraph does with `pricing`.
PlacementMetrics evaluate(const Workload& workload, const Placement& placement,
                          const StepPricing& pricing = {});

// The same with the workload's block hypergraph already built (build_block_hypergraph), for
// callers that evaluate several placements of one workload.
PlacementMetrics evaluate(const Workload& workload, const BlockHypergraph& hypergraph,
                          const Placement& placement);

}  // namespace dcp

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

struct DeviceLoad {
  DeviceId device = 0;
  std::int32_t node = 0;
  double compute = 0;          // forward FLOPs of the work units placed here
  std::int64_t memory = 0;     // bytes of the token blocks placed here (Q, KV, O, LSE of all heads)
  std::int64_t bytes_in = 0;   // forward pass: inputs fetched and partial outputs received
  std::int64_t bytes_out = 0;  // forward pass: inputs sent and partial outputs sent
  std::int32_t token_blocks = 0;
  std::int64_t work_units = 0;
};

// Figures of one placement, computed from scratch from the forward-pass nets: an input tensor
// (Q or KV of a head block) moves from its owner to every other device that reads it; a partial
// output (O with LSE) moves from every contributing device to the owner. Bytes moved between
// devices of different nodes count as inter-node, once per node reached (a tensor needed by
// several devices of a node crosses the network once and is relayed inside the node); the rest
// as intra-node. km1 = inter + intra.
struct PlacementMetrics {
  std::vector<DeviceLoad> devices;
  double imbalance_compute = 1;  // max / mean over devices
  double imbalance_memory = 1;
  std::int64_t bytes_inter_node = 0;
  std::int64_t bytes_intra_node = 0;
  std::int64_t km1 = 0;
  std::int32_t devices_without_data = 0;
};

PlacementMetrics evaluate(const Workload& workload, const Placement& placement);

// The same with the workload's block hypergraph already built (build_block_hypergraph), for
// callers that evaluate several placements of one workload.
PlacementMetrics evaluate(const Workload& workload, const BlockHypergraph& hypergraph,
                          const Placement& placement);

}  // namespace dcp

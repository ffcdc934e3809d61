// SPDX-License-Identifier: Apache-2.0
// dcp's placement: partition the block hypergraph across nodes, then across each node's devices.
#pragma once

#include <cstdint>
#include <vector>

#include "dcp/planner/partition/partitioner.h"
#include "dcp/planner/placement/placement.h"

namespace dcp {

// The default compute balance of dcp's placement: a device computes at most 1.3 x the mean. On
// the DCP paper's micro-benchmark (a100-p4de, 160 batches) it made dcp's plans 5.4 % faster than
// 1.1 x (geometric mean over the 64 configuration x pass cells): where the network bounds a pass, a
// device allowed more than its share moves fewer bytes (docs/partitioner.md).
inline constexpr double kDefaultEpsCompute = 0.3;
// The default memory balance: a device holds at most 1.2 x the mean (or the LPT packing bound).
inline constexpr double kDefaultEpsMemory = 0.2;

struct PlacementOptions {
  ClusterShape cluster;
  double eps_compute = kDefaultEpsCompute;  // device compute <= (1 + eps) x mean
  double eps_memory = kDefaultEpsMemory;    // device memory <= (1 + eps) x mean, or LPT's bound
  // Node compute <= (1 + eps) x mean node compute; negative means eps_compute. A node allowed more
  // than its share moves fewer bytes between nodes, and its devices get (1 + eps_compute) x the
  // node's own mean instead of the global one (reported as the compute bound).
  double node_eps_compute = -1;
  // The most tokens a device may hold, as a data-parallel pool's per-device limit (Megatron's
  // --max-seqlen-per-dp-cp-rank); 0: none. Below (1 + eps_memory) x mean it is the memory bound
  // of dcp's own placements (placement_options_of); above it, dcp's search also deals the
  // sequences to the nodes up to it (SearchOptions::node_groups). At least 0.
  TokenCount max_device_tokens = 0;
  std::uint64_t seed = 0;
  PartitionerKind partitioner = PartitionerKind::kMultilevel;
  // How the plan ships the step the placement prices (set by build_one_plan from PlanOptions).
  StepPricing pricing;
};

// Throws InvalidInput naming the field for a bad cluster or a negative (or non-finite) epsilon.
void validate(const PlacementOptions& options);

struct PlacementTimings {
  double hypergraph_ms = 0;
  double node_partition_ms = 0;
  double device_partition_ms = 0;
  double total_ms = 0;
};

struct PlacementResult {
  Placement placement;
  PlacementTimings timings;
  // The per-device caps the partition was asked to respect, in the hypergraph's units (compute:
  // pairs x heads; memory: bytes). memory_bound_is_packing: (1 + eps_memory) x mean was below what
  // a largest-first packing of the indivisible token blocks can reach, so that packing's maximum is
  // the bound instead.
  std::int64_t compute_bound = 0;
  std::int64_t memory_bound = 0;
  bool memory_bound_is_packing = false;
  bool within_bounds = false;  // every device within its caps
};

PlacementResult place(const Workload& workload, const PlacementOptions& options);

// place()'s partition of any block hypergraph (several kinds' work units around one set of token
// blocks, say): nodes, then each node's devices, then a repair across nodes; fills `result`'s
// bounds, node and device timings and within_bounds, and returns every vertex's device.
// `hint`: a device per vertex to start from and refine; `groups`: PartitionRequest::groups.
std::vector<DeviceId> place_vertices(const Hypergraph& graph, const std::vector<DeviceId>& hint,
                                     const std::vector<std::int64_t>& groups,
                                     const PlacementOptions& options, PlacementResult& result);

// The zigzag placement of `workload` (static_placements.h) as place_vertices's hint: token blocks,
// then work units.
std::vector<DeviceId> zigzag_hint(const Workload& workload, const ClusterShape& cluster);

// The caps place() enforces when `graph` is split into `parts` parts (devices, or nodes), in the
// hypergraph's units: compute (1 + eps_compute) x mean (at least the heaviest work unit), memory
// (1 + eps_memory) x mean or, where that is below it, the maximum of a largest-first packing of the
// token blocks (memory_is_packing).
struct PartCaps {
  Weight compute = 0;
  Weight memory = 0;
  bool memory_is_packing = false;
};
PartCaps part_caps(const Hypergraph& graph, std::int32_t parts, double eps_compute,
                   double eps_memory);

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// dcp's placement of a model with several attention kinds: one placement of the token blocks for
// every kind, and each kind's work units placed against it.
#pragma once

#include <cstdint>
#include <vector>

#include "dcp/model/workload.h"

#include "dcp/planner/placement/hierarchical_placer.h"

namespace dcp {

struct KindPlacementResult {
  // One per kind, in the kinds' order: the same token_block_device in each (tokens never move
  // between layers), and that kind's own work_unit_device.
  std::vector<Placement> placements;
  PlacementTimings timings;
  // Per kind: the compute cap its devices were held to (its own mean times 1 + eps_compute, or
  // the joint partition's where that is higher), and whether every device is within it.
  std::vector<std::int64_t> compute_bounds;
  std::vector<bool> within_bounds;
  std::int64_t memory_bound = 0;  // of the token blocks, as place() gives it
  bool memory_within_bound = true;
};

// Places the kinds' work units (workloads[k], used by layers[k] layers) around one placement of
// the token blocks, in two steps.
// Step 1 places the token blocks and a first placement of every kind's work: one hypergraph
// partitioned as place() partitions one kind's: the token blocks once, every kind's work units
// with their compute weighted by the kind's layer count, every kind's nets with their bytes so
// weighted (what a training step moves), under the memory cap and a cap on the layer-weighted
// compute.
// Step 2 holds each kind to its own compute cap (a layer waits for its slowest device), the token
// blocks staying where step 1 put them (balance_kind).
// With one kind this is place(): the same placement, bit for bit.
// Throws InvalidInput unless there is at least one workload, the layer counts match them and are
// positive, and every workload has the same shape, batch, blocks and head blocking (masks
// differ).
KindPlacementResult place_kinds(const std::vector<Workload>& workloads,
                                const std::vector<std::int32_t>& layers,
                                const PlacementOptions& options);

// Another kind on a placement made for `base` (`placed`, of base's blocks and work units): the same
// token blocks, and each work unit of `workload` where base computes the same (q block, kv block,
// head block), else on its q block's device. Throws InvalidInput unless the two workloads share
// their blocks and `placed` fits `base`.
Placement follow_placement(const Workload& base, const Placement& placed, const Workload& workload);

// The token blocks of `placed` (a placement of another kind's workload over the same blocks),
// every work unit of `workload` on its q block's device: no q block or partial output moves, only
// the kv blocks a device lacks. For a kind whose work per q block is even (a sliding window over
// evenly placed tokens) this can beat both following the other kind's work and rebalancing it.
// Throws InvalidInput unless `placed` has one device per token block of `workload`.
Placement on_q_blocks(const Placement& placed, const Workload& workload);

// `start` with its work units held to the workload's compute caps, its token blocks fixed
// (balance_kind); timings.total_ms counts it. Throws InvalidInput for bad options or a placement
// that does not fit the workload.
PlacementResult balanced_on_tokens(const Workload& workload, const Placement& start,
                                   const PlacementOptions& options);

// One kind's work units (`device`: every vertex of its block hypergraph `graph`, token blocks
// first) held to the kind's compute caps with the token blocks fixed, as place() splits the
// slack: nodes first (each at most sqrt(1 + eps) x the mean node), then each node's devices; at
// each level the rebalancer moves work units off parts over their cap, cheapest in bytes first,
// and FM refinement then moves work units to fewer bytes within the caps (a part's memory cap is
// the memory it holds, so no token block moves). `compute_bound` receives the device cap held
// to. Returns whether every device is within it.
bool balance_kind(const Hypergraph& graph, std::vector<PartId>& device,
                  const PlacementOptions& options, std::int64_t& compute_bound);

// The layer weights step 1 uses: each kind's layer count divided by their greatest common divisor.
std::vector<std::int64_t> kind_weights(const std::vector<std::int32_t>& layers);

// Throws InvalidInput unless the workloads are the same batch cut into the same blocks and head
// blocks (they may differ in masks only): what kinds that share a token placement need.
void check_same_blocks(const std::vector<Workload>& workloads);

}  // namespace dcp

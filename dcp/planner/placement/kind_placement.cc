// SPDX-License-Identifier: Apache-2.0
// One token placement for every attention kind, each kind's work balanced on its own.
#include "dcp/planner/placement/kind_placement.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

#include "dcp/core/error.h"
#include "dcp/core/timing.h"

#include "dcp/planner/partition/partitioned_hypergraph.h"
#include "dcp/planner/partition/rebalancer.h"
#include "dcp/planner/placement/block_hypergraph.h"

namespace dcp {

std::vector<std::int64_t> kind_weights(const std::vector<std::int32_t>& layers) {
  std::int64_t divisor = 0;
  for (const std::int32_t count : layers) {
    if (count < 1) throw InvalidInput("a kind has " + std::to_string(count) + " layers");
    divisor = std::gcd(divisor, static_cast<std::int64_t>(count));
  }
  std::vector<std::int64_t> weights;
  for (const std::int32_t count : layers) weights.push_back(count / divisor);
  return weights;
}

void check_same_blocks(const std::vector<Workload>& workloads) {
  if (workloads.empty()) throw InvalidInput("no attention kinds to place");
  const Workload& first = workloads.front();
  for (std::size_t k = 1; k < workloads.size(); ++k) {
    const Workload& other = workloads[k];
    const auto fail = [&](const std::string& what) {
      throw InvalidInput("attention kind " + std::to_string(k) + " has another " + what +
                         " than kind 0; kinds share their token blocks");
    };
    const AttentionShape& mine = first.shape();
    const AttentionShape& theirs = other.shape();
    if (mine.q_heads != theirs.q_heads || mine.kv_heads != theirs.kv_heads ||
        mine.head_dim != theirs.head_dim || mine.dtype != theirs.dtype ||
        mine.softmax_scale != theirs.softmax_scale) {
      fail("attention shape");
    }
    if (!std::ranges::equal(other.batch().lengths(), first.batch().lengths())) fail("batch");
    if (other.heads().head_block_size() != first.heads().head_block_size()) fail("head blocking");
    if (other.blocks().block_count() != first.blocks().block_count()) fail("block layout");
    for (BlockId b = 0; b < first.blocks().block_count(); ++b) {
      const TokenBlock& x = first.blocks().block(b);
      const TokenBlock& y = other.blocks().block(b);
      if (x.seq != y.seq || x.begin != y.begin || x.tokens != y.tokens) fail("block layout");
    }
  }
}

KindPlacementResult place_kinds(const std::vector<Workload>& workloads,
                                const std::vector<std::int32_t>& layers,
                                const PlacementOptions& options) {
  validate(options);
  check_same_blocks(workloads);
  if (layers.size() != workloads.size()) {
    throw InvalidInput(std::to_string(layers.size()) + " layer counts for " +
                       std::to_string(workloads.size()) + " attention kinds");
  }
  const std::vector<std::int64_t> weights = kind_weights(layers);
  KindPlacementResult result;
  if (workloads.size() == 1) {
    PlacementResult placed = place(workloads.front(), options);
    result.placements.push_back(std::move(placed.placement));
    result.timings = placed.timings;
    result.compute_bounds.push_back(placed.compute_bound);
    result.within_bounds.push_back(placed.within_bounds);
    result.memory_bound = placed.memory_bound;
    result.memory_within_bound = placed.within_bounds;
    return result;
  }
  const auto start = Clock::now();

  // Step 1: one hypergraph. Vertices: the token blocks, then each kind's work units; nets: each
  // kind's, on the shared token block vertices.
  std::vector<BlockHypergraph> graphs;
  for (const Workload& workload : workloads) {
    graphs.push_back(build_block_hypergraph(workload, options.pricing));
  }
  const BlockId token_blocks = graphs.front().token_blocks;
  Hypergraph::Builder builder;
  for (BlockId b = 0; b < token_blocks; ++b) {
    builder.add_vertex(graphs.front().graph.weight(b));
  }
  std::vector<VertexId> offsets;  // each kind's first work unit vertex
  std::vector<DeviceId> hint;
  std::vector<std::int64_t> groups(static_cast<std::size_t>(token_blocks), -1);
  std::int64_t group_base = 0;
  VertexId next = token_blocks;
  const auto limit = std::numeric_limits<Weight>::max() / 4;
  for (std::size_t k = 0; k < workloads.size(); ++k) {
    const Hypergraph& graph = graphs[k].graph;
    offsets.push_back(next);
    if (graph.total_weight().compute > limit / weights[k]) {
      throw InvalidInput("attention kind " + std::to_string(k) + ": its compute times " +
                         std::to_string(layers[k]) + " layers is too large to place");
    }
    for (VertexId v = token_blocks; v < graph.vertex_count(); ++v) {
      builder.add_vertex({graph.weight(v).compute * weights[k], 0});
      ++next;
    }
    const std::vector<DeviceId> zigzag = zigzag_hint(workloads[k], options.cluster);
    if (k == 0) hint.assign(zigzag.begin(), zigzag.begin() + token_blocks);
    hint.insert(hint.end(), zigzag.begin() + token_blocks, zigzag.end());
    std::int64_t top = -1;
    const std::vector<std::int64_t> kind_groups = head_groups(workloads[k]);
    for (std::size_t v = static_cast<std::size_t>(token_blocks); v < kind_groups.size(); ++v) {
      groups.push_back(group_base + kind_groups[v]);
      top = std::max(top, kind_groups[v]);
    }
    group_base += top + 1;
  }
  std::vector<VertexId> pins;
  for (std::size_t k = 0; k < workloads.size(); ++k) {
    const Hypergraph& graph = graphs[k].graph;
    for (NetId e = 0; e < graph.net_count(); ++e) {
      pins.clear();
      for (const VertexId v : graph.pins(e)) {
        pins.push_back(v < token_blocks ? v : offsets[k] + (v - token_blocks));
      }
      builder.add_net(graph.net_weight(e) * weights[k], pins);
    }
  }
  const Hypergraph joint = std::move(builder).build();
  result.timings.hypergraph_ms = ms_since(start);
  PlacementResult joint_result;
  const std::vector<DeviceId> device_of =
      place_vertices(joint, hint, groups, options, joint_result);
  result.timings.node_partition_ms = joint_result.timings.node_partition_ms;
  result.memory_bound = joint_result.memory_bound;

  // Step 2: each kind within its own compute cap, its token blocks fixed (no memory moves: the
  // memory cap is out of reach, and the rebalancer moves work units only for compute).
  const auto kind_start = Clock::now();
  const std::int32_t devices = options.cluster.devices();
  std::vector<DeviceId> token_device(device_of.begin(), device_of.begin() + token_blocks);
  std::vector<Weight> memory(static_cast<std::size_t>(devices), 0);
  for (BlockId b = 0; b < token_blocks; ++b) {
    memory[static_cast<std::size_t>(token_device[static_cast<std::size_t>(b)])] +=
        joint.weight(b).memory;
  }
  for (const Weight used : memory) {
    result.memory_within_bound = result.memory_within_bound && used <= result.memory_bound;
  }
  for (std::size_t k = 0; k < workloads.size(); ++k) {
    const Hypergraph& graph = graphs[k].graph;
    std::vector<PartId> parts(token_device.begin(), token_device.end());
    for (VertexId v = token_blocks; v < graph.vertex_count(); ++v) {
      parts.push_back(device_of[static_cast<std::size_t>(offsets[k] + (v - token_blocks))]);
    }
    const PartCaps caps = part_caps(graph, devices, options.eps_compute, options.eps_memory);
    PartitionedHypergraph partition(graph, devices, std::move(parts));
    bool within = true;
    for (PartId p = 0; p < devices; ++p)
      within = within && partition.part_weight(p).compute <= caps.compute;
    if (!within) {
      const std::vector<VertexWeight> cap(static_cast<std::size_t>(devices),
                                          VertexWeight{caps.compute, limit});
      within = rebalance(partition, cap);
    }
    Placement placement;
    placement.cluster = options.cluster;
    placement.token_block_device = token_device;
    placement.work_unit_device.assign(partition.parts().begin() + token_blocks,
                                      partition.parts().end());
    result.placements.push_back(std::move(placement));
    result.compute_bounds.push_back(caps.compute);
    result.within_bounds.push_back(within && result.memory_within_bound);
  }
  result.timings.device_partition_ms =
      joint_result.timings.device_partition_ms + ms_since(kind_start);
  result.timings.total_ms = ms_since(start);
  return result;
}

}  // namespace dcp

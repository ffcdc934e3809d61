// SPDX-License-Identifier: Apache-2.0
// dcp's placement: nodes first, then the devices of each node.
#include "dcp/planner/placement/hierarchical_placer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <string>

#include "dcp/core/error.h"
#include "dcp/core/packing.h"
#include "dcp/core/timing.h"

#include "dcp/planner/partition/balance.h"
#include "dcp/planner/partition/partitioned_hypergraph.h"
#include "dcp/planner/partition/rebalancer.h"
#include "dcp/planner/placement/block_hypergraph.h"
#include "dcp/planner/placement/static_placements.h"

namespace dcp {
namespace {

Weight scaled(Weight total, double factor, std::int32_t parts) {
  return static_cast<Weight>(std::floor(static_cast<double>(total) * factor / parts));
}

}  // namespace

void validate(const PlacementOptions& options) {
  validate(options.cluster);
  const auto check = [](double eps, const char* name) {
    if (!std::isfinite(eps) || eps < 0) {
      throw InvalidInput(std::string(name) + " must be a number >= 0, got " + std::to_string(eps));
    }
  };
  check(options.eps_compute, "compute epsilon");
  check(options.eps_memory, "memory epsilon");
  if (options.node_eps_compute >= 0 || !std::isfinite(options.node_eps_compute)) {
    check(options.node_eps_compute, "node compute epsilon");
  }
  if (options.max_device_tokens < 0) {
    throw InvalidInput("max_device_tokens must be >= 0 (0: no limit), got " +
                       std::to_string(options.max_device_tokens));
  }
}

PartCaps part_caps(const Hypergraph& graph, std::int32_t parts, double eps_compute,
                   double eps_memory) {
  std::vector<Weight> block_memory;
  Weight heaviest_compute = 0;
  for (VertexId v = 0; v < graph.vertex_count(); ++v) {
    if (graph.weight(v).memory > 0) block_memory.push_back(graph.weight(v).memory);
    heaviest_compute = std::max(heaviest_compute, graph.weight(v).compute);
  }
  const VertexWeight& total = graph.total_weight();
  PartCaps caps;
  caps.compute = std::max(heaviest_compute, scaled(total.compute, 1 + eps_compute, parts));
  caps.memory = scaled(total.memory, 1 + eps_memory, parts);
  const Weight packing = largest_first_max_load(block_memory, parts);
  if (packing > caps.memory) {
    caps.memory = packing;
    caps.memory_is_packing = true;
  }
  return caps;
}

std::vector<DeviceId> place_vertices(const Hypergraph& graph,
                                     const std::vector<DeviceId>& zigzag_of,
                                     const std::vector<std::int64_t>& groups,
                                     const PlacementOptions& options, PlacementResult& result) {
  const ClusterShape& cluster = options.cluster;
  const std::int32_t nodes = cluster.nodes;
  const std::int32_t per_node = cluster.devices_per_node;
  const std::int32_t devices = cluster.devices();
  const auto partitioner = create_partitioner(options.partitioner);

  // Step 1: device caps. Compute units are small; memory comes in indivisible token blocks.
  const PartCaps bounds = part_caps(graph, devices, options.eps_compute, options.eps_memory);
  result.compute_bound = bounds.compute;
  result.memory_bound = bounds.memory;
  result.memory_bound_is_packing = bounds.memory_is_packing;

  // Step 2: nodes. Each level gets about half of the slack, (1 + d)^2 = 1 + eps, so that a node
  // within its cap can always split into devices within theirs (d = sqrt(1 + eps) - 1).
  const double split_compute = std::sqrt(1 + options.eps_compute) - 1;
  const double split_memory = std::sqrt(1 + options.eps_memory) - 1;
  const double node_slack =
      options.node_eps_compute >= 0 ? options.node_eps_compute : split_compute;
  std::vector<PartId> node_of(static_cast<std::size_t>(graph.vertex_count()), 0);
  const auto node_start = Clock::now();
  if (nodes > 1) {
    PartitionRequest request;
    request.parts = nodes;
    request.seed = options.seed;
    const PartCaps node_cap = part_caps(graph, nodes, node_slack, split_memory);
    request.max_part_weight.assign(static_cast<std::size_t>(nodes),
                                   VertexWeight{node_cap.compute, node_cap.memory});
    request.hint.resize(zigzag_of.size());
    for (std::size_t v = 0; v < zigzag_of.size(); ++v)
      request.hint[v] = cluster.node_of(zigzag_of[v]);
    request.groups = groups;
    node_of = partitioner->partition(graph, request);
  }
  result.timings.node_partition_ms = ms_since(node_start);

  // Step 3: devices of each node, on the node's sub-hypergraph. A net keeps only its pins in the
  // node: a tensor owned elsewhere arrives once and is relayed, a partial output is reduced inside
  // the node before it leaves, so inside the node it costs (devices using it - 1) either way.
  const auto device_start = Clock::now();
  std::vector<DeviceId> device_of(static_cast<std::size_t>(graph.vertex_count()), 0);
  std::vector<VertexId> local_id(static_cast<std::size_t>(graph.vertex_count()), -1);
  bool within = true;
  for (std::int32_t node = 0; node < nodes; ++node) {
    std::vector<VertexId> members;
    Hypergraph::Builder builder;
    VertexWeight node_load;
    for (VertexId v = 0; v < graph.vertex_count(); ++v) {
      if (node_of[static_cast<std::size_t>(v)] != node) continue;
      local_id[static_cast<std::size_t>(v)] = static_cast<VertexId>(members.size());
      members.push_back(v);
      builder.add_vertex(graph.weight(v));
      node_load += graph.weight(v);
    }
    std::vector<VertexId> pins;
    for (NetId e = 0; e < graph.net_count(); ++e) {
      pins.clear();
      for (const VertexId v : graph.pins(e)) {
        if (node_of[static_cast<std::size_t>(v)] == node)
          pins.push_back(local_id[static_cast<std::size_t>(v)]);
      }
      if (pins.size() >= 2) builder.add_net(graph.net_weight(e), pins);
    }
    const Hypergraph sub = std::move(builder).build();
    PartitionRequest request;
    request.parts = per_node;
    request.seed = options.seed + static_cast<std::uint64_t>(node) + 1;
    // Within the global caps unless the node was allowed more than its share (node_eps_compute
    // above the split) or holds blocks no packing fits in them; then the node's own mean plus the
    // device-level half of the slack.
    const VertexWeight cap{
        std::max(result.compute_bound, scaled(node_load.compute, 1 + split_compute, per_node)),
        result.memory_bound};
    request.max_part_weight.assign(static_cast<std::size_t>(per_node), cap);
    request.hint.clear();
    request.groups.clear();
    for (const VertexId v : members) {
      request.hint.push_back(zigzag_of[static_cast<std::size_t>(v)] % per_node);
      request.groups.push_back(groups[static_cast<std::size_t>(v)]);
    }
    const std::vector<PartId> parts = per_node > 1 ? partitioner->partition(sub, request)
                                                   : std::vector<PartId>(members.size(), 0);
    std::vector<VertexWeight> loads(static_cast<std::size_t>(per_node));
    for (std::size_t i = 0; i < members.size(); ++i) {
      device_of[static_cast<std::size_t>(members[i])] = node * per_node + parts[i];
      loads[static_cast<std::size_t>(parts[i])] += sub.weight(static_cast<VertexId>(i));
    }
    for (const VertexWeight& load : loads) within = within && dcp::within(load, cap);
    result.compute_bound = std::max(result.compute_bound, cap.compute);
  }
  // Step 4: a node can hold more blocks than its devices can pack within the memory cap (blocks
  // are indivisible). Repair across nodes with the flat rebalancer; it moves the cheapest blocks,
  // and swaps a block for a smaller one where no block fits elsewhere whole.
  if (!within && devices > 1) {
    PartitionedHypergraph flat(graph, devices,
                               std::vector<PartId>(device_of.begin(), device_of.end()));
    const std::vector<VertexWeight> caps(static_cast<std::size_t>(devices),
                                         VertexWeight{result.compute_bound, result.memory_bound});
    within = rebalance(flat, caps) || swap_rebalance(flat, caps);
    std::copy(flat.parts().begin(), flat.parts().end(), device_of.begin());
  }
  result.timings.device_partition_ms = ms_since(device_start);
  result.within_bounds = within;
  return device_of;
}

std::vector<DeviceId> zigzag_hint(const Workload& workload, const ClusterShape& cluster) {
  const Placement zigzag = zigzag_block_placement(workload, cluster);
  std::vector<DeviceId> hint(zigzag.token_block_device);
  hint.insert(hint.end(), zigzag.work_unit_device.begin(), zigzag.work_unit_device.end());
  return hint;
}

PlacementResult place(const Workload& workload, const PlacementOptions& options) {
  validate(options);
  const auto start = Clock::now();
  PlacementResult result;
  const BlockHypergraph block_graph = build_block_hypergraph(workload, options.pricing);
  result.timings.hypergraph_ms = ms_since(start);
  // The zigzag placement is the structured starting point each level also refines (a second
  // V-cycle): sequence locality for short sequences, balanced rows for long ones.
  const std::vector<DeviceId> device_of =
      place_vertices(block_graph.graph, zigzag_hint(workload, options.cluster),
                     head_groups(workload), options, result);
  Placement& placement = result.placement;
  placement.cluster = options.cluster;
  placement.token_block_device.assign(device_of.begin(),
                                      device_of.begin() + block_graph.token_blocks);
  placement.work_unit_device.assign(device_of.begin() + block_graph.token_blocks, device_of.end());
  result.timings.total_ms = ms_since(start);
  return result;
}

}  // namespace dcp

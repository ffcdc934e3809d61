// SPDX-License-Identifier: Apache-2.0
// One token placement for every attention kind, each kind's work balanced on its own.
#include "dcp/planner/placement/kind_placement.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

#include "dcp/core/error.h"
#include "dcp/core/timing.h"

#include "dcp/planner/partition/fm_refiner.h"
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

namespace {

Weight scaled_mean(Weight total, double factor, std::int32_t parts) {
  return static_cast<Weight>(std::floor(static_cast<double>(total) * factor / parts));
}

// Rebalances and refines `parts` (each vertex's part among `count`) under compute caps `compute`
// per part, the token blocks held where they are: a part's memory cap is the memory it holds, so
// no token block fits anywhere else, and work units (no memory) move freely. Returns whether
// every part is within its compute cap.
bool refine_work(const Hypergraph& graph, PartId count, std::vector<PartId>& parts,
                 const std::vector<Weight>& compute) {
  PartitionedHypergraph partition(graph, count, std::move(parts));
  std::vector<VertexWeight> caps;
  for (PartId p = 0; p < count; ++p) {
    caps.push_back({compute[static_cast<std::size_t>(p)], partition.part_weight(p).memory});
  }
  bool within = true;
  for (PartId p = 0; p < count; ++p) {
    within =
        within && partition.part_weight(p).compute <= caps[static_cast<std::size_t>(p)].compute;
  }
  if (!within) within = rebalance(partition, caps);
  fm_refine(partition, caps, FmOptions{});
  parts.assign(partition.parts().begin(), partition.parts().end());
  return within;
}

// Step 1, joint: one hypergraph with the token blocks once, every kind's work units with their
// compute weighted by the kind's layers, every kind's nets so weighted, partitioned as place()
// partitions one kind's.
void joint_placement(const std::vector<Workload>& workloads,
                     const std::vector<BlockHypergraph>& graphs,
                     const std::vector<std::int64_t>& weights, const PlacementOptions& options,
                     std::vector<std::vector<PartId>>& device_of, KindPlacementResult& result) {
  const BlockId token_blocks = graphs.front().token_blocks;
  Hypergraph::Builder builder;
  for (BlockId b = 0; b < token_blocks; ++b) builder.add_vertex(graphs.front().graph.weight(b));
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
                         std::to_string(weights[k]) + " is too large to place");
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
  PlacementResult joint_result;
  const std::vector<DeviceId> device = place_vertices(joint, hint, groups, options, joint_result);
  result.timings.node_partition_ms = joint_result.timings.node_partition_ms;
  result.timings.device_partition_ms = joint_result.timings.device_partition_ms;
  result.memory_bound = joint_result.memory_bound;
  for (std::size_t k = 0; k < workloads.size(); ++k) {
    device_of[k].assign(device.begin(), device.begin() + token_blocks);
    const auto first = device.begin() + offsets[k];
    device_of[k].insert(device_of[k].end(), first,
                        first + (graphs[k].graph.vertex_count() - token_blocks));
  }
}

}  // namespace

bool balance_kind(const Hypergraph& graph, std::vector<PartId>& device,
                  const PlacementOptions& options, std::int64_t& compute_bound) {
  const ClusterShape& cluster = options.cluster;
  const std::int32_t devices = cluster.devices();
  const std::int32_t per_node = cluster.devices_per_node;
  const PartCaps device_caps = part_caps(graph, devices, options.eps_compute, options.eps_memory);
  compute_bound = device_caps.compute;
  // As place() splits the slack: nodes at (1 + d), devices at (1 + d) x their node's mean.
  const double split = std::sqrt(1 + options.eps_compute) - 1;
  if (cluster.nodes > 1) {
    std::vector<PartId> node(device.size());
    for (std::size_t v = 0; v < device.size(); ++v) node[v] = cluster.node_of(device[v]);
    const Weight node_cap = part_caps(graph, cluster.nodes, split, options.eps_memory).compute;
    const std::vector<PartId> before = node;
    refine_work(graph, cluster.nodes, node,
                std::vector<Weight>(static_cast<std::size_t>(cluster.nodes), node_cap));
    for (std::size_t v = 0; v < device.size(); ++v) {
      // A work unit that changed node starts at the same local device there.
      if (node[v] != before[v]) device[v] = node[v] * per_node + device[v] % per_node;
    }
  }
  bool within = true;
  std::vector<VertexId> local_id(static_cast<std::size_t>(graph.vertex_count()), -1);
  for (std::int32_t n = 0; n < cluster.nodes; ++n) {
    std::vector<VertexId> members;
    Hypergraph::Builder builder;
    Weight node_compute = 0;
    for (VertexId v = 0; v < graph.vertex_count(); ++v) {
      if (cluster.node_of(device[static_cast<std::size_t>(v)]) != n) continue;
      local_id[static_cast<std::size_t>(v)] = static_cast<VertexId>(members.size());
      members.push_back(v);
      builder.add_vertex(graph.weight(v));
      node_compute += graph.weight(v).compute;
    }
    std::vector<VertexId> pins;
    for (NetId e = 0; e < graph.net_count(); ++e) {
      pins.clear();
      for (const VertexId v : graph.pins(e)) {
        if (cluster.node_of(device[static_cast<std::size_t>(v)]) == n) {
          pins.push_back(local_id[static_cast<std::size_t>(v)]);
        }
      }
      if (pins.size() >= 2) builder.add_net(graph.net_weight(e), pins);
    }
    const Hypergraph sub = std::move(builder).build();
    std::vector<PartId> parts;
    for (const VertexId v : members)
      parts.push_back(device[static_cast<std::size_t>(v)] % per_node);
    const Weight cap =
        std::max(device_caps.compute, scaled_mean(node_compute, 1 + split, per_node));
    compute_bound = std::max(compute_bound, cap);
    if (per_node > 1) {
      within = refine_work(sub, per_node, parts,
                           std::vector<Weight>(static_cast<std::size_t>(per_node), cap)) &&
               within;
    } else {
      within = within && node_compute <= cap;
    }
    for (std::size_t i = 0; i < members.size(); ++i) {
      device[static_cast<std::size_t>(members[i])] = n * per_node + parts[i];
    }
  }
  return within;
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
  std::vector<BlockHypergraph> graphs;
  for (const Workload& workload : workloads) {
    graphs.push_back(build_block_hypergraph(workload, options.pricing));
  }
  const BlockId token_blocks = graphs.front().token_blocks;
  result.timings.hypergraph_ms = ms_since(start);
  // Every kind's vertices' devices: the token blocks, then the kind's work units.
  std::vector<std::vector<PartId>> device_of(workloads.size());
  joint_placement(workloads, graphs, weights, options, device_of, result);
  const auto kind_start = Clock::now();
  const std::vector<PartId> token_device(device_of.front().begin(),
                                         device_of.front().begin() + token_blocks);
  std::vector<Weight> memory(static_cast<std::size_t>(options.cluster.devices()), 0);
  for (BlockId b = 0; b < token_blocks; ++b) {
    memory[static_cast<std::size_t>(token_device[static_cast<std::size_t>(b)])] +=
        graphs.front().graph.weight(b).memory;
  }
  for (const Weight used : memory) {
    result.memory_within_bound = result.memory_within_bound && used <= result.memory_bound;
  }
  // Step 2: each kind within its own compute cap, the token blocks fixed.
  for (std::size_t k = 0; k < workloads.size(); ++k) {
    std::int64_t bound = 0;
    const bool within = balance_kind(graphs[k].graph, device_of[k], options, bound);
    Placement placement;
    placement.cluster = options.cluster;
    placement.token_block_device.assign(token_device.begin(), token_device.end());
    placement.work_unit_device.assign(device_of[k].begin() + token_blocks, device_of[k].end());
    result.placements.push_back(std::move(placement));
    result.compute_bounds.push_back(bound);
    result.within_bounds.push_back(within && result.memory_within_bound);
  }
  result.timings.device_partition_ms += ms_since(kind_start);
  result.timings.total_ms = ms_since(start);
  return result;
}

Placement follow_placement(const Workload& base, const Placement& placed,
                           const Workload& workload) {
  check_same_blocks({base, workload});
  validate(placed, base);
  Placement placement;
  placement.cluster = placed.cluster;
  placement.token_block_device = placed.token_block_device;
  placement.work_unit_device.reserve(static_cast<std::size_t>(workload.work_unit_count()));
  // Tiles of both are ordered by (sequence, q block, kv block).
  const auto key = [](const Tile& t) { return std::tuple(t.seq, t.q_block, t.kv_block); };
  const auto base_tiles = base.tiles();
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    const WorkUnit unit = workload.work_unit(w);
    const Tile& tile = workload.tiles()[static_cast<std::size_t>(unit.tile)];
    const auto it = std::lower_bound(base_tiles.begin(), base_tiles.end(), tile,
                                     [&](const Tile& a, const Tile& b) { return key(a) < key(b); });
    if (it != base_tiles.end() && key(*it) == key(tile)) {
      const auto base_tile = static_cast<TileId>(it - base_tiles.begin());
      placement.work_unit_device.push_back(placed.work_unit_device[static_cast<std::size_t>(
          base.work_unit_id(unit.head_block, base_tile))]);
    } else {
      placement.work_unit_device.push_back(placed.token_block_device[static_cast<std::size_t>(
          workload.blocks().block_id(unit.seq, unit.q_block))]);
    }
  }
  return placement;
}

Placement on_q_blocks(const Placement& placed, const Workload& workload) {
  if (std::cmp_not_equal(placed.token_block_device.size(), workload.blocks().block_count())) {
    throw InvalidInput("a placement of " + std::to_string(placed.token_block_device.size()) +
                       " token blocks for a workload of " +
                       std::to_string(workload.blocks().block_count()));
  }
  Placement placement;
  placement.cluster = placed.cluster;
  placement.token_block_device = placed.token_block_device;
  placement.work_unit_device.reserve(static_cast<std::size_t>(workload.work_unit_count()));
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    const WorkUnit unit = workload.work_unit(w);
    placement.work_unit_device.push_back(placed.token_block_device[static_cast<std::size_t>(
        workload.blocks().block_id(unit.seq, unit.q_block))]);
  }
  return placement;
}

PlacementResult balanced_on_tokens(const Workload& workload, const Placement& start,
                                   const PlacementOptions& options) {
  validate(options);
  validate(start, workload);
  const auto begin = Clock::now();
  const BlockHypergraph graph = build_block_hypergraph(workload, options.pricing);
  std::vector<PartId> device(start.token_block_device.begin(), start.token_block_device.end());
  device.insert(device.end(), start.work_unit_device.begin(), start.work_unit_device.end());
  PlacementResult result;
  result.within_bounds = balance_kind(graph.graph, device, options, result.compute_bound);
  result.placement.cluster = start.cluster;
  result.placement.token_block_device = start.token_block_device;
  result.placement.work_unit_device.assign(device.begin() + graph.token_blocks, device.end());
  result.timings.total_ms = ms_since(begin);
  return result;
}

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// Placement validation and figures.
#include "dcp/planner/placement/placement.h"

#include <algorithm>
#include <string>

#include "dcp/core/error.h"

#include "dcp/model/tensor.h"

#include "dcp/planner/placement/block_hypergraph.h"

namespace dcp {

void validate(const Placement& placement, const Workload& workload) {
  const auto check = [&](const std::vector<DeviceId>& devices, std::int64_t expected,
                         const char* what) {
    if (static_cast<std::int64_t>(devices.size()) != expected) {
      throw InvalidInput(std::string("placement has ") + std::to_string(devices.size()) + " " +
                         what + ", the workload " + std::to_string(expected));
    }
    for (std::size_t i = 0; i < devices.size(); ++i) {
      if (devices[i] < 0 || devices[i] >= placement.cluster.devices()) {
        throw InvalidInput(std::string(what) + " " + std::to_string(i) + " is on device " +
                           std::to_string(devices[i]) + ", outside [0, " +
                           std::to_string(placement.cluster.devices()) + ")");
      }
    }
  };
  check(placement.token_block_device, workload.blocks().block_count(), "token blocks");
  check(placement.work_unit_device, workload.work_unit_count(), "work units");
}

PlacementMetrics evaluate(const Workload& workload, const Placement& placement,
                          const StepPricing& pricing) {
  return evaluate(workload, build_block_hypergraph(workload, pricing), placement);
}

PlacementMetrics evaluate(const Workload& workload, const BlockHypergraph& hypergraph,
                          const Placement& placement) {
  validate(placement, workload);
  const Hypergraph& graph = hypergraph.graph;
  const ClusterShape& cluster = placement.cluster;
  PlacementMetrics metrics;
  metrics.devices.resize(static_cast<std::size_t>(cluster.devices()));
  for (DeviceId d = 0; d < cluster.devices(); ++d) {
    metrics.devices[static_cast<std::size_t>(d)].device = d;
    metrics.devices[static_cast<std::size_t>(d)].node = cluster.node_of(d);
  }
  for (BlockId b = 0; b < hypergraph.token_blocks; ++b) {
    DeviceLoad& load = metrics.devices[static_cast<std::size_t>(
        placement.token_block_device[static_cast<std::size_t>(b)])];
    load.memory += graph.weight(hypergraph.vertex_of_block(b)).memory;
    ++load.token_blocks;
  }
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    DeviceLoad& load = metrics.devices[static_cast<std::size_t>(
        placement.work_unit_device[static_cast<std::size_t>(w)])];
    load.compute += forward_flops(workload.work_unit(w).pairs, workload.shape(), workload.heads());
    ++load.work_units;
  }

  // Devices of each net, with the owner first; per node counts give inter- and intra-node bytes.
  std::vector<DeviceId> devices;
  std::vector<std::int32_t> per_node(static_cast<std::size_t>(cluster.nodes), 0);
  const auto device_of = [&](VertexId v) {
    return v < hypergraph.token_blocks
               ? placement.token_block_device[static_cast<std::size_t>(v)]
               : placement.work_unit_device[static_cast<std::size_t>(v - hypergraph.token_blocks)];
  };
  for (NetId e = 0; e < graph.net_count(); ++e) {
    devices.clear();
    for (const VertexId v : graph.pins(e)) devices.push_back(device_of(v));
    const DeviceId owner = placement.token_block_device[static_cast<std::size_t>(
        hypergraph.net_owner[static_cast<std::size_t>(e)])];
    std::sort(devices.begin(), devices.end());
    devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
    const NetBytes& moved = hypergraph.net_bytes[static_cast<std::size_t>(e)];
    std::int32_t nodes_reached = 0;
    for (const DeviceId d : devices) {
      if (per_node[static_cast<std::size_t>(cluster.node_of(d))]++ == 0) ++nodes_reached;
      if (d == owner) continue;
      DeviceLoad& reader = metrics.devices[static_cast<std::size_t>(d)];
      DeviceLoad& home = metrics.devices[static_cast<std::size_t>(owner)];
      reader.bytes_in += moved.forward_input;
      home.bytes_out += moved.forward_input;
      reader.bytes_out += moved.forward_output;
      home.bytes_in += moved.forward_output;
    }
    const auto extra_devices = static_cast<std::int64_t>(devices.size()) - 1;
    const std::int64_t extra_nodes = nodes_reached - 1;
    metrics.km1 += graph.net_weight(e) * extra_devices;
    metrics.bytes_inter_node += moved.forward() * extra_nodes;
    metrics.bytes_intra_node += moved.forward() * (extra_devices - extra_nodes);
    metrics.backward_bytes_inter_node += moved.backward() * extra_nodes;
    metrics.backward_bytes_intra_node += moved.backward() * (extra_devices - extra_nodes);
    for (const DeviceId d : devices) per_node[static_cast<std::size_t>(cluster.node_of(d))] = 0;
  }

  double max_compute = 0, sum_compute = 0;
  std::int64_t max_memory = 0, sum_memory = 0;
  for (const DeviceLoad& load : metrics.devices) {
    max_compute = std::max(max_compute, load.compute);
    sum_compute += load.compute;
    max_memory = std::max(max_memory, load.memory);
    sum_memory += load.memory;
    metrics.devices_without_data += load.token_blocks == 0 ? 1 : 0;
  }
  const double n = cluster.devices();
  metrics.imbalance_compute = sum_compute > 0 ? max_compute * n / sum_compute : 1.0;
  metrics.imbalance_memory =
      sum_memory > 0 ? static_cast<double>(max_memory) * n / static_cast<double>(sum_memory) : 1.0;
  return metrics;
}

std::vector<TokenCount> device_tokens(const Workload& workload, const Placement& placement) {
  std::vector<TokenCount> held(static_cast<std::size_t>(placement.cluster.devices()), 0);
  for (BlockId b = 0; b < workload.blocks().block_count(); ++b) {
    held[static_cast<std::size_t>(placement.token_block_device[static_cast<std::size_t>(b)])] +=
        workload.blocks().block(b).tokens;
  }
  return held;
}

TokenCount busiest_device_tokens(const Workload& workload, const Placement& placement) {
  const std::vector<TokenCount> held = device_tokens(workload, placement);
  return *std::max_element(held.begin(), held.end());
}

}  // namespace dcp

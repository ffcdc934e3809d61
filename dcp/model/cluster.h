// SPDX-License-Identifier: Apache-2.0
// The cluster a plan runs on: its shape, and the constants of its cost model.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dcp {

using DeviceId = std::int32_t;  // global: node * devices_per_node + local device

struct ClusterShape {
  std::int32_t nodes = 1;
  std::int32_t devices_per_node = 1;

  std::int32_t devices() const { return nodes * devices_per_node; }
  std::int32_t node_of(DeviceId device) const { return device / devices_per_node; }
  friend bool operator==(const ClusterShape&, const ClusterShape&) = default;
};

// Throws InvalidInput naming the field unless nodes and devices per node are in [1, 65536] and
// their product is at most 65536.
void validate(const ClusterShape& cluster);

// A described cluster. Rates are sustained figures in SI units (bytes/s, FLOP/s, seconds); the
// presets say where each one comes from (docs/cost_model.md).
struct ClusterSpec {
  std::string name = "custom";
  ClusterShape shape;
  // Device to device inside a node (NVLink through NVSwitch): per device, each direction.
  double intra_node_bandwidth = 0;
  double intra_node_latency = 0;
  // The node's network interfaces together, each direction, shared by the node's devices.
  double inter_node_bandwidth = 0;
  double inter_node_latency = 0;
  // Blockwise attention kernel throughput on full tiles, forward and backward.
  double forward_flops = 0;
  double backward_flops = 0;
  // Fixed cost of one kernel launch (one attention, merge or sum instruction).
  double kernel_overhead = 0;

  // The kernel's shape (the simulator's cost model, docs/cost_model.md). Optional in cluster
  // files; the defaults here are neutral (every pair costs the same).
  // Device memory bandwidth for loads, stores, merges and sums (bytes/s, read plus write).
  double memory_bandwidth = 1e12;
  // Share of a pair's kernel time at head dim 128 that does not scale with the head dim (the
  // softmax's exp, scaling and bookkeeping); the rest scales with head_dim / 128.
  double softmax_share = 0;
  // Kernel time with fp32 storage over bf16/fp16 storage.
  double fp32_kernel_factor = 1;
  // Extra time of a sub-tile the mask cuts (element-wise masking), relative to a full one.
  double partial_subtile_extra = 0;
  // Fixed cost per computed sub-tile (loading its q and kv chunks, the loop around it).
  double subtile_overhead = 0;
  // The kernel's sub-tile (q rows x keys) per pass: tiles are computed in these units, and a
  // sub-tile with any unmasked pair costs its used rectangle.
  std::int32_t forward_subtile_q = 128;
  std::int32_t forward_subtile_kv = 128;
  std::int32_t backward_subtile_q = 128;
  std::int32_t backward_subtile_kv = 128;

  // Seconds to move `bytes` between two devices (same node or not), alone on the link.
  double transfer_seconds(std::int64_t bytes, bool inter_node) const;
};

// Throws InvalidInput naming the field unless the shape is valid and every rate is positive and
// finite and every latency finite and not negative.
void validate(const ClusterSpec& spec);

// Preset names, in the order `dcp plan --help` lists them.
std::vector<std::string> cluster_presets();
bool is_cluster_preset(std::string_view name);
// The preset of that name with its own shape (nodes, devices per node). Throws InvalidInput
// naming the name and listing the presets if there is none.
ClusterSpec cluster_preset(std::string_view name);

// Reads a cluster file: "key = value" lines, '#' comments. An optional first key `preset` names
// the spec the other keys change. Required keys: name, nodes, devices_per_node, intra_node_gbps,
// intra_node_latency_us, inter_node_gbps (per node), inter_node_latency_us, forward_tflops,
// backward_tflops, kernel_overhead_us (GB/s = 1e9 bytes/s). Optional keys (the kernel's shape):
// memory_gbps, softmax_share, fp32_kernel_factor, partial_subtile_extra, subtile_overhead_us,
// forward_subtile_q, forward_subtile_kv, backward_subtile_q, backward_subtile_kv. Throws
// InvalidInput naming the file,
// line and key for an unknown key, a repeated key, a bad number or a missing field, and IoError if
// the file cannot be read.
ClusterSpec read_cluster_file(const std::string& path);
ClusterSpec parse_cluster_text(std::string_view text, std::string_view origin);

// A preset name, or else a cluster file path.
ClusterSpec resolve_cluster(const std::string& preset_or_file);

// The file form of a spec (parse_cluster_text reads it back).
std::string to_cluster_text(const ClusterSpec& spec);

}  // namespace dcp

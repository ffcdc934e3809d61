// SPDX-License-Identifier: Apache-2.0
// The cluster a plan runs on: its shape, and the constants of its cost model.
#pragma once

#include <cstdint>
#include <span>
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

// How much of a link's bandwidth a transfer of `bytes` bytes reaches (a point of a link's
// efficiency curve; see ClusterSpec::intra_node_efficiency).
struct SizeEfficiency {
  std::int64_t bytes = 0;
  double efficiency = 1;
  friend bool operator==(const SizeEfficiency&, const SizeEfficiency&) = default;
};

// The efficiency of a transfer of `bytes` on a curve: 1 if the curve is empty, the first or last
// point's beyond its ends, else interpolated linearly in log(bytes) between the points around it.
double size_efficiency(std::span<const SizeEfficiency> curve, std::int64_t bytes);

// The efficiency curve s / (s + half_bytes) (half the link's rate at half_bytes: a fixed cost per
// message), as points at 4 KiB, 16 KiB, ..., 1 GiB, each efficiency rounded to 3 decimals.
std::vector<SizeEfficiency> half_rate_curve(double half_bytes);

// A described cluster. Rates are sustained figures in SI units (bytes/s, FLOP/s, seconds); the
// presets say where each one comes from (docs/cost_model.md).
struct ClusterSpec {
  std::string name = "custom";
  ClusterShape shape;
  // Device to device inside a node (NVLink through NVSwitch): per device, each direction.
  double intra_node_bandwidth = 0;
  double intra_node_latency = 0;
  // The node's network interfaces together, each direction.
  double inter_node_bandwidth = 0;
  double inter_node_latency = 0;
  // The node's network interfaces: local device l uses interface l * nics_per_node /
  // devices_per_node, and a transfer between nodes is bounded by its sender's and its receiver's
  // interfaces, each at inter_node_bandwidth / nics_per_node per direction (NIC affinity: p4de has
  // 4 EFA interfaces, two GPUs each; DGX H100 one per GPU). 1: one interface all devices share.
  std::int32_t nics_per_node = 1;
  // The share of a link's bandwidth a message reaches by its size (protocol and pipelining
  // overheads of real transports at small sizes): a message of s bytes occupies its link sides as
  // s / efficiency(s) bytes would. What one launch moves between two devices is one message
  // (executors and transports pack it). Points in increasing size; empty: 1 at every size.
  std::vector<SizeEfficiency> intra_node_efficiency;
  std::vector<SizeEfficiency> inter_node_efficiency;
  // The most one point-to-point transfer reaches on its own, whatever its link sides have left
  // (a transport's single stream: NCCL's send/recv moves one message over a few channels, well
  // below what a NIC carries for several at once). It caps the rate at which a transfer moves its
  // link bytes (so the size efficiency applies under it as under the link) without taking more of
  // the link than that rate. 0: no cap beyond the link.
  double intra_node_stream_bandwidth = 0;
  double inter_node_stream_bandwidth = 0;
  // A Launch starts its transfers launch_overhead + launch_peer_overhead x (its distinct peers)
  // after it is issued (a group of point-to-point operations: the host's set-up per peer and the
  // communication kernel's launch). It costs the compute stream nothing.
  double launch_overhead = 0;
  double launch_peer_overhead = 0;
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
  // A kernel's fixed work per loop, in pairs' worth of keys per row: a forward tile costs
  // tile_setup_tokens more keys for every q row of each q sub-tile it computes (loading q,
  // writing o and lse), a backward tile as many more queries for every key of each kv sub-tile
  // (loading k and v, writing dk and dv). So a full forward tile of q x kv costs
  // q x (kv + tile_setup_tokens) pairs: its rate is kv / (kv + tile_setup_tokens) of the
  // sustained rate (FlashAttention's rate on 512-token tiles is well below its rate on 4096).
  double tile_setup_tokens = 0;
  // Whether a computed sub-tile costs its whole q x kv shape (GPU kernels: rows past a short
  // sequence and keys past its end are computed and masked) or only the rectangle its attended
  // pairs span (the CPU kernels).
  bool whole_subtiles = false;
  // The kernel's sub-tile (q rows x keys) per pass: tiles are computed in these units.
  std::int32_t forward_subtile_q = 128;
  std::int32_t forward_subtile_kv = 128;
  std::int32_t backward_subtile_q = 128;
  std::int32_t backward_subtile_kv = 128;

  // The network interface (of all nodes' interfaces, node-major) device `device` uses.
  std::int32_t nic_of(DeviceId device) const;
  // One interface's bandwidth, each direction.
  double nic_bandwidth() const { return inter_node_bandwidth / nics_per_node; }
  // The bytes a transfer of `bytes` occupies its link sides for: bytes / the efficiency at
  // `message_bytes`, the size of the message it travels in (the bytes a launch moves between its
  // two devices, which transports send as one; 0: the transfer's own bytes).
  double link_bytes(std::int64_t bytes, bool inter_node, std::int64_t message_bytes = 0) const;
  // The cap on one transfer's rate (the stream bandwidth; infinity where there is none).
  double stream_bandwidth(bool inter_node) const;
  // Seconds to move `bytes` between two devices (same node or not), alone on its link sides: the
  // latency plus its link bytes over the device's (intra) or the interface's (inter) bandwidth,
  // or over the stream bandwidth where that is lower.
  double transfer_seconds(std::int64_t bytes, bool inter_node) const;
};

// ClusterSpec::link_bytes for a stream of transfers in which a message's transfers come one after
// another (a schedule's, a simulation's): the efficiency at the message's size (two logarithms)
// is computed once per message. Same results as link_bytes.
class MessageLinkBytes {
 public:
  explicit MessageLinkBytes(const ClusterSpec& spec) : spec_(spec) {}
  double operator()(std::int64_t bytes, bool inter_node, std::int64_t message_bytes);

 private:
  const ClusterSpec& spec_;
  std::int64_t message_ = -1;
  bool inter_node_ = false;
  double efficiency_ = 1;
};

// Throws InvalidInput naming the field unless the shape is valid and every rate is positive and
// finite and every latency finite and not negative.
void validate(const ClusterSpec& spec);

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// The fields of a ClusterSpec as cluster files name them, with their units and ranges: shared by
// the spec's validation (cluster.cc) and the file's reader and writer (cluster_file.cc).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dcp/model/cluster.h"

namespace dcp::cluster_detail {

struct Field {
  const char* key;
  double ClusterSpec::*member;
  double unit;
  bool required;
};

inline constexpr Field kFields[] = {
    {"intra_node_gbps", &ClusterSpec::intra_node_bandwidth, 1e9, true},
    {"intra_node_latency_us", &ClusterSpec::intra_node_latency, 1e-6, true},
    {"inter_node_gbps", &ClusterSpec::inter_node_bandwidth, 1e9, true},
    {"inter_node_latency_us", &ClusterSpec::inter_node_latency, 1e-6, true},
    {"forward_tflops", &ClusterSpec::forward_flops, 1e12, true},
    {"backward_tflops", &ClusterSpec::backward_flops, 1e12, true},
    {"kernel_overhead_us", &ClusterSpec::kernel_overhead, 1e-6, true},
    {"memory_gbps", &ClusterSpec::memory_bandwidth, 1e9, false},
    {"softmax_share", &ClusterSpec::softmax_share, 1, false},
    {"fp32_kernel_factor", &ClusterSpec::fp32_kernel_factor, 1, false},
    {"partial_subtile_extra", &ClusterSpec::partial_subtile_extra, 1, false},
    {"subtile_overhead_us", &ClusterSpec::subtile_overhead, 1e-6, false},
    {"tile_setup_tokens", &ClusterSpec::tile_setup_tokens, 1, false},
    {"launch_overhead_us", &ClusterSpec::launch_overhead, 1e-6, false},
    {"launch_peer_overhead_us", &ClusterSpec::launch_peer_overhead, 1e-6, false},
    {"intra_node_stream_gbps", &ClusterSpec::intra_node_stream_bandwidth, 1e9, false},
    {"inter_node_stream_gbps", &ClusterSpec::inter_node_stream_bandwidth, 1e9, false},
};

struct IntField {
  const char* key;
  std::int32_t ClusterSpec::*member;
  std::int32_t min, max;
};

inline constexpr IntField kIntFields[] = {
    {"forward_subtile_q", &ClusterSpec::forward_subtile_q, 1, 65536},
    {"forward_subtile_kv", &ClusterSpec::forward_subtile_kv, 1, 65536},
    {"backward_subtile_q", &ClusterSpec::backward_subtile_q, 1, 65536},
    {"backward_subtile_kv", &ClusterSpec::backward_subtile_kv, 1, 65536},
    {"nics_per_node", &ClusterSpec::nics_per_node, 1, 65536},
};

struct CurveField {
  const char* key;
  std::vector<SizeEfficiency> ClusterSpec::*member;
};

inline constexpr CurveField kCurveFields[] = {
    {"intra_node_efficiency", &ClusterSpec::intra_node_efficiency},
    {"inter_node_efficiency", &ClusterSpec::inter_node_efficiency},
};

// Empty if the curve is well formed (sizes increasing, efficiencies in (0, 1]), else what is
// wrong with it.
std::string curve_problem(std::span<const SizeEfficiency> curve);

}  // namespace dcp::cluster_detail

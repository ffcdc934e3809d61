// SPDX-License-Identifier: Apache-2.0
// Cluster files: a ClusterSpec as "key = value" text (docs/cost_model.md gives the keys).
#pragma once

#include <string>
#include <string_view>

#include "dcp/model/cluster.h"

namespace dcp {

// Reads a cluster file: "key = value" lines, '#' comments. An optional first key `preset` names
// the spec the other keys change. Required keys: name, nodes, devices_per_node, intra_node_gbps,
// intra_node_latency_us, inter_node_gbps (per node), inter_node_latency_us, forward_tflops,
// backward_tflops, kernel_overhead_us (GB/s = 1e9 bytes/s). Optional keys (defaults: the struct's):
// memory_gbps, softmax_share, fp32_kernel_factor, partial_subtile_extra, subtile_overhead_us,
// tile_setup_tokens, whole_subtiles (0 or 1), forward_subtile_q, forward_subtile_kv,
// backward_subtile_q, backward_subtile_kv, nics_per_node, launch_overhead_us,
// launch_peer_overhead_us, intra_node_stream_gbps, inter_node_stream_gbps (0: no cap),
// intra_node_efficiency and inter_node_efficiency (comma-separated
// BYTES:EFFICIENCY points, sizes increasing, efficiencies in (0, 1]). Throws InvalidInput naming
// the file, line and key for an unknown key, a repeated key, a bad number or a missing field, and
// IoError if the file cannot be read.
ClusterSpec read_cluster_file(const std::string& path);
ClusterSpec parse_cluster_text(std::string_view text, std::string_view origin);

// A preset name, or else a cluster file path.
ClusterSpec resolve_cluster(const std::string& preset_or_file);

// The file form of a spec (parse_cluster_text reads it back).
std::string to_cluster_text(const ClusterSpec& spec);

}  // namespace dcp

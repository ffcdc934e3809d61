// SPDX-License-Identifier: Apache-2.0
// Cluster presets and cluster files.
#include "dcp/model/cluster.h"

#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "dcp/model/cluster_file.h"
#include "dcp/model/cluster_presets.h"

namespace dcp {
namespace {

std::string error_of(std::string_view text) {
  try {
    parse_cluster_text(text, "c.txt");
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

TEST(Cluster, PresetsAreValidAndNamed) {
  for (const std::string& name : cluster_presets()) {
    const ClusterSpec spec = cluster_preset(name);
    EXPECT_EQ(spec.name, name);
    EXPECT_NO_THROW(validate(spec));
  }
  EXPECT_THROW(cluster_preset("tpu"), InvalidInput);
}

TEST(Cluster, FileRoundTripsThroughItsTextForm) {
  for (const std::string& name : cluster_presets()) {
    ClusterSpec spec = cluster_preset(name);
    spec.inter_node_efficiency = {{4096, 0.125}, {1 << 20, 0.75}, {1 << 24, 0.9375}};
    spec.tile_setup_tokens = 192.5;
    spec.launch_peer_overhead = 1.5e-6;
    const std::string text = to_cluster_text(spec);
    const ClusterSpec back = parse_cluster_text(text, "t");
    EXPECT_EQ(to_cluster_text(back), text) << name;
    EXPECT_EQ(back.name, spec.name);
    EXPECT_EQ(back.shape, spec.shape);
    EXPECT_DOUBLE_EQ(back.inter_node_bandwidth, spec.inter_node_bandwidth);
    EXPECT_DOUBLE_EQ(back.intra_node_latency, spec.intra_node_latency);
    EXPECT_DOUBLE_EQ(back.backward_flops, spec.backward_flops);
    EXPECT_EQ(back.nics_per_node, spec.nics_per_node);
    EXPECT_EQ(back.whole_subtiles, spec.whole_subtiles);
    EXPECT_EQ(back.inter_node_efficiency, spec.inter_node_efficiency);
    EXPECT_EQ(back.intra_node_efficiency, spec.intra_node_efficiency);
    EXPECT_DOUBLE_EQ(back.tile_setup_tokens, 192.5);
    EXPECT_DOUBLE_EQ(back.launch_peer_overhead, 1.5e-6);
  }
}

TEST(Cluster, FileCanChangeAPreset) {
  const ClusterSpec spec =
      parse_cluster_text("preset = a100-p4de  # base\nnodes = 2\ninter_node_gbps = 100\n", "t");
  EXPECT_EQ(spec.shape.nodes, 2);
  EXPECT_EQ(spec.shape.devices_per_node, 8);
  EXPECT_DOUBLE_EQ(spec.inter_node_bandwidth, 100e9);
}

TEST(Cluster, BadFilesNameTheLineAndKey) {
  EXPECT_NE(error_of("nodes = 2\nbogus = 1\n").find("c.txt:2: unknown key 'bogus'"),
            std::string::npos);
  EXPECT_NE(error_of("preset = a100-p4de\nnodes = x\n").find("c.txt:2: nodes"), std::string::npos);
  EXPECT_NE(error_of("preset = a100-p4de\nnodes = 2\nnodes = 3\n").find("given twice"),
            std::string::npos);
  EXPECT_NE(error_of("nodes = 1\ndevices_per_node = 1\n").find("missing key"), std::string::npos);
  EXPECT_NE(error_of("preset = a100-p4de\nforward_tflops = -1\n").find("forward_tflops"),
            std::string::npos);
  EXPECT_NE(error_of("nodes 2\n").find("expected 'key = value'"), std::string::npos);
  EXPECT_NE(error_of("nodes = 2\npreset = a100-p4de\n").find("first key"), std::string::npos);
  EXPECT_THROW(resolve_cluster("/nonexistent/cluster.txt"), InvalidInput);
  const std::string p = "preset = a100-p4de\n";
  EXPECT_NE(error_of(p + "inter_node_efficiency = 1024:0.5, 512:0.9\n")
                .find("c.txt:2: inter_node_efficiency: point 1 (512 bytes) does not follow"),
            std::string::npos);
  EXPECT_NE(error_of(p + "intra_node_efficiency = 1024:1.5\n").find("efficiency 1.5"),
            std::string::npos);
  EXPECT_NE(error_of(p + "intra_node_efficiency = 1024\n").find("BYTES:EFFICIENCY"),
            std::string::npos);
  EXPECT_NE(error_of(p + "whole_subtiles = 2\n").find("whole_subtiles must be 0 or 1"),
            std::string::npos);
  EXPECT_NE(error_of(p + "nics_per_node = 0\n").find("nics_per_node must be in [1, 65536]"),
            std::string::npos);
  EXPECT_NE(error_of(p + "launch_peer_overhead_us = -1\n").find("must not be negative"),
            std::string::npos);
  // A slow rate that a busy debug build measures (0.75 GFLOP/s) reads back, as the calibration
  // that wrote it needs; a rate below 1 MFLOP/s is refused.
  EXPECT_DOUBLE_EQ(parse_cluster_text(p + "forward_tflops = 0.00075\n", "t").forward_flops, 0.75e9);
  EXPECT_NE(error_of(p + "forward_tflops = 0.0000005\n").find("must be at least 0.000001"),
            std::string::npos);
  // An empty curve clears the preset's.
  EXPECT_TRUE(
      parse_cluster_text(p + "inter_node_efficiency =\n", "t").inter_node_efficiency.empty());
}

TEST(Cluster, DevicesUseTheirOwnNetworkInterface) {
  ClusterSpec spec = cluster_preset("a100-p4de");  // 4 x 8, 4 interfaces per node
  EXPECT_EQ(spec.nics_per_node, 4);
  EXPECT_EQ(spec.nic_of(0), 0);
  EXPECT_EQ(spec.nic_of(1), 0);
  EXPECT_EQ(spec.nic_of(2), 1);
  EXPECT_EQ(spec.nic_of(7), 3);
  EXPECT_EQ(spec.nic_of(8), 4);
  EXPECT_EQ(spec.nic_of(31), 15);
  EXPECT_DOUBLE_EQ(spec.nic_bandwidth(), spec.inter_node_bandwidth / 4);
  spec.nics_per_node = 1;
  EXPECT_EQ(spec.nic_of(7), 0);
  EXPECT_EQ(spec.nic_of(9), 1);
}

TEST(Cluster, SizeEfficiencyInterpolatesInLogSize) {
  const std::vector<SizeEfficiency> curve = {{1024, 0.2}, {1 << 20, 0.8}};
  EXPECT_DOUBLE_EQ(size_efficiency({}, 10), 1);
  EXPECT_DOUBLE_EQ(size_efficiency(curve, 1), 0.2);
  EXPECT_DOUBLE_EQ(size_efficiency(curve, 1024), 0.2);
  EXPECT_DOUBLE_EQ(size_efficiency(curve, 1 << 25), 0.8);
  EXPECT_NEAR(size_efficiency(curve, 32768), 0.5, 1e-12);  // halfway in log size
}

TEST(Cluster, TransferTimeIsLatencyPlusLinkBytesOverBandwidth) {
  ClusterSpec spec = cluster_preset("a100-p4de");
  spec.inter_node_efficiency.clear();
  spec.inter_node_stream_bandwidth = 0;
  // Between nodes one transfer has one interface: a quarter of the node's bandwidth.
  EXPECT_DOUBLE_EQ(spec.transfer_seconds(50'000'000'000, true), spec.inter_node_latency + 4.0);
  EXPECT_DOUBLE_EQ(spec.transfer_seconds(0, false), spec.intra_node_latency);
  spec.inter_node_efficiency = {{1000, 0.5}};
  EXPECT_DOUBLE_EQ(spec.link_bytes(1000, true), 2000);
  EXPECT_DOUBLE_EQ(spec.transfer_seconds(12'500'000'000, true), spec.inter_node_latency + 2.0);
  // A stream below the interface's rate bounds one transfer: 6.25 of 12.5 GB/s.
  spec.inter_node_stream_bandwidth = 6.25e9;
  EXPECT_DOUBLE_EQ(spec.transfer_seconds(12'500'000'000, true), spec.inter_node_latency + 4.0);
  EXPECT_DOUBLE_EQ(spec.stream_bandwidth(true), 6.25e9);
  spec.intra_node_stream_bandwidth = 0;  // no cap
  EXPECT_EQ(spec.stream_bandwidth(false), std::numeric_limits<double>::infinity());
}

TEST(Cluster, FilesWriteTheShortestNumberThatReadsBackExactly) {
  ClusterSpec spec = cluster_preset("a100-p4de");
  spec.inter_node_latency = 4.04e-3;  // 4040.0000000000005 us when divided naively
  spec.kernel_overhead = 1.0 / 3.0 * 1e-6;
  const std::string text = to_cluster_text(spec);
  EXPECT_NE(text.find("inter_node_latency_us = 4040\n"), std::string::npos) << text;
  const ClusterSpec back = parse_cluster_text(text, "t");
  EXPECT_EQ(back.inter_node_latency, spec.inter_node_latency);
  EXPECT_NEAR(back.kernel_overhead, spec.kernel_overhead, 1e-21);
}

TEST(Cluster, FilesCarryStreamBandwidthsAndZeroMeansNoCap) {
  ClusterSpec spec = cluster_preset("a100-p4de");
  spec.intra_node_stream_bandwidth = 0;
  spec.inter_node_stream_bandwidth = 3.5e9;
  const ClusterSpec back = parse_cluster_text(to_cluster_text(spec), "test");
  EXPECT_EQ(back.intra_node_stream_bandwidth, 0);
  EXPECT_DOUBLE_EQ(back.inter_node_stream_bandwidth, 3.5e9);
  EXPECT_THROW(parse_cluster_text("preset = a100-p4de\ninter_node_stream_gbps = -1\n", "test"),
               InvalidInput);
}

}  // namespace
}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// Cluster presets and cluster files.
#include "dcp/model/cluster.h"

#include <string>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

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
  const ClusterSpec spec = cluster_preset("h100-dgx");
  const ClusterSpec back = parse_cluster_text(to_cluster_text(spec), "t");
  EXPECT_EQ(back.name, spec.name);
  EXPECT_EQ(back.shape, spec.shape);
  EXPECT_DOUBLE_EQ(back.inter_node_bandwidth, spec.inter_node_bandwidth);
  EXPECT_DOUBLE_EQ(back.intra_node_latency, spec.intra_node_latency);
  EXPECT_DOUBLE_EQ(back.backward_flops, spec.backward_flops);
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
}

TEST(Cluster, TransferTimeIsLatencyPlusBytesOverBandwidth) {
  const ClusterSpec spec = cluster_preset("a100-p4de");
  EXPECT_DOUBLE_EQ(spec.transfer_seconds(50'000'000'000, true), spec.inter_node_latency + 1.0);
  EXPECT_DOUBLE_EQ(spec.transfer_seconds(0, false), spec.intra_node_latency);
}

}  // namespace
}  // namespace dcp

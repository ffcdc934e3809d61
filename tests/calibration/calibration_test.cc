// SPDX-License-Identifier: Apache-2.0
// The cpu-local calibration: a valid spec with constants of the right order of magnitude (wide
// enough for a sanitized debug build, narrow enough to catch a unit mistake), and its option
// errors. Small tiles and buffers keep it fast; it never checks timings against each other.
#include "dcp/calibration/calibration.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "dcp/model/cluster_file.h"

#include "dcp/kernels/cpu/cpu_attention.h"

namespace dcp::calibration {
namespace {

CalibrationOptions fast_options() {
  CalibrationOptions options;
  options.devices = 2;
  options.repeats = 1;
  options.tile_tokens = 128;
  options.copy_bytes = std::int64_t{1} << 20;
  options.message_bytes = std::int64_t{256} << 10;
  return options;
}

void expect_sane(const ClusterSpec& spec, std::int32_t devices) {
  EXPECT_NO_THROW(validate(spec));
  EXPECT_EQ(spec.name, "cpu-local");
  EXPECT_EQ(spec.shape, (ClusterShape{1, devices}));
  EXPECT_GT(spec.forward_flops, 1e8);
  EXPECT_LT(spec.forward_flops, 1e13);
  EXPECT_GT(spec.backward_flops, 1e8);
  EXPECT_LT(spec.backward_flops, 1e13);
  EXPECT_GT(spec.memory_bandwidth, 1e7);
  EXPECT_LT(spec.memory_bandwidth, 1e13);
  EXPECT_GT(spec.intra_node_bandwidth, 1e7);
  EXPECT_LT(spec.intra_node_bandwidth, 1e13);
  EXPECT_EQ(spec.inter_node_bandwidth, spec.intra_node_bandwidth);
  EXPECT_GT(spec.intra_node_latency, 0);
  EXPECT_LT(spec.intra_node_latency, 10e-3);
  EXPECT_EQ(spec.inter_node_latency, spec.intra_node_latency);
  EXPECT_GE(spec.kernel_overhead, 0);
  EXPECT_LT(spec.kernel_overhead, 10e-3);
  EXPECT_GE(spec.subtile_overhead, 0);
  EXPECT_LT(spec.subtile_overhead, 10e-3);
  EXPECT_GE(spec.softmax_share, 0);
  EXPECT_LT(spec.softmax_share, 1);
  EXPECT_GE(spec.fp32_kernel_factor, 0.25);
  EXPECT_LE(spec.fp32_kernel_factor, 4);
  EXPECT_GE(spec.partial_subtile_extra, 0);
  EXPECT_LT(spec.partial_subtile_extra, 100);
  const kernels::SubtileShape forward = kernels::cpu_subtile_shape(true);
  const kernels::SubtileShape backward = kernels::cpu_subtile_shape(false);
  EXPECT_EQ(spec.forward_subtile_q, forward.q);
  EXPECT_EQ(spec.forward_subtile_kv, forward.kv);
  EXPECT_EQ(spec.backward_subtile_q, backward.q);
  EXPECT_EQ(spec.backward_subtile_kv, backward.kv);
}

TEST(CalibrateCpuLocal, GivesAValidSpecWithSaneConstants) {
  CalibrationOptions options = fast_options();
  std::vector<std::string> lines;
  options.progress = [&](std::string_view line) { lines.emplace_back(line); };
  const CalibrationReport report = calibrate_cpu_local(options);
  expect_sane(report.spec, 2);
  EXPECT_FALSE(lines.empty());

  // The file form reads back as the same spec.
  EXPECT_EQ(to_cluster_text(parse_cluster_text(to_cluster_text(report.spec), "t")),
            to_cluster_text(report.spec));

  // Every measured constant has a positive timing, and the table agrees with the spec.
  std::vector<std::string> derived;
  for (const CalibrationMeasurement& m : report.measurements) {
    EXPECT_GT(m.seconds, 0) << m.name;
    EXPECT_FALSE(m.name.empty());
    derived.push_back(m.derives);
    if (m.derives == "forward_tflops") {
      EXPECT_DOUBLE_EQ(m.value * 1e12, report.spec.forward_flops);
    }
    if (m.derives == "intra_node_latency_us") {
      EXPECT_DOUBLE_EQ(m.value * 1e-6, report.spec.intra_node_latency);
    }
  }
  for (const char* key :
       {"kernel_overhead_us", "forward_tflops", "subtile_overhead_us", "softmax_share",
        "partial_subtile_extra", "backward_tflops", "fp32_kernel_factor", "memory_gbps",
        "intra_node_latency_us", "intra_node_gbps", "inter_node_latency_us", "inter_node_gbps"}) {
    EXPECT_NE(std::find(derived.begin(), derived.end(), key), derived.end()) << key;
  }
}

TEST(CalibrateCpuLocal, MeasuresOneDeviceWithATwoRankLink) {
  CalibrationOptions options = fast_options();
  options.devices = 1;
  expect_sane(calibrate_cpu_local(options).spec, 1);
}

TEST(CalibrateCpuLocal, RejectsBadOptionsNamingThem) {
  const auto expect_rejected = [](CalibrationOptions options, const std::string& name) {
    try {
      calibrate_cpu_local(options);
      ADD_FAILURE() << name << " accepted";
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  CalibrationOptions o = fast_options();
  o.devices = 0;
  expect_rejected(o, "devices");
  o = fast_options();
  o.devices = 257;
  expect_rejected(o, "devices");
  o = fast_options();
  o.repeats = 0;
  expect_rejected(o, "repeats");
  o = fast_options();
  o.tile_tokens = 63;
  expect_rejected(o, "tile_tokens");
  o = fast_options();
  o.copy_bytes = 0;
  expect_rejected(o, "copy_bytes");
  o = fast_options();
  o.message_bytes = -1;
  expect_rejected(o, "message_bytes");
}

}  // namespace
}  // namespace dcp::calibration

// SPDX-License-Identifier: Apache-2.0
// The cluster calibration's fit recovers the constants of a known spec from the measurements that
// spec predicts, refuses bad measurements naming them, and the measurement runs end to end over
// local ranks (validity only: it never checks timings against each other).
#include "dcp/calibration/cluster_calibration.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "dcp/model/cluster_file.h"
#include "dcp/model/cluster_presets.h"

#include "dcp/comm/local/local_communicator.h"
#include "dcp/sim/cost_model.h"

namespace dcp::calibration {
namespace {

// A cluster with every link constant set: 2 nodes x 4 devices, 2 interfaces per node.
ClusterSpec known_spec(ClusterShape shape = {2, 4}, std::int32_t nics = 2) {
  ClusterSpec spec;
  spec.shape = shape;
  spec.intra_node_bandwidth = 100e9;
  spec.intra_node_latency = 5e-6;
  spec.inter_node_bandwidth = 40e9;
  spec.inter_node_latency = 12e-6;
  spec.nics_per_node = nics;
  spec.intra_node_efficiency = {{4096, 0.25}, {65536, 0.5}, {1 << 20, 0.8}, {1 << 24, 1.0}};
  spec.inter_node_efficiency = {{4096, 0.125}, {65536, 0.375}, {1 << 20, 0.75}, {1 << 24, 1.0}};
  spec.launch_overhead = 3e-6;
  spec.launch_peer_overhead = 1.5e-6;
  return spec;
}

// One message alone on its link, as the cost model prices it: a one-peer launch, the latency and
// the bytes at the link's (or one interface's) bandwidth and efficiency.
double one_way(const ClusterSpec& spec, std::int64_t bytes, bool inter_node) {
  return spec.launch_overhead + spec.launch_peer_overhead +
         spec.transfer_seconds(bytes, inter_node);
}

// The measurements `spec` predicts for a sweep of 4 KiB .. 64 MiB.
LinkMeasurements synthetic(const ClusterSpec& spec) {
  LinkMeasurements m;
  m.shape = spec.shape;
  std::vector<std::int64_t> sizes = {kSmallMessageBytes};
  for (std::int64_t s = 4096; s <= (std::int64_t{64} << 20); s *= 4) sizes.push_back(s);
  for (const std::int64_t s : sizes) {
    if (spec.shape.devices_per_node > 1) m.intra_node.push_back({s, one_way(spec, s, false)});
    if (spec.shape.nodes > 1) m.inter_node.push_back({s, one_way(spec, s, true)});
  }
  for (std::int32_t k = 1; k < spec.shape.devices() && k <= 8; ++k) {
    const bool inter = spec.shape.node_of(k) != 0;  // peers 1..k: the farthest decides
    const double launch = spec.launch_overhead + k * spec.launch_peer_overhead;
    m.groups.push_back({k, launch, launch + spec.transfer_seconds(kSmallMessageBytes, inter)});
  }
  if (spec.shape.nodes > 1) {
    // Every device of node 0 sends at once: the node's interfaces share the bytes.
    const std::int64_t bytes = std::int64_t{64} << 20;
    const double per_pair = spec.inter_node_bandwidth / spec.shape.devices_per_node;
    m.aggregate = {bytes, one_way(spec, kSmallMessageBytes, true) +
                              static_cast<double>(bytes) /
                                  (size_efficiency(spec.inter_node_efficiency, bytes) * per_pair)};
  }
  return m;
}

void expect_close(double actual, double expected, const char* what) {
  EXPECT_NEAR(actual, expected, 2e-3 * std::abs(expected) + 1e-12) << what;
}

void expect_curve(const std::vector<SizeEfficiency>& fitted,
                  const std::vector<SizeEfficiency>& known) {
  ASSERT_FALSE(fitted.empty());
  for (std::size_t i = 1; i < fitted.size(); ++i) EXPECT_GT(fitted[i].bytes, fitted[i - 1].bytes);
  for (const SizeEfficiency& point : fitted) {
    EXPECT_NEAR(point.efficiency, size_efficiency(known, point.bytes), 2e-3) << point.bytes;
  }
}

TEST(FitLinks, RecoversTheLinkConstantsOfTheSpecThatMadeTheMeasurements) {
  const ClusterSpec known = known_spec();
  CalibrationReport report;
  fit_links(synthetic(known), report);
  const ClusterSpec& fitted = report.spec;
  expect_close(fitted.intra_node_bandwidth, known.intra_node_bandwidth, "intra bandwidth");
  expect_close(fitted.intra_node_latency, known.intra_node_latency, "intra latency");
  expect_close(fitted.inter_node_bandwidth, known.inter_node_bandwidth, "inter bandwidth");
  expect_close(fitted.inter_node_latency, known.inter_node_latency, "inter latency");
  expect_close(fitted.launch_overhead, known.launch_overhead, "launch overhead");
  expect_close(fitted.launch_peer_overhead, known.launch_peer_overhead, "launch peer overhead");
  EXPECT_EQ(fitted.nics_per_node, known.nics_per_node);
  expect_curve(fitted.intra_node_efficiency, known.intra_node_efficiency);
  expect_curve(fitted.inter_node_efficiency, known.inter_node_efficiency);
  EXPECT_FALSE(report.measurements.empty());
  for (const CalibrationMeasurement& m : report.measurements) EXPECT_GT(m.seconds, 0) << m.name;
}

TEST(FitLinks, FindsOneInterfacePerDeviceOrOneSharedByAll) {
  for (const std::int32_t nics : {1, 4}) {
    CalibrationReport report;
    fit_links(synthetic(known_spec({2, 4}, nics)), report);
    EXPECT_EQ(report.spec.nics_per_node, nics);
    expect_close(report.spec.inter_node_bandwidth, 40e9, "inter bandwidth");
  }
}

TEST(FitLinks, CopiesTheIntraNodeConstantsBetweenNodesOfAOneNodeClusterAndSaysSo) {
  const ClusterSpec known = known_spec({1, 4}, 1);
  CalibrationReport report;
  fit_links(synthetic(known), report);
  expect_close(report.spec.intra_node_bandwidth, known.intra_node_bandwidth, "intra bandwidth");
  EXPECT_EQ(report.spec.inter_node_bandwidth, report.spec.intra_node_bandwidth);
  EXPECT_EQ(report.spec.inter_node_latency, report.spec.intra_node_latency);
  EXPECT_EQ(report.spec.inter_node_efficiency, report.spec.intra_node_efficiency);
  EXPECT_EQ(report.spec.nics_per_node, 1);
  ASSERT_EQ(report.notes.size(), 1u);
  EXPECT_NE(report.notes[0].find("copies of the intra-node"), std::string::npos);
}

TEST(FitLinks, CopiesTheInterNodeConstantsInsideNodesOfOneDeviceEach) {
  const ClusterSpec known = known_spec({4, 1}, 1);
  CalibrationReport report;
  fit_links(synthetic(known), report);
  expect_close(report.spec.inter_node_bandwidth, known.inter_node_bandwidth, "inter bandwidth");
  EXPECT_EQ(report.spec.intra_node_latency, report.spec.inter_node_latency);
  EXPECT_EQ(report.spec.intra_node_efficiency, report.spec.inter_node_efficiency);
  EXPECT_NE(report.notes.at(0).find("copies of the inter-node"), std::string::npos);
}

TEST(FitLinks, LeavesThePeerOverheadAtZeroWhenOnlyOnePeerCountWasMeasured) {
  const ClusterSpec known = known_spec({1, 2}, 1);
  const LinkMeasurements m = synthetic(known);
  ASSERT_EQ(m.groups.size(), 1u);
  CalibrationReport report;
  fit_links(m, report);
  EXPECT_EQ(report.spec.launch_peer_overhead, 0);
  bool said = false;
  for (const std::string& note : report.notes)
    said |= note.find("launch_peer_overhead") != std::string::npos;
  EXPECT_TRUE(said);
}

// fit_links throws InvalidInput whose message contains `words`.
void expect_refused(const LinkMeasurements& m, const std::string& words) {
  CalibrationReport report;
  try {
    fit_links(m, report);
    ADD_FAILURE() << "accepted; expected an error naming: " << words;
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
  }
}

TEST(FitLinks, RefusesBadMeasurementsNamingThem) {
  const LinkMeasurements good = synthetic(known_spec());
  LinkMeasurements m = good;
  m.intra_node.resize(1);
  expect_refused(m, "intra-node: 1 messages");
  m = good;
  m.inter_node[3].bytes = m.inter_node[2].bytes;
  expect_refused(m, "inter-node message 3 (16384 bytes) does not follow a smaller size");
  m = good;
  m.intra_node[2].seconds = 0;
  expect_refused(m, "intra-node message 2 (16384 bytes): 0.000000 s is not a positive time");
  m = good;
  m.inter_node[1].seconds = std::numeric_limits<double>::quiet_NaN();
  expect_refused(m, "inter-node message 1 (4096 bytes)");
  m = good;
  for (MessageTime& t : m.intra_node) t.seconds = 1e-3;
  expect_refused(m, "is no slower than the small one");
  m = good;
  m.groups.erase(m.groups.begin());
  expect_refused(m, "groups: group 0 (2 peers) does not follow from 1 peer");
  m = good;
  m.groups.clear();
  expect_refused(m, "no group was measured");
  m = good;
  m.groups[1].issue_seconds = -1;
  expect_refused(m, "issue time -1");
  m = good;
  m.aggregate = {};
  expect_refused(m, "aggregate: 0 bytes");
  m = good;
  m.aggregate.seconds = m.inter_node[0].seconds / 2;
  expect_refused(m, "aggregate: 67108864 bytes in");
  m = good;
  m.shape = {1, 8};
  expect_refused(m, "inter-node messages were measured, but the cluster has one node");
  m = good;
  m.shape = {0, 8};
  expect_refused(m, "nodes must be in [1, 65536], got 0");
}

// The seconds per call the cost model gives each device call under `spec`.
std::vector<double> predicted_calls(const ClusterSpec& spec, const DeviceCalibrationOptions& o) {
  std::vector<double> seconds;
  for (const DeviceCall& c : device_calls(o)) {
    if (c.kind == DeviceCall::Kind::kCopy) {
      seconds.push_back(2 * static_cast<double>(c.copy_bytes) / spec.memory_bandwidth);
      continue;
    }
    PlanHeader header;
    header.q_heads = header.kv_heads = 1;
    header.head_dim = c.head_dim;
    header.dtype = c.fp32 ? DType::kFp32 : DType::kBf16;
    const sim::CostModel model(spec, header);
    TileMask causal;
    causal.q_tokens = causal.kv_tokens = c.q_tokens;
    for (std::int32_t r = 0; r <= c.q_tokens; ++r) causal.row_offsets.push_back(r);
    for (std::int32_t r = 0; r < c.q_tokens; ++r)
      causal.intervals.insert(causal.intervals.end(), {0, r + 1});
    const Pass pass = c.kind == DeviceCall::Kind::kBackward ? Pass::kBackward : Pass::kForward;
    seconds.push_back(model.kernel_overhead() + c.rows * c.tiles *
                                                    model.tile_seconds(pass,
                                                                       c.causal ? &causal : nullptr,
                                                                       c.q_tokens, c.kv_tokens));
  }
  return seconds;
}

// One rank's timings, one repeat per call, as the known spec predicts them.
std::vector<std::vector<std::vector<double>>> one_rank_timings(const ClusterSpec& known,
                                                               const DeviceCalibrationOptions& o) {
  std::vector<std::vector<std::vector<double>>> timings(1);
  for (const double t : predicted_calls(known, o)) timings[0].push_back({t});
  return timings;
}

TEST(FitDevice, RecoversTheKernelConstantsOfTheSpecThatMadeTheTimings) {
  ClusterSpec known = cluster_preset("cpu-local");
  known.tile_setup_tokens = 0;  // what the solver's model of a call assumes
  known.whole_subtiles = false;
  known.softmax_share = 0.2;
  known.partial_subtile_extra = 0.5;
  DeviceCalibrationOptions options;
  options.repeats = 3;
  options.tile_tokens = 256;
  options.copy_bytes = 1 << 20;
  const std::vector<double> calls = predicted_calls(known, options);
  // Two ranks, every repeat alike.
  std::vector<std::vector<std::vector<double>>> timings(2);
  for (auto& rank : timings) {
    for (const double t : calls) rank.push_back(std::vector<double>(3, t));
  }
  ClusterSpec fitted;
  std::vector<CalibrationMeasurement> rows;
  fit_device(timings, options, cpu_kernel_subtiles(), fitted, rows);
  EXPECT_NEAR(fitted.forward_flops, known.forward_flops, 0.01 * known.forward_flops);
  EXPECT_NEAR(fitted.backward_flops, known.backward_flops, 0.01 * known.backward_flops);
  EXPECT_NEAR(fitted.kernel_overhead, known.kernel_overhead, 0.02 * known.kernel_overhead);
  EXPECT_NEAR(fitted.subtile_overhead, known.subtile_overhead, 0.02 * known.subtile_overhead);
  EXPECT_NEAR(fitted.memory_bandwidth, known.memory_bandwidth, 1e-3 * known.memory_bandwidth);
  EXPECT_NEAR(fitted.softmax_share, known.softmax_share, 0.01);
  EXPECT_NEAR(fitted.fp32_kernel_factor, known.fp32_kernel_factor, 0.01);
  EXPECT_NEAR(fitted.partial_subtile_extra, known.partial_subtile_extra, 0.02);
  EXPECT_EQ(fitted.forward_subtile_kv, cpu_kernel_subtiles().forward_kv);
  EXPECT_EQ(rows.size(), calls.size());
}

TEST(FitDevice, RecoversTheConstantsOfAKernelThatComputesWholeSubtiles) {
  ClusterSpec known = cluster_preset("cpu-local");
  known.tile_setup_tokens = 40;  // what a tiny tile costs beyond its whole sub-tile's pairs
  known.whole_subtiles = true;   // a GPU kernel's blocks: the tiny tiles cost whole sub-tiles
  known.forward_subtile_q = known.forward_subtile_kv = 64;
  known.backward_subtile_q = 64;
  known.backward_subtile_kv = 32;
  known.subtile_overhead = 0;  // inseparable from the pairs of whole sub-tiles
  known.softmax_share = 0.3;
  known.partial_subtile_extra = 0.2;
  DeviceCalibrationOptions options;
  options.repeats = 1;
  options.tile_tokens = 256;
  options.copy_bytes = 1 << 20;
  const auto timings = one_rank_timings(known, options);
  ClusterSpec fitted;
  std::vector<CalibrationMeasurement> rows;
  fit_device(timings, options, {64, 64, 64, 32, true}, fitted, rows);
  EXPECT_TRUE(fitted.whole_subtiles);
  EXPECT_NEAR(fitted.forward_flops, known.forward_flops, 0.01 * known.forward_flops);
  EXPECT_NEAR(fitted.backward_flops, known.backward_flops, 0.01 * known.backward_flops);
  EXPECT_NEAR(fitted.kernel_overhead, known.kernel_overhead, 0.02 * known.kernel_overhead);
  EXPECT_EQ(fitted.subtile_overhead, 0);
  EXPECT_NEAR(fitted.tile_setup_tokens, known.tile_setup_tokens, 0.5);
  EXPECT_NEAR(fitted.softmax_share, known.softmax_share, 0.01);
  EXPECT_NEAR(fitted.partial_subtile_extra, known.partial_subtile_extra, 0.02);
}

TEST(FitDevice, TakesACallOfManyHeadsAsOneLaunchAndThatManyHeadsOfWork) {
  ClusterSpec known = cluster_preset("cpu-local");
  known.tile_setup_tokens = 0;
  known.whole_subtiles = false;
  known.softmax_share = 0.2;
  known.partial_subtile_extra = 0.5;
  DeviceCalibrationOptions one;
  one.repeats = 1;
  one.tile_tokens = 256;
  one.copy_bytes = 1 << 20;
  DeviceCalibrationOptions many = one;
  many.heads = 8;
  const std::vector<DeviceCall> calls = device_calls(many);
  const std::vector<double> single = predicted_calls(known, one);
  std::vector<std::vector<std::vector<double>>> timings(1);
  for (std::size_t c = 0; c < calls.size(); ++c) {
    const double work =
        single[c] - (calls[c].kind == DeviceCall::Kind::kCopy ? 0 : known.kernel_overhead);
    EXPECT_EQ(calls[c].heads, c == 0 || calls[c].kind == DeviceCall::Kind::kCopy ? 1 : 8)
        << calls[c].name;
    timings[0].push_back({single[c] + (calls[c].heads - 1) * work});
  }
  EXPECT_NE(calls[1].name.find("x8 heads"), std::string::npos) << calls[1].name;
  ClusterSpec fitted;
  std::vector<CalibrationMeasurement> rows;
  fit_device(timings, many, cpu_kernel_subtiles(), fitted, rows);
  EXPECT_NEAR(fitted.forward_flops, known.forward_flops, 0.01 * known.forward_flops);
  EXPECT_NEAR(fitted.backward_flops, known.backward_flops, 0.01 * known.backward_flops);
  EXPECT_NEAR(fitted.kernel_overhead, known.kernel_overhead, 0.02 * known.kernel_overhead);
  EXPECT_NEAR(fitted.softmax_share, known.softmax_share, 0.01);
  // The cpu timing runs one head per call only, and says so.
  many.heads = 300;
  EXPECT_THROW(device_calls(many), InvalidInput);
}

TEST(FitDevice, RefusesTimingsOfTheWrongShapeOrNotPositive) {
  DeviceCalibrationOptions options;
  options.repeats = 2;
  options.tile_tokens = 64;
  const std::size_t calls = device_calls(options).size();
  std::vector<std::vector<std::vector<double>>> timings(
      1, std::vector<std::vector<double>>(calls, std::vector<double>(2, 1e-3)));
  ClusterSpec spec;
  std::vector<CalibrationMeasurement> rows;
  const KernelSubtiles subtiles;
  auto bad = timings;
  bad[0].pop_back();
  EXPECT_THROW(fit_device(bad, options, subtiles, spec, rows), InvalidInput);
  bad = timings;
  bad[0][3].pop_back();
  EXPECT_THROW(fit_device(bad, options, subtiles, spec, rows), InvalidInput);
  bad = timings;
  bad[0][2][1] = -1;
  try {
    fit_device(bad, options, subtiles, spec, rows);
    ADD_FAILURE() << "accepted a negative time";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what())
                  .find("rank 0, forward 64 rows x 16 tiles of 16x16 d128 "
                        "bf16, repeat 1"),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(fit_device({}, options, subtiles, spec, rows), InvalidInput);
}

TEST(FitCluster, GivesAValidSpecWhoseFileReadsBackAsItself) {
  DeviceCalibrationOptions options;
  options.repeats = 1;
  options.tile_tokens = 128;
  ClusterSpec known = known_spec();
  known.forward_flops = 1e11;
  known.backward_flops = 8e10;
  known.kernel_overhead = 4e-6;
  known.subtile_overhead = 0.3e-6;
  known.forward_subtile_q = known.backward_subtile_q = 128;
  known.forward_subtile_kv = 256;
  known.backward_subtile_kv = 128;
  const auto timings = one_rank_timings(known, options);
  const CalibrationReport report =
      fit_cluster(synthetic(known), timings, options, {128, 256, 128, 128, false}, "my-cluster");
  EXPECT_NO_THROW(validate(report.spec));
  EXPECT_EQ(report.spec.name, "my-cluster");
  EXPECT_EQ(report.spec.shape, known.shape);
  const std::string text = to_cluster_text(report.spec);
  EXPECT_EQ(to_cluster_text(parse_cluster_text(text, "calibrated")), text);
  EXPECT_THROW(fit_cluster(synthetic(known), timings, options, {}, ""), InvalidInput);
}

TEST(FitDeviceOnto, MeasuresTheDeviceAndKeepsTheBaseClustersLinks) {
  DeviceCalibrationOptions options;
  options.repeats = 1;
  options.tile_tokens = 128;
  ClusterSpec known = known_spec();
  known.forward_flops = 2e11;
  known.backward_flops = 9e10;
  known.kernel_overhead = 3e-6;
  known.forward_subtile_q = known.backward_subtile_q = 128;
  known.forward_subtile_kv = known.backward_subtile_kv = 128;
  const auto timings = one_rank_timings(known, options);
  const ClusterSpec base = cluster_preset("h100-dgx");
  const CalibrationReport report =
      fit_device_onto(base, timings, options, {128, 128, 128, 128, false}, "my-gpu");
  EXPECT_NO_THROW(validate(report.spec));
  EXPECT_EQ(report.spec.name, "my-gpu");
  EXPECT_EQ(report.spec.shape, base.shape);
  EXPECT_EQ(report.spec.nics_per_node, base.nics_per_node);
  EXPECT_DOUBLE_EQ(report.spec.inter_node_bandwidth, base.inter_node_bandwidth);
  EXPECT_DOUBLE_EQ(report.spec.intra_node_bandwidth, base.intra_node_bandwidth);
  EXPECT_DOUBLE_EQ(report.spec.launch_overhead, base.launch_overhead);
  EXPECT_EQ(report.spec.inter_node_efficiency.size(), base.inter_node_efficiency.size());
  EXPECT_NEAR(report.spec.forward_flops, known.forward_flops, 0.01 * known.forward_flops);
  EXPECT_NEAR(report.spec.backward_flops, known.backward_flops, 0.01 * known.backward_flops);
  EXPECT_NE(report.spec.forward_flops, base.forward_flops);
  EXPECT_EQ(report.spec.tile_setup_tokens, 0);  // the base's (FA2's) would skew the fitted rates
  EXPECT_FALSE(report.spec.whole_subtiles);
  ASSERT_EQ(report.notes.size(), 1U);
  EXPECT_NE(report.notes[0].find("h100-dgx"), std::string::npos) << report.notes[0];
  const std::string text = to_cluster_text(report.spec);
  EXPECT_EQ(to_cluster_text(parse_cluster_text(text, "calibrated")), text);
  EXPECT_THROW(fit_device_onto(base, timings, options, {}, ""), InvalidInput);
  EXPECT_THROW(fit_device_onto(base, {}, options, {}, "my-gpu"), InvalidInput);
}

TEST(ShapeFromPlacements, ReadsNodesFromTheLaunchersLocalSizes) {
  const std::vector<LauncherPlacement> two_by_two = {{2, 0}, {2, 1}, {2, 0}, {2, 1}};
  EXPECT_EQ(shape_from_placements(two_by_two, "LOCAL_WORLD_SIZE"), (ClusterShape{2, 2}));
  const std::vector<std::pair<std::vector<LauncherPlacement>, std::string>> bad = {
      {{{-1, -1}, {2, 1}}, "LOCAL_WORLD_SIZE is not set (or not a positive number) on rank 0"},
      {{{2, 0}, {2, 1}, {1, 0}}, "LOCAL_WORLD_SIZE is 1 on rank 2 but 2 on rank 0"},
      {{{2, 0}, {2, 1}, {2, 0}}, "world size 3 is not a multiple of LOCAL_WORLD_SIZE 2"},
      {{{2, 0}, {2, 0}, {2, 1}, {2, 1}}, "rank 1 is local rank 0 of its node, not 1"},
  };
  for (const auto& [placements, words] : bad) {
    try {
      shape_from_placements(placements, "LOCAL_WORLD_SIZE");
      ADD_FAILURE() << "accepted; expected: " << words;
    } catch (const InvalidInput& error) {
      EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
    }
  }
}

TEST(CheckCalibrationWorld, NamesTheShapeAndTheRanksWhenTheyDisagree) {
  EXPECT_NO_THROW(check_calibration_world({2, 2}, 4));
  try {
    check_calibration_world({2, 2}, 3);
    ADD_FAILURE() << "accepted 3 ranks for 2 x 2";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find("2 x 2 has 4 devices but there are 3 ranks"),
              std::string::npos);
  }
  EXPECT_THROW(check_calibration_world({1, 1}, 1), InvalidInput);
}

TEST(CalibrateCluster, MeasuresAndFitsAValidSpecOnFourLocalRanksAsTwoNodes) {
  ClusterCalibrationOptions options;
  options.name = "local-2x2";
  options.device.repeats = 1;
  options.device.tile_tokens = 64;
  options.device.copy_bytes = 1 << 20;
  options.device.min_seconds = 1e-3;
  options.links.repeats = 3;
  options.links.min_bytes = 1 << 20;
  options.links.max_bytes = 16 << 20;
  options.links.min_seconds = 1e-3;
  std::vector<std::string> lines;
  options.progress = [&](std::string_view line) { lines.emplace_back(line); };
  std::vector<CalibrationReport> reports(4);
  comm::CommOptions comm_options;
  comm_options.timeout_seconds = 600;
  comm::run_local_ranks(4, comm_options, [&](comm::Communicator& communicator) {
    reports[static_cast<std::size_t>(communicator.rank())] =
        calibrate_cluster(communicator, {2, 2}, options);
  });
  const ClusterSpec& spec = reports[0].spec;
  EXPECT_NO_THROW(validate(spec));
  EXPECT_EQ(spec.name, "local-2x2");
  EXPECT_EQ(spec.shape, (ClusterShape{2, 2}));
  EXPECT_EQ(spec.intra_node_efficiency.size(), 3u);  // 1, 4 and 16 MiB
  EXPECT_EQ(spec.inter_node_efficiency.size(), 3u);
  EXPECT_TRUE(spec.nics_per_node == 1 || spec.nics_per_node == 2);
  EXPECT_EQ(lines.size(), 2u);
  EXPECT_TRUE(reports[1].measurements.empty());
  const std::string text = to_cluster_text(spec);
  EXPECT_EQ(to_cluster_text(parse_cluster_text(text, "t")), text);
}

TEST(CalibrateCluster, RefusesAShapeThatDoesNotMatchTheRanksOnEveryRank) {
  ClusterCalibrationOptions options;
  EXPECT_THROW(comm::run_local_ranks(3, {},
                                     [&](comm::Communicator& communicator) {
                                       calibrate_cluster(communicator, {2, 2}, options);
                                     }),
               InvalidInput);
}

}  // namespace
}  // namespace dcp::calibration

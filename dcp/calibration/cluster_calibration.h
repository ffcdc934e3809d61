// SPDX-License-Identifier: Apache-2.0
// Calibration of a cluster between real ranks: the links' latency, bandwidth and efficiency by
// message size per link class, the launch set-up of a group of transfers, the network interfaces
// per node, and the fit of those measurements (with the device's) into a cluster spec.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dcp/model/cluster.h"

#include "dcp/calibration/calibration.h"
#include "dcp/comm/communicator.h"

namespace dcp::calibration {

// The small message whose one-way time gives a link's latency.
inline constexpr std::int64_t kSmallMessageBytes = 8;

// One message alone on its link: its size and its one-way time (half a ping-pong's round trip).
struct MessageTime {
  std::int64_t bytes = 0;
  double seconds = 0;
};

// A group (one start and its wait) on one rank exchanging a small message both ways with each of
// `peers` ranks, each of which exchanges with it in a group of its own at the same time:
// `issue_seconds` is how long start() took, `seconds` the whole group up to its wait's return.
struct GroupTime {
  std::int32_t peers = 0;
  double issue_seconds = 0;
  double seconds = 0;
};

// What the link calibration measures; the input of fit_links (docs/cost_model.md, "Calibrating a
// cluster"). Devices are numbered node-major (ClusterShape).
struct LinkMeasurements {
  ClusterShape shape;
  // One message alone between device 0 and device 1 (intra-node) or device 0 and the first
  // device of node 1 (inter-node), in increasing sizes: the first is the small message
  // (kSmallMessageBytes), the others the size sweep. Empty for a class the shape lacks (one
  // device per node; one node).
  std::vector<MessageTime> intra_node;
  std::vector<MessageTime> inter_node;
  // Device 0's groups with devices 1..k, for increasing k >= 1.
  std::vector<GroupTime> groups;
  // Every device of node 0 sends `bytes` to its counterpart on node 1 at the same time (each
  // pair a ping-pong): the one-way time of the slowest pair. Zero bytes with one node.
  MessageTime aggregate;
};

// Fits the link constants of `report.spec` from the measurements, each rounded to 4 significant
// digits in the cluster file's unit:
//   launch_peer_overhead: the slope of a least-squares line through the groups' times over their
//     peer counts (0 if only one peer count was measured); launch_overhead: the intercept of
//     such a line through the groups' issue times (both at least 0);
//   latency of a class: its small message's time less one one-peer launch (at least 0), so that
//     the cost model's launch plus latency gives the measured small-message time;
//   bandwidth of a class: the highest s / (t(s) - t_small) over the sweep's sizes of at least a
//     sixteenth of its largest; efficiency(s) = s / ((t(s) - t_small) x bandwidth), at most 1
//     (1 where t(s) is not above t_small), one point per sweep size;
//   inter_node_bandwidth: the aggregate's devices_per_node x bytes over its time less the
//     inter-node small-message time, divided by the inter-node efficiency at its size (what the
//     node's interfaces carry together); nics_per_node: the divisor of devices_per_node nearest
//     (in ratio) to the aggregate bandwidth over the single pair's.
// With one node the inter-node constants are copies of the intra-node ones (nics_per_node 1), with
// one device per node the intra-node ones copies of the inter-node ones; a note says so. Appends
// one row per measurement to report.measurements. Throws InvalidInput naming the measurement for
// a missing class, sizes not increasing, a time that is not positive and finite, a largest message
// no slower than the small one, or groups that do not start at one peer or do not increase.
void fit_links(const LinkMeasurements& measurements, CalibrationReport& report);

// The whole fit: the links (fit_links) and the device (fit_device, from every rank's timings of
// device_calls(device)), into a spec named `name` of the measurements' shape that passes
// validate() and whose file form reads back as itself.
CalibrationReport fit_cluster(const LinkMeasurements& links,
                              std::span<const std::vector<std::vector<double>>> device_timings,
                              const DeviceCalibrationOptions& device,
                              const KernelSubtiles& subtiles, const std::string& name);

// The device alone, on the links of another cluster: `base` (a preset or a cluster file) with its
// device constants replaced by fit_device's from `device_timings`, named `name`, with one note
// saying which constants were not measured. For one GPU, or wherever the links cannot be timed
// (a single rank) but the kernels can. Throws InvalidInput for an empty name or bad timings.
CalibrationReport fit_device_onto(const ClusterSpec& base,
                                  std::span<const std::vector<std::vector<double>>> device_timings,
                                  const DeviceCalibrationOptions& device,
                                  const KernelSubtiles& subtiles, const std::string& name);

struct LinkCalibrationOptions {
  std::int32_t repeats = 5;  // median over repeats, [1, 1000]
  // The size sweep: min_bytes, 4 x min_bytes, ... up to max_bytes, [8, 4 GiB], min <= max.
  std::int64_t min_bytes = std::int64_t{4} << 10;
  std::int64_t max_bytes = std::int64_t{64} << 20;
  std::int32_t max_group_peers = 8;  // groups with 1 .. min(this, devices - 1) peers, [1, 1024]
  double min_seconds = 0.05;         // each timing loops at least this long per repeat
};

// The sweep's sizes: min_bytes x 4^i up to max_bytes. Throws InvalidInput naming a bad option.
std::vector<std::int64_t> sweep_sizes(const LinkCalibrationOptions& options);

// Throws InvalidInput naming both unless the shape has as many devices as the communicator has
// ranks, and at least 2.
void check_calibration_world(const ClusterShape& shape, std::int32_t ranks);

// Measures the links between the ranks of `communicator`, rank r being device r of `shape`. Every
// rank calls it; rank 0 returns the measurements, the others an empty LinkMeasurements. Timings
// use time_operations (the ranks not taking part in a measurement wait at its barriers); each
// figure is the fastest repeat (on a shared machine, noise only adds time), a group's issue time
// the median over its calls.
LinkMeasurements measure_links(comm::Communicator& communicator, const ClusterShape& shape,
                               const LinkCalibrationOptions& options);

// A rank's place as its launcher reports it (OMPI_COMM_WORLD_LOCAL_SIZE and _LOCAL_RANK under
// Open MPI's mpirun, LOCAL_WORLD_SIZE and LOCAL_RANK under torchrun): the ranks on its node and
// its index among them; -1 where the launcher did not say.
struct LauncherPlacement {
  std::int32_t local_size = -1;
  std::int32_t local_rank = -1;
};

// The shape the ranks' placements describe (rank r's at index r): nodes x local size. Throws
// InvalidInput naming `variable` (the environment variable the sizes came from) and the rank if a
// size is unknown or differs between ranks, if the world is not a whole number of nodes, or if a
// rank's local rank is not its rank modulo the local size (the ranks must fill node after node).
ClusterShape shape_from_placements(std::span<const LauncherPlacement> placements,
                                   std::string_view variable);

// Every rank's placement, on every rank (each rank passes its own).
std::vector<LauncherPlacement> exchange_placements(comm::Communicator& communicator,
                                                   LauncherPlacement mine);

struct ClusterCalibrationOptions {
  std::string name = "calibrated";
  LinkCalibrationOptions links;
  DeviceCalibrationOptions device;
  // Called on rank 0 with one line (no newline) before each measurement; may be empty.
  std::function<void(std::string_view)> progress;
};

// Calibrates the cluster the ranks of `communicator` form: the links (measure_links) and each
// rank's cpu device (time_cpu_device, every rank at once), fitted by fit_cluster. Every rank
// calls it; rank 0 returns the report, the others an empty one. Throws InvalidInput (on every
// rank alike) for a shape that does not match the communicator or bad options.
CalibrationReport calibrate_cluster(comm::Communicator& communicator, const ClusterShape& shape,
                                    const ClusterCalibrationOptions& options);

}  // namespace dcp::calibration

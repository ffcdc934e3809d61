// SPDX-License-Identifier: Apache-2.0
// Calibration from Python (dcp.calibrate): timing over a Python rank sync (torch.distributed),
// the cpu device's timings, the calls a GPU device times, and the one fit of measurements into a
// cluster file (dcp/runtime/cluster_calibration.h).
#include "dcp/calibration/calibration.h"

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dcp/model/cluster.h"
#include "dcp/model/cluster_file.h"

#include "dcp/calibration/cluster_calibration.h"

#include "python/src/bindings.h"
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

namespace nb = nanobind;

namespace dcp::python {
namespace {

using calibration::DeviceCalibrationOptions;

// A RankSync whose barrier() and max_over_ranks(value) a Python object provides; called with the
// GIL released, it takes the GIL for each call.
class PythonRankSync final : public calibration::RankSync {
 public:
  explicit PythonRankSync(nb::object sync) : sync_(std::move(sync)) {}
  void barrier() override {
    nb::gil_scoped_acquire gil;
    sync_.attr("barrier")();
  }
  double max_over_ranks(double value) override {
    nb::gil_scoped_acquire gil;
    return nb::cast<double>(sync_.attr("max_over_ranks")(value));
  }

 private:
  nb::object sync_;
};

DeviceCalibrationOptions device_options(std::int32_t repeats, std::int32_t tile_tokens,
                                        std::int64_t copy_bytes, double min_seconds,
                                        std::int32_t heads) {
  DeviceCalibrationOptions options;
  options.heads = heads;
  options.repeats = repeats;
  options.tile_tokens = tile_tokens;
  options.copy_bytes = copy_bytes;
  options.min_seconds = min_seconds;
  calibration::device_calls(options);  // checks them
  return options;
}

std::vector<calibration::MessageTime> messages(
    const std::vector<std::pair<std::int64_t, double>>& items) {
  std::vector<calibration::MessageTime> out;
  for (const auto& [bytes, seconds] : items) out.push_back({bytes, seconds});
  return out;
}

// A fit's report as Python sees it: the cluster file's text, the table's rows (name, seconds,
// key, value, unit) and the notes.
nb::dict report_dict(const calibration::CalibrationReport& report) {
  nb::list rows;
  for (const calibration::CalibrationMeasurement& r : report.measurements) {
    rows.append(nb::make_tuple(r.name, r.seconds, r.derives, r.value, r.unit));
  }
  nb::dict d;
  d["text"] = to_cluster_text(report.spec);
  d["measurements"] = rows;
  d["notes"] = report.notes;
  return d;
}

using Subtiles = std::tuple<std::int32_t, std::int32_t, std::int32_t, std::int32_t, bool>;
using MessageSeconds = std::vector<std::pair<std::int64_t, double>>;
using DeviceTimings = std::vector<std::vector<std::vector<double>>>;

calibration::KernelSubtiles kernel_subtiles(const Subtiles& subtiles) {
  const auto [fq, fkv, bq, bkv, whole] = subtiles;
  return {fq, fkv, bq, bkv, whole};
}

// Seconds per call of each Python operation ([operation][repeat]) on this rank, every rank at
// once; a None operation takes no part.
std::vector<std::vector<double>> time_python_operations(nb::object sync,
                                                        const std::vector<nb::object>& operations,
                                                        std::int32_t repeats, double min_seconds) {
  std::vector<calibration::TimedOperation> timed;
  for (const nb::object& op : operations) {
    if (op.is_none()) {
      timed.emplace_back();
      continue;
    }
    timed.emplace_back([op] {
      nb::gil_scoped_acquire gil;
      op();
    });
  }
  PythonRankSync rank_sync(std::move(sync));
  nb::gil_scoped_release release;
  return calibration::time_operations(rank_sync, timed, repeats, min_seconds);
}

// The sizes of the link sweep from min_bytes to max_bytes.
std::vector<std::int64_t> link_sweep_sizes(std::int64_t min_bytes, std::int64_t max_bytes) {
  calibration::LinkCalibrationOptions options;
  options.min_bytes = min_bytes;
  options.max_bytes = max_bytes;
  return calibration::sweep_sizes(options);
}

// The calls a device is timed on, each a dict (kind, name, shape, dtype, copy bytes).
nb::list device_call_dicts(std::int32_t repeats, std::int32_t tile_tokens, std::int64_t copy_bytes,
                           double min_seconds, std::int32_t heads) {
  nb::list calls;
  for (const calibration::DeviceCall& c : calibration::device_calls(
           device_options(repeats, tile_tokens, copy_bytes, min_seconds, heads))) {
    nb::dict d;
    d["kind"] = c.kind == calibration::DeviceCall::Kind::kForward    ? "forward"
                : c.kind == calibration::DeviceCall::Kind::kBackward ? "backward"
                                                                     : "copy";
    d["name"] = c.name;
    d["heads"] = c.heads;
    d["rows"] = c.rows;
    d["q_tokens"] = c.q_tokens;
    d["tiles"] = c.tiles;
    d["kv_tokens"] = c.kv_tokens;
    d["causal"] = c.causal;
    d["head_dim"] = c.head_dim;
    d["dtype"] = c.fp32 ? "fp32" : "bf16";
    d["copy_bytes"] = c.copy_bytes;
    calls.append(d);
  }
  return calls;
}

// This rank's seconds per device call on the cpu kernels, every rank of `sync` at once.
std::vector<std::vector<double>> time_cpu_calls(nb::object sync, std::int32_t rank,
                                                std::int32_t repeats, std::int32_t tile_tokens,
                                                std::int64_t copy_bytes, double min_seconds,
                                                std::int32_t heads) {
  const DeviceCalibrationOptions options =
      device_options(repeats, tile_tokens, copy_bytes, min_seconds, heads);
  PythonRankSync rank_sync(std::move(sync));
  nb::gil_scoped_release release;
  return calibration::time_cpu_device(rank_sync, rank, options);
}

// The cpu kernels' sub-tiles as a tuple (forward q, forward kv, backward q, backward kv, whole).
Subtiles cpu_subtile_tuple() {
  const calibration::KernelSubtiles s = calibration::cpu_kernel_subtiles();
  return std::make_tuple(s.forward_q, s.forward_kv, s.backward_q, s.backward_kv, s.whole);
}

// (nodes, devices per node) from every rank's launcher placement (local world size, local rank).
std::pair<std::int32_t, std::int32_t> placements_shape(
    const std::vector<std::pair<std::int32_t, std::int32_t>>& placements,
    const std::string& variable) {
  std::vector<calibration::LauncherPlacement> p;
  for (const auto& [size, rank] : placements) p.push_back({size, rank});
  const ClusterShape shape = calibration::shape_from_placements(p, variable);
  return std::make_pair(shape.nodes, shape.devices_per_node);
}

// The fit of a cluster's measurements: its links' and every rank's device timings.
nb::dict fit_cluster_measurements(
    std::int32_t nodes, std::int32_t devices_per_node, const MessageSeconds& intra_node,
    const MessageSeconds& inter_node,
    const std::vector<std::tuple<std::int32_t, double, double>>& groups,
    std::pair<std::int64_t, double> aggregate, const DeviceTimings& device_timings,
    std::int32_t repeats, std::int32_t tile_tokens, std::int64_t copy_bytes, double min_seconds,
    Subtiles subtiles, const std::string& name, std::int32_t heads) {
  calibration::LinkMeasurements links;
  links.shape = {nodes, devices_per_node};
  links.intra_node = messages(intra_node);
  links.inter_node = messages(inter_node);
  for (const auto& [peers, issue, seconds] : groups) {
    links.groups.push_back({peers, issue, seconds});
  }
  links.aggregate = {aggregate.first, aggregate.second};
  return report_dict(calibration::fit_cluster(
      links, device_timings, device_options(repeats, tile_tokens, copy_bytes, min_seconds, heads),
      kernel_subtiles(subtiles), name));
}

// The fit of one device's timings onto a base cluster (a preset or a file).
nb::dict fit_device_measurements(const std::string& base, const DeviceTimings& timings,
                                 std::int32_t repeats, std::int32_t tile_tokens,
                                 std::int64_t copy_bytes, double min_seconds, Subtiles subtiles,
                                 const std::string& name, std::int32_t heads) {
  return report_dict(calibration::fit_device_onto(
      resolve_cluster(base), timings,
      device_options(repeats, tile_tokens, copy_bytes, min_seconds, heads),
      kernel_subtiles(subtiles), name));
}

// Timing over the ranks of a Python sync, and the links' message sizes.
void bind_rank_timing(nb::module_& m) {
  m.attr("SMALL_MESSAGE_BYTES") = calibration::kSmallMessageBytes;
  m.def("time_operations", &time_python_operations, nb::arg("sync"), nb::arg("operations"),
        nb::arg("repeats"), nb::arg("min_seconds"),
        "Seconds per call of each operation ([operation][repeat]) on this rank, every rank at "
        "once (dcp/runtime/rank_timing.h); None takes no part.");
  m.def("sweep_sizes", &link_sweep_sizes, nb::arg("min_bytes"), nb::arg("max_bytes"));
}

// The device calls: what a device is timed on, their timing on the cpu kernels, their sub-tiles.
void bind_device_calls(nb::module_& m) {
  m.def("device_calls", &device_call_dicts, nb::arg("repeats"), nb::arg("tile_tokens"),
        nb::arg("copy_bytes"), nb::arg("min_seconds"), nb::arg("heads") = 1);
  m.def("time_cpu_device", &time_cpu_calls, nb::arg("sync"), nb::arg("rank"), nb::arg("repeats"),
        nb::arg("tile_tokens"), nb::arg("copy_bytes"), nb::arg("min_seconds"),
        nb::arg("heads") = 1);
  m.def("cpu_subtiles", &cpu_subtile_tuple);
}

// The calibrated world's shape: from the launcher's placements, and its check.
void bind_world_shape(nb::module_& m) {
  m.def("shape_from_placements", &placements_shape, nb::arg("placements"), nb::arg("variable"));
  m.def(
      "check_calibration_world",
      [](std::int32_t nodes, std::int32_t devices_per_node, std::int32_t ranks) {
        calibration::check_calibration_world({nodes, devices_per_node}, ranks);
      },
      nb::arg("nodes"), nb::arg("devices_per_node"), nb::arg("ranks"));
}

// The fits of measurements into cluster files, and a cluster's file text.
void bind_fits(nb::module_& m) {
  m.def("fit_cluster", &fit_cluster_measurements, nb::arg("nodes"), nb::arg("devices_per_node"),
        nb::arg("intra_node"), nb::arg("inter_node"), nb::arg("groups"), nb::arg("aggregate"),
        nb::arg("device_timings"), nb::arg("repeats"), nb::arg("tile_tokens"),
        nb::arg("copy_bytes"), nb::arg("min_seconds"), nb::arg("subtiles"), nb::arg("name"),
        nb::arg("heads") = 1,
        "The cluster file of the measurements (dcp::calibration::fit_cluster): a dict of its text, "
        "the table's rows (name, seconds, key, value, unit) and notes.");
  m.def(
      "cluster_text",
      [](const std::string& cluster) { return to_cluster_text(resolve_cluster(cluster)); },
      nb::arg("cluster"),
      "The cluster file text of a preset or a cluster file (raises ValueError naming a name that "
      "is neither).");
  m.def("fit_device_onto", &fit_device_measurements, nb::arg("base"), nb::arg("device_timings"),
        nb::arg("repeats"), nb::arg("tile_tokens"), nb::arg("copy_bytes"), nb::arg("min_seconds"),
        nb::arg("subtiles"), nb::arg("name"), nb::arg("heads") = 1,
        "The cluster file of a device timed alone (dcp::calibration::fit_device_onto): the base "
        "preset or file with the fitted device constants; a dict as fit_cluster's.");
}

}  // namespace

void bind_calibration(nb::module_& m) {
  bind_rank_timing(m);
  bind_device_calls(m);
  bind_world_shape(m);
  bind_fits(m);
}

}  // namespace dcp::python

// SPDX-License-Identifier: Apache-2.0
// The cluster model: shapes, links and kernel constants, and their validation.
#include "dcp/model/cluster.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "dcp/core/error.h"

#include "dcp/model/cluster_fields.h"

namespace dcp {

namespace cluster_detail {

std::string curve_problem(std::span<const SizeEfficiency> curve) {
  for (std::size_t i = 0; i < curve.size(); ++i) {
    const SizeEfficiency& point = curve[i];
    if (point.bytes < 1) {
      return "point " + std::to_string(i) + " has " + std::to_string(point.bytes) +
             " bytes (must be at least 1)";
    }
    if (!std::isfinite(point.efficiency) || point.efficiency <= 0 || point.efficiency > 1) {
      return "point " + std::to_string(i) + " has efficiency " + std::to_string(point.efficiency) +
             " (must be in (0, 1])";
    }
    if (i > 0 && point.bytes <= curve[i - 1].bytes) {
      return "point " + std::to_string(i) + " (" + std::to_string(point.bytes) +
             " bytes) does not follow a smaller size";
    }
  }
  return "";
}

}  // namespace cluster_detail

using cluster_detail::curve_problem;
using cluster_detail::CurveField;
using cluster_detail::IntField;
using cluster_detail::kCurveFields;
using cluster_detail::kIntFields;

void validate(const ClusterShape& cluster) {
  constexpr std::int32_t kMax = 1 << 16;
  if (cluster.nodes < 1 || cluster.nodes > kMax) {
    throw InvalidInput("nodes must be in [1, 65536], got " + std::to_string(cluster.nodes));
  }
  if (cluster.devices_per_node < 1 || cluster.devices_per_node > kMax) {
    throw InvalidInput("devices per node must be in [1, 65536], got " +
                       std::to_string(cluster.devices_per_node));
  }
  if (static_cast<std::int64_t>(cluster.nodes) * cluster.devices_per_node > kMax) {
    throw InvalidInput(std::to_string(cluster.nodes) + " nodes x " +
                       std::to_string(cluster.devices_per_node) + " devices exceeds 65536 devices");
  }
}

double size_efficiency(std::span<const SizeEfficiency> curve, std::int64_t bytes) {
  if (curve.empty()) return 1;
  if (bytes <= curve.front().bytes) return curve.front().efficiency;
  if (bytes >= curve.back().bytes) return curve.back().efficiency;
  const auto above =
      std::upper_bound(curve.begin(), curve.end(), bytes,
                       [](std::int64_t b, const SizeEfficiency& point) { return b < point.bytes; });
  const SizeEfficiency& hi = *above;
  const SizeEfficiency& lo = *(above - 1);
  const double t = std::log(static_cast<double>(bytes) / static_cast<double>(lo.bytes)) /
                   std::log(static_cast<double>(hi.bytes) / static_cast<double>(lo.bytes));
  return lo.efficiency + t * (hi.efficiency - lo.efficiency);
}

std::int32_t ClusterSpec::nic_of(DeviceId device) const {
  const std::int64_t local = device % shape.devices_per_node;
  return shape.node_of(device) * nics_per_node +
         static_cast<std::int32_t>(local * nics_per_node / shape.devices_per_node);
}

double ClusterSpec::link_bytes(std::int64_t bytes, bool inter_node,
                               std::int64_t message_bytes) const {
  return static_cast<double>(bytes) /
         size_efficiency(inter_node ? inter_node_efficiency : intra_node_efficiency,
                         message_bytes > 0 ? message_bytes : bytes);
}

double MessageLinkBytes::operator()(std::int64_t bytes, bool inter_node,
                                    std::int64_t message_bytes) {
  if (message_bytes <= 0) return spec_.link_bytes(bytes, inter_node, message_bytes);
  if (message_bytes != message_ || inter_node != inter_node_) {
    message_ = message_bytes;
    inter_node_ = inter_node;
    efficiency_ = size_efficiency(
        inter_node ? spec_.inter_node_efficiency : spec_.intra_node_efficiency, message_bytes);
  }
  return static_cast<double>(bytes) / efficiency_;
}

double ClusterSpec::stream_bandwidth(bool inter_node) const {
  const double cap = inter_node ? inter_node_stream_bandwidth : intra_node_stream_bandwidth;
  return cap > 0 ? cap : std::numeric_limits<double>::infinity();
}

double ClusterSpec::transfer_seconds(std::int64_t bytes, bool inter_node) const {
  const double rate =
      std::min(inter_node ? nic_bandwidth() : intra_node_bandwidth, stream_bandwidth(inter_node));
  return (inter_node ? inter_node_latency : intra_node_latency) +
         link_bytes(bytes, inter_node) / rate;
}

void validate(const ClusterSpec& spec) {
  validate(spec.shape);
  // A rate below 1 MB/s or 1 GFLOP/s is a typo, and would turn estimates into infinities.
  const auto rate = [&](double value, const char* field) {
    if (!std::isfinite(value) || value < 1e6) {
      throw InvalidInput(std::string("cluster '") + spec.name + "': " + field +
                         " must be finite and at least 1e6 per second, got " +
                         std::to_string(value) + " per second");
    }
  };
  const auto latency = [&](double value, const char* field) {
    if (!std::isfinite(value) || value < 0) {
      throw InvalidInput(std::string("cluster '") + spec.name + "': " + field +
                         " must be finite and not negative, got " + std::to_string(value) + " s");
    }
  };
  rate(spec.intra_node_bandwidth, "intra_node_gbps");
  rate(spec.inter_node_bandwidth, "inter_node_gbps");
  rate(spec.forward_flops, "forward_tflops");
  rate(spec.backward_flops, "backward_tflops");
  latency(spec.intra_node_latency, "intra_node_latency_us");
  latency(spec.inter_node_latency, "inter_node_latency_us");
  latency(spec.kernel_overhead, "kernel_overhead_us");
  rate(spec.memory_bandwidth, "memory_gbps");
  latency(spec.subtile_overhead, "subtile_overhead_us");
  latency(spec.launch_overhead, "launch_overhead_us");
  latency(spec.launch_peer_overhead, "launch_peer_overhead_us");
  for (const auto& [value, field] :
       {std::pair{spec.intra_node_stream_bandwidth, "intra_node_stream_gbps"},
        std::pair{spec.inter_node_stream_bandwidth, "inter_node_stream_gbps"}}) {
    if (value != 0) rate(value, field);  // 0: no cap
  }
  const auto in_range = [&](double value, double lo, double hi, const char* field) {
    if (!std::isfinite(value) || value < lo || value >= hi) {
      throw InvalidInput(std::string("cluster '") + spec.name + "': " + field + " must be in [" +
                         std::to_string(lo) + ", " + std::to_string(hi) + "), got " +
                         std::to_string(value));
    }
  };
  in_range(spec.softmax_share, 0, 1, "softmax_share");
  in_range(spec.fp32_kernel_factor, 0.01, 100, "fp32_kernel_factor");
  in_range(spec.partial_subtile_extra, 0, 100, "partial_subtile_extra");
  in_range(spec.tile_setup_tokens, 0, 1e6, "tile_setup_tokens");
  for (const IntField& f : kIntFields) {
    if (spec.*f.member < f.min || spec.*f.member > f.max) {
      throw InvalidInput(std::string("cluster '") + spec.name + "': " + f.key + " must be in [" +
                         std::to_string(f.min) + ", " + std::to_string(f.max) + "], got " +
                         std::to_string(spec.*f.member));
    }
  }
  for (const CurveField& f : kCurveFields) {
    if (const std::string problem = curve_problem(spec.*f.member); !problem.empty()) {
      throw InvalidInput(std::string("cluster '") + spec.name + "': " + f.key + ": " + problem);
    }
  }
}

std::vector<SizeEfficiency> half_rate_curve(double half_bytes) {
  std::vector<SizeEfficiency> curve;
  for (std::int64_t bytes = 4096; bytes <= (std::int64_t{1} << 30); bytes *= 4) {
    const double e = static_cast<double>(bytes) / (static_cast<double>(bytes) + half_bytes);
    curve.push_back({bytes, std::max(1e-3, std::round(e * 1000) / 1000)});
  }
  return curve;
}

}  // namespace dcp

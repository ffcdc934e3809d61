// SPDX-License-Identifier: Apache-2.0
// Cluster shapes, presets and cluster files.
#include "dcp/model/cluster.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

namespace dcp {

namespace {

struct Field {
  const char* key;
  double ClusterSpec::*member;
  double unit;
  bool required;
};

constexpr Field kFields[] = {
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

constexpr IntField kIntFields[] = {
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

constexpr CurveField kCurveFields[] = {
    {"intra_node_efficiency", &ClusterSpec::intra_node_efficiency},
    {"inter_node_efficiency", &ClusterSpec::inter_node_efficiency},
};

// Empty if the curve is well formed, else what is wrong with it.
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

// "65536:0.5, 1048576:0.9"; empty: no curve (efficiency 1 at every size).
std::vector<SizeEfficiency> parse_curve(std::string_view value, const std::string& what) {
  std::vector<SizeEfficiency> curve;
  if (trim(value).empty()) return curve;
  for (std::string_view item : split(value, ',')) {
    item = trim(item);
    const std::size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      throw InvalidInput(what + ": expected BYTES:EFFICIENCY points separated by commas, got " +
                         quoted(item));
    }
    curve.push_back({parse_int(trim(item.substr(0, colon)), what),
                     parse_double(trim(item.substr(colon + 1)), what)});
  }
  if (const std::string problem = curve_problem(curve); !problem.empty()) {
    throw InvalidInput(what + ": " + problem);
  }
  return curve;
}

// A file's number in the spec's unit: times a unit of 1 or more, divided by the power of ten of a
// smaller one (1e-6: divided by 1e6, one correctly rounded operation, so "10" us is 1e-5 s).
double from_file_unit(double number, double unit) {
  return unit >= 1 ? number * unit : number / std::round(1 / unit);
}

// The shortest decimal that reads back (from_file_unit) as `value`, written without an exponent
// where it is between 1e-4 and 1e15: 4040 rather than 4040.0000000000005 for 4.04e-3 s in us.
std::string shortest(double value, double unit = 1) {
  const double quotient = unit >= 1 ? value / unit : value * std::round(1 / unit);
  char buffer[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, quotient);
    if (from_file_unit(std::strtod(buffer, nullptr), unit) != value) continue;
    const double magnitude = std::abs(quotient);
    if (magnitude >= 1e-4 && magnitude < 1e15) {
      const int exponent = static_cast<int>(std::floor(std::log10(magnitude)));
      char plain[64];
      std::snprintf(plain, sizeof plain, "%.*f", std::max(0, digits - 1 - exponent), quotient);
      if (from_file_unit(std::strtod(plain, nullptr), unit) == value) return plain;
    }
    return buffer;
  }
  std::snprintf(buffer, sizeof buffer, "%.17g", quotient);
  return buffer;
}

}  // namespace

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

std::vector<std::string> cluster_presets() { return {"a100-p4de", "h100-dgx", "cpu-local"}; }

namespace {

// This repository's machine (2 cores of an AMD EPYC Zen 4, one rank per core, one kernel thread
// per rank, the local communicator), as measured by `dcp calibrate`; every value is that
// command's output (docs/cost_model.md). Other machines: run `dcp calibrate --out FILE` and pass
// the file as --cluster.
ClusterSpec cpu_local_preset() {
  ClusterSpec spec;
  spec.name = "cpu-local";
  spec.shape = {1, 2};
  spec.intra_node_bandwidth = 3.588e9;  // both directions of a pair at once
  spec.intra_node_latency = 29.11e-6;   // a condition-variable wake-up, mostly
  spec.inter_node_bandwidth = 3.588e9;  // one process: as intra
  spec.inter_node_latency = 29.11e-6;
  spec.forward_flops = 64.22e9;
  spec.backward_flops = 77.1e9;
  spec.kernel_overhead = 3.04e-6;
  spec.memory_bandwidth = 11.91e9;
  spec.softmax_share = 0;
  spec.fp32_kernel_factor = 0.7861;
  spec.partial_subtile_extra = 0.06041;
  spec.subtile_overhead = 0.2835e-6;
  spec.forward_subtile_q = 128;  // the cpu kernels' sub-tiles
  spec.forward_subtile_kv = 256;
  spec.backward_subtile_q = 128;
  spec.backward_subtile_kv = 128;
  return spec;
}

// "a100-p4de, h100-dgx": the presets for an error message.
std::string preset_list() {
  std::string list;
  for (const std::string& preset : cluster_presets()) list += (list.empty() ? "" : ", ") + preset;
  return list;
}

}  // namespace

ClusterSpec cluster_preset(std::string_view name) {
  ClusterSpec spec;
  if (name == "a100-p4de") {
    // AWS p4de.24xlarge, the DCP paper's testbed (DCP §7.1): 8 x A100 80 GB per node. The values
    // marked "fitted" are what no datasheet fixes, fitted to the paper's measured
    // LongDataCollections causal cells of ring, zigzag, LoongTrain and TransformerEngine
    // (`dcp bench --suite paper --fit --batches 1`, LoongTrain at its best inner ring;
    // docs/paper_bench.md). They describe the paper's baselines as they ran (Python loops over
    // NCCL send/recv and FlashAttention-2 calls), not the hardware's peaks.
    spec.name = "a100-p4de";
    spec.shape = {4, 8};
    spec.intra_node_bandwidth = 300e9;  // NVSwitch 600 GB/s bidirectional per GPU (NVLink 3)
    spec.intra_node_latency = 10e-6;    // NCCL point-to-point launch and handshake, estimate
    spec.inter_node_bandwidth = 50e9;   // 4 x 100 Gb/s EFA per node
    spec.inter_node_latency = 30e-6;    // EFA (SRD) round trip plus NCCL proxy, estimate
    // Forward: the low end of FlashAttention-2's published 50-73% of 312 TFLOP/s (the fitted
    // cells barely pin it: docs/cost_model.md). Backward: fitted, the runs' effective rate.
    spec.forward_flops = 156e12;
    spec.backward_flops = 135e12;
    spec.kernel_overhead = 1e-6;     // fitted (at the fit's lower bound)
    spec.memory_bandwidth = 1.6e12;  // 2039 GB/s HBM2e (A100 80 GB SXM), ~80% sustained
    spec.softmax_share = 0.25;       // FA2 reaches ~0.8x its d=128 FLOP rate at d=64: s = 0.25 fits
    spec.fp32_kernel_factor = 2;     // TF32 tensor peak 156 vs bf16 312 TFLOP/s
    spec.partial_subtile_extra = 0.1;  // FA2 masks only diagonal blocks, estimate
    spec.subtile_overhead = 0;         // absorbed by the sustained rate (108 SMs in parallel)
    spec.forward_subtile_q = 128;      // FA2 sm80 hdim128 forward: 128 x 64 blocks
    spec.forward_subtile_kv = 64;
    spec.backward_subtile_q = 64;  // FA2 sm80 hdim128 backward: 64 x 128 blocks
    spec.backward_subtile_kv = 128;
    spec.whole_subtiles = true;  // FA2 computes whole blocks and masks the rows/keys past the end
    spec.tile_setup_tokens = 224.5;  // fitted with the forward rate above
    spec.nics_per_node = 4;          // 4 EFA interfaces, two GPUs each (p4de topology)
    // Fitted half-rate message sizes h (efficiency s / (s + h)): 3.04 MB inside a node, 1.34 MB
    // between nodes.
    spec.intra_node_efficiency = half_rate_curve(3.04e6);
    spec.inter_node_efficiency = half_rate_curve(1.34e6);
    spec.intra_node_stream_bandwidth = 10.7e9;  // fitted: one NCCL send/recv stream over NVLink
    spec.inter_node_stream_bandwidth = 6.22e9;  // fitted: one NCCL send/recv stream over EFA
    spec.launch_overhead = 29.3e-6;             // fitted: the Python and NCCL set-up of a step
    spec.launch_peer_overhead = 0.1e-6;         // fitted (at the fit's lower bound)
  } else if (name == "h100-dgx") {
    // NVIDIA DGX H100: 8 x H100 SXM per node (NVIDIA's DGX H100 specifications).
    spec.name = "h100-dgx";
    spec.shape = {4, 8};
    spec.intra_node_bandwidth = 450e9;  // NVLink 4: 900 GB/s bidirectional per GPU
    spec.intra_node_latency = 8e-6;     // estimate
    spec.inter_node_bandwidth = 400e9;  // 8 x ConnectX-7 400 Gb/s per node
    spec.inter_node_latency = 20e-6;    // InfiniBand NDR plus NCCL proxy, estimate
    spec.forward_flops = 580e12;        // FlashAttention-3 varlen causal fwd, bf16 (MagiAttention)
    spec.backward_flops = 425e12;       // FlashAttention-3 varlen causal bwd (MagiAttention)
    spec.kernel_overhead = 6e-6;        // estimate
    spec.memory_bandwidth = 2.7e12;     // 3.35 TB/s HBM3 (H100 SXM), ~80% sustained
    spec.softmax_share = 0.25;          // as FA2; FA3 overlaps softmax with matmul, estimate
    spec.fp32_kernel_factor = 2;        // TF32 tensor peak is half the bf16 peak
    spec.partial_subtile_extra = 0.1;   // estimate
    spec.subtile_overhead = 0;          // absorbed by the sustained rate (132 SMs in parallel)
    spec.forward_subtile_q = 128;       // FA3 hdim128 forward: 128 x 128 blocks
    spec.forward_subtile_kv = 128;
    spec.backward_subtile_q = 64;  // FA3 hdim128 backward: 64 x 128 blocks
    spec.backward_subtile_kv = 128;
    spec.whole_subtiles = true;    // as FA2
    spec.tile_setup_tokens = 128;  // estimate
    spec.nics_per_node = 8;        // one 400 Gb/s ConnectX-7 per GPU
    spec.intra_node_efficiency = {{1 << 16, 0.15}, {1 << 20, 0.6}, {1 << 24, 0.9}};  // estimate
    spec.inter_node_efficiency = {{1 << 16, 0.1}, {1 << 20, 0.5}, {1 << 24, 0.85}};  // estimate
    spec.launch_overhead = 8e-6;                                                     // estimate
    spec.launch_peer_overhead = 2e-6;                                                // estimate
  } else if (name == "cpu-local") {
    spec = cpu_local_preset();
  } else {
    throw InvalidInput("unknown cluster preset " + quoted(name) + " (presets: " + preset_list() +
                       "; or give a cluster file)");
  }
  return spec;
}

ClusterSpec parse_cluster_text(std::string_view text, std::string_view origin) {
  ClusterSpec spec;
  spec.name = "";
  std::vector<std::string> seen;
  bool have_shape[2] = {false, false};
  bool have_field[std::size(kFields)] = {};
  std::int64_t line_number = 0;
  for (std::string_view line : split(text, '\n')) {
    ++line_number;
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    line = trim(line);
    if (line.empty()) continue;
    std::string where(origin);
    where.append(":").append(std::to_string(line_number));
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      throw InvalidInput(where + ": expected 'key = value', got " + quoted(line));
    }
    const std::string key(trim(line.substr(0, eq)));
    const std::string_view value = trim(line.substr(eq + 1));
    for (const std::string& k : seen) {
      if (k == key) throw InvalidInput(where + ": key " + quoted(key) + " given twice");
    }
    std::string what = where;
    what.append(": ").append(key);
    if (key == "preset") {
      if (!seen.empty()) throw InvalidInput(where + ": 'preset' must be the first key");
      spec = cluster_preset(value);
      have_shape[0] = have_shape[1] = true;
      for (bool& f : have_field) f = true;
    } else if (key == "name") {
      spec.name = std::string(value);
    } else if (key == "nodes" || key == "devices_per_node") {
      const std::int64_t count = parse_int(value, what);
      if (count < 1 || count > 65536) {
        throw InvalidInput(what + " must be in [1, 65536], got " + quoted(value));
      }
      (key == "nodes" ? spec.shape.nodes : spec.shape.devices_per_node) =
          static_cast<std::int32_t>(count);
      have_shape[key == "nodes" ? 0 : 1] = true;
    } else {
      bool known = false;
      for (const IntField& f : kIntFields) {
        if (key != f.key) continue;
        const std::int64_t number = parse_int(value, what);
        if (number < f.min || number > f.max) {
          throw InvalidInput(what + " must be in [" + std::to_string(f.min) + ", " +
                             std::to_string(f.max) + "], got " + quoted(value));
        }
        spec.*f.member = static_cast<std::int32_t>(number);
        known = true;
      }
      for (const CurveField& f : kCurveFields) {
        if (key != f.key) continue;
        spec.*f.member = parse_curve(value, what);
        known = true;
      }
      if (key == "whole_subtiles") {
        const std::int64_t flag = parse_int(value, what);
        if (flag != 0 && flag != 1)
          throw InvalidInput(what + " must be 0 or 1, got " + quoted(value));
        spec.whole_subtiles = flag == 1;
        known = true;
      }
      for (std::size_t f = 0; f < std::size(kFields); ++f) {
        if (key != kFields[f].key) continue;
        const double number = parse_double(value, what);
        // A stream bandwidth of 0 is no cap; every other rate is at least 1 kB/s or 1 MFLOP/s: a
        // floor against typos, far below what `dcp calibrate` measures on a busy debug build
        // (0.75 GFLOP/s seen), whose files must read back.
        const bool is_rate =
            kFields[f].unit >= 1e9 && !(key.ends_with("_stream_gbps") && number == 0);
        if (is_rate ? !(number >= 1e-6) : !(number >= 0)) {
          throw InvalidInput(what +
                             (is_rate ? " must be at least 0.000001" : " must not be negative") +
                             ", got " + quoted(value));
        }
        spec.*kFields[f].member = from_file_unit(number, kFields[f].unit);
        have_field[f] = known = true;
      }
      if (!known) {
        std::string keys = "preset, name, nodes, devices_per_node";
        for (const Field& f : kFields) keys.append(", ").append(f.key);
        for (const IntField& f : kIntFields) keys.append(", ").append(f.key);
        keys.append(", whole_subtiles");
        for (const CurveField& f : kCurveFields) keys.append(", ").append(f.key);
        throw InvalidInput(where + ": unknown key " + quoted(key) + " (keys: " + keys + ")");
      }
    }
    seen.push_back(key);
  }
  const auto require = [&](bool present, const char* key) {
    if (!present) {
      throw InvalidInput(std::string(origin) + ": missing key '" + key +
                         "' (or start with 'preset = NAME')");
    }
  };
  require(have_shape[0], "nodes");
  require(have_shape[1], "devices_per_node");
  for (std::size_t f = 0; f < std::size(kFields); ++f) {
    if (kFields[f].required) require(have_field[f], kFields[f].key);
  }
  if (spec.name.empty()) spec.name = std::string(origin);
  validate(spec);
  return spec;
}

ClusterSpec read_cluster_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open cluster file " + quoted(path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw IoError("cannot read cluster file " + quoted(path));
  return parse_cluster_text(text.str(), path);
}

bool is_cluster_preset(std::string_view name) {
  const std::vector<std::string> presets = cluster_presets();
  return std::find(presets.begin(), presets.end(), name) != presets.end();
}

ClusterSpec resolve_cluster(const std::string& preset_or_file) {
  if (is_cluster_preset(preset_or_file)) return cluster_preset(preset_or_file);
  std::ifstream probe(preset_or_file);
  if (!probe) {
    throw InvalidInput("--cluster " + quoted(preset_or_file) + " is neither a preset (" +
                       preset_list() + ") nor a readable file");
  }
  return read_cluster_file(preset_or_file);
}

std::string to_cluster_text(const ClusterSpec& spec) {
  std::string out = "name = " + spec.name + "\n";
  out += "nodes = " + std::to_string(spec.shape.nodes) + "\n";
  out += "devices_per_node = " + std::to_string(spec.shape.devices_per_node) + "\n";
  for (const Field& f : kFields) {
    out.append(f.key).append(" = ").append(shortest(spec.*f.member, f.unit)).append("\n");
  }
  for (const IntField& f : kIntFields) {
    out.append(f.key).append(" = ").append(std::to_string(spec.*f.member)).append("\n");
  }
  out.append("whole_subtiles = ").append(spec.whole_subtiles ? "1" : "0").append("\n");
  for (const CurveField& f : kCurveFields) {
    const std::vector<SizeEfficiency>& curve = spec.*f.member;
    if (curve.empty()) continue;
    out.append(f.key).append(" =");
    for (std::size_t i = 0; i < curve.size(); ++i) {
      out.append(i == 0 ? " " : ", ")
          .append(std::to_string(curve[i].bytes))
          .append(":")
          .append(shortest(curve[i].efficiency));
    }
    out.append("\n");
  }
  return out;
}

}  // namespace dcp

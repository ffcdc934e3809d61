// SPDX-License-Identifier: Apache-2.0
// Cluster shapes, presets and cluster files.
#include "dcp/model/cluster.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

namespace dcp {

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

double ClusterSpec::transfer_seconds(std::int64_t bytes, bool inter_node) const {
  return inter_node ? inter_node_latency + static_cast<double>(bytes) / inter_node_bandwidth
                    : intra_node_latency + static_cast<double>(bytes) / intra_node_bandwidth;
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
}

std::vector<std::string> cluster_presets() { return {"a100-p4de", "h100-dgx"}; }

namespace {

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
    // AWS p4de.24xlarge, the DCP paper's testbed (DCP §7.1): 8 x A100 80 GB per node.
    spec.name = "a100-p4de";
    spec.shape = {4, 8};
    spec.intra_node_bandwidth = 300e9;  // NVSwitch 600 GB/s bidirectional per GPU (NVLink 3)
    spec.intra_node_latency = 10e-6;    // NCCL point-to-point launch and handshake, estimate
    spec.inter_node_bandwidth = 50e9;   // 4 x 100 Gb/s EFA per node
    spec.inter_node_latency = 30e-6;    // EFA (SRD) round trip plus NCCL proxy, estimate
    spec.forward_flops = 200e12;        // FlashAttention-2 on A100: 50-73% of 312 TFLOP/s bf16
    spec.backward_flops = 160e12;       // FlashAttention-2 backward runs ~20% below forward
    spec.kernel_overhead = 8e-6;        // CUDA launch plus tail of a small grid, estimate
  } else if (name == "h100-dgx") {
    // NVIDIA DGX H100: 8 x H100 SXM per node (anchors §D.4).
    spec.name = "h100-dgx";
    spec.shape = {4, 8};
    spec.intra_node_bandwidth = 450e9;  // NVLink 4: 900 GB/s bidirectional per GPU
    spec.intra_node_latency = 8e-6;     // estimate
    spec.inter_node_bandwidth = 400e9;  // 8 x ConnectX-7 400 Gb/s per node
    spec.inter_node_latency = 20e-6;    // InfiniBand NDR plus NCCL proxy, estimate
    spec.forward_flops = 580e12;        // FlashAttention-3 varlen causal fwd, bf16 (anchors §D.2)
    spec.backward_flops = 425e12;       // FlashAttention-3 varlen causal bwd (anchors §D.2)
    spec.kernel_overhead = 6e-6;        // estimate
  } else {
    throw InvalidInput("unknown cluster preset " + quoted(name) + " (presets: " + preset_list() +
                       "; or give a cluster file)");
  }
  return spec;
}

namespace {

struct Field {
  const char* key;
  double ClusterSpec::*member;
  double unit;
};

constexpr Field kFields[] = {
    {"intra_node_gbps", &ClusterSpec::intra_node_bandwidth, 1e9},
    {"intra_node_latency_us", &ClusterSpec::intra_node_latency, 1e-6},
    {"inter_node_gbps", &ClusterSpec::inter_node_bandwidth, 1e9},
    {"inter_node_latency_us", &ClusterSpec::inter_node_latency, 1e-6},
    {"forward_tflops", &ClusterSpec::forward_flops, 1e12},
    {"backward_tflops", &ClusterSpec::backward_flops, 1e12},
    {"kernel_overhead_us", &ClusterSpec::kernel_overhead, 1e-6},
};

}  // namespace

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
      for (std::size_t f = 0; f < std::size(kFields); ++f) {
        if (key != kFields[f].key) continue;
        const double number = parse_double(value, what);
        const bool is_rate = kFields[f].unit >= 1e9;
        if (is_rate ? !(number >= 1e-3) : !(number >= 0)) {
          throw InvalidInput(what +
                             (is_rate ? " must be at least 0.001" : " must not be negative") +
                             ", got " + quoted(value));
        }
        spec.*kFields[f].member = number * kFields[f].unit;
        have_field[f] = known = true;
      }
      if (!known) {
        std::string keys = "preset, name, nodes, devices_per_node";
        for (const Field& f : kFields) keys.append(", ").append(f.key);
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
  for (std::size_t f = 0; f < std::size(kFields); ++f) require(have_field[f], kFields[f].key);
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

ClusterSpec resolve_cluster(const std::string& preset_or_file) {
  for (const std::string& preset : cluster_presets()) {
    if (preset == preset_or_file) return cluster_preset(preset);
  }
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
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.17g", spec.*f.member / f.unit);
    out.append(f.key).append(" = ").append(buffer).append("\n");
  }
  return out;
}

}  // namespace dcp

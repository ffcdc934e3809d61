// SPDX-License-Identifier: Apache-2.0
// The step-time model: a transformer's dense FLOPs, its tensor-parallel collectives, and the fit
// of the rates no datasheet fixes.
#include "dcp/sim/step_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "dcp/core/error.h"

namespace dcp::sim {
namespace {

std::int64_t layer_parameters(const TransformerConfig& m) {
  const std::int64_t qkv = m.hidden * (m.hidden + 2 * m.kv_dim());
  const std::int64_t out = m.hidden * m.hidden;
  const std::int64_t ffn = (m.gated_ffn ? 3 : 2) * m.hidden * m.ffn;
  return qkv + out + ffn;
}

// Forward, recomputed forward and backward (twice the forward's FLOPs): in forwards' worth.
double passes(const TransformerConfig& m) { return m.full_recompute ? 4.0 : 3.0; }

double dense_flops_per_gpu(const TransformerConfig& m, double tokens) {
  return tokens * m.dense_step_flops_per_token();
}

// The sequence-parallel collectives of all layers: an all-gather before and a reduce-scatter after
// each of attention's and the FFN's projections, per forward (and recomputed forward) and
// backward; each a ring over the group's GPUs moving (tp - 1) chunks of the device's activations
// / tp per GPU over its intra-node link.
double tensor_parallel_seconds(const TransformerConfig& m, const ClusterSpec& gpus, double tokens) {
  if (m.tensor_parallel == 1) return 0;
  const double collectives = 4.0 * (m.full_recompute ? 3 : 2) * m.layers;
  const auto chunk = static_cast<std::int64_t>(
      std::ceil(tokens * static_cast<double>(m.hidden * m.bytes_per_value) / m.tensor_parallel));
  const double step = gpus.intra_node_latency +
                      gpus.link_bytes(chunk, /*inter_node=*/false) / gpus.intra_node_bandwidth;
  return collectives * (m.tensor_parallel - 1) * step;
}

void check_positive(std::int64_t value, const char* field) {
  if (value < 1) {
    throw InvalidInput(std::string("transformer ") + field + " must be positive, got " +
                       std::to_string(value));
  }
}

}  // namespace

std::int64_t TransformerConfig::parameters() const {
  return layers * layer_parameters(*this) + 2 * vocab * hidden;
}

double TransformerConfig::dense_forward_flops_per_token() const {
  return 2.0 * static_cast<double>(layers * layer_parameters(*this) + vocab * hidden);
}

double TransformerConfig::dense_step_flops_per_token() const {
  return dense_forward_flops_per_token() * passes(*this) / tensor_parallel;
}

TransformerConfig paper_gpt_8b() { return TransformerConfig{}; }

void validate(const TransformerConfig& m) {
  check_positive(m.layers, "layers");
  check_positive(m.hidden, "hidden");
  check_positive(m.heads, "heads");
  check_positive(m.kv_heads, "kv_heads");
  check_positive(m.ffn, "ffn");
  check_positive(m.vocab, "vocab");
  check_positive(m.tensor_parallel, "tensor_parallel");
  check_positive(m.bytes_per_value, "bytes_per_value");
  if (m.hidden % m.heads != 0 || m.heads % m.kv_heads != 0) {
    throw InvalidInput("transformer heads " + std::to_string(m.heads) + " must divide hidden " +
                       std::to_string(m.hidden) + " and kv_heads " + std::to_string(m.kv_heads) +
                       " must divide heads");
  }
  if (m.kv_heads % m.tensor_parallel != 0) {
    throw InvalidInput("transformer tensor_parallel " + std::to_string(m.tensor_parallel) +
                       " must divide kv_heads " + std::to_string(m.kv_heads) + " (and heads)");
  }
}

ClusterSpec tensor_parallel_groups(const ClusterSpec& gpus, std::int32_t tensor_parallel) {
  if (tensor_parallel < 1 || gpus.shape.devices_per_node % tensor_parallel != 0) {
    throw InvalidInput("tensor_parallel " + std::to_string(tensor_parallel) +
                       " must divide the devices per node " +
                       std::to_string(gpus.shape.devices_per_node));
  }
  ClusterSpec groups = gpus;
  groups.name = gpus.name + " / TP" + std::to_string(tensor_parallel);
  groups.shape.devices_per_node = gpus.shape.devices_per_node / tensor_parallel;
  groups.inter_node_bandwidth = gpus.inter_node_bandwidth / tensor_parallel;
  groups.nics_per_node = std::min(gpus.nics_per_node, groups.shape.devices_per_node);
  return groups;
}

StepTime step_time(const TransformerConfig& model, const StepRates& rates, const ClusterSpec& gpus,
                   double tokens, double attention_forward, double attention_backward) {
  validate(model);
  if (!(rates.dense_flops > 0) || !(rates.fixed_seconds >= 0) || !(tokens >= 0)) {
    throw InvalidInput("step rates need dense_flops > 0 and fixed_seconds >= 0, and tokens >= 0");
  }
  StepTime t;
  t.attention =
      model.layers * (attention_forward * (model.full_recompute ? 2 : 1) + attention_backward);
  t.dense = dense_flops_per_gpu(model, tokens) / rates.dense_flops;
  t.tensor_parallel = tensor_parallel_seconds(model, gpus, tokens);
  t.fixed = rates.fixed_seconds;
  return t;
}

StepRates fit_step_rates(const TransformerConfig& model, const ClusterSpec& gpus,
                         std::span<const MeasuredStep> steps, double peak_flops) {
  validate(model);
  if (!(peak_flops > 0) || !std::isfinite(peak_flops)) {
    throw InvalidInput("fitting step rates needs a positive peak rate, got " +
                       std::to_string(peak_flops));
  }
  if (steps.size() < 2) {
    throw InvalidInput("fitting step rates needs at least 2 measured steps, got " +
                       std::to_string(steps.size()));
  }
  // seconds - attention - collectives = fixed + work / rate: least squares in (fixed, 1 / rate).
  std::vector<double> x, y;
  for (const MeasuredStep& s : steps) {
    const StepTime known =
        step_time(model, {1, 0}, gpus, s.tokens, s.attention_forward, s.attention_backward);
    x.push_back(dense_flops_per_gpu(model, s.tokens));
    y.push_back(s.seconds - known.attention - known.tensor_parallel);
  }
  const auto n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    sxy += x[i] * y[i];
  }
  const double spread = sxx - sx * sx / n;
  if (!(spread > 1e-12 * sxx)) {
    throw InvalidInput("fitting step rates needs steps whose tokens differ");
  }
  double slope = (sxy - sx * sy / n) / spread;
  double fixed = (sy - slope * sx) / n;
  if (fixed < 0) {
    fixed = 0;
    slope = sxy / sxx;
  }
  bool at_peak = false;
  if (!(slope >= 1 / peak_flops)) {  // faster than the peak, or not growing with the work at all
    slope = 1 / peak_flops;
    fixed = std::max(0.0, (sy - slope * sx) / n);
    at_peak = true;
  }
  return {1 / slope, fixed, at_peak};
}

double lockstep_layer_seconds(std::span<const DeviceLayer> devices) {
  const LockstepPasses passes = lockstep_passes(devices);
  return passes.forward + passes.backward;
}

LockstepPasses lockstep_passes(std::span<const DeviceLayer> devices) {
  if (devices.empty()) throw InvalidInput("a layer's step needs a device");
  LockstepPasses passes;
  for (std::size_t d = 0; d < devices.size(); ++d) {
    const DeviceLayer& device = devices[d];
    for (const double seconds : {device.forward, device.backward, device.rest}) {
      if (!std::isfinite(seconds) || seconds < 0) {
        throw InvalidInput("device " + std::to_string(d) + "'s layer has a time of " +
                           std::to_string(seconds) + " s");
      }
    }
    passes.forward = std::max(passes.forward, device.forward + device.rest / 3);
    passes.backward = std::max(passes.backward, device.backward + 2 * device.rest / 3);
  }
  return passes;
}

}  // namespace dcp::sim

// SPDX-License-Identifier: Apache-2.0
// A training step's time: a transformer's attention from the simulator, the rest from its FLOPs
// at a sustained rate and its tensor-parallel collectives on the cluster's links.
#pragma once

#include <cstdint>
#include <span>

#include "dcp/model/cluster.h"

namespace dcp::sim {

// A decoder-only transformer trained with tensor parallelism (and sequence parallelism) inside a
// node. One tensor-parallel group is one device of the context-parallel plan: it holds heads /
// tensor_parallel q heads and kv_heads / tensor_parallel kv heads on every GPU.
struct TransformerConfig {
  std::int32_t layers = 32;
  std::int64_t hidden = 4096;
  std::int32_t heads = 32;
  std::int32_t kv_heads = 8;
  std::int64_t ffn = 14336;
  bool gated_ffn = true;       // SwiGLU: gate, up and down matrices
  std::int64_t vocab = 50688;  // the GPT-2 BPE's 50257, padded to a multiple of 128 x TP
  std::int32_t tensor_parallel = 4;
  // Full recomputation: every layer's forward (attention included) runs again in the backward
  // pass.
  bool full_recompute = true;
  std::int32_t bytes_per_value = 2;  // bf16 activations

  std::int64_t head_dim() const { return hidden / heads; }
  std::int64_t kv_dim() const { return head_dim() * kv_heads; }
  // The weights of the whole model (embedding and output layer untied; norms and biases left out).
  std::int64_t parameters() const;
  // Forward FLOPs per token of the whole model outside attention's score and value products:
  // the QKV, output, FFN and vocabulary projections (2 FLOPs per weight).
  double dense_forward_flops_per_token() const;
  // What one GPU of the tensor-parallel group runs of that per token in a step: forward,
  // recomputed forward where full_recompute, and backward (twice the forward).
  double dense_step_flops_per_token() const;
};

// The GPT "8B" of the DCP paper's end-to-end runs: 32 layers, hidden 4096, 32 heads, 8 kv
// groups, FFN 14336, TP 4, bf16, full recomputation (the reference system's
// benchmark/mlm/run_experiments.py).
TransformerConfig paper_gpt_8b();

// Throws InvalidInput naming the field unless every size is positive, heads divides hidden,
// kv_heads divides heads and tensor_parallel divides heads and kv_heads.
void validate(const TransformerConfig& model);

// The context-parallel cluster of one tensor-parallel rank: `gpus` with each node's devices
// grouped tensor_parallel at a time. A group of a node is one device; its network share is the
// node's interfaces over tensor_parallel (every tensor-parallel rank's plan runs at once), on
// min(nics, groups per node) interfaces; links inside a node are each GPU's own.
ClusterSpec tensor_parallel_groups(const ClusterSpec& gpus, std::int32_t tensor_parallel);

// What no datasheet fixes about the rest of a step.
struct StepRates {
  double dense_flops = 0;    // sustained matmul FLOP/s of one GPU
  double fixed_seconds = 0;  // per step whatever its tokens: optimizer, gradient synchronisation
  bool at_peak = false;      // fitted: the free fit wanted more than the peak, which it was held at
};

struct StepTime {
  double attention = 0;        // layers x (forward x (1 + recompute) + backward)
  double dense = 0;            // the dense FLOPs of the device's tokens on one GPU
  double tensor_parallel = 0;  // the sequence-parallel all-gathers and reduce-scatters
  double fixed = 0;
  double total() const { return attention + dense + tensor_parallel + fixed; }
};

// One step of one device of the context-parallel plan (a tensor-parallel group of `gpus`) that
// holds `tokens` tokens, whose attention takes attention_forward and attention_backward seconds
// per layer (the slowest device of the simulated plan). Collectives run inside a node over
// `gpus`' intra-node links.
StepTime step_time(const TransformerConfig& model, const StepRates& rates, const ClusterSpec& gpus,
                   double tokens, double attention_forward, double attention_backward);

// One device's share of one layer: the end of its attention Program in each simulated pass
// (DeviceTimeline::end) and the rest of the layer for the tokens it holds (projections, MLP,
// norms; forward and backward), in seconds.
struct DeviceLayer {
  double forward = 0;
  double backward = 0;
  double rest = 0;
};

// One layer's step where every device runs both its attention and the rest of the layer for its
// tokens, and the devices go from layer to layer together (data parallelism over them gathers
// each layer's parameters and reduces its gradients): per pass, the slowest device's attention
// plus its share of the rest, a third forward and two thirds backward (a dense layer's backward
// is twice its forward). At least the passes' own times; at most those plus the largest rest.
// Throws InvalidInput for no devices or a negative or non-finite time.
double lockstep_layer_seconds(std::span<const DeviceLayer> devices);
// The same layer's two passes apart: what each takes with its share of the rest (their sum is
// lockstep_layer_seconds). Devices that run apart from each other, in groups, go from layer to
// layer as one when each pass ends with the slowest group's: per pass, the most of the groups'.
struct LockstepPasses {
  double forward = 0;
  double backward = 0;
};
LockstepPasses lockstep_passes(std::span<const DeviceLayer> devices);

// A measured step and what the model knows of it, for fitting StepRates.
struct MeasuredStep {
  double seconds = 0;  // measured
  double tokens = 0;   // per device
  double attention_forward = 0;
  double attention_backward = 0;
};

// The StepRates whose step_time is nearest the measured seconds in least squares (linear in
// fixed_seconds and 1 / dense_flops), with dense_flops at most `peak_flops` (the GPU's peak: where
// the free fit wants more, or no positive rate at all, the rate is held at the peak, at_peak is
// set and the fixed time refitted) and fixed_seconds >= 0 (refitted through the origin where the
// free fit would make it negative). Throws InvalidInput if fewer than two steps are given, if
// their dense work does not vary, or if peak_flops is not positive.
StepRates fit_step_rates(const TransformerConfig& model, const ClusterSpec& gpus,
                         std::span<const MeasuredStep> steps, double peak_flops);

}  // namespace dcp::sim

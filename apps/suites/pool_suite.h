// SPDX-License-Identifier: Apache-2.0
// `dcp bench --suite pool`: data parallelism and context parallelism over a pool of devices,
// simulated per training micro-batch: dcp planning the whole pool as one group against fixed
// DP x CP groups with static strategies, Megatron-style dynamic CP (a power-of-two group per
// sample) and fixed DP x CP groups each planned by dcp.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/model/cluster.h"

#include "dcp/data/length_distribution.h"

#include "dcp/sim/step_model.h"

#include "apps/suites/megatron_schedulers.h"

namespace dcp::suites {

// A workload: its length distribution and the tokens one device may hold in a micro-batch (the
// memory bound every strategy keeps, Megatron's --max-seqlen-per-dp-cp-rank). A micro-batch is
// packed to the pool's devices times that many tokens; lengths above 8 times it (a node's
// group) are dropped, so that every layout of groups of 8 can hold every sample.
struct PoolWorkload {
  LengthDistributionKind dataset = LengthDistributionKind::kMegatronLogNormal;
  TokenCount device_tokens = 2048;
};
// megatron at 2048 tokens per device (Megatron's measured setting), ldc and longalign at 8192.
std::vector<PoolWorkload> default_pool_workloads();

struct PoolOptions {
  std::vector<ClusterSpec> clusters;  // each run at every pool size below
  std::vector<std::int32_t> pool_devices = {16, 64, 256};
  std::int32_t devices_per_node = 8;
  std::vector<PoolWorkload> workloads;
  std::int32_t batches = 2;      // micro-batches per (cluster, pool, workload)
  sim::TransformerConfig model;  // its attention shape is the plans' (bf16)
  std::uint64_t seed = 0;
  int threads = 1;
  // dcp's plans place tokens at this memory balance (device tokens <= (1 + eps) x the mean): a
  // step's dense work follows the tokens a device holds, which the default 0.2 leaves uneven.
  double dcp_eps_memory = 0.02;
};
// A Llama-3-8B-like decoder (32 layers, hidden 4096, 32 heads, 8 kv heads, FFN 14336, vocabulary
// 128256), tensor parallelism 1 and no recomputation.
sim::TransformerConfig pool_model();

// One layout's micro-batch: its simulated step over the whole pool, every layer's forward and
// backward pass ending when the slowest device has run its attention and the dense work of the
// tokens it holds (sim::lockstep_layer_seconds: data parallelism over the pool moves every device
// from layer to layer together); `fits` false when the layout cannot hold the micro-batch within
// the per-device token bound.
struct LayoutStep {
  double ms = 0;
  bool fits = true;
  std::string detail;  // the strategy, or what decided the layout
  TokenCount max_device_tokens = 0;
  // The share of the micro-batch's tokens it carries over to the next micro-batch (carry_over).
  double carried = 0;
  std::vector<sim::DeviceLayer> devices;  // one layer of each device that holds tokens
};

struct PoolRecord {
  std::string cluster;
  std::string dataset;
  std::int32_t devices = 0;
  std::int32_t batch = 0;
  std::int32_t sequences = 0;
  TokenCount tokens = 0;
  TokenCount device_tokens = 0;  // the per-device bound
  LayoutStep fixed4;             // (a) fixed CP 4, shares balanced by work, best static strategy
  // Megatron's workload at the GPU counts Megatron measured: the iteration it measured, for the
  // comparison with its measurement (pool_suite.cc, megatron_iteration): its DP-balanced CP4
  // baseline and its dynamic CP over ten iterations of their own sequences, their steps and
  // micro-batches summed.
  LayoutStep megatron_baseline;
  LayoutStep megatron_dynamic;
  std::int32_t megatron_baseline_micro_batches = 0;
  std::int32_t megatron_dynamic_micro_batches = 0;
  LayoutStep fixed8;        // (a) fixed CP 8
  LayoutStep dynamic;       // (b) Megatron-style dynamic CP
  LayoutStep dcp_groups;    // (c) fixed CP 8, each group planned by dcp
  LayoutStep pool;          // (d) dcp over the whole pool
  double pool_plan_ms = 0;  // planning (d) on one thread
  // The fastest of (a)-(c) that fits (null if none does), and its time (infinite then).
  const LayoutStep* best_baseline() const;
  double best_baseline_ms() const;
};

std::vector<PoolRecord> run_pool_suite(const PoolOptions& options, std::ostream& progress);
std::string pool_records_json(const std::vector<PoolRecord>& records);
std::string pool_markdown(const PoolOptions& options, const std::vector<PoolRecord>& records,
                          const std::string& command);

// --- The layouts' pieces, for tests -----------------------------------------------------------

// Megatron's dynamic CP group of a sample: the smallest power of two g with length <= g x
// device_tokens (1 at least).
std::int32_t dynamic_group_size(TokenCount length, TokenCount device_tokens);

// A sample's training FLOPs under `model`: the dense work of its tokens (forward and backward)
// and its causal pairs' attention, every layer.
double sample_flops(const sim::TransformerConfig& model, TokenCount length);

// The samples dealt to the devices / group fixed groups of (a) and (c), largest work first
// (sample_flops) to the least loaded group with room at the bound (group x device_tokens), or by
// tokens where that holds more; a sample longer than the bound but within the memory limit
// (1.2 x the bound) runs in a group of its own. What no group holds is left out (it carries over
// to the next micro-batch). Throws InvalidInput unless group divides devices and device_tokens is
// positive.
std::vector<std::vector<std::size_t>> fixed_group_shares(const sim::TransformerConfig& model,
                                                         const std::vector<TokenCount>& lengths,
                                                         std::int32_t devices, std::int32_t group,
                                                         TokenCount device_tokens);

// A Megatron-style dynamic CP layout of a micro-batch over `devices` devices: each sample in a
// group of dynamic_group_size devices, groups of one size sharing samples up to their capacity,
// opened while devices are free and filled longest first to the least loaded (sample_flops per
// device).
// Samples no group can take go to a further round (the suite carries them to the next
// micro-batch). Per round, each group's size and samples (indices into lengths).
std::vector<std::vector<DynamicGroup>> dynamic_layout(const std::vector<TokenCount>& lengths,
                                                      std::int32_t devices,
                                                      TokenCount device_tokens,
                                                      const sim::TransformerConfig& model);

}  // namespace dcp::suites

// SPDX-License-Identifier: Apache-2.0
// The pool suite: dcp over a whole pool of devices against fixed DP x CP groups, Megatron-style
// dynamic CP and dcp inside fixed groups, each micro-batch's step simulated.
#include "apps/suites/pool_suite.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <tuple>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/json_writer.h"
#include "dcp/core/timing.h"

#include "dcp/model/attention_kind.h"
#include "dcp/model/attention_shape.h"
#include "dcp/model/cluster.h"
#include "dcp/model/sequence_batch.h"
#include "dcp/model/tensor.h"

#include "dcp/data/batch_packing.h"
#include "dcp/data/length_distribution.h"

#include "dcp/plan_request.h"
#include "dcp/planner/baselines/static_plans.h"
#include "dcp/planner/model_plan_builder.h"
#include "dcp/planner/placement/hierarchical_placer.h"
#include "dcp/program/program.h"
#include "dcp/selection/plan_search.h"
#include "dcp/sim/model_simulation.h"
#include "dcp/sim/simulator.h"
#include "dcp/workload_builder.h"

#include "apps/suites/kinds_suite.h"
#include "apps/suites/reports.h"
#include "apps/suites/suite_jobs.h"

namespace dcp::suites {
namespace {

// Megatron's measured iteration speed-ups of dynamic CP over DP-balanced packing with CP 4
// (examples/dynamic_context_parallel), by GPU count.
const std::map<std::int32_t, double> kMegatronMeasured = {
    {4, 1.285}, {8, 1.412}, {16, 1.212}, {32, 1.375}, {64, 1.495}};

// A causal pair's forward and backward FLOPs over every layer: QK^T and PV forward (4 per head and
// head dimension), about 2.5 times that backward.
double pair_flops(const sim::TransformerConfig& model) {
  return 3.5 * 4.0 * static_cast<double>(model.heads) * static_cast<double>(model.head_dim()) *
         model.layers;
}

ClusterSpec group_cluster(const ClusterSpec& cluster, std::int32_t devices,
                          std::int32_t devices_per_node) {
  ClusterSpec group = cluster;
  group.shape.devices_per_node = std::min(devices, devices_per_node);
  group.shape.nodes = devices / group.shape.devices_per_node;
  return group;
}

AttentionShape shape_of(const sim::TransformerConfig& model) {
  AttentionShape shape;
  shape.q_heads = model.heads;
  shape.kv_heads = model.kv_heads;
  shape.head_dim = static_cast<std::int32_t>(model.head_dim());
  return shape;
}

// The step of a layout's devices (LayoutStep::devices): every layer in lockstep over them.
void price(const PoolOptions& options, LayoutStep& layout) {
  layout.ms = layout.devices.empty()
                  ? 0
                  : options.model.layers * sim::lockstep_layer_seconds(layout.devices) * 1e3;
}

// Adds a group's devices to a layout over the pool.
void add_group(LayoutStep& layout, const LayoutStep& group) {
  layout.devices.insert(layout.devices.end(), group.devices.begin(), group.devices.end());
  layout.max_device_tokens = std::max(layout.max_device_tokens, group.max_device_tokens);
}

// One group's plan of `lengths` with `strategy` on `cluster`: its devices and its step alone.
LayoutStep group_step(const PoolOptions& options, const ClusterSpec& cluster,
                      const std::vector<TokenCount>& lengths, Strategy strategy,
                      double* plan_ms = nullptr, TokenCount max_device_tokens = 0) {
  PlanRequest request;
  request.shape = shape_of(options.model);
  request.lengths = lengths;
  const SequenceBatch batch(lengths);
  request.kinds = {{std::string(kDefaultKindName), 1, build_masks(MaskSource{}, batch)}};
  request.plan.strategy = strategy;
  request.plan.cluster = cluster;
  request.plan.seed = options.seed;
  request.plan.placement.eps_memory = options.dcp_eps_memory;
  request.plan.placement.max_device_tokens = max_device_tokens;
  // The rest of each layer, as the step below prices it: dcp places and chooses by the step.
  request.plan.token_flops = options.model.dense_step_flops_per_token() / options.model.layers;
  // Over more than a node, dcp's static candidates run in data-parallel groups of a node, as the
  // fixed layouts do: the pool's search then holds theirs.
  if (cluster.shape.nodes > 1) request.plan.statics.data_parallel = cluster.shape.nodes;
  sweep_block_sizes_when_automatic(request.plan, true);
  const auto start = Clock::now();
  const BuiltModelPlan built = plan_request(request);
  if (plan_ms != nullptr) *plan_ms = ms_since(start);
  const sim::ModelSimulation simulated = sim::simulate(built.plan, cluster);
  LayoutStep step;
  step.devices = device_layers(built.kinds.front(), simulated.kinds.front().passes, request.plan);
  step.max_device_tokens =
      busiest_device_tokens(built.kinds.front().workload, built.kinds.front().placement);
  price(options, step);
  step.detail = built.kept;
  // dcp's own plans are kept as "dcp" (or "dcp (block N)"), a static candidate by its name.
  return step;
}

// The fastest static strategy's step on a group (none that runs: ms infinite).
LayoutStep best_static_step(const PoolOptions& options, const ClusterSpec& cluster,
                            const std::vector<TokenCount>& lengths) {
  LayoutStep best;
  best.ms = std::numeric_limits<double>::infinity();
  for (const Strategy strategy : kStaticStrategies) {
    try {
      LayoutStep step = group_step(options, cluster, lengths, strategy);
      if (step.ms < best.ms) {
        best = step;
        best.detail = std::string(to_string(strategy));
      }
    } catch (const InvalidInput&) {
      // The strategy cannot run on this group (too few heads for hybrid, say).
    }
  }
  return best;
}

std::vector<TokenCount> lengths_of(const std::vector<TokenCount>& all,
                                   const std::vector<std::size_t>& picked) {
  std::vector<TokenCount> out;
  for (const std::size_t i : picked) out.push_back(all[i]);
  return out;
}

TokenCount total_tokens(const std::vector<TokenCount>& lengths) {
  TokenCount total = 0;
  for (const TokenCount n : lengths) total += n;
  return total;
}

// The tokens of the samples `shares` hold.
TokenCount held_tokens(const std::vector<TokenCount>& lengths,
                       const std::vector<std::vector<std::size_t>>& shares) {
  TokenCount held = 0;
  for (const std::vector<std::size_t>& share : shares) {
    for (const std::size_t i : share) held += lengths[i];
  }
  return held;
}

// A layout that holds `held` of a micro-batch's `total` tokens carries the rest over to the next
// micro-batch (as Megatron's scheduler does): it costs its time per token held.
void carry_over(LayoutStep& layout, TokenCount held, TokenCount total) {
  layout.ms *= static_cast<double>(total) / static_cast<double>(held);
  layout.carried = 1 - static_cast<double>(held) / static_cast<double>(total);
  if (held < total) {
    layout.detail += "; " + format_percent(layout.carried) + " of the tokens carried over";
  }
}

// Fixed groups of `group` devices, the samples dealt by fixed_group_shares; each group's step
// from `plan`, the layout's the slowest group's; what no group holds carries over to the next
// micro-batch, as (b)'s does: the time per token held.
template <typename PlanGroup>
LayoutStep fixed_groups(const PoolOptions& options, const ClusterSpec& cluster,
                        const std::vector<TokenCount>& lengths, std::int32_t devices,
                        std::int32_t group, TokenCount device_tokens, PlanGroup plan) {
  LayoutStep layout;
  const std::vector<std::vector<std::size_t>> shares =
      fixed_group_shares(options.model, lengths, devices, group, device_tokens);
  const TokenCount held = held_tokens(lengths, shares);
  const TokenCount total = total_tokens(lengths);
  if (held == 0) {
    layout.fits = false;
    layout.detail = "no sample fits a group";
    return layout;
  }
  const ClusterSpec group_spec = group_cluster(cluster, group, options.devices_per_node);
  std::map<std::string, int> used;
  for (const std::vector<std::size_t>& share : shares) {
    if (share.empty()) continue;
    const LayoutStep step = plan(group_spec, lengths_of(lengths, share));
    add_group(layout, step);
    ++used[step.detail];
  }
  price(options, layout);
  for (const auto& [name, count] : used) {
    layout.detail += (layout.detail.empty() ? "" : ", ") + name + " x" + std::to_string(count);
  }
  carry_over(layout, held, total);
  return layout;
}

LayoutStep dynamic_step(const PoolOptions& options, const ClusterSpec& cluster,
                        const std::vector<TokenCount>& lengths, std::int32_t devices,
                        TokenCount device_tokens) {
  LayoutStep layout;
  // The first round runs; what it could not hold carries over to the next micro-batch.
  const std::vector<DynamicGroup> round =
      dynamic_layout(lengths, devices, device_tokens, options.model).front();
  std::map<std::int32_t, int> sizes;
  TokenCount held = 0;
  for (const DynamicGroup& group : round) {
    for (const std::size_t i : group.samples) held += lengths[i];
    const ClusterSpec spec = group_cluster(cluster, group.devices, options.devices_per_node);
    // One device moves nothing: its plan is any strategy's; TransformerEngine's a2a+p2p inside
    // larger groups, as Megatron runs it.
    const LayoutStep step = group_step(options, spec, lengths_of(lengths, group.samples),
                                       group.devices == 1 ? Strategy::kDcpPure : Strategy::kTe);
    add_group(layout, step);
    ++sizes[group.devices];
  }
  price(options, layout);
  for (const auto& [size, count] : sizes) {
    layout.detail += (layout.detail.empty() ? "" : ", ") + std::to_string(count) + " x CP" +
                     std::to_string(size);
  }
  carry_over(layout, held, total_tokens(lengths));
  return layout;
}

// Megatron's measured iteration (examples/dynamic_context_parallel, benchmark_dcp.sh): each of
// devices / 4 data-parallel ranks loads 8 sequences, padded to 2 x CP tokens; the baseline packs
// them with dp_balanced_micro_batches into fixed CP4 groups, dynamic CP with packing_aware_rounds
// into groups of its sizes; every micro-batch runs all its groups (TransformerEngine's p2p ring
// over 2 x CP chunks per sequence, Megatron's default --cp-comm-type, which zigzag is; one device
// moves nothing). The baseline's iteration is its slowest data-parallel rank's micro-batches,
// dynamic CP's the sum of its micro-batches' steps over the pool.
struct MegatronIteration {
  LayoutStep baseline;
  LayoutStep dynamic;
  std::int32_t baseline_micro_batches = 0;
  std::int32_t dynamic_micro_batches = 0;
};

constexpr std::int32_t kMegatronCp = 4;
constexpr std::int32_t kMegatronSequencesPerRank = 8;
// Iterations per micro-batch of the pool suite's megatron cells: with its two micro-batches,
// the 20 that Megatron's measurement averages (30 less 10 of warm-up).
constexpr std::int32_t kMegatronIterationsPerBatch = 10;

MegatronIteration megatron_iteration(const PoolOptions& options, const ClusterSpec& cluster,
                                     std::int32_t devices, TokenCount device_tokens,
                                     std::int32_t iteration_index) {
  const std::int32_t dp = devices / kMegatronCp;
  std::vector<TokenCount> lengths =
      sample_lengths(LengthDistributionKind::kMegatronLogNormal,
                     static_cast<std::size_t>(dp * kMegatronSequencesPerRank),
                     options.seed * std::uint64_t{1000003} +
                         std::uint64_t{7919} * static_cast<std::uint64_t>(iteration_index + 1));
  for (TokenCount& n : lengths) n = padded(n, 2 * kMegatronCp);
  const auto step_of = [&](std::int32_t group, const std::vector<std::size_t>& samples) {
    const ClusterSpec spec = group_cluster(cluster, group, options.devices_per_node);
    return group_step(options, spec, lengths_of(lengths, samples),
                      group == 1 ? Strategy::kDcpPure : Strategy::kZigzag);
  };
  MegatronIteration iteration;
  const auto micro_batches = dp_balanced_micro_batches(lengths, kMegatronCp, dp, device_tokens);
  iteration.baseline_micro_batches = static_cast<std::int32_t>(micro_batches.size());
  // A DP rank's CP4 group runs its own micro-batches; the ranks meet at the gradients'
  // all-reduce, so the slowest rank's sum is the iteration's.
  std::vector<double> rank_ms(static_cast<std::size_t>(dp), 0);
  for (const auto& micro_batch : micro_batches) {
    for (std::size_t rank = 0; rank < micro_batch.size(); ++rank) {
      rank_ms[rank] += step_of(kMegatronCp, micro_batch[rank]).ms;
    }
  }
  iteration.baseline.ms = *std::max_element(rank_ms.begin(), rank_ms.end());
  // Dynamic CP's groups change from micro-batch to micro-batch, so every device finishes one
  // before the next: the micro-batches' steps over the whole pool, summed.
  const auto rounds = packing_aware_rounds(lengths, devices, device_tokens);
  iteration.dynamic_micro_batches = static_cast<std::int32_t>(rounds.size());
  for (const std::vector<DynamicGroup>& round : rounds) {
    LayoutStep step;
    for (const DynamicGroup& group : round) add_group(step, step_of(group.devices, group.samples));
    price(options, step);
    iteration.dynamic.ms += step.ms;
  }
  return iteration;
}

void check_memory(LayoutStep& step, TokenCount device_tokens) {
  if (static_cast<double>(step.max_device_tokens) >
      static_cast<double>(device_tokens) * (1 + kDefaultEpsMemory)) {
    step.fits = false;
  }
}

std::string ms_or_na(const LayoutStep& step) {
  return step.fits ? format_fixed(step.ms, 1) : std::string("n/a");
}

}  // namespace

std::vector<std::vector<std::size_t>> fixed_group_shares(const sim::TransformerConfig& model,
                                                         const std::vector<TokenCount>& lengths,
                                                         std::int32_t devices, std::int32_t group,
                                                         TokenCount device_tokens) {
  if (group < 1 || devices < group || devices % group != 0 || device_tokens < 1) {
    throw InvalidInput("fixed groups of " + std::to_string(group) + " over " +
                       std::to_string(devices) + " devices at " + std::to_string(device_tokens) +
                       " tokens per device");
  }
  const std::int32_t groups = devices / group;
  const TokenCount capacity = static_cast<TokenCount>(group) * device_tokens;
  const TokenCount limit = static_cast<TokenCount>(group) *
                           static_cast<TokenCount>(std::floor((1 + kDefaultEpsMemory) *
                                                              static_cast<double>(device_tokens)));
  std::vector<double> works, tokens;
  for (const TokenCount n : lengths) {
    works.push_back(sample_flops(model, n));
    tokens.push_back(static_cast<double>(n));
  }
  // A sample longer than a group holds at the bound, but within the memory limit, runs in a group
  // of its own (no later micro-batch would hold it either); the rest are dealt to the others.
  std::vector<std::vector<std::size_t>> alone;
  std::vector<std::size_t> rest;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const bool oversize = lengths[i] > capacity && lengths[i] <= limit;
    if (oversize && static_cast<std::int32_t>(alone.size()) < groups) {
      alone.push_back({i});
    } else {
      rest.push_back(i);
    }
  }
  const auto deal_rest = [&](const std::vector<double>& weights) {
    std::vector<double> rest_weights;
    std::vector<TokenCount> rest_lengths;
    for (const std::size_t i : rest) {
      rest_weights.push_back(weights[i]);
      rest_lengths.push_back(lengths[i]);
    }
    std::vector<std::vector<std::size_t>> dealt = alone;
    const std::int32_t others = groups - static_cast<std::int32_t>(alone.size());
    if (others > 0 && !rest.empty()) {
      for (std::vector<std::size_t> share :
           deal_by_work(rest_weights, rest_lengths, others, capacity)) {
        for (std::size_t& i : share) i = rest[i];
        dealt.push_back(std::move(share));
      }
    }
    return dealt;
  };
  // By work; where that leaves samples out, by tokens if it holds more.
  std::vector<std::vector<std::size_t>> shares = deal_rest(works);
  const TokenCount held = held_tokens(lengths, shares);
  if (held < total_tokens(lengths)) {
    std::vector<std::vector<std::size_t>> by_tokens = deal_rest(tokens);
    if (held_tokens(lengths, by_tokens) > held) shares = std::move(by_tokens);
  }
  return shares;
}

std::vector<PoolWorkload> default_pool_workloads() {
  return {{LengthDistributionKind::kMegatronLogNormal, 2048},
          {LengthDistributionKind::kLongDataCollections, 8192},
          {LengthDistributionKind::kLongAlign, 8192}};
}

sim::TransformerConfig pool_model() {
  sim::TransformerConfig model;
  model.layers = 32;
  model.hidden = 4096;
  model.heads = 32;
  model.kv_heads = 8;
  model.ffn = 14336;
  model.vocab = 128256;
  model.tensor_parallel = 1;
  model.full_recompute = false;
  return model;
}

const LayoutStep* PoolRecord::best_baseline() const {
  const LayoutStep* best = nullptr;
  for (const LayoutStep* s : {&fixed4, &fixed8, &dynamic, &dcp_groups}) {
    if (s->fits && (best == nullptr || s->ms < best->ms)) best = s;
  }
  return best;
}

double PoolRecord::best_baseline_ms() const {
  const LayoutStep* best = best_baseline();
  return best != nullptr ? best->ms : std::numeric_limits<double>::infinity();
}

std::int32_t dynamic_group_size(TokenCount length, TokenCount device_tokens) {
  if (length < 1 || device_tokens < 1) {
    throw InvalidInput("a dynamic CP group needs a positive length and device bound, got " +
                       std::to_string(length) + " and " + std::to_string(device_tokens));
  }
  std::int32_t g = 1;
  while (static_cast<TokenCount>(g) * device_tokens < length) g *= 2;
  return g;
}

double sample_flops(const sim::TransformerConfig& model, TokenCount length) {
  const auto n = static_cast<double>(length);
  return 3 * model.dense_forward_flops_per_token() * n + pair_flops(model) * n * (n + 1) / 2;
}

std::vector<std::vector<DynamicGroup>> dynamic_layout(const std::vector<TokenCount>& lengths,
                                                      std::int32_t devices,
                                                      TokenCount device_tokens,
                                                      const sim::TransformerConfig& model) {
  std::vector<std::size_t> order(lengths.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
    if (dynamic_group_size(lengths[i], device_tokens) > devices) {
      throw InvalidInput("sample " + std::to_string(i) + " of " + std::to_string(lengths[i]) +
                         " tokens needs more than the pool's " + std::to_string(devices) +
                         " devices at " + std::to_string(device_tokens) + " tokens each");
    }
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return lengths[a] > lengths[b]; });
  struct Open {
    DynamicGroup group;
    TokenCount tokens = 0;
    double work = 0;
  };
  std::vector<std::vector<DynamicGroup>> rounds;
  std::vector<std::size_t> pending = order;
  while (!pending.empty()) {
    std::vector<Open> open;
    std::int32_t free_devices = devices;
    std::vector<std::size_t> deferred;
    for (const std::size_t i : pending) {
      const std::int32_t g = dynamic_group_size(lengths[i], device_tokens);
      const TokenCount capacity = static_cast<TokenCount>(g) * device_tokens;
      // The least loaded (per device) open group of this size with room, or a new one while
      // devices are free, whichever leaves the lower load per device.
      Open* best = nullptr;
      for (Open& o : open) {
        if (o.group.devices != g || o.tokens + lengths[i] > capacity) continue;
        if (best == nullptr || o.work < best->work) best = &o;
      }
      if (free_devices >= g && (best == nullptr || best->work > 0)) {
        open.push_back({{g, {}}, 0, 0});
        free_devices -= g;
        best = &open.back();
      }
      if (best == nullptr) {
        deferred.push_back(i);
        continue;
      }
      best->group.samples.push_back(i);
      best->tokens += lengths[i];
      best->work += sample_flops(model, lengths[i]) / g;
    }
    std::vector<DynamicGroup> round;
    for (Open& o : open) {
      std::sort(o.group.samples.begin(), o.group.samples.end());
      round.push_back(std::move(o.group));
    }
    rounds.push_back(std::move(round));
    pending = std::move(deferred);
  }
  return rounds;
}

std::vector<PoolRecord> run_pool_suite(const PoolOptions& options, std::ostream& progress) {
  struct Job {
    std::size_t cluster;
    std::int32_t devices;
    std::size_t workload;
    std::int32_t batch;
    std::vector<TokenCount> lengths;
  };
  std::vector<Job> jobs;
  for (std::size_t c = 0; c < options.clusters.size(); ++c) {
    for (const std::int32_t devices : options.pool_devices) {
      if (devices < 1 || devices % options.devices_per_node != 0) {
        throw InvalidInput("a pool of " + std::to_string(devices) +
                           " devices is not whole nodes of " +
                           std::to_string(options.devices_per_node));
      }
      for (std::size_t w = 0; w < options.workloads.size(); ++w) {
        const PoolWorkload& workload = options.workloads[w];
        PackingOptions packing;
        packing.tokens_per_batch = static_cast<TokenCount>(devices) * workload.device_tokens;
        packing.max_length =
            std::min(packing.tokens_per_batch,
                     static_cast<TokenCount>(options.devices_per_node) * workload.device_tokens);
        // Enough lengths for the batches at the distribution's smallest mean.
        const std::size_t count = static_cast<std::size_t>(
            packing.tokens_per_batch / std::max<TokenCount>(support(workload.dataset).min, 64) *
            (options.batches + 1));
        const std::vector<TokenCount> lengths =
            sample_lengths(workload.dataset, std::min<std::size_t>(count, 2000000), options.seed);
        const auto packed = pack_batches(lengths, packing, options.seed);
        if (static_cast<std::int32_t>(packed.size()) < options.batches) {
          throw Error("the pool suite sampled too few batches for " +
                      std::string(to_string(workload.dataset)));
        }
        for (std::int32_t b = 0; b < options.batches; ++b) {
          jobs.push_back({c, devices, w, b, packed[static_cast<std::size_t>(b)]});
        }
      }
    }
  }
  std::vector<PoolRecord> records(jobs.size());
  run_jobs(jobs.size(), options.threads, progress, [&](std::size_t j) {
    const Job& job = jobs[j];
    const PoolWorkload& workload = options.workloads[job.workload];
    const ClusterSpec pool =
        group_cluster(options.clusters[job.cluster], job.devices, options.devices_per_node);
    PoolRecord& r = records[j];
    r.cluster = pool.name;
    r.dataset = std::string(to_string(workload.dataset));
    r.devices = job.devices;
    r.batch = job.batch;
    r.sequences = static_cast<std::int32_t>(job.lengths.size());
    for (const TokenCount n : job.lengths) r.tokens += n;
    r.device_tokens = workload.device_tokens;
    const auto statics = [&](const ClusterSpec& spec, const std::vector<TokenCount>& lengths) {
      return best_static_step(options, spec, lengths);
    };
    const auto dcp_group = [&](const ClusterSpec& spec, const std::vector<TokenCount>& lengths) {
      return group_step(options, spec, lengths, Strategy::kDcp);
    };
    r.fixed4 =
        fixed_groups(options, pool, job.lengths, job.devices, 4, workload.device_tokens, statics);
    r.fixed8 = fixed_groups(options, pool, job.lengths, job.devices, std::min(8, job.devices),
                            workload.device_tokens, statics);
    r.dynamic = dynamic_step(options, pool, job.lengths, job.devices, workload.device_tokens);
    if (workload.dataset == LengthDistributionKind::kMegatronLogNormal &&
        kMegatronMeasured.contains(job.devices)) {
      for (std::int32_t i = 0; i < kMegatronIterationsPerBatch; ++i) {
        const MegatronIteration iteration =
            megatron_iteration(options, pool, job.devices, workload.device_tokens,
                               job.batch * kMegatronIterationsPerBatch + i);
        r.megatron_baseline.ms += iteration.baseline.ms;
        r.megatron_dynamic.ms += iteration.dynamic.ms;
        r.megatron_baseline_micro_batches += iteration.baseline_micro_batches;
        r.megatron_dynamic_micro_batches += iteration.dynamic_micro_batches;
      }
    }
    r.dcp_groups = fixed_groups(options, pool, job.lengths, job.devices, std::min(8, job.devices),
                                workload.device_tokens, dcp_group);
    // The pool's devices each hold at most what a fixed group's do: the per-device budget its
    // deal fills, and dcp's memory balance on top within a group.
    const auto device_limit = static_cast<TokenCount>(
        std::floor((1 + options.dcp_eps_memory) * static_cast<double>(workload.device_tokens)));
    r.pool = group_step(options, pool, job.lengths, Strategy::kDcp, &r.pool_plan_ms, device_limit);
    for (LayoutStep* step : {&r.fixed4, &r.fixed8, &r.dynamic, &r.dcp_groups, &r.pool}) {
      check_memory(*step, workload.device_tokens);
    }
    char line[320];
    std::snprintf(line, sizeof line,
                  "%s %d devices %s batch %d: pool %s ms, CP4 %s, CP8 %s, dynamic %s, dcp in CP8 "
                  "%s; pool plan %.0f ms",
                  r.cluster.c_str(), r.devices, r.dataset.c_str(), r.batch,
                  ms_or_na(r.pool).c_str(), ms_or_na(r.fixed4).c_str(), ms_or_na(r.fixed8).c_str(),
                  ms_or_na(r.dynamic).c_str(), ms_or_na(r.dcp_groups).c_str(), r.pool_plan_ms);
    return std::string(line);
  });
  return records;
}

std::string pool_records_json(const std::vector<PoolRecord>& records) {
  JsonWriter json;
  json.begin_array();
  for (const PoolRecord& r : records) {
    json.begin_object();
    json.field("cluster", std::string_view(r.cluster));
    json.field("dataset", std::string_view(r.dataset));
    json.field("devices", std::int64_t{r.devices});
    json.field("batch", std::int64_t{r.batch});
    json.field("sequences", std::int64_t{r.sequences});
    json.field("tokens", std::int64_t{r.tokens});
    json.field("device_tokens", std::int64_t{r.device_tokens});
    const std::pair<const char*, const LayoutStep*> layouts[] = {
        {"fixed_cp4", &r.fixed4},
        {"fixed_cp8", &r.fixed8},
        {"dynamic_cp", &r.dynamic},
        {"dcp_in_cp8", &r.dcp_groups},
        {"dcp_pool", &r.pool},
        {"megatron_baseline", &r.megatron_baseline},
        {"megatron_dynamic", &r.megatron_dynamic}};
    for (const auto& [name, step] : layouts) {
      const bool megatron = step == &r.megatron_baseline || step == &r.megatron_dynamic;
      if (megatron && r.megatron_dynamic_micro_batches == 0) continue;
      json.key(name);
      json.begin_object();
      json.field("ms", step->fits ? step->ms : 0.0);
      json.field("fits", step->fits);
      json.field("detail", std::string_view(step->detail));
      json.field("max_device_tokens", std::int64_t{step->max_device_tokens});
      json.end_object();
    }
    json.field("pool_plan_ms", r.pool_plan_ms);
    json.end_object();
  }
  json.end_array();
  return json.str() + "\n";
}

std::string pool_markdown(const PoolOptions& options, const std::vector<PoolRecord>& records,
                          const std::string& command) {
  std::string md = "# Data and context parallelism over a pool of devices (simulated)\n\n";
  md += "Reproduce with:\n\n```sh\n" + command + "\n```\n\n";
  const sim::TransformerConfig& m = options.model;
  md += "Every figure is simulated: one micro-batch's training step over the whole pool, " +
        std::to_string(m.layers) +
        " layers, each device running its attention (forward and backward, dcp's simulator) and "
        "the dense work of the tokens it holds (" +
        format_fixed(m.dense_forward_flops_per_token() * 3 / 1e9, 1) +
        " GFLOP per token, forward and backward, at the cluster's attention forward rate); data "
        "parallelism over the pool moves every device from layer to layer together, so each "
        "layer's forward and backward pass ends with its slowest device (a third of the dense work "
        "forward, two thirds backward). "
        "Model: " +
        std::to_string(m.layers) + " layers, hidden " + std::to_string(m.hidden) + ", " +
        std::to_string(m.heads) + "/" + std::to_string(m.kv_heads) + " heads, FFN " +
        std::to_string(m.ffn) +
        ", bf16, no recomputation; causal masks. A micro-batch is packed to the pool's devices "
        "times the per-device token bound; no layout may put more than 1.2 x the bound on a "
        "device (n/a where it must). " +
        std::to_string(options.batches) + " micro-batches per cell.\n\n";
  md +=
      "- **CP4, CP8** (a): fixed groups of 4 or 8 devices, the samples dealt to them largest "
      "work first (the sample's FLOPs: dense per token, attention per causal pair) to the least "
      "loaded group with room (by tokens where that holds more; what no group holds carries over "
      "to the next micro-batch, as for (b); a sample longer than a group holds at the bound but "
      "within the 1.2 x limit runs in a group of its own), each group run by the fastest "
      "static strategy (ring, zigzag, ulysses, hybrid, te, loongtrain) under the simulator.\n"
      "- **dynamic** (b): Megatron-style dynamic CP: each sample in a group of the smallest power "
      "of two devices that holds it at the bound, groups of one size sharing samples, opened "
      "while devices are free, largest work first to the least loaded group; TransformerEngine's "
      "a2a+p2p inside a group; samples that find no devices carry over to the next micro-batch, "
      "so its time is the first round's per token held, times the micro-batch's tokens.\n"
      "- **dcp in CP8** (c): the groups of (a) at 8 devices, each planned by dcp.\n"
      "- **dcp pool** (d): dcp planning the whole micro-batch over every device (nodes, then "
      "devices), its static candidates in data-parallel groups of a node, its node groups each "
      "running dcp's plan or a static strategy, each device holding at most (1 + eps) x the bound "
      "(`max_device_tokens`), the most a device of (c) can hold.\n\n"
      "dcp's plans, (c) and (d), place tokens at a memory balance of " +
      format_fixed(options.dcp_eps_memory, 2) +
      " (device tokens at most (1 + eps) x the mean, against the default 0.2): the rest of a "
      "layer costs per token, so the busiest device's tokens set most of the step.\n\n";
  md +=
      "| cluster | devices | dataset | bound | CP4 ms | CP8 ms | dynamic ms | dcp in CP8 ms | "
      "dcp pool ms | pool / best of (a)-(c) (median, min) | pool / dynamic (median) | "
      "dynamic / CP4 (median) | pool planning ms (median) |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::map<std::tuple<std::string, std::int32_t, std::string>, std::vector<const PoolRecord*>>
      cells;
  std::vector<std::tuple<std::string, std::int32_t, std::string>> order;
  for (const PoolRecord& r : records) {
    const auto key = std::make_tuple(r.cluster, r.devices, r.dataset);
    if (cells[key].empty()) order.push_back(key);
    cells[key].push_back(&r);
  }
  const auto median_ms = [](const std::vector<const PoolRecord*>& rs, auto member) {
    std::vector<double> v;
    for (const PoolRecord* r : rs) {
      if ((r->*member).fits) v.push_back((r->*member).ms);
    }
    return v.size() == rs.size() ? format_fixed(median_of(v), 1) : std::string("n/a");
  };
  bool every_batch = true;
  // Micro-batches where the pool is slower than a fixed layout, those of them where that layout
  // carries tokens over, and the pool's least ratio to it.
  std::int32_t behind = 0;
  std::int32_t behind_carrying = 0;
  double least = std::numeric_limits<double>::infinity();
  std::map<std::string, std::vector<double>> over_dynamic;  // per dataset
  std::string sanity;
  for (const auto& key : order) {
    const std::vector<const PoolRecord*>& rs = cells[key];
    std::vector<double> best_ratio, dynamic_ratio, megatron_ratio, plan;
    std::pair<double, double> iteration_ms{0, 0};  // Megatron's baseline and dynamic, summed
    for (const PoolRecord* r : rs) {
      const LayoutStep* fastest = r->best_baseline();
      const double best =
          fastest != nullptr ? fastest->ms : std::numeric_limits<double>::infinity();
      best_ratio.push_back(r->pool.fits ? best / r->pool.ms : 0);
      if (!r->pool.fits || r->pool.ms > best * (1 + 1e-9)) {
        every_batch = false;
        ++behind;
        if (fastest != nullptr && fastest->carried > 0) ++behind_carrying;
        if (r->pool.fits) least = std::min(least, best / r->pool.ms);
      }
      if (r->dynamic.fits && r->pool.fits) dynamic_ratio.push_back(r->dynamic.ms / r->pool.ms);
      if (r->dynamic.fits && r->fixed4.fits) megatron_ratio.push_back(r->fixed4.ms / r->dynamic.ms);
      if (r->megatron_dynamic_micro_batches > 0) {
        iteration_ms.first += r->megatron_baseline.ms;
        iteration_ms.second += r->megatron_dynamic.ms;
      }
      plan.push_back(r->pool_plan_ms);
    }
    over_dynamic[std::get<2>(key)].insert(over_dynamic[std::get<2>(key)].end(),
                                          dynamic_ratio.begin(), dynamic_ratio.end());
    const auto med = [](const std::vector<double>& v) {
      return v.empty() ? std::string("n/a") : format_fixed(median_of(v), 2);
    };
    md += "| " + std::get<0>(key) + " | " + std::to_string(std::get<1>(key)) + " | " +
          std::get<2>(key) + " | " + std::to_string(rs.front()->device_tokens) + " | " +
          median_ms(rs, &PoolRecord::fixed4) + " | " + median_ms(rs, &PoolRecord::fixed8) + " | " +
          median_ms(rs, &PoolRecord::dynamic) + " | " + median_ms(rs, &PoolRecord::dcp_groups) +
          " | " + median_ms(rs, &PoolRecord::pool) + " | " + med(best_ratio) + ", " +
          format_fixed(*std::min_element(best_ratio.begin(), best_ratio.end()), 2) + " | " +
          med(dynamic_ratio) + " | " + med(megatron_ratio) + " | " +
          format_fixed(median_of(plan), 0) + " |\n";
    const auto measured = kMegatronMeasured.find(std::get<1>(key));
    if (std::get<2>(key) == "megatron" && measured != kMegatronMeasured.end() &&
        !megatron_ratio.empty()) {
      const auto against = [&](double ours) {
        const double off = ours / measured->second - 1;
        return format_fixed(ours, 2) + " against " + format_fixed(measured->second, 3) +
               " measured (" + format_percent(off) + ")" +
               (std::abs(off) <= 0.15 ? ", within 15 %" : ", **beyond 15 %**");
      };
      sanity += "- " + std::get<0>(key) + ", " + std::to_string(std::get<1>(key)) + " GPUs: ";
      if (iteration_ms.second > 0) {
        sanity += "Megatron's iteration, dynamic CP over its DP-balanced CP4, simulated " +
                  against(iteration_ms.first / iteration_ms.second) + "; ";
      }
      sanity +=
          "this suite's layouts, (b) over (a)'s CP4, " + format_fixed(median_of(megatron_ratio), 2);
      sanity += "\n";
    }
  }
  md += "\n## Targets\n\n";
  md += std::string("- dcp pool at least the best of (a)-(c) on every micro-batch: ") +
        (every_batch
             ? std::string("met")
             : "**missed** (behind on " + std::to_string(behind) + " of " +
                   std::to_string(records.size()) + ", at least " + format_fixed(least, 3) +
                   " of the best; on " + std::to_string(behind_carrying) +
                   " of them the faster layout carries tokens over to the next micro-batch)") +
        "\n";
  for (const auto& [dataset, ratios] : over_dynamic) {
    if (ratios.empty()) continue;
    const double median = median_of(ratios);
    md += "- " + dataset + ": dcp pool over dynamic CP, median " + format_fixed(median, 2) +
          (median >= 1.2 ? " (met: at least 1.2)" : " (**missed**: below 1.2)") + "\n";
  }
  if (!sanity.empty()) {
    md +=
        "\nThe model against Megatron's measured iteration speed-ups of dynamic CP over "
        "DP-balanced packing with CP 4 (examples/dynamic_context_parallel: log-normal lengths, "
        "2048 tokens per GPU, TP 1). Megatron's iteration, simulated: each of the GPUs / 4 "
        "data-parallel ranks loads 8 sequences (padded to 8 tokens); the baseline packs them in "
        "arrival order, next-fit, into CP4 bins of 4 x 2048 tokens dealt round-robin to the "
        "data-parallel ranks (its DpBalancedScheduler, which balances nothing), each rank's CP4 "
        "group running its micro-batches until the gradients' all-reduce (the slowest rank's sum); "
        "dynamic CP into its packing-aware groups (DefaultDynamicCPScheduler), regrouped every "
        "micro-batch (the micro-batches' steps over the pool, summed); both run "
        "TransformerEngine's p2p ring (zigzag chunks, Megatron's default); the ratio of their "
        "mean over " +
        std::to_string(kMegatronIterationsPerBatch * options.batches) +
        " iterations. Beside it, the ratio of this suite's own layouts, whose fixed CP4 is "
        "dealt by work, a far stronger baseline:\n\n" +
        sanity;
  }
  return md;
}

}  // namespace dcp::suites

// SPDX-License-Identifier: Apache-2.0
// The end-to-end estimate: the paper's measured iteration times, and the step model's estimate of
// the same runs with attention from the simulator.
#include "apps/suites/e2e_suite.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>
#include <mutex>
#include <tuple>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/json_writer.h"
#include "dcp/core/thread_pool.h"
#include "dcp/core/timing.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/cluster.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/sequence_batch.h"
#include "dcp/model/workload.h"

#include "dcp/data/batch_packing.h"
#include "dcp/data/length_distribution.h"

#include "dcp/planner/baselines/static_plans.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/selection/plan_search.h"
#include "dcp/sim/cost_model.h"
#include "dcp/sim/model_simulation.h"
#include "dcp/sim/simulator.h"
#include "dcp/workload_builder.h"

#include "apps/suites/reports.h"
#include "apps/suites/suite_jobs.h"

namespace dcp::suites {
namespace {

// Seconds per iteration, masks in the order causal, lambda, causal_blockwise, shared_question.
// Source: the reference system's shipped end-to-end figures (docs/figures/reference in its
// artifact), read from the bar heights; block sizes from its best configurations
// (scripts/artifact_evaluation/best_configs.json).
struct E2eRow {
  const char* dataset;
  TokenCount max_seq_len;
  std::array<double, 4> mlm;
  std::array<double, 4> dcp;
};
constexpr const char* kMasks[] = {"causal", "lambda", "causal_blockwise", "shared_question"};
constexpr E2eRow kE2eRows[] = {
    {"longalign", 16384, {1.320, 1.372, 1.372, 1.377}, {1.297, 1.241, 1.182, 1.226}},
    {"longalign", 32768, {1.438, 1.498, 1.494, 1.495}, {1.387, 1.233, 1.265, 1.287}},
    {"longalign", 65536, {1.860, 1.872, 1.874, 1.878}, {1.962, 1.418, 1.491, 1.820}},
    {"longalign", 131072, {2.790, 2.799, 2.801, 2.819}, {2.830, 1.915, 2.056, 2.446}},
    {"ldc", 16384, {1.319, 1.392, 1.391, 1.390}, {1.252, 1.210, 1.165, 1.183}},
    {"ldc", 32768, {1.480, 1.551, 1.550, 1.556}, {1.312, 1.224, 1.234, 1.231}},
    {"ldc", 65536, {1.965, 1.986, 1.984, 1.980}, {1.753, 1.536, 1.508, 1.603}},
    {"ldc", 131072, {3.033, 3.060, 3.060, 3.054}, {2.882, 2.477, 2.427, 2.617}},
};

TokenCount reference_block_size(const std::string& dataset, TokenCount max_seq_len,
                                const std::string& mask) {
  if (max_seq_len <= 16384) return 512;
  if (max_seq_len <= 65536) return 1024;
  return dataset == "longalign" && mask == "shared_question" ? 4096 : 2048;
}

constexpr const char* kSystems[] = {"mlm", "dcp-reference", "dcp"};

struct E2eJob {
  std::string dataset;
  TokenCount max_seq_len = 0;
  std::int32_t batch = 0;
  std::vector<TokenCount> lengths;
  // Per (mask, system): forward and backward seconds of one layer's attention.
  std::vector<std::array<double, 2>> seconds;
};

// The paper's longest max_seq_len; E2eOptions::tokens scales every length by tokens / this.
constexpr TokenCount kLongestLength = 131072;

// A paper length (or block size) in the options' miniature.
TokenCount scaled(const E2eOptions& options, TokenCount tokens, TokenCount floor = 1) {
  return std::max(floor, tokens * options.tokens / kLongestLength);
}

std::array<double, 2> simulate_attention(const E2eOptions& options, const ClusterSpec& groups,
                                         const std::vector<TokenCount>& lengths,
                                         const std::string& mask_name, const std::string& system,
                                         TokenCount reference_block) {
  const MaskSpec mask = parse_mask_spec(mask_name);
  AttentionShape shape;
  shape.q_heads = options.model.heads / options.model.tensor_parallel;
  shape.kv_heads = options.model.kv_heads / options.model.tensor_parallel;
  shape.head_dim = static_cast<std::int32_t>(options.model.head_dim());
  const SequenceBatch batch(lengths);
  WorkloadOptions workload_options;
  workload_options.block_size = system == "dcp-reference" ? reference_block : 0;
  workload_options.auto_block.devices = groups.shape.devices();
  const Workload workload =
      make_workload(shape, batch, build_batch_mask(mask, batch), workload_options).workload;
  PlanOptions plan_options =
      system == "dcp-reference" ? reference_stand_in_options(options.seed) : PlanOptions{};
  plan_options.seed = options.seed;
  plan_options.cluster = groups;
  if (system == "mlm") {
    plan_options.strategy = Strategy::kTe;
    plan_options.statics.data_parallel = 1;  // the reference's Megatron grid: dp 1, cp 16
    if (mask.kind != MaskKind::kCausal) plan_options.statics.masked_tiles = MaskedTiles::kCompute;
  } else if (system == "dcp") {
    plan_options.strategy = Strategy::kDcpPure;
    sweep_block_sizes_when_automatic(plan_options, true);
  }
  const BuiltPlan built = build_plan(workload, plan_options);
  const sim::PlanSimulation s =
      sim::simulate(built.plan, groups,
                    system == "dcp-reference" ? sim::reference_executor() : sim::ExecutorModel{});
  return {s.forward.seconds, s.backward.seconds};
}

std::string length_name(TokenCount tokens) { return std::to_string(tokens / 1024) + "K"; }

}  // namespace

std::vector<E2eCell> e2e_cells() {
  std::vector<E2eCell> cells;
  for (const E2eRow& row : kE2eRows) {
    for (std::size_t m = 0; m < std::size(kMasks); ++m) {
      cells.push_back({row.dataset, row.max_seq_len, kMasks[m], row.mlm[m], row.dcp[m],
                       reference_block_size(row.dataset, row.max_seq_len, kMasks[m])});
    }
  }
  return cells;
}

E2eResult run_e2e_suite(const E2eOptions& options, std::ostream& progress) {
  sim::validate(options.model);
  const ClusterSpec groups =
      sim::tensor_parallel_groups(options.gpus, options.model.tensor_parallel);
  const std::vector<E2eCell> cells = e2e_cells();
  std::vector<E2eJob> jobs;
  for (const E2eRow& row : kE2eRows) {
    PackingOptions packing;
    packing.tokens_per_batch = scaled(options, row.max_seq_len);
    packing.max_length = packing.tokens_per_batch;
    packing.scale = static_cast<double>(options.tokens) / static_cast<double>(kLongestLength);
    const auto batches =
        sample_batches(parse_length_distribution(row.dataset),
                       static_cast<std::size_t>(options.batches), packing, options.seed);
    for (std::size_t b = 0; b < batches.size(); ++b) {
      jobs.push_back({row.dataset, row.max_seq_len, static_cast<std::int32_t>(b), batches[b], {}});
    }
  }
  run_jobs(jobs.size(), options.threads, progress, [&](std::size_t j) {
    E2eJob& job = jobs[j];
    for (const char* mask : kMasks) {
      const TokenCount block =
          scaled(options, reference_block_size(job.dataset, job.max_seq_len, mask), 64);
      for (const char* system : kSystems) {
        job.seconds.push_back(
            simulate_attention(options, groups, job.lengths, mask, system, block));
      }
    }
    return job.dataset + " " + length_name(job.max_seq_len) + " batch " +
           std::to_string(job.batch) + " (" + std::to_string(job.lengths.size()) + " sequences)";
  });
  // Means over batches per (dataset, length, mask, system): forward, backward, tokens per device.
  std::map<std::tuple<std::string, TokenCount, std::string, std::string>, std::array<double, 4>>
      sums;
  for (const E2eJob& job : jobs) {
    double tokens = 0;
    for (const TokenCount l : job.lengths) tokens += static_cast<double>(l);
    std::size_t v = 0;
    for (const char* mask : kMasks) {
      for (const char* system : kSystems) {
        auto& sum = sums[{job.dataset, job.max_seq_len, mask, system}];
        sum[0] += job.seconds[v][0];
        sum[1] += job.seconds[v][1];
        sum[2] += tokens / groups.shape.devices();
        sum[3] += 1;
        ++v;
      }
    }
  }
  const auto mean_of = [&](const E2eCell& cell, const std::string& system) {
    const auto& s = sums.at({cell.dataset, cell.max_seq_len, cell.mask, system});
    return sim::MeasuredStep{0, s[2] / s[3], s[0] / s[3], s[1] / s[3]};
  };
  E2eResult result;
  std::vector<sim::MeasuredStep> fitted;
  for (const E2eCell& cell : cells) {
    if (cell.mask != "causal") continue;
    sim::MeasuredStep step = mean_of(cell, "mlm");
    step.seconds = cell.mlm_seconds;
    fitted.push_back(step);
    char line[200];
    std::snprintf(line, sizeof line,
                  "fit: %s %s causal mlm: %.3f s measured; per layer attention forward %.2f ms, "
                  "backward %.2f ms; %.0f tokens per device\n",
                  cell.dataset.c_str(), length_name(cell.max_seq_len).c_str(), cell.mlm_seconds,
                  step.attention_forward * 1e3, step.attention_backward * 1e3, step.tokens);
    progress << line;
  }
  result.rates = sim::fit_step_rates(options.model, options.gpus, fitted, options.peak_flops);
  for (const E2eCell& cell : cells) {
    for (const char* system : kSystems) {
      const sim::MeasuredStep m = mean_of(cell, system);
      E2eRecord record;
      record.cell = cell;
      record.system = system;
      record.paper_seconds = record.system == "mlm" ? cell.mlm_seconds : cell.dcp_seconds;
      record.attention_forward_ms = m.attention_forward * 1e3;
      record.attention_backward_ms = m.attention_backward * 1e3;
      record.step = sim::step_time(options.model, result.rates, options.gpus, m.tokens,
                                   m.attention_forward, m.attention_backward);
      record.fitted = record.system == "mlm" && cell.mask == "causal";
      result.records.push_back(record);
    }
  }
  return result;
}

std::string e2e_records_json(const E2eResult& result) {
  JsonWriter json;
  json.begin_object();
  json.field("dense_tflops", result.rates.dense_flops / 1e12);
  json.field("fixed_seconds", result.rates.fixed_seconds);
  json.field("dense_rate_at_peak", result.rates.at_peak);
  json.key("records");
  json.begin_array();
  for (const E2eRecord& r : result.records) {
    JsonWriter::Inline one_line(json);
    json.begin_object();
    json.field("dataset", r.cell.dataset).field("max_seq_len", r.cell.max_seq_len);
    json.field("mask", r.cell.mask).field("system", r.system);
    json.field("estimated_seconds", r.step.total()).field("paper_seconds", r.paper_seconds);
    json.field("attention_seconds", r.step.attention).field("dense_seconds", r.step.dense);
    json.field("tensor_parallel_seconds", r.step.tensor_parallel);
    json.field("fixed_seconds", r.step.fixed).field("fitted", r.fitted);
    json.end_object();
  }
  json.end_array();
  json.end_object();
  return json.str() + "\n";
}

std::string e2e_markdown(const E2eOptions& options, const E2eResult& result,
                         const std::string& command) {
  const sim::TransformerConfig& m = options.model;
  const ClusterSpec groups = sim::tensor_parallel_groups(options.gpus, m.tensor_parallel);
  std::string md = "# The DCP paper's end-to-end runs: an estimate\n\n";
  md += "Written by `" + command + "`.\n\n";
  md +=
      "**An estimate, not a measurement.** The paper measured mean seconds per training iteration "
      "of a GPT \"8B\" (" +
      std::to_string(m.layers) + " layers, hidden " + std::to_string(m.hidden) + ", " +
      std::to_string(m.heads) + " heads, " + std::to_string(m.kv_heads) + " kv groups, FFN " +
      std::to_string(m.ffn) + (m.gated_ffn ? " gated" : "") + ", " +
      format_fixed(static_cast<double>(m.parameters()) / 1e9, 2) + " B weights, TP " +
      std::to_string(m.tensor_parallel) + ", bf16, full recomputation) on " +
      std::to_string(options.gpus.shape.nodes) + " × " +
      std::to_string(options.gpus.shape.devices_per_node) +
      " A100, one batch of max_seq_len tokens per iteration, context parallel over the " +
      std::to_string(groups.shape.devices()) +
      " tensor-parallel groups (Megatron-LM with TransformerEngine's a2a+p2p, and the "
      "reference DCP). The estimate of one iteration (`sim::step_time`) is\n\n"
      "- attention: layers × (2 × forward + backward) of one layer's attention, **simulated** "
      "on `" +
      groups.name +
      "` (each node's tensor-parallel groups as devices, each group's share of the node's "
      "network) for " +
      std::to_string(options.batches) + " sampled batches per dataset and length (seed " +
      std::to_string(options.seed) + "), " + std::to_string(m.heads / m.tensor_parallel) + " q / " +
      std::to_string(m.kv_heads / m.tensor_parallel) +
      " kv heads per GPU;\n"
      "- dense: the device's tokens × " +
      format_fixed(m.dense_forward_flops_per_token() / 1e9, 2) +
      " GFLOP forward per token × 4 (forward, recomputed forward, backward) / TP at a "
      "**fitted** sustained rate;\n"
      "- tensor parallel: the sequence-parallel all-gathers and reduce-scatters of every layer "
      "(12 per layer) as rings over the node's NVLink at the cluster's constants;\n"
      "- fixed: a **fitted** time per iteration (optimizer step, gradient synchronisation over "
      "the 16 data-parallel replicas, everything that does not grow with the tokens).\n\n"
      "The two fitted rates come from the 8 Megatron causal cells alone (least squares): "
      "dense **" +
      format_fixed(result.rates.dense_flops / 1e12, 1) + " TFLOP/s** per GPU (" +
      format_fixed(100 * result.rates.dense_flops / 312e12, 0) + " % of the A100's 312 bf16 peak" +
      (result.rates.at_peak
           ? ": held at the peak, since the measured iterations minus the simulated attention "
             "do not grow with the dense work, or would need more than the peak: the simulated "
             "attention grows faster with the length than the measured iterations allow"
           : "") +
      "), fixed **" + format_fixed(result.rates.fixed_seconds, 3) +
      " s**. For scale, the distributed optimizer's gradient reduce-scatter and parameter "
      "all-gather of " +
      format_fixed(static_cast<double>(m.parameters()) / m.tensor_parallel / 1e9, 2) +
      " B bf16 values per GPU over its share of the node's network (" +
      format_fixed(options.gpus.inter_node_bandwidth / options.gpus.shape.devices_per_node / 1e9,
                   2) +
      " GB/s) would take " +
      format_fixed(2.0 * static_cast<double>(m.parameters()) / m.tensor_parallel * 2 *
                       (groups.shape.devices() - 1) / groups.shape.devices() /
                       (options.gpus.inter_node_bandwidth / options.gpus.shape.devices_per_node),
                   2) +
      " s unoverlapped. Every other cell is a prediction: the sparse-mask Megatron cells, every "
      "DCP cell (`dcp-reference`: dcp's planner at the reference's best block size, without the "
      "backward schedule that runs a device's own outputs last, run by the model of the "
      "reference's executor), and `dcp`: dcp's own plan and executor (next to the "
      "paper's DCP figure for comparison, not an error). Error = (estimate − paper) / paper.\n\n";
  struct Group {
    std::string name;
    std::vector<double> errors;
  };
  std::vector<Group> groups_of = {{"fitted: Megatron causal", {}},
                                  {"validation: Megatron sparse masks", {}},
                                  {"validation: dcp-reference (all masks)", {}}};
  for (const E2eRecord& r : result.records) {
    if (r.system == "dcp") continue;
    const std::size_t g = r.fitted ? 0 : r.system == "mlm" ? 1 : 2;
    groups_of[g].errors.push_back(std::abs(r.error()));
  }
  md += "| cells | count | median \\|error\\| | max \\|error\\| |\n|---|---|---|---|\n";
  for (const Group& g : groups_of) {
    md +=
        "| " + g.name + " | " + std::to_string(g.errors.size()) + " | " +
        format_percent(median_of(g.errors)) + " | " +
        format_percent(g.errors.empty() ? 0 : *std::max_element(g.errors.begin(), g.errors.end())) +
        " |\n";
  }
  md +=
      "\nPer cell: seconds per iteration, measured (paper) and estimated; the estimate's "
      "attention share; the speed-up of DCP over Megatron as measured and as estimated.\n\n"
      "| dataset | length | mask | MLM paper | MLM est. | error | DCP paper | dcp-reference est. | "
      "error | dcp est. | attention share (MLM / dcp) | MLM/DCP paper | MLM/dcp-reference est. | "
      "MLM/dcp est. |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i + 2 < result.records.size(); i += 3) {
    const E2eRecord& mlm = result.records[i];
    const E2eRecord& ref = result.records[i + 1];
    const E2eRecord& own = result.records[i + 2];
    md += "| " + mlm.cell.dataset + " | " + length_name(mlm.cell.max_seq_len) + " | " +
          mlm.cell.mask + " | " + format_fixed(mlm.paper_seconds, 3) + " | " +
          format_fixed(mlm.step.total(), 3) + " | " + format_percent(mlm.error()) +
          (mlm.fitted ? " (fitted)" : "") + " | " + format_fixed(ref.paper_seconds, 3) + " | " +
          format_fixed(ref.step.total(), 3) + " | " + format_percent(ref.error()) + " | " +
          format_fixed(own.step.total(), 3) + " | " +
          format_fixed(100 * mlm.step.attention / mlm.step.total(), 0) + " % / " +
          format_fixed(100 * own.step.attention / own.step.total(), 0) + " % | " +
          format_fixed(mlm.paper_seconds / ref.paper_seconds, 2) + " | " +
          format_fixed(mlm.step.total() / ref.step.total(), 2) + " | " +
          format_fixed(mlm.step.total() / own.step.total(), 2) + " |\n";
  }
  return md;
}

}  // namespace dcp::suites

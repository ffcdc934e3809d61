// SPDX-License-Identifier: Apache-2.0
// The paper suite: every measured cell of the DCP paper's micro-benchmark under the simulator.
#include "apps/suites/paper_suite.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/json_writer.h"
#include "dcp/core/timing.h"

#include "dcp/model/cluster.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/sequence_batch.h"
#include "dcp/model/workload.h"

#include "dcp/data/batch_packing.h"
#include "dcp/data/length_distribution.h"

#include "dcp/calibration/plan_time_fit.h"
#include "dcp/planner/baselines/static_plans.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/program/program.h"
#include "dcp/selection/plan_search.h"
#include "dcp/sim/cost_model.h"
#include "dcp/sim/model_simulation.h"
#include "dcp/sim/simulator.h"
#include "dcp/workload_builder.h"

#include "apps/suites/reports.h"
#include "apps/suites/suite_jobs.h"

namespace dcp::suites {
namespace {

// The reference's DCP block sizes (its micro-benchmark sweeps these and reports the best).
constexpr TokenCount kReferenceBlockSizes[] = {1024, 2048, 4096};

// What one batch is planned with: a mask and a system.
struct Variant {
  std::string mask;
  std::string strategy;
  std::int32_t window = 0;  // loongtrain: the inner ring's head groups
  bool operator==(const Variant&) const = default;
};

struct PaperJob {
  std::string dataset;
  double scale = 1;
  std::int32_t batch = 0;
  std::vector<TokenCount> lengths;
  std::vector<std::array<double, 2>> seconds;  // per variant: forward, backward
};

Workload workload_of(const PaperOptions& options, const std::vector<TokenCount>& lengths,
                     const MaskSpec& mask, TokenCount block_size) {
  const SequenceBatch batch(lengths);
  WorkloadOptions workload_options;
  workload_options.block_size = block_size;
  workload_options.auto_block.devices = options.cluster.shape.devices();
  return make_workload(options.shape, batch, build_batch_mask(mask, batch), workload_options)
      .workload;
}

std::array<double, 2> simulate_plan(const Workload& workload, PlanOptions plan_options,
                                    const ClusterSpec& cluster,
                                    const sim::ExecutorModel& executor) {
  plan_options.cluster = cluster;
  const BuiltPlan built = build_plan(workload, plan_options);
  const sim::PlanSimulation simulation = sim::simulate(built.plan, cluster, executor);
  return {simulation.forward.seconds, simulation.backward.seconds};
}

// What a system's implementation adds to dcp's executor, as the paper ran it.
sim::ExecutorModel executor_of(const PaperOptions& options, const std::string& strategy) {
  if (strategy == "dcp-reference") return sim::reference_executor();
  return splits_sequences_on_host(strategy) ? options.zigzag_baselines : sim::ExecutorModel{};
}

// One variant on one batch, as the paper ran it: static systems with data parallelism where the
// lengths allow it, TransformerEngine computing every tile of a sparse mask, and the reference's
// DCP at its best block size.
std::array<double, 2> run_variant(const PaperOptions& options,
                                  const std::vector<TokenCount>& lengths, const Variant& variant) {
  const MaskSpec mask = parse_mask_spec(variant.mask);
  PlanOptions plan_options;
  plan_options.seed = options.seed;
  if (variant.strategy == "dcp-reference") {
    std::array<double, 2> best = {std::numeric_limits<double>::infinity(), 0};
    for (const TokenCount block : kReferenceBlockSizes) {
      const std::array<double, 2> s = simulate_plan(
          workload_of(options, lengths, mask, block), reference_stand_in_options(options.seed),
          options.cluster, executor_of(options, variant.strategy));
      if (s[0] + s[1] < best[0] + best[1]) best = s;
    }
    return best;
  }
  plan_options.strategy = parse_strategy(variant.strategy);
  plan_options.statics.loongtrain_window = variant.window;
  sweep_block_sizes_when_automatic(plan_options, true);
  if (!is_dcp(plan_options.strategy)) {
    plan_options.statics.data_parallel = options.static_data_parallel;
    if (mask.kind != MaskKind::kCausal) plan_options.statics.masked_tiles = MaskedTiles::kCompute;
  }
  return simulate_plan(workload_of(options, lengths, mask, 0), plan_options, options.cluster,
                       executor_of(options, variant.strategy));
}

// The inner-ring sizes the paper searched for LoongTrain on the whole cluster (it reports the
// best), or {0} for every other system.
std::vector<std::int32_t> windows_of(const PaperOptions& options, const std::string& strategy) {
  if (strategy != "loongtrain") return {0};
  // Automatic data parallelism (0) varies by batch; a window above a smaller ring is capped.
  return loongtrain_windows(
      HeadBlocking(options.shape, 1),
      options.cluster.shape.devices() / std::max(1, options.static_data_parallel));
}

}  // namespace

bool splits_sequences_on_host(const std::string& strategy) {
  return strategy == "zigzag" || strategy == "loongtrain" || strategy == "te";
}

std::vector<std::vector<TokenCount>> paper_batches(const PaperOptions& options,
                                                   const std::string& dataset, double scale) {
  PackingOptions packing;
  packing.tokens_per_batch = options.tokens;
  packing.scale = scale * static_cast<double>(options.tokens) / kPaperTokens;
  return sample_batches(parse_length_distribution(dataset),
                        static_cast<std::size_t>(options.batches), packing, options.seed);
}

std::vector<PaperRecord> run_paper_suite(const PaperOptions& options, std::ostream& progress) {
  const std::vector<PaperCell> cells = paper_cells();
  // The variants each (dataset, scale) needs, plus dcp's own plan for every mask.
  std::map<std::pair<std::string, double>, std::vector<Variant>> needed;
  for (const PaperCell& cell : cells) {
    auto& variants = needed[{cell.dataset, cell.scale}];
    for (const std::string& strategy : {cell.strategy, std::string("dcp-pure")}) {
      for (const std::int32_t window : windows_of(options, strategy)) {
        const Variant variant{cell.mask, strategy, window};
        if (std::find(variants.begin(), variants.end(), variant) == variants.end()) {
          variants.push_back(variant);
        }
      }
    }
  }
  std::vector<PaperJob> jobs;
  for (const auto& [key, variants] : needed) {
    const auto batches = paper_batches(options, key.first, key.second);
    for (std::size_t b = 0; b < batches.size(); ++b) {
      jobs.push_back({key.first, key.second, static_cast<std::int32_t>(b), batches[b], {}});
    }
  }
  run_jobs(jobs.size(), options.threads, progress, [&](std::size_t j) {
    PaperJob& job = jobs[j];
    for (const Variant& variant : needed.at({job.dataset, job.scale})) {
      job.seconds.push_back(run_variant(options, job.lengths, variant));
    }
    return job.dataset + " " + format_scale(job.scale) + " batch " + std::to_string(job.batch) +
           " (" + std::to_string(job.lengths.size()) + " sequences)";
  });
  // Means over batches per (dataset, scale, mask, strategy, window, pass).
  std::map<std::tuple<std::string, double, std::string, std::string, std::int32_t>,
           std::array<double, 3>>
      sums;
  for (const PaperJob& job : jobs) {
    const std::vector<Variant>& variants = needed.at({job.dataset, job.scale});
    for (std::size_t v = 0; v < variants.size(); ++v) {
      auto& sum = sums[{job.dataset, job.scale, variants[v].mask, variants[v].strategy,
                        variants[v].window}];
      sum[0] += job.seconds[v][0];
      sum[1] += job.seconds[v][1];
      sum[2] += 1;
    }
  }
  // The cell's mean, at the system's best window (as the paper reported LoongTrain's).
  const auto record_of = [&](PaperCell cell, const std::string& strategy) {
    cell.strategy = strategy;
    PaperRecord record{cell, std::numeric_limits<double>::infinity(), 0};
    for (const std::int32_t window : windows_of(options, strategy)) {
      const auto& sum = sums.at({cell.dataset, cell.scale, cell.mask, strategy, window});
      const double ms = sum[cell.pass == "forward" ? 0 : 1] / sum[2] * 1e3;
      if (ms < record.simulated_ms) {
        record.simulated_ms = ms;
        record.batches = static_cast<std::int32_t>(sum[2]);
        record.window = window;
      }
    }
    return record;
  };
  std::vector<PaperRecord> records;
  for (const PaperCell& cell : cells) {
    records.push_back(record_of(cell, cell.strategy));
    if (cell.strategy == "dcp-reference") {
      PaperRecord own = record_of(cell, "dcp-pure");
      own.cell.fitted = false;
      records.push_back(own);
    }
  }
  return records;
}

PaperFit fit_paper_constants(const PaperOptions& options, std::ostream& progress) {
  // An unknown name fails before minutes of planning.
  calibration::check_plan_time_fit_constants(options.fit_parameters);
  // Build every fitted cell's plans once: per (scale, strategy, window), one per batch. LoongTrain
  // cells keep the window that is fastest under the starting constants, per cell, as the paper
  // reported LoongTrain's best window.
  struct Target {
    calibration::MeasuredPlanTime measured;
    bool splits = false;  // its system splits sequences on the host (zigzag_baselines prices it)
  };
  std::vector<Plan> built;
  std::map<std::tuple<double, std::string, std::int32_t>, std::vector<std::size_t>> plans_of;
  std::vector<std::array<double, 2>> start_seconds;
  const auto plans_for = [&](const PaperCell& cell, std::int32_t window) {
    auto [it, fresh] = plans_of.try_emplace({cell.scale, cell.strategy, window});
    if (!fresh) return it->second;
    for (const auto& lengths : paper_batches(options, cell.dataset, cell.scale)) {
      PlanOptions plan_options;
      plan_options.strategy = parse_strategy(cell.strategy);
      plan_options.statics.data_parallel = options.static_data_parallel;
      plan_options.statics.loongtrain_window = window;
      plan_options.cluster = options.cluster;
      plan_options.seed = options.seed;
      const MaskSpec mask = parse_mask_spec(cell.mask);
      built.push_back(build_plan(workload_of(options, lengths, mask, 0), plan_options).plan);
      const sim::PlanSimulation s =
          sim::simulate(built.back(), options.cluster, executor_of(options, cell.strategy));
      start_seconds.push_back({s.forward.seconds, s.backward.seconds});
      it->second.push_back(built.size() - 1);
    }
    progress << "fit: planned " << cell.strategy
             << (window > 0 ? " window " + std::to_string(window) : std::string()) << " "
             << format_scale(cell.scale) << "\n"
             << std::flush;
    return it->second;
  };
  std::vector<Target> targets;
  for (const PaperCell& cell : paper_cells()) {
    if (!cell.fitted || cell.outlier) continue;
    const int pass = cell.pass == "forward" ? 0 : 1;
    Target target{{cell.paper_ms, pass == 0 ? Pass::kForward : Pass::kBackward, {}},
                  splits_sequences_on_host(cell.strategy)};
    double best = std::numeric_limits<double>::infinity();
    for (const std::int32_t window : windows_of(options, cell.strategy)) {
      const std::vector<std::size_t> ids = plans_for(cell, window);
      double sum = 0;
      for (const std::size_t i : ids) sum += start_seconds[i][static_cast<std::size_t>(pass)];
      if (sum < best) {
        best = sum;
        target.measured.plans = ids;
      }
    }
    targets.push_back(target);
  }
  // Keep only the plans a target uses.
  calibration::PlanTimeFitInput input;
  std::map<std::size_t, std::size_t> kept;
  for (Target& target : targets) {
    for (std::size_t& i : target.measured.plans) {
      auto [it, fresh] = kept.try_emplace(i, input.plans.size());
      if (fresh) {
        input.plans.push_back(std::move(built[i]));
        input.priced_with_executor.push_back(target.splits);
      }
      i = it->second;
    }
    input.measured.push_back(std::move(target.measured));
  }
  built.clear();
  input.cluster = options.cluster;
  input.executor = options.zigzag_baselines;
  input.parameters = options.fit_parameters;
  input.threads = options.threads;
  const calibration::PlanTimeFit fit = calibration::fit_plan_times(input, progress);
  return {fit.cluster, fit.executor, fit.rms_log_error_before, fit.rms_log_error_after,
          fit.evaluations};
}

std::string paper_records_json(const std::vector<PaperRecord>& records) {
  JsonWriter json;
  json.begin_array();
  for (const PaperRecord& r : records) {
    JsonWriter::Inline one_line(json);
    json.begin_object();
    json.field("dataset", r.cell.dataset).field("scale", r.cell.scale).field("mask", r.cell.mask);
    json.field("pass", r.cell.pass).field("strategy", r.cell.strategy);
    json.field("simulated_ms", r.simulated_ms).field("paper_ms", r.cell.paper_ms);
    json.field("fitted", r.cell.fitted).field("outlier", r.cell.outlier);
    json.field("batches", r.batches);
    if (r.window > 0) json.field("window", r.window);
    json.end_object();
  }
  json.end_array();
  return json.str() + "\n";
}

std::string paper_markdown(const PaperOptions& options, const std::vector<PaperRecord>& records,
                           const std::string& command) {
  std::string md = "# The DCP paper's micro-benchmark under the simulator\n\n";
  md += "Written by `" + command + "`.\n\n";
  md +=
      "Every cell the paper measured (its reference figures: 4 × 8 A100 on p4de, 8 q / 2 kv "
      "heads, head dim 128, bf16, ms per 131072-token batch) next to the **simulated** time "
      "of the same system on `" +
      options.cluster.name + "`, as a mean over " + std::to_string(options.batches) +
      " sampled batches per dataset and scale (seed " + std::to_string(options.seed) +
      "). Baselines run as the paper ran them: " +
      (options.static_data_parallel == 1
           ? std::string("context parallel over all devices (the reference's data parallel rule "
                         "gives d = 1 for batch files whose longest scaled length exceeds 65536, "
                         "and no measured baseline is faster at x0.5 than at x1), ")
           : "data parallel degree " +
                 (options.static_data_parallel == 0
                      ? std::string("automatic per batch")
                      : std::to_string(options.static_data_parallel)) +
                 ", ") +
      "TransformerEngine computing every tile of a sparse mask, and zigzag, LoongTrain and "
      "TransformerEngine paying " +
      format_fixed(options.zigzag_baselines.sequence_overhead * 1e6, 1) +
      " us of host time per sequence and pass (`sim::zigzag_baseline_executor`: their "
      "implementations cut every sequence into zigzag halves on the host). "
      "`dcp-reference` is dcp's planner at the reference's best block size (1024, 2048, 4096) "
      "standing in for the reference's planner (without the backward schedule that runs a "
      "device's own outputs last, which the reference's scheduler lacks), run by a model of the "
      "reference's executor "
      "(`sim::reference_executor`: host time per instruction, packed messages, one all-to-all "
      "over the whole group per launch); `dcp-pure` is dcp's own plan (the paper's DCP figure "
      "beside it for comparison, not an error). Fitted: the cells the cluster's fitted constants "
      "were fitted to. Error = (simulated − paper) / paper.\n\n";
  // Summary per group.
  struct Group {
    std::string name;
    std::vector<double> errors;
  };
  std::vector<Group> groups = {{"fitted (LongDataCollections causal baselines)", {}},
                               {"validation: other baseline cells", {}},
                               {"dcp-reference", {}}};
  for (const PaperRecord& r : records) {
    if (r.cell.strategy == "dcp-pure" || r.cell.outlier) continue;
    const std::size_t g = r.cell.fitted ? 0 : r.cell.strategy == "dcp-reference" ? 2 : 1;
    groups[g].errors.push_back(std::abs(r.error()));
  }
  md +=
      "| cells | count | median \\|error\\| | max \\|error\\| | within 35 % "
      "|\n|---|---|---|---|---|\n";
  for (const Group& g : groups) {
    const std::size_t within = static_cast<std::size_t>(
        std::count_if(g.errors.begin(), g.errors.end(), [](double e) { return e <= 0.35; }));
    md +=
        "| " + g.name + " | " + std::to_string(g.errors.size()) + " | " +
        format_percent(median_of(g.errors)) + " | " +
        format_percent(g.errors.empty() ? 0 : *std::max_element(g.errors.begin(), g.errors.end())) +
        " | " + std::to_string(within) + " |\n";
  }
  md +=
      "\nTargets: median |error| ≤ 15 %, no cell beyond 35 %. The paper's two "
      "outliers (Ring LDC ×1 forward, DCP LDC ×1 lambda forward) are listed but left out of "
      "the fit and the summary.\n\n";
  md +=
      "| dataset | scale | mask | pass | system | paper ms | simulated ms | error | fitted |\n"
      "|---|---|---|---|---|---|---|---|---|\n";
  for (const PaperRecord& r : records) {
    const bool own = r.cell.strategy == "dcp-pure";
    md += "| " + r.cell.dataset + " | " + format_scale(r.cell.scale) + " | " + r.cell.mask + " | " +
          r.cell.pass + " | " + r.cell.strategy +
          (r.window > 0 ? " (window " + std::to_string(r.window) + ")" : "") + " | " +
          format_fixed(r.cell.paper_ms, 1) + (own ? " (paper's DCP)" : "") + " | " +
          format_fixed(r.simulated_ms, 2) + " | " +
          (own ? "speed-up " + format_fixed(r.cell.paper_ms / r.simulated_ms, 2) + "×"
               : format_percent(r.error())) +
          (r.cell.outlier ? " (outlier)" : "") + " | " + (r.cell.fitted ? "yes" : "") + " |\n";
  }
  return md;
}

}  // namespace dcp::suites

// SPDX-License-Identifier: Apache-2.0
// The paper suite: every measured cell of the DCP paper's micro-benchmark under the simulator.
#include "apps/cli/paper_suite.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "dcp/core/json_writer.h"
#include "dcp/core/thread_pool.h"
#include "dcp/core/timing.h"

#include "apps/cli/bench_suites.h"

namespace dcp::cli {
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

struct Job {
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
  plan_options.loongtrain_window = variant.window;
  sweep_block_sizes_when_automatic(plan_options, true);
  if (!is_dcp(plan_options.strategy)) {
    plan_options.static_data_parallel = options.static_data_parallel;
    if (mask.kind != MaskKind::kCausal) plan_options.masked_tiles = MaskedTiles::kCompute;
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
  std::vector<Job> jobs;
  for (const auto& [key, variants] : needed) {
    const auto batches = paper_batches(options, key.first, key.second);
    for (std::size_t b = 0; b < batches.size(); ++b) {
      jobs.push_back({key.first, key.second, static_cast<std::int32_t>(b), batches[b], {}});
    }
  }
  run_jobs(jobs.size(), options.threads, progress, [&](std::size_t j) {
    Job& job = jobs[j];
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
  for (const Job& job : jobs) {
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
  // The parameters, each a positive value changed multiplicatively, with bounds.
  struct Parameter {
    const char* name;
    double value, lo, hi;
  };
  const ClusterSpec& spec = options.cluster;
  const auto half_of = [](const std::vector<SizeEfficiency>& curve) {
    // Recover the half size from the curve's 1 MiB point (s / (s + h) = e => h = s (1 - e) / e).
    const double e = size_efficiency(curve, 1 << 20);
    return std::max(1.0, (1 << 20) * (1 - e) / e);
  };
  std::vector<Parameter> parameters = {
      {"forward_tflops", spec.forward_flops / 1e12, 50, 312},
      {"backward_tflops", spec.backward_flops / 1e12, 40, 312},
      {"tile_setup_tokens", std::max(1.0, spec.tile_setup_tokens), 1, 4096},
      {"kernel_overhead_us", std::max(1.0, spec.kernel_overhead * 1e6), 1, 100},
      {"launch_overhead_us", std::max(1.0, spec.launch_overhead * 1e6), 1, 500},
      {"launch_peer_overhead_us", std::max(0.1, spec.launch_peer_overhead * 1e6), 0.1, 100},
      {"intra_half_bytes", half_of(spec.intra_node_efficiency), 1e3, 1e8},
      {"inter_half_bytes", half_of(spec.inter_node_efficiency), 1e3, 1e8},
      {"intra_stream_gbps",
       (spec.intra_node_stream_bandwidth > 0 ? spec.intra_node_stream_bandwidth
                                             : spec.intra_node_bandwidth) /
           1e9,
       1, 1000},
      {"inter_stream_gbps",
       (spec.inter_node_stream_bandwidth > 0 ? spec.inter_node_stream_bandwidth
                                             : spec.nic_bandwidth()) /
           1e9,
       0.1, 1000},
      {"sequence_overhead_us", std::max(0.1, options.zigzag_baselines.sequence_overhead * 1e6), 0.1,
       1000},
  };
  for (const std::string& name : options.fit_parameters) {
    if (std::none_of(parameters.begin(), parameters.end(),
                     [&](const Parameter& p) { return name == p.name; })) {
      std::string names;
      for (const Parameter& p : parameters)
        names += std::string(names.empty() ? "" : ", ") + p.name;
      throw InvalidInput("no fitted constant named '" + name + "' (the constants: " + names + ")");
    }
  }
  const auto moves = [&](const Parameter& p) {
    return options.fit_parameters.empty() ||
           std::find(options.fit_parameters.begin(), options.fit_parameters.end(), p.name) !=
               options.fit_parameters.end();
  };
  // Build every fitted cell's plans once: per (scale, strategy, window), one per batch. LoongTrain
  // cells keep the window that is fastest under the starting constants, per cell, as the paper
  // reported LoongTrain's best window.
  struct Target {
    double paper_ms = 0;
    int pass = 0;
    bool splits = false;  // its system splits sequences on the host (zigzag_baselines prices it)
    std::vector<std::size_t> plans;
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
      plan_options.static_data_parallel = options.static_data_parallel;
      plan_options.loongtrain_window = window;
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
    Target target{cell.paper_ms, pass, splits_sequences_on_host(cell.strategy), {}};
    double best = std::numeric_limits<double>::infinity();
    for (const std::int32_t window : windows_of(options, cell.strategy)) {
      const std::vector<std::size_t> ids = plans_for(cell, window);
      double sum = 0;
      for (const std::size_t i : ids) sum += start_seconds[i][static_cast<std::size_t>(pass)];
      if (sum < best) {
        best = sum;
        target.plans = ids;
      }
    }
    targets.push_back(target);
  }
  // Keep only the plans a target uses.
  std::vector<Plan> plans;
  std::vector<bool> splits;  // per kept plan: priced with zigzag_baselines
  std::map<std::size_t, std::size_t> kept;
  for (Target& target : targets) {
    for (std::size_t& i : target.plans) {
      auto [it, fresh] = kept.try_emplace(i, plans.size());
      if (fresh) {
        plans.push_back(std::move(built[i]));
        splits.push_back(target.splits);
      }
      i = it->second;
    }
  }
  built.clear();
  // The spec and executor with the parameters' values; constants held keep their exact values.
  const auto apply = [&](const std::vector<Parameter>& p) {
    ClusterSpec c = options.cluster;
    const auto set = [&](std::size_t k, auto& field, auto value_of) {
      if (moves(p[k])) field = value_of(p[k].value);
    };
    set(0, c.forward_flops, [](double v) { return v * 1e12; });
    set(1, c.backward_flops, [](double v) { return v * 1e12; });
    set(2, c.tile_setup_tokens, [](double v) { return v; });
    set(3, c.kernel_overhead, [](double v) { return v * 1e-6; });
    set(4, c.launch_overhead, [](double v) { return v * 1e-6; });
    set(5, c.launch_peer_overhead, [](double v) { return v * 1e-6; });
    set(6, c.intra_node_efficiency, half_rate_curve);
    set(7, c.inter_node_efficiency, half_rate_curve);
    set(8, c.intra_node_stream_bandwidth, [](double v) { return v * 1e9; });
    set(9, c.inter_node_stream_bandwidth, [](double v) { return v * 1e9; });
    return c;
  };
  const auto zigzag_of = [&](const std::vector<Parameter>& p) {
    sim::ExecutorModel e = options.zigzag_baselines;
    if (moves(p[10])) e.sequence_overhead = p[10].value * 1e-6;
    return e;
  };
  PaperFit fit;
  const auto objective = [&](const std::vector<Parameter>& p) {
    const ClusterSpec c = apply(p);
    const sim::ExecutorModel zigzag = zigzag_of(p);
    std::vector<std::array<double, 2>> seconds(plans.size());
    ThreadPool pool(options.threads);
    pool.parallel_for(plans.size(), [&](std::size_t i, int) {
      const sim::PlanSimulation s =
          sim::simulate(plans[i], c, splits[i] ? zigzag : sim::ExecutorModel{});
      seconds[i] = {s.forward.seconds, s.backward.seconds};
    });
    double sum = 0;
    for (const Target& t : targets) {
      double ms = 0;
      for (const std::size_t i : t.plans) ms += seconds[i][static_cast<std::size_t>(t.pass)];
      ms = ms / static_cast<double>(t.plans.size()) * 1e3;
      sum += std::pow(std::log(ms / t.paper_ms), 2);
    }
    ++fit.evaluations;
    return std::sqrt(sum / static_cast<double>(targets.size()));
  };
  double best = objective(parameters);
  fit.rms_log_error_before = best;
  for (double factor = 2.0; factor > 1.04; factor = std::sqrt(factor)) {
    bool improved = true;
    while (improved) {
      improved = false;
      for (Parameter& parameter : parameters) {
        if (!moves(parameter)) continue;
        for (const double step : {factor, 1 / factor}) {
          const double old = parameter.value;
          parameter.value = std::clamp(old * step, parameter.lo, parameter.hi);
          if (parameter.value == old) continue;
          const double value = objective(parameters);
          if (value < best - 1e-6) {
            best = value;
            improved = true;
            progress << "fit: " << parameter.name << " " << old << " -> " << parameter.value
                     << ": rms log error " << best << "\n"
                     << std::flush;
          } else {
            parameter.value = old;
          }
        }
      }
    }
  }
  fit.rms_log_error_after = best;
  fit.cluster = apply(parameters);
  fit.zigzag_baselines = zigzag_of(parameters);
  return fit;
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

}  // namespace dcp::cli

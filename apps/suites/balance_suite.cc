// SPDX-License-Identifier: Apache-2.0
// The balance suite: dcp-pure's plan of every batch at several compute balances.
#include "apps/suites/balance_suite.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

#include "dcp/core/json_writer.h"

#include "dcp/model/workload.h"

#include "dcp/planner/baselines/static_plans.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/selection/plan_search.h"

#include "apps/suites/reports.h"
#include "apps/suites/suite_jobs.h"

namespace dcp::suites {
namespace {

std::string format_balance(double eps) { return format_fixed(1 + eps, 2) + " ×"; }

}  // namespace

std::vector<BalanceSample> run_balance_suite(const BalanceOptions& options,
                                             std::ostream& progress) {
  const std::vector<SampledBatch> jobs =
      sample_configurations(options.datasets, options.scales, options.masks.size(), options.batches,
                            options.tokens, options.seed);
  const std::size_t per_job = options.balances.size();
  std::vector<BalanceSample> samples(jobs.size() * per_job);
  run_jobs(jobs.size(), options.threads, progress, [&](std::size_t j) {
    const SampledBatch& job = jobs[j];
    const Workload workload =
        suite_workload(job, options.shape, options.masks[job.mask], options.cluster);
    std::string line = sampled_name(job, options.datasets, options.scales, options.masks) + ":";
    for (std::size_t i = 0; i < per_job; ++i) {
      PlanOptions plan_options;
      plan_options.strategy = Strategy::kDcpPure;
      plan_options.cluster = options.cluster;
      plan_options.seed = options.seed;
      sweep_block_sizes_when_automatic(plan_options, true);
      plan_options.placement.eps_compute = options.balances[i];
      plan_options.search.retry_tighter_balance = false;  // each balance as it is
      plan_options.search.packed_layout = false;          // which no balance changes
      const PlanFigures figures = plan_figures(build_plan(workload, plan_options), options.cluster);
      BalanceSample& sample = samples[j * per_job + i];
      sample.dataset = std::string(to_string(options.datasets[job.dataset]));
      sample.scale = options.scales[job.scale];
      sample.mask = std::string(to_string(options.masks[job.mask].kind));
      sample.batch = job.batch;
      sample.sequences = static_cast<std::int32_t>(job.lengths.size());
      sample.eps_compute = options.balances[i];
      sample.bytes_inter_node = figures.inter[0] + figures.inter[1];
      sample.imbalance_compute = figures.imbalance;
      sample.forward_ms = figures.seconds[0] * 1e3;
      sample.backward_ms = figures.seconds[1] * 1e3;
      char part[96];
      std::snprintf(part, sizeof part, " %s %.1f MB %.2f/%.2f ms",
                    format_balance(sample.eps_compute).c_str(), sample.bytes_inter_node / 1e6,
                    sample.forward_ms, sample.backward_ms);
      line += part;
    }
    return line;
  });
  return samples;
}

std::string balance_samples_json(const std::vector<BalanceSample>& samples) {
  JsonWriter json;
  json.begin_array();
  for (const BalanceSample& s : samples) {
    JsonWriter::Inline one_line(json);
    json.begin_object();
    json.field("dataset", s.dataset).field("scale", s.scale).field("mask", s.mask);
    json.field("batch", s.batch).field("sequences", s.sequences);
    json.field("eps_compute", s.eps_compute).field("bytes_inter_node", s.bytes_inter_node);
    json.field("imbalance_compute", s.imbalance_compute);
    json.field("forward_ms", s.forward_ms).field("backward_ms", s.backward_ms);
    json.end_object();
  }
  json.end_array();
  return json.str() + "\n";
}

std::string balance_markdown(const BalanceOptions& options,
                             const std::vector<BalanceSample>& samples,
                             const std::string& command) {
  const std::size_t per_batch = options.balances.size();
  std::string md =
      "# Bytes and time as the compute balance loosens\n\nWritten by `" + command + "`.\n\n";
  md += "dcp-pure's plan of each batch (" + std::to_string(options.tokens) +
        " tokens; block sizes 1024, 2048, 4096 and the structured layouts, the fastest kept) "
        "with device compute capped at each balance (`--eps-compute`: (1 + eps) × the mean), on "
        "`" +
        options.cluster.name + "`, " + std::to_string(options.batches) +
        " batches per dataset, scale and mask (seed " + std::to_string(options.seed) +
        "). Per balance: bytes between nodes (forward plus backward, what the Programs move), "
        "the compute imbalance the placement reached, and the simulated forward / backward "
        "time; **bold** is the fastest forward plus backward.\n\n";
  md += "| dataset | scale | mask | batch | sequences |";
  for (const double eps : options.balances) {
    md.append(" ").append(format_balance(eps)).append(": inter-node MB | imbalance | ms |");
  }
  md += "\n|---|---|---|---|---|";
  for (std::size_t i = 0; i < per_batch; ++i) md += "---|---|---|";
  md += "\n";
  std::vector<std::vector<double>> bytes_ratio(per_batch), time_ratio(per_batch);
  std::vector<std::int32_t> fastest(per_batch, 0);
  for (std::size_t at = 0; at + per_batch <= samples.size(); at += per_batch) {
    const BalanceSample& first = samples[at];
    std::size_t best = 0;
    for (std::size_t i = 1; i < per_batch; ++i) {
      const BalanceSample& s = samples[at + i];
      if (s.forward_ms + s.backward_ms <
          samples[at + best].forward_ms + samples[at + best].backward_ms) {
        best = i;
      }
    }
    ++fastest[best];
    md += "| " + first.dataset + " | " + format_scale(first.scale) + " | " + first.mask + " | " +
          std::to_string(first.batch) + " | " + std::to_string(first.sequences) + " |";
    for (std::size_t i = 0; i < per_batch; ++i) {
      const BalanceSample& s = samples[at + i];
      const std::string time =
          format_fixed(s.forward_ms, 2) + " / " + format_fixed(s.backward_ms, 2);
      const std::string shown = i == best ? "**" + time + "**" : time;
      md.append(" ").append(format_fixed(s.bytes_inter_node / 1e6, 1)).append(" | ");
      md.append(format_fixed(s.imbalance_compute, 2)).append(" | ").append(shown).append(" |");
      if (first.bytes_inter_node > 0) {
        bytes_ratio[i].push_back(s.bytes_inter_node / first.bytes_inter_node);
      }
      time_ratio[i].push_back((s.forward_ms + s.backward_ms) /
                              (first.forward_ms + first.backward_ms));
    }
    md += "\n";
  }
  md += "\nOver the batches, against " + format_balance(options.balances.front()) + ":\n\n";
  md += "| balance | median bytes between nodes | median forward + backward time | fastest on |\n";
  md += "|---|---|---|---|\n";
  for (std::size_t i = 0; i < per_batch; ++i) {
    md += "| " + format_balance(options.balances[i]) + " | " +
          format_fixed(median_of(bytes_ratio[i]), 2) + " × | " +
          format_fixed(median_of(time_ratio[i]), 2) + " × | " + std::to_string(fastest[i]) +
          " of " + std::to_string(samples.size() / std::max<std::size_t>(1, per_batch)) +
          " batches |\n";
  }
  return md;
}

}  // namespace dcp::suites

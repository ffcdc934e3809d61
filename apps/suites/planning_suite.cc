// SPDX-License-Identifier: Apache-2.0
// The planning-time suite: every batch planned with dcp-pure and dcp on one thread, timed.
#include "apps/suites/planning_suite.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <tuple>

#include "dcp/core/ids.h"
#include "dcp/core/json_writer.h"
#include "dcp/core/timing.h"

#include "dcp/model/cluster.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/sequence_batch.h"
#include "dcp/model/workload.h"

#include "dcp/data/batch_packing.h"
#include "dcp/data/length_distribution.h"

#include "dcp/planner/baselines/static_plans.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/selection/plan_search.h"
#include "dcp/workload_builder.h"

#include "apps/suites/reports.h"

namespace dcp::suites {
namespace {

std::string shape_name(const ClusterShape& shape) {
  return std::to_string(shape.nodes) + " × " + std::to_string(shape.devices_per_node);
}

// The value at fraction q of the sorted values (nearest rank).
double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
}

std::string distribution_row(const std::vector<double>& ms) {
  return format_fixed(median_of(ms), 0) + " | " + format_fixed(quantile(ms, 0.9), 0) + " | " +
         format_fixed(ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end()), 0);
}

}  // namespace

std::vector<PlanningSample> run_planning_suite(const PlanningOptions& options,
                                               std::ostream& progress) {
  std::vector<PlanningSample> samples;
  const auto per_scale = static_cast<std::size_t>(
      (options.batches + static_cast<std::int32_t>(options.scales.size()) - 1) /
      static_cast<std::int32_t>(options.scales.size()));
  for (const ClusterShape& shape : options.shapes) {
    for (const LengthDistributionKind dataset : options.datasets) {
      std::vector<std::vector<std::vector<TokenCount>>> by_scale;
      for (const double scale : options.scales) {
        PackingOptions packing;
        packing.tokens_per_batch = options.tokens;
        packing.scale = scale;
        by_scale.push_back(sample_batches(dataset, per_scale, packing, options.seed));
      }
      for (const MaskSpec& mask : options.masks) {
        std::vector<double> line_ms;
        for (std::int32_t b = 0; b < options.batches; ++b) {
          const std::size_t s = static_cast<std::size_t>(b) % options.scales.size();
          const std::size_t i = static_cast<std::size_t>(b) / options.scales.size();
          if (i >= by_scale[s].size()) continue;
          const SequenceBatch batch(by_scale[s][i]);
          for (const Strategy strategy : {Strategy::kDcpPure, Strategy::kDcp}) {
            PlanOptions plan_options;
            plan_options.strategy = strategy;
            plan_options.cluster = options.cluster;
            plan_options.cluster.shape = shape;
            plan_options.seed = options.seed;
            sweep_block_sizes_when_automatic(plan_options, true);
            // The workload is part of planning: blocks sized for the devices, masks built.
            const auto start = Clock::now();
            WorkloadOptions workload_options;
            workload_options.auto_block.devices = shape.devices();
            const Workload workload =
                make_workload(options.shape, batch, build_batch_mask(mask, batch), workload_options)
                    .workload;
            const BuiltPlan built = build_plan(workload, plan_options);
            PlanningSample sample;
            sample.plan_ms = ms_since(start);
            sample.shape = shape;
            sample.dataset = std::string(to_string(dataset));
            sample.scale = options.scales[s];
            sample.mask = std::string(to_string(mask.kind));
            sample.strategy = std::string(to_string(strategy));
            sample.batch = b;
            sample.sequences = static_cast<std::int32_t>(batch.size());
            for (const PlanCandidate& c : built.selection.candidates) {
              sample.static_built += c.strategy != "dcp" && c.feasible && !c.bounded ? 1 : 0;
            }
            sample.kept = strategy == Strategy::kDcp ? built.selection.kept : "";
            line_ms.push_back(sample.plan_ms);
            samples.push_back(sample);
          }
        }
        progress << "planning " << shape_name(shape) << " " << to_string(dataset) << " "
                 << to_string(mask.kind) << ": " << line_ms.size() / 2 << " batches, median "
                 << format_fixed(median_of(line_ms), 0) << " ms\n"
                 << std::flush;
      }
    }
  }
  return samples;
}

std::string planning_samples_json(const std::vector<PlanningSample>& samples) {
  JsonWriter json;
  json.begin_array();
  for (const PlanningSample& s : samples) {
    JsonWriter::Inline one_line(json);
    json.begin_object();
    json.field("nodes", s.shape.nodes).field("devices_per_node", s.shape.devices_per_node);
    json.field("dataset", s.dataset).field("scale", s.scale).field("mask", s.mask);
    json.field("strategy", s.strategy).field("batch", s.batch).field("sequences", s.sequences);
    json.field("plan_ms", s.plan_ms).field("static_built", s.static_built);
    if (!s.kept.empty()) json.field("kept", s.kept);
    json.end_object();
  }
  json.end_array();
  return json.str() + "\n";
}

std::string planning_markdown(const PlanningOptions& options,
                              const std::vector<PlanningSample>& samples,
                              const std::string& command) {
  std::string md = "# Planning time\n\nWritten by `" + command + "`.\n\n";
  md += "Wall-clock ms to plan one " + std::to_string(options.tokens) +
        "-token batch on one thread: the workload's blocks and masks, then dcp's own plan at "
        "block sizes 1024, 2048 and 4096 and, where one of at most 8 sequences holds half the "
        "tokens or there are at most 4 under a dense mask such as causal, on the "
        "hybrid and loongtrain layouts (placement, schedules, compilation and simulation "
        "each, the fastest kept) and, for `dcp`, pricing and screening the static strategies "
        "and simulating the candidates left; on `" +
        options.cluster.name + "` shapes, " + std::to_string(options.batches) +
        " batches per dataset and mask, round-robin over the length scales";
  for (std::size_t i = 0; i < options.scales.size(); ++i) {
    md += (i ? ", ×" : " ×") + format_fixed(options.scales[i], options.scales[i] < 1 ? 1 : 0);
  }
  md += " (seed " + std::to_string(options.seed) +
        "). Static candidates built: per batch, the static strategies whose layout `dcp` built "
        "because the lower bound of their estimate did not rule them out.\n\n";
  // Per (shape, strategy) over everything, then per (shape, dataset, mask, strategy).
  using Key = std::tuple<std::int32_t, std::int32_t, std::string, std::string, std::string>;
  std::map<Key, std::vector<double>> ms;
  std::map<Key, std::vector<double>> built;
  for (const PlanningSample& s : samples) {
    for (const bool all : {true, false}) {
      const Key key{s.shape.nodes, s.shape.devices_per_node, all ? "all" : s.dataset,
                    all ? "all" : s.mask, s.strategy};
      ms[key].push_back(s.plan_ms);
      built[key].push_back(s.static_built);
    }
  }
  md +=
      "| devices | dataset | mask | strategy | batches | median ms | p90 ms | max ms | static "
      "candidates built (mean) |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const bool all : {true, false}) {
    for (const auto& [key, values] : ms) {
      const auto& [nodes, per_node, dataset, mask, strategy] = key;
      if ((dataset == "all") != all) continue;
      double mean_built = 0;
      for (const double b : built.at(key)) mean_built += b / static_cast<double>(values.size());
      md += "| " + shape_name({nodes, per_node}) + " | " + dataset + " | " + mask + " | " +
            strategy + " | " + std::to_string(values.size()) + " | " + distribution_row(values) +
            " | " + (strategy == "dcp" ? format_fixed(mean_built, 1) : std::string("—")) + " |\n";
    }
  }
  return md;
}

}  // namespace dcp::suites

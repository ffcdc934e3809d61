// SPDX-License-Identifier: Apache-2.0
// The hybrid-attention suite: dcp's plan of every kind on one token placement against a placement
// per kind with re-dispatch, one mask's placement for every layer, and the static strategies.
#include "apps/suites/kinds_suite.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/json_writer.h"
#include "dcp/core/timing.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/cluster.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/tensor.h"
#include "dcp/model/workload.h"

#include "dcp/planner/baselines/static_plans.h"
#include "dcp/planner/model_plan_builder.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/program/model_plan.h"
#include "dcp/program/program.h"
#include "dcp/runtime/batch_tensors.h"
#include "dcp/selection/model_plan_search.h"
#include "dcp/selection/plan_search.h"
#include "dcp/sim/model_simulation.h"
#include "dcp/sim/network.h"
#include "dcp/sim/simulator.h"

#include "apps/suites/reports.h"
#include "apps/suites/suite_jobs.h"

namespace dcp::suites {
namespace {

// How many times each batch's two plans (of every kind, of the first kind's mask alone) are timed.
constexpr int kPlanTimings = 2;

KindModel interleaved(std::string name, TokenCount window, std::int32_t local_per_full,
                      std::int32_t layer_count) {
  KindModel model;
  model.name = std::move(name);
  model.kind_names = {"full", "sliding"};
  MaskSpec sliding;
  sliding.kind = MaskKind::kSlidingWindow;
  sliding.window = window;
  model.kind_masks = {MaskSpec{}, sliding};
  for (std::int32_t layer = 0; layer < layer_count; ++layer) {
    model.layer_kinds.push_back(layer % (local_per_full + 1) == local_per_full ? 0 : 1);
  }
  return model;
}

// The plan options every plan of the suite starts from: the automatic block sizes' sweep.
PlanOptions suite_options(Strategy strategy, const KindsOptions& options) {
  PlanOptions plan_options;
  plan_options.strategy = strategy;
  plan_options.cluster = options.cluster;
  plan_options.seed = options.seed;
  sweep_block_sizes_when_automatic(plan_options, true);
  return plan_options;
}

double step_seconds(const ModelPlan& plan, const ClusterSpec& cluster) {
  return sim::simulate(plan, cluster).step_seconds;
}

}  // namespace

std::vector<std::int32_t> KindModel::layers() const {
  std::vector<std::int32_t> counts(kind_names.size(), 0);
  for (const std::int32_t kind : layer_kinds) ++counts[static_cast<std::size_t>(kind)];
  return counts;
}

std::int32_t KindModel::kind_changes() const {
  std::int32_t changes = 0;
  for (std::size_t i = 1; i < layer_kinds.size(); ++i)
    changes += layer_kinds[i] != layer_kinds[i - 1];
  return changes;
}

std::vector<KindModel> default_kind_models() {
  return {interleaved("gemma3-w1024", 1024, 5, 48), interleaved("gemma3-w4096", 4096, 5, 48),
          interleaved("alternating-w128", 128, 1, 48)};
}

double KindsRecord::best_baseline_ms() const {
  return std::min({redispatch_ms, one_mask_ms, static_ms});
}

std::string KindsRecord::best_baseline() const {
  const double best = best_baseline_ms();
  if (best == redispatch_ms) return "redispatch";
  if (best == one_mask_ms) return "one_mask";
  return static_strategy;
}

std::vector<DeviceId> token_devices(const Plan& plan) {
  const std::vector<TokenCount> lengths = runtime::plan_sequence_lengths(plan);
  std::vector<TokenCount> offsets(lengths.size() + 1, 0);
  for (std::size_t s = 0; s < lengths.size(); ++s) offsets[s + 1] = offsets[s] + lengths[s];
  std::vector<DeviceId> device(static_cast<std::size_t>(offsets.back()), -1);
  for (const Program& program : plan.forward) {
    for (const BlockId id : program.owned) {
      const auto it =
          std::lower_bound(program.blocks.begin(), program.blocks.end(), id,
                           [](const BlockInfo& b, BlockId value) { return b.id < value; });
      const TokenCount begin = offsets[static_cast<std::size_t>(it->seq)] + it->begin;
      std::fill_n(device.begin() + begin, it->tokens, program.device);
    }
  }
  return device;
}

double redistribution_seconds(const std::vector<DeviceId>& from, const std::vector<DeviceId>& to,
                              std::int64_t bytes_per_token, const ClusterSpec& cluster) {
  const auto devices = static_cast<std::size_t>(cluster.shape.devices());
  if (from.size() != to.size()) {
    throw InvalidInput(
        "a redistribution needs both placements of every token: " + std::to_string(from.size()) +
        " and " + std::to_string(to.size()) + " devices given");
  }
  for (const auto* placed : {&from, &to}) {
    for (const DeviceId d : *placed) {
      if (d < 0 || static_cast<std::size_t>(d) >= devices) {
        throw InvalidInput("device " + std::to_string(d) + " is not in the cluster's " +
                           std::to_string(devices));
      }
    }
  }
  std::vector<std::int64_t> bytes(devices * devices, 0);
  for (std::size_t t = 0; t < from.size(); ++t) {
    if (from[t] == to[t]) continue;
    bytes[static_cast<std::size_t>(from[t]) * devices + static_cast<std::size_t>(to[t])] +=
        bytes_per_token;
  }
  return sim::exchange_seconds(bytes, cluster);
}

std::vector<KindsRecord> run_kinds_suite(const KindsOptions& options, std::ostream& progress) {
  const std::vector<SampledBatch> batches = sample_configurations(
      options.datasets, options.scales, 1, options.batches, options.tokens, options.seed);
  const std::size_t per_model = batches.size();
  std::vector<KindsRecord> records(options.models.size() * per_model);
  run_jobs(records.size(), options.threads, progress, [&](std::size_t j) {
    const KindModel& model = options.models[j / per_model];
    const SampledBatch& sampled = batches[j % per_model];
    const std::vector<std::int32_t> layers = model.layers();
    // Every kind cut as the first kind's automatic block size cuts it (the search re-cuts).
    std::vector<KindWorkload> kinds;
    for (std::size_t k = 0; k < model.kind_names.size(); ++k) {
      Workload workload =
          suite_workload(sampled, options.shape, model.kind_masks[k], options.cluster);
      if (k > 0) workload = reblocked(workload, kinds.front().workload.blocks().block_size());
      kinds.push_back({model.kind_names[k], layers[k], std::move(workload)});
    }
    KindsRecord& record = records[j];
    record.model = model.name;
    record.dataset = std::string(to_string(options.datasets[sampled.dataset]));
    record.scale = options.scales[sampled.scale];
    record.batch = sampled.batch;
    record.sequences = static_cast<std::int32_t>(sampled.lengths.size());
    const PlanOptions dcp_options = suite_options(Strategy::kDcp, options);

    auto start = Clock::now();
    const BuiltModelPlan dcp = build_model_plan(kinds, dcp_options);
    record.plan_ms = ms_since(start);
    record.dcp_ms = step_seconds(dcp.plan, options.cluster) * 1e3;
    record.dcp_kept = dcp.kept;

    start = Clock::now();
    const BuiltPlan first = build_plan(kinds.front().workload, dcp_options);
    record.one_mask_plan_ms = ms_since(start);
    // Both planned again, alternating, each keeping its faster time (planning is deterministic:
    // the same plans): a machine's speed drifts by a tenth within a run, on one timing of each.
    for (int again = 1; again < kPlanTimings; ++again) {
      start = Clock::now();
      build_model_plan(kinds, dcp_options);
      record.plan_ms = std::min(record.plan_ms, ms_since(start));
      start = Clock::now();
      build_plan(kinds.front().workload, dcp_options);
      record.one_mask_plan_ms = std::min(record.one_mask_plan_ms, ms_since(start));
    }

    // A placement per kind, re-dispatched wherever consecutive layers change kind.
    ModelPlan per_kind;
    per_kind.kinds.push_back({kinds[0].name, kinds[0].layers, first.plan});
    for (std::size_t k = 1; k < kinds.size(); ++k) {
      per_kind.kinds.push_back(
          {kinds[k].name, kinds[k].layers, build_plan(kinds[k].workload, dcp_options).plan});
    }
    std::vector<std::vector<DeviceId>> placed;
    for (const KindPlan& kind : per_kind.kinds) placed.push_back(token_devices(kind.plan));
    const std::int64_t hidden_bytes = static_cast<std::int64_t>(options.shape.q_heads) *
                                      options.shape.head_dim * bytes_of(options.shape.dtype);
    double moves = 0;
    for (std::size_t i = 1; i < model.layer_kinds.size(); ++i) {
      const auto a = static_cast<std::size_t>(model.layer_kinds[i - 1]);
      const auto b = static_cast<std::size_t>(model.layer_kinds[i]);
      if (a == b) continue;
      // Forward: the hidden states go to the next layer's placement; backward: their gradients
      // come back.
      moves += redistribution_seconds(placed[a], placed[b], hidden_bytes, options.cluster) +
               redistribution_seconds(placed[b], placed[a], hidden_bytes, options.cluster);
    }
    record.redispatch_moves_ms = moves * 1e3;
    record.redispatch_ms =
        step_seconds(per_kind, options.cluster) * 1e3 + record.redispatch_moves_ms;

    record.one_mask_ms =
        step_seconds(build_on_base(first, 0, kinds, dcp_options, false).plan, options.cluster) *
        1e3;

    record.static_ms = std::numeric_limits<double>::infinity();
    for (const Strategy strategy : kStaticStrategies) {
      if (strategy == Strategy::kTe) continue;  // sliding windows: all-to-all only, as ulysses
      try {
        const BuiltModelPlan built = build_one_model_plan(kinds, suite_options(strategy, options));
        const double ms = step_seconds(built.plan, options.cluster) * 1e3;
        if (ms < record.static_ms) {
          record.static_ms = ms;
          record.static_strategy = std::string(to_string(strategy));
        }
      } catch (const InvalidInput&) {
        // The strategy cannot run on the cluster (hybrid with too few heads, say).
      }
    }
    char line[320];
    std::snprintf(line, sizeof line,
                  "%s %s x%g batch %d: dcp %.2f ms, redispatch %.2f, one mask %.2f, %s %.2f; "
                  "plan %.0f ms (one mask %.0f)",
                  record.model.c_str(), record.dataset.c_str(), record.scale, record.batch,
                  record.dcp_ms, record.redispatch_ms, record.one_mask_ms,
                  record.static_strategy.c_str(), record.static_ms, record.plan_ms,
                  record.one_mask_plan_ms);
    return std::string(line);
  });
  return records;
}

std::string kinds_records_json(const std::vector<KindsRecord>& records) {
  JsonWriter json;
  json.begin_array();
  for (const KindsRecord& r : records) {
    json.begin_object();
    json.field("model", std::string_view(r.model));
    json.field("dataset", std::string_view(r.dataset));
    json.field("scale", r.scale);
    json.field("batch", std::int64_t{r.batch});
    json.field("sequences", std::int64_t{r.sequences});
    json.field("dcp_ms", r.dcp_ms);
    json.field("dcp_kept", std::string_view(r.dcp_kept));
    json.field("redispatch_ms", r.redispatch_ms);
    json.field("redispatch_moves_ms", r.redispatch_moves_ms);
    json.field("one_mask_ms", r.one_mask_ms);
    json.field("static_ms", r.static_ms);
    json.field("static_strategy", std::string_view(r.static_strategy));
    json.field("plan_ms", r.plan_ms);
    json.field("one_mask_plan_ms", r.one_mask_plan_ms);
    json.end_object();
  }
  json.end_array();
  return json.str() + "\n";
}

std::string kinds_markdown(const KindsOptions& options, const std::vector<KindsRecord>& records,
                           const std::string& command) {
  std::string md = "# Hybrid-attention models (simulated)\n\n";
  md += "Reproduce with:\n\n```sh\n" + command + "\n```\n\n";
  md += "Simulated on " + options.cluster.name + " at " +
        std::to_string(options.cluster.shape.nodes) + " x " +
        std::to_string(options.cluster.shape.devices_per_node) + " devices; " +
        std::to_string(options.tokens) + "-token batches, " + std::to_string(options.batches) +
        " per dataset and length scale; " + std::to_string(options.shape.q_heads) + "/" +
        std::to_string(options.shape.kv_heads) + " heads, head dim " +
        std::to_string(options.shape.head_dim) + ", " +
        std::string(to_string(options.shape.dtype)) +
        ". Times are the attention of one training step: the sum over layers of the forward and "
        "backward pass. Planning: each batch's plan of every kind and its plan of the full layers' "
        "mask alone, timed " +
        std::to_string(kPlanTimings) + " times, alternating, the faster of each kept.\n\n";
  md +=
      "- **dcp**: one token placement for every kind, each kind's work placed and balanced on "
      "its own (`build_model_plan`).\n"
      "- **redispatch**: dcp's plan of each kind's mask alone, the hidden states (q heads x head "
      "dim per token) moved between the placements by all-to-all wherever consecutive layers "
      "change kind, forward and backward; each all-to-all priced by the simulator's network as "
      "dcp's own transfers are (launch set-up, latency, shared links, stream rates).\n"
      "- **one mask**: dcp planned for the full layers' mask alone, its placement run for every "
      "layer.\n"
      "- **static**: the fastest of ring, zigzag, ulysses, hybrid and loongtrain run for every "
      "layer (TransformerEngine runs sliding windows with all-to-all only: ulysses).\n\n";
  bool every_batch = true;
  std::vector<double> all_speedups, all_plan_ratios;
  std::string targets;
  for (const KindModel& model : options.models) {
    std::vector<const KindsRecord*> mine;
    for (const KindsRecord& r : records) {
      if (r.model == model.name) mine.push_back(&r);
    }
    if (mine.empty()) continue;
    const std::vector<std::int32_t> layers = model.layers();
    md += "## " + model.name + "\n\n";
    for (std::size_t k = 0; k < model.kind_names.size(); ++k) {
      md += std::string(k == 0 ? "" : ", ") + std::to_string(layers[k]) + " " +
            model.kind_names[k] + " layers (`" + to_string(model.kind_masks[k]) + "`)";
    }
    md += "; " + std::to_string(model.kind_changes()) + " changes of kind between layers.\n\n";
    md +=
        "| dataset | scale | dcp ms | redispatch ms | one mask ms | static ms | speedup over the "
        "best baseline (median / min) | planning / one-mask planning (median) |\n"
        "|---|---|---|---|---|---|---|---|\n";
    std::map<std::pair<std::string, double>, std::vector<const KindsRecord*>> cells;
    std::vector<std::pair<std::string, double>> order;
    for (const KindsRecord* r : mine) {
      const auto key = std::make_pair(r->dataset, r->scale);
      if (cells[key].empty()) order.push_back(key);
      cells[key].push_back(r);
    }
    std::vector<double> model_speedups, model_ratios;
    for (const auto& key : order) {
      std::vector<double> dcp, redispatch, one, stat, speedup, ratio;
      std::map<std::string, int> statics;
      for (const KindsRecord* r : cells[key]) {
        dcp.push_back(r->dcp_ms);
        redispatch.push_back(r->redispatch_ms);
        one.push_back(r->one_mask_ms);
        stat.push_back(r->static_ms);
        ++statics[r->static_strategy];
        speedup.push_back(r->best_baseline_ms() / r->dcp_ms);
        ratio.push_back(r->plan_ms / r->one_mask_plan_ms);
        every_batch = every_batch && r->dcp_ms <= r->best_baseline_ms() * (1 + 1e-9);
      }
      model_speedups.insert(model_speedups.end(), speedup.begin(), speedup.end());
      model_ratios.insert(model_ratios.end(), ratio.begin(), ratio.end());
      std::string names;
      for (const auto& [name, count] : statics) names += (names.empty() ? "" : ", ") + name;
      md += "| " + key.first + " | " + format_scale(key.second) + " | " +
            format_fixed(median_of(dcp), 2) + " | " + format_fixed(median_of(redispatch), 2) +
            " | " + format_fixed(median_of(one), 2) + " | " + format_fixed(median_of(stat), 2) +
            " (" + names + ") | " + format_fixed(median_of(speedup), 2) + " / " +
            format_fixed(*std::min_element(speedup.begin(), speedup.end()), 2) + " | " +
            format_fixed(median_of(ratio), 2) + " |\n";
    }
    const double median = median_of(model_speedups);
    const double worst = *std::min_element(model_speedups.begin(), model_speedups.end());
    md += "\nOver its " + std::to_string(mine.size()) +
          " batches: speedup over the best baseline " + format_fixed(median, 2) + " median, " +
          format_fixed(worst, 2) + " minimum; planning " +
          format_fixed(median_of(model_ratios), 2) +
          " x the one-mask "
          "plan's median, " +
          format_fixed(*std::max_element(model_ratios.begin(), model_ratios.end()), 2) +
          " x at most.\n\n";
    targets +=
        "- " + model.name + ": median speedup " + format_fixed(median, 2) +
        (median >= 1.2 ? " (met: at least 1.2)" : " (**missed**: below 1.2)") +
        "; planning median " + format_fixed(median_of(model_ratios), 2) + " x" +
        (median_of(model_ratios) <= 1.5 ? " (met: at most 1.5)" : " (**missed**: above 1.5)") +
        "\n";
    all_speedups.insert(all_speedups.end(), model_speedups.begin(), model_speedups.end());
    all_plan_ratios.insert(all_plan_ratios.end(), model_ratios.begin(), model_ratios.end());
  }
  md += "## Targets\n\n";
  md += std::string("- dcp at least the best baseline on every batch: ") +
        (every_batch ? "met" : "**missed**") + "\n" + targets;
  return md;
}

}  // namespace dcp::suites

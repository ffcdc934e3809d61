// SPDX-License-Identifier: Apache-2.0
// The simulator against reality: real runs on local ranks (the CPU runtime) next to the
// simulator's prediction under a cluster spec measured on this machine (cpu-local).
#include "apps/suites/calibration_suite.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/timing.h"

#include "dcp/model/cluster.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/sequence_batch.h"
#include "dcp/model/workload.h"

#include "dcp/data/batch_packing.h"

#include "dcp/planner/baselines/static_plans.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/runtime/batch_tensors.h"
#include "dcp/runtime/dense_reference.h"
#include "dcp/runtime/distributed_run.h"
#include "dcp/selection/plan_search.h"
#include "dcp/sim/model_simulation.h"
#include "dcp/sim/simulator.h"
#include "dcp/workload_builder.h"

#include "apps/suites/reports.h"

namespace dcp::suites {
namespace {

// The q-th quantile (0..1) of absolute errors, by the nearest rank.
double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto index =
      static_cast<std::size_t>(std::clamp(std::ceil(q * static_cast<double>(values.size())) - 1,
                                          0.0, static_cast<double>(values.size() - 1)));
  return values[index];
}

std::vector<double> abs_errors(const std::vector<CalibrationSample>& samples) {
  std::vector<double> errors;
  for (const CalibrationSample& s : samples) errors.push_back(std::abs(s.error()));
  return errors;
}

}  // namespace

std::vector<CalibrationSample> run_calibration_suite(const CalibrationSuiteOptions& options,
                                                     std::ostream& progress) {
  PackingOptions packing;
  packing.tokens_per_batch = options.tokens;
  const std::vector<std::vector<TokenCount>> batches = sample_batches(
      options.dataset, static_cast<std::size_t>(options.batches), packing, options.seed);
  std::vector<CalibrationSample> samples;
  const auto start = Clock::now();
  const std::size_t total = batches.size() * options.masks.size() * options.strategies.size();
  std::size_t done = 0;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const SequenceBatch batch(batches[b]);
    for (const MaskSpec& mask : options.masks) {
      WorkloadOptions workload_options;
      workload_options.auto_block.devices = options.cluster.shape.devices();
      const Workload workload =
          make_workload(options.shape, batch, build_batch_mask(mask, batch), workload_options)
              .workload;
      const runtime::BatchInputs inputs =
          runtime::random_inputs(runtime::batch_shape_of(workload), options.seed + b);
      for (const Strategy strategy : options.strategies) {
        PlanOptions plan_options;
        plan_options.strategy = strategy;
        plan_options.cluster = options.cluster;
        plan_options.seed = options.seed;
        const BuiltPlan built = build_plan(workload, plan_options);
        const sim::PlanSimulation predicted = sim::simulate(built.plan, options.cluster);
        runtime::RunOptions run_options;
        run_options.kernel_threads = 1;  // one rank per core, as the constants were measured
        const runtime::RunResult measured =
            runtime::run_plan_locally(built.plan, batch.offsets(), inputs, run_options);
        const std::string mask_name(to_string(mask.kind));
        const std::string strategy_name(to_string(strategy));
        samples.push_back({mask_name, strategy_name, static_cast<std::int32_t>(b), "forward",
                           measured.forward_seconds * 1e3, predicted.forward.seconds * 1e3});
        samples.push_back({mask_name, strategy_name, static_cast<std::int32_t>(b), "backward",
                           measured.backward_seconds * 1e3, predicted.backward.seconds * 1e3});
        ++done;
        char line[200];
        std::snprintf(line, sizeof line,
                      "[%zu/%zu %.0f s] batch %zu %s %s: forward %.1f ms measured, %.1f "
                      "simulated; backward %.1f measured, %.1f simulated\n",
                      done, total, ms_since(start) / 1e3, b, mask_name.c_str(),
                      strategy_name.c_str(), measured.forward_seconds * 1e3,
                      predicted.forward.seconds * 1e3, measured.backward_seconds * 1e3,
                      predicted.backward.seconds * 1e3);
        progress << line << std::flush;
      }
    }
  }
  return samples;
}

std::string calibration_markdown(const CalibrationSuiteOptions& options,
                                 const std::vector<CalibrationSample>& samples,
                                 const std::string& command) {
  const ClusterSpec& cluster = options.cluster;
  std::string md = "# Simulator calibration against measured runs\n\n";
  md += "Written by `" + command + "`.\n\n";
  md +=
      "Each sample: one batch, mask and strategy, planned for `" + cluster.name + "` (" +
      std::to_string(cluster.shape.nodes) + " × " + std::to_string(cluster.shape.devices_per_node) +
      " local ranks, one kernel thread each), executed forward and backward with the CPU "
      "runtime (the slowest rank's pass time after a barrier) and simulated under the same "
      "spec. " +
      std::to_string(options.tokens) + "-token " + std::string(to_string(options.dataset)) +
      " batches, " + std::to_string(options.shape.q_heads) + "/" +
      std::to_string(options.shape.kv_heads) + " heads, head dim " +
      std::to_string(options.shape.head_dim) + ", " + std::string(to_string(options.shape.dtype)) +
      ". Error = (simulated − measured) / "
      "measured.\n\n";
  const std::vector<double> errors = abs_errors(samples);
  md += "| samples | median |error| | p90 | worst | mean signed error |\n|---|---|---|---|---|\n";
  double signed_sum = 0;
  for (const CalibrationSample& s : samples) signed_sum += s.error();
  md += "| " + std::to_string(samples.size()) + " | " +
        format_fixed(100 * quantile(errors, 0.5), 1) + " % | " +
        format_fixed(100 * quantile(errors, 0.9), 1) + " % | " +
        format_fixed(100 * quantile(errors, 1.0), 1) + " % | " +
        format_fixed(samples.empty() ? 0 : 100 * signed_sum / static_cast<double>(samples.size()),
                     1) +
        " % |\n\n";
  md += "Target: median ≤ 15 %, worst ≤ 30 %.\n\n";
  md +=
      "| batch | mask | strategy | pass | measured ms | simulated ms | error |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const CalibrationSample& s : samples) {
    md += "| " + std::to_string(s.batch) + " | " + s.mask + " | " + s.strategy + " | " + s.pass +
          " | " + format_fixed(s.measured_ms, 1) + " | " + format_fixed(s.simulated_ms, 1) + " | " +
          format_fixed(100 * s.error(), 1) + " % |\n";
  }
  return md;
}

}  // namespace dcp::suites

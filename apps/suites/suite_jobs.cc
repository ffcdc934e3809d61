// SPDX-License-Identifier: Apache-2.0
// The bench suites' jobs (run in parallel, one progress line each as it finishes) and the figures
// of a plan they report.
#include "apps/suites/suite_jobs.h"

#include <cstdio>
#include <mutex>

#include "dcp/core/ids.h"
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
#include "dcp/planner/placement/placement.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/program/program.h"
#include "dcp/program/program_stats.h"
#include "dcp/sim/model_simulation.h"
#include "dcp/sim/simulator.h"
#include "dcp/workload_builder.h"

#include "apps/suites/reports.h"

namespace dcp::suites {

void run_jobs(std::size_t count, int threads, std::ostream& progress,
              const std::function<std::string(std::size_t)>& job) {
  std::mutex progress_mutex;
  std::size_t done = 0;
  const auto start = Clock::now();
  ThreadPool pool(threads);
  pool.parallel_for(count, [&](std::size_t j, int) {
    const std::string line = job(j);
    const std::lock_guard<std::mutex> lock(progress_mutex);
    char head[64];
    std::snprintf(head, sizeof head, "[%zu/%zu %.0f s] ", ++done, count, ms_since(start) / 1e3);
    progress << head << line << "\n" << std::flush;
  });
}

std::vector<SampledBatch> sample_configurations(const std::vector<LengthDistributionKind>& datasets,
                                                const std::vector<double>& scales,
                                                std::size_t masks, std::int32_t batches,
                                                TokenCount tokens, std::uint64_t seed) {
  std::vector<SampledBatch> sampled;
  for (std::size_t d = 0; d < datasets.size(); ++d) {
    for (std::size_t s = 0; s < scales.size(); ++s) {
      PackingOptions packing;
      packing.tokens_per_batch = tokens;
      packing.scale = scales[s];
      const std::vector<std::vector<TokenCount>> lengths =
          sample_batches(datasets[d], static_cast<std::size_t>(batches), packing, seed);
      for (std::size_t m = 0; m < masks; ++m) {
        for (std::size_t b = 0; b < lengths.size(); ++b) {
          sampled.push_back({d, s, m, static_cast<std::int32_t>(b), lengths[b]});
        }
      }
    }
  }
  return sampled;
}

std::string sampled_name(const SampledBatch& sampled,
                         const std::vector<LengthDistributionKind>& datasets,
                         const std::vector<double>& scales, const std::vector<MaskSpec>& masks) {
  return std::string(to_string(datasets[sampled.dataset])) + " " +
         format_scale(scales[sampled.scale]) + " " +
         std::string(to_string(masks[sampled.mask].kind)) + " batch " +
         std::to_string(sampled.batch);
}

Workload suite_workload(const SampledBatch& sampled, const AttentionShape& shape,
                        const MaskSpec& mask, const ClusterSpec& cluster) {
  const SequenceBatch batch(sampled.lengths);
  WorkloadOptions options;
  options.auto_block.devices = cluster.shape.devices();
  return make_workload(shape, batch, build_batch_mask(mask, batch), options).workload;
}

PlanOptions reference_stand_in_options(std::uint64_t seed) {
  PlanOptions options;
  options.seed = seed;
  options.strategy = Strategy::kDcpPure;
  options.schedule.own_outputs_last = false;
  return options;
}

PlanFigures plan_figures(const BuiltPlan& built, const ClusterSpec& cluster) {
  PlanFigures figures;
  const sim::PlanSimulation simulation = sim::simulate(built.plan, cluster);
  figures.seconds[0] = simulation.forward.seconds;
  figures.seconds[1] = simulation.backward.seconds;
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    const PassTraffic traffic = pass_traffic(built.plan.header, built.plan.programs(pass));
    const int p = pass == Pass::kForward ? 0 : 1;
    figures.inter[p] = static_cast<double>(traffic.inter_node);
    figures.intra[p] = static_cast<double>(traffic.intra_node);
  }
  figures.imbalance = evaluate(built.workload, built.placement).imbalance_compute;
  return figures;
}

}  // namespace dcp::suites

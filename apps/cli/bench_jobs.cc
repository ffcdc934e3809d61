// SPDX-License-Identifier: Apache-2.0
// The bench suites' jobs (run in parallel, one progress line each as it finishes) and the figures
// of a plan they report.
#include <cstdio>
#include <mutex>

#include "dcp/core/thread_pool.h"
#include "dcp/core/timing.h"

#include "apps/cli/bench_suites.h"

namespace dcp::cli {

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

}  // namespace dcp::cli

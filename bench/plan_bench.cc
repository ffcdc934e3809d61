// SPDX-License-Identifier: Apache-2.0
// Whole-plan time over many realistic batches: workload, partition, forward and backward
// schedules, compile; plus the estimated pass times and bytes of every strategy, side by side.
// Every plan is verified (not timed). One core: the planner is single-threaded.
//
//   build/release/bench/dcp_plan_bench [--batches N] [--dists ldc] [--masks causal,...]
//       [--cluster a100-p4de] [--nodes 4] [--devices-per-node 8] [--block-size 1024]
//       [--strategies dcp,ring,zigzag,ulysses,hybrid,te,loongtrain]
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/parse.h"
#include "dcp/core/timing.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/cluster.h"
#include "dcp/model/cluster_file.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/sequence_batch.h"
#include "dcp/model/workload.h"

#include "dcp/data/batch_packing.h"
#include "dcp/data/length_distribution.h"

#include "dcp/planner/baselines/static_plans.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/program/program.h"
#include "dcp/program/program_stats.h"
#include "dcp/program/verifier/verifier.h"
#include "dcp/selection/plan_search.h"

#include "bench/bench_main.h"
#include "bench/bench_stats.h"

namespace dcp {
namespace {

using bench::quantile;

int run(int argc, char** argv) {
  std::int64_t batches = 20;
  std::string dists = "ldc";
  std::string masks = "causal,lambda,shared_question,causal_blockwise";
  std::string strategies = "dcp,ring,zigzag,ulysses,hybrid,te,loongtrain";
  std::string cluster_name = "a100-p4de";
  std::int32_t nodes = 4, per_node = 8;
  TokenCount block_size = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--batches")
      batches = parse_int(value, flag);
    else if (flag == "--dists")
      dists = value;
    else if (flag == "--masks")
      masks = value;
    else if (flag == "--strategies")
      strategies = value;
    else if (flag == "--cluster")
      cluster_name = value;
    else if (flag == "--nodes")
      nodes = static_cast<std::int32_t>(parse_int(value, flag));
    else if (flag == "--devices-per-node")
      per_node = static_cast<std::int32_t>(parse_int(value, flag));
    else if (flag == "--block-size")
      block_size = parse_int(value, flag);
    else
      throw InvalidInput("unknown flag " + quoted(flag));
  }
  ClusterSpec cluster = resolve_cluster(cluster_name);
  cluster.shape = {nodes, per_node};
  validate(cluster);
  std::printf(
      "%lld batches of 131072 tokens per row, %s %d x %d devices, B = %lld, 8 q heads, "
      "2 kv heads, d = 128, bf16; one core\n\n",
      static_cast<long long>(batches), cluster.name.c_str(), nodes, per_node,
      static_cast<long long>(block_size));
  std::printf("Planning time of dcp, ms: median (p90, max)\n\n");
  std::printf(
      "| dataset | mask | workload | partition | schedule fwd | schedule bwd | compile | "
      "total | stages fwd/bwd |\n|---|---|---|---|---|---|---|---|---|\n");
  std::string second_table =
      "\nEstimated pass time under the cost model, ms (median), and inter-node MB per pass "
      "(median), every strategy\n\n| dataset | mask | pass |";
  const auto strategy_list = split(strategies, ',');
  for (const auto s : strategy_list) second_table += " " + std::string(s) + " |";
  second_table += " dcp inter MB | zigzag inter MB | best static / dcp |\n|---|---|---|";
  for (std::size_t i = 0; i < strategy_list.size() + 3; ++i) second_table += "---|";
  second_table += "\n";
  for (const std::string_view dist : split(dists, ',')) {
    const auto lengths = sample_batches(parse_length_distribution(dist),
                                        static_cast<std::size_t>(batches), PackingOptions{}, 0);
    for (const std::string_view mask : split(masks, ',')) {
      const MaskSpec spec = parse_mask_spec(mask);
      std::vector<double> t_workload, t_partition, t_fwd, t_bwd, t_compile, t_total;
      std::vector<double> stages_f, stages_b;
      std::map<std::string, std::vector<double>> est[2], inter[2];
      std::vector<double> advantage[2];
      for (const auto& batch_lengths : lengths) {
        const auto start = Clock::now();
        const SequenceBatch batch(batch_lengths);
        const Workload workload(AttentionShape{}, batch, build_batch_mask(spec, batch), block_size,
                                1);
        const double workload_ms = ms_since(start);
        double best_static[2] = {1e300, 1e300}, dcp_time[2] = {0, 0};
        for (const auto name : strategy_list) {
          PlanOptions options;
          options.strategy = parse_strategy(name);
          options.cluster = cluster;
          std::optional<BuiltPlan> maybe;
          try {
            maybe.emplace(build_plan(workload, options));
          } catch (const InvalidInput&) {
            if (options.strategy == Strategy::kDcp) throw;
            continue;  // a static strategy that cannot run here (Ulysses: devices > heads)
          }
          const BuiltPlan& built = *maybe;
          const VerifyReport report = verify(built.plan);
          if (!report.ok) throw Error(std::string(name) + ": " + describe(report));
          const ScheduleSummary* passes[2] = {&built.forward, &built.backward};
          for (int p = 0; p < 2; ++p) {
            const double ms = passes[p]->estimate.seconds * 1e3;
            est[p][std::string(name)].push_back(ms);
            const PassTraffic traffic = pass_traffic(
                built.plan.header, built.plan.programs(p == 0 ? Pass::kForward : Pass::kBackward));
            inter[p][std::string(name)].push_back(static_cast<double>(traffic.inter_node) / 1e6);
            if (options.strategy == Strategy::kDcp)
              dcp_time[p] = ms;
            else
              best_static[p] = std::min(best_static[p], ms);
          }
          if (options.strategy != Strategy::kDcp) continue;
          t_workload.push_back(workload_ms);
          t_partition.push_back(built.timings.partition_ms);
          t_fwd.push_back(built.timings.schedule_forward_ms);
          t_bwd.push_back(built.timings.schedule_backward_ms);
          t_compile.push_back(built.timings.compile_ms);
          t_total.push_back(workload_ms + built.timings.total_ms);
          stages_f.push_back(built.forward.stages);
          stages_b.push_back(built.backward.stages);
        }
        for (int p = 0; p < 2; ++p) {
          if (dcp_time[p] > 0 && best_static[p] < 1e300) {
            advantage[p].push_back(best_static[p] / dcp_time[p]);
          }
        }
      }
      const auto cell = [](const std::vector<double>& v) {
        char buffer[64];
        std::snprintf(buffer, sizeof buffer, "%.1f (%.1f, %.1f)", quantile(v, 0.5),
                      quantile(v, 0.9), quantile(v, 1.0));
        return std::string(buffer);
      };
      if (!t_total.empty()) {
        std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %.0f/%.0f |\n",
                    std::string(dist).c_str(), std::string(mask).c_str(), cell(t_workload).c_str(),
                    cell(t_partition).c_str(), cell(t_fwd).c_str(), cell(t_bwd).c_str(),
                    cell(t_compile).c_str(), cell(t_total).c_str(), quantile(stages_f, 0.5),
                    quantile(stages_b, 0.5));
        std::fflush(stdout);
      }
      for (int p = 0; p < 2; ++p) {
        char buffer[128];
        second_table += "| " + std::string(dist) + " | " + std::string(mask) + " | " +
                        (p == 0 ? "fwd" : "bwd") + " |";
        for (const auto name : strategy_list) {
          const auto& values = est[p][std::string(name)];
          if (values.empty()) {
            second_table += " n/a |";
            continue;
          }
          std::snprintf(buffer, sizeof buffer, " %.2f |", quantile(values, 0.5));
          second_table += buffer;
        }
        const auto median_of = [&](const char* name) {
          const auto it = inter[p].find(name);
          return it == inter[p].end() ? 0.0 : quantile(it->second, 0.5);
        };
        std::snprintf(buffer, sizeof buffer, " %.0f | %.0f | %.2f |\n", median_of("dcp"),
                      median_of("zigzag"),
                      advantage[p].empty() ? 0.0 : quantile(advantage[p], 0.5));
        second_table += buffer;
      }
    }
  }
  std::printf("%s", second_table.c_str());
  return 0;
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) {
  return dcp::bench::guarded_main("dcp_plan_bench", argc, argv, dcp::run);
}

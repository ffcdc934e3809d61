// SPDX-License-Identifier: Apache-2.0
// Executor overhead: a distributed run's wall time per pass (the slowest rank, ranks started
// together) against the slowest rank's pure kernel time (attention, merge and sum instructions).
// The ratio is what the executor, the communicator, loads and stores and exposed waits add.
//
//   build/release/bench/dcp_executor_bench [--batches 3] [--dist ldc] [--tokens 16384]
//       [--masks causal,lambda] [--strategies dcp,zigzag,hybrid] [--nodes 1]
//       [--devices-per-node 2] [--threads 1] [--head-dim 128] [--dtype bf16] [--repeats 3]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/parse.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/cluster_presets.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/sequence_batch.h"

#include "dcp/data/batch_packing.h"
#include "dcp/data/length_distribution.h"

#include "dcp/planner/baselines/static_plans.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/runtime/batch_tensors.h"
#include "dcp/runtime/dense_reference.h"
#include "dcp/runtime/distributed_run.h"
#include "dcp/runtime/executor.h"
#include "dcp/selection/plan_search.h"
#include "dcp/workload_builder.h"

#include "bench/bench_main.h"
#include "bench/bench_stats.h"

namespace dcp {
namespace {

int run(int argc, char** argv) {
  std::int64_t batches = 3, repeats = 3;
  std::string dist = "ldc", masks = "causal,lambda", strategies = "dcp,zigzag,hybrid";
  TokenCount tokens = 16384;
  std::int32_t nodes = 1, per_node = 2, threads = 1, head_dim = 128;
  DType dtype = DType::kBf16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--batches")
      batches = parse_int(value, flag);
    else if (flag == "--repeats")
      repeats = parse_int(value, flag);
    else if (flag == "--dist")
      dist = value;
    else if (flag == "--tokens")
      tokens = parse_int(value, flag);
    else if (flag == "--masks")
      masks = value;
    else if (flag == "--strategies")
      strategies = value;
    else if (flag == "--nodes")
      nodes = static_cast<std::int32_t>(parse_int(value, flag));
    else if (flag == "--devices-per-node")
      per_node = static_cast<std::int32_t>(parse_int(value, flag));
    else if (flag == "--threads")
      threads = static_cast<std::int32_t>(parse_int(value, flag));
    else if (flag == "--head-dim")
      head_dim = static_cast<std::int32_t>(parse_int(value, flag));
    else if (flag == "--dtype")
      dtype = parse_dtype(value);
    else
      throw InvalidInput("unknown flag " + quoted(flag));
  }
  PackingOptions packing;
  packing.tokens_per_batch = tokens;
  const auto lengths = sample_batches(parse_length_distribution(dist),
                                      static_cast<std::size_t>(batches), packing, 0);
  AttentionShape shape;
  shape.head_dim = head_dim;
  shape.dtype = dtype;
  std::printf(
      "%lld %s batches of <= %lld tokens, %d x %d local ranks, %d kernel thread(s) each, 8 q / 2 "
      "kv heads, d = %d, %s; median of %lld runs per batch\n\n",
      static_cast<long long>(batches), dist.c_str(), static_cast<long long>(tokens), nodes,
      per_node, threads, head_dim, std::string(to_string(dtype)).c_str(),
      static_cast<long long>(repeats));
  std::printf(
      "| mask | strategy | pass | wall ms | slowest rank's kernel ms | wall / kernel | max wait "
      "ms |\n|---|---|---|---|---|---|---|\n");
  for (const std::string_view mask : split(masks, ',')) {
    const MaskSpec spec = parse_mask_spec(mask);
    for (const std::string_view name : split(strategies, ',')) {
      PlanOptions options;
      options.strategy = parse_strategy(name);
      options.cluster = cluster_preset("a100-p4de");
      options.cluster.shape = {nodes, per_node};
      std::vector<double> wall[2], kernel[2], wait[2];
      for (const auto& batch_lengths : lengths) {
        const SequenceBatch batch(batch_lengths);
        WorkloadOptions workload_options;
        workload_options.auto_block.devices = nodes * per_node;
        const BuiltWorkload built_workload =
            make_workload(shape, batch, build_batch_mask(spec, batch), workload_options);
        const BuiltPlan built = build_plan(built_workload.workload, options);
        const runtime::BatchShape batch_shape = runtime::batch_shape_of(built_workload.workload);
        const runtime::BatchInputs inputs = runtime::random_inputs(batch_shape, 1);
        runtime::RunOptions run_options;
        run_options.kernel_threads = threads;
        std::vector<double> runs[2][3];
        for (std::int64_t r = 0; r < repeats; ++r) {
          const runtime::RunResult result =
              runtime::run_plan_locally(built.plan, batch.offsets(), inputs, run_options);
          for (int p = 0; p < 2; ++p) {
            const auto& profiles = p == 0 ? result.forward : result.backward;
            double max_kernel = 0, max_wait = 0;
            for (const runtime::PassProfile& profile : profiles) {
              max_kernel = std::max(max_kernel, profile.kernel_seconds);
              max_wait = std::max(max_wait, profile.wait_seconds);
            }
            runs[p][0].push_back(p == 0 ? result.forward_seconds : result.backward_seconds);
            runs[p][1].push_back(max_kernel);
            runs[p][2].push_back(max_wait);
          }
        }
        for (int p = 0; p < 2; ++p) {
          wall[p].push_back(bench::median(runs[p][0]));
          kernel[p].push_back(bench::median(runs[p][1]));
          wait[p].push_back(bench::median(runs[p][2]));
        }
      }
      for (int p = 0; p < 2; ++p) {
        double w = 0, k = 0, worst_wait = 0;
        for (std::size_t b = 0; b < wall[p].size(); ++b) {
          w += wall[p][b];
          k += kernel[p][b];
          worst_wait = std::max(worst_wait, wait[p][b]);
        }
        std::printf("| %s | %s | %s | %.1f | %.1f | %.3f | %.1f |\n", std::string(mask).c_str(),
                    std::string(name).c_str(), p == 0 ? "forward" : "backward", w * 1e3, k * 1e3,
                    w / k, worst_wait * 1e3);
      }
    }
  }
  std::printf("\nwall and kernel ms: summed over the batches (each the median of its runs).\n");
  return 0;
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) {
  return dcp::bench::guarded_main("dcp_executor_bench", argc, argv, dcp::run);
}

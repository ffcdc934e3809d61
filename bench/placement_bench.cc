// SPDX-License-Identifier: Apache-2.0
// Placement quality and time over many realistic batches: dcp vs the zigzag and greedy placements.
// Prints one Markdown row per (distribution, mask): medians over the batches.
//
//   build/release/bench/dcp_placement_bench [--batches N] [--dists ldc,longalign]
//       [--masks causal,lambda,shared_question,causal_blockwise] [--nodes 4] [--devices-per-node 8]
//       [--block-size 1024]
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/parse.h"
#include "dcp/core/timing.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/cluster.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/sequence_batch.h"
#include "dcp/model/workload.h"

#include "dcp/data/batch_packing.h"
#include "dcp/data/length_distribution.h"

#include "dcp/planner/placement/block_hypergraph.h"
#include "dcp/planner/placement/hierarchical_placer.h"
#include "dcp/planner/placement/placement.h"
#include "dcp/planner/placement/static_placements.h"

#include "bench/bench_main.h"
#include "bench/bench_stats.h"

namespace dcp {
namespace {

using bench::max_of;
using bench::median;

int run(int argc, char** argv) {
  std::int64_t batches = 50;
  std::string dists = "ldc,longalign";
  std::string masks = "causal,lambda,shared_question,causal_blockwise";
  ClusterShape cluster{4, 8};
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
    else if (flag == "--nodes")
      cluster.nodes = static_cast<std::int32_t>(parse_int(value, flag));
    else if (flag == "--devices-per-node")
      cluster.devices_per_node = static_cast<std::int32_t>(parse_int(value, flag));
    else if (flag == "--block-size")
      block_size = parse_int(value, flag);
    else
      throw InvalidInput("unknown flag " + quoted(flag));
  }
  std::printf(
      "%lld batches of 131072 tokens per row, %d nodes x %d devices, B = %lld, 8 q heads, 2 kv "
      "heads, d = 128, bf16; medians (max) over batches\n\n",
      static_cast<long long>(batches), cluster.nodes, cluster.devices_per_node,
      static_cast<long long>(block_size));
  std::printf(
      "| dataset | mask | place ms | compute imb dcp | memory imb dcp | within bounds | inter-node "
      "MB dcp | zigzag | greedy | dcp / zigzag inter | compute imb zigzag |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string_view dist : split(dists, ',')) {
    const auto kind = parse_length_distribution(dist);
    const auto lengths =
        sample_batches(kind, static_cast<std::size_t>(batches), PackingOptions{}, 0);
    for (const std::string_view mask : split(masks, ',')) {
      const MaskSpec spec = parse_mask_spec(mask);
      std::vector<double> ms, imb_c, imb_m, inter, inter_z, inter_g, ratio, imb_cz;
      int within = 0;
      for (const auto& batch_lengths : lengths) {
        const SequenceBatch batch(batch_lengths);
        const Workload workload(AttentionShape{}, batch, build_batch_mask(spec, batch), block_size,
                                1);
        PlacementOptions options;
        options.cluster = cluster;
        options.eps_compute = 0.1;  // the balance docs/benchmarks.md's figures were measured at
        const auto start = Clock::now();
        const PlacementResult result = place(workload, options);
        ms.push_back(ms_since(start));
        within += result.within_bounds ? 1 : 0;
        const BlockHypergraph hypergraph = build_block_hypergraph(workload);
        const PlacementMetrics m = evaluate(workload, hypergraph, result.placement);
        const ZigzagBaseline zigzag = zigzag_baseline(workload, cluster);
        const PlacementMetrics z = evaluate(zigzag.workload, zigzag.placement);
        const PlacementMetrics g =
            evaluate(workload, hypergraph, greedy_placement(workload, cluster, 0.1));
        imb_c.push_back(m.imbalance_compute);
        imb_m.push_back(m.imbalance_memory);
        imb_cz.push_back(z.imbalance_compute);
        inter.push_back(static_cast<double>(m.bytes_inter_node) / 1e6);
        inter_z.push_back(static_cast<double>(z.bytes_inter_node) / 1e6);
        inter_g.push_back(static_cast<double>(g.bytes_inter_node) / 1e6);
        ratio.push_back(z.bytes_inter_node > 0 ? static_cast<double>(m.bytes_inter_node) /
                                                     static_cast<double>(z.bytes_inter_node)
                                               : 0.0);
      }
      std::printf(
          "| %s | %s | %.0f (%.0f) | %.3f (%.3f) | %.3f (%.3f) | %d/%lld | %.0f | %.0f | %.0f | "
          "%.2f (%.2f) | %.3f |\n",
          std::string(dist).c_str(), std::string(mask).c_str(), median(ms), max_of(ms),
          median(imb_c), max_of(imb_c), median(imb_m), max_of(imb_m), within,
          static_cast<long long>(batches), median(inter), median(inter_z), median(inter_g),
          median(ratio), max_of(ratio), median(imb_cz));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) {
  return dcp::bench::guarded_main("dcp_placement_bench", argc, argv, dcp::run);
}

// SPDX-License-Identifier: Apache-2.0
// Exports the placement hypergraphs of many realistic batches in hMETIS format, with dcp's own
// flat k-way partition of each, for comparison with another partitioner on exactly the same
// hypergraphs (bench/mtkahypar_compare.py does it for Mt-KaHyPar).
//
//   build/release/bench/dcp_hmetis_export --out DIR [--batches N] [--dists ldc,longalign]
//       [--masks causal,...] [--parts 32] [--block-size 1024] [--eps-compute 0.1]
//       [--eps-memory 0.2] [--seed 0]
//       [--head-groups 1|0] [--coarsest N --cluster-fraction N --tries N --vcycles N --fm-passes N
//       --fm-moves N]
// The last group overrides MultilevelOptions (multilevel_partitioner.h), for tuning.
//
// For each batch it writes DIR/<name>.hgr (nets weighted by bytes), DIR/<name>.weights (compute and
// memory of every vertex, one line each), DIR/<name>.dcp.part (dcp's part of every vertex, the
// hMETIS partition file format) and one line of DIR/dcp.jsonl: the caps in both
// dimensions (hierarchical_placer.h, part_caps), and km1, time and balance of dcp's multilevel
// partitioner on that hypergraph with those caps (flat: all parts at once, one thread).
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/json_writer.h"
#include "dcp/core/npy.h"
#include "dcp/core/parse.h"
#include "dcp/core/timing.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/sequence_batch.h"
#include "dcp/model/workload.h"

#include "dcp/data/batch_packing.h"
#include "dcp/data/length_distribution.h"

#include "dcp/planner/partition/balance.h"
#include "dcp/planner/partition/hmetis_format.h"
#include "dcp/planner/partition/multilevel_partitioner.h"
#include "dcp/planner/partition/partitioned_hypergraph.h"
#include "dcp/planner/placement/block_hypergraph.h"
#include "dcp/planner/placement/hierarchical_placer.h"

#include "bench/bench_main.h"

namespace dcp {
namespace {

int run(int argc, char** argv) {
  std::string out_dir;
  std::int64_t batches = 10;
  std::string dists = "ldc,longalign";
  std::string masks = "causal,lambda,shared_question,causal_blockwise";
  std::int64_t parts = 32;
  TokenCount block_size = 1024;
  double eps_compute = 0.1;
  double eps_memory = 0.2;
  std::int64_t seed = 0;
  MultilevelOptions tuning;
  bool head_grouping = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--out")
      out_dir = value;
    else if (flag == "--batches")
      batches = parse_int(value, flag);
    else if (flag == "--dists")
      dists = value;
    else if (flag == "--masks")
      masks = value;
    else if (flag == "--parts")
      parts = parse_int(value, flag);
    else if (flag == "--block-size")
      block_size = parse_int(value, flag);
    else if (flag == "--eps-compute")
      eps_compute = parse_double(value, flag);
    else if (flag == "--eps-memory")
      eps_memory = parse_double(value, flag);
    else if (flag == "--seed")
      seed = parse_int(value, flag);
    else if (flag == "--head-groups")
      head_grouping = parse_int(value, flag) != 0;
    else if (flag == "--coarsest")
      tuning.coarsest_vertices_per_part = static_cast<std::int32_t>(parse_int(value, flag));
    else if (flag == "--cluster-fraction")
      tuning.cluster_fraction_of_part = static_cast<std::int32_t>(parse_int(value, flag));
    else if (flag == "--tries")
      tuning.initial_tries = static_cast<std::int32_t>(parse_int(value, flag));
    else if (flag == "--vcycles")
      tuning.vcycles = static_cast<std::int32_t>(parse_int(value, flag));
    else if (flag == "--fm-passes")
      tuning.fm.max_passes = static_cast<std::int32_t>(parse_int(value, flag));
    else if (flag == "--fm-moves")
      tuning.fm.max_moves_without_improvement = static_cast<std::int32_t>(parse_int(value, flag));
    else
      throw InvalidInput("unknown flag " + quoted(flag));
  }
  if (out_dir.empty()) throw InvalidInput("--out DIR is required");
  if (batches < 1 || parts < 1 || parts > 1024) {
    throw InvalidInput("--batches must be >= 1 and --parts in [1, 1024]");
  }
  const auto partitioner = std::make_unique<MultilevelPartitioner>(tuning);
  std::string summary;
  for (const std::string_view dist : split(dists, ',')) {
    const auto kind = parse_length_distribution(dist);
    const auto lengths = sample_batches(kind, static_cast<std::size_t>(batches), PackingOptions{},
                                        static_cast<std::uint64_t>(seed));
    for (const std::string_view mask : split(masks, ',')) {
      const MaskSpec spec = parse_mask_spec(mask);
      for (std::size_t i = 0; i < lengths.size(); ++i) {
        const SequenceBatch batch(lengths[i]);
        const Workload workload(AttentionShape{}, batch, build_batch_mask(spec, batch), block_size,
                                1);
        const BlockHypergraph block_graph = build_block_hypergraph(workload);
        const Hypergraph& graph = block_graph.graph;
        const auto k = static_cast<std::int32_t>(parts);
        const PartCaps caps = part_caps(graph, k, eps_compute, eps_memory);
        PartitionRequest request;
        request.parts = k;
        request.seed = static_cast<std::uint64_t>(seed);
        if (head_grouping) request.groups = head_groups(workload);
        request.max_part_weight.assign(static_cast<std::size_t>(k),
                                       VertexWeight{caps.compute, caps.memory});
        const auto start = Clock::now();
        const std::vector<PartId> part_of = partitioner->partition(graph, request);
        const double ms = ms_since(start);
        const PartitionedHypergraph partitioned(graph, k, part_of);
        bool within = true;
        for (PartId p = 0; p < k; ++p)
          within = within && dcp::within(partitioned.part_weight(p), request.max_part_weight[0]);

        char index[32];
        std::snprintf(index, sizeof(index), "%03zu", i);
        std::string name(dist);
        name.append("_").append(mask).append("_").append(index);
        std::ostringstream hgr;
        write_hmetis(graph, hgr);
        write_file_atomically(out_dir + "/" + name + ".hgr", hgr.str());
        std::ostringstream weights;
        write_vertex_weights(graph, weights);
        write_file_atomically(out_dir + "/" + name + ".weights", weights.str());
        std::string parts_text;  // hMETIS partition file: the part of every vertex, one per line
        for (const PartId p : part_of) parts_text.append(std::to_string(p)).append("\n");
        write_file_atomically(out_dir + "/" + name + ".dcp.part", parts_text);

        JsonWriter json;
        {
          JsonWriter::Inline one_line(json);
          json.begin_object();
          json.field("name", name);
          json.field("dataset", std::string(dist));
          json.field("mask", std::string(mask));
          json.field("parts", std::int64_t{k});
          json.field("eps_compute", eps_compute);
          json.field("compute_cap", caps.compute);
          json.field("memory_cap", caps.memory);
          json.field("vertices", std::int64_t{graph.vertex_count()});
          json.field("nets", std::int64_t{graph.net_count()});
          json.field("dcp_km1", partitioned.km1());
          json.field("dcp_ms", ms);
          json.field("dcp_within_caps", within);
          json.end_object();
        }
        summary += json.str();
        summary += '\n';
        std::fprintf(stderr, "%s: %d vertices, km1 %.1f MB, %.0f ms\n", name.c_str(),
                     graph.vertex_count(), static_cast<double>(partitioned.km1()) / 1e6, ms);
      }
    }
  }
  write_file_atomically(out_dir + "/dcp.jsonl", summary);
  return 0;
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) {
  return dcp::bench::guarded_main("dcp_hmetis_export", argc, argv, dcp::run);
}

// SPDX-License-Identifier: Apache-2.0
// Flags that choose how a batch is planned (cluster, strategy, schedule), shared by every command
// that plans: plan, run, attention, demo.
#include "apps/cli/plan_flags.h"

#include <cmath>
#include <string>

#include "dcp/core/parse.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/cluster_file.h"
#include "dcp/model/cluster_presets.h"

#include "dcp/planner/baselines/static_plans.h"
#include "dcp/planner/placement/hierarchical_placer.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/selection/plan_search.h"

namespace dcp::cli {

FlagSpec partial_dtype_flag() {
  return {"--partial-dtype", "fp32|bf16|fp16",
          "the dtype partial o, dq, dk, dv travel in between devices (accumulated in fp32): fp32 "
          "or the storage dtype [dcp: the storage dtype; static strategies: fp32]"};
}

std::optional<DType> partial_dtype_from_flags(const Args& args) {
  if (const auto name = args.get("--partial-dtype")) {
    return with_flag("--partial-dtype", [&] { return parse_dtype(*name); });
  }
  return std::nullopt;
}

const std::vector<FlagSpec>& plan_flags() {
  static const std::vector<FlagSpec> specs = {
      {"--cluster", "PRESET|FILE",
       "a100-p4de | h100-dgx | cpu-local | a cluster file (docs/cost_model.md) [a100-p4de]"},
      {"--nodes", "N", "nodes [the cluster's]"},
      {"--devices-per-node", "D", "devices per node [the cluster's]"},
      {"--strategy", "NAME",
       "dcp | dcp-pure | ring | zigzag | ulysses | hybrid | te | loongtrain [dcp]; dcp keeps the "
       "fastest of its own plan and the static plans under the simulator, dcp-pure always its "
       "own"},
      {"--static-dp", "N|auto",
       "static strategies (and dcp's static candidates): data parallel degree, N groups of "
       "consecutive devices with the sequences spread over them by tokens; auto: the largest "
       "power of two N with N x the longest sequence <= the batch's tokens rounded up to a power "
       "of two, as the DCP paper ran its baselines [1]"},
      {"--loongtrain-window", "W",
       "loongtrain: head groups per inner ring (a power of two dividing the ring; LoongTrain's "
       "sliding window); 0 = the head groups of a node [0]"},
      {"--stages", "S", "dcp: fetch stages; 0 = chosen by the cost model [0]"},
      {"--compute-masked-tiles", "",
       "static strategies: compute fully masked tiles too (TransformerEngine's path for "
       "arbitrary masks) instead of skipping them"},
      {"--eps-compute", "E",
       "dcp: device compute <= (1 + E) x mean [0.3]; with an automatic block size the two "
       "fastest partitions are also placed at 0.2 where E is larger, and kept if faster"},
      {"--eps-memory", "E", "dcp: device memory <= (1 + E) x mean [0.2]"},
      {"--token-flops", "F",
       "dcp: FLOPs of the rest of a layer per token, forward and backward (projections, MLP), run "
       "by the device holding the token; dcp's search compares candidates by attention plus that "
       "on the busiest device, at the cluster's forward rate [0: attention alone]"},
      {"--keep-kv", "all|none|MIB",
       "dcp: kv values received in the forward pass that a device keeps for the backward pass, "
       "instead of receiving them again: all, none, or up to MIB MiB per device and layer [all]"},
      partial_dtype_flag(),
  };
  return specs;
}

PlanOptions plan_options_from_flags(const Args& args, std::uint64_t seed) {
  PlanOptions options;
  const std::string cluster = args.get_or("--cluster", std::string(kDefaultCluster));
  options.cluster =
      with_flag("--cluster " + quoted(cluster), [&] { return resolve_cluster(cluster); });
  options.cluster.shape.nodes =
      static_cast<std::int32_t>(args.get_int("--nodes", options.cluster.shape.nodes, 1, 1 << 16));
  options.cluster.shape.devices_per_node = static_cast<std::int32_t>(
      args.get_int("--devices-per-node", options.cluster.shape.devices_per_node, 1, 1 << 16));
  with_flag("--nodes/--devices-per-node", [&] { validate(options.cluster.shape); });
  if (const auto name = args.get("--strategy")) {
    options.strategy = with_flag("--strategy", [&] { return parse_strategy(*name); });
  }
  options.schedule.fetch_launches = static_cast<std::int32_t>(args.get_int("--stages", 0, 0, 64));
  for (const char* flag : {"--stages", "--eps-compute", "--eps-memory", "--keep-kv"}) {
    if (args.has(flag) && !is_dcp(options.strategy)) {
      throw UsageError(std::string(flag) + " applies to --strategy dcp or dcp-pure; " +
                       std::string(to_string(options.strategy)) + " has a fixed schedule");
    }
  }
  if (const auto degree = args.get("--static-dp")) {
    if (options.strategy == Strategy::kDcpPure) {
      throw UsageError(
          "--static-dp applies to static strategies and dcp's static candidates, not "
          "dcp-pure");
    }
    options.static_data_parallel =
        with_flag("--static-dp", [&] { return parse_data_parallel(*degree); });
  }
  if (args.has("--loongtrain-window")) {
    if (options.strategy != Strategy::kLoongTrain) {
      throw UsageError("--loongtrain-window applies to --strategy loongtrain, not " +
                       std::string(to_string(options.strategy)));
    }
    options.loongtrain_window =
        static_cast<std::int32_t>(args.get_int("--loongtrain-window", 0, 0, 1 << 16));
  }
  if (args.flag("--compute-masked-tiles")) {
    if (is_dcp(options.strategy)) {
      throw UsageError(
          "--compute-masked-tiles applies to static strategies; dcp never computes "
          "a fully masked tile");
    }
    options.masked_tiles = MaskedTiles::kCompute;
  }
  options.placement.eps_compute = args.get_double("--eps-compute", kDefaultEpsCompute);
  options.placement.eps_memory = args.get_double("--eps-memory", kDefaultEpsMemory);
  options.token_flops = args.get_double("--token-flops", 0);
  if (!std::isfinite(options.token_flops) || options.token_flops < 0) {
    throw UsageError("--token-flops must be a number >= 0, got " +
                     args.get_or("--token-flops", ""));
  }
  with_flag("--eps-compute/--eps-memory", [&] {
    PlacementOptions check = options.placement;
    check.cluster = options.cluster.shape;
    validate(check);
  });
  if (const auto keep = args.get("--keep-kv")) {
    options.kept_kv_budget = with_flag("--keep-kv", [&] { return parse_kept_kv_budget(*keep); });
  }
  sweep_block_sizes_when_automatic(options, args.get_or("--block-size", "auto") == "auto");
  options.partial_dtype = partial_dtype_from_flags(args);
  options.seed = seed;
  return options;
}

}  // namespace dcp::cli

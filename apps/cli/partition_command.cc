// SPDX-License-Identifier: Apache-2.0
// `dcp partition`: place one batch on nodes x devices and compare with the zigzag and greedy
// placements; with several attention kinds, one token placement and each kind's work on it.
#include <cstdio>
#include <string>
#include <vector>

#include "dcp/core/ids.h"
#include "dcp/core/json_writer.h"
#include "dcp/core/parse.h"
#include "dcp/core/timing.h"

#include "dcp/model/workload.h"

#include "dcp/planner/model_plan_builder.h"
#include "dcp/planner/placement/block_hypergraph.h"
#include "dcp/planner/placement/hierarchical_placer.h"
#include "dcp/planner/placement/kind_placement.h"
#include "dcp/planner/placement/placement.h"
#include "dcp/planner/placement/static_placements.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/workload_builder.h"

#include "apps/cli/command_table.h"
#include "apps/cli/plan_flags.h"
#include "apps/cli/workload_flags.h"

namespace dcp::cli {
namespace {

double eps_flag(const Args& args, std::string_view name, double fallback) {
  const double value = args.get_double(name, fallback);
  if (value < 0) {
    throw UsageError(std::string(name) + " " + quoted(*args.get(name)) + ": must be >= 0");
  }
  return value;
}

void write_figures(JsonWriter& json, const PlacementMetrics& m) {
  json.field("imbalance_compute", m.imbalance_compute);
  json.field("imbalance_memory", m.imbalance_memory);
  json.field("bytes_inter_node", m.bytes_inter_node);
  json.field("bytes_intra_node", m.bytes_intra_node);
  json.field("backward_bytes_inter_node", m.backward_bytes_inter_node);
  json.field("backward_bytes_intra_node", m.backward_bytes_intra_node);
  json.field("km1", m.km1);
  json.field("devices_without_data", std::int64_t{m.devices_without_data});
  json.key("devices").begin_array();
  for (const DeviceLoad& d : m.devices) {
    JsonWriter::Inline one_line(json);
    json.begin_object();
    json.field("node", std::int64_t{d.node});
    json.field("device", std::int64_t{d.device});
    json.field("compute", d.compute);
    json.field("memory", d.memory);
    json.field("bytes_in", d.bytes_in);
    json.field("bytes_out", d.bytes_out);
    json.end_object();
  }
  json.end_array();
}

void write_work_units(JsonWriter& json, const Workload& workload, const Placement& placement) {
  json.key("work_units").begin_array();
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    const WorkUnit unit = workload.work_unit(w);
    JsonWriter::Inline one_line(json);
    json.begin_array().value(std::int64_t{unit.seq}).value(std::int64_t{unit.head_block});
    json.value(std::int64_t{unit.q_block}).value(std::int64_t{unit.kv_block});
    json.value(std::int64_t{placement.work_unit_device[static_cast<std::size_t>(w)]}).end_array();
  }
  json.end_array();
}

void write_token_blocks(JsonWriter& json, const Workload& workload, const Placement& placement) {
  json.key("token_blocks").begin_array();
  for (BlockId b = 0; b < workload.blocks().block_count(); ++b) {
    const TokenBlock& block = workload.blocks().block(b);
    JsonWriter::Inline one_line(json);
    json.begin_array().value(std::int64_t{block.seq}).value(std::int64_t{block.index});
    json.value(std::int64_t{placement.token_block_device[static_cast<std::size_t>(b)]}).end_array();
  }
  json.end_array();
}

// The zigzag and greedy placements of one kind's workload, measured as dcp's is.
struct Baselines {
  PlacementMetrics zigzag;
  PlacementMetrics greedy;
};

Baselines baselines_of(const Workload& workload, const BlockHypergraph& hypergraph,
                       const PlacementOptions& options) {
  const ZigzagBaseline zigzag_cut = zigzag_baseline(workload, options.cluster);
  return {evaluate(zigzag_cut.workload, zigzag_cut.placement),
          evaluate(workload, hypergraph,
                   greedy_placement(workload, options.cluster, options.eps_compute))};
}

void write_baselines(JsonWriter& json, const Baselines& baselines) {
  json.key("baselines").begin_object();
  json.key("zigzag").begin_object();
  write_figures(json, baselines.zigzag);
  json.end_object();
  json.key("greedy").begin_object();
  write_figures(json, baselines.greedy);
  json.end_object();
  json.end_object();
}

void write_timings(JsonWriter& json, double workload_ms, const PlacementTimings& timings,
                   double baselines_ms) {
  json.key("timing_ms").begin_object();
  json.field("workload", workload_ms);
  json.field("hypergraph", timings.hypergraph_ms);
  json.field("partition_nodes", timings.node_partition_ms);
  json.field("partition_devices", timings.device_partition_ms);
  json.field("placement", timings.total_ms);
  json.field("baselines", baselines_ms);
  json.end_object();
}

// Per device of dcp's placement: its work, memory and bytes; then dcp's and the baselines'
// imbalances and bytes side by side.
void print_tables(std::ostream& out, const PlacementMetrics& dcp_figures,
                  const Baselines& baselines) {
  char line[200];
  std::snprintf(line, sizeof(line), "%6s %5s %13s %11s %10s %10s %7s %8s\n", "device", "node",
                "fwd TFLOP", "memory MB", "in MB", "out MB", "blocks", "units");
  out << line;
  for (const DeviceLoad& d : dcp_figures.devices) {
    std::snprintf(line, sizeof(line), "%6d %5d %13.3f %11s %10s %10s %7d %8lld\n", d.device, d.node,
                  d.compute / 1e12, format_mb(d.memory, 1).c_str(),
                  format_mb(d.bytes_in, 1).c_str(), format_mb(d.bytes_out, 1).c_str(),
                  d.token_blocks, static_cast<long long>(d.work_units));
    out << line;
  }
  out << "\n";
  std::snprintf(line, sizeof(line), "%-8s %12s %11s %14s %14s %14s %14s %10s\n", "strategy",
                "compute imb", "memory imb", "fwd inter MB", "fwd intra MB", "bwd inter MB",
                "bwd intra MB", "idle devs");
  out << line;
  const auto row = [&](const char* name, const PlacementMetrics& m) {
    std::snprintf(line, sizeof(line), "%-8s %12.3f %11.3f %14s %14s %14s %14s %10d\n", name,
                  m.imbalance_compute, m.imbalance_memory, format_mb(m.bytes_inter_node, 1).c_str(),
                  format_mb(m.bytes_intra_node, 1).c_str(),
                  format_mb(m.backward_bytes_inter_node, 1).c_str(),
                  format_mb(m.backward_bytes_intra_node, 1).c_str(), m.devices_without_data);
    out << line;
  };
  row("dcp", dcp_figures);
  row("zigzag", baselines.zigzag);
  row("greedy", baselines.greedy);
}

void print_timings(std::ostream& out, double workload_ms, const PlacementTimings& timings,
                   double baselines_ms) {
  char line[200];
  std::snprintf(line, sizeof(line),
                "\ntime ms    workload %.1f, hypergraph %.1f, nodes %.1f, devices %.1f, placement "
                "total %.1f, baselines %.1f\n",
                workload_ms, timings.hypergraph_ms, timings.node_partition_ms,
                timings.device_partition_ms, timings.total_ms, baselines_ms);
  out << line;
}

// dcp partition with several attention kinds: place_kinds's one token placement, then per kind
// its work units' placement measured and compared with the baselines' of that kind.
int partition_kinds(const Args& args, const PlacementOptions& options, const BuiltKinds& built,
                    double workload_ms, std::ostream& out) {
  std::vector<Workload> workloads;
  std::vector<std::int32_t> layers;
  for (const KindWorkload& kind : built.kinds) {
    workloads.push_back(kind.workload);
    layers.push_back(kind.layers);
  }
  const KindPlacementResult result = place_kinds(workloads, layers, options);
  std::vector<PlacementMetrics> figures;
  std::vector<Baselines> baselines;
  double baselines_ms = 0;
  for (std::size_t k = 0; k < workloads.size(); ++k) {
    const BlockHypergraph hypergraph = build_block_hypergraph(workloads[k], options.pricing);
    figures.push_back(evaluate(workloads[k], hypergraph, result.placements[k]));
    const auto baseline_start = Clock::now();
    baselines.push_back(baselines_of(workloads[k], hypergraph, options));
    baselines_ms += ms_since(baseline_start);
  }
  const Workload& first = workloads.front();

  if (args.flag("--json")) {
    JsonWriter json;
    json.begin_object();
    json.field("nodes", std::int64_t{options.cluster.nodes});
    json.field("devices_per_node", std::int64_t{options.cluster.devices_per_node});
    json.field("block_size", first.blocks().block_size());
    json.field("token_block_count", std::int64_t{first.blocks().block_count()});
    json.field("memory_within_bound", result.memory_within_bound);
    json.key("placement").begin_object();
    write_token_blocks(json, first, result.placements.front());
    json.end_object();
    json.key("kinds").begin_array();
    for (std::size_t k = 0; k < workloads.size(); ++k) {
      json.begin_object();
      json.field("name", std::string_view(built.kinds[k].name));
      json.field("layers", std::int64_t{built.kinds[k].layers});
      json.field("work_unit_count", workloads[k].work_unit_count());
      json.field("compute_within_bound", static_cast<bool>(result.within_bounds[k]));
      write_figures(json, figures[k]);
      json.key("placement").begin_object();
      write_work_units(json, workloads[k], result.placements[k]);
      json.end_object();
      write_baselines(json, baselines[k]);
      json.end_object();
    }
    json.end_array();
    write_timings(json, workload_ms, result.timings, baselines_ms);
    json.end_object();
    out << json.str() << "\n";
    return 0;
  }

  out << "batch      " << first.batch().size() << " sequences, " << first.batch().total_tokens()
      << " tokens; B = " << first.blocks().block_size() << ", " << first.blocks().block_count()
      << " token blocks\n";
  out << "cluster    " << options.cluster.nodes << " nodes x " << options.cluster.devices_per_node
      << " devices; " << workloads.size()
      << (workloads.size() == 1 ? " attention kind" : " attention kinds")
      << " on one token placement, memory " << (result.memory_within_bound ? "within" : "OUTSIDE")
      << " its bound\n";
  for (std::size_t k = 0; k < workloads.size(); ++k) {
    const KindWorkload& kind = built.kinds[k];
    out << "\n== kind '" << kind.name << "' (" << kind.layers
        << (kind.layers == 1 ? " layer): " : " layers): ") << workloads[k].work_unit_count()
        << " work units; dcp placement " << (result.within_bounds[k] ? "within" : "OUTSIDE")
        << " its compute bound\n";
    print_tables(out, figures[k], baselines[k]);
  }
  print_timings(out, workload_ms, result.timings, baselines_ms);
  return 0;
}

}  // namespace

int run_partition(std::span<const std::string> argv, std::ostream& out) {
  std::vector<FlagSpec> specs = workload_flags();
  specs.push_back({"--nodes", "N", "nodes [1]"});
  specs.push_back({"--devices-per-node", "D", "devices per node [8]"});
  specs.push_back({"--eps-compute", "E", "device compute <= (1 + E) x mean [0.3]"});
  specs.push_back(
      {"--eps-memory", "E", "device memory <= (1 + E) x mean, or the packing bound [0.2]"});
  specs.push_back({"--node-eps-compute", "E", "node compute slack [sqrt(1 + eps-compute) - 1]"});
  specs.push_back({"--partitioner", "NAME", "multilevel | greedy [multilevel]"});
  specs.push_back({"--keep-kv", "all|none|MIB",
                   "price the backward pass with the kv values kept from the forward pass "
                   "(all), or received again (none; a budget in MiB is priced as none: its "
                   "plans move at most that) [all]"});
  specs.push_back(partial_dtype_flag());
  specs.push_back({"--json", "", "print one JSON object instead of the tables"});
  specs.push_back({"--help", "", "show this help"});
  const Args args(specs, argv);
  if (args.flag("--help")) {
    out << format_help(
        "dcp partition (--seqlens L,... | --seqlens-file F | --dist NAME) [flags]",
        "Places the token blocks and work units of one batch on nodes x devices with "
        "dcp's hierarchical hypergraph partitioner, under compute and memory balance, "
        "and compares with the zigzag and greedy placements. --seed seeds both the "
        "sampled batch and the partitioner. With several attention kinds (--mask KIND=SPEC), "
        "the token blocks are placed once for every kind and each kind's work units on them, "
        "each kind's compute balanced on its own; every kind is measured and compared.",
        specs);
    return 0;
  }
  PlacementOptions options;
  options.cluster.nodes = static_cast<std::int32_t>(args.get_int("--nodes", 1, 1, 1 << 16));
  options.cluster.devices_per_node =
      static_cast<std::int32_t>(args.get_int("--devices-per-node", 8, 1, 1 << 16));
  with_flag("--nodes/--devices-per-node", [&] { validate(options.cluster); });
  options.eps_compute = eps_flag(args, "--eps-compute", kDefaultEpsCompute);
  options.eps_memory = eps_flag(args, "--eps-memory", kDefaultEpsMemory);
  options.node_eps_compute =
      args.has("--node-eps-compute") ? eps_flag(args, "--node-eps-compute", 0) : -1;
  options.seed = static_cast<std::uint64_t>(args.get_int("--seed", 0, 0));
  if (const auto name = args.get("--partitioner")) {
    options.partitioner = with_flag("--partitioner", [&] { return parse_partitioner(*name); });
  }
  if (const auto keep = args.get("--keep-kv")) {
    options.pricing.kv_kept_for_backward =
        with_flag("--keep-kv", [&] { return parse_kept_kv_budget(*keep); }) == kKeepAllKv;
  } else {
    options.pricing.kv_kept_for_backward = PlanOptions{}.kept_kv_budget == kKeepAllKv;
  }

  const auto start = Clock::now();
  const BuiltKinds built = kinds_from_flags(args, options.cluster.devices());
  const double workload_ms = ms_since(start);
  PlanOptions plan_options;
  plan_options.partial_dtype = partial_dtype_from_flags(args);
  const Workload& workload = built.kinds.front().workload;
  options.pricing.partial_dtype = partial_dtype_of(plan_options, workload.shape().dtype);
  if (!built.single()) return partition_kinds(args, options, built, workload_ms, out);
  const PlacementResult result = place(workload, options);
  const BlockHypergraph hypergraph = build_block_hypergraph(workload, options.pricing);
  const PlacementMetrics dcp_figures = evaluate(workload, hypergraph, result.placement);
  const auto baseline_start = Clock::now();
  const Baselines baselines = baselines_of(workload, hypergraph, options);
  const double baselines_ms = ms_since(baseline_start);

  if (args.flag("--json")) {
    JsonWriter json;
    json.begin_object();
    json.field("nodes", std::int64_t{options.cluster.nodes});
    json.field("devices_per_node", std::int64_t{options.cluster.devices_per_node});
    json.field("block_size", workload.blocks().block_size());
    json.field("token_block_count", std::int64_t{workload.blocks().block_count()});
    json.field("work_unit_count", workload.work_unit_count());
    json.field("within_bounds", result.within_bounds);
    json.field("memory_bound_is_packing", result.memory_bound_is_packing);
    write_figures(json, dcp_figures);
    json.key("placement").begin_object();
    write_token_blocks(json, workload, result.placement);
    write_work_units(json, workload, result.placement);
    json.end_object();
    write_baselines(json, baselines);
    write_timings(json, workload_ms, result.timings, baselines_ms);
    json.end_object();
    out << json.str() << "\n";
    return 0;
  }

  out << "batch      " << workload.batch().size() << " sequences, "
      << workload.batch().total_tokens() << " tokens; B = " << workload.blocks().block_size()
      << ", " << workload.blocks().block_count() << " token blocks, " << workload.work_unit_count()
      << " work units\n";
  out << "cluster    " << options.cluster.nodes << " nodes x " << options.cluster.devices_per_node
      << " devices; dcp placement " << (result.within_bounds ? "within" : "OUTSIDE")
      << " its bounds"
      << (result.memory_bound_is_packing ? " (memory: largest-first packing bound)" : "") << "\n\n";
  print_tables(out, dcp_figures, baselines);
  print_timings(out, workload_ms, result.timings, baselines_ms);
  return 0;
}

}  // namespace dcp::cli

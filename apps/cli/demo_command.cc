// SPDX-License-Identifier: Apache-2.0
// `dcp demo`: what a newcomer runs first. Samples a realistic batch, plans it with dcp and the
// static baselines, verifies every plan, executes each on local ranks, checks each against dense
// fp64 attention, and prints a side-by-side table: each plan's time simulated on the cluster it was
// planned for, beside its time measured here. With several attention kinds, every strategy
// plans every kind on one token placement, and each kind is simulated, run and checked.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/parse.h"
#include "dcp/core/timing.h"

#include "dcp/model/cluster.h"
#include "dcp/model/sequence_batch.h"
#include "dcp/model/workload.h"

#include "dcp/planner/baselines/static_plans.h"
#include "dcp/planner/model_plan_builder.h"
#include "dcp/planner/placement/placement.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/program/model_plan.h"
#include "dcp/program/program.h"
#include "dcp/program/program_stats.h"
#include "dcp/program/verifier/verifier.h"
#include "dcp/runtime/batch_tensors.h"
#include "dcp/runtime/dense_reference.h"
#include "dcp/runtime/distributed_run.h"
#include "dcp/selection/model_plan_search.h"
#include "dcp/selection/plan_search.h"
#include "dcp/sim/model_simulation.h"
#include "dcp/sim/simulator.h"
#include "dcp/workload_builder.h"

#include "apps/cli/command_table.h"
#include "apps/cli/execution.h"
#include "apps/cli/plan_flags.h"
#include "apps/cli/workload_flags.h"

namespace dcp::cli {
namespace {

struct DemoRow {
  std::string strategy;
  double plan_ms = 0;
  std::int64_t inter_node = 0;
  std::int64_t intra_node = 0;
  double imbalance = 1;
  double simulated_forward_ms = 0;  // on the cluster the plan was made for
  double simulated_backward_ms = 0;
  double forward_ms = 0;  // measured here
  double backward_ms = 0;
  double error = 0;
};

// The demo's defaults: a LongDataCollections-like batch small enough for the fp64 reference on a
// laptop, on 2 nodes x 4 devices.
constexpr std::pair<std::string_view, std::string_view> kDemoDefaults[] = {
    {"--tokens", "16384"}, {"--heads", "8"}, {"--kv-heads", "2"},
    {"--head-dim", "64"},  {"--nodes", "2"}, {"--devices-per-node", "4"},
    {"--seed", "3"}};

// The dense fp64 reference of a workload, its time on stderr ("dcp demo: <what>dense fp64 ...").
runtime::DenseReference timed_reference(const std::string& what, const Workload& workload,
                                        const runtime::BatchInputs& inputs, std::int32_t threads) {
  std::cerr << "dcp demo: " << what << "dense fp64 reference attention, forward and backward ..."
            << std::flush;
  const auto start = Clock::now();
  runtime::DenseReference reference =
      runtime::dense_reference(workload, inputs, workload.shape().effective_scale(), threads);
  std::cerr << " " << static_cast<std::int64_t>(ms_since(start)) << " ms\n";
  return reference;
}

bool given(const std::vector<std::string>& args, std::string_view flag) {
  return std::any_of(args.begin(), args.end(), [&](const std::string& arg) {
    return arg == flag || arg.starts_with(std::string(flag) + "=");
  });
}

// The given flag values, else the demo's defaults.
std::vector<std::string> with_defaults(std::span<const std::string> argv) {
  std::vector<std::string> args(argv.begin(), argv.end());
  if (!given(args, "--dist") && !given(args, "--seqlens") && !given(args, "--seqlens-file")) {
    args.insert(args.end(), {"--dist", "ldc"});
  }
  for (const auto& [flag, value] : kDemoDefaults) {
    if (!given(args, flag)) args.insert(args.end(), {std::string(flag), std::string(value)});
  }
  return args;
}

// A column of a demo table: its header, its width, and whether it is left-aligned (else right).
struct Column {
  std::string_view name;
  int width = 0;
  bool left = false;
};

// A label over columns [first, first + count) of a table.
struct ColumnGroup {
  std::string label;
  std::size_t first = 0;
  std::size_t count = 0;
};

// A table's two header lines: the groups' labels, each centred over its columns (moved right where
// it would touch the label before it), then the columns' names, one space apart.
std::string table_header(std::span<const Column> columns, std::span<const ColumnGroup> groups) {
  std::string names;
  std::vector<std::size_t> starts;
  for (const Column& column : columns) {
    if (!names.empty()) names.push_back(' ');
    starts.push_back(names.size());
    const std::size_t pad = static_cast<std::size_t>(column.width) > column.name.size()
                                ? static_cast<std::size_t>(column.width) - column.name.size()
                                : 0;
    if (!column.left) names.append(pad, ' ');
    names.append(column.name);
    if (column.left) names.append(pad, ' ');
  }
  std::string labels;
  for (const ColumnGroup& group : groups) {
    const std::size_t begin = starts[group.first];
    const std::size_t last = group.first + group.count - 1;
    const std::size_t end = last + 1 < starts.size() ? starts[last + 1] - 1 : names.size();
    const std::size_t half = group.label.size() / 2;
    const std::size_t centred = (begin + end) / 2 > half ? (begin + end) / 2 - half : 0;
    const std::size_t at = std::max(centred, labels.empty() ? 0 : labels.size() + 2);
    labels.append(at - labels.size(), ' ');
    labels.append(group.label);
  }
  labels.push_back('\n');
  labels.append(names);
  labels.push_back('\n');
  return labels;
}

// The hardware threads the demo's ranks share.
std::int32_t hardware_threads() {
  return static_cast<std::int32_t>(std::max(1u, std::thread::hardware_concurrency()));
}

// The groups' labels: what the simulated times are of, and where the measured ones come from.
std::string simulated_label(const ClusterSpec& cluster) { return "simulated on " + cluster.name; }
std::string measured_label() {
  return "measured here on " + std::to_string(hardware_threads()) + " CPU threads";
}

// The two lines above a demo table: what its simulated times are (`simulated`: of what), and what
// its measured ones are.
void write_time_notes(const ClusterSpec& cluster, std::string_view simulated, std::ostream& out) {
  out << "simulated: " << simulated << " on the cluster it was planned for (" << cluster.name
      << " cost model, " << cluster.shape.nodes << " x " << cluster.shape.devices_per_node
      << " devices); dcp keeps its fastest plan there.\n"
      << "measured: the same plans run here, " << cluster.shape.devices()
      << " ranks as threads of this process on " << hardware_threads()
      << " CPU threads; not what the cluster would take.\n\n";
}

// One attention kind's figures under one strategy; of the step row, the sums over kinds of layers
// x each kind's.
struct KindRow {
  std::string kind;
  std::int64_t layers = 1;
  std::int64_t inter_node = 0;
  std::int64_t intra_node = 0;
  double imbalance = 1;
  double simulated_ms = 0;
  double forward_ms = 0;
  double backward_ms = 0;
  double error = 0;
};

struct KindsDemoRow {
  std::string strategy;
  double plan_ms = 0;
  std::vector<KindRow> kinds;
  KindRow step;
};

// The demo with several attention kinds: per strategy, build_model_plan's plan of every kind on
// one token placement, verified as a whole, simulated (each kind's layer and the step), and each
// kind run on local ranks and checked against dense fp64 attention under its own mask.
int demo_kinds(const std::vector<Strategy>& strategies, PlanOptions plan_options,
               const ExecutionOptions& execution, const BuiltKinds& kinds, std::uint64_t seed,
               std::ostream& out) {
  const Workload& first = kinds.kinds.front().workload;
  const SequenceBatch& batch = first.batch();
  TokenCount longest = 0;
  for (SeqIndex s = 0; s < batch.size(); ++s) longest = std::max(longest, batch.length(s));
  std::cerr << "dcp demo: batch of " << batch.size() << " sequences, " << batch.total_tokens()
            << " tokens (longest " << longest << "), " << kinds.kinds.size()
            << (kinds.kinds.size() == 1 ? " attention kind, " : " attention kinds, ")
            << first.shape().q_heads << "/" << first.shape().kv_heads << " heads, head dim "
            << first.shape().head_dim << ", " << to_string(first.shape().dtype) << "; "
            << plan_options.cluster.shape.nodes << " nodes x "
            << plan_options.cluster.shape.devices_per_node << " devices ("
            << plan_options.cluster.name << " cost model)\n";
  const runtime::BatchShape shape = runtime::batch_shape_of(first);
  // One set of inputs for every kind: the layers of a model see the same tensors' shapes.
  const runtime::BatchInputs inputs = runtime::random_inputs(shape, seed);
  const std::int32_t threads = hardware_threads();
  std::vector<runtime::DenseReference> references;
  for (const KindWorkload& kind : kinds.kinds) {
    references.push_back(
        timed_reference("kind '" + kind.name + "': ", kind.workload, inputs, threads));
  }

  std::vector<KindsDemoRow> rows;
  for (const Strategy strategy : strategies) {
    plan_options.strategy = strategy;
    KindsDemoRow row;
    row.strategy = std::string(to_string(strategy));
    std::cerr << "dcp demo: " << row.strategy << ": plan" << std::flush;
    const auto start = Clock::now();
    const BuiltModelPlan built = with_flag("--strategies " + row.strategy, [&] {
      return build_model_plan(kinds.kinds, plan_options);
    });
    row.plan_ms = ms_since(start);
    std::cerr << " " << static_cast<std::int64_t>(row.plan_ms) << " ms, verify" << std::flush;
    const ModelVerifyReport report = verify(built.plan);
    if (!report.ok) {
      const std::string where =
          report.first_kind.empty() ? "" : "kind '" + report.first_kind + "': ";
      throw Error(row.strategy + " plan fails verification: " + where + describe(*report.first));
    }
    std::cerr << ", simulate" << std::flush;
    const sim::ModelSimulation simulation = sim::simulate(built.plan, plan_options.cluster);
    row.step.kind = "step";
    row.step.layers = 0;
    row.step.simulated_ms = simulation.step_seconds * 1e3;
    for (std::size_t k = 0; k < built.plan.kinds.size(); ++k) {
      const KindPlan& kind = built.plan.kinds[k];
      KindRow figures;
      figures.kind = kind.name;
      figures.layers = kind.layers;
      for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
        const PassTraffic traffic = pass_traffic(kind.plan.header, kind.plan.programs(pass));
        figures.inter_node += traffic.inter_node;
        figures.intra_node += traffic.intra_node;
      }
      figures.imbalance =
          evaluate(built.kinds[k].workload, built.kinds[k].placement).imbalance_compute;
      figures.simulated_ms = simulation.kinds[k].passes.seconds() * 1e3;
      std::cerr << ", run kind '" << kind.name << "'" << std::flush;
      const runtime::RunResult result =
          execute_plan(nullptr, kind.plan, built.kinds[k].workload.batch(), inputs, execution.run);
      figures.forward_ms = result.forward_seconds * 1e3;
      figures.backward_ms = result.backward_seconds * 1e3;
      const runtime::OutputErrors errors =
          runtime::compare_outputs(shape, result.outputs, references[k]);
      figures.error = errors.worst_relative();
      try {
        check_errors(errors, shape.storage);
      } catch (const Error& e) {
        throw Error(row.strategy + " kind '" + kind.name + "': " + e.what());
      }
      row.step.layers += kind.layers;
      row.step.inter_node += kind.layers * figures.inter_node;
      row.step.intra_node += kind.layers * figures.intra_node;
      row.step.forward_ms += static_cast<double>(kind.layers) * figures.forward_ms;
      row.step.backward_ms += static_cast<double>(kind.layers) * figures.backward_ms;
      row.kinds.push_back(figures);
    }
    std::cerr << ", checked vs reference\n";
    rows.push_back(row);
  }

  out << "dcp demo: " << batch.size() << " sequences, " << batch.total_tokens()
      << " tokens (longest " << longest << "), " << kinds.kinds.size()
      << (kinds.kinds.size() == 1 ? " attention kind" : " attention kinds")
      << " on one token placement, " << plan_options.cluster.shape.nodes << " nodes x "
      << plan_options.cluster.shape.devices_per_node
      << " devices; every plan verified and simulated, every kind's result checked against dense "
         "fp64 attention\n";
  write_time_notes(plan_options.cluster, "each plan's layer and step", out);
  const Column columns[] = {{"strategy", 10, true}, {"plan ms", 9},        {"kind", 12, true},
                            {"layers", 6},          {"inter-node MB", 15}, {"intra-node MB", 15},
                            {"imbalance", 10},      {"simulated ms", 13},  {"forward ms", 11},
                            {"backward ms", 12},    {"max error", 11}};
  const ColumnGroup groups[] = {{simulated_label(plan_options.cluster), 7, 1},
                                {measured_label(), 8, 2}};
  out << table_header(columns, groups);
  char line[256];
  for (const KindsDemoRow& row : rows) {
    char plan_ms[32];
    std::snprintf(plan_ms, sizeof(plan_ms), "%.1f", row.plan_ms);
    for (const KindRow& kind : row.kinds) {
      const bool first_kind = &kind == &row.kinds.front();
      std::snprintf(line, sizeof(line),
                    "%-10s %9s %-12s %6lld %15s %15s %10.2f %13.3f %11.1f %12.1f %11.2e\n",
                    first_kind ? row.strategy.c_str() : "", first_kind ? plan_ms : "",
                    kind.kind.c_str(), static_cast<long long>(kind.layers),
                    format_mb(kind.inter_node, 2).c_str(), format_mb(kind.intra_node, 2).c_str(),
                    kind.imbalance, kind.simulated_ms, kind.forward_ms, kind.backward_ms,
                    kind.error);
      out << line;
    }
    std::snprintf(line, sizeof(line), "%-10s %9s %-12s %6lld %15s %15s %10s %13.3f %11.1f %12.1f\n",
                  "", "", "step", static_cast<long long>(row.step.layers),
                  format_mb(row.step.inter_node, 2).c_str(),
                  format_mb(row.step.intra_node, 2).c_str(), "", row.step.simulated_ms,
                  row.step.forward_ms, row.step.backward_ms);
    out << line;
  }
  out << "\nMB: bytes moved by one layer's forward plus backward. imbalance: the busiest device's "
         "attention FLOPs over the mean. simulated ms: one layer's forward plus backward under the "
      << plan_options.cluster.name
      << " cost model (docs/simulator.md). step: the sum over kinds of layers x each kind's figure "
         "(the attention of one training step). forward and backward ms: the slowest rank's, "
         "measured here. max error: largest relative "
         "error of o, lse, dq, dk, dv (bound "
      << error_bound(shape.storage) << " for " << kernels::to_string(shape.storage) << ").\n";
  return 0;
}

}  // namespace

int run_demo(std::span<const std::string> argv, std::ostream& out) {
  std::vector<FlagSpec> specs = workload_flags();
  for (const FlagSpec& flag : plan_flags()) {
    if (flag.name != "--strategy") specs.push_back(flag);
  }
  for (const FlagSpec& flag : execution_flags()) {
    if (flag.name != "--comm") specs.push_back(flag);
  }
  specs.push_back(
      {"--strategies", "LIST", "comma-separated [dcp,ring,zigzag,ulysses,hybrid,te,loongtrain]"});
  specs.push_back({"--help", "", "show this help"});
  // The help shows the demo's defaults where they differ from the other commands'.
  std::vector<std::string> helps;
  helps.reserve(specs.size());
  for (FlagSpec& spec : specs) {
    for (const auto& [flag, value] : kDemoDefaults) {
      if (spec.name != flag) continue;
      const std::string_view text = spec.help.substr(0, spec.help.rfind(" ["));
      helps.push_back(std::string(text) + " [" + std::string(value) + "]");
      spec.help = helps.back();
    }
  }
  const std::vector<std::string> full = with_defaults(argv);
  const Args args(specs, full);
  if (args.flag("--help")) {
    out << format_help(
        "dcp demo [flags]",
        "Samples a realistic batch (default: LongDataCollections-like lengths, 16384 tokens, "
        "causal, 8 q / 2 kv heads, head dim 64, bf16), plans it with dcp and with the static "
        "strategies for 2 nodes x 4 devices, verifies every plan, executes forward and backward "
        "on local ranks (threads of this process), checks every result against dense fp64 "
        "attention and prints a side-by-side table: each plan's forward and backward simulated on "
        "the cluster it was planned for, beside the times measured here. Every workload and plan "
        "flag can change the "
        "defaults. With several attention kinds (--mask KIND=SPEC, --layers KIND=N,...), each "
        "strategy plans every kind on one token placement; each kind is simulated (one layer, "
        "and the step: the sum over kinds of layers x forward and backward), run and checked "
        "against dense fp64 attention under its own mask.",
        specs);
    return 0;
  }
  const std::vector<Strategy> strategies = list_flag<Strategy>(
      args, "--strategies", "dcp,ring,zigzag,ulysses,hybrid,te,loongtrain", parse_strategy);
  const auto seed = static_cast<std::uint64_t>(args.get_int("--seed", 0, 0));
  PlanOptions plan_options = plan_options_from_flags(args, seed);
  const ExecutionOptions execution = execution_options_from_flags(args);
  const BuiltKinds kinds = kinds_from_flags(args, plan_options.cluster.shape.devices());
  if (!kinds.single()) return demo_kinds(strategies, plan_options, execution, kinds, seed, out);
  const Workload& workload = kinds.kinds.front().workload;
  const SequenceBatch& batch = workload.batch();
  TokenCount longest = 0;
  for (SeqIndex s = 0; s < batch.size(); ++s) longest = std::max(longest, batch.length(s));

  std::cerr << "dcp demo: batch of " << batch.size() << " sequences, " << batch.total_tokens()
            << " tokens (longest " << longest << "), " << workload.shape().q_heads << "/"
            << workload.shape().kv_heads << " heads, head dim " << workload.shape().head_dim << ", "
            << to_string(workload.shape().dtype) << "; " << plan_options.cluster.shape.nodes
            << " nodes x " << plan_options.cluster.shape.devices_per_node << " devices ("
            << plan_options.cluster.name << " cost model)\n";
  const runtime::BatchShape shape = runtime::batch_shape_of(workload);
  const runtime::BatchInputs inputs = runtime::random_inputs(shape, seed);
  const std::int32_t threads = hardware_threads();
  const runtime::DenseReference reference = timed_reference("", workload, inputs, threads);

  std::vector<DemoRow> rows;
  for (const Strategy strategy : strategies) {
    plan_options.strategy = strategy;
    DemoRow row;
    row.strategy = std::string(to_string(strategy));
    std::cerr << "dcp demo: " << row.strategy << ": plan" << std::flush;
    const auto start = Clock::now();
    const BuiltPlan built = with_flag("--strategies " + row.strategy,
                                      [&] { return build_plan(workload, plan_options); });
    row.plan_ms = ms_since(start);
    std::cerr << " " << static_cast<std::int64_t>(row.plan_ms) << " ms, verify" << std::flush;
    const VerifyReport report = verify(built.plan);
    if (!report.ok) throw Error(row.strategy + " plan fails verification: " + describe(report));
    for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
      const PassTraffic traffic = pass_traffic(built.plan.header, built.plan.programs(pass));
      row.inter_node += traffic.inter_node;
      row.intra_node += traffic.intra_node;
    }
    row.imbalance = evaluate(built.workload, built.placement).imbalance_compute;
    std::cerr << ", simulate" << std::flush;
    const sim::PlanSimulation simulation = sim::simulate(built.plan, plan_options.cluster);
    row.simulated_forward_ms = simulation.forward.seconds * 1e3;
    row.simulated_backward_ms = simulation.backward.seconds * 1e3;
    std::cerr << ", run forward and backward on " << built.plan.header.cluster.devices() << " ranks"
              << std::flush;
    const runtime::RunResult result =
        execute_plan(nullptr, built.plan, batch, inputs, execution.run);
    row.forward_ms = result.forward_seconds * 1e3;
    row.backward_ms = result.backward_seconds * 1e3;
    const runtime::OutputErrors errors = runtime::compare_outputs(shape, result.outputs, reference);
    row.error = errors.worst_relative();
    std::cerr << " " << static_cast<std::int64_t>(row.forward_ms + row.backward_ms)
              << " ms, check vs reference\n";
    check_errors(errors, shape.storage);
    rows.push_back(row);
  }

  out << "dcp demo: " << batch.size() << " sequences, " << batch.total_tokens()
      << " tokens (longest " << longest << "), " << plan_options.cluster.shape.nodes << " nodes x "
      << plan_options.cluster.shape.devices_per_node
      << " devices; every plan verified, every result checked against dense fp64 attention\n";
  write_time_notes(plan_options.cluster, "each plan's forward and backward", out);
  const Column columns[] = {{"strategy", 10, true}, {"plan ms", 9},     {"inter-node MB", 15},
                            {"intra-node MB", 15},  {"imbalance", 11},  {"forward ms", 11},
                            {"backward ms", 12},    {"forward ms", 11}, {"backward ms", 12},
                            {"max error", 11}};
  const ColumnGroup groups[] = {{simulated_label(plan_options.cluster), 5, 2},
                                {measured_label(), 7, 2}};
  out << table_header(columns, groups);
  char line[256];
  for (const DemoRow& row : rows) {
    std::snprintf(line, sizeof(line),
                  "%-10s %9.1f %15s %15s %11.2f %11.3f %12.3f %11.1f %12.1f %11.2e\n",
                  row.strategy.c_str(), row.plan_ms, format_mb(row.inter_node, 2).c_str(),
                  format_mb(row.intra_node, 2).c_str(), row.imbalance, row.simulated_forward_ms,
                  row.simulated_backward_ms, row.forward_ms, row.backward_ms, row.error);
    out << line;
  }
  out << "\nMB: bytes moved by forward plus backward. imbalance: the busiest device's attention "
         "FLOPs over the mean. simulated ms: the pass's time under the "
      << plan_options.cluster.name
      << " cost model (docs/simulator.md). measured ms: the slowest rank's, here. max error: "
         "largest relative error of o, lse, dq, dk, dv (bound "
      << error_bound(shape.storage) << " for " << kernels::to_string(shape.storage) << ").\n";
  return 0;
}

}  // namespace dcp::cli

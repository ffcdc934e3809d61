// SPDX-License-Identifier: Apache-2.0
// `dcp plan`, `dcp verify` and `dcp inspect`: build a plan file, check one, look inside one.
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/json_writer.h"
#include "dcp/core/npy.h"
#include "dcp/core/parse.h"
#include "dcp/core/timing.h"

#include "dcp/model/workload.h"

#include "dcp/planner/model_plan_builder.h"
#include "dcp/planner/placement/hierarchical_placer.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/program/model_plan.h"
#include "dcp/program/plan_file/model_plan_file.h"
#include "dcp/program/plan_file/plan_file.h"
#include "dcp/program/plan_json.h"
#include "dcp/program/program.h"
#include "dcp/program/program_stats.h"
#include "dcp/program/verifier/verifier.h"
#include "dcp/runtime/distributed_run.h"
#include "dcp/selection/model_plan_search.h"
#include "dcp/selection/plan_search.h"
#include "dcp/workload_builder.h"

#include "apps/cli/command_table.h"
#include "apps/cli/plan_flags.h"
#include "apps/cli/workload_flags.h"

namespace dcp::cli {
namespace {

// "timing_ms": the planner's steps, and selection's simulations where a search ran them.
void write_timing(JsonWriter& json, double workload_ms, const PlanTimings& timings,
                  std::optional<double> selection_ms, double total_ms) {
  json.key("timing_ms").begin_object();
  json.field("workload", workload_ms);
  json.field("partition", timings.partition_ms);
  json.field("schedule_forward", timings.schedule_forward_ms);
  json.field("schedule_backward", timings.schedule_backward_ms);
  json.field("compile", timings.compile_ms);
  if (selection_ms) json.field("selection", *selection_ms);
  json.field("total", total_ms);
  json.end_object();
}

void write_pass(JsonWriter& json, const Plan& plan, Pass pass, const ScheduleSummary& summary,
                const PassTraffic& traffic) {
  json.key(to_string(pass)).begin_object();
  json.field("stages", std::int64_t{summary.stages});
  json.field("fetch_launches", std::int64_t{summary.fetch_launches});
  json.field("balanced_stages", summary.balanced);
  json.field("own_outputs_last", summary.own_outputs_last);
  json.field("stage_parts", std::int64_t{summary.stage_parts});
  json.field("estimated_ms", summary.estimate.seconds * 1e3);
  json.field("busiest_device_compute_ms", summary.estimate.compute_seconds * 1e3);
  json.field("bytes_inter_node", traffic.inter_node);
  json.field("bytes_intra_node", traffic.intra_node);
  // By the kind of value sent: the pass's inputs and partial outputs.
  const auto by_kind = [&](const char* name, const auto& bytes) {
    json.key(name).begin_object();
    static constexpr SlotKind kForward[] = {SlotKind::kQ, SlotKind::kKV, SlotKind::kOut};
    static constexpr SlotKind kBackward[] = {SlotKind::kQGrad, SlotKind::kKV, SlotKind::kDQ,
                                             SlotKind::kDKV};
    const std::span<const SlotKind> kinds =
        pass == Pass::kForward ? std::span<const SlotKind>(kForward) : std::span(kBackward);
    for (const SlotKind kind : kinds) {
      json.field(to_string(kind), bytes[static_cast<std::size_t>(kind)]);
    }
    json.end_object();
  };
  by_kind("bytes_inter_node_by_kind", traffic.inter_node_by_kind);
  by_kind("bytes_intra_node_by_kind", traffic.intra_node_by_kind);
  std::int64_t instructions = 0;
  for (const Program& program : plan.programs(pass)) {
    instructions += static_cast<std::int64_t>(program.instructions.size());
  }
  json.field("instructions", instructions);
  json.end_object();
}

void write_selection(const std::vector<PlanCandidate>& candidates, const std::string& kept,
                     const char* what, std::ostream& out) {
  char line[160];
  out << "selection  kept " << kept << " (" << what << ", the fastest is kept):";
  for (const PlanCandidate& c : candidates) {
    out << " " << c.strategy << " ";
    if (!c.feasible) {
      out << "n/a";
    } else if (!c.simulated) {
      std::snprintf(line, sizeof(line),
                    c.bounded ? "screened (estimate at least %.3f)" : "screened (estimate %.3f)",
                    c.estimate_seconds * 1e3);
      out << line;
    } else {
      std::snprintf(line, sizeof(line), "%.3f", c.seconds() * 1e3);
      out << line;
    }
    if (&c != &candidates.back()) out << ",";
  }
  out << "\n";
}

// dcp plan with several attention kinds: one token placement, every kind's Programs.
int plan_kinds(const Args& args, const PlanOptions& options, const BuiltKinds& kinds,
               double workload_ms, std::ostream& out) {
  const auto start = Clock::now();
  const BuiltModelPlan built = with_flag("--strategy " + std::string(to_string(options.strategy)),
                                         [&] { return build_model_plan(kinds.kinds, options); });
  const double total_ms = workload_ms + ms_since(start);
  if (const auto path = args.get("--out")) {
    with_flag("--out " + quoted(*path), [&] { write_model_plan_file(*path, built.plan); });
  }
  if (const auto path = args.get("--json")) {
    JsonWriter json;
    json.begin_object();
    json.field("strategy", std::string_view(built.plan.kinds.front().plan.header.strategy));
    json.field("cluster", std::string_view(options.cluster.name));
    json.field("nodes", std::int64_t{options.cluster.shape.nodes});
    json.field("devices_per_node", std::int64_t{options.cluster.shape.devices_per_node});
    const Workload& first = built.kinds.front().workload;
    json.field("sequences", std::int64_t{first.batch().size()});
    json.field("tokens", first.batch().total_tokens());
    json.field("block_size", first.blocks().block_size());
    json.field("token_blocks", std::int64_t{first.blocks().block_count()});
    json.field("placement_within_bounds", built.placement_within_bounds);
    json.key("kinds").begin_array();
    for (std::size_t k = 0; k < built.kinds.size(); ++k) {
      const BuiltPlan& kind = built.kinds[k];
      json.begin_object();
      json.field("name", std::string_view(built.plan.kinds[k].name));
      json.field("layers", std::int64_t{built.plan.kinds[k].layers});
      json.field("work_units", kind.workload.work_unit_count());
      json.field("placement_within_bounds", kind.placement_within_bounds);
      json.field("partial_dtype", to_string(kind.plan.header.partial_dtype));
      write_pass(json, kind.plan, Pass::kForward, kind.forward,
                 pass_traffic(kind.plan.header, kind.plan.forward));
      write_pass(json, kind.plan, Pass::kBackward, kind.backward,
                 pass_traffic(kind.plan.header, kind.plan.backward));
      json.key("plan").raw(plan_to_json(kind.plan));
      json.end_object();
    }
    json.end_array();
    write_timing(json, workload_ms, built.timings, std::nullopt, total_ms);
    json.end_object();
    if (*path == "-") {
      out << json.str() << "\n";
      return 0;
    }
    with_flag("--json " + quoted(*path), [&] { write_file_atomically(*path, json.str() + "\n"); });
  }
  const Workload& first = built.kinds.front().workload;
  char line[240];
  out << "plan       " << built.plan.kinds.front().plan.header.strategy << " on "
      << options.cluster.name << ", " << options.cluster.shape.nodes << " nodes x "
      << options.cluster.shape.devices_per_node << " devices, " << built.kinds.size()
      << " attention kinds on one token placement\n";
  out << "batch      " << first.batch().size() << " sequences, " << first.batch().total_tokens()
      << " tokens, " << first.blocks().block_count() << " token blocks (largest "
      << first.blocks().block_size() << ")\n";
  std::snprintf(line, sizeof(line), "%-12s %6s %10s %9s %13s %15s %15s\n", "kind", "layers",
                "work units", "pass", "estimate ms", "inter-node MB", "intra-node MB");
  out << line;
  for (std::size_t k = 0; k < built.kinds.size(); ++k) {
    const BuiltPlan& kind = built.kinds[k];
    for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
      const ScheduleSummary& summary = pass == Pass::kForward ? kind.forward : kind.backward;
      const PassTraffic traffic = pass_traffic(kind.plan.header, kind.plan.programs(pass));
      const bool first_row = pass == Pass::kForward;
      std::snprintf(line, sizeof(line), "%-12s %6s %10s %9s %13.3f %15s %15s\n",
                    first_row ? built.plan.kinds[k].name.c_str() : "",
                    first_row ? std::to_string(built.plan.kinds[k].layers).c_str() : "",
                    first_row ? std::to_string(kind.workload.work_unit_count()).c_str() : "",
                    std::string(to_string(pass)).c_str(), summary.estimate.seconds * 1e3,
                    format_mb(traffic.inter_node, 2).c_str(),
                    format_mb(traffic.intra_node, 2).c_str());
      out << line;
    }
  }
  if (!built.placement_within_bounds) {
    out << "balance    a kind's compute or the memory is over its cap (the closest placement "
           "found is kept)\n";
  }
  if (!built.candidates.empty()) {
    write_selection(built.candidates, built.kept,
                    "simulated step ms: the sum over kinds of layers x (forward + backward)", out);
  }
  std::snprintf(line, sizeof(line),
                "time ms    workload %.1f, partition %.1f, schedule forward %.1f, backward %.1f, "
                "compile %.1f, total %.1f\n",
                workload_ms, built.timings.partition_ms, built.timings.schedule_forward_ms,
                built.timings.schedule_backward_ms, built.timings.compile_ms, total_ms);
  out << line;
  if (const auto path = args.get("--out")) out << "wrote      " << *path << "\n";
  return 0;
}

}  // namespace

int run_plan(std::span<const std::string> argv, std::ostream& out) {
  std::vector<FlagSpec> specs = workload_flags();
  specs.insert(specs.end(), plan_flags().begin(), plan_flags().end());
  specs.push_back({"--out", "FILE", "write the binary plan", "-o"});
  specs.push_back({"--json", "FILE", "write the plan as JSON, with timing_ms ('-': stdout)"});
  specs.push_back({"--help", "", "show this help"});
  const Args args(specs, argv);
  if (args.flag("--help")) {
    out << format_help(
        "dcp plan (--seqlens L,... | --seqlens-file F | --dist NAME) [flags] [-o FILE] "
        "[--json FILE]",
        "Plans one batch for a cluster: placement, forward and backward schedules, and one "
        "Program per device and pass. Prints a summary; -o writes the binary plan file, --json "
        "its JSON export. --seed seeds the sampled batch and the planner; the same inputs and "
        "seed give the same plan bytes.",
        specs);
    return 0;
  }
  const auto start = Clock::now();
  const PlanOptions options =
      plan_options_from_flags(args, static_cast<std::uint64_t>(args.get_int("--seed", 0, 0)));

  const BuiltKinds kinds = kinds_from_flags(args, options.cluster.shape.devices());
  const double workload_ms = ms_since(start);
  if (!kinds.single()) return plan_kinds(args, options, kinds, workload_ms, out);
  const BuiltPlan built = with_flag("--strategy " + std::string(to_string(options.strategy)), [&] {
    return build_plan(kinds.kinds.front().workload, options);
  });
  const double total_ms = ms_since(start);
  const PassTraffic traffic[2] = {pass_traffic(built.plan.header, built.plan.forward),
                                  pass_traffic(built.plan.header, built.plan.backward)};

  if (const auto path = args.get("--out")) {
    with_flag("--out " + quoted(*path), [&] { write_plan_file(*path, built.plan); });
  }
  if (const auto path = args.get("--json")) {
    JsonWriter json;
    json.begin_object();
    json.field("strategy", std::string_view(built.plan.header.strategy));
    json.field("cluster", std::string_view(options.cluster.name));
    json.field("nodes", std::int64_t{options.cluster.shape.nodes});
    json.field("devices_per_node", std::int64_t{options.cluster.shape.devices_per_node});
    json.field("data_parallel", std::int64_t{built.data_parallel});
    json.field("sequences", std::int64_t{built.workload.batch().size()});
    json.field("tokens", built.workload.batch().total_tokens());
    json.field("block_size", built.workload.blocks().block_size());
    json.field("token_blocks", std::int64_t{built.workload.blocks().block_count()});
    json.field("work_units", built.workload.work_unit_count());
    json.field("placement_within_bounds", built.placement_within_bounds);
    json.field("partial_dtype", to_string(built.plan.header.partial_dtype));
    json.field("kept_kv_bytes_max_device", max_kept_bytes(built.plan));
    write_pass(json, built.plan, Pass::kForward, built.forward, traffic[0]);
    write_pass(json, built.plan, Pass::kBackward, built.backward, traffic[1]);
    write_timing(json, workload_ms, built.timings, built.selection.simulate_ms, total_ms);
    json.key("plan").raw(plan_to_json(built.plan));
    json.end_object();
    if (*path == "-") {
      out << json.str() << "\n";
      return 0;
    }
    with_flag("--json " + quoted(*path), [&] { write_file_atomically(*path, json.str() + "\n"); });
  }

  const Workload& workload = built.workload;
  char line[240];
  out << "plan       " << built.plan.header.strategy << " on " << options.cluster.name << ", "
      << options.cluster.shape.nodes << " nodes x " << options.cluster.shape.devices_per_node
      << " devices";
  if (built.data_parallel > 1) {
    out << ", data parallel " << built.data_parallel << " (groups of "
        << options.cluster.shape.devices() / built.data_parallel << " devices)";
  }
  out << "\n";
  out << "batch      " << workload.batch().size() << " sequences, "
      << workload.batch().total_tokens() << " tokens, " << workload.blocks().block_count()
      << " token blocks (largest " << workload.blocks().block_size() << "), "
      << workload.work_unit_count() << " work units\n";
  out << "partials   travel in " << to_string(built.plan.header.partial_dtype)
      << ", accumulated in fp32\n";
  std::snprintf(line, sizeof(line), "%-9s %7s %13s %15s %15s %15s\n", "pass", "stages",
                "estimate ms", "max compute ms", "inter-node MB", "intra-node MB");
  out << line;
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    const ScheduleSummary& s = pass == Pass::kForward ? built.forward : built.backward;
    const PassTraffic& pass_bytes = traffic[pass == Pass::kForward ? 0 : 1];
    std::snprintf(line, sizeof(line), "%-9s %7d %13.3f %15.3f %15s %15s\n",
                  std::string(to_string(pass)).c_str(), s.stages, s.estimate.seconds * 1e3,
                  s.estimate.compute_seconds * 1e3, format_mb(pass_bytes.inter_node, 2).c_str(),
                  format_mb(pass_bytes.intra_node, 2).c_str());
    out << line;
  }
  if (const std::int64_t kept = max_kept_bytes(built.plan); kept > 0) {
    out << "kept kv    up to " << format_mb(kept, 2)
        << " MB per device, received in the forward pass and not again in the backward pass\n";
  }
  if (!built.own_candidates.empty()) {
    out << "own plans  dcp's partition at each block size, and any layouts it ran its way "
           "(simulated forward + backward ms; planning ms):";
    for (const OwnCandidate& c : built.own_candidates) {
      std::string dtype;
      if (c.partial_dtype != built.own_candidates.front().partial_dtype) {
        dtype.append(" (").append(to_string(c.partial_dtype)).append(" partials)");
      }
      if (c.layout == "partition") {
        std::string balance;
        if (c.tighter_balance) {
          char text[32];
          std::snprintf(text, sizeof(text), " at balance %.2g", 1 + kRetryEpsCompute);
          balance = text;
        }
        std::snprintf(line, sizeof(line), " %lld%s%s %.3f (%.0f)",
                      static_cast<long long>(c.block_size), balance.c_str(), dtype.c_str(),
                      c.seconds() * 1e3, c.plan_ms);
      } else {
        std::snprintf(line, sizeof(line), " %s layout%s %.3f (%.0f)", c.layout.c_str(),
                      dtype.c_str(), c.seconds() * 1e3, c.plan_ms);
      }
      out << line << (&c != &built.own_candidates.back() ? "," : "");
    }
    out << "\n";
  }
  if (!built.selection.candidates.empty()) {
    write_selection(built.selection.candidates, built.selection.kept,
                    "simulated forward + backward ms", out);
  }
  std::snprintf(line, sizeof(line),
                "time ms    workload %.1f, partition %.1f, schedule forward %.1f, backward %.1f, "
                "compile %.1f, selection %.1f, total %.1f\n",
                workload_ms, built.timings.partition_ms, built.timings.schedule_forward_ms,
                built.timings.schedule_backward_ms, built.timings.compile_ms,
                built.selection.simulate_ms, total_ms);
  out << line;
  if (const auto path = args.get("--out")) out << "wrote      " << *path << "\n";
  return 0;
}

int run_verify(std::span<const std::string> argv, std::ostream& out) {
  const std::vector<FlagSpec> specs = {{"--help", "", "show this help"}};
  const Args args(specs, argv, 1);
  if (args.flag("--help") || args.positional().empty()) {
    out << format_help("dcp verify FILE",
                       "Executes every device's Program of both passes (of every attention kind) "
                       "symbolically and checks "
                       "that each work unit runs once, every input is in place before use, sends "
                       "and receives match with no deadlock, every output is complete and no "
                       "slot holds two live values. Exit 0 with a summary, else the first "
                       "violation and exit 1.",
                       specs);
    return args.flag("--help") ? 0 : 2;
  }
  const std::string& path = args.positional()[0];
  const ModelPlan plan = read_model_plan_file(path);
  if (plan.is_single_plan()) {
    const VerifyReport report = verify(plan.kinds.front().plan);
    if (!report.ok) throw Error(path + ": " + describe(report));
    out << path << ": " << describe(report) << "\n";
    return 0;
  }
  const ModelVerifyReport report = verify(plan);
  if (!report.ok) {
    const std::string where = report.first_kind.empty() ? "" : "kind '" + report.first_kind + "': ";
    throw Error(path + ": " + where + describe(*report.first));
  }
  out << path << ": ok, " << plan.kinds.size() << " attention kinds on one token placement\n"
      << describe(report) << "\n";
  return 0;
}

int run_inspect(std::span<const std::string> argv, std::ostream& out) {
  const std::vector<FlagSpec> specs = {
      {"--device", "D", "only this device"},
      {"--help", "", "show this help"},
  };
  const Args args(specs, argv, 1);
  if (args.flag("--help") || args.positional().empty()) {
    out << format_help("dcp inspect FILE [--device D]",
                       "Per device and pass: instruction counts, bytes sent and received per "
                       "stage, and the buffer table's size (its peak, since slots are reused).",
                       specs);
    return args.flag("--help") ? 0 : 2;
  }
  const std::string& path = args.positional()[0];
  const Plan plan = read_plan_file(path);
  const PlanHeader& h = plan.header;
  const std::int64_t only = args.get_int("--device", -1, 0, h.cluster.devices() - 1);
  char line[320];
  out << path << ": " << h.strategy << ", " << h.cluster.nodes << " nodes x "
      << h.cluster.devices_per_node << " devices, " << h.sequences << " sequences, "
      << h.total_tokens << " tokens, " << h.token_blocks << " token blocks, " << h.q_heads << "/"
      << h.kv_heads << " heads (blocks of " << h.head_block_size << "), head dim " << h.head_dim
      << ", " << to_string(h.dtype) << "\n";
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    const auto& programs = plan.programs(pass);
    out << "\n"
        << to_string(pass) << " (" << (programs.empty() ? 0 : programs[0].stages) << " stages)\n";
    std::snprintf(line, sizeof(line),
                  "%6s %7s %5s %5s %6s %5s %6s %6s %5s %5s %5s %6s %9s %9s  %s\n", "device",
                  "instr", "load", "store", "launch", "wait", "rows", "units", "merge", "sum",
                  "free", "slots", "peak MB", "kept MB", "sent / received MB per stage");
    out << line;
    for (const Program& program : programs) {
      if (only >= 0 && program.device != only) continue;
      const ProgramStats s = program_stats(h, program);
      std::string per_stage;
      for (std::size_t i = 0; i < s.sent_by_stage.size(); ++i) {
        if (i > 0) per_stage += "  ";
        per_stage += format_mb(s.sent_by_stage[i], 2) + "/" + format_mb(s.received_by_stage[i], 2);
      }
      const auto count = [&](int op) {
        return static_cast<long long>(s.opcode_counts[static_cast<std::size_t>(op)]);
      };
      std::snprintf(line, sizeof(line),
                    "%6d %7lld %5lld %5lld %6lld %5lld %6lld %6lld %5lld %5lld %5lld %6d %9s %9s  ",
                    program.device, static_cast<long long>(s.instructions), count(0), count(1),
                    count(2), count(3), static_cast<long long>(s.attention_rows),
                    static_cast<long long>(s.attention_entries), count(6), count(7), count(8),
                    s.slots, format_mb(s.slot_bytes, 2).c_str(),
                    format_mb(s.kept_bytes, 2).c_str());
      out << line << per_stage << "\n";
    }
  }
  return 0;
}

}  // namespace dcp::cli

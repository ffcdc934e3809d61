// SPDX-License-Identifier: Apache-2.0
// `dcp simulate`: a plan file's forward and backward time on a described cluster.
#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "dcp/core/npy.h"
#include "dcp/core/parse.h"

#include "dcp/model/cluster.h"
#include "dcp/model/cluster_file.h"
#include "dcp/model/cluster_presets.h"

#include "dcp/program/model_plan.h"
#include "dcp/program/plan_file/model_plan_file.h"
#include "dcp/program/program.h"
#include "dcp/sim/chrome_trace.h"
#include "dcp/sim/model_simulation.h"
#include "dcp/sim/simulator.h"

#include "apps/cli/args.h"
#include "apps/cli/command_table.h"

namespace dcp::cli {
namespace {

std::string ms(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", seconds * 1e3);
  return text;
}

// A preset takes the plan's shape; a cluster file must describe the plan's shape.
ClusterSpec cluster_for(const std::string& name, const ClusterShape& shape) {
  if (is_cluster_preset(name)) return sim::with_shape(cluster_preset(name), shape);
  return resolve_cluster(name);
}

void print_pass(const Plan& plan, const sim::PassSimulation& s, std::int64_t steps,
                std::ostream& out) {
  const auto& programs = plan.programs(s.pass);
  double busiest = 0, total_compute = 0;
  std::int64_t inter = 0, intra = 0;
  for (const sim::DeviceTimeline& d : s.devices) {
    busiest = std::max(busiest, d.compute_seconds);
    total_compute += d.compute_seconds;
  }
  for (const sim::TransferEvent& t : s.transfers) (t.inter_node ? inter : intra) += t.bytes;
  const double devices = static_cast<double>(s.devices.size());
  const double utilisation = s.seconds > 0 ? total_compute / (devices * s.seconds) : 0;
  out << "\n"
      << to_string(s.pass) << ": " << ms(s.seconds) << " ms; busiest device computes "
      << ms(busiest) << " ms; mean utilisation " << static_cast<int>(utilisation * 100 + 0.5)
      << " %; " << s.transfers.size() << " transfers, " << format_mb(inter, 1)
      << " MB between nodes, " << format_mb(intra, 1) << " MB inside nodes\n";
  out << "  critical path: " << ms(s.critical_compute_seconds) << " ms compute, "
      << ms(s.critical_transfer_seconds) << " ms transfers, "
      << ms(std::max(0.0, s.seconds - s.critical_compute_seconds - s.critical_transfer_seconds))
      << " ms latency before transfers could start\n";

  char line[200];
  out << "  per device:\n";
  std::snprintf(line, sizeof line, "  %6s %10s %10s %10s %6s\n", "device", "compute ms", "wait ms",
                "end ms", "util %");
  out << line;
  for (std::size_t d = 0; d < s.devices.size(); ++d) {
    const sim::DeviceTimeline& t = s.devices[d];
    std::snprintf(line, sizeof line, "  %6zu %10s %10s %10s %6.0f\n", d,
                  ms(t.compute_seconds).c_str(), ms(t.wait_seconds).c_str(), ms(t.end).c_str(),
                  s.seconds > 0 ? 100 * t.compute_seconds / s.seconds : 0.0);
    out << line;
  }
  out << "  per stage (the last is the epilogue: waits, merges, stores):\n";
  std::snprintf(line, sizeof line, "  %6s %10s %10s %10s %15s %13s\n", "stage", "begin ms",
                "end ms", "span ms", "max compute ms", "total wait ms");
  out << line;
  for (std::size_t i = 0; i < s.stages.size(); ++i) {
    const sim::StageTime& st = s.stages[i];
    std::snprintf(line, sizeof line, "  %6zu %10s %10s %10s %15s %13s\n", i, ms(st.begin).c_str(),
                  ms(st.end).c_str(), ms(st.end - st.begin).c_str(), ms(st.max_compute).c_str(),
                  ms(st.total_wait).c_str());
    out << line;
  }
  // The longest steps of the critical path, in time order.
  std::vector<std::size_t> order(s.critical_path.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto length = [&](std::size_t i) {
    return s.critical_path[i].end - s.critical_path[i].start;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return length(a) > length(b); });
  if (static_cast<std::int64_t>(order.size()) > steps)
    order.resize(static_cast<std::size_t>(steps));
  std::sort(order.begin(), order.end());
  out << "  critical path (" << s.critical_path.size() << " steps; the " << order.size()
      << " longest):\n";
  for (const std::size_t i : order) {
    const sim::CriticalStep& step = s.critical_path[i];
    if (step.kind == sim::CriticalStep::Kind::kCompute) {
      const Program& program = programs[static_cast<std::size_t>(step.device)];
      std::snprintf(line, sizeof line,
                    "  %10s .. %10s ms  device %d computes: instructions %d-%d (stage %d-%d)\n",
                    ms(step.start).c_str(), ms(step.end).c_str(), step.device, step.first,
                    step.last, program.instruction_stage[static_cast<std::size_t>(step.first)],
                    program.instruction_stage[static_cast<std::size_t>(step.last)]);
    } else {
      const sim::TransferEvent& t = s.transfers[static_cast<std::size_t>(step.first)];
      std::snprintf(line, sizeof line, "  %10s .. %10s ms  transfer %d -> %d: %s MB %s\n",
                    ms(step.start).c_str(), ms(step.end).c_str(), t.src, t.dst,
                    format_mb(t.bytes, 3).c_str(),
                    t.inter_node ? "between nodes" : "inside a node");
    }
    out << line;
  }
}

}  // namespace

int run_simulate(std::span<const std::string> argv, std::ostream& out) {
  const std::vector<FlagSpec> specs = {
      {"--cluster", "PRESET|FILE",
       "a100-p4de | h100-dgx | cpu-local (take the plan's shape) | a cluster file of the plan's "
       "shape (docs/cost_model.md) [a100-p4de]"},
      {"--trace", "FILE", "write a Chrome trace (JSON) of both passes; open it in Perfetto"},
      {"--steps", "N", "critical-path steps to list per pass [12]"},
      {"--kind", "NAME", "of a plan with several attention kinds, detail this kind only [all]"},
      {"--help", "", "show this help"},
  };
  const Args args(specs, argv, 1);
  if (args.flag("--help") || args.positional().empty()) {
    out << format_help("dcp simulate FILE [--cluster PRESET|FILE] [--trace out.json]",
                       "Runs every device's forward and backward Program of a plan file together "
                       "on a described cluster (docs/simulator.md): time per pass, per-device "
                       "compute, wait and utilisation, time per stage, and the critical path. A "
                       "plan with several attention kinds: each kind's passes, and the step (the "
                       "sum over kinds of layers x forward and backward).",
                       specs);
    return args.flag("--help") ? 0 : 2;
  }
  const std::string& path = args.positional()[0];
  const std::int64_t steps = args.get_int("--steps", 12, 0, 1 << 20);
  const ModelPlan model = read_model_plan_file(path);
  const std::string cluster_name = args.get_or("--cluster", std::string(kDefaultCluster));
  const ClusterSpec cluster = with_flag("--cluster " + dcp::quoted(cluster_name), [&] {
    return cluster_for(cluster_name, model.kinds.front().plan.header.cluster);
  });
  const PlanHeader& h = model.kinds.front().plan.header;
  out << path << ": " << h.strategy << ", " << h.cluster.nodes << " nodes x "
      << h.cluster.devices_per_node << " devices, " << h.total_tokens << " tokens, "
      << to_string(h.dtype) << "; cluster " << cluster.name << "\n";
  std::vector<const KindPlan*> shown;
  if (const auto only = args.get("--kind")) {
    shown.push_back(&with_flag("--kind " + dcp::quoted(*only),
                               [&]() -> const KindPlan& { return model.kind(*only); }));
  } else {
    for (const KindPlan& kind : model.kinds) shown.push_back(&kind);
  }
  if (args.has("--trace") && shown.size() > 1) {
    throw UsageError("--trace: the plan has " + std::to_string(model.kinds.size()) +
                     " attention kinds; choose one with --kind");
  }
  const sim::ModelSimulation simulation = with_flag("--cluster " + dcp::quoted(cluster_name),
                                                    [&] { return sim::simulate(model, cluster); });
  if (!model.is_single_plan()) {
    for (const sim::KindSimulation& kind : simulation.kinds) {
      out << "kind '" << kind.name << "' (" << kind.layers
          << (kind.layers == 1 ? " layer): " : " layers): ") << "forward "
          << ms(kind.passes.forward.seconds) << " ms + backward "
          << ms(kind.passes.backward.seconds) << " ms = " << ms(kind.passes.seconds())
          << " ms per layer\n";
    }
    out << "step: " << ms(simulation.step_seconds)
        << " ms of attention per training step (the sum over kinds of layers x (forward + "
           "backward))\n";
  }
  for (const KindPlan* kind : shown) {
    const sim::PlanSimulation& passes =
        simulation.kinds[static_cast<std::size_t>(kind - model.kinds.data())].passes;
    if (!model.is_single_plan()) out << "\n== kind '" << kind->name << "'\n";
    out << "forward " << ms(passes.forward.seconds) << " ms + backward "
        << ms(passes.backward.seconds) << " ms = " << ms(passes.seconds()) << " ms\n";
    print_pass(kind->plan, passes.forward, steps, out);
    print_pass(kind->plan, passes.backward, steps, out);
    if (const auto trace = args.get("--trace")) {
      write_file_atomically(*trace, sim::chrome_trace(kind->plan, passes));
      out << "\ntrace: " << *trace << " (open in https://ui.perfetto.dev)\n";
    }
  }
  return 0;
}

}  // namespace dcp::cli

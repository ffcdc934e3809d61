// SPDX-License-Identifier: Apache-2.0
// `dcp run`: plan a batch, execute forward and backward on local or MPI ranks, check against the
// dense fp64 reference.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/timing.h"

#include "dcp/model/workload.h"

#include "dcp/comm/communicator.h"
#include "dcp/planner/model_plan_builder.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/program/model_plan.h"
#include "dcp/program/program.h"
#include "dcp/program/program_stats.h"
#include "dcp/runtime/batch_tensors.h"
#include "dcp/runtime/dense_reference.h"
#include "dcp/runtime/distributed_run.h"
#include "dcp/runtime/executor.h"
#include "dcp/selection/model_plan_search.h"
#include "dcp/workload_builder.h"

#include "apps/cli/command_table.h"
#include "apps/cli/execution.h"
#include "apps/cli/plan_flags.h"
#include "apps/cli/workload_flags.h"

namespace dcp::cli {
namespace {

// Per stage (then the epilogue): the slowest rank's time and the bytes all ranks send in it.
void print_stages(std::ostream& out, const Plan& plan, Pass pass,
                  const std::vector<runtime::PassProfile>& profiles) {
  std::vector<double> seconds;
  std::vector<std::int64_t> sent;
  for (const Program& program : plan.programs(pass)) {
    const ProgramStats stats = program_stats(plan.header, program);
    sent.resize(std::max(sent.size(), stats.sent_by_stage.size()), 0);
    for (std::size_t s = 0; s < stats.sent_by_stage.size(); ++s) sent[s] += stats.sent_by_stage[s];
  }
  for (const runtime::PassProfile& profile : profiles) {
    seconds.resize(std::max(seconds.size(), profile.stage_seconds.size()), 0.0);
    for (std::size_t s = 0; s < profile.stage_seconds.size(); ++s) {
      seconds[s] = std::max(seconds[s], profile.stage_seconds[s]);
    }
  }
  out << "  " << to_string(pass) << " stages (slowest rank ms / MB sent):";
  for (std::size_t s = 0; s < seconds.size(); ++s) {
    char cell[64];
    const bool epilogue = s + 1 == seconds.size();
    std::snprintf(cell, sizeof(cell), " %s%s %.2f/%s", epilogue ? "end" : "s",
                  epilogue ? "" : std::to_string(s).c_str(), seconds[s] * 1e3,
                  format_mb(s < sent.size() ? sent[s] : 0, 2).c_str());
    out << cell;
  }
  out << "\n";
}

void print_run_summary(std::ostream& out, const Plan& plan, const runtime::RunResult& result) {
  char line[240];
  std::snprintf(line, sizeof(line), "%-9s %9s %18s %10s %10s %14s %14s\n", "pass", "time ms",
                "max kernel ms", "wait ms", "sent MB", "inter-node MB", "intra-node MB");
  out << line;
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    const auto& profiles = pass == Pass::kForward ? result.forward : result.backward;
    double kernel = 0, wait = 0;
    std::int64_t sent = 0;
    for (const runtime::PassProfile& profile : profiles) {
      kernel = std::max(kernel, profile.kernel_seconds);
      wait = std::max(wait, profile.wait_seconds);
      sent += profile.bytes_sent;
    }
    const PassTraffic traffic = pass_traffic(plan.header, plan.programs(pass));
    std::snprintf(line, sizeof(line), "%-9s %9.2f %18.2f %10.2f %10s %14s %14s\n",
                  std::string(to_string(pass)).c_str(),
                  (pass == Pass::kForward ? result.forward_seconds : result.backward_seconds) * 1e3,
                  kernel * 1e3, wait * 1e3, format_mb(sent, 2).c_str(),
                  format_mb(traffic.inter_node, 2).c_str(),
                  format_mb(traffic.intra_node, 2).c_str());
    out << line;
  }
  print_stages(out, plan, Pass::kForward, result.forward);
  print_stages(out, plan, Pass::kBackward, result.backward);
}

}  // namespace

int run_run(std::span<const std::string> argv, std::ostream& out) {
  std::vector<FlagSpec> specs = workload_flags();
  specs.insert(specs.end(), plan_flags().begin(), plan_flags().end());
  specs.insert(specs.end(), execution_flags().begin(), execution_flags().end());
  specs.push_back({"--no-check", "", "skip the dense fp64 reference (for batches too big for it)"});
  specs.push_back({"--help", "", "show this help"});
  const Args args(specs, argv);
  if (args.flag("--help")) {
    out << format_help(
        "dcp run (--seqlens L,... | --seqlens-file F | --dist NAME) [flags]",
        "Plans one batch, executes its forward and backward Programs on nodes x devices ranks "
        "(threads of this process, or with --comm mpi the processes mpirun started) with "
        "random inputs from --seed, and checks o, lse, dq, dk and dv against dense fp64 "
        "attention. Prints times, bytes moved and errors; exit 1 if an error exceeds the bound "
        "of the storage dtype (fp32 1e-4, fp16 5e-3, bf16 3e-2 of max |reference|). With "
        "several attention kinds (--mask KIND=SPEC), every kind's Programs run on the same "
        "inputs and each is checked against dense attention under its own mask.",
        specs);
    return 0;
  }
  const auto seed = static_cast<std::uint64_t>(args.get_int("--seed", 0, 0));
  const PlanOptions plan_options = plan_options_from_flags(args, seed);
  const ExecutionOptions execution = execution_options_from_flags(args);
  const BuiltKinds kinds = kinds_from_flags(args, plan_options.cluster.shape.devices());
  const Workload& first = kinds.kinds.front().workload;

  bool reporter = false;
  std::string report;
  reporter = with_communicator(execution, [&](comm::Communicator* communicator) {
    const bool talk = communicator == nullptr || communicator->rank() == 0;
    if (talk) std::cerr << "dcp run: planning " << first.batch().total_tokens() << " tokens\n";
    const auto plan_start = Clock::now();
    const BuiltModelPlan built =
        with_flag("--strategy " + std::string(to_string(plan_options.strategy)),
                  [&] { return build_model_plan(kinds.kinds, plan_options); });
    const double plan_ms = ms_since(plan_start);
    const runtime::BatchShape shape = runtime::batch_shape_of(first);
    // One set of inputs for every kind: the layers of a model see the same tensors' shapes.
    const runtime::BatchInputs inputs = runtime::random_inputs(shape, seed);
    const Plan& head = built.plan.kinds.front().plan;
    std::ostringstream text;
    if (talk) {
      text << "run        " << head.header.strategy << " on " << head.header.cluster.nodes << " x "
           << head.header.cluster.devices_per_node << " " << to_string(execution.comm) << " ranks, "
           << kernels::to_string(execution.run.kernels) << " kernels; planned in "
           << static_cast<std::int64_t>(plan_ms) << " ms\n";
      text << "batch      " << first.batch().size() << " sequences, " << shape.tokens << " tokens, "
           << shape.q_heads << "/" << shape.kv_heads << " heads, head dim " << shape.head_dim
           << ", " << kernels::to_string(shape.storage) << "\n";
    }
    std::optional<Error> failed;
    for (std::size_t k = 0; k < built.plan.kinds.size(); ++k) {
      const KindPlan& kind = built.plan.kinds[k];
      const Workload& workload = built.kinds[k].workload;
      if (talk) {
        std::cerr << "dcp run: executing " << (kinds.single() ? "" : "kind '" + kind.name + "' ")
                  << "on " << kind.plan.header.cluster.devices() << " " << to_string(execution.comm)
                  << " ranks\n";
      }
      const runtime::RunResult result =
          execute_plan(communicator, kind.plan, workload.batch(), inputs, execution.run);
      if (!talk) continue;
      if (!kinds.single()) {
        text << "kind '" << kind.name << "' (" << kind.layers
             << (kind.layers == 1 ? " layer)\n" : " layers)\n");
      }
      print_run_summary(text, kind.plan, result);
      if (args.flag("--no-check")) continue;
      std::cerr << "dcp run: dense fp64 reference\n";
      const runtime::DenseReference reference = runtime::dense_reference(
          workload, inputs, kind.plan.header.softmax_scale,
          static_cast<std::int32_t>(std::max(1u, std::thread::hardware_concurrency())));
      const runtime::OutputErrors errors =
          runtime::compare_outputs(shape, result.outputs, reference);
      text << "error vs dense fp64 attention (bound " << error_bound(shape.storage)
           << " relative):\n";
      print_errors(text, errors);
      try {
        check_errors(errors, shape.storage);
      } catch (const Error& e) {
        if (!failed) {
          failed.emplace(kinds.single() ? std::string(e.what())
                                        : "kind '" + kind.name + "': " + e.what());
        }
      }
    }
    report = text.str();
    if (failed) {
      std::cerr << report;  // what was measured, since a failing command prints no stdout
      throw *failed;
    }
  });
  if (reporter) out << report;
  return 0;
}

}  // namespace dcp::cli

// SPDX-License-Identifier: Apache-2.0
// The dcp subcommands and the one place that maps errors to exit statuses.
#include "apps/cli/command_table.h"

#include <exception>
#include <new>
#include <sstream>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

#include "apps/cli/args.h"

namespace dcp::cli {
namespace {

constexpr Command kCommands[] = {
    {"workload", "build the block model of a batch: token blocks, work units, costs", run_workload},
    {"batches", "sample or pack realistic batches of sequence lengths", run_batches},
    {"partition", "place a batch's token blocks and work units on nodes and devices",
     run_partition},
    {"plan", "plan a batch: placement, schedules, one Program per device (-o plan file)", run_plan},
    {"verify", "check a plan file by executing all its Programs symbolically", run_verify},
    {"inspect", "per device: instructions, bytes per stage and buffer peak of a plan file",
     run_inspect},
    {"simulate", "a plan file's time on a described cluster: timelines, critical path, trace",
     run_simulate},
    {"bench", "benchmark suites: the paper's micro-benchmark (simulated), simulator calibration",
     run_bench},
    {"run", "plan a batch and execute it on local or MPI ranks, checked against fp64 attention",
     run_run},
    {"attention", "distributed attention forward and backward on your .npy arrays", run_attention},
    {"demo", "plan a realistic batch with dcp and the static baselines, run and compare them",
     run_demo},
    {"calibrate", "measure the cost model's constants for cpu kernels and local ranks here",
     run_calibrate},
};

std::string overview() {
  std::string text =
      "dcp: dynamic context parallelism for long-context training\n\n"
      "usage: dcp <command> [flags]    (dcp <command> --help for its flags)\n\ncommands:\n";
  for (const Command& command : kCommands) {
    std::string name = "  " + std::string(command.name);
    name.append(name.size() < 14 ? 14 - name.size() : 1, ' ');
    text += name + std::string(command.summary) + "\n";
  }
  return text;
}

}  // namespace

std::span<const Command> commands() { return kCommands; }

int run_main(std::span<const std::string> argv, std::ostream& out, std::ostream& err) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help") {
    out << overview();
    return argv.empty() ? 2 : 0;
  }
  if (argv[0] == "--version") {
    out << "dcp 0.1.0\n";
    return 0;
  }
  const Command* command = nullptr;
  for (const Command& candidate : kCommands) {
    if (candidate.name == argv[0]) command = &candidate;
  }
  if (command == nullptr) {
    err << "dcp: error: unknown command " << quoted(argv[0]) << " (dcp --help lists them)\n";
    return 2;
  }
  const std::string prefix = "dcp " + std::string(command->name) + ": error: ";
  std::ostringstream buffered;
  try {
    const int status = command->run(argv.subspan(1), buffered);
    out << buffered.str();
    out.flush();
    if (!out) {
      err << prefix << "cannot write the output (stdout closed or full)\n";
      return 1;
    }
    return status;
  } catch (const InvalidInput& e) {  // UsageError included
    err << prefix << e.what() << "\n";
    return 2;
  } catch (const Error& e) {
    err << prefix << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    err << prefix << "out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    err << prefix << "internal error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace dcp::cli

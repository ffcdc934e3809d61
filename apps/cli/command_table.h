// SPDX-License-Identifier: Apache-2.0
// The dcp subcommands and the one place that maps errors to exit statuses.
#pragma once

#include <ostream>
#include <span>
#include <string>
#include <string_view>

namespace dcp::cli {

// A subcommand writes its result to `out`; run_main passes that on to stdout only if the command
// succeeds, so a failing command never leaves partial output behind.
struct Command {
  std::string_view name;
  std::string_view summary;
  int (*run)(std::span<const std::string> args, std::ostream& out);
};

std::span<const Command> commands();

// argv without the program name. Exit statuses: 0 success, 2 bad input or usage (one line on `err`
// naming the flag and value), 1 any other failure.
int run_main(std::span<const std::string> argv, std::ostream& out, std::ostream& err);

int run_workload(std::span<const std::string> args, std::ostream& out);
int run_batches(std::span<const std::string> args, std::ostream& out);
int run_partition(std::span<const std::string> args, std::ostream& out);
int run_plan(std::span<const std::string> args, std::ostream& out);
int run_verify(std::span<const std::string> args, std::ostream& out);
int run_inspect(std::span<const std::string> args, std::ostream& out);
int run_run(std::span<const std::string> args, std::ostream& out);
int run_attention(std::span<const std::string> args, std::ostream& out);
int run_demo(std::span<const std::string> args, std::ostream& out);
int run_calibrate(std::span<const std::string> args, std::ostream& out);
int run_simulate(std::span<const std::string> args, std::ostream& out);
int run_bench(std::span<const std::string> args, std::ostream& out);

}  // namespace dcp::cli

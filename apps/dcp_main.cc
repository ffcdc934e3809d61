// SPDX-License-Identifier: Apache-2.0
// The dcp command line entry point; everything happens in apps/cli.
#include <iostream>
#include <string>
#include <vector>

#include "apps/cli/command_table.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return dcp::cli::run_main(args, std::cout, std::cerr);
}

// SPDX-License-Identifier: Apache-2.0
// The benches' main(): runs the bench and turns an exception into one line on stderr and an exit
// status (2 for bad input, 1 for anything else), as the dcp command line does.
#pragma once

#include <cstdio>
#include <exception>

#include "dcp/core/error.h"

namespace dcp::bench {

inline int guarded_main(const char* name, int argc, char** argv, int (*run)(int, char**)) {
  try {
    return run(argc, argv);
  } catch (const InvalidInput& error) {
    std::fprintf(stderr, "%s: error: %s\n", name, error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: error: %s\n", name, error.what());
    return 1;
  }
}

}  // namespace dcp::bench

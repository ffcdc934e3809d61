// SPDX-License-Identifier: Apache-2.0
// Wall-clock phase timing: the one clock and unit every timed phase reports in.
#pragma once

#include <chrono>

namespace dcp {

using Clock = std::chrono::steady_clock;

// Milliseconds since `start`.
inline double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace dcp

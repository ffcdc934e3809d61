// SPDX-License-Identifier: Apache-2.0
// Largest-first (LPT) packing of weights into bins.
#include "dcp/core/packing.h"

#include <algorithm>
#include <functional>
#include <queue>

namespace dcp {

std::int64_t largest_first_max_load(std::vector<std::int64_t> items, std::int32_t bins) {
  std::sort(items.begin(), items.end(), std::greater<>());
  std::priority_queue<std::int64_t, std::vector<std::int64_t>, std::greater<>> loads;
  for (std::int32_t i = 0; i < bins; ++i) loads.push(0);
  std::int64_t max_load = 0;
  for (const std::int64_t item : items) {
    const std::int64_t least = loads.top();
    loads.pop();
    loads.push(least + item);
    max_load = std::max(max_load, least + item);
  }
  return max_load;
}

}  // namespace dcp

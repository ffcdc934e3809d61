// SPDX-License-Identifier: Apache-2.0
// Largest-first (LPT) packing of weights into bins: the bound for indivisible items.
#pragma once

#include <cstdint>
#include <vector>

namespace dcp {

// The heaviest bin after placing `items`, largest first, each into the currently lightest of
// `bins` bins. Used as the reachable balance bound for indivisible token blocks and work units.
std::int64_t largest_first_max_load(std::vector<std::int64_t> items, std::int32_t bins);

}  // namespace dcp

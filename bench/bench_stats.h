// SPDX-License-Identifier: Apache-2.0
// Summary statistics the benchmark programs print.
#pragma once

#include <algorithm>
#include <vector>

namespace dcp::bench {

// The middle value, or the mean of the two middle values. `values` must not be empty.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

inline double max_of(const std::vector<double>& values) {
  return *std::max_element(values.begin(), values.end());
}

// The nearest-rank q-quantile (q in [0, 1]). `values` must not be empty.
inline double quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(i, values.size() - 1)];
}

}  // namespace dcp::bench

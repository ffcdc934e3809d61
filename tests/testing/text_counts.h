// SPDX-License-Identifier: Apache-2.0
// Test helper: how often a fragment occurs in a report or a records file.
#pragma once

#include <cstddef>
#include <string>

namespace dcp::testing {

// How often `what` occurs in `text`.
inline std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

}  // namespace dcp::testing

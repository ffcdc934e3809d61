// SPDX-License-Identifier: Apache-2.0
// What a refusal says: the tests that check an error names the offending value.
#pragma once

#include <functional>
#include <string>

#include "dcp/core/error.h"

namespace dcp::testing {

// The message of the InvalidInput `body` throws, or "" where it throws none.
inline std::string invalid_input_text(const std::function<void()>& body) {
  try {
    body();
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

}  // namespace dcp::testing

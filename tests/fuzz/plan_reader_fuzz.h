// SPDX-License-Identifier: Apache-2.0
// The plan reader's fuzz check, shared by the libFuzzer target and the replay test.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dcp::fuzz {

// Parses `bytes` as a plan file. Returns the InvalidInput message, or nullopt if it parsed. Any
// other outcome is a bug and aborts: another exception escaping, a parsed plan that fails
// check_plan, or one that does not serialize back to exactly `bytes` (the encoding is canonical,
// so every accepted file is the serialization of what was read from it).
std::optional<std::string> check_plan_bytes(std::string_view bytes);

}  // namespace dcp::fuzz

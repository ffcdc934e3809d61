// SPDX-License-Identifier: Apache-2.0
// libFuzzer entry for the plan reader (docs/plan_format.md, "Testing the reader").
#include "tests/fuzz/plan_reader_fuzz.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "dcp/core/error.h"

#include "dcp/program/plan_file/plan_file.h"
#include "dcp/program/plan_json.h"

namespace dcp::fuzz {

std::optional<std::string> check_plan_bytes(std::string_view bytes) {
  Plan plan;
  try {
    plan = parse_plan(bytes, "input");
  } catch (const InvalidInput& e) {
    return std::string(e.what());
  }
  check_plan(plan, "parsed input");
  if (serialize_plan(plan) != bytes) {
    std::fprintf(stderr, "a parsed plan does not serialize back to its %zu input bytes\n",
                 bytes.size());
    std::abort();
  }
  plan_to_json(plan);
  return std::nullopt;
}

}  // namespace dcp::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  dcp::fuzz::check_plan_bytes(bytes);
  // Nearly every change to a file stops at a checksum. The same bytes with their checksums
  // recomputed reach the structure checks behind them.
  const std::string resealed = dcp::reseal_plan_bytes(std::string(bytes));
  if (resealed != bytes) dcp::fuzz::check_plan_bytes(resealed);
  return 0;
}

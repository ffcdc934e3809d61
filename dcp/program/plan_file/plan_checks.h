// SPDX-License-Identifier: Apache-2.0
// The structure checks a plan file's reader applies to what it reads: also for Plans built in
// memory (a Program that passes is safe to index; whether it is correct is the verifier's
// question).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "dcp/program/program.h"

namespace dcp {

// The longest strategy name a plan may carry, in bytes.
inline constexpr std::size_t kMaxStrategyBytes = 256;

// The checks readers apply, for Plans built in memory. Each throws InvalidInput naming `origin`
// (omitted when empty), the device, the pass and the field. check_plan_header: the cluster shape,
// the attention shape and head blocking, dtypes, the softmax scale, non-negative counts, a
// strategy name of at most 256 printable ASCII characters. check_program_structure: every index
// in range (slots, masks, blocks, head blocks, peers, launches, stages), masks well-formed, blocks
// sorted and inside the batch; whether the Program is correct is the verifier's question.
// check_plan: both, and exactly one Program per device and pass, in device order.
void check_plan_header(const PlanHeader& header, std::string_view origin);
void check_program_structure(const PlanHeader& header, const Program& program,
                             std::string_view origin);
void check_plan(const Plan& plan, std::string_view origin);

// "origin: ", or nothing when origin is empty: how check errors and reader errors begin.
std::string origin_prefix(std::string_view origin);
// "forward program of device 3": how errors name a Program.
std::string program_name(Pass pass, std::int32_t device);

}  // namespace dcp

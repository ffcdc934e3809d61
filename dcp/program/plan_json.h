// SPDX-License-Identifier: Apache-2.0
// JSON export of a Plan for inspection and scripts (docs/plan_format.md, "JSON export").
#pragma once

#include <string>

#include "dcp/core/json_writer.h"

#include "dcp/program/program.h"

namespace dcp {

// The whole plan: {"header", "forward": [programs], "backward": [programs]}.
// Every field of every struct appears under its C++ name; enums are written as their names
// (to_string, opcode_name). Deterministic: the same Plan gives the same text.
std::string plan_to_json(const Plan& plan);

// One Program with the header it needs to be executed: {"header", "program"}.
std::string program_to_json(const PlanHeader& header, const Program& program);

// The pieces, for documents that embed them.
void write_json(JsonWriter& json, const PlanHeader& header);
void write_json(JsonWriter& json, const Program& program);

}  // namespace dcp

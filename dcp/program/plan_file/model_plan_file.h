// SPDX-License-Identifier: Apache-2.0
// The model plan file: a plain plan file for a plan of one mask, else a table of named attention
// kinds followed by each kind's plan file (docs/plan_format.md, "Attention kinds").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dcp/program/model_plan.h"
#include "dcp/program/plan_file/plan_file.h"

namespace dcp {

inline constexpr std::uint32_t kKindsFormatVersion = 1;

// The bytes: serialize_plan's for a single plan (ModelPlan::is_single_plan), else the kinds file.
// Does not check the plan.
std::string serialize_model_plan(const ModelPlan& plan);

// Checks the plan (check_model_plan) and writes it; the file appears whole or not at all.
void write_model_plan_file(const std::string& path, const ModelPlan& plan);

// Reads a plan file of either form: a plain plan file reads as single_kind of its plan. Every
// fault is an InvalidInput naming `origin` (the path) and, inside a kind's plan, the kind.
ModelPlan parse_model_plan(std::string_view bytes, std::string_view origin);
ModelPlan read_model_plan_file(const std::string& path);

// Whether the bytes begin as a kinds file (else they should be a plain plan file).
bool is_kinds_file(std::string_view bytes);

}  // namespace dcp

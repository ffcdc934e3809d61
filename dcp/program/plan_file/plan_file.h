// SPDX-License-Identifier: Apache-2.0
// The binary plan file: a Plan's header and one checksummed section per Program.
//
// docs/plan_format.md gives the byte layout. Writing is deterministic (same Plan, same bytes).
// Reading trusts nothing: every malformed, truncated or damaged file is an InvalidInput naming the
// file and the fault, and a Program that comes out of a reader is structurally valid (every index
// it holds is in range), so an executor can index with it without further checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dcp/program/plan_file/plan_checks.h"
#include "dcp/program/program.h"

namespace dcp {

inline constexpr std::uint32_t kPlanFormatVersion = 4;

// The file's bytes. Does not check the Plan, so tests can build files with faults on purpose;
// throws InvalidInput only if a list is too long for the format's 32-bit counts.
std::string serialize_plan(const Plan& plan);

// Checks the Plan (check_plan) and writes serialize_plan's bytes to `path`; the file appears whole
// or not at all. Throws InvalidInput naming the path if the check fails, IoError if writing fails.
void write_plan_file(const std::string& path, const Plan& plan);

// Reads and checks a whole plan. `origin` names the bytes in error messages (a path).
Plan read_plan_file(const std::string& path);
Plan parse_plan(std::string_view bytes, std::string_view origin);

// One Program's section as the section table lists it.
struct PlanSection {
  std::int32_t device = 0;
  Pass pass = Pass::kForward;
  std::uint64_t offset = 0;  // from the start of the file
  std::uint64_t bytes = 0;
  std::uint64_t checksum = 0;
};

struct PlanFileSummary {
  PlanHeader header;
  std::uint64_t file_bytes = 0;
  std::uint64_t header_bytes = 0;  // where the first section starts
  // Forward Programs of devices 0..n-1, then backward Programs of devices 0..n-1.
  std::vector<PlanSection> sections;
};

// Reads and checks the header and the section table only.
PlanFileSummary read_plan_summary(const std::string& path);
PlanFileSummary parse_plan_summary(std::string_view bytes, std::string_view origin);
PlanHeader read_plan_header(const std::string& path);

// Reads one device's Program for one pass: the header, the section table and that one section,
// nothing else. Checks them as read_plan_file does. Throws InvalidInput if `device` is not a
// device of the plan. If `header` is not null it receives the plan's header.
Program read_program(const std::string& path, std::int32_t device, Pass pass,
                     PlanHeader* header = nullptr);

// A file's bytes, for readers of plan files: IoError naming the path if it cannot be read or is
// a directory.
std::string read_whole_file(const std::string& path);

// The checksum of the file's header and sections: 64-bit FNV-1a.
std::uint64_t plan_checksum(std::string_view bytes);

// --- For tests and tools that damage plan files on purpose ------------------------------------

// Recomputes the section checksums and the header checksum wherever the header and the section
// table can be located, leaving every other byte as it is. A damaged file then gets past the
// checksums to the structure checks behind them.
std::string reseal_plan_bytes(std::string bytes);

// The file with the payload of section `index` (table order) replaced, the following sections
// moved and the table and checksums updated. Throws InvalidInput unless `bytes` has a valid
// header and section table and `index` is a section.
std::string replace_plan_section(std::string_view bytes, std::size_t index,
                                 std::string_view payload);

}  // namespace dcp

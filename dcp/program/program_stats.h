// SPDX-License-Identifier: Apache-2.0
// Counts and byte figures of one Program: what `dcp inspect` and `dcp plan` report.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "dcp/program/program.h"

namespace dcp {

inline constexpr int kOpcodeCount = 11;  // the alternatives of Instruction, in order

struct ProgramStats {
  std::array<std::int64_t, kOpcodeCount> opcode_counts{};  // indexed by Instruction::index()
  std::int64_t instructions = 0;
  std::int64_t attention_rows = 0;
  std::int64_t attention_entries = 0;  // work units computed
  // Per stage (instruction_stage; the last entry is the epilogue), sent and received bytes.
  std::vector<std::int64_t> sent_by_stage;
  std::vector<std::int64_t> received_by_stage;
  std::int64_t sent_inter_node = 0;
  std::int64_t sent_intra_node = 0;
  // The same by the kind of the value sent (indexed by SlotKind).
  std::array<std::int64_t, kSlotKindCount> sent_inter_node_by_kind{};
  std::array<std::int64_t, kSlotKindCount> sent_intra_node_by_kind{};
  std::int64_t received = 0;
  // The buffer table: slots are reused by lifetime, so their total is the peak.
  std::int64_t slot_bytes = 0;
  std::int32_t slots = 0;
  // The kept tensor: the kv values kept from the forward pass for the backward pass.
  std::int64_t kept_bytes = 0;
};

ProgramStats program_stats(const PlanHeader& header, const Program& program);

// Bytes sent between nodes and inside nodes, summed over the devices of one pass.
struct PassTraffic {
  std::int64_t inter_node = 0;
  std::int64_t intra_node = 0;
  std::array<std::int64_t, kSlotKindCount> inter_node_by_kind{};  // indexed by SlotKind
  std::array<std::int64_t, kSlotKindCount> intra_node_by_kind{};
};
PassTraffic pass_traffic(const PlanHeader& header, const std::vector<Program>& programs);

// The kept tensor of a Program: its kept values' bytes (a kept block missing from the block table
// counts nothing; check_program_structure refuses such a Program).
std::int64_t kept_bytes(const PlanHeader& header, const Program& program);

// The largest kept tensor of the plan's devices (Program::kept; memory held from a layer's
// forward pass to its backward pass), in bytes.
std::int64_t max_kept_bytes(const Plan& plan);

}  // namespace dcp

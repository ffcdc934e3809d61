// SPDX-License-Identifier: Apache-2.0
// Counts and byte figures of Programs.
#include "dcp/program/program_stats.h"

#include <algorithm>

namespace dcp {

static_assert(std::variant_size_v<Instruction> == kOpcodeCount);

ProgramStats program_stats(const PlanHeader& header, const Program& program) {
  ProgramStats stats;
  const auto stages = static_cast<std::size_t>(std::max(program.stages, 0)) + 1;
  stats.sent_by_stage.assign(stages, 0);
  stats.received_by_stage.assign(stages, 0);
  const ClusterShape& cluster = header.cluster;
  for (std::size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& instruction = program.instructions[i];
    ++stats.opcode_counts[instruction.index()];
    ++stats.instructions;
    const std::size_t stage =
        i < program.instruction_stage.size()
            ? std::min(static_cast<std::size_t>(std::max(program.instruction_stage[i], 0)),
                       stages - 1)
            : stages - 1;
    if (const auto* launch = std::get_if<Launch>(&instruction)) {
      for (const CommOp& op : launch->ops) {
        if (op.direction == CommOp::Direction::kSend) {
          stats.sent_by_stage[stage] += op.bytes;
          const bool inter = cluster.devices_per_node > 0 &&
                             cluster.node_of(op.peer) != cluster.node_of(program.device);
          (inter ? stats.sent_inter_node : stats.sent_intra_node) += op.bytes;
          if (op.slot >= 0 && static_cast<std::size_t>(op.slot) < program.slots.size()) {
            const auto kind =
                static_cast<std::size_t>(program.slots[static_cast<std::size_t>(op.slot)].kind);
            (inter ? stats.sent_inter_node_by_kind : stats.sent_intra_node_by_kind)[kind] +=
                op.bytes;
          }
        } else {
          stats.received_by_stage[stage] += op.bytes;
          stats.received += op.bytes;
        }
      }
    }
    const std::vector<AttnRow>* rows = nullptr;
    if (const auto* fwd = std::get_if<AttnForward>(&instruction)) rows = &fwd->rows;
    if (const auto* bwd = std::get_if<AttnBackward>(&instruction)) rows = &bwd->rows;
    if (rows != nullptr) {
      stats.attention_rows += static_cast<std::int64_t>(rows->size());
      for (const AttnRow& row : *rows) {
        stats.attention_entries += static_cast<std::int64_t>(row.kv.size());
      }
    }
  }
  for (const Slot& slot : program.slots)
    stats.slot_bytes += slot_bytes(header, slot.kind, slot.tokens);
  stats.slots = static_cast<std::int32_t>(program.slots.size());
  stats.kept_bytes = kept_bytes(header, program);
  return stats;
}

std::int64_t kept_bytes(const PlanHeader& header, const Program& program) {
  std::int64_t bytes = 0;
  for (const KeptValue& kept : program.kept) {
    const auto block =
        std::lower_bound(program.blocks.begin(), program.blocks.end(), kept.block,
                         [](const BlockInfo& info, BlockId id) { return info.id < id; });
    if (block != program.blocks.end() && block->id == kept.block) {
      bytes += value_bytes(header, kept.kind, block->tokens);
    }
  }
  return bytes;
}

std::int64_t max_kept_bytes(const Plan& plan) {
  std::int64_t most = 0;
  for (const Program& program : plan.forward)
    most = std::max(most, kept_bytes(plan.header, program));
  return most;
}

PassTraffic pass_traffic(const PlanHeader& header, const std::vector<Program>& programs) {
  PassTraffic traffic;
  for (const Program& program : programs) {
    const ProgramStats stats = program_stats(header, program);
    traffic.inter_node += stats.sent_inter_node;
    traffic.intra_node += stats.sent_intra_node;
    for (std::size_t k = 0; k < traffic.inter_node_by_kind.size(); ++k) {
      traffic.inter_node_by_kind[k] += stats.sent_inter_node_by_kind[k];
      traffic.intra_node_by_kind[k] += stats.sent_intra_node_by_kind[k];
    }
  }
  return traffic;
}

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// Verifier internals shared by its static checks and its simulation; not part of the API.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dcp/program/program.h"
#include "dcp/program/verifier/verifier.h"

namespace dcp::verifier_detail {

inline void append_part(std::string& text, std::string_view part) { text += part; }
inline void append_part(std::string& text, std::integral auto part) {
  text += std::to_string(part);
}
// Concatenates strings and integers into one message.
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string text;
  (append_part(text, parts), ...);
  return text;
}

// A work unit (q block, kv block, q head block) packed into 62 bits. The header checks bound block
// ids by kMaxTokenBlocks = 2^24 and head blocks by kMaxHeads = 2^14, so the fields never overlap.
inline constexpr int kHeadBits = 14;
inline constexpr int kBlockBits = 24;
inline std::uint64_t unit_key(BlockId q_block, BlockId kv_block, std::int32_t head_block) {
  return (static_cast<std::uint64_t>(q_block) << (kBlockBits + kHeadBits)) |
         (static_cast<std::uint64_t>(kv_block) << kHeadBits) |
         static_cast<std::uint64_t>(head_block);
}
inline std::string describe_unit(std::uint64_t key) {
  const std::uint64_t block_mask = (std::uint64_t{1} << kBlockBits) - 1;
  const std::uint64_t head_mask = (std::uint64_t{1} << kHeadBits) - 1;
  return cat("(q block ", key >> (kBlockBits + kHeadBits), ", kv block ",
             (key >> kHeadBits) & block_mask, ", head ", key & head_mask, ")");
}

// The kinds a pass loads and stores.
inline bool is_input_of(Pass pass, SlotKind kind) {
  return kind == SlotKind::kKV ||
         kind == (pass == Pass::kForward ? SlotKind::kQ : SlotKind::kQGrad);
}
inline bool is_output_of(Pass pass, SlotKind kind) {
  return pass == Pass::kForward ? kind == SlotKind::kOut
                                : kind == SlotKind::kDQ || kind == SlotKind::kDKV;
}

// "device 3 forward instruction 17 (merge)", or without the instruction when it is -1.
inline std::string location(const Program* program, std::int32_t device, Pass pass,
                            std::int64_t instruction) {
  if (device < 0) return cat("plan ", to_string(pass));
  std::string text = cat("device ", device, " ", to_string(pass));
  if (instruction < 0) return text;
  text += cat(" instruction ", instruction);
  if (program != nullptr &&
      static_cast<std::uint64_t>(instruction) < program->instructions.size()) {
    text +=
        cat(" (", opcode_name(program->instructions[static_cast<std::size_t>(instruction)]), ")");
  }
  return text;
}

inline Violation make_violation(const Program* program, std::int32_t device, Pass pass,
                                std::int64_t instruction, std::string_view rule,
                                std::string_view detail) {
  return Violation{device, pass, instruction, std::string(rule),
                   cat(location(program, device, pass, instruction), ": ", detail)};
}

// What the static checks learn about one Program, for the simulation.
struct ProgramIndex {
  struct OutputKey {
    SlotKind kind = SlotKind::kOut;
    BlockId block = 0;
    std::int32_t head_block = 0;
    std::int32_t index = 0;  // into Program::outputs
  };
  std::vector<BlockId> owned;            // sorted
  std::vector<OutputKey> outputs;        // sorted by (kind, block, head block)
  std::vector<std::int64_t> mask_pairs;  // per mask
  std::int64_t comm_ops = 0;
  std::int64_t attention_rows = 0;

  bool owns(BlockId block) const;
  // The index into Program::outputs, or -1.
  std::int32_t find_output(SlotKind kind, BlockId block, std::int32_t head_block) const;
};

// Sends and receives of one (from, to) device pair over the whole pass.
struct ChannelTotals {
  std::int64_t sends = 0;
  std::int64_t recvs = 0;
};

struct PassIndex {
  std::vector<ProgramIndex> programs;  // per device
  std::unordered_map<std::int64_t, ChannelTotals> channels;
  std::int64_t attention_rows = 0;
};

inline std::int64_t channel_key(std::int32_t from, std::int32_t to, std::int32_t devices) {
  return static_cast<std::int64_t>(from) * devices + to;
}

// The BlockInfo of `block` in the program's table (sorted by id), or nullptr.
const BlockInfo* find_block(const Program& program, BlockId block);

// The kv head block that q head block `head_block` reads (the header must be valid).
std::int32_t kv_head_block_of(const PlanHeader& header, std::int32_t head_block);

// The static checks of one pass (see verifier.h); fills `index` as far as they got.
std::optional<Violation> check_statically(const Plan& plan, Pass pass, PassIndex& index);

// The end-of-pass check that the expected outputs add up to the header's work units.
std::optional<Violation> check_output_totals(const Plan& plan, Pass pass);

}  // namespace dcp::verifier_detail

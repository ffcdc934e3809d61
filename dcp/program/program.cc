// SPDX-License-Identifier: Apache-2.0
// Names and sizes of Program parts.
#include "dcp/program/program.h"

namespace dcp {

std::string_view to_string(Pass pass) { return pass == Pass::kForward ? "forward" : "backward"; }

std::string_view to_string(SlotKind kind) {
  switch (kind) {
    case SlotKind::kQ:
      return "q";
    case SlotKind::kKV:
      return "kv";
    case SlotKind::kOut:
      return "out";
    case SlotKind::kQGrad:
      return "qgrad";
    case SlotKind::kDQ:
      return "dq";
    case SlotKind::kDKV:
      return "dkv";
  }
  return "?";
}

bool is_output(SlotKind kind) {
  return kind == SlotKind::kOut || kind == SlotKind::kDQ || kind == SlotKind::kDKV;
}

bool uses_q_heads(SlotKind kind) { return kind != SlotKind::kKV && kind != SlotKind::kDKV; }

std::int64_t TileMask::pairs() const {
  std::int64_t total = 0;
  for (std::size_t i = 0; i + 1 < intervals.size(); i += 2)
    total += intervals[i + 1] - intervals[i];
  return total;
}

std::uint64_t hash_value(const TileMask& mask) {
  // Four lanes over pairs of integers, so that their multiplies overlap: a pass hashes every
  // masked tile's mask, a few thousand integers each, and one chain of multiplies was a tenth of
  // compiling a windowed mask's plan.
  constexpr std::uint64_t kMultiplier = 0x9E3779B97F4A7C15ULL;
  std::uint64_t lanes[4] = {static_cast<std::uint32_t>(mask.q_tokens),
                            static_cast<std::uint32_t>(mask.kv_tokens), mask.row_offsets.size(),
                            mask.intervals.size()};
  std::size_t lane = 0;
  const auto absorb = [&](const std::vector<std::int32_t>& values) {
    std::size_t i = 0;
    for (; i + 1 < values.size(); i += 2) {
      const std::uint64_t word =
          static_cast<std::uint64_t>(static_cast<std::uint32_t>(values[i])) |
          static_cast<std::uint64_t>(static_cast<std::uint32_t>(values[i + 1])) << 32;
      lanes[lane] = (lanes[lane] ^ word) * kMultiplier;
      lane = (lane + 1) & 3;
    }
    if (i < values.size()) {
      lanes[lane] = (lanes[lane] ^ static_cast<std::uint32_t>(values[i])) * kMultiplier;
      lane = (lane + 1) & 3;
    }
  };
  absorb(mask.row_offsets);
  absorb(mask.intervals);
  std::uint64_t hash = 0;
  for (const std::uint64_t value : lanes) hash = (hash ^ (value >> 29) ^ value) * kMultiplier;
  return hash;
}

std::optional<std::string> tile_mask_problem(const TileMask& m) {
  const auto text = [](auto x) { return std::to_string(x); };
  if (m.q_tokens < 1 || m.kv_tokens < 1) {
    return "q_tokens " + text(m.q_tokens) + " and kv_tokens " + text(m.kv_tokens) +
           " must be at least 1";
  }
  if (m.row_offsets.size() != static_cast<std::size_t>(m.q_tokens) + 1) {
    return "row_offsets has " + text(m.row_offsets.size()) +
           " entries, expected q_tokens + 1 = " + text(std::int64_t{m.q_tokens} + 1);
  }
  if (m.intervals.size() % 2 != 0) {
    return "intervals has an odd number of entries (" + text(m.intervals.size()) +
           "), expected (begin, end) pairs";
  }
  const std::size_t count = m.intervals.size() / 2;
  if (m.row_offsets.front() != 0 || static_cast<std::size_t>(m.row_offsets.back()) != count) {
    return "row_offsets run from " + text(m.row_offsets.front()) + " to " +
           text(m.row_offsets.back()) + ", expected 0 to " + text(count);
  }
  // Monotone offsets first: the interval loop below indexes with them.
  for (std::size_t row = 0; row < static_cast<std::size_t>(m.q_tokens); ++row) {
    const std::int32_t first = m.row_offsets[row];
    const std::int32_t last = m.row_offsets[row + 1];
    if (last < first || static_cast<std::size_t>(last) > count) {
      return "row_offsets are not monotone from 0 to " + text(count) + " at row " + text(row) +
             " (" + text(first) + " then " + text(last) + ")";
    }
  }
  for (std::size_t row = 0; row < static_cast<std::size_t>(m.q_tokens); ++row) {
    std::int32_t previous_end = 0;
    for (std::int32_t k = m.row_offsets[row]; k < m.row_offsets[row + 1]; ++k) {
      const std::int32_t begin = m.intervals[2 * static_cast<std::size_t>(k)];
      const std::int32_t end = m.intervals[2 * static_cast<std::size_t>(k) + 1];
      if (begin < previous_end || begin >= end || end > m.kv_tokens) {
        return "row " + text(row) + " interval [" + text(begin) + ", " + text(end) +
               ") is empty, unsorted, overlapping or outside [0, kv_tokens = " + text(m.kv_tokens) +
               ")";
      }
      previous_end = end;
    }
  }
  return std::nullopt;
}

std::string_view opcode_name(const Instruction& instruction) {
  struct Name {
    std::string_view operator()(const Load&) const { return "load"; }
    std::string_view operator()(const Store&) const { return "store"; }
    std::string_view operator()(const Launch&) const { return "launch"; }
    std::string_view operator()(const Wait&) const { return "wait"; }
    std::string_view operator()(const AttnForward&) const { return "attn_fwd"; }
    std::string_view operator()(const AttnBackward&) const { return "attn_bwd"; }
    std::string_view operator()(const Merge&) const { return "merge"; }
    std::string_view operator()(const Sum&) const { return "sum"; }
    std::string_view operator()(const Free&) const { return "free"; }
    std::string_view operator()(const Keep&) const { return "keep"; }
    std::string_view operator()(const Restore&) const { return "restore"; }
  };
  return std::visit(Name{}, instruction);
}

std::string_view to_string(PartialRouting routing) {
  return routing == PartialRouting::kReduceInNode ? "reduce_in_node" : "direct";
}

namespace {

std::int64_t bytes_with_partials(const PlanHeader& header, SlotKind kind, std::int64_t tokens,
                                 std::int64_t partial) {
  const std::int64_t d = header.head_dim;
  const std::int64_t h = header.head_block_size;
  const std::int64_t hk = header.kv_heads_per_block;
  const std::int64_t data = bytes_of(header.dtype);
  constexpr std::int64_t kStat = 4;  // lse, delta: fp32
  switch (kind) {
    case SlotKind::kQ:
      return tokens * h * d * data;
    case SlotKind::kKV:
      return 2 * tokens * hk * d * data;
    case SlotKind::kOut:
      return tokens * h * (d * partial + kStat);
    case SlotKind::kQGrad:
      return tokens * h * (2 * d * data + 2 * kStat);
    case SlotKind::kDQ:
      return tokens * h * d * partial;
    case SlotKind::kDKV:
      return 2 * tokens * hk * d * partial;
  }
  return 0;
}

}  // namespace

std::int64_t value_bytes(const PlanHeader& header, SlotKind kind, std::int64_t tokens) {
  return bytes_with_partials(header, kind, tokens, bytes_of(header.partial_dtype));
}

std::int64_t slot_bytes(const PlanHeader& header, SlotKind kind, std::int64_t tokens) {
  return bytes_with_partials(header, kind, tokens, bytes_of(DType::kFp32));
}

bool narrows_partials(const PlanHeader& header) { return header.partial_dtype != DType::kFp32; }

bool partial_dtype_allowed(DType storage, DType partial) {
  return partial == DType::kFp32 || partial == storage;
}

std::vector<std::vector<bool>> partial_conversions(const PlanHeader& header,
                                                   const Program& program) {
  std::vector<std::vector<bool>> converts(program.instructions.size());
  if (!narrows_partials(header)) {
    for (std::size_t i = 0; i < converts.size(); ++i) {
      if (const auto* launch = std::get_if<Launch>(&program.instructions[i])) {
        converts[i].assign(launch->ops.size(), false);
      }
    }
    return converts;
  }
  std::vector<bool> current(program.slots.size(), false);  // the wire buffer holds the value
  const auto written = [&](SlotId slot) {
    if (slot >= 0 && static_cast<std::size_t>(slot) < current.size()) {
      current[static_cast<std::size_t>(slot)] = false;
    }
  };
  const auto rows_written = [&](const std::vector<AttnRow>& rows) {
    for (const AttnRow& row : rows) {
      written(row.out);
      for (const AttnKv& kv : row.kv) written(kv.dkv);
    }
  };
  for (std::size_t i = 0; i < converts.size(); ++i) {
    const Instruction& instruction = program.instructions[i];
    if (const auto* launch = std::get_if<Launch>(&instruction)) {
      for (const CommOp& op : launch->ops) {
        const auto slot = static_cast<std::size_t>(op.slot);
        const bool partial = slot < program.slots.size() && is_output(program.slots[slot].kind);
        converts[i].push_back(partial &&
                              (op.direction == CommOp::Direction::kRecv || !current[slot]));
        if (partial) current[slot] = true;
      }
    } else if (const auto* forward = std::get_if<AttnForward>(&instruction)) {
      rows_written(forward->rows);
    } else if (const auto* backward = std::get_if<AttnBackward>(&instruction)) {
      rows_written(backward->rows);
    } else if (const auto* merge = std::get_if<Merge>(&instruction)) {
      written(merge->dst);
    } else if (const auto* sum = std::get_if<Sum>(&instruction)) {
      written(sum->dst);
    } else if (const auto* free = std::get_if<Free>(&instruction)) {
      for (const SlotId slot : free->slots) written(slot);
    }
  }
  return converts;
}

std::int64_t partial_elements(const PlanHeader& header, SlotKind kind, std::int64_t tokens) {
  const std::int64_t d = header.head_dim;
  switch (kind) {
    case SlotKind::kOut:
    case SlotKind::kDQ:
      return tokens * header.head_block_size * d;
    case SlotKind::kDKV:
      return 2 * tokens * header.kv_heads_per_block * d;
    default:
      return 0;
  }
}

}  // namespace dcp

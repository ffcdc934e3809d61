// SPDX-License-Identifier: Apache-2.0
// The structure checks every plan reader applies, and that plans built in memory can ask for.
#include "dcp/program/plan_file/plan_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "dcp/core/error.h"

#include "dcp/model/block_layout.h"

#include "dcp/program/plan_file/plan_file_detail.h"

namespace dcp {
namespace {

// An enumeration's value as the file stores it, one byte: a value out of range reads as large.
using plan_file_detail::code;

class StructureCheck {
 public:
  StructureCheck(const PlanHeader& header, const Program& program, std::string_view origin)
      : h_(header), p_(program), origin_(origin) {
    devices_ = static_cast<std::int64_t>(header.cluster.nodes) * header.cluster.devices_per_node;
    q_head_blocks_ = header.head_block_size > 0 ? header.q_heads / header.head_block_size : 0;
    kv_head_blocks_ =
        header.kv_heads_per_block > 0 ? header.kv_heads / header.kv_heads_per_block : 0;
  }

  void run() {
    if (code(p_.pass) > 1) fail("pass " + std::to_string(code(p_.pass)) + " is not a pass");
    if (p_.device < 0 || p_.device >= devices_) {
      fail("device " + std::to_string(p_.device) + " is outside [0, " + std::to_string(devices_) +
           ")");
    }
    if (p_.stages < 1) fail("stages is " + std::to_string(p_.stages) + ", expected at least 1");
    check_blocks();
    check_owned();
    check_outputs();
    check_kept();
    check_slots();
    check_masks();
    check_instructions();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidInput(origin_prefix(origin_) + program_name(p_.pass, p_.device) + ": " + what);
  }

  static std::string item(std::string_view list, std::size_t i) {
    return std::string(list) + "[" + std::to_string(i) + "]";
  }

  bool has_block(BlockId id) const {
    const auto it = std::lower_bound(p_.blocks.begin(), p_.blocks.end(), id,
                                     [](const BlockInfo& b, BlockId x) { return b.id < x; });
    return it != p_.blocks.end() && it->id == id;
  }

  template <typename Where>
  void block(BlockId id, const Where& where) const {
    if (!has_block(id)) {
      fail(where() + ": block " + std::to_string(id) + " is not in the program's block table");
    }
  }

  template <typename Where>
  void head_block(std::int32_t index, bool q_heads, const Where& where) const {
    const std::int32_t count = q_heads ? q_head_blocks_ : kv_head_blocks_;
    if (index < 0 || index >= count) {
      fail(where() + ": head_block " + std::to_string(index) + " is outside [0, " +
           std::to_string(count) + ") " + (q_heads ? "q" : "kv") + " head blocks");
    }
  }

  template <typename Where>
  void slot(SlotId id, bool none_allowed, const Where& where, std::string_view field) const {
    if (id >= 0 && static_cast<std::size_t>(id) < p_.slots.size()) return;
    if (none_allowed && id == kNoSlot) return;
    fail(where() + ": " + std::string(field) + " " + std::to_string(id) + " is not a slot (" +
         std::to_string(p_.slots.size()) + " slots" + (none_allowed ? ", or -1 for none)" : ")"));
  }

  template <typename Where>
  void kind(SlotKind k, const Where& where, std::string_view field) const {
    if (code(k) >= kSlotKindCount) {
      fail(where() + ": " + std::string(field) + " " + std::to_string(code(k)) +
           " is not a slot kind");
    }
  }

  void check_blocks() const {
    for (std::size_t i = 0; i < p_.blocks.size(); ++i) {
      const BlockInfo& b = p_.blocks[i];
      const auto where = [&] { return item("blocks", i); };
      if (b.id < 0 || b.id >= h_.token_blocks) {
        fail(where() + ": id " + std::to_string(b.id) + " is outside [0, " +
             std::to_string(h_.token_blocks) + ") token blocks");
      }
      if (i > 0 && b.id <= p_.blocks[i - 1].id) {
        fail(where() + ": id " + std::to_string(b.id) + " after " +
             std::to_string(p_.blocks[i - 1].id) + ": blocks must be sorted by id, once each");
      }
      if (b.seq < 0 || b.seq >= h_.sequences) {
        fail(where() + ": seq " + std::to_string(b.seq) + " is outside [0, " +
             std::to_string(h_.sequences) + ")");
      }
      if (b.tokens < 1) fail(where() + ": tokens is " + std::to_string(b.tokens));
      if (b.begin < 0 || b.begin > h_.total_tokens - b.tokens) {
        fail(where() + ": tokens [" + std::to_string(b.begin) + ", " + std::to_string(b.begin) +
             " + " + std::to_string(b.tokens) + ") are outside the batch's " +
             std::to_string(h_.total_tokens) + " tokens");
      }
    }
  }

  void check_owned() const {
    for (std::size_t i = 0; i < p_.owned.size(); ++i) {
      block(p_.owned[i], [&] { return item("owned", i); });
    }
    std::vector<BlockId> sorted = p_.owned;
    std::sort(sorted.begin(), sorted.end());
    const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
    if (twice != sorted.end()) fail("owned: block " + std::to_string(*twice) + " appears twice");
  }

  void check_outputs() const {
    for (std::size_t i = 0; i < p_.outputs.size(); ++i) {
      const ExpectedOutput& o = p_.outputs[i];
      const auto where = [&] { return item("outputs", i); };
      kind(o.kind, where, "kind");
      if (!is_output(o.kind)) {
        fail(where() + ": kind " + std::string(to_string(o.kind)) + " is not an output kind");
      }
      block(o.block, where);
      head_block(o.head_block, uses_q_heads(o.kind), where);
      if (o.contributions < 0 || o.pairs < 0) {
        fail(where() + ": contributions " + std::to_string(o.contributions) + " and pairs " +
             std::to_string(o.pairs) + " must not be negative");
      }
    }
  }

  void check_kept() const {
    for (std::size_t i = 0; i < p_.kept.size(); ++i) {
      const KeptValue& k = p_.kept[i];
      const auto where = [&] { return item("kept", i); };
      kind(k.kind, where, "kind");
      if (k.kind != SlotKind::kKV) {
        fail(where() + ": kind " + std::string(to_string(k.kind)) +
             " cannot be kept; only kv values are");
      }
      block(k.block, where);
      head_block(k.head_block, false, where);
      if (i > 0 && !(p_.kept[i - 1] < k)) {
        fail(where() + ": kv(block " + std::to_string(k.block) + ", head " +
             std::to_string(k.head_block) + ") is out of order or repeated; kept values are " +
             "sorted, once each");
      }
      if (std::find(p_.owned.begin(), p_.owned.end(), k.block) != p_.owned.end()) {
        fail(where() + ": block " + std::to_string(k.block) +
             " is owned by this device; only received values are kept");
      }
    }
  }

  // A Keep (forward) or Restore (backward) names a value of Program::kept into a kv slot.
  template <typename Op, typename Where>
  void check_kept_copy(const Op& op, Pass pass, const Where& where) const {
    if (p_.pass != pass) {
      fail(where() + ": a " + std::string(pass == Pass::kForward ? "keep" : "restore") +
           " belongs to the " + std::string(to_string(pass)) + " pass");
    }
    slot(op.slot, false, where, "slot");
    if (p_.slots[static_cast<std::size_t>(op.slot)].kind != SlotKind::kKV) {
      fail(where() + ": slot " + std::to_string(op.slot) + " is a " +
           std::string(to_string(p_.slots[static_cast<std::size_t>(op.slot)].kind)) +
           " slot, not kv");
    }
    const KeptValue key{SlotKind::kKV, op.block, op.head_block};
    if (!std::binary_search(p_.kept.begin(), p_.kept.end(), key)) {
      fail(where() + ": kv(block " + std::to_string(op.block) + ", head " +
           std::to_string(op.head_block) + ") is not in the program's kept values");
    }
  }

  void check_slots() const {
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const auto where = [&] { return item("slots", i); };
      kind(p_.slots[i].kind, where, "kind");
      if (p_.slots[i].tokens < 1) {
        fail(where() + ": tokens is " + std::to_string(p_.slots[i].tokens) +
             ", expected at least 1");
      }
    }
  }

  void check_masks() const {
    for (std::size_t i = 0; i < p_.masks.size(); ++i) {
      if (auto problem = tile_mask_problem(p_.masks[i])) fail(item("masks", i) + ": " + *problem);
    }
  }

  template <typename Where>
  void check_rows(const std::vector<AttnRow>& rows, const Where& where_instruction) const {
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const auto where_row = [&] { return where_instruction() + ": " + item("rows", r); };
      slot(rows[r].q, false, where_row, "q");
      slot(rows[r].out, false, where_row, "out");
      for (std::size_t k = 0; k < rows[r].kv.size(); ++k) {
        const AttnKv& kv = rows[r].kv[k];
        const auto where = [&] { return where_row() + "." + item("kv", k); };
        slot(kv.kv, false, where, "kv");
        slot(kv.dkv, true, where, "dkv");
        if (kv.mask != kFullTile &&
            (kv.mask < 0 || static_cast<std::size_t>(kv.mask) >= p_.masks.size())) {
          fail(where() + ": mask " + std::to_string(kv.mask) + " is not a mask (" +
               std::to_string(p_.masks.size()) + " masks, or -1 for a full tile)");
        }
      }
    }
  }

  void check_instructions() const {
    std::int64_t launches = 0;
    for (const Instruction& instruction : p_.instructions) {
      launches += std::holds_alternative<Launch>(instruction) ? 1 : 0;
    }
    const auto launch_id = [&](LaunchId id, const auto& where, std::string_view field) {
      if (id < 0 || id >= launches) {
        fail(where() + ": " + std::string(field) + " " + std::to_string(id) + " is outside [0, " +
             std::to_string(launches) + ") launches");
      }
    };
    for (std::size_t i = 0; i < p_.instructions.size(); ++i) {
      const Instruction& instruction = p_.instructions[i];
      const auto where = [&] {
        return item("instructions", i) + " (" + std::string(opcode_name(instruction)) + ")";
      };
      if (const auto* load = std::get_if<Load>(&instruction)) {
        slot(load->slot, false, where, "slot");
        block(load->block, where);
        head_block(load->head_block,
                   uses_q_heads(p_.slots[static_cast<std::size_t>(load->slot)].kind), where);
      } else if (const auto* store = std::get_if<Store>(&instruction)) {
        slot(store->slot, true, where, "slot");
        kind(store->kind, where, "kind");
        if (!is_output(store->kind)) {
          fail(where() + ": kind " + std::string(to_string(store->kind)) +
               " is not an output kind");
        }
        block(store->block, where);
        head_block(store->head_block, uses_q_heads(store->kind), where);
      } else if (const auto* launch = std::get_if<Launch>(&instruction)) {
        launch_id(launch->id, where, "id");
        for (std::size_t k = 0; k < launch->ops.size(); ++k) {
          const CommOp& op = launch->ops[k];
          const auto where_op = [&] { return where() + ": " + item("ops", k); };
          if (code(op.direction) > 1) {
            fail(where_op() + ": direction " + std::to_string(code(op.direction)) +
                 " is neither send nor receive");
          }
          if (op.peer < 0 || op.peer >= devices_) {
            fail(where_op() + ": peer " + std::to_string(op.peer) + " is outside [0, " +
                 std::to_string(devices_) + ")");
          }
          slot(op.slot, false, where_op, "slot");
          if (op.bytes < 0) fail(where_op() + ": bytes is " + std::to_string(op.bytes));
        }
      } else if (const auto* wait = std::get_if<Wait>(&instruction)) {
        launch_id(wait->launch, where, "launch");
      } else if (const auto* forward = std::get_if<AttnForward>(&instruction)) {
        check_rows(forward->rows, where);
      } else if (const auto* backward = std::get_if<AttnBackward>(&instruction)) {
        check_rows(backward->rows, where);
      } else if (const auto* merge = std::get_if<Merge>(&instruction)) {
        slot(merge->dst, false, where, "dst");
        slot(merge->src, false, where, "src");
      } else if (const auto* sum = std::get_if<Sum>(&instruction)) {
        slot(sum->dst, false, where, "dst");
        slot(sum->src, false, where, "src");
      } else if (const auto* free = std::get_if<Free>(&instruction)) {
        for (std::size_t k = 0; k < free->slots.size(); ++k) {
          slot(
              free->slots[k], false, [&] { return where() + ": " + item("slots", k); }, "slot");
        }
      } else if (const auto* keep = std::get_if<Keep>(&instruction)) {
        check_kept_copy(*keep, Pass::kForward, where);
      } else if (const auto* restore = std::get_if<Restore>(&instruction)) {
        check_kept_copy(*restore, Pass::kBackward, where);
      }
    }
    if (p_.instruction_stage.size() != p_.instructions.size()) {
      fail("instruction_stage has " + std::to_string(p_.instruction_stage.size()) +
           " entries for " + std::to_string(p_.instructions.size()) + " instructions");
    }
    for (std::size_t i = 0; i < p_.instruction_stage.size(); ++i) {
      const std::int32_t stage = p_.instruction_stage[i];
      // Stage `stages` is the epilogue after the last compute stage.
      if (stage < 0 || stage > p_.stages) {
        fail(item("instruction_stage", i) + ": stage " + std::to_string(stage) +
             " is outside [0, stages = " + std::to_string(p_.stages) + "]");
      }
    }
  }

  const PlanHeader& h_;
  const Program& p_;
  std::string_view origin_;
  std::int64_t devices_ = 0;
  std::int32_t q_head_blocks_ = 0;
  std::int32_t kv_head_blocks_ = 0;
};

}  // namespace

std::string origin_prefix(std::string_view origin) {
  return origin.empty() ? std::string() : std::string(origin) + ": ";
}

std::string program_name(Pass pass, std::int32_t device) {
  return std::string(to_string(pass)) + " program of device " + std::to_string(device);
}

void check_plan_header(const PlanHeader& header, std::string_view origin) {
  const std::string where = origin_prefix(origin);
  try {
    validate(header.cluster);
  } catch (const InvalidInput& e) {
    throw InvalidInput(where + "cluster: " + e.what());
  }
  AttentionShape shape;
  shape.q_heads = header.q_heads;
  shape.kv_heads = header.kv_heads;
  shape.head_dim = header.head_dim;
  shape.softmax_scale = header.softmax_scale;
  std::int32_t kv_block_size = 0;
  try {
    validate(shape);
    kv_block_size = HeadBlocking(shape, header.head_block_size).kv_block_size();
  } catch (const InvalidInput& e) {
    throw InvalidInput(where + "attention shape: " + e.what());
  }
  if (header.kv_heads_per_block != kv_block_size) {
    throw InvalidInput(where + "kv_heads_per_block is " +
                       std::to_string(header.kv_heads_per_block) + ", but head blocks of " +
                       std::to_string(header.head_block_size) + " q heads read " +
                       std::to_string(kv_block_size) + " kv heads");
  }
  for (const DType dtype : {header.dtype, header.partial_dtype}) {
    if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) >= kDTypeCount) {
      throw InvalidInput(where + "dtype " + std::to_string(static_cast<int>(dtype)) +
                         " is not a dtype");
    }
  }
  if (!partial_dtype_allowed(header.dtype, header.partial_dtype)) {
    throw InvalidInput(where + "partials travel in " +
                       std::string(to_string(header.partial_dtype)) + ", but a plan in " +
                       std::string(to_string(header.dtype)) + " sends them in fp32 or " +
                       std::string(to_string(header.dtype)));
  }
  if (!std::isfinite(header.softmax_scale) || header.softmax_scale <= 0.0) {
    throw InvalidInput(where + "softmax_scale must be positive and finite, got " +
                       std::to_string(header.softmax_scale));
  }
  if (header.token_blocks > kMaxTokenBlocks) {
    throw InvalidInput(where + std::to_string(header.token_blocks) + " token blocks, at most " +
                       std::to_string(kMaxTokenBlocks));
  }
  if (header.total_tokens < 0 || header.sequences < 0 || header.token_blocks < 0 ||
      header.work_units < 0) {
    throw InvalidInput(
        where + "negative count: total_tokens " + std::to_string(header.total_tokens) +
        ", sequences " + std::to_string(header.sequences) + ", token_blocks " +
        std::to_string(header.token_blocks) + ", work_units " + std::to_string(header.work_units));
  }
  if (header.strategy.size() > kMaxStrategyBytes) {
    throw InvalidInput(where + "strategy name of " + std::to_string(header.strategy.size()) +
                       " bytes, at most " + std::to_string(kMaxStrategyBytes) + " allowed");
  }
  for (const char c : header.strategy) {
    if (c < 0x20 || c > 0x7E) {
      throw InvalidInput(where + "strategy name has a byte " +
                         std::to_string(static_cast<unsigned char>(c)) +
                         " that is not printable ASCII");
    }
  }
}

void check_program_structure(const PlanHeader& header, const Program& program,
                             std::string_view origin) {
  StructureCheck(header, program, origin).run();
}

void check_plan(const Plan& plan, std::string_view origin) {
  check_plan_header(plan.header, origin);
  const std::int32_t devices = plan.header.cluster.devices();
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    const std::vector<Program>& programs = plan.programs(pass);
    if (programs.size() != static_cast<std::size_t>(devices)) {
      throw InvalidInput(origin_prefix(origin) + std::to_string(programs.size()) + " " +
                         std::string(to_string(pass)) + " programs for " + std::to_string(devices) +
                         " devices");
    }
    for (std::size_t i = 0; i < programs.size(); ++i) {
      if (programs[i].device != static_cast<std::int32_t>(i) || programs[i].pass != pass) {
        throw InvalidInput(origin_prefix(origin) + std::string(to_string(pass)) + " program " +
                           std::to_string(i) + " is marked as the " +
                           program_name(programs[i].pass, programs[i].device));
      }
      check_program_structure(plan.header, programs[i], origin);
    }
  }
}

}  // namespace dcp

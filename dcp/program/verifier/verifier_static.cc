// SPDX-License-Identifier: Apache-2.0
// The verifier's static checks: what can be judged from each Program's text alone.
#include <algorithm>
#include <variant>

#include "dcp/core/error.h"

#include "dcp/model/block_layout.h"

#include "dcp/program/plan_file/plan_file.h"
#include "dcp/program/verifier/verifier_detail.h"

namespace dcp::verifier_detail {
namespace {

bool valid_kind(SlotKind kind) { return static_cast<int>(kind) < kSlotKindCount; }

bool output_less(const ProgramIndex::OutputKey& a, const ProgramIndex::OutputKey& b) {
  if (a.kind != b.kind) return a.kind < b.kind;
  if (a.block != b.block) return a.block < b.block;
  return a.head_block < b.head_block;
}

// Why the header cannot describe a plan of `programs` devices, or nothing: the plan file's header
// check, whose bounds the rest of the verifier relies on to stay clear of overflow and
// out-of-range indices.
std::optional<std::string> header_problem(const PlanHeader& header, std::size_t programs) {
  try {
    check_plan_header(header, "");
  } catch (const InvalidInput& e) {
    return std::string(e.what());
  }
  if (static_cast<std::size_t>(header.cluster.devices()) != programs) {
    return cat("the pass has ", programs, " programs for ", header.cluster.devices(), " devices");
  }
  return std::nullopt;
}

// Checks one Program; fills its ProgramIndex and the pass's channel totals.
class ProgramChecker {
 public:
  ProgramChecker(const Plan& plan, Pass pass, std::int32_t device, PassIndex& pass_index)
      : plan_(plan),
        header_(plan.header),
        pass_(pass),
        device_(device),
        devices_(static_cast<std::int32_t>(plan.programs(pass).size())),
        program_(plan.programs(pass)[static_cast<std::size_t>(device)]),
        pass_index_(pass_index),
        index_(pass_index.programs[static_cast<std::size_t>(device)]) {}

  std::optional<Violation> run() {
    if (auto violation = check_program()) return violation;
    if (auto violation = check_tables()) return violation;
    for (std::size_t i = 0; i < program_.instructions.size(); ++i) {
      instruction_ = static_cast<std::int64_t>(i);
      const std::int32_t stage = program_.instruction_stage[i];
      if (stage < 0 || stage > program_.stages) {
        return fail("structure", cat("stage ", stage, " is outside [0, ", program_.stages, "]"));
      }
      auto violation =
          std::visit([this](const auto& op) { return check(op); }, program_.instructions[i]);
      if (violation) return violation;
    }
    instruction_ = -1;
    for (std::size_t l = 0; l < launch_instruction_.size(); ++l) {
      if (!waited_[l]) {
        instruction_ = launch_instruction_[l];
        return fail("launch-not-waited", cat("launch ", l, " is never waited"));
      }
    }
    for (const ProgramIndex::OutputKey& key : index_.outputs) {
      if (!stored_[static_cast<std::size_t>(key.index)]) {
        return fail("output-missing",
                    cat("expected output ", to_string(key.kind), "(block ", key.block, ", head ",
                        key.head_block, ") is never stored"));
      }
    }
    if (pass_ == Pass::kForward) {
      for (std::size_t k = 0; k < program_.kept.size(); ++k) {
        if (!kept_done_[k]) {
          return fail("kept-missing",
                      cat("kept value kv(block ", program_.kept[k].block, ", head ",
                          program_.kept[k].head_block, ") is never kept for the backward pass"));
        }
      }
    }
    return std::nullopt;
  }

 private:
  Violation fail(std::string_view rule, std::string_view detail) const {
    return make_violation(&program_, device_, pass_, instruction_, rule, detail);
  }

  std::optional<Violation> check_program() const {
    if (program_.device != device_) {
      return fail("structure", cat("program of index ", device_, " says device ", program_.device));
    }
    if (program_.pass != pass_) {
      return fail("structure", cat("program says ", to_string(program_.pass), ", it is one of the ",
                                   to_string(pass_), " programs"));
    }
    if (program_.stages < 1) return fail("structure", cat("stages is ", program_.stages));
    if (program_.instruction_stage.size() != program_.instructions.size()) {
      return fail("structure", cat(program_.instructions.size(), " instructions but ",
                                   program_.instruction_stage.size(), " instruction stages"));
    }
    for (std::size_t s = 0; s < program_.slots.size(); ++s) {
      const Slot& slot = program_.slots[s];
      if (!valid_kind(slot.kind) || slot.tokens < 1) {
        return fail("structure", cat("slot ", s, " has kind ", static_cast<int>(slot.kind),
                                     " and capacity ", slot.tokens));
      }
    }
    return std::nullopt;
  }

  std::optional<Violation> check_tables() {
    const std::vector<BlockInfo>& blocks = program_.blocks;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const BlockInfo& info = blocks[i];
      if (info.id < 0 || info.id >= header_.token_blocks || info.seq < 0 ||
          info.seq >= header_.sequences || info.tokens < 1 || info.begin < 0 ||
          (i > 0 && info.id <= blocks[i - 1].id)) {
        return fail("structure", cat("block table entry ", i, " (block ", info.id, ", seq ",
                                     info.seq, ", ", info.tokens, " tokens at ", info.begin,
                                     ") is out of range or out of order"));
      }
    }
    index_.owned = program_.owned;
    std::sort(index_.owned.begin(), index_.owned.end());
    for (std::size_t i = 0; i < index_.owned.size(); ++i) {
      const BlockId block = index_.owned[i];
      if (find_block(program_, block) == nullptr || (i > 0 && block == index_.owned[i - 1])) {
        return fail("structure",
                    cat("owned block ", block, " is listed twice or missing from the block table"));
      }
    }
    for (std::size_t m = 0; m < program_.masks.size(); ++m) {
      if (auto problem = tile_mask_problem(program_.masks[m])) {
        return fail("structure", cat("mask ", m, ": ", *problem));
      }
      index_.mask_pairs.push_back(program_.masks[m].pairs());
    }
    for (std::size_t o = 0; o < program_.outputs.size(); ++o) {
      const ExpectedOutput& output = program_.outputs[o];
      const std::string name = cat("expected output ", o, " ", to_string(output.kind), "(block ",
                                   output.block, ", head ", output.head_block, ")");
      if (!valid_kind(output.kind) || !is_output_of(pass_, output.kind)) {
        return fail("wrong-pass", cat(name, " is not an output of the pass"));
      }
      if (!index_.owns(output.block)) {
        return fail("not-owned", cat(name, " is of a block not owned"));
      }
      if (!head_in_range(output.kind, output.head_block) || output.contributions < 0 ||
          output.pairs < 0) {
        return fail("structure", cat(name, " has a head block or count out of range"));
      }
      index_.outputs.push_back(
          {output.kind, output.block, output.head_block, static_cast<std::int32_t>(o)});
    }
    std::sort(index_.outputs.begin(), index_.outputs.end(), output_less);
    for (std::size_t o = 1; o < index_.outputs.size(); ++o) {
      if (!output_less(index_.outputs[o - 1], index_.outputs[o])) {
        return fail("structure", cat("expected outputs ", index_.outputs[o - 1].index, " and ",
                                     index_.outputs[o].index, " name the same value"));
      }
    }
    stored_.assign(program_.outputs.size(), false);
    return check_kept_list();
  }

  // The kept values: received kv values, sorted, once each, in the block table, and the same
  // list in the other pass's Program of this device.
  std::optional<Violation> check_kept_list() {
    const std::vector<KeptValue>& kept = program_.kept;
    for (std::size_t k = 0; k < kept.size(); ++k) {
      const KeptValue& value = kept[k];
      const std::string name = cat("kept value ", k, " ", to_string(value.kind), "(block ",
                                   value.block, ", head ", value.head_block, ")");
      if (value.kind != SlotKind::kKV || !head_in_range(value.kind, value.head_block) ||
          find_block(program_, value.block) == nullptr || (k > 0 && !(kept[k - 1] < value))) {
        return fail("structure", cat(name, " is not a kv value of the block table, or the list ",
                                     "is not sorted and repeat-free"));
      }
      if (index_.owns(value.block)) {
        return fail("structure", cat(name, " is of an owned block; only received values are kept"));
      }
    }
    const auto d = static_cast<std::size_t>(device_);
    if (plan_.forward.size() == plan_.backward.size() &&
        plan_.forward[d].kept != plan_.backward[d].kept) {
      return fail("kept-mismatch",
                  cat("the forward and backward Programs of device ", device_,
                      " list different kept values (", plan_.forward[d].kept.size(), " forward, ",
                      plan_.backward[d].kept.size(), " backward)"));
    }
    kept_done_.assign(kept.size(), false);
    return std::nullopt;
  }

  // The index of (block, head_block) in Program::kept, or -1.
  std::int64_t kept_index(BlockId block, std::int32_t head_block) const {
    const KeptValue key{SlotKind::kKV, block, head_block};
    const auto it = std::lower_bound(program_.kept.begin(), program_.kept.end(), key);
    return it != program_.kept.end() && *it == key ? it - program_.kept.begin() : -1;
  }

  template <typename Op>
  std::optional<Violation> check_kept_copy(const Op& op, Pass pass, std::string_view opcode) {
    if (pass_ != pass) {
      return fail("wrong-pass", cat(opcode, " in the ", to_string(pass_), " pass"));
    }
    if (auto violation = check_slot(op.slot, SlotKind::kKV, opcode)) return violation;
    const std::int64_t k = kept_index(op.block, op.head_block);
    if (k < 0) {
      return fail("kept-unknown", cat(opcode, " of kv(block ", op.block, ", head ", op.head_block,
                                      "), which is not in the program's kept values"));
    }
    return std::nullopt;
  }

  std::optional<Violation> check(const Keep& keep) {
    if (auto violation = check_kept_copy(keep, Pass::kForward, "keep")) return violation;
    const auto k = static_cast<std::size_t>(kept_index(keep.block, keep.head_block));
    if (kept_done_[k]) {
      return fail("kept-twice", cat("kv(block ", keep.block, ", head ", keep.head_block,
                                    ") is kept a second time"));
    }
    kept_done_[k] = true;
    return std::nullopt;
  }

  std::optional<Violation> check(const Restore& restore) {
    return check_kept_copy(restore, Pass::kBackward, "restore");
  }

  bool head_in_range(SlotKind kind, std::int32_t head_block) const {
    const std::int32_t count =
        uses_q_heads(kind) ? header_.head_blocks() : header_.kv_head_blocks();
    return head_block >= 0 && head_block < count;
  }

  bool is_slot(SlotId slot, SlotKind kind) const {
    return slot >= 0 && static_cast<std::size_t>(slot) < program_.slots.size() &&
           program_.slots[static_cast<std::size_t>(slot)].kind == kind;
  }

  // Checks that `slot` is a slot id of this program and of kind `kind`.
  std::optional<Violation> check_slot(SlotId slot, SlotKind kind, std::string_view role) const {
    if (slot < 0 || static_cast<std::size_t>(slot) >= program_.slots.size()) {
      return fail("structure",
                  cat(role, " slot ", slot, " is not in [0, ", program_.slots.size(), ")"));
    }
    const SlotKind actual = program_.slots[static_cast<std::size_t>(slot)].kind;
    if (actual != kind) {
      return fail("slot-kind", cat(role, " slot ", slot, " is of kind ", to_string(actual),
                                   ", not ", to_string(kind)));
    }
    return std::nullopt;
  }

  std::optional<Violation> check(const Load& load) const {
    if (load.slot < 0 || static_cast<std::size_t>(load.slot) >= program_.slots.size()) {
      return fail("structure",
                  cat("slot ", load.slot, " is not in [0, ", program_.slots.size(), ")"));
    }
    const SlotKind kind = program_.slots[static_cast<std::size_t>(load.slot)].kind;
    if (!is_input_of(pass_, kind)) {
      return fail("slot-kind", cat("slot ", load.slot, " is of kind ", to_string(kind), "; the ",
                                   to_string(pass_), " pass loads only ",
                                   pass_ == Pass::kForward ? "q" : "qgrad", " and kv"));
    }
    if (!index_.owns(load.block)) {
      return fail("not-owned", cat("block ", load.block, " is not owned"));
    }
    if (!head_in_range(kind, load.head_block)) {
      return fail("structure",
                  cat("head block ", load.head_block, " is out of range for ", to_string(kind)));
    }
    return std::nullopt;
  }

  std::optional<Violation> check(const Store& store) {
    const std::string name =
        cat(to_string(store.kind), "(block ", store.block, ", head ", store.head_block, ")");
    if (!valid_kind(store.kind) || !is_output_of(pass_, store.kind)) {
      return fail("wrong-pass", cat(name, " is not an output of the pass"));
    }
    if (store.slot != kNoSlot) {
      if (auto violation = check_slot(store.slot, store.kind, "stored")) return violation;
    }
    if (!index_.owns(store.block)) return fail("not-owned", cat(name, " is of a block not owned"));
    const std::int32_t output = index_.find_output(store.kind, store.block, store.head_block);
    if (output < 0) return fail("output-unexpected", cat(name, " is not an expected output"));
    if (stored_[static_cast<std::size_t>(output)]) {
      return fail("output-stored-twice", cat(name, " is stored a second time"));
    }
    stored_[static_cast<std::size_t>(output)] = true;
    return std::nullopt;
  }

  std::optional<Violation> check(const Launch& launch) {
    const auto issued = static_cast<LaunchId>(launch_instruction_.size());
    if (launch.id != issued) {
      return fail("launch-order", cat("launch id ", launch.id, ", expected ", issued));
    }
    launch_instruction_.push_back(instruction_);
    waited_.push_back(false);
    for (std::size_t k = 0; k < launch.ops.size(); ++k) {
      const CommOp& op = launch.ops[k];
      const bool send = op.direction == CommOp::Direction::kSend;
      if (!send && op.direction != CommOp::Direction::kRecv) {
        return fail("structure", cat("op ", k, " has direction ", static_cast<int>(op.direction)));
      }
      if (op.peer < 0 || op.peer >= devices_ || op.peer == device_) {
        return fail("structure", cat("op ", k, " (", send ? "send" : "recv", ") has peer ", op.peer,
                                     ": not another device of [0, ", devices_, ")"));
      }
      if (op.slot < 0 || static_cast<std::size_t>(op.slot) >= program_.slots.size()) {
        return fail("structure", cat("op ", k, " (", send ? "send" : "recv", ") has slot ", op.slot,
                                     ", not in [0, ", program_.slots.size(), ")"));
      }
      if (send) {
        ++pass_index_.channels[channel_key(device_, op.peer, devices_)].sends;
      } else {
        ++pass_index_.channels[channel_key(op.peer, device_, devices_)].recvs;
      }
    }
    index_.comm_ops += static_cast<std::int64_t>(launch.ops.size());
    return std::nullopt;
  }

  std::optional<Violation> check(const Wait& wait) {
    if (wait.launch < 0 || static_cast<std::size_t>(wait.launch) >= waited_.size()) {
      return fail("wait-invalid", cat("launch ", wait.launch, " is not issued yet (",
                                      waited_.size(), " launches issued)"));
    }
    if (waited_[static_cast<std::size_t>(wait.launch)]) {
      return fail("wait-invalid", cat("launch ", wait.launch, " is waited a second time"));
    }
    waited_[static_cast<std::size_t>(wait.launch)] = true;
    return std::nullopt;
  }

  // The loop over every attention entry: names for messages are built only for a violation.
  std::optional<Violation> check_rows(const std::vector<AttnRow>& rows, bool backward) {
    index_.attention_rows += static_cast<std::int64_t>(rows.size());
    const SlotKind q_kind = backward ? SlotKind::kQGrad : SlotKind::kQ;
    const SlotKind out_kind = backward ? SlotKind::kDQ : SlotKind::kOut;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const AttnRow& row = rows[r];
      if (!is_slot(row.q, q_kind)) return check_slot(row.q, q_kind, cat("row ", r, " q"));
      if (!is_slot(row.out, out_kind)) return check_slot(row.out, out_kind, cat("row ", r, " out"));
      for (std::size_t e = 0; e < row.kv.size(); ++e) {
        const AttnKv& entry = row.kv[e];
        const auto name = [&](std::string_view what) { return cat("row ", r, " entry ", e, what); };
        if (!is_slot(entry.kv, SlotKind::kKV)) {
          return check_slot(entry.kv, SlotKind::kKV, name(" kv"));
        }
        if (entry.mask != kFullTile &&
            (entry.mask < 0 || static_cast<std::size_t>(entry.mask) >= program_.masks.size())) {
          return fail("structure", cat(name(" has mask "), entry.mask, ", not in [0, ",
                                       program_.masks.size(), ") nor the full tile"));
        }
        if (!backward && (entry.dkv != kNoSlot || entry.dkv_accumulate)) {
          return fail("structure", cat(name(" names dkv slot "), entry.dkv, " in forward"));
        }
        if (backward && !is_slot(entry.dkv, SlotKind::kDKV)) {
          return check_slot(entry.dkv, SlotKind::kDKV, name(" dkv"));
        }
      }
    }
    return std::nullopt;
  }

  std::optional<Violation> check(const AttnForward& attention) {
    if (pass_ != Pass::kForward) return fail("wrong-pass", "attn_fwd in the backward pass");
    return check_rows(attention.rows, false);
  }

  std::optional<Violation> check(const AttnBackward& attention) {
    if (pass_ != Pass::kBackward) return fail("wrong-pass", "attn_bwd in the forward pass");
    return check_rows(attention.rows, true);
  }

  std::optional<Violation> check_pair(SlotId dst, SlotId src, SlotKind kind) const {
    if (auto violation = check_slot(dst, kind, "dst")) return violation;
    if (auto violation = check_slot(src, kind, "src")) return violation;
    if (dst == src) return fail("structure", cat("dst and src are both slot ", dst));
    return std::nullopt;
  }

  std::optional<Violation> check(const Merge& merge) const {
    if (pass_ != Pass::kForward) return fail("wrong-pass", "merge in the backward pass");
    return check_pair(merge.dst, merge.src, SlotKind::kOut);
  }

  std::optional<Violation> check(const Sum& sum) const {
    if (pass_ != Pass::kBackward) return fail("wrong-pass", "sum in the forward pass");
    if (sum.dst >= 0 && static_cast<std::size_t>(sum.dst) < program_.slots.size()) {
      const SlotKind kind = program_.slots[static_cast<std::size_t>(sum.dst)].kind;
      if (kind == SlotKind::kDQ || kind == SlotKind::kDKV) {
        return check_pair(sum.dst, sum.src, kind);
      }
    }
    return check_pair(sum.dst, sum.src, SlotKind::kDQ);
  }

  std::optional<Violation> check(const Free& free) const {
    for (const SlotId slot : free.slots) {
      if (slot < 0 || static_cast<std::size_t>(slot) >= program_.slots.size()) {
        return fail("structure", cat("slot ", slot, " is not in [0, ", program_.slots.size(), ")"));
      }
    }
    return std::nullopt;
  }

  const Plan& plan_;
  const PlanHeader& header_;
  Pass pass_;
  std::int32_t device_;
  std::int32_t devices_;
  const Program& program_;
  PassIndex& pass_index_;
  ProgramIndex& index_;
  std::int64_t instruction_ = -1;
  std::vector<std::int64_t> launch_instruction_;  // per launch id
  std::vector<bool> waited_;                      // per launch id, so far
  std::vector<bool> stored_;                      // per expected output, so far
  std::vector<bool> kept_done_;                   // per kept value: kept (forward) so far
};

}  // namespace

bool ProgramIndex::owns(BlockId block) const {
  return std::binary_search(owned.begin(), owned.end(), block);
}

std::int32_t ProgramIndex::find_output(SlotKind kind, BlockId block,
                                       std::int32_t head_block) const {
  const OutputKey key{kind, block, head_block, 0};
  const auto it = std::lower_bound(outputs.begin(), outputs.end(), key, output_less);
  return it != outputs.end() && !output_less(key, *it) ? it->index : -1;
}

const BlockInfo* find_block(const Program& program, BlockId block) {
  const auto it = std::lower_bound(program.blocks.begin(), program.blocks.end(), block,
                                   [](const BlockInfo& info, BlockId id) { return info.id < id; });
  return it != program.blocks.end() && it->id == block ? &*it : nullptr;
}

std::int32_t kv_head_block_of(const PlanHeader& header, std::int32_t head_block) {
  const std::int32_t group = header.q_heads / header.kv_heads;
  return (head_block * header.head_block_size / group) / header.kv_heads_per_block;
}

std::optional<Violation> check_statically(const Plan& plan, Pass pass, PassIndex& index) {
  const std::vector<Program>& programs = plan.programs(pass);
  if (auto problem = header_problem(plan.header, programs.size())) {
    return make_violation(nullptr, -1, pass, -1, "structure", *problem);
  }
  index.programs.assign(programs.size(), ProgramIndex{});
  for (std::size_t d = 0; d < programs.size(); ++d) {
    if (auto violation = ProgramChecker(plan, pass, static_cast<std::int32_t>(d), index).run()) {
      return violation;
    }
    index.attention_rows += index.programs[d].attention_rows;
  }
  return std::nullopt;
}

std::optional<Violation> check_output_totals(const Plan& plan, Pass pass) {
  std::int64_t totals[kSlotKindCount] = {};
  for (const Program& program : plan.programs(pass)) {
    for (const ExpectedOutput& output : program.outputs) {
      totals[static_cast<int>(output.kind)] += output.contributions;
    }
  }
  const SlotKind kinds[] = {SlotKind::kOut, SlotKind::kDQ, SlotKind::kDKV};
  for (const SlotKind kind : kinds) {
    if (!is_output_of(pass, kind)) continue;
    const std::int64_t total = totals[static_cast<int>(kind)];
    if (total != plan.header.work_units) {
      return make_violation(
          nullptr, -1, pass, -1, "output-total",
          cat("the expected ", to_string(kind), " outputs gather ", total,
              " contributions, the header has ", plan.header.work_units, " work units"));
    }
  }
  return std::nullopt;
}

}  // namespace dcp::verifier_detail

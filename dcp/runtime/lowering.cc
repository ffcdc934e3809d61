// SPDX-License-Identifier: Apache-2.0
// Lowering: one rank's Program turned into the calls a device makes.
#include "dcp/runtime/lowering.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <utility>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"

namespace dcp::runtime {

namespace {

// Walks the instructions keeping, per slot, the tokens of the value it holds (-1: none) and where
// that value lies (the slot, or its place in the kept tensor), and lowers each instruction against
// that state.
class Lowerer {
 public:
  Lowerer(const PlanHeader& header, const Program& program, const LocalLayout& layout)
      : header_(header),
        program_(program),
        tokens_(program.slots.size(), -1),
        kept_places_(program.slots.size(), -1),
        wire_offsets_(program.slots.size(), -1),
        converts_(partial_conversions(header, program)) {
    for (std::size_t i = 0; i < layout.blocks.size(); ++i) {
      block_offsets_.emplace_back(layout.blocks[i].id, layout.offsets[i]);
    }
    std::sort(block_offsets_.begin(), block_offsets_.end());
    out_.pass = program.pass;
    for (const Slot& slot : program.slots) {
      out_.slot_offsets.push_back(out_.arena_bytes);
      out_.arena_bytes += aligned(slot_bytes(header, slot.kind, slot.tokens));
    }
    for (const KeptValue& kept : program.kept) {
      kept_offsets_.push_back(out_.kept_bytes);
      out_.kept_bytes += aligned(value_bytes(header, kept.kind, block(kept.block).tokens));
    }
    AttentionTables& t = out_.tables;
    for (const TileMask& mask : program.masks) {
      mask_start_.push_back(static_cast<std::int32_t>(t.mask_rows.size()));
      const auto base = static_cast<std::int32_t>(t.mask_intervals.size() / 2);
      for (const std::int32_t offset : mask.row_offsets) t.mask_rows.push_back(base + offset);
      t.mask_intervals.insert(t.mask_intervals.end(), mask.intervals.begin(), mask.intervals.end());
    }
  }

  LoweredPass run() {
    find_kept_receives();
    for (std::size_t i = 0; i < program_.instructions.size(); ++i) {
      instruction_ = i;
      try {
        out_.calls.push_back(
            std::visit([&](const auto& op) { return lower(op); }, program_.instructions[i]));
      } catch (const Error& error) {
        throw Error("device " + std::to_string(program_.device) + ", " +
                    std::string(to_string(program_.pass)) + " instruction " + std::to_string(i) +
                    " (" + std::string(opcode_name(program_.instructions[i])) +
                    "): " + error.what());
      }
    }
    group_copies();
    group_memory_work();
    return std::move(out_);
  }

 private:
  const Slot& slot(SlotId id) const {
    if (id < 0 || to_size(id) >= program_.slots.size()) {
      throw Error("slot " + std::to_string(id) + " does not exist");
    }
    return program_.slots[to_size(id)];
  }
  std::int64_t offset(SlotId id) const {
    slot(id);
    return out_.slot_offsets[to_size(id)];
  }
  static std::int64_t aligned(std::int64_t bytes) {
    return (bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  }
  // The wire buffer of a partial slot, placed after everything else on its first transfer.
  std::int64_t wire_offset(SlotId id) {
    std::int64_t& wire = wire_offsets_[to_size(id)];
    if (wire < 0) {
      wire = out_.arena_bytes;
      out_.arena_bytes += aligned(value_bytes(header_, slot(id).kind, slot(id).tokens));
    }
    return wire;
  }
  // Where the value `id` holds lies: the slot's offset in the arena, or its place in the kept
  // tensor (buffer kKept).
  std::int64_t value_offset(SlotId id, BufferKind* buffer) const {
    const std::int64_t place = kept_places_[to_size(id)];
    *buffer = place >= 0 ? BufferKind::kKept : BufferKind::kArena;
    return place >= 0 ? place : offset(id);
  }
  // The receives whose value the forward pass keeps: those a Keep of the same slot follows with
  // no other write of the slot between them. They go straight to the kept tensor (a kept value is
  // received, never loaded: the verifier's rule), so no Keep copies anything.
  void find_kept_receives() {
    if (program_.pass != Pass::kForward) return;
    constexpr std::pair<std::size_t, std::size_t> kNone{SIZE_MAX, 0};
    std::vector<std::pair<std::size_t, std::size_t>> receive(program_.slots.size(), kNone);
    const auto wrote = [&](SlotId id) {
      if (id >= 0 && to_size(id) < receive.size()) receive[to_size(id)] = kNone;
    };
    for (std::size_t i = 0; i < program_.instructions.size(); ++i) {
      const Instruction& instruction = program_.instructions[i];
      if (const auto* launch = std::get_if<Launch>(&instruction)) {
        for (std::size_t k = 0; k < launch->ops.size(); ++k) {
          const CommOp& op = launch->ops[k];
          if (op.direction == CommOp::Direction::kRecv && op.slot >= 0 &&
              to_size(op.slot) < receive.size()) {
            receive[to_size(op.slot)] = {i, k};
          }
        }
      } else if (const auto* load = std::get_if<Load>(&instruction)) {
        wrote(load->slot);
      } else if (const auto* attention = std::get_if<AttnForward>(&instruction)) {
        for (const AttnRow& row : attention->rows) wrote(row.out);
      } else if (const auto* keep = std::get_if<Keep>(&instruction)) {
        if (keep->slot < 0 || to_size(keep->slot) >= receive.size()) continue;
        const auto [launch_at, op] = receive[to_size(keep->slot)];
        if (launch_at == SIZE_MAX) continue;  // refused when the Keep is lowered
        const KeptValue key{SlotKind::kKV, keep->block, keep->head_block};
        const auto it = std::lower_bound(program_.kept.begin(), program_.kept.end(), key);
        if (it != program_.kept.end() && *it == key) {
          kept_receives_[{launch_at, op}] = kept_offsets_[to_size(it - program_.kept.begin())];
        }
      }
    }
  }
  std::int32_t tokens(SlotId id) const {
    slot(id);
    const std::int32_t t = tokens_[to_size(id)];
    if (t < 0) throw Error("slot " + std::to_string(id) + " holds no value");
    return t;
  }
  void expect_kind(SlotId id, SlotKind kind) const {
    if (slot(id).kind != kind) {
      throw Error("slot " + std::to_string(id) + " is a " + std::string(to_string(slot(id).kind)) +
                  " slot, not " + std::string(to_string(kind)));
    }
  }
  // An output of `t` tokens can go to `id`: it fits, and adding to (merging into) what the slot
  // holds requires a value of the same size.
  void expect_output_fits(SlotId id, std::int32_t t, bool accumulate) const {
    if (accumulate && tokens(id) != t) {
      throw Error("adding a value of " + std::to_string(t) + " tokens into slot " +
                  std::to_string(id) + ", which holds " + std::to_string(tokens(id)));
    }
    if (t > slot(id).tokens) {
      throw Error("slot " + std::to_string(id) + " is too small for " + std::to_string(t) +
                  " tokens");
    }
  }
  const BlockInfo& block(BlockId id) const {
    const auto& blocks = program_.blocks;
    const auto it =
        std::lower_bound(blocks.begin(), blocks.end(), id,
                         [](const BlockInfo& b, BlockId wanted) { return b.id < wanted; });
    if (it == blocks.end() || it->id != id) {
      throw Error("block " + std::to_string(id) + " is not in the Program's block list");
    }
    return *it;
  }
  std::int64_t local_token(BlockId id) const {
    const auto it = std::lower_bound(
        block_offsets_.begin(), block_offsets_.end(), id,
        [](const std::pair<BlockId, std::int64_t>& e, BlockId wanted) { return e.first < wanted; });
    if (it == block_offsets_.end() || it->first != id) {
      throw Error("block " + std::to_string(id) + " is not owned by this device");
    }
    return it->second;
  }
  std::int64_t mask_row_start(MaskId mask, std::int32_t q_tokens, std::int32_t kv_tokens) const {
    if (mask == kFullTile) return -1;
    if (mask < 0 || to_size(mask) >= program_.masks.size()) {
      throw Error("mask " + std::to_string(mask) + " does not exist");
    }
    const TileMask& tile = program_.masks[to_size(mask)];
    if (tile.q_tokens != q_tokens || tile.kv_tokens != kv_tokens) {
      throw Error("mask " + std::to_string(mask) + " is for a " + std::to_string(tile.q_tokens) +
                  " x " + std::to_string(tile.kv_tokens) + " tile, the values are " +
                  std::to_string(q_tokens) + " x " + std::to_string(kv_tokens));
    }
    return mask_start_[to_size(mask)];
  }

  LoweredCall lower(const Load& load) {
    const BlockInfo& b = block(load.block);
    const Slot& s = slot(load.slot);
    if (b.tokens > s.tokens) {
      throw Error("block " + std::to_string(b.id) + " has " + std::to_string(b.tokens) +
                  " tokens, slot " + std::to_string(load.slot) + " holds " +
                  std::to_string(s.tokens));
    }
    if (is_output(s.kind)) {
      throw Error("cannot load an output slot (" + std::string(to_string(s.kind)) + ")");
    }
    if (s.kind == SlotKind::kQGrad && program_.pass != Pass::kBackward) {
      throw Error("a kQGrad load in the forward pass");
    }
    tokens_[to_size(load.slot)] = b.tokens;
    kept_places_[to_size(load.slot)] = -1;
    return LoadCall{s.kind, offset(load.slot), local_token(load.block), b.tokens, load.head_block};
  }

  LoweredCall lower(const Store& store) {
    const BlockInfo& b = block(store.block);
    if (!is_output(store.kind) ||
        (store.kind == SlotKind::kOut) != (program_.pass == Pass::kForward)) {
      throw Error("a " + std::string(to_string(store.kind)) + " store in the " +
                  std::string(to_string(program_.pass)) + " pass");
    }
    const std::int64_t token = local_token(store.block);
    if (store.slot == kNoSlot) {
      // The value of no contribution is what the pass initialised the outputs to.
      return NoCall{};
    }
    expect_kind(store.slot, store.kind);
    if (tokens(store.slot) != b.tokens) {
      throw Error("slot " + std::to_string(store.slot) + " holds " +
                  std::to_string(tokens(store.slot)) + " tokens, block " + std::to_string(b.id) +
                  " has " + std::to_string(b.tokens));
    }
    return StoreCall{store.kind, offset(store.slot), token, b.tokens, store.head_block};
  }

  LoweredCall lower(const Launch& launch) {
    LaunchCall call;
    call.id = launch.id;
    for (std::size_t k = 0; k < launch.ops.size(); ++k) {
      const CommOp& op = launch.ops[k];
      const Slot& s = slot(op.slot);
      const std::int64_t per_token = value_bytes(header_, s.kind, 1);
      TransferCall transfer;
      transfer.send = op.direction == CommOp::Direction::kSend;
      transfer.peer = op.peer;
      transfer.offset = value_offset(op.slot, &transfer.buffer);
      transfer.bytes = op.bytes;
      if (transfer.send) {
        if (op.bytes != per_token * tokens(op.slot)) {
          throw Error("send of slot " + std::to_string(op.slot) + " to device " +
                      std::to_string(op.peer) + " says " + std::to_string(op.bytes) +
                      " bytes, its value has " + std::to_string(per_token * tokens(op.slot)));
        }
      } else {
        if (op.bytes % per_token != 0 || op.bytes / per_token > s.tokens) {
          throw Error("receive of " + std::to_string(op.bytes) + " bytes from device " +
                      std::to_string(op.peer) + " into slot " + std::to_string(op.slot) +
                      " is not a whole " + std::string(to_string(s.kind)) + " value of at most " +
                      std::to_string(s.tokens) + " tokens");
        }
        tokens_[to_size(op.slot)] = static_cast<std::int32_t>(op.bytes / per_token);
        const auto kept = kept_receives_.find({instruction_, k});
        const bool keeps = kept != kept_receives_.end();
        transfer.buffer = keeps ? BufferKind::kKept : BufferKind::kArena;
        kept_places_[to_size(op.slot)] = keeps ? kept->second : -1;
        if (keeps) transfer.offset = kept->second;
      }
      if (narrows_partials(header_) && is_output(s.kind)) {
        const std::int64_t elements = partial_elements(header_, s.kind, tokens(op.slot));
        const WireCall convert{transfer.send, transfer.offset, wire_offset(op.slot), elements,
                               op.bytes - elements * bytes_of(header_.partial_dtype)};
        if (converts_[instruction_][k]) {
          (transfer.send ? call.narrow : call.widen).push_back(convert);
        }
        transfer.offset = convert.wire_offset;
      }
      call.transfers.push_back(transfer);
    }
    // The conversions as rows of the wire table, so that a device can run them as one launch.
    const auto table = [&](const std::vector<WireCall>& converts) {
      const auto first = static_cast<std::int32_t>(out_.wire_rows.size() / kWireFields);
      for (const WireCall& w : converts) {
        std::array<std::int64_t, kWireFields> row{};
        row[kWireSlot] = w.slot_offset;
        row[kWireOffset] = w.wire_offset;
        row[kWireElements] = w.elements;
        row[kWireTailBytes] = w.tail_bytes;
        out_.wire_rows.insert(out_.wire_rows.end(), row.begin(), row.end());
      }
      return first;
    };
    call.narrow_row = table(call.narrow);
    call.widen_row = table(call.widen);
    return call;
  }

  LoweredCall lower(const Wait& wait) { return WaitCall{wait.launch}; }

  // The group of `groups` writing `out`, made if new; throws if a later row would overwrite it
  // or read another input than its first row.
  struct Group {
    SlotId out = 0;
    SlotId input = 0;
    std::int64_t tokens = 0;
    bool accumulate = false;
    std::vector<std::int64_t> members;
  };
  static std::size_t group_for(std::vector<Group>& groups, SlotId out, SlotId input, std::int32_t t,
                               bool accumulate) {
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (groups[g].out != out) continue;
      if (!accumulate) {
        throw Error("a row overwrites slot " + std::to_string(out) +
                    ", which an earlier row of the same instruction wrote");
      }
      if (groups[g].input != input) {
        throw Error("rows writing slot " + std::to_string(out) + " read slots " +
                    std::to_string(groups[g].input) + " and " + std::to_string(input));
      }
      return g;
    }
    groups.push_back(Group{out, input, t, accumulate, {}});
    return groups.size() - 1;
  }
  void emit_groups(const std::vector<Group>& groups, std::vector<std::int64_t>& table,
                   std::int64_t first_entry) {
    AttentionTables& t = out_.tables;
    for (const Group& g : groups) {
      const auto begin = static_cast<std::int64_t>(t.members.size());
      for (const std::int64_t m : g.members) t.members.push_back(first_entry + m);
      BufferKind buffer{};
      std::array<std::int64_t, kGroupFields> row{};
      row[kGroupOut] = offset(g.out);
      row[kGroupTokens] = g.tokens;
      row[kGroupAccumulate] = g.accumulate ? 1 : 0;
      row[kGroupBegin] = begin;
      row[kGroupEnd] = static_cast<std::int64_t>(t.members.size());
      row[kGroupInput] = value_offset(g.input, &buffer);
      table.insert(table.end(), row.begin(), row.end());
    }
  }

  LoweredCall lower_attention(const std::vector<AttnRow>& rows) {
    const bool backward = program_.pass == Pass::kBackward;
    AttentionTables& t = out_.tables;
    const auto first_entry = static_cast<std::int64_t>(t.entry_count());
    const auto first_q_group = static_cast<std::int64_t>(t.q_groups.size()) / kGroupFields;
    const auto first_kv_group = static_cast<std::int64_t>(t.kv_groups.size()) / kGroupFields;
    std::vector<Group> q_groups;
    std::vector<Group> kv_groups;
    AttentionCall call;
    std::int64_t entry = 0;
    for (const AttnRow& row : rows) {
      expect_kind(row.q, backward ? SlotKind::kQGrad : SlotKind::kQ);
      expect_kind(row.out, backward ? SlotKind::kDQ : SlotKind::kOut);
      const std::int32_t q_tokens = tokens(row.q);
      expect_output_fits(row.out, q_tokens, row.accumulate);
      const std::size_t q_group = group_for(q_groups, row.out, row.q, q_tokens, row.accumulate);
      call.max_q_tokens = std::max(call.max_q_tokens, q_tokens);
      for (const AttnKv& kv : row.kv) {
        expect_kind(kv.kv, SlotKind::kKV);
        const std::int32_t kv_tokens = tokens(kv.kv);
        call.max_kv_tokens = std::max(call.max_kv_tokens, kv_tokens);
        std::int64_t kv_group = -1;
        if (backward) {
          expect_kind(kv.dkv, SlotKind::kDKV);
          expect_output_fits(kv.dkv, kv_tokens, kv.dkv_accumulate);
          const std::size_t g = group_for(kv_groups, kv.dkv, kv.kv, kv_tokens, kv.dkv_accumulate);
          kv_groups[g].members.push_back(entry);
          kv_group = first_kv_group + static_cast<std::int64_t>(g);
          tokens_[to_size(kv.dkv)] = kv_tokens;
        }
        BufferKind kv_buffer{};
        std::array<std::int64_t, kEntryFields> e{};
        e[kEntryQ] = offset(row.q);
        e[kEntryKv] = value_offset(kv.kv, &kv_buffer);
        e[kEntryQTokens] = q_tokens;
        e[kEntryKvTokens] = kv_tokens;
        e[kEntryMask] = mask_row_start(kv.mask, q_tokens, kv_tokens);
        e[kEntryQGroup] = first_q_group + static_cast<std::int64_t>(q_group);
        e[kEntryKvGroup] = kv_group;
        e[kEntryKvBuffer] = static_cast<std::int64_t>(kv_buffer);
        t.entries.insert(t.entries.end(), e.begin(), e.end());
        q_groups[q_group].members.push_back(entry);
        ++entry;
      }
      tokens_[to_size(row.out)] = q_tokens;
    }
    // Outputs are written last: a row's output is never another's kv input.
    for (const AttnRow& row : rows) {
      kept_places_[to_size(row.out)] = -1;
      for (const AttnKv& kv : row.kv) {
        if (backward) kept_places_[to_size(kv.dkv)] = -1;
      }
    }
    emit_groups(q_groups, t.q_groups, first_entry);
    emit_groups(kv_groups, t.kv_groups, first_entry);
    call.q_group_begin = static_cast<std::int32_t>(first_q_group);
    call.q_group_end = static_cast<std::int32_t>(t.q_groups.size() / kGroupFields);
    call.kv_group_begin = static_cast<std::int32_t>(first_kv_group);
    call.kv_group_end = static_cast<std::int32_t>(t.kv_groups.size() / kGroupFields);
    return call;
  }

  LoweredCall lower(const AttnForward& attention) {
    if (program_.pass != Pass::kForward) throw Error("a forward attention in the backward pass");
    return lower_attention(attention.rows);
  }
  LoweredCall lower(const AttnBackward& attention) {
    if (program_.pass != Pass::kBackward) throw Error("a backward attention in the forward pass");
    return lower_attention(attention.rows);
  }

  LoweredCall lower(const Merge& merge) {
    expect_kind(merge.dst, SlotKind::kOut);
    expect_kind(merge.src, SlotKind::kOut);
    const std::int32_t t = tokens(merge.dst);
    if (tokens(merge.src) != t) {
      throw Error("merging a value of " + std::to_string(tokens(merge.src)) +
                  " tokens into one of " + std::to_string(t));
    }
    return MergeCall{offset(merge.dst), offset(merge.src), t};
  }

  LoweredCall lower(const Sum& sum) {
    const SlotKind kind = slot(sum.dst).kind;
    if (kind != SlotKind::kDQ && kind != SlotKind::kDKV) {
      throw Error("a sum into a " + std::string(to_string(kind)) + " slot");
    }
    expect_kind(sum.src, kind);
    const std::int32_t t = tokens(sum.dst);
    if (tokens(sum.src) != t) {
      throw Error("adding a value of " + std::to_string(tokens(sum.src)) + " tokens to one of " +
                  std::to_string(t));
    }
    return SumCall{offset(sum.dst), offset(sum.src),
                   slot_bytes(header_, kind, t) / static_cast<std::int64_t>(sizeof(float))};
  }

  std::int64_t kept_offset(BlockId block, std::int32_t head_block) const {
    const KeptValue key{SlotKind::kKV, block, head_block};
    const auto it = std::lower_bound(program_.kept.begin(), program_.kept.end(), key);
    if (it == program_.kept.end() || *it != key) {
      throw Error("kv(block " + std::to_string(block) + ", head " + std::to_string(head_block) +
                  ") is not a kept value");
    }
    return kept_offsets_[to_size(it - program_.kept.begin())];
  }

  LoweredCall lower(const Keep& keep) {
    if (program_.pass != Pass::kForward) throw Error("a keep in the backward pass");
    expect_kind(keep.slot, SlotKind::kKV);
    const std::int32_t t = block(keep.block).tokens;
    if (tokens(keep.slot) != t) {
      throw Error("slot " + std::to_string(keep.slot) + " holds " +
                  std::to_string(tokens(keep.slot)) + " tokens, block " +
                  std::to_string(keep.block) + " has " + std::to_string(t));
    }
    if (kept_places_[to_size(keep.slot)] != kept_offset(keep.block, keep.head_block)) {
      throw Error("slot " + std::to_string(keep.slot) + " holds no value received for kv(block " +
                  std::to_string(keep.block) + ", head " + std::to_string(keep.head_block) +
                  ") since its last write");
    }
    return NoCall{};  // received into the kept tensor already
  }

  LoweredCall lower(const Restore& restore) {
    if (program_.pass != Pass::kBackward) throw Error("a restore in the forward pass");
    expect_kind(restore.slot, SlotKind::kKV);
    const std::int32_t t = block(restore.block).tokens;
    if (t > slot(restore.slot).tokens) {
      throw Error("slot " + std::to_string(restore.slot) + " is too small for " +
                  std::to_string(t) + " tokens");
    }
    tokens_[to_size(restore.slot)] = t;
    kept_places_[to_size(restore.slot)] = kept_offset(restore.block, restore.head_block);
    return NoCall{};  // read in the kept tensor while the slot holds it
  }

  // The copy spans (CopySpan) and their runs: a span continues over Frees and no-op Stores while
  // the next copy is of its stage and writes what the span has not written yet: a Load another
  // slot (a slot freed and loaded again within a stage would be written twice), a Store another
  // output, block and head block.
  void group_copies() {
    out_.span_starting.assign(out_.calls.size(), -1);
    struct Copy {
      bool store;
      SlotKind kind;
      std::int64_t slot_offset, token;
      std::int32_t tokens, head_block;
    };
    std::vector<Copy> copies;  // of the open span
    std::int32_t begin = -1, end = -1;
    const auto close = [&] {
      if (copies.empty()) return;
      CopySpan span{begin, end, static_cast<std::int32_t>(out_.copy_runs.size()), 0};
      for (const Copy& first : copies) {
        const auto same = [&](const Copy& c) {
          return c.store == first.store && c.kind == first.kind;
        };
        const bool seen = std::any_of(
            out_.copy_runs.begin() + span.run_begin, out_.copy_runs.end(),
            [&](const CopyRun& r) { return r.store == first.store && r.kind == first.kind; });
        if (seen) continue;
        CopyRun run;
        run.store = first.store;
        run.kind = first.kind;
        run.row_begin = static_cast<std::int32_t>(out_.copy_rows.size() / kCopyFields);
        for (const Copy& c : copies) {
          if (!same(c)) continue;
          std::array<std::int64_t, kCopyFields> row{};
          row[kCopySlot] = c.slot_offset;
          row[kCopyToken] = c.token;
          row[kCopyTokens] = c.tokens;
          row[kCopyHeadBlock] = c.head_block;
          out_.copy_rows.insert(out_.copy_rows.end(), row.begin(), row.end());
          run.max_tokens = std::max(run.max_tokens, c.tokens);
        }
        run.row_end = static_cast<std::int32_t>(out_.copy_rows.size() / kCopyFields);
        out_.copy_runs.push_back(run);
      }
      span.run_end = static_cast<std::int32_t>(out_.copy_runs.size());
      out_.span_starting[to_size(begin)] = static_cast<std::int32_t>(out_.copy_spans.size());
      out_.copy_spans.push_back(span);
      copies.clear();
    };
    for (std::size_t i = 0; i < out_.calls.size(); ++i) {
      const LoweredCall& call = out_.calls[i];
      const auto* load = std::get_if<LoadCall>(&call);
      const auto* store = std::get_if<StoreCall>(&call);
      if (load == nullptr && store == nullptr) {
        if (!std::holds_alternative<NoCall>(call)) close();
        continue;
      }
      const Copy copy = load ? Copy{false,       load->kind,   load->slot_offset,
                                    load->token, load->tokens, load->head_block}
                             : Copy{true,         store->kind,   store->slot_offset,
                                    store->token, store->tokens, store->head_block};
      const bool joins =
          !copies.empty() &&
          program_.instruction_stage[to_size(begin)] == program_.instruction_stage[i] &&
          std::none_of(copies.begin(), copies.end(), [&](const Copy& c) {
            return copy.store ? c.store && c.kind == copy.kind && c.token == copy.token &&
                                    c.head_block == copy.head_block
                              : !c.store && c.slot_offset == copy.slot_offset;
          });
      if (!joins) {
        close();
        begin = static_cast<std::int32_t>(i);
      }
      copies.push_back(copy);
      end = static_cast<std::int32_t>(i + 1);
    }
    close();
  }

  // The memory runs (MemoryRun): a run continues over Frees while the next instruction is of its
  // opcode and stage and independent of the run's (it neither reads nor writes what the run
  // writes, nor writes what the run reads).
  void group_memory_work() {
    out_.memory_run_starting.assign(out_.calls.size(), -1);
    MemoryRun* run = nullptr;
    std::vector<std::int64_t> written, read;  // by the open run
    for (std::size_t i = 0; i < out_.calls.size(); ++i) {
      const LoweredCall& call = out_.calls[i];
      MemoryRun::Kind kind{};
      std::int64_t dst = 0, src = 0, count = 0;
      if (const auto* merge = std::get_if<MergeCall>(&call)) {
        kind = MemoryRun::Kind::kMerge;
        dst = merge->dst, src = merge->src, count = merge->tokens;
      } else if (const auto* sum = std::get_if<SumCall>(&call)) {
        kind = MemoryRun::Kind::kSum;
        dst = sum->dst, src = sum->src, count = sum->elements;
      } else {
        if (!std::holds_alternative<NoCall>(call)) run = nullptr;
        continue;
      }
      const auto holds = [](const std::vector<std::int64_t>& v, std::int64_t x) {
        return std::find(v.begin(), v.end(), x) != v.end();
      };
      const bool joins =
          run != nullptr && run->kind == kind &&
          program_.instruction_stage[to_size(run->begin)] == program_.instruction_stage[i] &&
          !holds(written, dst) && !holds(read, dst) && !holds(written, src);
      if (!joins) {
        out_.memory_run_starting[i] = static_cast<std::int32_t>(out_.memory_runs.size());
        MemoryRun next;
        next.kind = kind;
        next.begin = static_cast<std::int32_t>(i);
        next.row_begin = next.row_end =
            static_cast<std::int32_t>(out_.memory_rows.size() / kMemoryFields);
        out_.memory_runs.push_back(next);
        run = &out_.memory_runs.back();
        written.clear();
        read.clear();
      }
      std::array<std::int64_t, kMemoryFields> row{};
      row[kMemoryDst] = dst;
      row[kMemorySrc] = src;
      row[kMemoryCount] = count;
      out_.memory_rows.insert(out_.memory_rows.end(), row.begin(), row.end());
      written.push_back(dst);
      read.push_back(src);
      run->end = static_cast<std::int32_t>(i + 1);
      ++run->row_end;
      run->max_count = std::max(run->max_count, count);
    }
  }

  LoweredCall lower(const Free& free) {
    for (const SlotId id : free.slots) {
      slot(id);
      tokens_[to_size(id)] = -1;
      kept_places_[to_size(id)] = -1;
    }
    return NoCall{};
  }

  const PlanHeader& header_;
  const Program& program_;
  std::vector<std::int32_t> tokens_;
  std::vector<std::int64_t> kept_places_;  // per slot: its value's place in the kept tensor, or -1
  // Receives (instruction, op) of kept values: their place in the kept tensor.
  std::map<std::pair<std::size_t, std::size_t>, std::int64_t> kept_receives_;
  std::vector<std::int64_t> wire_offsets_;   // per slot, -1 until a partial travels through it
  std::vector<std::vector<bool>> converts_;  // partial_conversions of the Program
  std::size_t instruction_ = 0;              // the instruction being lowered
  std::vector<std::pair<BlockId, std::int64_t>> block_offsets_;
  std::vector<std::int32_t> mask_start_;
  std::vector<std::int64_t> kept_offsets_;  // per Program::kept value
  LoweredPass out_;
};

}  // namespace

LoweredPass lower_pass(const PlanHeader& header, const Program& program,
                       const LocalLayout& layout) {
  return Lowerer(header, program, layout).run();
}

const std::vector<std::int64_t>& lowered_rows(const LoweredPass& pass, LoweredTable table) {
  switch (table) {
    case LoweredTable::kEntries:
      return pass.tables.entries;
    case LoweredTable::kQGroups:
      return pass.tables.q_groups;
    case LoweredTable::kKvGroups:
      return pass.tables.kv_groups;
    case LoweredTable::kCopyRows:
      return pass.copy_rows;
    case LoweredTable::kWireRows:
      return pass.wire_rows;
    case LoweredTable::kMemoryRows:
      break;
  }
  return pass.memory_rows;
}

}  // namespace dcp::runtime

// SPDX-License-Identifier: Apache-2.0
// Compiles a pass schedule into per-device Programs: instructions over virtual registers first,
// then frees at stage ends, then slots assigned by lifetime.
#include "dcp/planner/compile/compiler.h"

#include <algorithm>
#include <compare>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

#include "dcp/core/error.h"

#include "dcp/planner/schedule/value_map.h"

namespace dcp {
namespace {

// The mask of one tile relative to the tile (see TileMask).
TileMask make_tile_mask(const Workload& workload, const Tile& tile) {
  const BlockLayout& blocks = workload.blocks();
  const TokenBlock& q = blocks.block(blocks.block_id(tile.seq, tile.q_block));
  const TokenBlock& kv = blocks.block(blocks.block_id(tile.seq, tile.kv_block));
  const SequenceMask& mask = workload.mask(tile.seq);
  TileMask result;
  result.q_tokens = static_cast<std::int32_t>(q.tokens);
  result.kv_tokens = static_cast<std::int32_t>(kv.tokens);
  result.row_offsets.reserve(static_cast<std::size_t>(q.tokens) + 1);
  result.row_offsets.push_back(0);
  // Segment by segment: a tile's rows lie in a few of them (one, for the built-in masks).
  const TokenCount rows_end = q.begin + q.tokens;
  const TokenCount kv_end = kv.begin + kv.tokens;
  for (std::size_t s = mask.segment_of(q.begin); s < mask.segments().size(); ++s) {
    const MaskSegment& segment = mask.segments()[s];
    if (segment.row_begin >= rows_end) break;
    const std::span<const AffineInterval> intervals = mask.intervals(segment);
    for (TokenCount r = std::max(segment.row_begin, q.begin);
         r < std::min(segment.row_end, rows_end); ++r) {
      for (const AffineInterval& interval : intervals) {
        const TokenCount begin = std::max(interval.begin_at(r), kv.begin);
        const TokenCount end = std::min(interval.end_at(r), kv_end);
        if (begin >= end) continue;
        result.intervals.push_back(static_cast<std::int32_t>(begin - kv.begin));
        result.intervals.push_back(static_cast<std::int32_t>(end - kv.begin));
      }
      result.row_offsets.push_back(static_cast<std::int32_t>(result.intervals.size() / 2));
    }
  }
  return result;
}

// What every device's compilation shares.
struct PassContext {
  const Workload& workload;
  const Placement& placement;
  const PlanHeader& header;
  const PassSchedule& schedule;
  std::vector<std::vector<WorkUnitId>> device_units;           // by (stage, q value, kv value)
  std::vector<std::vector<const Transfer*>> device_transfers;  // src or dst, schedule order
  // Each masked tile's mask as an index into distinct_masks, built on first use (-1 before):
  // equal masks (a causal mask's diagonal tiles, a window's) are one entry, found once a pass.
  std::vector<std::int32_t> tile_masks;
  std::vector<TileMask> distinct_masks;
  std::unordered_map<std::uint64_t, std::vector<std::int32_t>> distinct_by_hash;
  std::vector<std::int32_t> q_tiles, kv_tiles;  // per block
  std::vector<PairCount> q_pairs, kv_pairs;     // per block, one head
  std::vector<std::int32_t> heads_of_kv_block;  // q head blocks per kv head block

  const KeptKv* kept;         // may be null
  std::int32_t launches = 0;  // launch_count(schedule)

  PassContext(const Workload& w, const Placement& p, const PlanHeader& h, const PassSchedule& s,
              const KeptKv* k)
      : workload(w), placement(p), header(h), schedule(s), kept(k), launches(launch_count(s)) {
    const auto devices = static_cast<std::size_t>(p.cluster.devices());
    device_units.resize(devices);
    for (WorkUnitId u = 0; u < w.work_unit_count(); ++u) {
      device_units[static_cast<std::size_t>(p.work_unit_device[static_cast<std::size_t>(u)])]
          .push_back(u);
    }
    // Each device's units by (stage, q value, kv value), then id: the keys once per unit, packed
    // into two words (a pass's q values share one kind, and so do its kv values): stage 16 bits,
    // q block 32, q head block 16; kv block 32, kv head block 32.
    struct UnitOrder {
      std::uint64_t high, low;
      WorkUnitId unit;
      auto operator<=>(const UnitOrder&) const = default;
    };
    for (const std::int32_t stage : s.unit_stage) {
      if (stage < 0 || stage > 0xFFFF) {
        throw Error("compile: stage " + std::to_string(stage) + " is outside 0..65535");
      }
    }
    if (w.heads().count() > 0xFFFF) {
      throw Error("compile: " + std::to_string(w.heads().count()) + " head blocks (at most 65535)");
    }
    std::vector<UnitOrder> order;
    for (auto& units : device_units) {
      order.clear();
      order.reserve(units.size());
      for (const WorkUnitId u : units) {
        const WorkUnit unit = w.work_unit(u);
        const ValueKey q = query_value(w, s.pass, unit);
        const ValueKey kv = key_value(w, unit);
        const auto word = [](auto x) { return static_cast<std::uint64_t>(x); };
        order.push_back({word(s.unit_stage[static_cast<std::size_t>(u)]) << 48 |
                             word(static_cast<std::uint32_t>(q.block)) << 16 | word(q.head_block),
                         word(static_cast<std::uint32_t>(kv.block)) << 32 |
                             word(static_cast<std::uint32_t>(kv.head_block)),
                         u});
      }
      std::sort(order.begin(), order.end());
      for (std::size_t i = 0; i < units.size(); ++i) units[i] = order[i].unit;
    }
    device_transfers.resize(devices);
    for (const Transfer& t : s.transfers) {
      device_transfers[static_cast<std::size_t>(t.src)].push_back(&t);
      device_transfers[static_cast<std::size_t>(t.dst)].push_back(&t);
    }
    const auto by_launch = [](const Transfer* a, const Transfer* b) {
      return a->launch < b->launch;
    };
    for (auto& list : device_transfers) {  // in launch order already when s.transfers is sorted
      if (!std::is_sorted(list.begin(), list.end(), by_launch)) {
        std::stable_sort(list.begin(), list.end(), by_launch);
      }
    }
    tile_masks.assign(static_cast<std::size_t>(w.tile_count()), -1);
    const auto blocks = static_cast<std::size_t>(w.blocks().block_count());
    q_tiles.assign(blocks, 0);
    kv_tiles.assign(blocks, 0);
    q_pairs.assign(blocks, 0);
    kv_pairs.assign(blocks, 0);
    for (const Tile& tile : w.tiles()) {
      const auto q = static_cast<std::size_t>(w.blocks().block_id(tile.seq, tile.q_block));
      const auto kv = static_cast<std::size_t>(w.blocks().block_id(tile.seq, tile.kv_block));
      ++q_tiles[q];
      q_pairs[q] += tile.pairs;
      ++kv_tiles[kv];
      kv_pairs[kv] += tile.pairs;
    }
    heads_of_kv_block.assign(static_cast<std::size_t>(w.heads().kv_count()), 0);
    for (HeadBlockIndex hb = 0; hb < w.heads().count(); ++hb) {
      ++heads_of_kv_block[static_cast<std::size_t>(w.heads().kv_block_of(hb))];
    }
  }

  // The index in distinct_masks of the tile's mask.
  std::int32_t tile_mask(TileId tile) {
    std::int32_t& index = tile_masks[static_cast<std::size_t>(tile)];
    if (index >= 0) return index;
    TileMask mask = make_tile_mask(workload, workload.tiles()[static_cast<std::size_t>(tile)]);
    std::vector<std::int32_t>& same_hash = distinct_by_hash[hash_value(mask)];
    for (const std::int32_t seen : same_hash) {
      if (distinct_masks[static_cast<std::size_t>(seen)] == mask) return index = seen;
    }
    index = static_cast<std::int32_t>(distinct_masks.size());
    distinct_masks.push_back(std::move(mask));
    same_hash.push_back(index);
    return index;
  }
};

using VReg = std::int32_t;

class DeviceCompiler {
 public:
  DeviceCompiler(PassContext& context, DeviceId device) : c_(context), device_(device) {}

  Program compile() {
    const Pass pass = c_.schedule.pass;
    const std::int32_t stages = c_.schedule.stages;
    program_.device = device_;
    program_.pass = pass;
    program_.stages = stages;
    referenced_.assign(static_cast<std::size_t>(c_.workload.blocks().block_count()), false);
    for (BlockId b = 0; b < c_.workload.blocks().block_count(); ++b) {
      if (owner(b) == device_) program_.owned.push_back(b);
    }
    if (c_.kept != nullptr) {
      program_.kept = c_.kept->per_device[static_cast<std::size_t>(device_)];
      for (const KeptValue& value : program_.kept) {
        referenced_[static_cast<std::size_t>(value.block)] = true;
      }
    }
    add_expected_outputs();
    emit_loads();
    const std::int32_t launches = c_.launches;
    launch_ids_.assign(static_cast<std::size_t>(launches), -1);
    arrived_.resize(static_cast<std::size_t>(launches));
    in_flight_.resize(static_cast<std::size_t>(launches));
    std::size_t next_unit = 0;
    for (std::int32_t s = 0; s < stages; ++s) {
      stage_ = s;
      if (s > 0) {
        emit_wait(s - 1);
        emit_merges(s - 1);  // before the launch, so a partial passed on includes what came in
      }
      emit_launch(s);
      emit_restores(s);
      emit_attention(s, next_unit);
      stage_ends_.push_back(code_.size());
    }
    stage_ = stages;
    if (stages > 0) {
      emit_wait(stages - 1);
      emit_merges(stages - 1);
    }
    // The epilogue: the last partials, and the merges of partials reduced inside a node.
    for (std::int32_t launch = stages; launch < launches; ++launch) {
      emit_launch(launch);
      emit_wait(launch);
      emit_merges(launch);
    }
    emit_stores();
    if (transfer_cursor_ != c_.device_transfers[static_cast<std::size_t>(device_)].size()) {
      throw Error("compile: device " + std::to_string(device_) +
                  " has transfers beyond the last launch");
    }
    if (!accumulator_.empty()) {
      const ValueKey key = accumulator_.min_key();
      throw Error("compile: device " + std::to_string(device_) + " keeps a partial " +
                  std::string(to_string(key.kind)) + " of block " + std::to_string(key.block) +
                  " that is never sent to its owner");
    }
    insert_frees_and_assign_slots();
    add_block_table();
    return std::move(program_);
  }

 private:
  DeviceId owner(BlockId block) const {
    return c_.placement.token_block_device[static_cast<std::size_t>(block)];
  }
  std::int32_t tokens(BlockId block) const {
    return static_cast<std::int32_t>(c_.workload.blocks().block(block).tokens);
  }

  VReg new_vreg(SlotKind kind, BlockId block) {
    vregs_.push_back({kind, tokens(block), static_cast<std::int64_t>(code_.size()), -1});
    referenced_[static_cast<std::size_t>(block)] = true;
    return static_cast<VReg>(vregs_.size() - 1);
  }
  VReg use(VReg v) {
    vregs_[static_cast<std::size_t>(v)].last_use = static_cast<std::int64_t>(code_.size());
    return v;
  }
  // Constructs the instruction in place (moving a whole variant in trips GCC 12's
  // maybe-uninitialized analysis at -O1).
  template <typename Op>
  void push(Op op) {
    code_.emplace_back(std::in_place_type<Op>, std::move(op));
    code_stage_.push_back(stage_);
  }

  void add_expected_outputs() {
    const Pass pass = c_.schedule.pass;
    const HeadBlocking& heads = c_.workload.heads();
    for (const BlockId b : program_.owned) {
      const auto i = static_cast<std::size_t>(b);
      const SlotKind q_kind = pass == Pass::kForward ? SlotKind::kOut : SlotKind::kDQ;
      for (HeadBlockIndex h = 0; h < heads.count(); ++h) {
        program_.outputs.push_back({q_kind, b, h, c_.q_tiles[i], c_.q_pairs[i]});
      }
      if (pass == Pass::kBackward) {
        for (std::int32_t g = 0; g < heads.kv_count(); ++g) {
          const std::int32_t n = c_.heads_of_kv_block[static_cast<std::size_t>(g)];
          program_.outputs.push_back(
              {SlotKind::kDKV, b, g, c_.kv_tiles[i] * n, c_.kv_pairs[i] * n});
        }
      }
    }
  }

  void emit_loads() {
    std::vector<ValueKey> needed;  // each once: `seen` drops the repeats of the units' inputs
    ValueMap seen;
    const Pass pass = c_.schedule.pass;
    for (const WorkUnitId w : c_.device_units[static_cast<std::size_t>(device_)]) {
      const WorkUnit unit = c_.workload.work_unit(w);
      for (const ValueKey& key :
           {query_value(c_.workload, pass, unit), key_value(c_.workload, unit)}) {
        if (owner(key.block) != device_ || seen.find(key) != nullptr) continue;
        seen.set(key, 0);
        needed.push_back(key);
      }
    }
    for (const Transfer* t : c_.device_transfers[static_cast<std::size_t>(device_)]) {
      if (t->src == device_ && !is_output(t->value.kind) && owner(t->value.block) == device_) {
        needed.push_back(t->value);
      }
    }
    std::sort(needed.begin(), needed.end());
    needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
    for (const ValueKey& key : needed) {
      const VReg v = new_vreg(key.kind, key.block);
      inputs_.set(key, v);
      push(Load{use(v), key.block, key.head_block});
    }
    if (pass == Pass::kBackward) {
      // Kept values are restored at the start of the first stage that reads them.
      for (const WorkUnitId w : c_.device_units[static_cast<std::size_t>(device_)]) {
        const ValueKey key = key_value(c_.workload, c_.workload.work_unit(w));
        if (!is_kept(key)) continue;
        const std::int32_t stage = c_.schedule.unit_stage[static_cast<std::size_t>(w)];
        const auto [it, added] = restore_stage_.emplace(key, stage);
        if (!added) it->second = std::min(it->second, stage);
      }
    }
  }

  bool is_kept(const ValueKey& key) const {
    return key.kind == SlotKind::kKV &&
           std::binary_search(program_.kept.begin(), program_.kept.end(),
                              KeptValue{SlotKind::kKV, key.block, key.head_block});
  }

  void emit_restores(std::int32_t stage) {
    for (const auto& [key, first] : restore_stage_) {
      if (first != stage) continue;
      const VReg v = new_vreg(key.kind, key.block);
      inputs_.set(key, v);
      push(Restore{use(v), key.block, key.head_block});
    }
  }

  void emit_launch(std::int32_t launch) {
    Launch instruction;
    instruction.id = next_launch_id_;
    // The device's transfers are in launch order and launches are emitted in order: one cursor.
    const auto& transfers = c_.device_transfers[static_cast<std::size_t>(device_)];
    if (transfer_cursor_ < transfers.size() && transfers[transfer_cursor_]->launch < launch) {
      throw Error("compile: a transfer of launch " +
                  std::to_string(transfers[transfer_cursor_]->launch) + " is left after launch " +
                  std::to_string(launch) + " was emitted");
    }
    for (; transfer_cursor_ < transfers.size() && transfers[transfer_cursor_]->launch == launch;
         ++transfer_cursor_) {
      const Transfer* t = transfers[transfer_cursor_];
      const std::int64_t bytes = value_bytes(c_.header, t->value.kind, tokens(t->value.block));
      if (t->src == device_) {
        VReg v;
        if (is_output(t->value.kind)) {
          const VReg* found = accumulator_.find(t->value);
          if (found == nullptr) throw Error("compile: partial sent before it exists");
          v = *found;
          accumulator_.erase(t->value);
        } else {
          const VReg* found = inputs_.find(t->value);
          if (found == nullptr) throw Error("compile: input sent before it arrives");
          v = *found;
        }
        in_flight_[static_cast<std::size_t>(launch)].push_back(v);
        instruction.ops.push_back({CommOp::Direction::kSend, t->dst, use(v), bytes});
      } else {
        if (c_.schedule.pass == Pass::kBackward && is_kept(t->value)) {
          throw Error("compile: device " + std::to_string(device_) + " receives kv of block " +
                      std::to_string(t->value.block) + " in the backward pass, but keeps it");
        }
        const VReg v = new_vreg(t->value.kind, t->value.block);
        in_flight_[static_cast<std::size_t>(launch)].push_back(v);
        if (is_output(t->value.kind)) {
          arrived_[static_cast<std::size_t>(launch)].push_back({t->value, v});
        } else {
          inputs_.set(t->value, v);
          if (c_.schedule.pass == Pass::kForward && is_kept(t->value)) {
            kept_arrivals_[launch].push_back({t->value, v});
          }
        }
        instruction.ops.push_back({CommOp::Direction::kRecv, t->src, use(v), bytes});
      }
    }
    if (instruction.ops.empty()) return;
    launch_ids_[static_cast<std::size_t>(launch)] = next_launch_id_++;
    push(std::move(instruction));
  }

  void emit_wait(std::int32_t launch) {
    const LaunchId id = launch_ids_[static_cast<std::size_t>(launch)];
    if (id < 0) return;
    // Nothing sent or received may be freed before the wait.
    for (const VReg v : in_flight_[static_cast<std::size_t>(launch)]) use(v);
    push(Wait{id});
    if (const auto it = kept_arrivals_.find(launch); it != kept_arrivals_.end()) {
      for (const auto& [key, v] : it->second) push(Keep{use(v), key.block, key.head_block});
    }
  }

  VReg input(const ValueKey& key) {
    const VReg* found = inputs_.find(key);
    if (found == nullptr) {
      throw Error("compile: device " + std::to_string(device_) + " computes with " +
                  std::string(to_string(key.kind)) + " of block " + std::to_string(key.block) +
                  " before it arrives");
    }
    return use(*found);
  }

  // The device's accumulator for `key`: (slot, accumulate) — a new one if there is none yet.
  std::pair<VReg, bool> accumulator(const ValueKey& key) {
    if (const VReg* found = accumulator_.find(key)) return {use(*found), true};
    const VReg v = new_vreg(key.kind, key.block);
    accumulator_.set(key, v);
    return {use(v), false};
  }

  void emit_attention(std::int32_t stage, std::size_t& next) {
    const auto& units = c_.device_units[static_cast<std::size_t>(device_)];
    const Pass pass = c_.schedule.pass;
    std::vector<AttnRow> rows;
    ValueKey row_key{};
    for (; next < units.size() &&
           c_.schedule.unit_stage[static_cast<std::size_t>(units[next])] == stage;
         ++next) {
      const WorkUnit unit = c_.workload.work_unit(units[next]);
      const ValueKey q = query_value(c_.workload, pass, unit);
      if (rows.empty() || q != row_key) {
        row_key = q;
        AttnRow row;
        row.q = input(q);
        const ValueKey out = output_values(c_.workload, pass, unit).front();
        std::tie(row.out, row.accumulate) = accumulator(out);
        rows.push_back(std::move(row));
      }
      AttnKv entry;
      entry.kv = input(key_value(c_.workload, unit));
      entry.mask = unit.kind == TileKind::kFull ? kFullTile : mask_of(unit.tile);
      if (pass == Pass::kBackward) {
        std::tie(entry.dkv, entry.dkv_accumulate) =
            accumulator(output_values(c_.workload, pass, unit).back());
      }
      rows.back().kv.push_back(entry);
    }
    if (rows.empty()) return;
    if (pass == Pass::kForward) {
      push(AttnForward{std::move(rows)});
    } else {
      push(AttnBackward{std::move(rows)});
    }
  }

  void emit_merges(std::int32_t launch) {
    for (const auto& [key, v] : arrived_[static_cast<std::size_t>(launch)]) {
      const VReg* found = accumulator_.find(key);
      if (found == nullptr) {
        accumulator_.set(key, v);
        continue;
      }
      const VReg held = *found;
      if (key.kind == SlotKind::kOut) {
        push(Merge{use(held), use(v)});
      } else {
        push(Sum{use(held), use(v)});
      }
    }
  }

  void emit_stores() {
    for (const ExpectedOutput& out : program_.outputs) {
      const ValueKey key{out.kind, out.block, out.head_block};
      SlotId slot = kNoSlot;
      if (const VReg* found = accumulator_.find(key)) {
        slot = use(*found);
        accumulator_.erase(key);
      }
      push(Store{slot, out.kind, out.block, out.head_block});
    }
  }

  // The Program's mask of the tile: each distinct mask once, in order of first use.
  MaskId mask_of(TileId tile) {
    const std::int32_t distinct = c_.tile_mask(tile);
    if (const auto it = program_mask_.find(distinct); it != program_mask_.end()) return it->second;
    const auto m = static_cast<MaskId>(program_.masks.size());
    program_.masks.push_back(c_.distinct_masks[static_cast<std::size_t>(distinct)]);
    return program_mask_[distinct] = m;
  }

  // Frees every value at the end of the stage of its last use, then maps virtual registers to
  // slots, reusing a freed slot of the same kind that holds the value (best fit).
  void insert_frees_and_assign_slots() {
    stage_ends_.push_back(code_.size());
    std::vector<std::vector<VReg>> frees(stage_ends_.size());
    for (std::size_t v = 0; v < vregs_.size(); ++v) {
      const std::int64_t last = vregs_[v].last_use;
      const auto end = std::lower_bound(stage_ends_.begin(), stage_ends_.end(),
                                        static_cast<std::size_t>(last) + 1);
      frees[static_cast<std::size_t>(end - stage_ends_.begin())].push_back(static_cast<VReg>(v));
    }
    // vregs_ are made in code order (def never decreases): one cursor finds those defined at i.
    std::size_t next_def = 0;
    std::vector<SlotId> slot_of(vregs_.size(), kNoSlot);
    std::multimap<std::pair<SlotKind, std::int32_t>, SlotId> free_slots;
    const auto allocate = [&](VReg v) {
      const auto& r = vregs_[static_cast<std::size_t>(v)];
      auto it = free_slots.lower_bound({r.kind, r.tokens});
      if (it != free_slots.end() && it->first.first == r.kind) {
        slot_of[static_cast<std::size_t>(v)] = it->second;
        free_slots.erase(it);
        return;
      }
      slot_of[static_cast<std::size_t>(v)] = static_cast<SlotId>(program_.slots.size());
      program_.slots.push_back({r.kind, r.tokens});
    };
    std::vector<Instruction> code;
    std::vector<std::int32_t> code_stage;
    code.reserve(code_.size() + stage_ends_.size());
    std::size_t end_index = 0;
    const auto flush_frees = [&](std::size_t position) {
      while (end_index < stage_ends_.size() && stage_ends_[end_index] == position) {
        auto& list = frees[end_index++];
        if (list.empty()) continue;
        Free free;
        for (const VReg v : list) {
          const SlotId slot = slot_of[static_cast<std::size_t>(v)];
          free.slots.push_back(slot);
          free_slots.emplace(std::pair{program_.slots[static_cast<std::size_t>(slot)].kind,
                                       program_.slots[static_cast<std::size_t>(slot)].tokens},
                             slot);
        }
        std::sort(free.slots.begin(), free.slots.end());
        code.push_back(std::move(free));
        code_stage.push_back(code_stage.empty() ? 0 : code_stage.back());
      }
    };
    for (std::size_t i = 0; i < code_.size(); ++i) {
      flush_frees(i);
      for (; next_def < vregs_.size() && static_cast<std::size_t>(vregs_[next_def].def) <= i;
           ++next_def) {
        allocate(static_cast<VReg>(next_def));
      }
      code.push_back(remap(std::move(code_[i]), slot_of));
      code_stage.push_back(code_stage_[i]);
    }
    flush_frees(code_.size());
    program_.instructions = std::move(code);
    program_.instruction_stage = std::move(code_stage);
  }

  static Instruction remap(Instruction instruction, const std::vector<SlotId>& slot_of) {
    const auto map = [&](SlotId& v) {
      if (v != kNoSlot) v = slot_of[static_cast<std::size_t>(v)];
    };
    std::visit(
        [&](auto& op) {
          using T = std::decay_t<decltype(op)>;
          if constexpr (std::is_same_v<T, Load> || std::is_same_v<T, Store> ||
                        std::is_same_v<T, Keep> || std::is_same_v<T, Restore>) {
            map(op.slot);
          } else if constexpr (std::is_same_v<T, Launch>) {
            for (CommOp& comm : op.ops) map(comm.slot);
          } else if constexpr (std::is_same_v<T, AttnForward> || std::is_same_v<T, AttnBackward>) {
            for (AttnRow& row : op.rows) {
              map(row.q);
              map(row.out);
              for (AttnKv& entry : row.kv) {
                map(entry.kv);
                map(entry.dkv);
              }
            }
          } else if constexpr (std::is_same_v<T, Merge> || std::is_same_v<T, Sum>) {
            map(op.dst);
            map(op.src);
          }
        },
        instruction);
    return instruction;
  }

  void add_block_table() {
    for (const BlockId b : program_.owned) referenced_[static_cast<std::size_t>(b)] = true;
    for (BlockId b = 0; b < c_.workload.blocks().block_count(); ++b) {
      if (!referenced_[static_cast<std::size_t>(b)]) continue;
      const TokenBlock& block = c_.workload.blocks().block(b);
      program_.blocks.push_back(
          {b, block.seq, static_cast<std::int32_t>(block.tokens), block.begin});
    }
  }

  struct VRegInfo {
    SlotKind kind;
    std::int32_t tokens;
    std::int64_t def;
    std::int64_t last_use;
  };

  PassContext& c_;
  DeviceId device_;
  Program program_;
  std::int32_t stage_ = 0;
  std::vector<VRegInfo> vregs_;
  std::vector<Instruction> code_;
  std::vector<std::int32_t> code_stage_;
  std::vector<std::size_t> stage_ends_;  // code_ positions where a stage's frees go
  ValueMap inputs_;
  ValueMap accumulator_;
  std::vector<LaunchId> launch_ids_;  // per launch number; -1 when this device had no ops
  LaunchId next_launch_id_ = 0;
  std::size_t transfer_cursor_ = 0;
  std::vector<std::vector<VReg>> in_flight_;  // sent and received values per launch number
  std::vector<std::vector<std::pair<ValueKey, VReg>>> arrived_;  // partials per launch number
  std::map<std::int32_t, std::vector<std::pair<ValueKey, VReg>>> kept_arrivals_;  // forward
  std::map<ValueKey, std::int32_t> restore_stage_;  // backward: kept value -> first stage read
  std::vector<bool> referenced_;                    // per block
  std::unordered_map<std::int32_t, MaskId> program_mask_;  // by index in distinct_masks
};

}  // namespace

std::vector<Program> compile_pass(const Workload& workload, const Placement& placement,
                                  const PlanHeader& header, const PassSchedule& schedule,
                                  const KeptKv* kept) {
  PassContext context(workload, placement, header, schedule, kept);
  std::vector<Program> programs;
  programs.reserve(static_cast<std::size_t>(placement.cluster.devices()));
  for (DeviceId d = 0; d < placement.cluster.devices(); ++d) {
    programs.push_back(DeviceCompiler(context, d).compile());
  }
  return programs;
}

}  // namespace dcp

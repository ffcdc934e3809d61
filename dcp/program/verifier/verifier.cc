// SPDX-License-Identifier: Apache-2.0
// The verifier's simulation: every device's Program of a pass executed together on symbolic values.
#include "dcp/program/verifier/verifier.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <variant>

#include "dcp/program/verifier/verifier_detail.h"
#include "dcp/program/verifier/verifier_values.h"

namespace dcp {
namespace verifier_detail {
namespace {

struct OpState {
  const CommOp* op = nullptr;
  std::int32_t launch = 0;  // index into DeviceState::launches (= launch id)
  bool done = false;
};

struct LaunchState {
  std::int64_t instruction = 0;
  std::int32_t first_op = 0;  // into DeviceState::ops
  std::int32_t op_count = 0;
  std::int32_t pending = 0;  // ops not yet matched
  bool active = false;
};

struct DeviceState {
  const Program* program = nullptr;
  const ProgramIndex* index = nullptr;
  std::size_t pc = 0;
  bool finished = false;
  std::vector<SlotState> slots;
  std::vector<LaunchState> launches;  // issued so far
  std::vector<OpState> ops;           // of the issued launches, in issue order
  std::size_t head = 0;               // the first launch not complete: the only active one
};

// The ops of one (from, to) pair: the n-th send matches the n-th receive.
struct Channel {
  ChannelTotals totals;             // over the whole pass
  std::vector<std::int32_t> sends;  // active sends of `from`, indices into its ops, in order
  std::vector<std::int32_t> recvs;  // active receives of `to`
};

enum class Step : std::uint8_t { kNext, kBlocked, kFailed };

class Simulation {
 public:
  Simulation(const Plan& plan, Pass pass, const PassIndex& index, PassSummary& summary)
      : header_(plan.header),
        pass_(pass),
        summary_(summary),
        units_(index.attention_rows),
        devices_(static_cast<std::int32_t>(plan.programs(pass).size())) {
    const std::vector<Program>& programs = plan.programs(pass);
    states_.resize(programs.size());
    for (std::size_t d = 0; d < programs.size(); ++d) {
      DeviceState& state = states_[d];
      state.program = &programs[d];
      state.index = &index.programs[d];
      state.slots.resize(programs[d].slots.size());
      state.ops.reserve(static_cast<std::size_t>(index.programs[d].comm_ops));
    }
    for (const auto& [key, totals] : index.channels) channels_[key].totals = totals;
  }

  std::optional<Violation> run() {
    for (;;) {
      bool progressed = false;
      bool unfinished = false;
      for (std::int32_t d = 0; d < devices_; ++d) {
        DeviceState& state = states_[static_cast<std::size_t>(d)];
        if (state.finished) continue;
        const std::size_t before = state.pc;
        if (run_device(d) == Step::kFailed) return violation_;
        progressed = progressed || state.pc != before;
        unfinished = unfinished || !state.finished;
      }
      if (!unfinished) break;
      if (!progressed) return stuck();
    }
    const std::int64_t computed = summary_.work_units;
    const std::int64_t expected = header_.work_units;
    if (computed != expected) {
      return make_violation(
          nullptr, -1, pass_, -1, computed < expected ? "work-missing" : "work-extra",
          cat("the pass computes ", computed, " distinct work units, the header has ", expected,
              computed < expected ? cat(": ", expected - computed, " missing") : std::string()));
    }
    return std::nullopt;
  }

 private:
  // Runs device d until it ends, blocks at a wait, or breaks a rule.
  Step run_device(std::int32_t d) {
    device_ = d;
    DeviceState& state = states_[static_cast<std::size_t>(d)];
    const std::vector<Instruction>& instructions = state.program->instructions;
    while (state.pc < instructions.size()) {
      const Step step =
          std::visit([&](const auto& op) { return execute(state, op); }, instructions[state.pc]);
      if (step != Step::kNext) return step;
      ++state.pc;
    }
    state.finished = true;
    return Step::kNext;
  }

  Step fail_at(std::int32_t device, std::int64_t instruction, std::string_view rule,
               std::string_view detail) {
    violation_ = make_violation(states_[static_cast<std::size_t>(device)].program, device, pass_,
                                instruction, rule, detail);
    return Step::kFailed;
  }
  Step fail(const DeviceState& state, std::string_view rule, std::string_view detail) {
    return fail_at(device_, static_cast<std::int64_t>(state.pc), rule, detail);
  }

  static bool live(const DeviceState& state, SlotId id) {
    return state.slots[static_cast<std::size_t>(id)].held == Held::kLive;
  }

  // The access checks. Reading needs a value that arrived; writing also needs no send in flight;
  // a new value needs an empty slot.
  Step readable(DeviceState& state, SlotId id, std::string_view role) {
    const SlotState& slot = state.slots[static_cast<std::size_t>(id)];
    if (slot.held == Held::kLive) return Step::kNext;
    return fail(state, slot.held == Held::kEmpty ? "slot-empty" : "use-before-arrival",
                cat(role, " ", describe(slot, id)));
  }
  Step writable(DeviceState& state, SlotId id, std::string_view role) {
    if (readable(state, id, role) == Step::kFailed) return Step::kFailed;
    const SlotState& slot = state.slots[static_cast<std::size_t>(id)];
    if (slot.sends == 0) return Step::kNext;
    return fail(state, "slot-in-flight", cat(role, " ", describe(slot, id)));
  }
  Step vacant(DeviceState& state, SlotId id, std::int32_t tokens, std::string_view role) {
    const SlotState& slot = state.slots[static_cast<std::size_t>(id)];
    if (slot.held != Held::kEmpty) {
      const std::string_view rule = slot.held == Held::kReceiving ? "use-before-arrival"
                                    : slot.sends > 0              ? "slot-in-flight"
                                                                  : "slot-live";
      return fail(state, rule,
                  cat(role, " ", describe(slot, id), "; a new value needs an empty slot"));
    }
    const std::int32_t capacity = state.program->slots[static_cast<std::size_t>(id)].tokens;
    if (capacity < tokens) {
      return fail(state, "slot-capacity",
                  cat(role, " slot ", id, " holds ", capacity, " tokens, the value has ", tokens));
    }
    return Step::kNext;
  }

  Step execute(DeviceState& state, const Load& load) {
    const BlockInfo* info = find_block(*state.program, load.block);  // owned, so in the table
    if (vacant(state, load.slot, info->tokens, "loaded") == Step::kFailed) return Step::kFailed;
    SlotState& slot = state.slots[static_cast<std::size_t>(load.slot)];
    slot.held = Held::kLive;
    slot.value.reset(state.program->slots[static_cast<std::size_t>(load.slot)].kind, load.block,
                     load.head_block, info->seq, info->tokens);
    return Step::kNext;
  }

  // A Keep reads the kv value it names; a Restore gives an empty slot that value.
  Step execute(DeviceState& state, const Keep& keep) {
    if (readable(state, keep.slot, "kept") == Step::kFailed) return Step::kFailed;
    const Value& value = state.slots[static_cast<std::size_t>(keep.slot)].value;
    if (value.kind != SlotKind::kKV || value.block != keep.block ||
        value.head_block != keep.head_block) {
      return fail(state, "value-mismatch",
                  cat("keeps kv(block ", keep.block, ", head ", keep.head_block, ") from slot ",
                      keep.slot, " holding ", describe(value)));
    }
    return Step::kNext;
  }

  Step execute(DeviceState& state, const Restore& restore) {
    const BlockInfo* info = find_block(*state.program, restore.block);  // kept, so in the table
    if (vacant(state, restore.slot, info->tokens, "restored") == Step::kFailed) {
      return Step::kFailed;
    }
    SlotState& slot = state.slots[static_cast<std::size_t>(restore.slot)];
    slot.held = Held::kLive;
    slot.value.reset(SlotKind::kKV, restore.block, restore.head_block, info->seq, info->tokens);
    return Step::kNext;
  }

  Step execute(DeviceState& state, const Store& store) {
    const std::int32_t index = state.index->find_output(store.kind, store.block, store.head_block);
    const ExpectedOutput& expected = state.program->outputs[static_cast<std::size_t>(index)];
    std::int64_t contributions = 0;
    std::int64_t pairs = 0;
    if (store.slot != kNoSlot) {
      if (readable(state, store.slot, "stored") == Step::kFailed) return Step::kFailed;
      const Value& value = state.slots[static_cast<std::size_t>(store.slot)].value;
      if (value.block != store.block || value.head_block != store.head_block) {
        return fail(
            state, "value-mismatch",
            cat("stores ", to_string(store.kind), "(block ", store.block, ", head ",
                store.head_block, ") from slot ", store.slot, " holding ", describe(value)));
      }
      contributions = static_cast<std::int64_t>(value.units.size());
      pairs = value.pairs;
    }
    if (contributions != expected.contributions || pairs != expected.pairs) {
      return fail(
          state, "output-incomplete",
          cat("stores ", to_string(store.kind), "(block ", store.block, ", head ", store.head_block,
              ") with ", contributions, " contributions and ", pairs, " pairs, expected ",
              expected.contributions, " contributions and ", expected.pairs, " pairs"));
    }
    ++summary_.outputs_stored;
    return Step::kNext;
  }

  Step execute(DeviceState& state, const Launch& launch) {
    LaunchState issued;
    issued.instruction = static_cast<std::int64_t>(state.pc);
    issued.first_op = static_cast<std::int32_t>(state.ops.size());
    issued.op_count = static_cast<std::int32_t>(launch.ops.size());
    issued.pending = issued.op_count;
    for (std::size_t k = 0; k < launch.ops.size(); ++k) {
      const CommOp& op = launch.ops[k];
      SlotState& slot = state.slots[static_cast<std::size_t>(op.slot)];
      const bool send = op.direction == CommOp::Direction::kSend;
      const auto role = [&] {
        return cat("op ", k, send ? " (send to device " : " (recv from device ", op.peer, "):");
      };
      if (send) {
        if (!live(state, op.slot)) return readable(state, op.slot, role());
        const std::int64_t bytes = value_bytes(header_, slot.value.kind, slot.value.tokens);
        if (op.bytes != bytes) {
          return fail(state, "send-bytes",
                      cat(role(), " sends ", op.bytes, " bytes of slot ", op.slot, " holding ",
                          describe(slot.value), " of ", bytes, " bytes"));
        }
        ++slot.sends;
        slot.send_launch = launch.id;
      } else {
        if (slot.held != Held::kEmpty) {
          return fail(state, "slot-live",
                      cat(role(), " ", describe(slot, op.slot), "; a receive needs an empty slot"));
        }
        slot.held = Held::kReceiving;
        slot.arrived = false;
        slot.receive_launch = launch.id;
      }
      state.ops.push_back({&op, launch.id, false});
    }
    state.launches.push_back(issued);
    worklist_.push_back(device_);
    return drain() ? Step::kNext : Step::kFailed;
  }

  // Advances the devices whose first incomplete launch may have completed, activating the next
  // launch of each: activation matches ops, which may complete launches elsewhere in turn.
  bool drain() {
    while (!worklist_.empty()) {
      const std::int32_t d = worklist_.back();
      worklist_.pop_back();
      DeviceState& state = states_[static_cast<std::size_t>(d)];
      while (state.head < state.launches.size()) {
        if (!state.launches[state.head].active) {
          state.launches[state.head].active = true;
          if (!activate(d, state.launches[state.head])) return false;
        }
        if (state.launches[state.head].pending > 0) break;
        ++state.head;
      }
    }
    return true;
  }

  bool activate(std::int32_t d, const LaunchState& launch) {
    DeviceState& state = states_[static_cast<std::size_t>(d)];
    for (std::int32_t k = launch.first_op; k < launch.first_op + launch.op_count; ++k) {
      const CommOp& op = *state.ops[static_cast<std::size_t>(k)].op;
      if (op.direction == CommOp::Direction::kSend) {
        Channel& channel = channels_.find(channel_key(d, op.peer, devices_))->second;
        channel.sends.push_back(k);
        const std::size_t n = channel.sends.size() - 1;
        if (channel.recvs.size() > n && !match(d, k, op.peer, channel.recvs[n])) return false;
      } else {
        Channel& channel = channels_.find(channel_key(op.peer, d, devices_))->second;
        channel.recvs.push_back(k);
        const std::size_t n = channel.recvs.size() - 1;
        if (channel.sends.size() > n && !match(op.peer, channel.sends[n], d, k)) return false;
      }
    }
    return true;
  }

  // The Launch instruction that issued op `op` of a device.
  static std::int64_t instruction_of(const DeviceState& state, std::int32_t op) {
    return state.launches[static_cast<std::size_t>(state.ops[static_cast<std::size_t>(op)].launch)]
        .instruction;
  }

  // Send op `send_op` of device `from` meets receive op `recv_op` of device `to`.
  bool match(std::int32_t from, std::int32_t send_op, std::int32_t to, std::int32_t recv_op) {
    DeviceState& sender = states_[static_cast<std::size_t>(from)];
    DeviceState& receiver = states_[static_cast<std::size_t>(to)];
    const CommOp& send = *sender.ops[static_cast<std::size_t>(send_op)].op;
    const CommOp& recv = *receiver.ops[static_cast<std::size_t>(recv_op)].op;
    const Value& value = sender.slots[static_cast<std::size_t>(send.slot)].value;
    SlotState& target = receiver.slots[static_cast<std::size_t>(recv.slot)];
    const Slot& slot = receiver.program->slots[static_cast<std::size_t>(recv.slot)];
    const std::int64_t instruction = instruction_of(receiver, recv_op);
    const auto what = [&] {
      return cat("receive from device ", from, " into slot ", recv.slot, " (", to_string(slot.kind),
                 ", ", slot.tokens, " tokens) of ", describe(value), " sent from its slot ",
                 send.slot);
    };
    if (send.bytes != recv.bytes) {
      fail_at(to, instruction, "send-recv-bytes",
              cat(what(), ": ", recv.bytes, " bytes received, ", send.bytes, " sent"));
      return false;
    }
    if (slot.kind != value.kind || slot.tokens < value.tokens) {
      fail_at(to, instruction, "send-recv-kind",
              cat(what(), ": the slot does not fit a ", to_string(value.kind), " value of ",
                  value.tokens, " tokens"));
      return false;
    }
    const BlockInfo* info = find_block(*receiver.program, value.block);
    if (info == nullptr || info->seq != value.seq || info->tokens != value.tokens) {
      fail_at(to, instruction, "block-table",
              cat(what(), ": block ", value.block, " (seq ", value.seq, ", ", value.tokens,
                  " tokens) is ", info == nullptr ? "missing from" : "different in",
                  " the receiver's block table"));
      return false;
    }
    if (is_output(value.kind) && header_.partial_routing == PartialRouting::kReduceInNode) {
      const std::int32_t node = header_.cluster.node_of(from);
      if (node != header_.cluster.node_of(to) &&
          !crossed_.insert(std::tuple(value.kind, value.block, value.head_block, node)).second) {
        fail_at(from, instruction_of(sender, send_op), "partial-recrossing",
                cat("sends ", describe(value), " to device ", to, " on node ",
                    header_.cluster.node_of(to), ", but a partial of that value already left node ",
                    node, "; partials made on one node are reduced there and cross once"));
        return false;
      }
    }
    target.value = value;
    target.arrived = true;
    ++summary_.messages;
    summary_.bytes_sent = add_saturating(summary_.bytes_sent, send.bytes);
    complete(from, send_op);
    complete(to, recv_op);
    return true;
  }

  void complete(std::int32_t d, std::int32_t op) {
    DeviceState& state = states_[static_cast<std::size_t>(d)];
    OpState& done = state.ops[static_cast<std::size_t>(op)];
    done.done = true;
    if (--state.launches[static_cast<std::size_t>(done.launch)].pending == 0) {
      worklist_.push_back(d);
    }
  }

  Step execute(DeviceState& state, const Wait& wait) {
    const auto launch = static_cast<std::size_t>(wait.launch);
    if (launch >= state.head) return Step::kBlocked;
    const LaunchState& done = state.launches[launch];
    for (std::int32_t k = done.first_op; k < done.first_op + done.op_count; ++k) {
      const CommOp& op = *state.ops[static_cast<std::size_t>(k)].op;
      SlotState& slot = state.slots[static_cast<std::size_t>(op.slot)];
      if (op.direction == CommOp::Direction::kSend) {
        --slot.sends;
      } else {
        slot.held = Held::kLive;
      }
    }
    return Step::kNext;
  }

  Step execute(DeviceState& state, const AttnForward& attention) {
    return attend(state, attention.rows, false);
  }
  Step execute(DeviceState& state, const AttnBackward& attention) {
    return attend(state, attention.rows, true);
  }

  // The attention instructions. Names for messages are built only once a rule is broken: this is
  // the loop over every work unit of the pass.
  Step attend(DeviceState& state, const std::vector<AttnRow>& rows, bool backward) {
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const AttnRow& row = rows[r];
      if (!live(state, row.q)) return readable(state, row.q, cat("row ", r, " q"));
      const Value& q = state.slots[static_cast<std::size_t>(row.q)].value;
      if (start_partial(state, row.out, row.accumulate, q, q.head_block, r, -1) == Step::kFailed) {
        return Step::kFailed;
      }
      Value& out = state.slots[static_cast<std::size_t>(row.out)].value;
      const std::int32_t kv_head_block = kv_head_block_of(header_, q.head_block);
      const std::int32_t group = units_.group(q.block, q.head_block);
      for (std::size_t e = 0; e < row.kv.size(); ++e) {
        const AttnKv& entry = row.kv[e];
        if (!live(state, entry.kv)) {
          return readable(state, entry.kv, cat("row ", r, " entry ", e, " kv"));
        }
        const Value& kv = state.slots[static_cast<std::size_t>(entry.kv)].value;
        const auto pair_name = [&] {
          return cat("row ", r, " entry ", e, ": ", describe(q), " against ", describe(kv));
        };
        if (kv.seq != q.seq) {
          return fail(state, "seq-mismatch",
                      cat(pair_name(), ": block ", q.block, " is in seq ", q.seq, ", block ",
                          kv.block, " in seq ", kv.seq));
        }
        if (kv.head_block != kv_head_block) {
          return fail(state, "head-mismatch",
                      cat(pair_name(), ": q head block ", q.head_block, " reads kv head block ",
                          kv_head_block));
        }
        std::int64_t pairs = static_cast<std::int64_t>(q.tokens) * kv.tokens;
        if (entry.mask != kFullTile) {
          const TileMask& mask = state.program->masks[static_cast<std::size_t>(entry.mask)];
          if (mask.q_tokens != q.tokens || mask.kv_tokens != kv.tokens) {
            return fail(state, "mask-shape",
                        cat(pair_name(), ": mask ", entry.mask, " is ", mask.q_tokens, " x ",
                            mask.kv_tokens, " tokens, the tile ", q.tokens, " x ", kv.tokens));
          }
          pairs = state.index->mask_pairs[static_cast<std::size_t>(entry.mask)];
        }
        if (backward && start_partial(state, entry.dkv, entry.dkv_accumulate, kv, kv_head_block, r,
                                      static_cast<std::int64_t>(e)) == Step::kFailed) {
          return Step::kFailed;
        }
        const std::uint64_t unit = unit_key(q.block, kv.block, q.head_block);
        if (const UnitSet::Where* earlier =
                units_.insert(group, kv.block, device_, static_cast<std::int64_t>(state.pc))) {
          return fail(state, "duplicate-work",
                      cat("row ", r, " entry ", e, ": work unit ", describe_unit(unit),
                          " was computed already by ",
                          location(states_[static_cast<std::size_t>(earlier->device)].program,
                                   earlier->device, pass_, earlier->instruction)));
        }
        ++summary_.work_units;
        summary_.pairs = add_saturating(summary_.pairs, pairs);
        out.add(unit, pairs);
        if (backward) state.slots[static_cast<std::size_t>(entry.dkv)].value.add(unit, pairs);
      }
    }
    return Step::kNext;
  }

  // Readies slot `id` to gather contributions to the partial of `source`'s block (and sequence
  // and tokens) and `head_block`: an accumulating target must already hold that partial, any
  // other must be empty. `entry` < 0 names the row's out slot, else the entry's dkv slot.
  Step start_partial(DeviceState& state, SlotId id, bool accumulate, const Value& source,
                     std::int32_t head_block, std::size_t row, std::int64_t entry) {
    SlotState& slot = state.slots[static_cast<std::size_t>(id)];
    const auto role = [&] {
      return entry < 0 ? cat("row ", row, " out") : cat("row ", row, " entry ", entry, " dkv");
    };
    if (accumulate) {
      if (!live(state, id) || slot.sends > 0) return writable(state, id, role());
      if (slot.value.block != source.block || slot.value.head_block != head_block) {
        return fail(
            state, "value-mismatch",
            cat(role(), " slot ", id, " holds ", describe(slot.value),
                ", accumulating contributions to block ", source.block, ", head ", head_block));
      }
      return Step::kNext;
    }
    const std::int32_t capacity = state.program->slots[static_cast<std::size_t>(id)].tokens;
    if (slot.held != Held::kEmpty || capacity < source.tokens) {
      return vacant(state, id, source.tokens, role());
    }
    slot.held = Held::kLive;
    slot.value.reset(state.program->slots[static_cast<std::size_t>(id)].kind, source.block,
                     head_block, source.seq, source.tokens);
    return Step::kNext;
  }

  Step execute(DeviceState& state, const Merge& merge) {
    return combine(state, merge.dst, merge.src);
  }
  Step execute(DeviceState& state, const Sum& sum) { return combine(state, sum.dst, sum.src); }

  // dst gathers src's units (a merge or a sum); the two must be disjoint.
  Step combine(DeviceState& state, SlotId dst_id, SlotId src_id) {
    if (writable(state, dst_id, "dst") == Step::kFailed) return Step::kFailed;
    if (readable(state, src_id, "src") == Step::kFailed) return Step::kFailed;
    Value& dst = state.slots[static_cast<std::size_t>(dst_id)].value;
    Value& src = state.slots[static_cast<std::size_t>(src_id)].value;
    const auto names = [&] {
      return cat("dst slot ", dst_id, " holds ", describe(dst), ", src slot ", src_id, " holds ",
                 describe(src));
    };
    if (dst.block != src.block || dst.head_block != src.head_block) {
      return fail(state, "value-mismatch", names());
    }
    dst.sort();
    src.sort();  // the same set, in order: src's value does not change
    // The sorted union, stopping at the first unit both hold.
    scratch_.resize(dst.units.size() + src.units.size());
    auto a = dst.units.begin();
    auto b = src.units.begin();
    auto out = scratch_.begin();
    while (a != dst.units.end() && b != src.units.end()) {
      if (*a == *b) {
        return fail(state, "duplicate-work",
                    cat(names(), ": both hold work unit ", describe_unit(*a)));
      }
      *out++ = *a < *b ? *a++ : *b++;
    }
    std::copy(b, src.units.end(), std::copy(a, dst.units.end(), out));
    dst.units.swap(scratch_);
    dst.pairs = add_saturating(dst.pairs, src.pairs);
    return Step::kNext;
  }

  Step execute(DeviceState& state, const Free& free) {
    for (const SlotId id : free.slots) {
      if (writable(state, id, "freed") == Step::kFailed) return Step::kFailed;
      state.slots[static_cast<std::size_t>(id)].held = Held::kEmpty;
    }
    return Step::kNext;
  }

  // No device can move. A send or receive without counterpart anywhere in the pass is the cause
  // if there is one (its device or the peer's may block before even issuing it); else the waits
  // form a cycle.
  std::optional<Violation> stuck() const {
    std::optional<std::int64_t> unbalanced;
    for (const auto& [key, channel] : channels_) {
      if (channel.totals.sends != channel.totals.recvs && (!unbalanced || key < *unbalanced)) {
        unbalanced = key;
      }
    }
    if (unbalanced) return unmatched(*unbalanced);
    std::string detail = "every unfinished device waits:";
    std::int32_t listed = 0;
    std::int32_t first = -1;
    for (std::int32_t d = 0; d < devices_; ++d) {
      const DeviceState& state = states_[static_cast<std::size_t>(d)];
      if (state.finished) continue;
      if (first < 0) first = d;
      if (++listed > 4) continue;
      const auto& wait = std::get<Wait>(state.program->instructions[state.pc]);
      const LaunchState& head = state.launches[state.head];
      std::int32_t k = head.first_op;
      while (state.ops[static_cast<std::size_t>(k)].done) ++k;
      const CommOp& op = *state.ops[static_cast<std::size_t>(k)].op;
      detail += cat(
          listed > 1 ? ";" : "", " device ", d, " at instruction ", state.pc, " for launch ",
          wait.launch, ", stuck at launch ", state.head, " op ", k - head.first_op,
          op.direction == CommOp::Direction::kSend ? " (send to device " : " (recv from device ",
          op.peer, ", slot ", op.slot, ")");
    }
    if (listed > 4) detail += cat("; and ", listed - 4, " more devices");
    const DeviceState& state = states_[static_cast<std::size_t>(first)];
    return make_violation(state.program, first, pass_, static_cast<std::int64_t>(state.pc),
                          "deadlock", detail);
  }

  // The first op of an unbalanced channel that has no counterpart, found in its program.
  Violation unmatched(std::int64_t key) const {
    const auto from = static_cast<std::int32_t>(key / devices_);
    const auto to = static_cast<std::int32_t>(key % devices_);
    const ChannelTotals& totals = channels_.find(key)->second.totals;
    const bool send = totals.sends > totals.recvs;
    const std::int32_t d = send ? from : to;
    const std::int32_t peer = send ? to : from;
    const std::int64_t number = send ? totals.recvs : totals.sends;  // its counterparts, 0-based
    const CommOp::Direction direction = send ? CommOp::Direction::kSend : CommOp::Direction::kRecv;
    const Program& program = *states_[static_cast<std::size_t>(d)].program;
    std::int64_t seen = 0;
    for (std::size_t i = 0; i < program.instructions.size(); ++i) {
      const auto* launch = std::get_if<Launch>(&program.instructions[i]);
      if (launch == nullptr) continue;
      for (std::size_t k = 0; k < launch->ops.size(); ++k) {
        const CommOp& op = launch->ops[k];
        if (op.peer != peer || op.direction != direction || seen++ != number) continue;
        return make_violation(
            &program, d, pass_, static_cast<std::int64_t>(i), "unmatched",
            send ? cat("op ", k, ": send to device ", peer, " (slot ", op.slot, ", ", op.bytes,
                       " bytes) is send number ", number + 1, " from device ", d, " to device ",
                       peer, ", but device ", peer, " posts only ", number,
                       " receives from device ", d)
                 : cat("op ", k, ": receive from device ", peer, " into slot ", op.slot, " (",
                       op.bytes, " bytes) is receive number ", number + 1, " from device ", peer,
                       ", but device ", peer, " sends only ", number, " to device ", d));
      }
    }
    return make_violation(&program, d, pass_, -1, "unmatched",
                          cat(totals.sends, " sends from device ", from, " to device ", to, ", ",
                              totals.recvs, " receives"));
  }

  const PlanHeader& header_;
  Pass pass_;
  PassSummary& summary_;
  UnitSet units_;
  std::int32_t devices_;
  std::int32_t device_ = 0;  // the device running
  std::vector<DeviceState> states_;
  std::unordered_map<std::int64_t, Channel> channels_;
  // Partial outputs (kind, block, head block) that left a node, with that node.
  std::set<std::tuple<SlotKind, BlockId, std::int32_t, std::int32_t>> crossed_;
  std::vector<std::int32_t> worklist_;
  std::vector<std::uint64_t> scratch_;
  std::optional<Violation> violation_;
};

}  // namespace
}  // namespace verifier_detail

namespace {

std::optional<Violation> verify_one(const Plan& plan, Pass pass, PassSummary& summary) {
  const std::vector<Program>& programs = plan.programs(pass);
  summary.devices = static_cast<std::int32_t>(programs.size());
  for (const Program& program : programs) {
    summary.instructions += static_cast<std::int64_t>(program.instructions.size());
  }
  verifier_detail::PassIndex index;
  if (auto violation = verifier_detail::check_statically(plan, pass, index)) return violation;
  if (auto violation = verifier_detail::Simulation(plan, pass, index, summary).run()) {
    return violation;
  }
  return verifier_detail::check_output_totals(plan, pass);
}

std::string describe(const PassSummary& summary) {
  return verifier_detail::cat(summary.devices, " devices, ", summary.instructions,
                              " instructions, ", summary.work_units, " work units, ",
                              summary.messages, " messages, ", summary.bytes_sent, " bytes sent, ",
                              summary.outputs_stored, " outputs stored");
}

}  // namespace

VerifyReport verify_pass(const Plan& plan, Pass pass) {
  VerifyReport report;
  report.first = verify_one(plan, pass, pass == Pass::kForward ? report.forward : report.backward);
  report.ok = !report.first.has_value();
  return report;
}

VerifyReport verify(const Plan& plan) {
  VerifyReport report;
  report.first = verify_one(plan, Pass::kForward, report.forward);
  std::optional<Violation> backward = verify_one(plan, Pass::kBackward, report.backward);
  if (!report.first) report.first = std::move(backward);
  report.ok = !report.first.has_value();
  return report;
}

std::string describe(const Violation& violation) {
  return verifier_detail::cat(violation.message, " [", violation.rule, "]");
}

std::string describe(const VerifyReport& report) {
  std::string text = report.ok ? "ok" : describe(*report.first);
  if (report.forward.devices > 0) {
    text += verifier_detail::cat("; forward: ", describe(report.forward));
  }
  if (report.backward.devices > 0) {
    text += verifier_detail::cat("; backward: ", describe(report.backward));
  }
  return text;
}

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// The verifier accepts valid plans and names the rule, device and instruction of each broken one.
#include "dcp/program/verifier/verifier.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/rng.h"

#include "tests/testing/sample_plan.h"

namespace dcp {
namespace {

// --- Test plans ------------------------------------------------------------------------------
//
// One causal sequence cut into blocks, each owned by one device. Four q heads in two head blocks
// of two heads, two kv heads (GQA group 2), so q head block h reads kv head block h. A tile is
// computed on its q block's owner, which fetches the kv, unless it is listed as offloaded: then
// the kv block's owner computes it, fetching the q and sending the partial output back.
//
// Each device's Program: load its own inputs; compute the tiles whose inputs are all local
// (stage 0); then one round per received input (stage k + 1): launch k sends what peers receive
// in their round k and receives this device's k-th input into a reused slot (freed first),
// wait, compute with it; finally (the epilogue) one launch returns the partial outputs, which the
// owners merge (forward) or sum (backward) into their own before storing them. Every instruction
// matters: dropping any one breaks a rule.

struct Scenario {
  std::int32_t devices = 2;
  std::vector<std::int32_t> tokens;                 // per block
  std::vector<std::int32_t> owner;                  // per block
  std::set<std::pair<BlockId, BlockId>> offloaded;  // (q block, kv block)
};

constexpr std::int32_t kHeadBlocks = 2;
constexpr std::int32_t kCapacity = 4;  // every slot's tokens: the largest block

struct ValueKey {
  SlotKind kind = SlotKind::kQ;
  BlockId block = 0;
  std::int32_t head = 0;
  friend auto operator<=>(const ValueKey&, const ValueKey&) = default;
};

// A value moving to or from a peer.
struct Transfer {
  std::int32_t peer = 0;
  ValueKey value;
  friend auto operator<=>(const Transfer&, const Transfer&) = default;
};

Scenario two_devices() { return {2, {4, 4, 4, 2}, {0, 1, 1, 0}, {{2, 0}, {3, 1}}}; }
Scenario three_devices() { return {3, {4, 4, 4, 4, 3}, {0, 1, 2, 0, 1}, {{3, 1}, {4, 2}, {2, 0}}}; }

BlockId block_count(const Scenario& s) { return static_cast<BlockId>(s.tokens.size()); }
std::int32_t tokens_of(const Scenario& s, BlockId b) {
  return s.tokens[static_cast<std::size_t>(b)];
}
std::int32_t owner_of(const Scenario& s, BlockId b) { return s.owner[static_cast<std::size_t>(b)]; }
std::int32_t computer_of(const Scenario& s, BlockId q, BlockId kv) {
  return s.offloaded.count({q, kv}) > 0 ? owner_of(s, kv) : owner_of(s, q);
}
std::int64_t tile_pairs(const Scenario& s, BlockId q, BlockId kv) {
  const std::int64_t t = tokens_of(s, q);
  return q == kv ? t * (t + 1) / 2 : t * tokens_of(s, kv);
}

PlanHeader header_of(const Scenario& s) {
  PlanHeader h;
  h.strategy = "test";
  h.cluster = ClusterShape{1, s.devices};
  h.q_heads = 4;
  h.kv_heads = 2;
  h.head_dim = 8;
  h.softmax_scale = 1.0 / std::sqrt(8.0);
  h.head_block_size = 2;
  h.kv_heads_per_block = 1;
  for (const std::int32_t t : s.tokens) h.total_tokens += t;
  h.sequences = 1;
  h.token_blocks = block_count(s);
  h.work_units = kHeadBlocks * block_count(s) * (block_count(s) + 1) / 2;
  return h;
}

// Calls f(q block, kv block, head block) for every work unit of the causal sequence.
template <typename F>
void for_each_unit(const Scenario& s, F&& f) {
  for (BlockId q = 0; q < block_count(s); ++q) {
    for (BlockId kv = 0; kv <= q; ++kv) {
      for (std::int32_t h = 0; h < kHeadBlocks; ++h) f(q, kv, h);
    }
  }
}

// The inputs device d receives, one per round, in round order.
std::vector<Transfer> inputs_received(const Scenario& s, Pass pass, std::int32_t d) {
  const SlotKind q_kind = pass == Pass::kForward ? SlotKind::kQ : SlotKind::kQGrad;
  std::set<Transfer> needed;
  for_each_unit(s, [&](BlockId q, BlockId kv, std::int32_t h) {
    if (computer_of(s, q, kv) != d) return;
    if (owner_of(s, q) != d) needed.insert({owner_of(s, q), {q_kind, q, h}});
    if (owner_of(s, kv) != d) needed.insert({owner_of(s, kv), {SlotKind::kKV, kv, h}});
  });
  return {needed.begin(), needed.end()};
}

// The partial outputs device d computes for other owners (`to_owner`), or receives from other
// computers (`!to_owner`), in the order of the final launch.
std::vector<Transfer> partials(const Scenario& s, Pass pass, std::int32_t d, bool to_owner) {
  const SlotKind out_kind = pass == Pass::kForward ? SlotKind::kOut : SlotKind::kDQ;
  std::set<Transfer> moved;
  for_each_unit(s, [&](BlockId q, BlockId kv, std::int32_t h) {
    const std::int32_t computer = computer_of(s, q, kv);
    const auto add = [&](SlotKind kind, BlockId block) {
      const std::int32_t owner = owner_of(s, block);
      if (owner == computer) return;
      if (to_owner && computer == d) moved.insert({owner, {kind, block, h}});
      if (!to_owner && owner == d) moved.insert({computer, {kind, block, h}});
    };
    add(out_kind, q);
    if (pass == Pass::kBackward) add(SlotKind::kDKV, kv);
  });
  return {moved.begin(), moved.end()};
}

class ProgramWriter {
 public:
  ProgramWriter(const Scenario& s, const PlanHeader& header, Pass pass, std::int32_t device)
      : s_(s), header_(header), pass_(pass), device_(device) {}

  Program write() {
    program_.device = device_;
    program_.pass = pass_;
    std::set<BlockId> referenced;
    for (BlockId b = 0; b < block_count(s_); ++b) {
      if (owner_of(s_, b) != device_) continue;
      program_.owned.push_back(b);
      referenced.insert(b);
      for (std::int32_t h = 0; h < kHeadBlocks; ++h) {
        load({q_kind(), b, h});
        load({SlotKind::kKV, b, h});
      }
    }
    // Stage 0: the tiles of own q and own kv.
    std::vector<AttnRow> rows;
    for (const BlockId q : program_.owned) {
      for (std::int32_t h = 0; h < kHeadBlocks; ++h) {
        std::vector<std::pair<BlockId, SlotId>> kvs;
        for (const BlockId kv : program_.owned) {
          if (kv <= q && computer_of(s_, q, kv) == device_) {
            kvs.push_back({kv, slot_of_[{SlotKind::kKV, kv, h}]});
          }
        }
        rows.push_back(row(slot_of_[{q_kind(), q, h}], q, h, kvs));
      }
    }
    emit_attention(std::move(rows));

    std::vector<std::vector<Transfer>> received;
    std::size_t rounds = 0;
    for (std::int32_t e = 0; e < s_.devices; ++e) {
      received.push_back(inputs_received(s_, pass_, e));
      rounds = std::max(rounds, received.back().size());
    }
    const std::vector<Transfer>& mine = received[static_cast<std::size_t>(device_)];
    for (std::size_t k = 0; k < rounds; ++k) {
      stage_ = static_cast<std::int32_t>(k) + 1;
      std::vector<CommOp> ops;
      for (std::int32_t e = 0; e < s_.devices; ++e) {
        const std::vector<Transfer>& theirs = received[static_cast<std::size_t>(e)];
        if (k < theirs.size() && theirs[k].peer == device_) {
          ops.push_back(
              op(CommOp::Direction::kSend, e, slot_of_.at(theirs[k].value), theirs[k].value));
        }
      }
      SlotId incoming = kNoSlot;
      if (k < mine.size()) {
        incoming = reuse(mine[k].value.kind);
        referenced.insert(mine[k].value.block);
        ops.push_back(op(CommOp::Direction::kRecv, mine[k].peer, incoming, mine[k].value));
      }
      emit(Launch{static_cast<LaunchId>(k), ops});
      emit(Wait{static_cast<LaunchId>(k)});
      if (k < mine.size()) compute_with(mine[k].value, incoming);
    }

    // The epilogue: partial outputs go home, are combined and stored.
    program_.stages = static_cast<std::int32_t>(rounds) + 1;
    stage_ = program_.stages;
    std::vector<CommOp> ops;
    for (const Transfer& t : partials(s_, pass_, device_, true)) {
      ops.push_back(op(CommOp::Direction::kSend, t.peer, slot_of_.at(t.value), t.value));
    }
    std::map<ValueKey, std::vector<SlotId>> arriving;
    for (const Transfer& t : partials(s_, pass_, device_, false)) {
      const SlotId slot = new_slot(t.value.kind);
      arriving[t.value].push_back(slot);
      ops.push_back(op(CommOp::Direction::kRecv, t.peer, slot, t.value));
    }
    const auto last = static_cast<LaunchId>(rounds);
    emit(Launch{last, ops});
    emit(Wait{last});
    for (const auto& [key, slot] : slot_of_) {
      if (!is_output(key.kind) || owner_of(s_, key.block) != device_) continue;
      for (const SlotId src : arriving[key]) {
        emit(pass_ == Pass::kForward ? Instruction{Merge{slot, src}} : Instruction{Sum{slot, src}});
      }
      emit(Store{slot, key.kind, key.block, key.head});
      program_.outputs.push_back(expected(key));
    }
    for (const BlockId b : referenced) {
      program_.blocks.push_back(BlockInfo{b, 0, tokens_of(s_, b), 4 * b});
    }
    return std::move(program_);
  }

 private:
  SlotKind q_kind() const { return pass_ == Pass::kForward ? SlotKind::kQ : SlotKind::kQGrad; }
  SlotKind out_kind() const { return pass_ == Pass::kForward ? SlotKind::kOut : SlotKind::kDQ; }

  void emit(Instruction instruction) {
    program_.instructions.push_back(std::move(instruction));
    program_.instruction_stage.push_back(stage_);
  }
  void emit_attention(std::vector<AttnRow> rows) {
    if (pass_ == Pass::kForward) {
      emit(AttnForward{std::move(rows)});
    } else {
      emit(AttnBackward{std::move(rows)});
    }
  }

  SlotId new_slot(SlotKind kind) {
    program_.slots.push_back(Slot{kind, kCapacity});
    return static_cast<SlotId>(program_.slots.size() - 1);
  }
  void load(ValueKey key) {
    const SlotId slot = new_slot(key.kind);
    slot_of_[key] = slot;
    emit(Load{slot, key.block, key.head});
  }
  // The one slot that receives inputs of this kind, freed before each reuse.
  SlotId reuse(SlotKind kind) {
    const auto found = incoming_.find(kind);
    if (found == incoming_.end()) return incoming_[kind] = new_slot(kind);
    emit(Free{{found->second}});
    return found->second;
  }
  CommOp op(CommOp::Direction direction, std::int32_t peer, SlotId slot, ValueKey value) const {
    return CommOp{direction, peer, slot,
                  value_bytes(header_, value.kind, tokens_of(s_, value.block))};
  }
  // The slot of a partial output, and whether it already holds one.
  std::pair<SlotId, bool> partial(ValueKey key) {
    const auto found = slot_of_.find(key);
    if (found != slot_of_.end()) return {found->second, true};
    const SlotId slot = new_slot(key.kind);
    slot_of_[key] = slot;
    return {slot, false};
  }
  MaskId mask_for(BlockId q, BlockId kv) {
    if (q != kv) return kFullTile;
    const std::int32_t t = tokens_of(s_, q);
    TileMask mask{t, t, {}, {}};
    for (std::int32_t r = 0; r <= t; ++r) mask.row_offsets.push_back(r);
    for (std::int32_t r = 0; r < t; ++r) mask.intervals.insert(mask.intervals.end(), {0, r + 1});
    const auto found = std::find(program_.masks.begin(), program_.masks.end(), mask);
    if (found != program_.masks.end()) return static_cast<MaskId>(found - program_.masks.begin());
    program_.masks.push_back(std::move(mask));
    return static_cast<MaskId>(program_.masks.size() - 1);
  }
  AttnRow row(SlotId q_slot, BlockId q, std::int32_t h,
              const std::vector<std::pair<BlockId, SlotId>>& kvs) {
    const auto [out, accumulate] = partial({out_kind(), q, h});
    AttnRow result{q_slot, out, accumulate, {}};
    for (const auto& [kv, kv_slot] : kvs) {
      AttnKv entry{kv_slot, mask_for(q, kv), kNoSlot, false};
      if (pass_ == Pass::kBackward) {
        std::tie(entry.dkv, entry.dkv_accumulate) = partial({SlotKind::kDKV, kv, h});
      }
      result.kv.push_back(entry);
    }
    return result;
  }
  // The tiles this device computes with a received input.
  void compute_with(ValueKey value, SlotId slot) {
    std::vector<AttnRow> rows;
    if (value.kind == SlotKind::kKV) {
      for (const BlockId q : program_.owned) {
        if (value.block <= q && computer_of(s_, q, value.block) == device_) {
          rows.push_back(
              row(slot_of_[{q_kind(), q, value.head}], q, value.head, {{value.block, slot}}));
        }
      }
    } else {
      std::vector<std::pair<BlockId, SlotId>> kvs;
      for (const BlockId kv : program_.owned) {
        if (kv <= value.block && computer_of(s_, value.block, kv) == device_) {
          kvs.push_back({kv, slot_of_[{SlotKind::kKV, kv, value.head}]});
        }
      }
      rows.push_back(row(slot, value.block, value.head, kvs));
    }
    emit_attention(std::move(rows));
  }
  ExpectedOutput expected(ValueKey key) const {
    ExpectedOutput output{key.kind, key.block, key.head, 0, 0};
    for_each_unit(s_, [&](BlockId q, BlockId kv, std::int32_t h) {
      if (h == key.head && (key.kind == SlotKind::kDKV ? kv : q) == key.block) {
        ++output.contributions;
        output.pairs += tile_pairs(s_, q, kv);
      }
    });
    return output;
  }

  const Scenario& s_;
  const PlanHeader& header_;
  Pass pass_;
  std::int32_t device_;
  std::int32_t stage_ = 0;
  Program program_;
  std::map<ValueKey, SlotId> slot_of_;  // own inputs and partial outputs
  std::map<SlotKind, SlotId> incoming_;
};

Plan make_plan(const Scenario& s) {
  Plan plan;
  plan.header = header_of(s);
  for (std::int32_t d = 0; d < s.devices; ++d) {
    plan.forward.push_back(ProgramWriter(s, plan.header, Pass::kForward, d).write());
    plan.backward.push_back(ProgramWriter(s, plan.header, Pass::kBackward, d).write());
  }
  return plan;
}

// --- Mutation helpers ------------------------------------------------------------------------

Program& program_of(Plan& plan, Pass pass, std::int32_t device) {
  return (pass == Pass::kForward ? plan.forward : plan.backward)[static_cast<std::size_t>(device)];
}

// The index of the n-th instruction holding a T.
template <typename T>
std::size_t nth(const Program& program, std::size_t n = 0) {
  for (std::size_t i = 0; i < program.instructions.size(); ++i) {
    if (std::holds_alternative<T>(program.instructions[i]) && n-- == 0) return i;
  }
  ADD_FAILURE() << "no such instruction";
  return 0;
}

template <typename T>
std::size_t last(const Program& program) {
  for (std::size_t i = program.instructions.size(); i-- > 0;) {
    if (std::holds_alternative<T>(program.instructions[i])) return i;
  }
  ADD_FAILURE() << "no such instruction";
  return 0;
}

template <typename T>
T& get(Program& program, std::size_t index) {
  return std::get<T>(program.instructions[index]);
}

void erase(Program& program, std::size_t index) {
  program.instructions.erase(program.instructions.begin() + static_cast<std::ptrdiff_t>(index));
  program.instruction_stage.erase(program.instruction_stage.begin() +
                                  static_cast<std::ptrdiff_t>(index));
}

// Inserts before `index`, in the stage of the instruction there.
void insert(Program& program, std::size_t index, Instruction instruction) {
  const std::int32_t stage = program.instruction_stage[index];
  program.instructions.insert(program.instructions.begin() + static_cast<std::ptrdiff_t>(index),
                              std::move(instruction));
  program.instruction_stage.insert(
      program.instruction_stage.begin() + static_cast<std::ptrdiff_t>(index), stage);
}

void expect_violation(const VerifyReport& report, const std::string& rule, std::int32_t device,
                      std::int64_t instruction) {
  ASSERT_FALSE(report.ok);
  ASSERT_TRUE(report.first.has_value());
  const Violation& v = *report.first;
  EXPECT_EQ(v.rule, rule) << describe(v);
  EXPECT_EQ(v.device, device) << describe(v);
  EXPECT_EQ(v.instruction, instruction) << describe(v);
  if (device >= 0) {
    EXPECT_NE(v.message.find("device " + std::to_string(device)), std::string::npos) << v.message;
  }
  if (instruction >= 0) {
    EXPECT_NE(v.message.find("instruction " + std::to_string(instruction) + " ("),
              std::string::npos)
        << v.message;
  }
  EXPECT_EQ(v.message.find('\n'), std::string::npos);
  EXPECT_NE(describe(v).find("[" + rule + "]"), std::string::npos);
}

// --- Valid plans -----------------------------------------------------------------------------

TEST(Verifier, AcceptsTheTwoAndThreeDevicePlans) {
  for (const Scenario& s : {two_devices(), three_devices()}) {
    const Plan plan = make_plan(s);
    const VerifyReport report = verify(plan);
    ASSERT_TRUE(report.ok) << describe(report);
    for (const PassSummary* summary : {&report.forward, &report.backward}) {
      EXPECT_EQ(summary->devices, s.devices);
      EXPECT_EQ(summary->work_units, plan.header.work_units);
      EXPECT_GT(summary->messages, 0);
      EXPECT_GT(summary->bytes_sent, 0);
    }
    EXPECT_EQ(report.forward.outputs_stored, kHeadBlocks * block_count(s));
    EXPECT_EQ(report.backward.outputs_stored, 2 * kHeadBlocks * block_count(s));
    EXPECT_EQ(describe(report).substr(0, 2), "ok");
  }
}

TEST(Verifier, AcceptsTheSamplePlan) {
  const VerifyReport report = verify(testing::sample_plan());
  EXPECT_TRUE(report.ok) << describe(report);
}

TEST(Verifier, VerifiesOnePassAlone) {
  Plan plan = make_plan(two_devices());
  plan.backward.clear();
  const VerifyReport report = verify_pass(plan, Pass::kForward);
  EXPECT_TRUE(report.ok) << describe(report);
  EXPECT_EQ(report.backward.devices, 0);
  expect_violation(verify_pass(plan, Pass::kBackward), "structure", -1, -1);
}

// --- Every instruction matters ---------------------------------------------------------------

TEST(Verifier, CatchesEveryDroppedInstruction) {
  for (const Scenario& s : {two_devices(), three_devices()}) {
    const Plan plan = make_plan(s);
    for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
      for (std::int32_t d = 0; d < s.devices; ++d) {
        const std::size_t size =
            plan.programs(pass)[static_cast<std::size_t>(d)].instructions.size();
        for (std::size_t i = 0; i < size; ++i) {
          Plan broken = plan;
          erase(program_of(broken, pass, d), i);
          const VerifyReport report = verify_pass(broken, pass);
          ASSERT_FALSE(report.ok) << to_string(pass) << " device " << d << " without instruction "
                                  << i;
          EXPECT_NE(report.first->rule, "structure") << describe(*report.first);
        }
      }
    }
  }
}

// --- Communication ---------------------------------------------------------------------------

TEST(Verifier, CatchesASwappedPeer) {
  // Device 0's first send goes to device 2 instead of device 1: device 1 then receives once more
  // from device 0 than device 0 sends to it, and waits for it forever.
  Plan plan = make_plan(three_devices());
  Program& program = program_of(plan, Pass::kForward, 0);
  CommOp& send = get<Launch>(program, nth<Launch>(program)).ops.at(0);
  ASSERT_EQ(send.direction, CommOp::Direction::kSend);
  ASSERT_EQ(send.peer, 1);
  send.peer = 2;
  // The receive left over is device 1's last from device 0.
  std::size_t last_receive = 0;
  const Program& receiver = plan.forward[1];
  for (std::size_t i = 0; i < receiver.instructions.size(); ++i) {
    const auto* launch = std::get_if<Launch>(&receiver.instructions[i]);
    if (launch == nullptr) continue;
    for (const CommOp& op : launch->ops) {
      if (op.direction == CommOp::Direction::kRecv && op.peer == 0) last_receive = i;
    }
  }
  const VerifyReport report = verify_pass(plan, Pass::kForward);
  expect_violation(report, "unmatched", 1, static_cast<std::int64_t>(last_receive));
  EXPECT_NE(report.first->message.find("but device 0 sends only"), std::string::npos)
      << report.first->message;
}

TEST(Verifier, CatchesAReceiveIntoTheWrongSlot) {
  const Plan plan = make_plan(two_devices());
  // Device 0's third launch receives the kv of block 2, head block 0.
  const std::size_t launch = nth<Launch>(plan.forward[0], 2);
  const auto receive_into = [&](Slot slot) {
    Plan broken = plan;
    Program& program = program_of(broken, Pass::kForward, 0);
    program.slots.push_back(slot);
    CommOp& recv = get<Launch>(program, launch).ops.back();
    EXPECT_EQ(recv.direction, CommOp::Direction::kRecv);
    recv.slot = static_cast<SlotId>(program.slots.size() - 1);
    return verify_pass(broken, Pass::kForward);
  };
  expect_violation(receive_into(Slot{SlotKind::kQ, 4}), "send-recv-kind", 0,
                   static_cast<std::int64_t>(launch));
  expect_violation(receive_into(Slot{SlotKind::kKV, 2}), "send-recv-kind", 0,
                   static_cast<std::int64_t>(launch));

  // Device 0's block table loses block 2, whose q and kv it receives.
  Plan broken = plan;
  std::vector<BlockInfo>& blocks = program_of(broken, Pass::kForward, 0).blocks;
  blocks.erase(std::find_if(blocks.begin(), blocks.end(),
                            [](const BlockInfo& info) { return info.id == 2; }));
  expect_violation(verify_pass(broken, Pass::kForward), "block-table", 0,
                   static_cast<std::int64_t>(nth<Launch>(plan.forward[0], 0)));
}

TEST(Verifier, CatchesAnExtraUnmatchedSend) {
  Plan plan = make_plan(two_devices());
  Program& program = program_of(plan, Pass::kForward, 0);
  const std::size_t last = nth<Launch>(program, 4);
  // Send the q loaded first once more, to device 1 which never receives it.
  get<Launch>(program, last)
      .ops.push_back(
          CommOp{CommOp::Direction::kSend, 1, 0, value_bytes(plan.header, SlotKind::kQ, 4)});
  const VerifyReport report = verify_pass(plan, Pass::kForward);
  expect_violation(report, "unmatched", 0, static_cast<std::int64_t>(last));
  EXPECT_NE(report.first->message.find(
                "is send number 7 from device 0 to device 1, but device 1 posts only 6 receives"),
            std::string::npos)
      << report.first->message;
}

TEST(Verifier, CatchesAnExtraUnmatchedReceive) {
  Plan plan = make_plan(two_devices());
  Program& program = program_of(plan, Pass::kBackward, 1);
  const std::size_t last = nth<Launch>(program, 4);
  program.slots.push_back(Slot{SlotKind::kDQ, 4});
  get<Launch>(program, last)
      .ops.push_back(CommOp{CommOp::Direction::kRecv, 0,
                            static_cast<SlotId>(program.slots.size() - 1),
                            value_bytes(plan.header, SlotKind::kDQ, 4)});
  expect_violation(verify_pass(plan, Pass::kBackward), "unmatched", 1,
                   static_cast<std::int64_t>(last));
}

TEST(Verifier, CatchesADeadlock) {
  // Both devices move their first sends from launch 0 into launch 1: each then waits for launch
  // 0, whose receive matches a send in the other's launch 1.
  Plan plan = make_plan(two_devices());
  for (std::int32_t d = 0; d < 2; ++d) {
    Program& program = program_of(plan, Pass::kForward, d);
    std::vector<CommOp>& first = get<Launch>(program, nth<Launch>(program, 0)).ops;
    std::vector<CommOp>& second = get<Launch>(program, nth<Launch>(program, 1)).ops;
    const auto sends = std::stable_partition(first.begin(), first.end(), [](const CommOp& op) {
      return op.direction == CommOp::Direction::kSend;
    });
    second.insert(second.begin(), first.begin(), sends);
    first.erase(first.begin(), sends);
  }
  const Program& program = program_of(plan, Pass::kForward, 0);
  const VerifyReport report = verify_pass(plan, Pass::kForward);
  expect_violation(report, "deadlock", 0, static_cast<std::int64_t>(nth<Wait>(program, 0)));
  EXPECT_NE(report.first->message.find("device 1 at instruction"), std::string::npos)
      << report.first->message;
}

TEST(Verifier, CatchesWrongByteCounts) {
  const Plan plan = make_plan(two_devices());
  {
    Plan broken = plan;
    Program& program = program_of(broken, Pass::kForward, 0);
    const std::size_t launch = nth<Launch>(program);
    get<Launch>(program, launch).ops.at(0).bytes += 2;
    expect_violation(verify_pass(broken, Pass::kForward), "send-bytes", 0,
                     static_cast<std::int64_t>(launch));
  }
  {
    Plan broken = plan;
    Program& program = program_of(broken, Pass::kForward, 1);
    const std::size_t launch = nth<Launch>(program);
    CommOp& recv = get<Launch>(program, launch).ops.back();
    ASSERT_EQ(recv.direction, CommOp::Direction::kRecv);
    recv.bytes += 2;
    const VerifyReport report = verify_pass(broken, Pass::kForward);
    expect_violation(report, "send-recv-bytes", 1, static_cast<std::int64_t>(launch));
  }
}

TEST(Verifier, CatchesAUseBeforeTheWait) {
  // Device 0 computes with the first q it receives before waiting for it.
  Plan plan = make_plan(two_devices());
  Program& program = program_of(plan, Pass::kForward, 0);
  const std::size_t wait = nth<Wait>(program);
  ASSERT_TRUE(std::holds_alternative<AttnForward>(program.instructions[wait + 1]));
  std::swap(program.instructions[wait], program.instructions[wait + 1]);
  const VerifyReport report = verify_pass(plan, Pass::kForward);
  expect_violation(report, "use-before-arrival", 0, static_cast<std::int64_t>(wait));
  EXPECT_NE(report.first->message.find("still being received (launch 0 not waited)"),
            std::string::npos)
      << report.first->message;
}

TEST(Verifier, CatchesFreeingOrReloadingAnInFlightSend) {
  const Plan plan = make_plan(two_devices());
  const Program& original = plan.forward[0];
  const std::size_t launch = nth<Launch>(original);
  const CommOp send = std::get<Launch>(original.instructions[launch]).ops.at(0);
  ASSERT_EQ(send.direction, CommOp::Direction::kSend);
  {
    Plan broken = plan;
    insert(program_of(broken, Pass::kForward, 0), launch + 1, Free{{send.slot}});
    expect_violation(verify_pass(broken, Pass::kForward), "slot-in-flight", 0,
                     static_cast<std::int64_t>(launch + 1));
  }
  {
    // The slot holds a q of block 3 (head 0): reloading it before the wait overwrites the send.
    Plan broken = plan;
    insert(program_of(broken, Pass::kForward, 0), launch + 1, Load{send.slot, 3, 0});
    expect_violation(verify_pass(broken, Pass::kForward), "slot-in-flight", 0,
                     static_cast<std::int64_t>(launch + 1));
  }
}

// --- Slots -----------------------------------------------------------------------------------

TEST(Verifier, CatchesANewValueForALiveSlot) {
  const Plan plan = make_plan(two_devices());
  {
    // Receive kv into the slot of the first kv this device loaded.
    Plan broken = plan;
    Program& program = program_of(broken, Pass::kForward, 0);
    const SlotId own_kv = get<Load>(program, 1).slot;
    const std::size_t launch = nth<Launch>(program, 2);
    CommOp& recv = get<Launch>(program, launch).ops.back();
    ASSERT_EQ(recv.direction, CommOp::Direction::kRecv);
    ASSERT_EQ(program.slots[static_cast<std::size_t>(recv.slot)].kind, SlotKind::kKV);
    recv.slot = own_kv;
    const VerifyReport report = verify_pass(broken, Pass::kForward);
    expect_violation(report, "slot-live", 0, static_cast<std::int64_t>(launch));
    EXPECT_NE(report.first->message.find("slot " + std::to_string(own_kv) + " holds kv(block 0"),
              std::string::npos)
        << report.first->message;
  }
  {
    // Load the second q into the first q's slot.
    Plan broken = plan;
    Program& program = program_of(broken, Pass::kForward, 0);
    get<Load>(program, 2).slot = get<Load>(program, 0).slot;
    expect_violation(verify_pass(broken, Pass::kForward), "slot-live", 0, 2);
  }
  {
    // A first contribution that does not accumulate, into a partial that exists.
    Plan broken = plan;
    Program& program = program_of(broken, Pass::kBackward, 1);
    const std::size_t attention = nth<AttnBackward>(program, 1);  // kv of block 0 arrived
    AttnRow& row = get<AttnBackward>(program, attention).rows.at(0);
    ASSERT_TRUE(row.accumulate);
    row.accumulate = false;
    expect_violation(verify_pass(broken, Pass::kBackward), "slot-live", 1,
                     static_cast<std::int64_t>(attention));
  }
}

TEST(Verifier, CatchesFreeingAnEmptySlot) {
  Plan plan = make_plan(two_devices());
  Program& program = program_of(plan, Pass::kForward, 1);
  const std::size_t free = nth<Free>(program);
  const SlotId slot = get<Free>(program, free).slots.at(0);
  insert(program, free, Free{{slot}});  // frees it, then the original frees it again
  expect_violation(verify_pass(plan, Pass::kForward), "slot-empty", 1,
                   static_cast<std::int64_t>(free + 1));
}

TEST(Verifier, CatchesASlotTooSmall) {
  Plan plan = make_plan(two_devices());
  Program& program = program_of(plan, Pass::kForward, 0);
  program.slots[static_cast<std::size_t>(get<Load>(program, 0).slot)].tokens = 3;
  expect_violation(verify_pass(plan, Pass::kForward), "slot-capacity", 0, 0);
}

// --- Work and outputs ------------------------------------------------------------------------

TEST(Verifier, CatchesAMissingMergeOrSum) {
  const Plan plan = make_plan(two_devices());
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    Plan broken = plan;
    Program& program = program_of(broken, pass, 0);
    const std::size_t combine = pass == Pass::kForward ? nth<Merge>(program) : nth<Sum>(program);
    erase(program, combine);
    ASSERT_TRUE(std::holds_alternative<Store>(program.instructions[combine]));
    const VerifyReport report = verify_pass(broken, pass);
    expect_violation(report, "output-incomplete", 0, static_cast<std::int64_t>(combine));
    EXPECT_NE(report.first->message.find("expected"), std::string::npos) << report.first->message;
  }
}

TEST(Verifier, CatchesDuplicateWork) {
  const Plan plan = make_plan(two_devices());
  {
    // Device 0 computes tile (3, 0) again when block 2's kv arrives.
    Plan broken = plan;
    Program& program = program_of(broken, Pass::kForward, 0);
    const SlotId kv0 = get<Load>(program, 1).slot;
    const std::size_t attention = nth<AttnForward>(program, 3);
    get<AttnForward>(program, attention)
        .rows.at(0)
        .kv.push_back(AttnKv{kv0, kFullTile, kNoSlot, false});
    const VerifyReport report = verify_pass(broken, Pass::kForward);
    expect_violation(report, "duplicate-work", 0, static_cast<std::int64_t>(attention));
    EXPECT_NE(report.first->message.find("(q block 3, kv block 0, head 0) was computed already by "
                                         "device 0 forward instruction 8 (attn_fwd)"),
              std::string::npos)
        << report.first->message;
  }
  {
    // Device 1 computes tile (3, 2), which device 0 computes, with its own kv of block 2.
    Plan broken = plan;
    Program& program = program_of(broken, Pass::kForward, 1);
    const SlotId kv2 = get<Load>(program, 5).slot;
    ASSERT_EQ(get<Load>(program, 5).block, 2);
    const std::size_t attention = nth<AttnForward>(program, 1);
    AttnRow& row = get<AttnForward>(program, attention).rows.at(0);
    row.kv.push_back(AttnKv{kv2, kFullTile, kNoSlot, false});
    const VerifyReport report = verify_pass(broken, Pass::kForward);
    ASSERT_FALSE(report.ok);
    EXPECT_EQ(report.first->rule, "duplicate-work") << describe(*report.first);
    EXPECT_NE(report.first->message.find("was computed already by device"), std::string::npos);
  }
  {
    // Merging one partial twice counts its work twice.
    Plan broken = plan;
    Program& program = program_of(broken, Pass::kForward, 0);
    const std::size_t merge = nth<Merge>(program);
    insert(program, merge, get<Merge>(program, merge));
    expect_violation(verify_pass(broken, Pass::kForward), "duplicate-work", 0,
                     static_cast<std::int64_t>(merge + 1));
  }
}

TEST(Verifier, CatchesWrongHeadsMasksAndValues) {
  const Plan plan = make_plan(two_devices());
  {
    // The kv of block 0 loaded for kv head block 1 is read by q head block 0.
    Plan broken = plan;
    Program& program = program_of(broken, Pass::kForward, 0);
    get<Load>(program, 1).head_block = 1;
    expect_violation(verify_pass(broken, Pass::kForward), "head-mismatch", 0,
                     static_cast<std::int64_t>(nth<AttnForward>(program)));
  }
  {
    // Device 0's masks: causal 4 x 4 for block 0 and causal 2 x 2 for block 3; swap them.
    Plan broken = plan;
    Program& program = program_of(broken, Pass::kForward, 0);
    ASSERT_EQ(program.masks.size(), 2u);
    std::swap(program.masks[0], program.masks[1]);
    expect_violation(verify_pass(broken, Pass::kForward), "mask-shape", 0,
                     static_cast<std::int64_t>(nth<AttnForward>(program)));
  }
  {
    Plan broken = plan;
    Program& program = program_of(broken, Pass::kForward, 0);
    const std::size_t merge = nth<Merge>(program);
    std::swap(get<Merge>(program, merge).dst, get<Merge>(program, merge + 2).src);
    expect_violation(verify_pass(broken, Pass::kForward), "value-mismatch", 0,
                     static_cast<std::int64_t>(merge));
  }
}

TEST(Verifier, CatchesMissingOrExtraWork) {
  Plan plan = make_plan(two_devices());
  plan.header.work_units += 2;
  VerifyReport report = verify_pass(plan, Pass::kForward);
  expect_violation(report, "work-missing", -1, -1);
  EXPECT_NE(report.first->message.find("2 missing"), std::string::npos) << report.first->message;
  plan.header.work_units -= 3;
  expect_violation(verify_pass(plan, Pass::kForward), "work-extra", -1, -1);
}

// Two devices own block 0 (2 tokens, one head block): device 0 computes its only tile and sends
// the partial to device 1. Each store matches its expected output, but the expected outputs
// count the work unit twice.
Plan twice_owned_plan() {
  Plan plan;
  PlanHeader& h = plan.header;
  h.cluster = ClusterShape{1, 2};
  h.q_heads = 2;
  h.kv_heads = 2;
  h.head_dim = 8;
  h.softmax_scale = 1.0 / std::sqrt(8.0);
  h.head_block_size = 2;
  h.kv_heads_per_block = 2;
  h.total_tokens = 2;
  h.sequences = 1;
  h.token_blocks = 1;
  h.work_units = 1;
  const std::int64_t out_bytes = value_bytes(h, SlotKind::kOut, 2);
  const TileMask causal{2, 2, {0, 1, 2}, {0, 1, 0, 2}};
  for (std::int32_t d = 0; d < 2; ++d) {
    Program p;
    p.device = d;
    p.owned = {0};
    p.blocks = {BlockInfo{0, 0, 2, 0}};
    p.outputs = {ExpectedOutput{SlotKind::kOut, 0, 0, 1, 3}};
    p.slots = {Slot{SlotKind::kQ, 2}, Slot{SlotKind::kKV, 2}, Slot{SlotKind::kOut, 2}};
    p.masks = {causal};
    if (d == 0) {
      p.instructions = {Load{0, 0, 0},
                        Load{1, 0, 0},
                        AttnForward{{AttnRow{0, 2, false, {AttnKv{1, 0, kNoSlot, false}}}}},
                        Launch{0, {CommOp{CommOp::Direction::kSend, 1, 2, out_bytes}}},
                        Wait{0},
                        Store{2, SlotKind::kOut, 0, 0}};
    } else {
      p.instructions = {Launch{0, {CommOp{CommOp::Direction::kRecv, 0, 2, out_bytes}}}, Wait{0},
                        Store{2, SlotKind::kOut, 0, 0}};
    }
    p.instruction_stage.assign(p.instructions.size(), 0);
    plan.forward.push_back(std::move(p));
  }
  return plan;
}

TEST(Verifier, CatchesExpectedOutputsThatDoNotAddUp) {
  expect_violation(verify_pass(twice_owned_plan(), Pass::kForward), "output-total", -1, -1);
}

TEST(Verifier, CatchesStaticMistakes) {
  const Plan plan = make_plan(two_devices());
  const auto broken = [&](auto&& change) {
    Plan copy = plan;
    change(program_of(copy, Pass::kForward, 0));
    return verify_pass(copy, Pass::kForward);
  };
  expect_violation(broken([](Program& p) { erase(p, nth<Store>(p)); }), "output-missing", 0, -1);
  expect_violation(
      broken([](Program& p) { insert(p, nth<Store>(p), p.instructions[nth<Store>(p)]); }),
      "output-stored-twice", 0, static_cast<std::int64_t>(nth<Store>(plan.forward[0]) + 1));
  expect_violation(broken([](Program& p) { get<Store>(p, nth<Store>(p)).head_block = 5; }),
                   "output-unexpected", 0, static_cast<std::int64_t>(nth<Store>(plan.forward[0])));
  expect_violation(broken([](Program& p) { get<Load>(p, 0).block = 1; }), "not-owned", 0, 0);
  expect_violation(broken([](Program& p) { get<Launch>(p, nth<Launch>(p, 1)).id = 2; }),
                   "launch-order", 0, static_cast<std::int64_t>(nth<Launch>(plan.forward[0], 1)));
  expect_violation(broken([](Program& p) { get<Wait>(p, nth<Wait>(p)).launch = 1; }),
                   "wait-invalid", 0, static_cast<std::int64_t>(nth<Wait>(plan.forward[0])));
  expect_violation(broken([](Program& p) { erase(p, nth<Wait>(p, 4)); }), "launch-not-waited", 0,
                   static_cast<std::int64_t>(nth<Launch>(plan.forward[0], 4)));
  expect_violation(broken([](Program& p) { p.instructions[3] = AttnBackward{}; }), "wrong-pass", 0,
                   3);
  expect_violation(broken([](Program& p) {
                     get<Load>(p, 0).slot = get<AttnForward>(p, nth<AttnForward>(p)).rows[0].out;
                   }),
                   "slot-kind", 0, 0);
}

// --- Values kept from the forward pass ----------------------------------------------------------

TEST(Verifier, AcceptsKvKeptFromTheForwardPass) {
  const VerifyReport report = verify(testing::sample_plan_with_kept_kv());
  EXPECT_TRUE(report.ok) << describe(report);
  // Device 0 no longer sends the kv of block 0 in the backward pass.
  EXPECT_EQ(report.backward.messages, verify(testing::sample_plan()).backward.messages - 1);
}

TEST(Verifier, CatchesKeptValuesThatDoNotMatch) {
  const Plan plan = testing::sample_plan_with_kept_kv();
  const auto broken = [&](Pass pass, std::int32_t device, auto&& change) {
    Plan copy = plan;
    change(program_of(copy, pass, device));
    return verify(copy);
  };
  constexpr std::size_t keep = 6;  // forward device 1: Keep{3, 0, 0}
  constexpr auto keep_at = static_cast<std::int64_t>(keep);
  // The two passes disagree on what is kept.
  expect_violation(broken(Pass::kBackward, 1, [](Program& p) { p.kept.clear(); }), "kept-mismatch",
                   1, -1);
  // A keep of a value the program does not list, a second keep, and none at all.
  expect_violation(
      broken(Pass::kForward, 1, [&](Program& p) { get<Keep>(p, keep).head_block = 1; }),
      "kept-unknown", 1, keep_at);
  expect_violation(broken(Pass::kForward, 1,
                          [&](Program& p) {
                            insert(p, keep + 1, Keep{3, 0, 0});
                          }),
                   "kept-twice", 1, keep_at + 1);
  expect_violation(broken(Pass::kForward, 1, [&](Program& p) { erase(p, keep); }), "kept-missing",
                   1, -1);
  // A keep of a slot holding another value, before the value arrives, and in the wrong pass.
  expect_violation(broken(Pass::kForward, 1, [&](Program& p) { get<Keep>(p, keep).slot = 2; }),
                   "value-mismatch", 1, keep_at);
  expect_violation(broken(Pass::kForward, 1,
                          [&](Program& p) {
                            erase(p, keep);
                            insert(p, 1, Keep{3, 0, 0});
                          }),
                   "use-before-arrival", 1, 1);
  expect_violation(broken(Pass::kBackward, 1,
                          [](Program& p) {
                            p.instructions[0] = Keep{3, 0, 0};
                          }),
                   "wrong-pass", 1, 0);
  // A restore of a value not kept, and into a slot that holds one.
  expect_violation(broken(Pass::kBackward, 1, [](Program& p) { get<Restore>(p, 0).block = 1; }),
                   "kept-unknown", 1, 0);
  expect_violation(broken(Pass::kBackward, 1,
                          [](Program& p) {
                            const Instruction restore = p.instructions[0];
                            erase(p, 0);
                            insert(p, 3, restore);  // after Load{2, 1, 0} of slot 2
                            get<Restore>(p, 3).slot = 2;
                          }),
                   "slot-live", 1, 3);
  // Kept values must be received kv values listed once, in order.
  expect_violation(broken(Pass::kForward, 1,
                          [](Program& p) {
                            p.kept.push_back({SlotKind::kKV, 1, 0});
                          }),
                   "structure", 1, -1);  // block 1 is owned
}

// --- Broken structure ------------------------------------------------------------------------

TEST(Verifier, ReportsBrokenStructureWithoutCrashing) {
  const Plan plan = make_plan(two_devices());
  const auto expect_structure = [&](auto&& change, std::int32_t device, std::int64_t instruction) {
    Plan copy = plan;
    change(copy);
    for (const VerifyReport& report : {verify_pass(copy, Pass::kForward), verify(copy)}) {
      expect_violation(report, "structure", device, instruction);
    }
  };
  const auto forward0 = [](Plan& p) -> Program& { return p.forward[0]; };
  const std::int64_t attention = static_cast<std::int64_t>(nth<AttnForward>(plan.forward[0]));
  const std::int64_t launch = static_cast<std::int64_t>(nth<Launch>(plan.forward[0]));
  expect_structure([&](Plan& p) { get<Load>(forward0(p), 0).slot = 1000; }, 0, 0);
  expect_structure([&](Plan& p) { get<Load>(forward0(p), 0).slot = -3; }, 0, 0);
  expect_structure([&](Plan& p) { get<Load>(forward0(p), 0).head_block = 2; }, 0, 0);
  expect_structure(
      [&](Plan& p) {
        get<AttnForward>(forward0(p), static_cast<std::size_t>(attention)).rows[0].out = 99;
      },
      0, attention);
  expect_structure(
      [&](Plan& p) {
        get<AttnForward>(forward0(p), static_cast<std::size_t>(attention)).rows[0].kv[0].mask = 7;
      },
      0, attention);
  expect_structure(
      [&](Plan& p) { get<Launch>(forward0(p), static_cast<std::size_t>(launch)).ops[0].peer = 5; },
      0, launch);
  expect_structure(
      [&](Plan& p) { get<Launch>(forward0(p), static_cast<std::size_t>(launch)).ops[0].peer = 0; },
      0, launch);
  expect_structure(
      [&](Plan& p) { get<Launch>(forward0(p), static_cast<std::size_t>(launch)).ops[0].slot = 64; },
      0, launch);
  expect_structure([&](Plan& p) { forward0(p).instructions.push_back(Free{{-1}}); }, 0, -1);
  expect_structure([&](Plan& p) { forward0(p).instruction_stage[2] = 99; }, 0, 2);
  expect_structure([&](Plan& p) { forward0(p).device = 1; }, 0, -1);
  expect_structure([&](Plan& p) { forward0(p).pass = Pass::kBackward; }, 0, -1);
  expect_structure([&](Plan& p) { forward0(p).stages = 0; }, 0, -1);
  expect_structure([&](Plan& p) { std::swap(forward0(p).blocks[0], forward0(p).blocks[1]); }, 0,
                   -1);
  expect_structure([&](Plan& p) { forward0(p).masks[0].intervals[1] = 9; }, 0, -1);
  expect_structure([&](Plan& p) { forward0(p).masks[0].row_offsets.pop_back(); }, 0, -1);
  expect_structure([&](Plan& p) { forward0(p).slots[0].kind = static_cast<SlotKind>(17); }, 0, -1);
  expect_structure([&](Plan& p) { forward0(p).owned.push_back(1); }, 0, -1);
  expect_structure([&](Plan& p) { p.forward.pop_back(); }, -1, -1);
  expect_structure([&](Plan& p) { p.header.head_block_size = 3; }, -1, -1);
  expect_structure([&](Plan& p) { p.header.cluster.nodes = 1 << 30; }, -1, -1);
  expect_structure([&](Plan& p) { p.header.token_blocks = 2; }, 0, -1);

  // A default Plan and one of empty Programs are reports too, not crashes.
  EXPECT_FALSE(verify(Plan{}).ok);
  Plan empty;
  empty.header = plan.header;
  empty.forward.resize(2);
  empty.backward.resize(2);
  EXPECT_FALSE(verify(empty).ok);
}

// Random damage anywhere in a plan: every result is a report with a rule and a one-line message,
// never a crash, a hang or a sanitizer finding.
class Damage {
 public:
  explicit Damage(std::uint64_t seed) : rng_(seed) {}

  void apply(Plan& plan) {
    const auto kind = rng_.uniform_int(0, 9);
    if (kind == 0) return header(plan.header);
    std::vector<Program>& programs = rng_.uniform_int(0, 1) == 0 ? plan.forward : plan.backward;
    if (programs.empty()) return;
    Program& program = programs[pick(programs.size())];
    if (kind == 1) return tables(program);
    if (kind == 2 || program.instructions.empty()) return reorder(program);
    std::visit([&](auto& instruction) { change(instruction, program); },
               program.instructions[pick(program.instructions.size())]);
  }

 private:
  std::size_t pick(std::size_t size) {
    return static_cast<std::size_t>(rng_.uniform_int(0, static_cast<std::int64_t>(size) - 1));
  }
  // Near the edges of [0, size) mostly, sometimes far outside.
  std::int32_t value(std::size_t size) {
    const auto n = static_cast<std::int32_t>(size);
    const std::int32_t choices[] = {-1, 0, 1, n - 1, n, n + 1, 1 << 30, -(1 << 30)};
    if (rng_.uniform_int(0, 3) == 0) return choices[pick(std::size(choices))];
    return static_cast<std::int32_t>(rng_.uniform_int(0, std::max(n, 1)));
  }
  SlotKind kind() { return static_cast<SlotKind>(rng_.uniform_int(0, kSlotKindCount)); }

  void header(PlanHeader& h) {
    switch (rng_.uniform_int(0, 6)) {
      case 0:
        h.q_heads = value(8);
        break;
      case 1:
        h.kv_heads = value(4);
        break;
      case 2:
        h.head_block_size = value(4);
        break;
      case 3:
        h.kv_heads_per_block = value(2);
        break;
      case 4:
        h.token_blocks = value(8);
        break;
      case 5:
        h.work_units = value(40);
        break;
      default:
        h.cluster.devices_per_node = value(3);
        break;
    }
  }
  void tables(Program& p) {
    switch (rng_.uniform_int(0, 8)) {
      case 0:
        p.device = value(3);
        break;
      case 1:
        p.stages = value(5);
        break;
      case 2:
        if (!p.slots.empty()) p.slots[pick(p.slots.size())] = Slot{kind(), value(5)};
        break;
      case 3:
        if (!p.blocks.empty()) {
          BlockInfo& info = p.blocks[pick(p.blocks.size())];
          (rng_.uniform_int(0, 1) == 0 ? info.tokens : info.id) = value(5);
        }
        break;
      case 4:
        if (!p.masks.empty()) {
          TileMask& mask = p.masks[pick(p.masks.size())];
          std::vector<std::int32_t>& field =
              rng_.uniform_int(0, 1) == 0 ? mask.intervals : mask.row_offsets;
          if (!field.empty()) field[pick(field.size())] = value(5);
        }
        break;
      case 5:
        if (!p.outputs.empty()) {
          ExpectedOutput& output = p.outputs[pick(p.outputs.size())];
          output.kind = kind();
          output.contributions = value(5);
        }
        break;
      case 6:
        p.owned.push_back(value(5));
        break;
      case 7:
        if (p.kept.empty() || rng_.uniform_int(0, 2) == 0) {
          p.kept.push_back({kind(), value(5), value(2)});
        } else {
          KeptValue& kept = p.kept[pick(p.kept.size())];
          (rng_.uniform_int(0, 1) == 0 ? kept.block : kept.head_block) = value(5);
        }
        break;
      default:
        p.instruction_stage.push_back(0);
        break;
    }
  }
  void reorder(Program& p) {
    if (p.instructions.empty()) return;
    const std::size_t i = pick(p.instructions.size());
    const std::size_t j = pick(p.instructions.size());
    switch (rng_.uniform_int(0, 2)) {
      case 0:
        erase(p, i);
        break;
      case 1:
        insert(p, i, p.instructions[j]);
        break;
      default:
        std::swap(p.instructions[i], p.instructions[j]);
        break;
    }
  }

  void change(Load& load, const Program& p) {
    (rng_.uniform_int(0, 2) == 0   ? load.slot
     : rng_.uniform_int(0, 1) == 0 ? load.block
                                   : load.head_block) = value(p.slots.size());
  }
  void change(Store& store, const Program& p) {
    if (rng_.uniform_int(0, 1) == 0) store.kind = kind();
    (rng_.uniform_int(0, 1) == 0 ? store.slot : store.head_block) = value(p.slots.size());
  }
  void change(Launch& launch, const Program& p) {
    if (launch.ops.empty() || rng_.uniform_int(0, 4) == 0) {
      launch.id = value(4);
      return;
    }
    CommOp& op = launch.ops[pick(launch.ops.size())];
    switch (rng_.uniform_int(0, 3)) {
      case 0:
        op.peer = value(3);
        break;
      case 1:
        op.slot = value(p.slots.size());
        break;
      case 2:
        op.bytes += rng_.uniform_int(-64, 64);
        break;
      default:
        op.direction = op.direction == CommOp::Direction::kSend ? CommOp::Direction::kRecv
                                                                : CommOp::Direction::kSend;
        break;
    }
  }
  void change(Wait& wait, const Program&) { wait.launch = value(5); }
  void change(AttnForward& attention, const Program& p) { change(attention.rows, p); }
  void change(AttnBackward& attention, const Program& p) { change(attention.rows, p); }
  void change(std::vector<AttnRow>& rows, const Program& p) {
    if (rows.empty()) return;
    AttnRow& row = rows[pick(rows.size())];
    const auto field = rng_.uniform_int(0, 6);
    if (field < 3 || row.kv.empty()) {
      if (field == 0) row.accumulate = !row.accumulate;
      (field == 1 ? row.q : row.out) = value(p.slots.size());
      return;
    }
    AttnKv& entry = row.kv[pick(row.kv.size())];
    if (field == 3) entry.kv = value(p.slots.size());
    if (field == 4) entry.mask = value(p.masks.size());
    if (field == 5) entry.dkv = value(p.slots.size());
    if (field == 6) entry.dkv_accumulate = !entry.dkv_accumulate;
  }
  void change(Merge& merge, const Program& p) {
    (rng_.uniform_int(0, 1) == 0 ? merge.dst : merge.src) = value(p.slots.size());
  }
  void change(Sum& sum, const Program& p) {
    (rng_.uniform_int(0, 1) == 0 ? sum.dst : sum.src) = value(p.slots.size());
  }
  void change(Free& free, const Program& p) {
    if (free.slots.empty()) return;
    free.slots[pick(free.slots.size())] = value(p.slots.size());
  }
  template <typename KeptCopy>
  void change_kept_copy(KeptCopy& op, const Program& p) {
    (rng_.uniform_int(0, 2) == 0   ? op.slot
     : rng_.uniform_int(0, 1) == 0 ? op.block
                                   : op.head_block) = value(p.slots.size());
  }
  void change(Keep& keep, const Program& p) { change_kept_copy(keep, p); }
  void change(Restore& restore, const Program& p) { change_kept_copy(restore, p); }

  Rng rng_;
};

TEST(Verifier, ReportsRandomDamageWithoutCrashing) {
  const Plan valid[] = {make_plan(two_devices()), make_plan(three_devices()),
                        testing::sample_plan()};
  Damage damage(20240601);
  std::map<std::string, int> rules;
  for (int trial = 0; trial < 1500; ++trial) {
    Plan plan = valid[trial % 3];
    const int changes = 1 + trial % 3;
    for (int c = 0; c < changes; ++c) damage.apply(plan);
    const VerifyReport report = verify(plan);
    if (report.ok) continue;
    const Violation& v = *report.first;
    ++rules[v.rule];
    EXPECT_FALSE(v.rule.empty());
    EXPECT_TRUE(v.message.rfind("device ", 0) == 0 || v.message.rfind("plan ", 0) == 0)
        << v.message;
    EXPECT_EQ(v.message.find('\n'), std::string::npos);
  }
  // The damage reaches the simulation, not only the static checks.
  EXPECT_GT(rules.size(), 12u);
}

}  // namespace
}  // namespace dcp

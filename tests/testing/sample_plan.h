// SPDX-License-Identifier: Apache-2.0
// A small hand-built Plan that uses every instruction, for tests of files, JSON and checks.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "dcp/program/program.h"

namespace dcp::testing {

// Two devices on one node, q_heads 2, kv_heads 1 (GQA group 2), head blocks of 1 q head, so two
// q head blocks read the one kv head block 0. Head dim 8, bf16 storage, partials travelling in
// `partial_dtype` (fp32 or bf16; the messages' byte counts follow it).
//
// Sequence 0: 8 tokens, causal, blocks 0 = tokens [0, 4) on device 0 and 1 = [4, 8) on device 1.
// Its tiles: (0, 0) causal diagonal (10 pairs), (1, 0) full (16 pairs), (1, 1) causal diagonal
// (10 pairs); times 2 head blocks = 6 work units. Sequence 1: 2 padding tokens whose rows attend
// to nothing (a user mask), block 2 on device 0: its outputs have no contributions and are
// stored from kNoSlot.
//
// Device 0 computes tile (0, 0) and sends the kv of block 0 to device 1, which computes tiles
// (1, 1) while the kv arrives, then (1, 0). Forward: device 1 merges the remote partial once with
// Merge (head block 0) and once through accumulate (head block 1). Backward: device 1 sends its
// dk, dv contribution to block 0 back to device 0, which adds it with Sum; the two head blocks'
// dk, dv of one kv block accumulate through dkv_accumulate. Instructions after a Program's last
// compute stage (its waits, merges, sums and stores) are in the epilogue, stage `stages`.
inline Plan sample_plan(DType partial_dtype = DType::kFp32) {
  Plan plan;
  PlanHeader& h = plan.header;
  h.strategy = "dcp";
  h.seed = 7;
  h.cluster = ClusterShape{1, 2};
  h.q_heads = 2;
  h.kv_heads = 1;
  h.head_dim = 8;
  h.head_block_size = 1;
  h.kv_heads_per_block = 1;
  h.dtype = DType::kBf16;
  h.partial_dtype = partial_dtype;
  h.softmax_scale = 1.0 / std::sqrt(8.0);
  h.total_tokens = 10;
  h.sequences = 2;
  h.token_blocks = 3;
  h.work_units = 6;

  const BlockInfo block0{0, 0, 4, 0};
  const BlockInfo block1{1, 0, 4, 4};
  const BlockInfo block2{2, 1, 2, 0};
  // Row r of a diagonal causal tile attends to keys [0, r + 1).
  const TileMask causal{4, 4, {0, 1, 2, 3, 4}, {0, 1, 0, 2, 0, 3, 0, 4}};
  const std::int64_t kv_bytes = value_bytes(h, SlotKind::kKV, 4);
  const std::int64_t dkv_bytes = value_bytes(h, SlotKind::kDKV, 4);
  using D = CommOp::Direction;
  const auto slots = [](std::vector<SlotKind> kinds) {
    std::vector<Slot> out;
    for (const SlotKind kind : kinds) out.push_back(Slot{kind, 4});
    return out;
  };
  // One forward row against one kv entry, and one backward row with its dk, dv destination.
  const auto fwd = [](SlotId q, SlotId out, bool accumulate, SlotId kv, MaskId mask) {
    return AttnRow{q, out, accumulate, {AttnKv{kv, mask, kNoSlot, false}}};
  };
  const auto bwd = [](SlotId q, SlotId dq, bool accumulate, SlotId kv, MaskId mask, SlotId dkv,
                      bool dkv_accumulate) {
    return AttnRow{q, dq, accumulate, {AttnKv{kv, mask, dkv, dkv_accumulate}}};
  };

  {
    Program p;
    p.device = 0;
    p.pass = Pass::kForward;
    p.stages = 1;
    p.owned = {0, 2};
    p.blocks = {block0, block2};
    p.outputs = {{SlotKind::kOut, 0, 0, 1, 10},
                 {SlotKind::kOut, 0, 1, 1, 10},
                 {SlotKind::kOut, 2, 0, 0, 0},
                 {SlotKind::kOut, 2, 1, 0, 0}};
    // 0, 1: q of block 0 (head blocks 0, 1); 2: kv of block 0; 3, 4: o of block 0.
    p.slots = slots({SlotKind::kQ, SlotKind::kQ, SlotKind::kKV, SlotKind::kOut, SlotKind::kOut});
    p.masks = {causal};
    p.instructions = {
        Load{2, 0, 0},
        Launch{0, {CommOp{D::kSend, 1, 2, kv_bytes}}},
        Load{0, 0, 0},
        Load{1, 0, 1},
        AttnForward{{fwd(0, 3, false, 2, 0), fwd(1, 4, false, 2, 0)}},
        Store{3, SlotKind::kOut, 0, 0},
        Store{4, SlotKind::kOut, 0, 1},
        Store{kNoSlot, SlotKind::kOut, 2, 0},
        Store{kNoSlot, SlotKind::kOut, 2, 1},
        Free{{0, 1, 3, 4}},
        Wait{0},
        Free{{2}},
    };
    p.instruction_stage = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1};
    plan.forward.push_back(std::move(p));
  }
  {
    Program p;
    p.device = 1;
    p.pass = Pass::kForward;
    p.stages = 2;
    p.owned = {1};
    p.blocks = {block0, block1};
    p.outputs = {{SlotKind::kOut, 1, 0, 2, 26}, {SlotKind::kOut, 1, 1, 2, 26}};
    // 0, 1: q of block 1; 2: kv of block 1; 3: kv of block 0 (received); 4, 5: o of block 1;
    // 6: head block 0's partial o over block 0's keys.
    p.slots = slots({SlotKind::kQ, SlotKind::kQ, SlotKind::kKV, SlotKind::kKV, SlotKind::kOut,
                     SlotKind::kOut, SlotKind::kOut});
    p.masks = {causal};
    p.instructions = {
        Launch{0, {CommOp{D::kRecv, 0, 3, kv_bytes}}},
        Load{0, 1, 0},
        Load{1, 1, 1},
        Load{2, 1, 0},
        AttnForward{{fwd(0, 4, false, 2, 0), fwd(1, 5, false, 2, 0)}},
        Wait{0},
        AttnForward{{fwd(0, 6, false, 3, kFullTile), fwd(1, 5, true, 3, kFullTile)}},
        Merge{4, 6},
        Store{4, SlotKind::kOut, 1, 0},
        Store{5, SlotKind::kOut, 1, 1},
        Free{{0, 1, 2, 3, 4, 5, 6}},
    };
    p.instruction_stage = {0, 0, 0, 0, 0, 1, 1, 2, 2, 2, 2};
    plan.forward.push_back(std::move(p));
  }
  {
    Program p;
    p.device = 0;
    p.pass = Pass::kBackward;
    p.stages = 1;
    p.owned = {0, 2};
    p.blocks = {block0, block2};
    p.outputs = {{SlotKind::kDQ, 0, 0, 1, 10},  {SlotKind::kDQ, 0, 1, 1, 10},
                 {SlotKind::kDQ, 2, 0, 0, 0},   {SlotKind::kDQ, 2, 1, 0, 0},
                 {SlotKind::kDKV, 0, 0, 4, 52}, {SlotKind::kDKV, 2, 0, 0, 0}};
    // 0, 1: q, do, lse, delta of block 0; 2: kv of block 0; 3, 4: dq of block 0; 5: dk, dv of
    // block 0 from this device; 6: dk, dv of block 0 from device 1.
    p.slots = slots({SlotKind::kQGrad, SlotKind::kQGrad, SlotKind::kKV, SlotKind::kDQ,
                     SlotKind::kDQ, SlotKind::kDKV, SlotKind::kDKV});
    p.masks = {causal};
    p.instructions = {
        Load{2, 0, 0},
        Launch{0, {CommOp{D::kSend, 1, 2, kv_bytes}, CommOp{D::kRecv, 1, 6, dkv_bytes}}},
        Load{0, 0, 0},
        Load{1, 0, 1},
        AttnBackward{{bwd(0, 3, false, 2, 0, 5, false), bwd(1, 4, false, 2, 0, 5, true)}},
        Store{3, SlotKind::kDQ, 0, 0},
        Store{4, SlotKind::kDQ, 0, 1},
        Store{kNoSlot, SlotKind::kDQ, 2, 0},
        Store{kNoSlot, SlotKind::kDQ, 2, 1},
        Store{kNoSlot, SlotKind::kDKV, 2, 0},
        Free{{0, 1, 3, 4}},
        Wait{0},
        Sum{5, 6},
        Store{5, SlotKind::kDKV, 0, 0},
        Free{{2, 5, 6}},
    };
    p.instruction_stage = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    plan.backward.push_back(std::move(p));
  }
  {
    Program p;
    p.device = 1;
    p.pass = Pass::kBackward;
    p.stages = 2;
    p.owned = {1};
    p.blocks = {block0, block1};
    p.outputs = {
        {SlotKind::kDQ, 1, 0, 2, 26}, {SlotKind::kDQ, 1, 1, 2, 26}, {SlotKind::kDKV, 1, 0, 2, 20}};
    // 0, 1: q, do, lse, delta of block 1; 2: kv of block 1; 3: kv of block 0 (received); 4, 5:
    // dq of block 1; 6: dk, dv of block 1; 7: dk, dv contribution to block 0 (sent back).
    p.slots = slots({SlotKind::kQGrad, SlotKind::kQGrad, SlotKind::kKV, SlotKind::kKV,
                     SlotKind::kDQ, SlotKind::kDQ, SlotKind::kDKV, SlotKind::kDKV});
    p.masks = {causal};
    p.instructions = {
        Launch{0, {CommOp{D::kRecv, 0, 3, kv_bytes}}},
        Load{0, 1, 0},
        Load{1, 1, 1},
        Load{2, 1, 0},
        AttnBackward{{bwd(0, 4, false, 2, 0, 6, false), bwd(1, 5, false, 2, 0, 6, true)}},
        Store{6, SlotKind::kDKV, 1, 0},
        Wait{0},
        AttnBackward{
            {bwd(0, 4, true, 3, kFullTile, 7, false), bwd(1, 5, true, 3, kFullTile, 7, true)}},
        Launch{1, {CommOp{D::kSend, 0, 7, dkv_bytes}}},
        Store{4, SlotKind::kDQ, 1, 0},
        Store{5, SlotKind::kDQ, 1, 1},
        Wait{1},
        Free{{0, 1, 2, 3, 4, 5, 6, 7}},
    };
    p.instruction_stage = {0, 0, 0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 2};
    plan.backward.push_back(std::move(p));
  }
  return plan;
}

// sample_plan() with the kv of block 0 kept from the forward pass on device 1: its forward
// Program keeps it after the wait that brought it, and in the backward pass device 0 does not send
// it again; device 1 restores it instead of receiving it.
inline Plan sample_plan_with_kept_kv() {
  Plan plan = sample_plan();
  const KeptValue kv0{SlotKind::kKV, 0, 0};
  {
    Program& p = plan.forward[1];
    p.kept = {kv0};
    // After Wait{0} (instruction 5), in its stage.
    p.instructions.insert(p.instructions.begin() + 6, Keep{3, 0, 0});
    p.instruction_stage.insert(p.instruction_stage.begin() + 6, 1);
  }
  {
    Program& p = plan.backward[0];
    std::get<Launch>(p.instructions[1]).ops.erase(std::get<Launch>(p.instructions[1]).ops.begin());
  }
  {
    Program& p = plan.backward[1];
    p.kept = {kv0};
    p.instructions[0] = Restore{3, 0, 0};
    p.instructions.erase(p.instructions.begin() + 6);  // Wait{0}
    p.instruction_stage.erase(p.instruction_stage.begin() + 6);
    std::get<Launch>(p.instructions[7]).id = 0;
    std::get<Wait>(p.instructions[10]).launch = 0;
  }
  return plan;
}

}  // namespace dcp::testing

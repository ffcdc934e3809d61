// SPDX-License-Identifier: Apache-2.0
// The Program: what one device executes for one pass (forward or backward) of one batch.
//
// The Program is the waist of dcp: the planner and the static baselines produce Programs; the
// verifier, the simulator and the runtime read nothing else. A Program is self-contained: one rank
// can execute it without the global batch description. docs/plan_format.md describes the
// semantics of every field and instruction, and the binary file that stores a Plan.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/cluster.h"

namespace dcp {

enum class Pass : std::uint8_t { kForward, kBackward };
std::string_view to_string(Pass pass);

// What a slot holds. Head counts come from PlanHeader: h = head_block_size q heads, hk =
// kv_heads_per_block kv heads; t = the value's token count (at most the slot's capacity).
//   kQ      q            [t][h][d]                     storage dtype
//   kKV     k, v         [2][t][hk][d]                 storage dtype
//   kOut    o, lse       [t][h][d] + [h][t]            fp32, lse fp32
//   kQGrad  q, do, lse, delta = rowsum(do * o)
//                        [t][h][d] x 2 + [h][t] x 2    storage dtype, lse and delta fp32
//   kDQ     dq           [t][h][d]                     fp32
//   kDKV    dk, dv       [2][t][hk][d]                 fp32
// kQ, kKV and kQGrad are inputs; kOut, kDQ and kDKV are (partial) outputs, accumulated in fp32 in
// their slots (slot_bytes); between devices their o, dq, dk and dv travel in the partial dtype
// (value_bytes, narrows_partials).
enum class SlotKind : std::uint8_t { kQ, kKV, kOut, kQGrad, kDQ, kDKV };
inline constexpr int kSlotKindCount = 6;
std::string_view to_string(SlotKind kind);
bool is_output(SlotKind kind);
// Whether the value's head index is a q head block (else a kv head block).
bool uses_q_heads(SlotKind kind);

using SlotId = std::int32_t;
using LaunchId = std::int32_t;
using MaskId = std::int32_t;
inline constexpr SlotId kNoSlot = -1;
inline constexpr MaskId kFullTile = -1;

struct Slot {
  SlotKind kind = SlotKind::kQ;
  std::int32_t tokens = 0;  // capacity
  friend bool operator==(const Slot&, const Slot&) = default;
};

// A token block this Program reads or writes (owned or received). Blocks of one sequence share
// `seq`; `begin` is the block's first token within its sequence.
struct BlockInfo {
  BlockId id = 0;
  SeqIndex seq = 0;
  std::int32_t tokens = 0;
  TokenCount begin = 0;
  friend bool operator==(const BlockInfo&, const BlockInfo&) = default;
};

// The mask of one (q block, kv block) tile, relative to the tile: row r of the q block attends to
// the kv block's keys [begin, end) for each interval in intervals[row_offsets[r] ..
// row_offsets[r + 1]). Intervals of a row are sorted, disjoint, non-empty and inside [0,
// kv_tokens).
struct TileMask {
  std::int32_t q_tokens = 0;
  std::int32_t kv_tokens = 0;
  std::vector<std::int32_t> row_offsets;  // q_tokens + 1 entries
  std::vector<std::int32_t> intervals;    // pairs (begin, end)

  std::int64_t pairs() const;
  friend bool operator==(const TileMask&, const TileMask&) = default;
};

// Why `mask` breaks the rules above (q_tokens and kv_tokens at least 1, q_tokens + 1 monotone
// row offsets from 0 to the interval count, well-formed intervals), or nothing. Indexing a mask
// that passes is safe.
std::optional<std::string> tile_mask_problem(const TileMask& mask);

// A hash of the mask's integers, for finding equal masks (equal masks hash equal): the compiler
// keeps each distinct mask once, and the simulator prices each once.
std::uint64_t hash_value(const TileMask& mask);

// A value owned by this device that must be complete when the pass ends: its Store names it, and
// the verifier checks it gathered `contributions` work units of `pairs` unmasked (q, k) pairs
// (per head) in total.
struct ExpectedOutput {
  SlotKind kind = SlotKind::kOut;
  BlockId block = 0;
  std::int32_t head_block = 0;
  std::int32_t contributions = 0;
  std::int64_t pairs = 0;
  friend bool operator==(const ExpectedOutput&, const ExpectedOutput&) = default;
};

// --- Instructions ---------------------------------------------------------------------------

// Copies one value of this device's local tensors (the blocks it owns, see Program::owned) into a
// slot. A kQGrad load also computes delta = rowsum(do * o) from the local o and do.
struct Load {
  SlotId slot = 0;
  BlockId block = 0;
  std::int32_t head_block = 0;
  friend bool operator==(const Load&, const Load&) = default;
};

// Copies a complete output from a slot into this device's local output tensors (kOut: o and lse;
// kDQ: dq; kDKV: dk and dv), converting to the storage dtype. slot = kNoSlot writes the value of
// no contribution at all: o = 0 and lse = -inf, or zero gradients.
struct Store {
  SlotId slot = kNoSlot;
  SlotKind kind = SlotKind::kOut;
  BlockId block = 0;
  std::int32_t head_block = 0;
  friend bool operator==(const Store&, const Store&) = default;
};

struct CommOp {
  enum class Direction : std::uint8_t { kSend, kRecv };
  Direction direction = Direction::kSend;
  std::int32_t peer = 0;  // global device id
  SlotId slot = 0;
  std::int64_t bytes = 0;  // the value's size (PlanHeader::value_bytes)
  friend bool operator==(const CommOp&, const CommOp&) = default;
};

// Starts a group of sends and receives and returns at once. Launches of one device complete in
// the order they are issued (one communication stream); the n-th send from a to b matches the n-th
// receive on b from a. A sent slot must not change, and a received slot must not be touched,
// until the matching Wait.
struct Launch {
  LaunchId id = 0;  // 0, 1, 2, ... in issue order
  std::vector<CommOp> ops;
  friend bool operator==(const Launch&, const Launch&) = default;
};

// Blocks until every operation of the launch has completed.
struct Wait {
  LaunchId launch = 0;
  friend bool operator==(const Wait&, const Wait&) = default;
};

// One q value against a list of kv values.
struct AttnKv {
  SlotId kv = 0;
  MaskId mask = kFullTile;  // index into Program::masks, or kFullTile
  // Backward only: where this entry's dk, dv contribution goes, and whether it is added to what
  // that slot holds (else it overwrites it).
  SlotId dkv = kNoSlot;
  bool dkv_accumulate = false;
  friend bool operator==(const AttnKv&, const AttnKv&) = default;
};

struct AttnRow {
  SlotId q = 0;  // kQ forward, kQGrad backward
  // Forward: the kOut slot receiving the partial o, lse over these kv entries. Backward: the kDQ
  // slot receiving the dq contribution.
  SlotId out = 0;
  // Merge into (forward: by log-sum-exp) or add to (backward) the partial `out` holds, else
  // overwrite it.
  bool accumulate = false;
  std::vector<AttnKv> kv;
  friend bool operator==(const AttnRow&, const AttnRow&) = default;
};

// Blockwise attention over many (q, kv) tiles in one call; rows run in order. Forward: partial o
// and lse per row. Backward: dq per row and dk, dv per entry, from q, do, lse, delta.
struct AttnForward {
  std::vector<AttnRow> rows;
  friend bool operator==(const AttnForward&, const AttnForward&) = default;
};
struct AttnBackward {
  std::vector<AttnRow> rows;
  friend bool operator==(const AttnBackward&, const AttnBackward&) = default;
};

// dst = log-sum-exp merge of the partial outputs (o, lse) in dst and src, over disjoint key sets.
struct Merge {
  SlotId dst = 0;
  SlotId src = 0;
  friend bool operator==(const Merge&, const Merge&) = default;
};

// dst += src for partial gradients (kDQ or kDKV).
struct Sum {
  SlotId dst = 0;
  SlotId src = 0;
  friend bool operator==(const Sum&, const Sum&) = default;
};

// The slots' values are dead; the slots may be reused by later instructions.
struct Free {
  std::vector<SlotId> slots;
  friend bool operator==(const Free&, const Free&) = default;
};

// Forward only: the kv value (block, head_block) that `slot` holds goes into this device's kept
// tensor, at its place in Program::kept, for the backward pass (which then need not receive it
// again). Every value of Program::kept is kept exactly once. It costs nothing: executors receive
// a kept value straight into the kept tensor (runtime/lowering.h), which the verifier allows
// since only received values are kept.
struct Keep {
  SlotId slot = 0;
  BlockId block = 0;
  std::int32_t head_block = 0;
  friend bool operator==(const Keep&, const Keep&) = default;
};

// Backward only: `slot` holds the value (block, head_block) of Program::kept from the kept tensor
// the forward pass filled, like a Load of a block this device does not own. It costs nothing:
// executors read the value in the kept tensor while the slot holds it.
struct Restore {
  SlotId slot = 0;
  BlockId block = 0;
  std::int32_t head_block = 0;
  friend bool operator==(const Restore&, const Restore&) = default;
};

using Instruction = std::variant<Load, Store, Launch, Wait, AttnForward, AttnBackward, Merge, Sum,
                                 Free, Keep, Restore>;
std::string_view opcode_name(const Instruction& instruction);

// --- Program and Plan ------------------------------------------------------------------------

// A value received in the forward pass that this device keeps for the backward pass (kKV only).
// Its bytes lie in the device's kept tensor in Program::kept order (each at the place the lowering
// gives, runtime/lowering.h).
struct KeptValue {
  SlotKind kind = SlotKind::kKV;
  BlockId block = 0;
  std::int32_t head_block = 0;
  friend auto operator<=>(const KeptValue&, const KeptValue&) = default;
};

struct Program {
  std::int32_t device = 0;
  Pass pass = Pass::kForward;
  std::int32_t stages = 1;  // compute stages 0..stages-1
  // The blocks whose Q, K, V (and O, LSE, their gradients) live on this device, in the order of
  // the local tensors: local tensor rows are these blocks' tokens, concatenated.
  std::vector<BlockId> owned;
  std::vector<BlockInfo> blocks;  // every block referenced, sorted by id
  std::vector<ExpectedOutput> outputs;
  // The values the forward Program keeps for the backward Program of this device, sorted; the
  // same list in both (empty when the plan keeps nothing).
  std::vector<KeptValue> kept;
  std::vector<Slot> slots;
  std::vector<TileMask> masks;
  std::vector<Instruction> instructions;
  // The compute stage each instruction belongs to (for inspection and simulation), in
  // [0, stages]: `stages` marks the epilogue after the last compute stage (its waits, merges and
  // stores).
  std::vector<std::int32_t> instruction_stage;
  friend bool operator==(const Program&, const Program&) = default;
};

// What every Program of a plan shares.
// How a plan's partial outputs (o, dq, dk, dv) reach the device that owns their block, as its
// planner scheduled them:
//   kReduceInNode: partials made on several devices of one node are merged there and cross to the
//     owner's node once (dcp's own plans; the verifier's partial-recrossing rule holds the plan to
//     it).
//   kDirect: every contributing device sends its partial to the owner, across nodes or not (what
//     the all-to-all of Ulysses and TransformerEngine does; the static strategies).
enum class PartialRouting : std::uint8_t { kReduceInNode, kDirect };
inline constexpr std::size_t kPartialRoutingCount = 2;
std::string_view to_string(PartialRouting routing);

struct PlanHeader {
  std::string strategy;  // "dcp", "ring", ...
  std::uint64_t seed = 0;
  ClusterShape cluster;
  std::int32_t q_heads = 0;
  std::int32_t kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t head_block_size = 1;  // q heads per head block
  std::int32_t kv_heads_per_block = 1;
  DType dtype = DType::kBf16;
  // The dtype partial o, dq, dk and dv travel in between devices: fp32, or the storage dtype
  // (slots hold them in fp32 either way; value_bytes and slot_bytes).
  DType partial_dtype = DType::kFp32;
  PartialRouting partial_routing = PartialRouting::kDirect;
  double softmax_scale = 0;  // the effective scale
  std::int64_t total_tokens = 0;
  std::int32_t sequences = 0;
  std::int32_t token_blocks = 0;
  std::int64_t work_units = 0;  // per pass, over all devices

  friend bool operator==(const PlanHeader&, const PlanHeader&) = default;
  std::int32_t head_blocks() const { return q_heads / head_block_size; }
  std::int32_t kv_head_blocks() const { return kv_heads / kv_heads_per_block; }
};

// Bytes of one value of `kind` with `tokens` tokens as it travels between devices and as the
// plan prices it: inputs in the storage dtype, partials (o, dq, dk, dv) in the partial dtype,
// lse and delta in fp32.
std::int64_t value_bytes(const PlanHeader& header, SlotKind kind, std::int64_t tokens);
// Bytes of the same value held in a slot: partials are accumulated in fp32 whatever dtype they
// travel in (equal to value_bytes when the partial dtype is fp32).
std::int64_t slot_bytes(const PlanHeader& header, SlotKind kind, std::int64_t tokens);
// Whether partials travel narrower than they are held (the partial dtype is not fp32): a device
// converts a partial to the partial dtype before it sends it, and back after it receives it.
bool narrows_partials(const PlanHeader& header);
// Whether partials of a plan stored in `storage` may travel in `partial`: fp32 or `storage`.
bool partial_dtype_allowed(DType storage, DType partial);
// Per instruction, per op of a Launch (empty for other instructions): whether the runtime
// converts the partial that op carries between its fp32 slot and its wire buffer (narrows it
// before a send, widens it after a receive). A partial received, or sent before, and unchanged
// since is sent from its wire buffer as it is. All false when partials travel in fp32. The
// lowering (runtime) and the simulator both read it.
std::vector<std::vector<bool>> partial_conversions(const PlanHeader& header,
                                                   const Program& program);
// Of a partial value of `kind` (kOut, kDQ, kDKV) with `tokens` tokens: the fp32 elements that
// travel in the partial dtype; an o partial's lse (tokens x heads fp32) follows them unconverted.
std::int64_t partial_elements(const PlanHeader& header, SlotKind kind, std::int64_t tokens);

struct Plan {
  PlanHeader header;
  std::vector<Program> forward;   // indexed by device
  std::vector<Program> backward;  // indexed by device

  const std::vector<Program>& programs(Pass pass) const {
    return pass == Pass::kForward ? forward : backward;
  }
  friend bool operator==(const Plan&, const Plan&) = default;
};

}  // namespace dcp

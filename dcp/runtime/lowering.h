// SPDX-License-Identifier: Apache-2.0
// Lowering: one rank's Program turned, once per prepare, into the calls a device makes. Every
// slot is resolved to a byte offset in the pass's buffer table (arena), every value's size is
// known (the lowering tracks which value each slot holds through the instruction list), and each
// attention instruction becomes rows of int32-sized integer tables that a kernel reads in one
// launch: the CPU device turns them back into kernel rows, the Triton kernels read them as
// tensors. The tables' columns are in lowering_schema.h, which the binding exports to Python.
//
// A Program whose instructions are inconsistent (a value read before it is written, sizes that do
// not match, a store in the wrong pass) is refused here, with the instruction named, before any
// pass runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <variant>
#include <vector>

#include "dcp/program/program.h"
#include "dcp/runtime/local_layout.h"
#include "dcp/runtime/lowering_schema.h"

namespace dcp::runtime {

// A block's q, kv or q-gradient inputs copied from the local tensors into a slot.
struct LoadCall {
  SlotKind kind = SlotKind::kQ;  // kQ, kKV or kQGrad
  std::int64_t slot_offset = 0;
  std::int64_t token = 0;  // first local token of the block
  std::int32_t tokens = 0;
  std::int32_t head_block = 0;
};

// An output slot converted to the storage dtype into the local tensors.
struct StoreCall {
  SlotKind kind = SlotKind::kOut;  // kOut, kDQ or kDKV
  std::int64_t slot_offset = 0;
  std::int64_t token = 0;
  std::int32_t tokens = 0;
  std::int32_t head_block = 0;
};

struct TransferCall {
  bool send = true;
  // kKept: the offset is into the kept tensor, not the arena: a kv value the forward pass keeps
  // is received straight into its place there (and sent on from it), a restored one is sent from
  // it.
  BufferKind buffer = BufferKind::kArena;
  std::int32_t peer = 0;
  std::int64_t offset = 0;  // of the slot in the arena (or of the value in the kept tensor)
  std::int64_t bytes = 0;
};

// A partial moved between its fp32 slot and the wire buffer its transfer uses, when partials
// travel narrower than they are held (narrows_partials): before its send (narrow: fp32 to the
// partial dtype) or once its receive completes (widen). The first `elements` fp32 values are
// converted; `tail_bytes` after them (an o partial's lse, fp32) are copied as they are.
struct WireCall {
  bool narrow = true;
  std::int64_t slot_offset = 0;
  std::int64_t wire_offset = 0;
  std::int64_t elements = 0;
  std::int64_t tail_bytes = 0;
};

struct LaunchCall {
  LaunchId id = 0;
  std::vector<TransferCall> transfers;  // a partial's offset is its wire buffer's
  std::vector<WireCall> narrow;         // run before the transfers start (a partial received
                                        // or sent before, unchanged since, is not converted again)
  std::vector<WireCall> widen;          // run when the launch has completed
  // The first rows of `narrow` and `widen` in LoweredPass::wire_rows (a device may convert a
  // launch's partials in one call from there).
  std::int32_t narrow_row = 0, widen_row = 0;
};

struct WaitCall {
  LaunchId launch = 0;
};

// One attention instruction: its groups, rows [begin, end) of AttentionTables::q_groups (and, in
// the backward pass, of kv_groups), and the largest value sizes (a launch's grid).
struct AttentionCall {
  std::int32_t q_group_begin = 0, q_group_end = 0;
  std::int32_t kv_group_begin = 0, kv_group_end = 0;
  std::int32_t max_q_tokens = 0;
  std::int32_t max_kv_tokens = 0;
};

struct MergeCall {
  std::int64_t dst = 0, src = 0;  // kOut slots
  std::int32_t tokens = 0;
};

struct SumCall {
  std::int64_t dst = 0, src = 0;  // fp32 values of `elements` each
  std::int64_t elements = 0;
};

// A Free, a Store of no contribution (the outputs start as that value), a Keep or a Restore:
// nothing to run. A kept value is never copied: the forward pass receives it straight into its
// place in the kept tensor, and both passes read it there (TransferCall::buffer and
// kEntryKvBuffer say BufferKind::kKept) for as long as the Program's slot holds it.
struct NoCall {};

using LoweredCall = std::variant<LoadCall, StoreCall, LaunchCall, WaitCall, AttentionCall,
                                 MergeCall, SumCall, NoCall>;

// Integer tables of a pass's attention instructions (columns: lowering_schema.h).
//   entries   kEntryFields per entry. mask: -1 for a full tile, else the row start s in
//             mask_rows: row r's keys are [mask_intervals[2i], mask_intervals[2i + 1]) for i in
//             [mask_rows[s + r], mask_rows[s + r + 1]).
//   q_groups  kGroupFields per group: one output (kOut forward, kDQ backward) and the entries
//             contributing to it, members[member_begin, member_end), all reading the q value at
//             input_off. accumulate: merge into (forward) or add to (backward) what the output
//             holds; else overwrite it. A group may have no members (an overwriting one writes
//             the value of no contribution).
//   kv_groups the same for the backward's kDKV outputs (tokens: kv tokens), all members reading
//             the kv value at input_off (in the kept tensor where the members' kv_buffer says so).
struct AttentionTables {
  std::vector<std::int64_t> entries;
  std::vector<std::int64_t> q_groups;
  std::vector<std::int64_t> kv_groups;
  std::vector<std::int64_t> members;
  std::vector<std::int32_t> mask_rows;
  std::vector<std::int32_t> mask_intervals;

  std::size_t entry_count() const { return entries.size() / kEntryFields; }
  const std::int64_t* entry(std::size_t i) const { return entries.data() + i * kEntryFields; }
  const std::int64_t* q_group(std::size_t i) const { return q_groups.data() + i * kGroupFields; }
  const std::int64_t* kv_group(std::size_t i) const { return kv_groups.data() + i * kGroupFields; }
};

// A span of consecutive Loads and Stores of one stage (Frees and Stores of no contribution may
// lie between them). Its copies are independent of each other, so a device may run them in any
// order: a Load writes its own slot from the local inputs (a span never loads one slot twice), a
// Store its own rows and heads of a local output from an output slot, and no slot a Load writes
// is one a Store reads. The span's
// copies form one CopyRun per direction and slot kind (in order of first appearance), which a
// GPU device runs as one launch each. Every Load and Store of a pass is in exactly one span.
struct CopyRun {
  bool store = false;
  SlotKind kind = SlotKind::kQ;
  // Rows [row_begin, row_end) of copy_rows (kCopyFields each), one per copy, in instruction
  // order.
  std::int32_t row_begin = 0, row_end = 0;
  std::int32_t max_tokens = 0;  // the largest copy's tokens (a launch's grid)
};

struct CopySpan {
  std::int32_t begin = 0, end = 0;          // instructions [begin, end)
  std::int32_t run_begin = 0, run_end = 0;  // its runs in LoweredPass::copy_runs
};

// Consecutive Merges or Sums of one opcode and stage (Frees, Keeps and Restores may lie between
// them) that are independent: none reads or writes a slot another of the run writes. A device may
// run a run as one launch. (The simulator charges one kernel overhead per run of consecutive
// instructions of one opcode, dependent or not: its runs can be longer than these.) Every Merge
// and Sum is in exactly one run.
struct MemoryRun {
  using Kind = MemoryRunKind;
  Kind kind = Kind::kMerge;
  std::int32_t begin = 0, end = 0;  // instructions [begin, end)
  // Rows [row_begin, row_end) of memory_rows (kMemoryFields each), one per instruction in
  // order.
  std::int32_t row_begin = 0, row_end = 0;
  std::int64_t max_count = 0;  // the largest row's third field (a launch's grid)
};

struct LoweredPass {
  Pass pass = Pass::kForward;
  // The slots (slot_bytes each), then the wire buffers of the partials that travel narrower.
  std::int64_t arena_bytes = 0;
  // The kept tensor: Program::kept's values in order, each at a multiple of kSlotAlignment (the
  // forward pass receives them into it, the backward pass reads them there).
  std::int64_t kept_bytes = 0;
  std::vector<std::int64_t> slot_offsets;
  std::vector<LoweredCall> calls;  // one per instruction
  AttentionTables tables;
  // Every launch's narrow then widen calls, kWireFields per row.
  std::vector<std::int64_t> wire_rows;
  std::vector<CopySpan> copy_spans;
  std::vector<CopyRun> copy_runs;
  std::vector<std::int64_t> copy_rows;
  std::vector<std::int32_t> span_starting;  // per instruction: the copy span it begins, or -1
  std::vector<MemoryRun> memory_runs;
  std::vector<std::int64_t> memory_rows;
  std::vector<std::int32_t> memory_run_starting;  // per instruction: the run it begins, or -1
};

// The rows of one of `pass`'s tables (kLoweredTables names them and their columns).
const std::vector<std::int64_t>& lowered_rows(const LoweredPass& pass, LoweredTable table);

// Lowers `program` (already structurally checked) for the rank whose local tensors are `layout`.
// Throws Error naming the instruction if the Program's values are inconsistent.
LoweredPass lower_pass(const PlanHeader& header, const Program& program, const LocalLayout& layout);

}  // namespace dcp::runtime

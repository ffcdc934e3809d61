// SPDX-License-Identifier: Apache-2.0
// The plan verifier: symbolic execution of every device's Program of a pass, checking each rule.
//
// The verifier executes the Programs of one pass together on symbolic values instead of tensors.
// A slot holds at most one value: an input (q, kv or qgrad of one block and head block) or a
// partial output (out, dq or dkv of one block and head block) together with the set of work units
// (q block, kv block, q head block) it gathered and their unmasked (q, k) pairs. Sends and
// receives are matched as the runtime matches them (per device pair, n-th to n-th, launches of a
// device completing in issue order), so a wrong count, size, order or slot shows up as a named
// violation instead of a hang or wrong numbers at run time.
//
// It never throws for a bad Plan and never indexes out of bounds: whatever is malformed is
// reported as a violation. It stops at the first violation of a pass.
//
// Order. The static checks run first, over devices in order and each device's instructions in
// order; then the simulation runs the devices round-robin in device order, each until it blocks
// at a Wait or ends; then the end-of-pass checks run. The first violation in that order is the
// one reported, so the same Plan always gives the same report. `verify` checks the forward pass,
// then the backward pass.
//
// Cost: linear in instructions, attention entries and communication ops, plus the merges and sums
// (each linear in the units of its operands). Duplicate work is looked up per attention row (one
// small hash table per (q block, head block)), so the entries of a row stay in the cache.
//
// Rules (Violation::rule):
//  Static, checked before the simulation:
//   structure            the plan cannot be executed as written: header fields (heads, head
//                        blocks, kv heads per block, token blocks, cluster shape), program count,
//                        program device or pass, stages, instruction_stage (size, values outside
//                        [0, stages]), block table (ids sorted and in [0, token_blocks), seq,
//                        tokens), owned blocks (in the table, once), masks (row offsets and
//                        sorted, disjoint, non-empty intervals inside the tile), slots (kind,
//                        capacity), expected outputs (head block, counts, listed once), slot,
//                        mask, peer, direction and head block ids out of range, a send to itself,
//                        a forward dkv or a missing backward dkv, merging or summing a slot into
//                        itself
//   wrong-pass           an opcode of the other pass (attn_bwd or sum in forward, attn_fwd or
//                        merge in backward), or a store or expected output of a kind that is not
//                        an output of the pass (forward: out; backward: dq, dkv)
//   slot-kind            an operand slot of the wrong kind: a load into anything but q and kv
//                        (forward) or qgrad and kv (backward); attention q, out, kv and dkv slots
//                        not q/qgrad, out/dq, kv, dkv; a store slot not of the stored kind; merge
//                        operands not out; sum operands not both dq or both dkv
//   not-owned            a load, store or expected output of a block the device does not own
//   launch-order         launch ids not 0, 1, 2, ... in issue order
//   wait-invalid         a wait for a launch not yet issued or already waited
//   launch-not-waited    a launch with no wait after it
//   output-unexpected    a store of a value the program does not list in `outputs`
//   output-stored-twice  two stores of one expected output
//   output-missing       an expected output that no store writes
//   kept-mismatch        the forward and backward Programs of a device list different kept
//                        values (the kept list itself must be received kv values of the block
//                        table, sorted, once each: else structure)
//   kept-unknown         a keep or restore of a value not in the Program's kept list (a keep in
//                        the backward pass or a restore in the forward pass: wrong-pass)
//   kept-twice           a value kept a second time in the forward pass
//   kept-missing         a kept value that the forward Program never keeps
//  Simulation:
//   slot-empty           reading, sending or freeing a slot with no value
//   slot-live            a new value (load, restore, non-accumulating attention output, receive)
//   for a
//                        slot that already holds one
//   slot-in-flight       writing, accumulating or merging into, reloading or freeing a slot whose
//                        send has not been waited
//   use-before-arrival   reading, writing, sending or freeing a slot whose receive has not been
//                        waited
//   slot-capacity        a load or attention output with more tokens than the slot holds
//   value-mismatch       an accumulate, merge, sum or store whose operands are of different
//                        blocks or head blocks; a keep whose slot holds another value
//   seq-mismatch         a q and a kv block of different sequences in one attention entry
//   head-mismatch        a kv value of another kv head block than the one the q head block reads
//   mask-shape           a tile mask whose q or kv token count differs from the blocks'
//   duplicate-work       a work unit computed a second time in the pass (on any device), or a
//                        merge or sum of partials sharing a work unit
//   send-bytes           a send whose byte count is not value_bytes of the value
//   send-recv-bytes      a send and its matching receive with different byte counts
//   send-recv-kind       a received value whose kind differs from the receiving slot's, or with
//                        more tokens than it holds
//   block-table          a received value of a block missing from the receiver's block table, or
//                        described differently there
//   output-incomplete    a store whose contributions or pairs differ from its expected output
//   partial-recrossing   in a plan whose header routes partials kReduceInNode, a partial output
//                        (out, dq or dkv of one block and head block) leaving one node a second
//                        time: partials made on several devices of a node are reduced there and
//                        cross once. Static strategies move what their systems move (Ulysses
//                        returns every replica's dk, dv by all-to-all)
//   unmatched            when no device can move: a device pair whose sends and receives differ
//                        in number, at the first op without counterpart
//   deadlock             when no device can move and the counts match: every unfinished device
//                        waits for a launch that cannot complete
//  End of the pass:
//   work-missing         fewer distinct work units computed than header.work_units
//   work-extra           more distinct work units computed than header.work_units
//   output-total         the expected outputs of a kind do not add up to header.work_units
//                        contributions (a value expected by two devices, say)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dcp/program/model_plan.h"
#include "dcp/program/program.h"

namespace dcp {

struct Violation {
  std::int32_t device = -1;  // -1 for the plan header or the pass as a whole
  Pass pass = Pass::kForward;
  std::int64_t instruction = -1;  // -1 if not tied to one instruction
  std::string rule;               // a stable id from the list above
  // One line, complete on its own: the device, pass, instruction index and opcode, and the
  // slots, peers and values involved.
  std::string message;
};

// One pass's figures. The counts after `instructions` cover what was simulated: all of the pass
// when it is ok, up to the violation otherwise.
struct PassSummary {
  std::int32_t devices = 0;
  std::int64_t instructions = 0;  // in the pass's Programs
  std::int64_t work_units = 0;    // distinct (q block, kv block, head block) computed
  std::int64_t pairs = 0;         // unmasked (q, k) pairs of those work units, per head
  std::int64_t messages = 0;      // matched send-receive pairs
  std::int64_t bytes_sent = 0;
  std::int64_t outputs_stored = 0;
};

struct VerifyReport {
  bool ok = true;
  std::optional<Violation> first;  // the first violation found
  PassSummary forward;
  PassSummary backward;
};

// Verifies both passes; `first` is the forward pass's violation if it has one.
VerifyReport verify(const Plan& plan);
// Verifies one pass; the other pass's summary stays empty.
VerifyReport verify_pass(const Plan& plan, Pass pass);

// A model plan: every kind's plan verified (both passes), then whether the kinds share one token
// placement (kinds_disagreement; rule `kind-placement`, device -1), checked only when every kind
// is ok. `first` is the first kind's violation in kind order, then the placement's.
struct KindVerifyReport {
  std::string name;
  std::int32_t layers = 1;
  VerifyReport report;
};
struct ModelVerifyReport {
  bool ok = true;
  std::optional<Violation> first;
  std::string first_kind;  // the kind of `first`; empty for kind-placement
  std::vector<KindVerifyReport> kinds;
};
ModelVerifyReport verify(const ModelPlan& plan);

// The violation as one line: its message and rule, e.g. "device 3 forward instruction 17 (merge):
// slot 5 holds out(block 12, head 1) ... [use-before-arrival]".
std::string describe(const Violation& violation);
// One line: "ok" or the first violation, then each verified pass's figures.
std::string describe(const VerifyReport& report);
// One line per kind ("kind 'local' (40 layers): ok; forward: ..."), then the placement's fault.
std::string describe(const ModelVerifyReport& report);

}  // namespace dcp

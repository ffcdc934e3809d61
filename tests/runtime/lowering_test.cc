// SPDX-License-Identifier: Apache-2.0
// Lowering on the hand-built sample plan: slot offsets, the attention tables (groups per output,
// members, masks) and the refusal of inconsistent Programs with the instruction named.
#include "dcp/runtime/lowering.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <string_view>
#include <tuple>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "tests/runtime/run_fixtures.h"
#include "tests/testing/sample_plan.h"

namespace dcp {
namespace {

runtime::LoweredPass lower(const Plan& plan, Pass pass, std::int32_t device) {
  const Program& program = plan.programs(pass)[static_cast<std::size_t>(device)];
  return runtime::lower_pass(plan.header, program, runtime::local_layout(plan.header, program));
}

std::vector<std::int64_t> row(const std::vector<std::int64_t>& table, std::size_t i, int fields) {
  return {table.begin() + static_cast<std::ptrdiff_t>(i) * fields,
          table.begin() + static_cast<std::ptrdiff_t>(i + 1) * fields};
}

TEST(Lowering, SlotsGetAlignedOffsetsAndLoadsTheirLocalTokens) {
  const Plan plan = testing::sample_plan();
  const runtime::LoweredPass pass = lower(plan, Pass::kForward, 0);
  ASSERT_EQ(pass.slot_offsets.size(), 5u);
  for (std::size_t i = 1; i < pass.slot_offsets.size(); ++i) {
    EXPECT_EQ(pass.slot_offsets[i] % runtime::kSlotAlignment, 0);
    EXPECT_GT(pass.slot_offsets[i], pass.slot_offsets[i - 1]);
  }
  EXPECT_GE(pass.arena_bytes,
            pass.slot_offsets.back() + value_bytes(plan.header, SlotKind::kOut, 4));
  ASSERT_EQ(pass.calls.size(), plan.forward[0].instructions.size());
  const auto& load = std::get<runtime::LoadCall>(pass.calls[3]);  // Load{1, block 0, head block 1}
  EXPECT_EQ(load.kind, SlotKind::kQ);
  EXPECT_EQ(load.slot_offset, pass.slot_offsets[1]);
  EXPECT_EQ(load.token, 0);
  EXPECT_EQ(load.tokens, 4);
  EXPECT_EQ(load.head_block, 1);
  // Stores of no contribution and frees run nothing.
  EXPECT_TRUE(std::holds_alternative<runtime::NoCall>(pass.calls[7]));
  EXPECT_TRUE(std::holds_alternative<runtime::NoCall>(pass.calls[9]));
}

TEST(Lowering, ForwardRowsBecomeOneGroupPerOutput) {
  const Plan plan = testing::sample_plan();
  const runtime::LoweredPass pass = lower(plan, Pass::kForward, 1);
  const runtime::AttentionTables& t = pass.tables;
  // Instruction 6: q slot 0 -> new partial in slot 6, q slot 1 merged into slot 5; full tiles.
  const auto& call = std::get<runtime::AttentionCall>(pass.calls[6]);
  ASSERT_EQ(call.q_group_end - call.q_group_begin, 2);
  EXPECT_EQ(call.max_q_tokens, 4);
  EXPECT_EQ(call.max_kv_tokens, 4);
  const auto g0 =
      row(t.q_groups, static_cast<std::size_t>(call.q_group_begin), runtime::kGroupFields);
  const auto g1 =
      row(t.q_groups, static_cast<std::size_t>(call.q_group_begin) + 1, runtime::kGroupFields);
  EXPECT_EQ(g0, (std::vector<std::int64_t>{pass.slot_offsets[6], 4, 0, g0[3], g0[3] + 1,
                                           pass.slot_offsets[0]}));
  EXPECT_EQ(g1, (std::vector<std::int64_t>{pass.slot_offsets[5], 4, 1, g1[3], g1[3] + 1,
                                           pass.slot_offsets[1]}));
  const auto e =
      row(t.entries, static_cast<std::size_t>(t.members[static_cast<std::size_t>(g1[3])]),
          runtime::kEntryFields);
  EXPECT_EQ(e, (std::vector<std::int64_t>{pass.slot_offsets[1], pass.slot_offsets[3], 4, 4, -1,
                                          call.q_group_begin + 1, -1, 0}));
  // The causal mask of instruction 4's tiles, rebased into the pass's mask tables.
  const auto& first = std::get<runtime::AttentionCall>(pass.calls[4]);
  const auto masked =
      row(t.entries, static_cast<std::size_t>(first.q_group_begin), runtime::kEntryFields);
  EXPECT_EQ(masked[runtime::kEntryMask], 0);
  EXPECT_EQ(t.mask_rows, (std::vector<std::int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(t.mask_intervals, plan.forward[1].masks[0].intervals);
}

TEST(Lowering, BackwardEntriesJoinAQGroupAndAKvGroup) {
  const Plan plan = testing::sample_plan();
  const runtime::LoweredPass pass = lower(plan, Pass::kBackward, 0);
  const runtime::AttentionTables& t = pass.tables;
  // Instruction 4: two rows (dq slots 3, 4) whose dk, dv both go to slot 5, the first
  // overwriting it, the second adding.
  const auto& call = std::get<runtime::AttentionCall>(pass.calls[4]);
  ASSERT_EQ(call.q_group_end - call.q_group_begin, 2);
  ASSERT_EQ(call.kv_group_end - call.kv_group_begin, 1);
  const auto kv =
      row(t.kv_groups, static_cast<std::size_t>(call.kv_group_begin), runtime::kGroupFields);
  EXPECT_EQ(kv[runtime::kGroupOut], pass.slot_offsets[5]);
  EXPECT_EQ(kv[runtime::kGroupAccumulate], 0);
  EXPECT_EQ(kv[runtime::kGroupInput], pass.slot_offsets[2]);
  ASSERT_EQ(kv[runtime::kGroupEnd] - kv[runtime::kGroupBegin], 2);
  for (std::int64_t m = kv[runtime::kGroupBegin]; m < kv[runtime::kGroupEnd]; ++m) {
    const auto e = row(t.entries, static_cast<std::size_t>(t.members[static_cast<std::size_t>(m)]),
                       runtime::kEntryFields);
    EXPECT_EQ(e[runtime::kEntryKvGroup], call.kv_group_begin);
    EXPECT_EQ(e[runtime::kEntryKv], pass.slot_offsets[2]);
  }
  const auto& sum = std::get<runtime::SumCall>(pass.calls[12]);
  EXPECT_EQ(sum.elements, value_bytes(plan.header, SlotKind::kDKV, 4) / 4);
}

// Partials in bf16: the dk, dv partial device 1 sends is narrowed from its fp32 slot into a wire
// buffer after the slots, which its transfer sends; device 0 receives into a wire buffer of its
// own and widens it into the slot once the launch completes. Sums still add fp32 values.
TEST(Lowering, PartialsInANarrowerDtypeTravelThroughWireBuffers) {
  const Plan plan = testing::sample_plan(DType::kBf16);
  const std::int64_t elements = 2 * 4 * 8;  // dk and dv of 4 tokens, 1 kv head, head dim 8
  const std::int64_t wire_bytes = value_bytes(plan.header, SlotKind::kDKV, 4);
  ASSERT_EQ(wire_bytes, elements * 2);
  ASSERT_EQ(slot_bytes(plan.header, SlotKind::kDKV, 4), elements * 4);
  for (const std::int32_t device : {0, 1}) {
    const runtime::LoweredPass pass = lower(plan, Pass::kBackward, device);
    // The launch that carries the partial (kv values travel unconverted).
    const runtime::LaunchCall* launch = nullptr;
    for (const runtime::LoweredCall& call : pass.calls) {
      const auto* l = std::get_if<runtime::LaunchCall>(&call);
      if (l == nullptr || (l->narrow.empty() && l->widen.empty())) continue;
      EXPECT_EQ(launch, nullptr) << "one launch carries the partial";
      launch = l;
    }
    ASSERT_NE(launch, nullptr);
    const bool sends = device == 1;
    const std::vector<runtime::WireCall>& converts = sends ? launch->narrow : launch->widen;
    EXPECT_TRUE((sends ? launch->widen : launch->narrow).empty());
    ASSERT_EQ(converts.size(), 1u);
    const auto transfer = std::find_if(
        launch->transfers.begin(), launch->transfers.end(),
        [&](const runtime::TransferCall& t) { return t.offset == converts.front().wire_offset; });
    ASSERT_NE(transfer, launch->transfers.end());
    EXPECT_EQ(transfer->send, sends);
    EXPECT_EQ(transfer->bytes, wire_bytes);
    const runtime::WireCall& convert = converts.front();
    EXPECT_EQ(convert.narrow, sends);
    EXPECT_EQ(convert.elements, elements);
    EXPECT_EQ(convert.tail_bytes, 0);
    // The wire buffer follows every slot, aligned, inside the arena.
    const Program& program = plan.backward[static_cast<std::size_t>(device)];
    EXPECT_EQ(program
                  .slots[static_cast<std::size_t>(
                      std::distance(pass.slot_offsets.begin(),
                                    std::find(pass.slot_offsets.begin(), pass.slot_offsets.end(),
                                              convert.slot_offset)))]
                  .kind,
              SlotKind::kDKV);
    EXPECT_GE(convert.wire_offset,
              pass.slot_offsets.back() + slot_bytes(plan.header, program.slots.back().kind, 4));
    EXPECT_EQ(convert.wire_offset % runtime::kSlotAlignment, 0);
    EXPECT_GE(pass.arena_bytes, convert.wire_offset + wire_bytes);
    // The launch's conversions as rows of the pass's wire table.
    ASSERT_EQ(pass.wire_rows.size(), static_cast<std::size_t>(runtime::kWireFields));
    EXPECT_EQ(sends ? launch->narrow_row : launch->widen_row, 0);
    EXPECT_EQ(row(pass.wire_rows, 0, runtime::kWireFields),
              (std::vector<std::int64_t>{convert.slot_offset, convert.wire_offset, convert.elements,
                                         convert.tail_bytes}));
  }
  const runtime::LoweredPass receiver = lower(plan, Pass::kBackward, 0);
  const auto& sum = std::get<runtime::SumCall>(receiver.calls[12]);
  EXPECT_EQ(sum.elements, elements);
  // The forward pass moves only kv, which never narrows.
  const runtime::LoweredPass forward = lower(plan, Pass::kForward, 1);
  for (const runtime::LoweredCall& call : forward.calls) {
    if (const auto* l = std::get_if<runtime::LaunchCall>(&call)) {
      EXPECT_TRUE(l->narrow.empty() && l->widen.empty());
    }
  }
}

// A partial sent a second time, unchanged since, goes from its wire buffer as it is: it is not
// converted again (which would rewrite a buffer the first send may still be reading). dcp's plans
// send each partial once; the lowering does not rely on it.
TEST(Lowering, APartialSentAgainUnchangedIsNotConvertedAgain) {
  Plan plan = testing::sample_plan(DType::kBf16);
  Program& sender = plan.backward[1];
  const auto first = std::find_if(sender.instructions.begin(), sender.instructions.end(),
                                  [](const Instruction& i) {
                                    const auto* l = std::get_if<Launch>(&i);
                                    return l != nullptr && l->id == 1;
                                  });
  ASSERT_NE(first, sender.instructions.end());
  Launch again = std::get<Launch>(*first);
  again.id = 2;
  const auto at = static_cast<std::size_t>(first - sender.instructions.begin()) + 1;
  sender.instructions.insert(sender.instructions.begin() + static_cast<std::ptrdiff_t>(at), again);
  sender.instruction_stage.insert(
      sender.instruction_stage.begin() + static_cast<std::ptrdiff_t>(at),
      sender.instruction_stage[at - 1]);
  const runtime::LoweredPass lowered = lower(plan, Pass::kBackward, 1);
  const auto& once = std::get<runtime::LaunchCall>(lowered.calls[at - 1]);
  const auto& twice = std::get<runtime::LaunchCall>(lowered.calls[at]);
  ASSERT_EQ(once.narrow.size(), 1u);
  EXPECT_TRUE(twice.narrow.empty());
  ASSERT_EQ(twice.transfers.size(), 1u);
  EXPECT_EQ(twice.transfers[0].offset, once.narrow[0].wire_offset);
}

void expect_refused(Plan plan, Pass pass, std::int32_t device, const std::string& what) {
  try {
    lower(plan, pass, device);
    FAIL() << "lowered a Program that should be refused: " << what;
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(what), std::string::npos) << error.what();
  }
}

// Every Load and Store is in exactly one copy span; a span's runs hold one direction and kind
// each, their rows the span's copies of it in instruction order; a span is of one stage and writes
// each output's block and head block once.
void expect_copy_spans_cover_the_copies(const Program& program, const runtime::LoweredPass& pass) {
  using runtime::CopyRun;
  ASSERT_EQ(pass.span_starting.size(), pass.calls.size());
  std::vector<int> covered(pass.calls.size(), 0);
  std::int32_t runs = 0;
  std::size_t rows = 0;
  for (std::size_t s = 0; s < pass.copy_spans.size(); ++s) {
    const runtime::CopySpan& span = pass.copy_spans[s];
    ASSERT_LT(span.begin, span.end);
    EXPECT_EQ(span.run_begin, runs);
    ASSERT_LT(span.run_begin, span.run_end);
    runs = span.run_end;
    // The span's copies by (direction, kind), in instruction order.
    std::vector<std::pair<std::pair<bool, SlotKind>, std::vector<std::int64_t>>> want;
    std::vector<std::tuple<SlotKind, std::int64_t, std::int64_t>> written;
    for (std::int32_t i = span.begin; i < span.end; ++i) {
      const auto u = static_cast<std::size_t>(i);
      ++covered[u];
      EXPECT_EQ(pass.span_starting[u], i == span.begin ? static_cast<int>(s) : -1);
      EXPECT_EQ(program.instruction_stage[u],
                program.instruction_stage[static_cast<std::size_t>(span.begin)]);
      const runtime::LoweredCall& call = pass.calls[u];
      const auto* load = std::get_if<runtime::LoadCall>(&call);
      const auto* store = std::get_if<runtime::StoreCall>(&call);
      if (load == nullptr && store == nullptr) {
        EXPECT_TRUE(std::holds_alternative<runtime::NoCall>(call)) << "instruction " << i;
        continue;
      }
      const std::pair<bool, SlotKind> key{store != nullptr, load ? load->kind : store->kind};
      const std::vector<std::int64_t> row =
          load ? std::vector<std::int64_t>{load->slot_offset, load->token, load->tokens,
                                           load->head_block}
               : std::vector<std::int64_t>{store->slot_offset, store->token, store->tokens,
                                           store->head_block};
      auto it =
          std::find_if(want.begin(), want.end(), [&](const auto& w) { return w.first == key; });
      if (it == want.end()) it = want.insert(want.end(), {key, {}});
      it->second.insert(it->second.end(), row.begin(), row.end());
      if (load != nullptr) {  // a span loads each slot once
        const std::tuple<SlotKind, std::int64_t, std::int64_t> at{SlotKind::kQ, -1,
                                                                  load->slot_offset};
        EXPECT_EQ(std::count(written.begin(), written.end(), at), 0) << "instruction " << i;
        written.push_back(at);
      }
      if (store != nullptr) {
        const std::tuple<SlotKind, std::int64_t, std::int64_t> at{store->kind, store->token,
                                                                  store->head_block};
        EXPECT_EQ(std::count(written.begin(), written.end(), at), 0) << "instruction " << i;
        written.push_back(at);
      }
    }
    ASSERT_EQ(static_cast<std::size_t>(span.run_end - span.run_begin), want.size());
    for (std::size_t r = 0; r < want.size(); ++r) {
      const CopyRun& run = pass.copy_runs[static_cast<std::size_t>(span.run_begin) + r];
      EXPECT_EQ(std::pair(run.store, run.kind), want[r].first);
      EXPECT_EQ(static_cast<std::size_t>(run.row_begin), rows);
      const std::vector<std::int64_t> got(
          pass.copy_rows.begin() +
              static_cast<std::ptrdiff_t>(run.row_begin) * runtime::kCopyFields,
          pass.copy_rows.begin() + static_cast<std::ptrdiff_t>(run.row_end) * runtime::kCopyFields);
      EXPECT_EQ(got, want[r].second);
      std::int64_t max_tokens = 0;
      for (std::size_t k = runtime::kCopyTokens; k < got.size(); k += runtime::kCopyFields) {
        max_tokens = std::max(max_tokens, got[k]);
      }
      EXPECT_EQ(run.max_tokens, max_tokens);
      rows = static_cast<std::size_t>(run.row_end);
    }
  }
  EXPECT_EQ(static_cast<std::size_t>(runs), pass.copy_runs.size());
  EXPECT_EQ(rows * runtime::kCopyFields, pass.copy_rows.size());
  for (std::size_t i = 0; i < pass.calls.size(); ++i) {
    const bool copy = std::holds_alternative<runtime::LoadCall>(pass.calls[i]) ||
                      std::holds_alternative<runtime::StoreCall>(pass.calls[i]);
    EXPECT_EQ(covered[i], copy ? 1 : covered[i]) << "instruction " << i;
    EXPECT_LE(covered[i], 1) << "instruction " << i;
  }
}

TEST(Lowering, ConsecutiveCopiesOfOneStageFormASpanWithOneRunPerKind) {
  const Plan plan = testing::sample_plan();
  // Device 0 forward: Load kv | Launch | Load q, Load q | attention | Store o, Store o, two
  // Stores of no contribution, Free | Wait | Free.
  const runtime::LoweredPass pass = lower(plan, Pass::kForward, 0);
  ASSERT_EQ(pass.copy_spans.size(), 3u);
  ASSERT_EQ(pass.copy_runs.size(), 3u);
  EXPECT_EQ(pass.span_starting,
            (std::vector<std::int32_t>{0, -1, 1, -1, -1, 2, -1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(pass.copy_spans[1].begin, 2);
  EXPECT_EQ(pass.copy_spans[1].end, 4);
  const runtime::CopyRun& q = pass.copy_runs[1];
  EXPECT_FALSE(q.store);
  EXPECT_EQ(q.kind, SlotKind::kQ);
  EXPECT_EQ(q.row_end - q.row_begin, 2);
  EXPECT_EQ(q.max_tokens, 4);
  EXPECT_EQ(pass.copy_spans[2].begin, 5);
  EXPECT_EQ(pass.copy_spans[2].end, 7);  // the Stores of no contribution after it copy nothing
  EXPECT_TRUE(pass.copy_runs[2].store);
  EXPECT_EQ(pass.copy_runs[2].kind, SlotKind::kOut);
  // Device 1 forward: Launch | Load q, Load q, Load kv: one span, a run of q and a run of kv.
  const runtime::LoweredPass other = lower(plan, Pass::kForward, 1);
  EXPECT_EQ(other.copy_spans[0].begin, 1);
  EXPECT_EQ(other.copy_spans[0].end, 4);
  EXPECT_EQ(other.copy_spans[0].run_end - other.copy_spans[0].run_begin, 2);
  for (const Pass p : {Pass::kForward, Pass::kBackward}) {
    for (std::int32_t device = 0; device < 2; ++device) {
      SCOPED_TRACE(std::string(to_string(p)) + " device " + std::to_string(device));
      expect_copy_spans_cover_the_copies(plan.programs(p)[static_cast<std::size_t>(device)],
                                         lower(plan, p, device));
    }
  }
}

TEST(Lowering, APlannedBatchOfManySequencesNeedsFewCopyRuns) {
  std::vector<TokenCount> lengths(24, 96);
  const SequenceBatch batch(lengths);
  MaskSpec causal;
  causal.kind = MaskKind::kCausal;
  const Workload workload(testing::runtime_shape(DType::kBf16), batch,
                          build_batch_mask(causal, batch), 32, 1);
  for (const Strategy strategy : {Strategy::kDcpPure, Strategy::kRing}) {
    const BuiltPlan built =
        build_plan(workload, testing::runtime_plan_options(strategy, ClusterShape{1, 2}));
    for (const Pass p : {Pass::kForward, Pass::kBackward}) {
      for (std::int32_t device = 0; device < 2; ++device) {
        SCOPED_TRACE(std::string(to_string(strategy)) + " " + std::string(to_string(p)) +
                     " device " + std::to_string(device));
        const Program& program = built.plan.programs(p)[static_cast<std::size_t>(device)];
        const runtime::LoweredPass pass = lower(built.plan, p, device);
        expect_copy_spans_cover_the_copies(program, pass);
        const auto copies = static_cast<std::size_t>(
            std::count_if(pass.calls.begin(), pass.calls.end(), [](const runtime::LoweredCall& c) {
              return std::holds_alternative<runtime::LoadCall>(c) ||
                     std::holds_alternative<runtime::StoreCall>(c);
            }));
        EXPECT_GE(copies, 24u);
        // dcp's Programs load before and store after their compute stages: dozens of copies
        // (token blocks x head blocks), a handful of runs. The ring's backward stores each dk/dv
        // after the step that finished it: runs of one or two.
        if (strategy == Strategy::kDcpPure) {
          EXPECT_LE(pass.copy_runs.size() * 4, copies);
        }
        EXPECT_LT(pass.copy_runs.size(), copies);
      }
    }
  }
}

// Every Merge and Sum is in exactly one memory run of its opcode and stage, whose
// rows are its instructions' in order, and no instruction of a run touches what another writes.
void expect_memory_runs_cover_the_memory_work(const Program& program,
                                              const runtime::LoweredPass& pass) {
  using runtime::MemoryRun;
  ASSERT_EQ(pass.memory_run_starting.size(), pass.calls.size());
  std::vector<int> covered(pass.calls.size(), 0);
  std::int32_t rows = 0;
  for (std::size_t r = 0; r < pass.memory_runs.size(); ++r) {
    const MemoryRun& run = pass.memory_runs[r];
    ASSERT_LT(run.begin, run.end);
    EXPECT_EQ(run.row_begin, rows);
    std::vector<std::int64_t> written, read;
    std::int64_t max_count = 0;
    for (std::int32_t i = run.begin; i < run.end; ++i) {
      const auto u = static_cast<std::size_t>(i);
      ++covered[u];
      EXPECT_EQ(pass.memory_run_starting[u], i == run.begin ? static_cast<int>(r) : -1);
      EXPECT_EQ(program.instruction_stage[u],
                program.instruction_stage[static_cast<std::size_t>(run.begin)]);
      const runtime::LoweredCall& call = pass.calls[u];
      std::vector<std::int64_t> want;
      std::int64_t dst = 0, src = 0;
      if (const auto* m = std::get_if<runtime::MergeCall>(&call)) {
        EXPECT_EQ(run.kind, MemoryRun::Kind::kMerge);
        want = {m->dst, m->src, m->tokens};
        dst = m->dst, src = m->src;
      } else if (const auto* sum = std::get_if<runtime::SumCall>(&call)) {
        EXPECT_EQ(run.kind, MemoryRun::Kind::kSum);
        want = {sum->dst, sum->src, sum->elements};
        dst = sum->dst, src = sum->src;
      } else {
        EXPECT_TRUE(std::holds_alternative<runtime::NoCall>(call)) << "instruction " << i;
        continue;
      }
      EXPECT_EQ(row(pass.memory_rows, static_cast<std::size_t>(rows), runtime::kMemoryFields),
                want);
      EXPECT_EQ(std::count(written.begin(), written.end(), dst), 0) << "instruction " << i;
      EXPECT_EQ(std::count(read.begin(), read.end(), dst), 0) << "instruction " << i;
      EXPECT_EQ(std::count(written.begin(), written.end(), src), 0) << "instruction " << i;
      written.push_back(dst);
      read.push_back(src);
      max_count = std::max(max_count, want[2]);
      ++rows;
    }
    EXPECT_EQ(run.row_end, rows);
    EXPECT_EQ(run.max_count, max_count);
  }
  EXPECT_EQ(static_cast<std::size_t>(rows) * runtime::kMemoryFields, pass.memory_rows.size());
  for (std::size_t i = 0; i < pass.calls.size(); ++i) {
    const runtime::LoweredCall& c = pass.calls[i];
    const bool memory = std::holds_alternative<runtime::MergeCall>(c) ||
                        std::holds_alternative<runtime::SumCall>(c);
    EXPECT_EQ(covered[i], memory ? 1 : covered[i]) << "instruction " << i;
    EXPECT_LE(covered[i], 1) << "instruction " << i;
  }
}

TEST(Lowering, ASpanNeverLoadsOneSlotTwice) {
  Plan plan = testing::sample_plan();
  // Device 0 forward: Load kv | Launch | Load q 0, Free 0, Load q 0 again, Load q 1 | ...: the
  // second load into slot 0 starts a new span (one launch would write the slot twice at once).
  Program& p = plan.forward[0];
  p.instructions.insert(p.instructions.begin() + 3, {Free{{0}}, Load{0, 0, 0}});
  p.instruction_stage.insert(p.instruction_stage.begin() + 3, {0, 0});
  const runtime::LoweredPass pass = lower(plan, Pass::kForward, 0);
  ASSERT_GE(pass.copy_spans.size(), 3u);
  EXPECT_EQ(pass.copy_spans[1].begin, 2);
  EXPECT_EQ(pass.copy_spans[1].end, 3);
  EXPECT_EQ(pass.copy_spans[2].begin, 4);
  EXPECT_EQ(pass.copy_spans[2].end, 6);
  expect_copy_spans_cover_the_copies(p, pass);
}

// A planned batch on 2 x 2 devices that keeps kv for the backward pass.
BuiltPlan kept_kv_plan() {
  std::vector<TokenCount> lengths = {200, 96, 64, 40};
  const SequenceBatch batch(lengths);
  MaskSpec causal;
  causal.kind = MaskKind::kCausal;
  const Workload workload(testing::runtime_shape(DType::kBf16), batch,
                          build_batch_mask(causal, batch), 32, 1);
  return build_plan(workload,
                    testing::runtime_plan_options(Strategy::kDcpPure, ClusterShape{2, 2}));
}

TEST(Lowering, IndependentMergesAndSumsFormOneRunPerOpcode) {
  const Plan sample = testing::sample_plan();
  // Device 1 forward: ... attention | Merge{4, 6} | Store, Store | Free.
  const runtime::LoweredPass pass = lower(sample, Pass::kForward, 1);
  ASSERT_EQ(pass.memory_runs.size(), 1u);
  EXPECT_EQ(pass.memory_runs[0].kind, runtime::MemoryRun::Kind::kMerge);
  EXPECT_EQ(pass.memory_runs[0].begin, 7);
  EXPECT_EQ(pass.memory_runs[0].end, 8);
  for (const Pass p : {Pass::kForward, Pass::kBackward}) {
    for (std::int32_t device = 0; device < 2; ++device) {
      expect_memory_runs_cover_the_memory_work(sample.programs(p)[static_cast<std::size_t>(device)],
                                               lower(sample, p, device));
    }
  }
  // A planned batch: partials merged and summed, kv kept and restored.
  const BuiltPlan built = kept_kv_plan();
  std::size_t memory_work = 0, runs = 0;
  for (const Pass p : {Pass::kForward, Pass::kBackward}) {
    for (std::int32_t device = 0; device < 4; ++device) {
      SCOPED_TRACE(std::string(to_string(p)) + " device " + std::to_string(device));
      const runtime::LoweredPass lowered = lower(built.plan, p, device);
      expect_memory_runs_cover_the_memory_work(
          built.plan.programs(p)[static_cast<std::size_t>(device)], lowered);
      memory_work += lowered.memory_rows.size() / runtime::kMemoryFields;
      runs += lowered.memory_runs.size();
    }
  }
  EXPECT_GT(memory_work, runs);  // some runs hold several instructions
}

TEST(Lowering, KeptValuesAreReceivedInPlaceAndReadThereWithoutACopy) {
  const BuiltPlan built = kept_kv_plan();
  std::size_t kept_total = 0;
  for (std::int32_t device = 0; device < 4; ++device) {
    SCOPED_TRACE("device " + std::to_string(device));
    const Program& forward = built.plan.forward[static_cast<std::size_t>(device)];
    const Program& backward = built.plan.backward[static_cast<std::size_t>(device)];
    const runtime::LoweredPass fwd = lower(built.plan, Pass::kForward, device);
    const runtime::LoweredPass bwd = lower(built.plan, Pass::kBackward, device);
    kept_total += forward.kept.size();
    EXPECT_EQ(fwd.kept_bytes, bwd.kept_bytes);
    // Each kept value is received once straight into the kept tensor, at a 64-byte multiple, and
    // the forward attention reads it there.
    std::vector<std::int64_t> received;
    for (const runtime::LoweredCall& call : fwd.calls) {
      if (const auto* launch = std::get_if<runtime::LaunchCall>(&call)) {
        for (const runtime::TransferCall& t : launch->transfers) {
          if (t.buffer != runtime::BufferKind::kKept) continue;
          EXPECT_EQ(t.offset % runtime::kSlotAlignment, 0);
          EXPECT_LE(t.offset + t.bytes, fwd.kept_bytes);
          if (!t.send) received.push_back(t.offset);
        }
      }
    }
    std::sort(received.begin(), received.end());
    EXPECT_EQ(received.size(), forward.kept.size());
    EXPECT_EQ(std::adjacent_find(received.begin(), received.end()), received.end());
    for (std::size_t i = 0; i < forward.instructions.size(); ++i) {
      if (std::holds_alternative<Keep>(forward.instructions[i])) {
        EXPECT_TRUE(std::holds_alternative<runtime::NoCall>(fwd.calls[i])) << "instruction " << i;
      }
    }
    // Nothing is received into the kept tensor in the backward pass; Restores run nothing.
    std::size_t restores = 0;
    for (std::size_t i = 0; i < backward.instructions.size(); ++i) {
      if (std::holds_alternative<Restore>(backward.instructions[i])) {
        ++restores;
        EXPECT_TRUE(std::holds_alternative<runtime::NoCall>(bwd.calls[i])) << "instruction " << i;
      }
      if (const auto* launch = std::get_if<runtime::LaunchCall>(&bwd.calls[i])) {
        for (const runtime::TransferCall& t : launch->transfers) {
          EXPECT_FALSE(t.buffer == runtime::BufferKind::kKept && !t.send);
        }
      }
    }
    // Entries reading kept values in each pass: the forward's kept receives, the backward's
    // restores.
    for (const runtime::LoweredPass* pass : {&fwd, &bwd}) {
      const runtime::AttentionTables& t = pass->tables;
      std::vector<std::int64_t> places;
      for (std::size_t e = 0; e < t.entry_count(); ++e) {
        const std::int64_t* entry = t.entry(e);
        const std::int64_t buffer = entry[runtime::kEntryKvBuffer];
        const auto kept = static_cast<std::int64_t>(runtime::BufferKind::kKept);
        ASSERT_TRUE(buffer == static_cast<std::int64_t>(runtime::BufferKind::kArena) ||
                    buffer == kept);
        if (buffer == kept) places.push_back(entry[runtime::kEntryKv]);
      }
      std::sort(places.begin(), places.end());
      places.erase(std::unique(places.begin(), places.end()), places.end());
      if (pass == &fwd) {
        EXPECT_TRUE(std::includes(received.begin(), received.end(), places.begin(), places.end()));
      } else {
        EXPECT_EQ(places.size(), restores);
      }
    }
  }
  EXPECT_GT(kept_total, 0u);  // the plan keeps kv
}

TEST(Lowering, RefusesAKeepOfAValueItDidNotReceive) {
  const BuiltPlan built = kept_kv_plan();
  for (std::int32_t device = 0; device < 4; ++device) {
    Plan plan = built.plan;
    Program& p = plan.forward[static_cast<std::size_t>(device)];
    const auto keep = std::find_if(p.instructions.begin(), p.instructions.end(),
                                   [](const auto& i) { return std::holds_alternative<Keep>(i); });
    if (keep == p.instructions.end()) continue;
    // Free the slot and load an owned kv value into it just before the Keep.
    const Keep k = std::get<Keep>(*keep);
    const auto at = static_cast<std::size_t>(keep - p.instructions.begin());
    p.instructions.insert(p.instructions.begin() + static_cast<std::ptrdiff_t>(at),
                          {Free{{k.slot}}, Load{k.slot, p.owned[0], 0}});
    p.instruction_stage.insert(p.instruction_stage.begin() + static_cast<std::ptrdiff_t>(at), 2,
                               p.instruction_stage[at]);
    expect_refused(plan, Pass::kForward, device,
                   "slot " + std::to_string(k.slot) + " holds no value received for kv(block " +
                       std::to_string(k.block));
    return;
  }
  FAIL() << "no device keeps a value";
}

TEST(Lowering, EveryTableIsWholeRowsOfItsSchemasDistinctColumns) {
  std::vector<std::string_view> names;
  for (const runtime::LoweredTableSchema& table : runtime::kLoweredTables) {
    names.push_back(table.name);
    std::vector<std::string_view> columns(table.columns.begin(), table.columns.end());
    std::sort(columns.begin(), columns.end());
    EXPECT_EQ(std::adjacent_find(columns.begin(), columns.end()), columns.end()) << table.name;
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  const Plan plan = testing::sample_plan();
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    for (std::int32_t device = 0; device < 2; ++device) {
      const runtime::LoweredPass lowered = lower(plan, pass, device);
      EXPECT_EQ(&runtime::lowered_rows(lowered, runtime::LoweredTable::kEntries),
                &lowered.tables.entries);
      EXPECT_EQ(&runtime::lowered_rows(lowered, runtime::LoweredTable::kKvGroups),
                &lowered.tables.kv_groups);
      EXPECT_EQ(&runtime::lowered_rows(lowered, runtime::LoweredTable::kMemoryRows),
                &lowered.memory_rows);
      for (const runtime::LoweredTableSchema& table : runtime::kLoweredTables) {
        EXPECT_EQ(runtime::lowered_rows(lowered, table.table).size() % table.columns.size(), 0u)
            << table.name;
      }
    }
  }
}

TEST(Lowering, RefusesInconsistentProgramsNamingTheInstruction) {
  {
    Plan plan = testing::sample_plan();
    // The second row of instruction 6 overwrites slot 5 ... after the first row wrote it.
    auto& attention = std::get<AttnForward>(plan.forward[1].instructions[6]);
    attention.rows[1].out = 6;
    attention.rows[1].accumulate = false;
    expect_refused(plan, Pass::kForward, 1, "instruction 6 (attn_fwd): a row overwrites slot 6");
  }
  {
    Plan plan = testing::sample_plan();
    // Attention on a q slot before anything was loaded into it.
    std::swap(plan.forward[0].instructions[2], plan.forward[0].instructions[4]);
    expect_refused(plan, Pass::kForward, 0, "instruction 2 (attn_fwd): slot 0 holds no value");
  }
  {
    Plan plan = testing::sample_plan();
    // A send that claims a size its value does not have.
    std::get<Launch>(plan.forward[0].instructions[1]).ops[0].bytes -= 2;
    expect_refused(plan, Pass::kForward, 0, "instruction 1 (launch): send of slot 2");
  }
  {
    Plan plan = testing::sample_plan();
    std::get<Merge>(plan.forward[1].instructions[7]).src = 2;  // a kKV slot
    expect_refused(plan, Pass::kForward, 1, "slot 2 is a kv slot, not out");
  }
}

}  // namespace
}  // namespace dcp

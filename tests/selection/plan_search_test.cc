// SPDX-License-Identifier: Apache-2.0
// dcp's search under the simulator: its own plans over block sizes, balances, structured
// candidates and partial dtypes, and the selection against the static strategies; the plan kept
// is the fastest simulated and the very plan built alone.
#include "dcp/selection/plan_search.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "dcp/model/cluster_file.h"
#include "dcp/model/mask_spec.h"

#include "dcp/planner/model_plan_builder.h"
#include "dcp/planner/placement/static_placements.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/program/plan_file/plan_file.h"
#include "dcp/program/program_stats.h"
#include "dcp/program/verifier/verifier.h"
#include "dcp/selection/plan_search_internal.h"
#include "dcp/sim/simulator.h"

#include "tests/testing/plan_fixtures.h"

namespace dcp {
namespace {

using testing::a100_plan_options;
using testing::random_batch;
using testing::small_spec;
using testing::small_workload;

TEST(PlanSearch, SameInputsAndSeedGiveTheSameBytes) {
  const Workload workload = small_workload(random_batch(3), MaskKind::kLambda, 8, 2);
  for (const Strategy strategy : {Strategy::kDcp, Strategy::kZigzag, Strategy::kHybrid}) {
    const std::string a =
        serialize_plan(build_plan(workload, a100_plan_options(strategy, {2, 4})).plan);
    const std::string b =
        serialize_plan(build_plan(workload, a100_plan_options(strategy, {2, 4})).plan);
    EXPECT_EQ(a, b) << to_string(strategy);
  }
}

// The header says how a plan routes its partials, whoever made it: dcp's own plans (its
// partitions and the structured layouts it runs its way) reduce them in a node, every static
// strategy sends them directly; the verifier holds each plan to its header.
TEST(PlanSearch, EveryPlanSaysHowItRoutesPartials) {
  const Workload workload = small_workload(random_batch(3), MaskKind::kCausal, 8, 2);
  PlanOptions own = a100_plan_options(Strategy::kDcpPure, {2, 4});
  own.search.block_sizes = {64, 128};
  for (const BuiltPlan& built :
       {build_plan(workload, own), build_structured(Strategy::kHybrid, workload, own)}) {
    EXPECT_EQ(built.plan.header.partial_routing, PartialRouting::kReduceInNode);
    EXPECT_TRUE(verify(built.plan).ok);
  }
  for (const Strategy strategy : kStaticStrategies) {
    const BuiltPlan built = build_plan(workload, a100_plan_options(strategy, {2, 4}));
    EXPECT_EQ(built.plan.header.partial_routing, PartialRouting::kDirect) << to_string(strategy);
    EXPECT_TRUE(verify(built.plan).ok) << to_string(strategy);
  }
}

// Where a few sequences are long (at most 8 with one holding half the tokens, or at most 4 under a
// dense mask), dcp also runs its Programs on the hybrid and loongtrain layouts: they verify, move
// no kv in the backward pass, and the fastest of all is kept.
TEST(PlanSearch, StructuredCandidatesWhereFewLongSequences) {
  const Workload workload = small_workload(SequenceBatch({900, 120, 40}), MaskKind::kCausal, 8, 2);
  PlanOptions options = a100_plan_options(Strategy::kDcpPure, {2, 4});
  options.search.block_sizes = {256, 512};
  options.placement.eps_compute = kRetryEpsCompute;  // no retry at a tighter balance
  options.search.packed_layout = false;              // (its own test below)
  options.search.node_groups = false;
  const BuiltPlan built = build_plan(workload, options);
  ASSERT_EQ(built.own_candidates.size(), 4u);
  EXPECT_EQ(built.own_candidates[0].block_size, 256);
  EXPECT_EQ(built.own_candidates[1].block_size, 512);
  EXPECT_EQ(built.own_candidates[2].layout, "hybrid");
  EXPECT_EQ(built.own_candidates[3].layout, "loongtrain");
  double fastest = built.own_candidates.front().seconds();
  for (const OwnCandidate& c : built.own_candidates) fastest = std::min(fastest, c.seconds());
  EXPECT_DOUBLE_EQ(sim::simulate(built.plan, options.cluster).seconds(), fastest);
  for (const Strategy layout : kStructuredLayouts) {
    const BuiltPlan structured = build_structured(layout, workload, options);
    const VerifyReport verified = verify(structured.plan);
    EXPECT_TRUE(verified.ok) << to_string(layout) << ": " << describe(verified);
    EXPECT_EQ(structured.plan.header.strategy, "dcp-pure");
    const BuiltPlan layout_plan = build_plan(workload, a100_plan_options(layout, {2, 4}));
    const PassTraffic static_backward =
        pass_traffic(layout_plan.plan.header, layout_plan.plan.backward);
    std::int64_t kv_received = 0;
    for (const Program& program : structured.plan.backward) {
      for (const Instruction& instruction : program.instructions) {
        if (const auto* launch = std::get_if<Launch>(&instruction)) {
          for (const CommOp& op : launch->ops) {
            if (op.direction == CommOp::Direction::kRecv &&
                program.slots[static_cast<std::size_t>(op.slot)].kind == SlotKind::kKV) {
              kv_received += op.bytes;
            }
          }
        }
      }
    }
    EXPECT_EQ(kv_received, 0) << to_string(layout);
    const PassTraffic backward = pass_traffic(structured.plan.header, structured.plan.backward);
    EXPECT_LT(backward.inter_node + backward.intra_node,
              static_backward.inter_node + static_backward.intra_node)
        << to_string(layout);
  }
  // Four sequences, none holding half the tokens: enough under a dense mask, not under a sparse
  // one (lambda: a window of 200 on 1200 tokens); five are not, even under a dense one.
  const SequenceBatch four({1200, 1100, 1000, 1000});
  EXPECT_EQ(
      build_plan(small_workload(four, MaskKind::kCausal, 8, 2), options).own_candidates.size(), 4u);
  EXPECT_EQ(
      build_plan(small_workload(four, MaskKind::kLambda, 8, 2), options).own_candidates.size(), 2u);
  const Workload five =
      small_workload(SequenceBatch({1200, 1100, 1000, 1000, 900}), MaskKind::kCausal, 8, 2);
  EXPECT_EQ(build_plan(five, options).own_candidates.size(), 2u);
  // Nor beside too many sequences, or without kept kv.
  std::vector<TokenCount> many(kStructuredMaxSequences, 20);
  many.push_back(900);  // holds most tokens, but beside too many sequences
  EXPECT_EQ(build_plan(small_workload(SequenceBatch(many), MaskKind::kCausal, 8, 2), options)
                .own_candidates.size(),
            2u);
  options.kept_kv_budget = kKeepNoKv;
  EXPECT_EQ(build_plan(workload, options).own_candidates.size(), 2u);
}

// A structured layout of few long backward stages has each cut into parts where the estimate and
// then the simulator gain (ScheduleOptions::structured_stage_parts, 0 by default): on one causal
// sequence of 24576 tokens (d = 128, bf16) on 2 x 4, hybrid's ring of two nodes is cut in 2,
// loongtrain's ring of four head groups is not. The cut plan verifies, its backward is faster under
// the simulator than the uncut one (parts = 1), and its forward pass is the same. Parts asked for
// are cut as asked.
TEST(PlanSearch, StructuredBackwardStagesCutWhereTheEstimateAndTheSimulatorGain) {
  AttentionShape shape;
  shape.q_heads = 8;
  shape.kv_heads = 2;
  shape.head_dim = 128;
  shape.dtype = DType::kBf16;
  const SequenceBatch batch({24576});
  const Workload workload(shape, batch, build_batch_mask(small_spec(MaskKind::kCausal), batch),
                          2048, 1);
  PlanOptions options = a100_plan_options(Strategy::kDcpPure, {2, 4});
  const BuiltPlan cut = build_structured(Strategy::kHybrid, workload, options);
  const BuiltPlan loongtrain = build_structured(Strategy::kLoongTrain, workload, options);
  options.schedule.structured_stage_parts = 1;
  const BuiltPlan uncut = build_structured(Strategy::kHybrid, workload, options);
  ASSERT_EQ(cut.backward.stage_parts, 2);
  EXPECT_EQ(uncut.backward.stage_parts, 1);
  EXPECT_EQ(loongtrain.backward.stage_parts, 1);
  for (const BuiltPlan* built : {&cut, &uncut, &loongtrain}) {
    EXPECT_EQ(built->plan.backward.front().stages, built->backward.stages);
  }
  EXPECT_EQ(cut.backward.stages - cut.backward.own_outputs_last,
            1 + (uncut.backward.stages - uncut.backward.own_outputs_last - 1) * 2);
  const VerifyReport verified = verify(cut.plan);
  EXPECT_TRUE(verified.ok) << describe(verified);
  EXPECT_LT(cut.backward.estimate.seconds, uncut.backward.estimate.seconds);
  const sim::PlanSimulation cut_time = sim::simulate(cut.plan, options.cluster);
  const sim::PlanSimulation uncut_time = sim::simulate(uncut.plan, options.cluster);
  EXPECT_LT(cut_time.backward.seconds, uncut_time.backward.seconds);
  EXPECT_EQ(cut_time.forward.seconds, uncut_time.forward.seconds);
  options.schedule.structured_stage_parts = 4;
  const BuiltPlan four = build_structured(Strategy::kHybrid, workload, options);
  EXPECT_EQ(four.backward.stage_parts, 4);
  EXPECT_TRUE(verify(four.plan).ok);
  options.schedule.structured_stage_parts = 65;
  EXPECT_THROW(build_structured(Strategy::kHybrid, workload, options), InvalidInput);
  EXPECT_THROW(build_plan(workload, options), InvalidInput);
}

// Whatever the estimate picks, a structured candidate's backward is never slower under the
// simulator than with its stages whole.
TEST(PlanSearch, StructuredBackwardNeverSlowerThanItsWholeStages) {
  AttentionShape shape;
  shape.head_dim = 128;
  for (const std::vector<TokenCount>& lengths :
       {std::vector<TokenCount>{16384}, {12288, 6144}, {20000, 3000, 1000}}) {
    const SequenceBatch batch(lengths);
    const Workload workload(shape, batch, build_batch_mask(small_spec(MaskKind::kCausal), batch),
                            2048, 1);
    for (const Strategy layout : kStructuredLayouts) {
      PlanOptions options = a100_plan_options(Strategy::kDcpPure, {2, 4});
      const BuiltPlan chosen = build_structured(layout, workload, options);
      options.schedule.structured_stage_parts = 1;
      const BuiltPlan whole = build_structured(layout, workload, options);
      EXPECT_LE(sim::simulate(chosen.plan, options.cluster).backward.seconds,
                sim::simulate(whole.plan, options.cluster).backward.seconds)
          << to_string(layout) << ", " << lengths.size() << " sequences";
    }
  }
}

// Where one sequence dominates under a mask as dense as causal, the partition at blocks below
// kDenseMinBlockSize is not tried when a larger size is; under a sparse mask it is.
TEST(PlanSearch, NoFineBlocksWhereOneDenseSequenceDominates) {
  const SequenceBatch batch({2500, 300});
  PlanOptions options = a100_plan_options(Strategy::kDcpPure, {2, 4});
  options.search.block_sizes = {1024, kDenseMinBlockSize};
  options.placement.eps_compute = kRetryEpsCompute;  // no retry at a tighter balance
  options.search.packed_layout = false;
  options.search.node_groups = false;
  const auto sizes = [&](MaskKind kind) {
    std::vector<std::string> tried;
    for (const OwnCandidate& c :
         build_plan(small_workload(batch, kind, 8, 2), options).own_candidates) {
      tried.push_back(c.layout == "partition" ? std::to_string(c.block_size) : c.layout);
    }
    return tried;
  };
  const std::string dense = std::to_string(kDenseMinBlockSize);
  EXPECT_EQ(sizes(MaskKind::kCausal), (std::vector<std::string>{dense, "hybrid", "loongtrain"}));
  EXPECT_EQ(sizes(MaskKind::kLambda),
            (std::vector<std::string>{"1024", dense, "hybrid", "loongtrain"}));
  // Only fine sizes asked for: they are tried.
  options.search.block_sizes = {512, 1024};
  EXPECT_EQ(sizes(MaskKind::kCausal),
            (std::vector<std::string>{"512", "1024", "hybrid", "loongtrain"}));
}

// Where converting partials costs more than their bytes (slow kernels to launch, fast links), dcp
// also tries its fastest plan with partials in fp32 and keeps that if it is faster; a dtype asked
// for is kept as asked, and fast conversions are not worth a retry.
TEST(PlanSearch, TriesFp32PartialsWhereConversionsCostMoreThanBytes) {
  const Workload workload = small_workload(SequenceBatch({900, 120, 40}), MaskKind::kCausal, 8, 2);
  PlanOptions options = a100_plan_options(Strategy::kDcpPure, {2, 4});
  options.search.block_sizes = {256};
  options.cluster.kernel_overhead = 200e-6;  // each conversion kernel: 0.2 ms
  options.cluster.intra_node_bandwidth *= 100;
  options.cluster.inter_node_bandwidth *= 100;
  options.cluster.intra_node_stream_bandwidth = 0;
  options.cluster.inter_node_stream_bandwidth = 0;
  const BuiltPlan built = build_plan(workload, options);
  ASSERT_GE(built.own_candidates.size(), 2u);
  const OwnCandidate& retried = built.own_candidates.back();
  EXPECT_EQ(retried.partial_dtype, DType::kFp32);
  const auto bf16 = std::find_if(
      built.own_candidates.begin(), built.own_candidates.end(), [&](const OwnCandidate& c) {
        return c.partial_dtype == DType::kBf16 && c.layout == retried.layout &&
               c.block_size == retried.block_size;
      });
  ASSERT_NE(bf16, built.own_candidates.end());
  EXPECT_LT(retried.seconds(), bf16->seconds());
  EXPECT_EQ(built.plan.header.partial_dtype, DType::kFp32);
  EXPECT_DOUBLE_EQ(sim::simulate(built.plan, options.cluster).seconds(), retried.seconds());
  EXPECT_TRUE(verify(built.plan).ok);

  PlanOptions asked = options;
  asked.partial_dtype = DType::kBf16;
  const BuiltPlan as_asked = build_plan(workload, asked);
  EXPECT_EQ(as_asked.plan.header.partial_dtype, DType::kBf16);
  for (const OwnCandidate& c : as_asked.own_candidates) EXPECT_EQ(c.partial_dtype, DType::kBf16);

  PlanOptions cheap = a100_plan_options(Strategy::kDcpPure, {2, 4});  // a100-p4de: 1 us per kernel
  cheap.search.block_sizes = {256};
  for (const OwnCandidate& c : build_plan(workload, cheap).own_candidates) {
    EXPECT_EQ(c.partial_dtype, DType::kBf16);
  }
}

// The retry is tried where a pass's conversions take longer than the part of its critical-path
// transfers that fp32 would lengthen: the critical transfers times the pass's share of partial
// bytes. On the H200 calibration (docs/gpu_h200/cost_model/h200_device.cluster, 44.66 us per
// kernel) with one causal sequence of 32768 tokens, the kept plan's backward converts for less than
// its critical transfers (which alone would not try the retry) but for more than their partial
// share; the fp32 retry is then tried, kept and faster (3.48 against 3.61 ms, simulated).
TEST(PlanSearch, TriesFp32PartialsWhereConversionsOutlastThePartialShareOfTransfers) {
  const ClusterSpec h200 = parse_cluster_text(
      "name = gpu-calibrated\nnodes = 4\ndevices_per_node = 8\nintra_node_gbps = 450\n"
      "intra_node_latency_us = 8\ninter_node_gbps = 400\ninter_node_latency_us = 20\n"
      "forward_tflops = 222.1\nbackward_tflops = 140.6\nkernel_overhead_us = 44.66\n"
      "memory_gbps = 3906\nsoftmax_share = 0.9369\nfp32_kernel_factor = 4\n"
      "partial_subtile_extra = 0\nsubtile_overhead_us = 0\ntile_setup_tokens = 46.61\n"
      "launch_overhead_us = 8\nlaunch_peer_overhead_us = 2\nintra_node_stream_gbps = 0\n"
      "inter_node_stream_gbps = 0\nforward_subtile_q = 64\nforward_subtile_kv = 64\n"
      "backward_subtile_q = 64\nbackward_subtile_kv = 32\nnics_per_node = 8\n"
      "whole_subtiles = 1\nintra_node_efficiency = 65536:0.15, 1048576:0.6, 16777216:0.9\n"
      "inter_node_efficiency = 65536:0.1, 1048576:0.5, 16777216:0.85\n",
      "test");
  AttentionShape shape;
  shape.head_dim = 128;
  const SequenceBatch batch({32768});
  const Workload workload(shape, batch, build_batch_mask(small_spec(MaskKind::kCausal), batch),
                          2048, 1);
  PlanOptions options;
  options.strategy = Strategy::kDcpPure;
  options.cluster = h200;
  options.search.block_sizes = {1024, 2048, 4096};  // as dcp plan's automatic block size
  const BuiltPlan built = build_plan(workload, options);
  const OwnCandidate& retried = built.own_candidates.back();
  ASSERT_EQ(retried.partial_dtype, DType::kFp32);
  const auto bf16 = std::find_if(
      built.own_candidates.begin(), built.own_candidates.end(), [&](const OwnCandidate& c) {
        return c.partial_dtype == DType::kBf16 && c.layout == retried.layout &&
               c.block_size == retried.block_size && c.tighter_balance == retried.tighter_balance;
      });
  ASSERT_NE(bf16, built.own_candidates.end());
  EXPECT_LT(retried.seconds(), bf16->seconds());
  EXPECT_EQ(built.plan.header.partial_dtype, DType::kFp32);
}

TEST(PlanSearch, KeepsDcpsFastestPlanOverTheBlockSizesAsked) {
  const Workload workload =
      small_workload(SequenceBatch({700, 300, 90, 5}), MaskKind::kCausal, 8, 2);
  PlanOptions options = a100_plan_options(Strategy::kDcpPure, {2, 2});
  // 2048 and 4096 both collapse to 1024, the next power of two above the longest sequence.
  options.search.block_sizes = {128, 2048, 64, 4096};
  options.search.structured_layouts = false;  // (one sequence holds most tokens: see the next test)
  options.placement.eps_compute = kRetryEpsCompute;  // no retry (the test after the next)
  options.search.packed_layout = false;
  options.search.node_groups = false;
  const BuiltPlan swept = build_plan(workload, options);
  ASSERT_EQ(swept.own_candidates.size(), 3u);
  EXPECT_EQ(swept.own_candidates[0].block_size, 128);
  EXPECT_EQ(swept.own_candidates[1].block_size, 1024);
  EXPECT_EQ(swept.own_candidates[2].block_size, 64);
  // The kept plan is the fastest, and the very plan dcp builds at that block size alone.
  const auto fastest = std::min_element(
      swept.own_candidates.begin(), swept.own_candidates.end(),
      [](const OwnCandidate& a, const OwnCandidate& b) { return a.seconds() < b.seconds(); });
  EXPECT_EQ(swept.workload.blocks().block_size(), fastest->block_size);
  PlanOptions alone = options;
  alone.search.block_sizes.clear();
  const Workload cut(workload.shape(), workload.batch(),
                     build_batch_mask(small_spec(MaskKind::kCausal), workload.batch()),
                     fastest->block_size, 1);
  const BuiltPlan direct = build_plan(cut, alone);
  EXPECT_EQ(serialize_plan(swept.plan), serialize_plan(direct.plan));
  const sim::PlanSimulation simulated = sim::simulate(swept.plan, options.cluster);
  EXPECT_DOUBLE_EQ(simulated.seconds(), fastest->seconds());
  EXPECT_TRUE(verify(swept.plan).ok);
  // With selection, dcp's candidate is its fastest block size.
  options.strategy = Strategy::kDcp;
  const BuiltPlan selected = build_plan(workload, options);
  EXPECT_DOUBLE_EQ(selected.selection.candidates.front().seconds(), fastest->seconds());
  // A size that is not positive is refused, naming it.
  options.search.block_sizes = {0};
  try {
    build_plan(workload, options);
    FAIL() << "block size 0";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("block size 0"), std::string::npos) << e.what();
  }
}

// dcp's kRetryPartitions fastest partitions are placed again at the tighter balance
// kRetryEpsCompute: the retries are listed after the block sizes, at the fastest ones' sizes,
// fastest first; the kept plan is the fastest of all and the very plan dcp builds at that size and
// balance alone. A balance already that tight or tighter is not retried (a retry must not break
// the bound asked for).
TEST(PlanSearch, RetriesItsFastestPartitionsAtATighterBalance) {
  const Workload workload =
      small_workload(SequenceBatch({400, 350, 300, 250, 200, 90, 5}), MaskKind::kCausal, 8, 2);
  PlanOptions options = a100_plan_options(Strategy::kDcpPure, {2, 2});
  options.search.block_sizes = {64, 128, 256};
  options.search.packed_layout = false;
  options.search.node_groups = false;
  ASSERT_GT(options.placement.eps_compute, kRetryEpsCompute);
  const BuiltPlan built = build_plan(workload, options);
  ASSERT_GE(built.own_candidates.size(), 3u);
  const auto& tried = built.own_candidates;
  std::vector<OwnCandidate> by_time(tried.begin(), tried.begin() + 3);
  std::stable_sort(by_time.begin(), by_time.end(),
                   [](const auto& a, const auto& b) { return a.seconds() < b.seconds(); });
  ASSERT_EQ(kRetryPartitions, 2u);
  ASSERT_EQ(tried.size(), 5u) << "a retry was outside its bounds";
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_FALSE(tried[i].tighter_balance);
    EXPECT_TRUE(tried[3 + i].tighter_balance);
    EXPECT_EQ(tried[3 + i].block_size, by_time[i].block_size);
  }
  const auto kept = std::min_element(tried.begin(), tried.end(), [](const auto& a, const auto& b) {
    return a.seconds() < b.seconds();
  });
  EXPECT_DOUBLE_EQ(sim::simulate(built.plan, options.cluster).seconds(), kept->seconds());
  PlanOptions alone = options;
  alone.search.block_sizes.clear();
  if (kept->tighter_balance) alone.placement.eps_compute = kRetryEpsCompute;
  const Workload cut(workload.shape(), workload.batch(),
                     build_batch_mask(small_spec(MaskKind::kCausal), workload.batch()),
                     kept->block_size, 1);
  EXPECT_EQ(serialize_plan(build_plan(cut, alone).plan), serialize_plan(built.plan));
  options.placement.eps_compute = kRetryEpsCompute;
  EXPECT_EQ(build_plan(workload, options).own_candidates.size(), 3u);
}

// dcp's selection from dcp-pure's plan is build_plan's dcp plan: the same bytes, own candidates and
// selection, whichever plan is kept (a fast network makes a static one win on some batches).
TEST(PlanSearch, SelectingFromDcpPuresPlanGivesBuildPlansDcpPlan) {
  std::set<std::string> kept;
  for (const bool fast : {false, true}) {
    for (std::uint64_t seed = 40; seed < 43; ++seed) {
      const Workload workload = small_workload(random_batch(seed), MaskKind::kCausal, 8, 2);
      PlanOptions options = a100_plan_options(Strategy::kDcp, {2, 2});
      options.search.block_sizes = {64, 128};
      // Packed sequences are dcp's fastest on all of these batches; without them a static plan
      // wins on some, which the selection must give whole too.
      options.search.packed_layout = false;
      options.search.node_groups = false;
      if (fast) {
        options.cluster.inter_node_bandwidth *= 50;
        options.cluster.inter_node_stream_bandwidth *= 50;
      }
      const BuiltPlan whole = build_plan(workload, options);
      PlanOptions pure = options;
      pure.strategy = Strategy::kDcpPure;
      const BuiltPlan selected = select_plan(workload, options, build_plan(workload, pure));
      EXPECT_EQ(serialize_plan(selected.plan), serialize_plan(whole.plan)) << seed;
      EXPECT_EQ(selected.selection.kept, whole.selection.kept);
      ASSERT_EQ(selected.selection.candidates.size(), whole.selection.candidates.size());
      for (std::size_t i = 0; i < whole.selection.candidates.size(); ++i) {
        EXPECT_EQ(selected.selection.candidates[i].strategy,
                  whole.selection.candidates[i].strategy);
        EXPECT_DOUBLE_EQ(selected.selection.candidates[i].seconds(),
                         whole.selection.candidates[i].seconds());
      }
      EXPECT_EQ(selected.own_candidates.size(), whole.own_candidates.size());
      kept.insert(whole.selection.kept);
    }
  }
  EXPECT_GT(kept.size(), 1u);  // dcp's own plan and a static one
  PlanOptions pure = a100_plan_options(Strategy::kDcpPure, {2, 2});
  const Workload workload = small_workload(random_batch(40), MaskKind::kCausal, 8, 2);
  try {
    select_plan(workload, pure, build_plan(workload, pure));
    FAIL() << "select_plan with dcp-pure's options";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("dcp-pure"), std::string::npos) << e.what();
  }
}

TEST(PlanSearch, DcpKeepsTheFastestOfItsOwnAndTheStaticPlansUnderTheSimulator) {
  std::uint64_t seed = 21;
  std::set<std::string> kept;
  for (const MaskKind kind : {MaskKind::kCausal, MaskKind::kFull, MaskKind::kLambda}) {
    const Workload workload = small_workload(random_batch(seed++), kind, 8, 2);
    PlanOptions options = a100_plan_options(Strategy::kDcp, {2, 2});
    // A fast network makes static plans competitive on some batches.
    options.cluster.inter_node_bandwidth *= 50;
    options.cluster.inter_node_stream_bandwidth *= 50;
    const BuiltPlan best = build_plan(workload, options);
    ASSERT_EQ(best.selection.candidates.size(), 7u);  // dcp and the six static strategies
    const sim::PlanSimulation kept_time = sim::simulate(best.plan, options.cluster);
    for (const PlanCandidate& candidate : best.selection.candidates) {
      ASSERT_TRUE(candidate.feasible) << candidate.reason;
      // Each candidate's time is that of the plan its strategy builds on its own.
      options.strategy =
          candidate.strategy == "dcp" ? Strategy::kDcpPure : parse_strategy(candidate.strategy);
      const sim::PlanSimulation alone =
          sim::simulate(build_plan(workload, options).plan, options.cluster);
      if (candidate.simulated) {
        EXPECT_DOUBLE_EQ(candidate.forward_seconds, alone.forward.seconds);
        EXPECT_DOUBLE_EQ(candidate.backward_seconds, alone.backward.seconds);
      } else {
        // Screened out by its schedule estimate, which was far above the kept plan's time.
        EXPECT_GE(candidate.estimate_seconds, kScreenFactor * kept_time.seconds());
      }
      EXPECT_LE(kept_time.seconds(), alone.seconds()) << candidate.strategy;
    }
    options.strategy = Strategy::kDcp;
    EXPECT_EQ(best.plan.header.strategy,
              best.selection.kept == "dcp" ? "dcp" : "dcp/" + best.selection.kept);
    EXPECT_TRUE(verify(best.plan).ok);
    kept.insert(best.selection.kept);
  }
  // With a network this fast, a static plan wins at least once (these batches: Ulysses).
  EXPECT_TRUE(kept.size() > 1 || *kept.begin() != "dcp");
  // Ulysses cannot split 8 q heads over 16 devices: a candidate that is not feasible.
  const Workload workload = small_workload(random_batch(30), MaskKind::kCausal, 8, 2);
  const BuiltPlan wide = build_plan(workload, a100_plan_options(Strategy::kDcp, {2, 8}));
  const auto ulysses =
      std::find_if(wide.selection.candidates.begin(), wide.selection.candidates.end(),
                   [](const PlanCandidate& c) { return c.strategy == "ulysses"; });
  ASSERT_NE(ulysses, wide.selection.candidates.end());
  EXPECT_FALSE(ulysses->feasible);
  EXPECT_NE(ulysses->reason.find("head"), std::string::npos);
  // dcp-pure never selects.
  EXPECT_TRUE(build_plan(workload, a100_plan_options(Strategy::kDcpPure, {2, 2}))
                  .selection.candidates.empty());
}

// With token_flops, every candidate's step adds the rest of the layer for each device's tokens (at
// the cluster's forward rate) to its simulated passes, each pass of the layer ending with its
// slowest device (sim::lockstep_layer_seconds), and the kept plan is the fastest by that step.
TEST(PlanSearch, TokenFlopsPriceEachDevicesTokensBesideItsAttention) {
  const Workload workload = small_workload(random_batch(41), MaskKind::kCausal, 8, 2);
  PlanOptions options = a100_plan_options(Strategy::kDcp, {2, 2});
  options.search.block_sizes = {64, 128};
  const BuiltPlan attention_only = build_plan(workload, options);
  for (const PlanCandidate& candidate : attention_only.selection.candidates)
    EXPECT_EQ(candidate.token_seconds, 0) << candidate.strategy;
  // A rest of the layer as heavy as a 4K-token sequence's attention per token.
  options.token_flops = 3.5 * 4 * 128 * 8 * 2048;
  const BuiltPlan best = build_plan(workload, options);
  std::vector<TokenCount> held(4, 0);
  for (BlockId b = 0; b < best.workload.blocks().block_count(); ++b) {
    held[static_cast<std::size_t>(
        best.placement.token_block_device[static_cast<std::size_t>(b)])] +=
        best.workload.blocks().block(b).tokens;
  }
  const double per_token = options.token_flops / options.cluster.forward_flops;
  EXPECT_DOUBLE_EQ(token_seconds_of(best.workload, best.placement, options),
                   per_token * static_cast<double>(*std::max_element(held.begin(), held.end())));
  const double mean = per_token * static_cast<double>(workload.batch().total_tokens()) / 4;
  EXPECT_DOUBLE_EQ(mean_token_seconds(workload, options), mean);
  double kept = 0;
  for (const PlanCandidate& candidate : best.selection.candidates) {
    if (!candidate.feasible || !candidate.simulated) continue;
    EXPECT_GE(candidate.token_seconds, 0) << candidate.strategy;
    if (candidate.strategy == best.selection.kept) kept = candidate.seconds();
  }
  for (const PlanCandidate& candidate : best.selection.candidates) {
    if (candidate.feasible && candidate.simulated) {
      EXPECT_LE(kept, candidate.seconds());
    }
  }
  for (const OwnCandidate& own : best.own_candidates) EXPECT_GT(own.token_seconds, 0);
  // The kept plan's step, from its Programs' simulated ends and its devices' tokens: per pass,
  // the slowest device's attention and its share of the rest (a third forward, two backward).
  const sim::PlanSimulation simulated = sim::simulate(best.plan, options.cluster);
  double forward = 0;
  double backward = 0;
  for (std::size_t d = 0; d < 4; ++d) {
    const double rest = per_token * static_cast<double>(held[d]);
    forward = std::max(forward, simulated.forward.devices[d].end + rest / 3);
    backward = std::max(backward, simulated.backward.devices[d].end + 2 * rest / 3);
  }
  EXPECT_NEAR(kept, forward + backward, 1e-12);
  // Between the passes alone and the passes plus the busiest device's rest.
  EXPECT_GE(kept, simulated.seconds());
  EXPECT_LE(kept,
            simulated.seconds() + token_seconds_of(best.workload, best.placement, options) + 1e-12);
  EXPECT_GE(kept, mean);
  options.token_flops = -1;
  EXPECT_THROW(build_plan(workload, options), InvalidInput);
}

// Over several nodes, dcp's own search also deals the sequences whole to the nodes by their work
// and plans each node's share alone (kNodeGroupsLayout): no sequence crosses a node, each node's
// sequences at the block size its own search kept, and the joined plan is verified and simulated
// as the candidate says. A sequence too long for a node's share leaves it out; so does one node.
TEST(PlanSearch, TriesSequencesDealtWholeToNodesEachPlannedAlone) {
  const Workload workload = small_workload(random_batch(44), MaskKind::kCausal, 8, 2);
  PlanOptions options = a100_plan_options(Strategy::kDcpPure, {2, 2});
  options.search.block_sizes = {64, 128};
  options.token_flops = 3.5 * 4 * 128 * 8 * 512;
  const BuiltPlan built = build_plan(workload, options);
  const auto grouped =
      std::find_if(built.own_candidates.begin(), built.own_candidates.end(),
                   [](const OwnCandidate& c) { return c.layout == kNodeGroupsLayout; });
  ASSERT_NE(grouped, built.own_candidates.end());
  EXPECT_EQ(grouped->block_size, 0);
  const std::optional<plan_search::NodeDeal> deal = plan_search::node_shares(workload, options);
  ASSERT_TRUE(deal.has_value());
  const plan_search::NodeGroups groups = plan_search::build_node_groups(workload, options, *deal);
  const std::optional<BuiltPlan>& joined = groups.joined;
  ASSERT_TRUE(joined.has_value());
  EXPECT_TRUE(verify(joined->plan).ok);
  const sim::PlanSimulation simulated = sim::simulate(joined->plan, options.cluster);
  EXPECT_DOUBLE_EQ(simulated.forward.seconds, grouped->forward_seconds);
  EXPECT_DOUBLE_EQ(simulated.backward.seconds, grouped->backward_seconds);
  const BlockLayout& blocks = joined->workload.blocks();
  for (SeqIndex seq = 0; seq < workload.batch().size(); ++seq) {
    const std::int32_t node = options.cluster.shape.node_of(
        joined->placement.token_block_device[static_cast<std::size_t>(blocks.block_id(seq, 0))]);
    for (LocalBlockIndex b = 0; b < blocks.blocks_in(seq); ++b) {
      EXPECT_EQ(options.cluster.shape.node_of(
                    joined->placement
                        .token_block_device[static_cast<std::size_t>(blocks.block_id(seq, b))]),
                node)
          << "sequence " << seq;
    }
  }
  EXPECT_EQ(joined->plan.forward.size(), 4u);
  // Deterministic: the same plan bytes again.
  const plan_search::NodeGroups again = plan_search::build_node_groups(workload, options, *deal);
  EXPECT_EQ(serialize_plan(again.joined->plan), serialize_plan(joined->plan));
  // One sequence of more than a node's share: no node groups; nor on one node.
  const Workload long_one = small_workload(SequenceBatch({900, 60, 40}), MaskKind::kCausal, 8, 2);
  EXPECT_FALSE(plan_search::node_shares(long_one, options).has_value());
  PlanOptions one_node = a100_plan_options(Strategy::kDcpPure, {1, 4});
  one_node.search.block_sizes = {64, 128};
  EXPECT_FALSE(plan_search::node_shares(workload, one_node).has_value());
  options.search.node_groups = false;
  for (const OwnCandidate& c : build_plan(workload, options).own_candidates)
    EXPECT_NE(c.layout, kNodeGroupsLayout);
  // Without partitions, the other layouts alone; with none of them, no plan.
  options.search.node_groups = true;
  options.search.partitions = false;
  for (const OwnCandidate& c : build_plan(workload, options).own_candidates)
    EXPECT_NE(c.layout, "partition");
  options.search.node_groups = false;
  options.search.packed_layout = false;
  options.search.structured_layouts = false;
  EXPECT_THROW(build_plan(workload, options), InvalidInput);
}

// Under kDcp a node of the node groups may run a static strategy where that is faster there and
// leaves the step no longer: two nodes of a long and a short sequence each, where the rest of the
// layer prices every token and dcp's 512-token blocks (and the packings' 256) cannot split the
// tokens as evenly as Ulysses does, each run Ulysses at the share's own head blocks. The joined
// plan verifies and is faster than dcp-pure's node groups; its fp32 partials keep each node's
// layout. dcp-pure's nodes run dcp's own plans.
TEST(PlanSearch, NodeGroupsRunAStaticStrategyOnANodeWhereThatIsFaster) {
  const Workload workload =
      small_workload(SequenceBatch({1100, 300, 1100, 300}), MaskKind::kCausal, 8, 2);
  PlanOptions options = a100_plan_options(Strategy::kDcp, {2, 4});
  options.search.block_sizes = {512};
  options.token_flops = 350 * 4 * 128 * 8 * 512;
  const std::optional<plan_search::NodeDeal> deal = plan_search::node_shares(workload, options);
  ASSERT_TRUE(deal.has_value());
  const plan_search::NodeGroups groups = plan_search::build_node_groups(workload, options, *deal);
  const auto step = [&](const BuiltPlan& built) {
    const sim::PlanSimulation simulated = sim::simulate(built.plan, options.cluster);
    const sim::LockstepPasses rest = plan_search::token_seconds_of(built, simulated, options);
    return simulated.seconds() + rest.forward + rest.backward;
  };
  ASSERT_EQ(groups.plans.size(), 2u);
  for (const std::optional<BuiltPlan>& node : groups.plans) {
    ASSERT_TRUE(node.has_value());
    EXPECT_EQ(node->selection.kept, "ulysses");
    EXPECT_EQ(node->workload.heads().head_block_size(), 1);
  }
  const BuiltPlan& joined = *groups.joined;
  EXPECT_TRUE(verify(joined.plan).ok);
  PlanOptions pure = options;
  pure.strategy = Strategy::kDcpPure;
  const plan_search::NodeGroups own = plan_search::build_node_groups(workload, pure, *deal);
  for (const std::optional<BuiltPlan>& node : own.plans) EXPECT_EQ(node->selection.kept, "dcp");
  EXPECT_LT(step(joined), step(*own.joined));

  const BuiltPlan fp32 = plan_search::node_groups_in(workload, options, groups, DType::kFp32);
  EXPECT_EQ(fp32.plan.header.partial_dtype, DType::kFp32);
  EXPECT_EQ(joined.plan.header.partial_dtype, DType::kBf16);
  EXPECT_TRUE(verify(fp32.plan).ok);
  EXPECT_EQ(fp32.placement.token_block_device, joined.placement.token_block_device);
  EXPECT_EQ(fp32.placement.work_unit_device, joined.placement.work_unit_device);
  // Deterministic: the same plan bytes again.
  EXPECT_EQ(serialize_plan(plan_search::build_node_groups(workload, options, *deal).joined->plan),
            serialize_plan(joined.plan));
}

// A per-device token limit (PlacementOptions::max_device_tokens): below dcp's memory balance it
// bounds every placement of dcp's own search; above it, the search also deals the sequences to
// the nodes up to it, each node balanced against its own mean (kNodeGroupsAtLimitLayout). A limit
// the batch cannot fit, or a negative one, is refused.
TEST(PlanSearch, APerDeviceTokenLimitBoundsThePlacementsAndDealsTheNodesUpToIt) {
  const Workload workload = small_workload(random_batch(44), MaskKind::kCausal, 8, 2);
  PlanOptions options = a100_plan_options(Strategy::kDcpPure, {2, 2});
  options.search.block_sizes = {64, 128};
  options.token_flops = 3.5 * 4 * 128 * 8 * 512;
  options.placement.eps_memory = 0.3;
  const TokenCount total = workload.batch().total_tokens();
  const double mean = static_cast<double>(total) / 4;
  const auto has_layout = [](const BuiltPlan& built, std::string_view layout) {
    return std::any_of(built.own_candidates.begin(), built.own_candidates.end(),
                       [&](const OwnCandidate& c) { return c.layout == layout; });
  };
  // Without a limit: no deal at it.
  EXPECT_FALSE(plan_search::node_shares_at_limit(workload, options).has_value());
  EXPECT_FALSE(has_layout(build_plan(workload, options), kNodeGroupsAtLimitLayout));

  // Below the balance bound: the kept plan's busiest device within the limit, and the balance's
  // eps lowered to it.
  options.placement.max_device_tokens = static_cast<TokenCount>(std::ceil(mean * 1.1));
  EXPECT_NEAR(placement_options_of(options, workload).eps_memory,
              static_cast<double>(options.placement.max_device_tokens) / mean - 1, 1e-12);
  const BuiltPlan capped = build_plan(workload, options);
  EXPECT_LE(busiest_device_tokens(capped.workload, capped.placement),
            options.placement.max_device_tokens);
  EXPECT_FALSE(plan_search::node_shares_at_limit(workload, options).has_value());

  // Above it: the deal up to the limit, each node within it and within 1.3 x its own mean.
  options.placement.max_device_tokens = static_cast<TokenCount>(std::ceil(mean * 1.6));
  EXPECT_DOUBLE_EQ(placement_options_of(options, workload).eps_memory, 0.3);
  const std::optional<plan_search::NodeDeal> deal =
      plan_search::node_shares_at_limit(workload, options);
  ASSERT_TRUE(deal.has_value());
  EXPECT_TRUE(deal->node_balance);
  EXPECT_DOUBLE_EQ(deal->device_bound, static_cast<double>(options.placement.max_device_tokens));
  const BuiltPlan built = build_plan(workload, options);
  EXPECT_TRUE(has_layout(built, kNodeGroupsAtLimitLayout));
  const BuiltPlan joined = *plan_search::build_node_groups(workload, options, *deal).joined;
  EXPECT_TRUE(verify(joined.plan).ok);
  const std::vector<TokenCount> held = device_tokens(joined.workload, joined.placement);
  for (std::size_t node = 0; node < deal->shares.size(); ++node) {
    TokenCount share = 0;
    for (const std::size_t seq : deal->shares[node]) {
      share += workload.batch().length(static_cast<SeqIndex>(seq));
    }
    EXPECT_LE(share, 2 * options.placement.max_device_tokens) << "node " << node;
    for (std::size_t d = 2 * node; d < 2 * node + 2; ++d) {
      EXPECT_LE(held[d], options.placement.max_device_tokens) << "device " << d;
      EXPECT_LE(static_cast<double>(held[d]), 1.3 * static_cast<double>(share) / 2)
          << "device " << d;
    }
  }

  // A limit the batch does not fit on 4 devices, and a negative one.
  options.placement.max_device_tokens = total / 4 - 1;
  try {
    build_plan(workload, options);
    ADD_FAILURE() << "a limit under the mean device's tokens was accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("max_device_tokens " + std::to_string(total / 4 - 1)),
              std::string::npos)
        << e.what();
  }
  options.placement.max_device_tokens = -1;
  EXPECT_THROW(build_plan(workload, options), InvalidInput);
}

// dcp's own search also runs its Programs on the sequences packed at the smallest block size it
// searches, by each of packed_placement's rules, with the sequences it keeps whole on a device cut
// again at the largest (whole_sequences_reblocked): the very plans built on those placements
// alone, kept where one is the fastest. Whole sequences in larger blocks run fewer tiles, so the
// plan at the smallest blocks alone is slower. Where the rest of the layer is priced, the packings
// also run at half the smallest size.
TEST(PlanSearch, TriesSequencesPackedWholeAtTheLargestBlockSizeCutAtTheSmallest) {
  std::vector<TokenCount> lengths = {900, 700};                 // cut over devices
  for (int i = 0; i < 12; ++i) lengths.push_back(100 + 2 * i);  // whole, 2 blocks of 64 or 1 of 128
  const Workload workload = small_workload(SequenceBatch(lengths), MaskKind::kCausal, 8, 2);
  PlanOptions options = a100_plan_options(Strategy::kDcpPure, {2, 2});
  options.search.block_sizes = {128, 64};
  const BuiltPlan built = build_plan(workload, options);
  for (const auto& [rule, layout] : {std::pair{PackingRule::kLeastWork, kPackedLayout},
                                     std::pair{PackingRule::kBestFit, kPackedBestFitLayout}}) {
    const std::string_view name = layout;  // a structured binding cannot be captured (clang)
    const auto packed = std::find_if(built.own_candidates.begin(), built.own_candidates.end(),
                                     [&](const OwnCandidate& c) { return c.layout == name; });
    ASSERT_NE(packed, built.own_candidates.end()) << name;
    EXPECT_EQ(packed->block_size, 64);
    const Workload cut = reblocked(workload, 64);
    const PackedPlacement placement =
        packed_placement(cut, options.cluster.shape, options.placement.eps_memory, rule);
    ReblockedPlacement whole = whole_sequences_reblocked(cut, placement.placement, 128);
    EXPECT_LT(whole.workload.blocks().block_count(), cut.blocks().block_count()) << name;
    const BuiltPlan alone = build_at_placement(whole.workload, std::move(whole.placement),
                                               placement.within_bounds, options);
    EXPECT_TRUE(verify(alone.plan).ok);
    EXPECT_DOUBLE_EQ(sim::simulate(alone.plan, options.cluster).seconds(), packed->seconds())
        << name;
    const BuiltPlan small_blocks =
        build_at_placement(cut, placement.placement, placement.within_bounds, options);
    EXPECT_GT(sim::simulate(small_blocks.plan, options.cluster).seconds(), packed->seconds())
        << name;
  }
  double fastest = built.own_candidates.front().seconds();
  for (const OwnCandidate& c : built.own_candidates) fastest = std::min(fastest, c.seconds());
  EXPECT_DOUBLE_EQ(sim::simulate(built.plan, options.cluster).seconds(), fastest);
  // Where the rest of the layer prices every token, the packings also run at half the smallest
  // size (32); without it, at the smallest alone.
  const auto packing_sizes = [](const BuiltPlan& plan) {
    std::set<TokenCount> sizes;
    for (const OwnCandidate& c : plan.own_candidates) {
      if (c.layout.find("packed") != std::string::npos) sizes.insert(c.block_size);
    }
    return sizes;
  };
  EXPECT_EQ(packing_sizes(built), (std::set<TokenCount>{64}));
  PlanOptions priced = options;
  priced.token_flops = 3.5 * 4 * 128 * 8 * 512;
  EXPECT_EQ(packing_sizes(build_plan(workload, priced)), (std::set<TokenCount>{32, 64}));
  options.search.packed_layout = false;
  for (const OwnCandidate& c : build_plan(workload, options).own_candidates)
    EXPECT_EQ(c.layout.find("packed"), std::string::npos);
}

// The layouts of `built`'s own candidates, in the order tried.
std::vector<std::string> own_layouts(const BuiltPlan& built) {
  std::vector<std::string> layouts;
  for (const OwnCandidate& c : built.own_candidates) layouts.push_back(c.layout);
  return layouts;
}

// Four sequences each longer than a device's share of 4 x 2 devices (but within a node's) among
// short ones.
Workload four_long_among_short() {
  return small_workload(
      SequenceBatch({700, 90, 650, 120, 600, 100, 560, 110, 80, 140, 60, 130, 70, 50}),
      MaskKind::kCausal, 8, 2);
}

// On kNodeGroupsMinNodes nodes and more, where every sequence fits a node's share and the deal
// gives each node about the same work, dcp's own plans of the whole pool are its packing by least
// work and its node groups; an unbalanced deal, a sequence longer than a node's share, or a pool
// of fewer nodes brings back the partitions and best fit.
TEST(PlanSearch, PlansAPoolOfManyNodesInNodeGroupsBesideOnePacking) {
  const Workload workload =
      small_workload(SequenceBatch({600, 100, 600, 100, 600, 100, 600, 100, 100, 100, 100, 100}),
                     MaskKind::kCausal, 8, 2);
  PlanOptions options = a100_plan_options(Strategy::kDcpPure, {kNodeGroupsMinNodes, 2});
  options.search.block_sizes = {64, 128};
  const std::optional<plan_search::NodeDeal> deal = plan_search::node_shares(workload, options);
  ASSERT_TRUE(deal.has_value());
  EXPECT_DOUBLE_EQ(deal->imbalance, 1.0);
  EXPECT_EQ(own_layouts(build_plan(workload, options)),
            (std::vector<std::string>{std::string(kPackedLayout), std::string(kNodeGroupsLayout)}));
  // One sequence with most of the work: every node fits it, but the node that holds it is the
  // step.
  const Workload heavy = small_workload(
      SequenceBatch({1000, 300, 300, 300, 300, 300, 300, 300, 300}), MaskKind::kCausal, 8, 2);
  const std::optional<plan_search::NodeDeal> heavy_deal = plan_search::node_shares(heavy, options);
  ASSERT_TRUE(heavy_deal.has_value());
  EXPECT_GT(heavy_deal->imbalance, kNodeGroupsMaxImbalance);
  const std::vector<std::string> unbalanced = own_layouts(build_plan(heavy, options));
  EXPECT_GE(std::count(unbalanced.begin(), unbalanced.end(), "partition"), 2);
  EXPECT_EQ(unbalanced.back(), kNodeGroupsLayout);
  options.cluster.shape = {kNodeGroupsMinNodes / 2, 4};
  const std::vector<std::string> two_nodes = own_layouts(build_plan(workload, options));
  EXPECT_EQ(std::count(two_nodes.begin(), two_nodes.end(), "partition"), 4) << two_nodes.size();
  EXPECT_EQ(two_nodes.back(), kNodeGroupsLayout);
  options.cluster.shape = {kNodeGroupsMinNodes, 2};
  const Workload one_long =
      small_workload(SequenceBatch({2400, 90, 650, 120, 600, 100}), MaskKind::kCausal, 8, 2);
  const std::vector<std::string> too_long = own_layouts(build_plan(one_long, options));
  EXPECT_EQ(std::count(too_long.begin(), too_long.end(), kNodeGroupsLayout), 0);
  EXPECT_EQ(std::count(too_long.begin(), too_long.end(), kPackedBestFitLayout), 1);
  EXPECT_GE(std::count(too_long.begin(), too_long.end(), "partition"), 2);
}

// Where best fit places every token block and work unit as the packing by least work does, its
// plan would be the same one: it is not built again. Four equal sequences on four devices, each
// device holding one of them under either rule.
TEST(PlanSearch, BuildsOnePackingWhereBothRulesPlaceAlike) {
  const Workload workload =
      small_workload(SequenceBatch({200, 200, 200, 200}), MaskKind::kCausal, 8, 2);
  PlanOptions options = a100_plan_options(Strategy::kDcpPure, {1, 4});
  options.search.block_sizes = {64};
  const Workload cut = reblocked(workload, 64);
  const Placement least_work =
      packed_placement(cut, options.cluster.shape, options.placement.eps_memory,
                       PackingRule::kLeastWork)
          .placement;
  const Placement best_fit = packed_placement(cut, options.cluster.shape,
                                              options.placement.eps_memory, PackingRule::kBestFit)
                                 .placement;
  ASSERT_EQ(least_work.token_block_device, best_fit.token_block_device);
  ASSERT_EQ(least_work.work_unit_device, best_fit.work_unit_device);
  const std::vector<std::string> layouts = own_layouts(build_plan(workload, options));
  EXPECT_EQ(std::count(layouts.begin(), layouts.end(), kPackedLayout), 1);
  EXPECT_EQ(std::count(layouts.begin(), layouts.end(), kPackedBestFitLayout), 0);
  // Where they differ (TriesSequencesPackedWholeAtTheLargestBlockSizeCutAtTheSmallest), both run.
}

// In node groups, a node whose share has a sequence longer than a device's bound is also
// partitioned where its packed plan is the slowest node's, and its faster plan kept; without
// partitions (SearchOptions::partitions) every node keeps its packing.
TEST(PlanSearch, NodeGroupsPartitionTheSlowestNodesWhereASequenceMustBeCut) {
  const Workload workload = four_long_among_short();
  PlanOptions options = a100_plan_options(Strategy::kDcpPure, {kNodeGroupsMinNodes, 2});
  options.search.block_sizes = {64, 128};
  const auto node_groups_seconds = [&] {
    for (const OwnCandidate& c : build_plan(workload, options).own_candidates) {
      if (c.layout == kNodeGroupsLayout) return c.seconds();
    }
    ADD_FAILURE() << "no node groups";
    return 0.0;
  };
  const double partitioned = node_groups_seconds();
  options.search.partitions = false;
  const double packed = node_groups_seconds();
  EXPECT_LT(partitioned, packed);
}

}  // namespace
}  // namespace dcp

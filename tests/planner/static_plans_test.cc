// SPDX-License-Identifier: Apache-2.0
// The static strategies' layouts: te's head groups, loongtrain's double ring, and data parallel
// groups of devices with their automatic degree and refusals.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"
#include "dcp/core/rng.h"

#include "dcp/model/cluster_presets.h"
#include "dcp/model/mask_spec.h"

#include "dcp/planner/plan_builder.h"
#include "dcp/planner/plan_header.h"
#include "dcp/planner/schedule/schedule.h"
#include "dcp/program/program_stats.h"
#include "dcp/program/verifier/verifier.h"
#include "dcp/sim/simulator.h"

namespace dcp {
namespace {

// The counting sort of transfers gives std::sort's order, whether the buckets are few (many
// transfers per (launch, src)) or more than the transfers (its fallback), and on duplicates.
TEST(SortTransfers, GivesTheOrderOfOneSort) {
  Rng rng(7);
  for (const auto& [count, launches, devices] :
       {std::tuple{5000, 6, 8}, std::tuple{40, 30, 64}, std::tuple{1, 1, 1}, std::tuple{0, 1, 1}}) {
    std::vector<Transfer> transfers;
    for (int i = 0; i < count; ++i) {
      const auto pick = [&](std::int64_t n) {
        return static_cast<std::int32_t>(rng.uniform_int(0, n - 1));
      };
      transfers.push_back({{static_cast<SlotKind>(pick(6)), pick(50), pick(4)},
                           pick(devices),
                           pick(devices),
                           pick(launches)});
      if (i % 97 == 0) transfers.push_back(transfers.back());  // a duplicate
    }
    std::vector<Transfer> expected = transfers;
    std::sort(expected.begin(), expected.end(), transfer_order);
    sort_transfers(transfers.begin(), transfers.end());
    EXPECT_EQ(transfers, expected) << count << " transfers";
  }
}

Workload make(std::vector<TokenCount> lengths, MaskKind kind = MaskKind::kCausal,
              std::int32_t q_heads = 8, std::int32_t kv_heads = 2) {
  AttentionShape shape;
  shape.q_heads = q_heads;
  shape.kv_heads = kv_heads;
  shape.head_dim = 16;
  const SequenceBatch batch(std::move(lengths));
  MaskSpec spec;
  spec.kind = kind;
  return Workload(shape, batch, build_batch_mask(spec, batch), 64, 1);
}

StaticOptions with_degree(std::int32_t data_parallel) {
  StaticOptions options;
  options.data_parallel = data_parallel;
  return options;
}

bool is_kv_hop(const Transfer& t) { return t.value.kind == SlotKind::kKV && t.launch > 0; }

DType partial_of(Strategy strategy, const Workload& workload) {
  PlanOptions options;
  options.strategy = strategy;
  return partial_dtype_of(options, workload.shape().dtype);
}

double bound_of(Strategy strategy, const Workload& workload, const ClusterSpec& cluster,
                const StaticOptions& options) {
  return static_estimate_lower_bound(
      strategy, workload, cluster, options,
      plan_header(workload, cluster.shape, "s", 0, partial_of(strategy, workload)));
}

// The schedule estimate, forward plus backward, of the plan the strategy builds.
// The estimate of static_plan's passes, each the lower of its two schedules where a double ring
// may send its outer hops spread (static_layout keeps either).
double estimate_of(Strategy strategy, const Workload& workload, const ClusterSpec& cluster,
                   const StaticOptions& options) {
  const StaticPlan plan = static_plan(strategy, workload, cluster.shape, options);
  const PlanHeader header =
      plan_header(plan.workload, cluster.shape, "s", 0, partial_of(strategy, workload));
  double seconds = 0;
  for (const PassSchedule* pass : {&plan.forward, &plan.backward}) {
    const PassSchedule spread = spread_outer_hops(plan.workload, plan.placement, plan.ring, *pass);
    seconds += std::min(estimate(plan.workload, plan.placement, cluster, header, *pass).seconds,
                        estimate(plan.workload, plan.placement, cluster, header, spread).seconds);
  }
  return seconds;
}

TEST(TePlan, SplitsHeadsOverPairsOfDevicesWithTwoKvHeadBlocks) {
  const Workload workload = make({3000, 700, 40});
  EXPECT_EQ(head_degree(workload.heads(), 8), 2);
  EXPECT_EQ(head_degree(workload.heads(), 1), 1);
  EXPECT_EQ(head_degree(make({100}, MaskKind::kCausal, 8, 8).heads(), 6), 2);
  const StaticPlan plan = static_plan(Strategy::kTe, workload, {2, 4});
  EXPECT_EQ(plan.forward.stages, 1 + 4);  // the all-to-all, then a ring of 4 pairs
  // A device computes its 4 q heads as one head block (one kernel, as TransformerEngine does).
  EXPECT_EQ(plan.workload.heads().head_block_size(), 4);
  std::set<std::int32_t> q_heads_moved;
  for (const Transfer& t : plan.forward.transfers) {
    if (t.value.kind != SlotKind::kQ) continue;
    EXPECT_EQ(t.launch, 0);
    EXPECT_EQ(t.src / 2, t.dst / 2) << "q leaves its pair";
    // q heads 0-3 (head block 0) go to the even device of a pair, 4-7 to the odd one.
    EXPECT_EQ(t.dst % 2, t.value.head_block);
    q_heads_moved.insert(t.value.head_block);
  }
  EXPECT_EQ(q_heads_moved.size(), 2u);
  for (WorkUnitId u = 0; u < plan.workload.work_unit_count(); ++u) {
    const DeviceId device = plan.placement.work_unit_device[static_cast<std::size_t>(u)];
    EXPECT_EQ(device % 2, plan.workload.work_unit(u).head_block);
  }
  // kv head block 0 is read on even devices, 1 on odd ones; it travels a ring of the 4 pairs.
  for (const Transfer& t : plan.forward.transfers) {
    if (t.value.kind != SlotKind::kKV) continue;
    EXPECT_EQ(t.dst % 2, t.value.head_block);
    if (t.launch > 0) {
      EXPECT_EQ(t.src % 2, t.dst % 2);
    }
  }
}

// Static Programs hold one head block per device's share of the heads: the same tiles and pairs
// in fewer work units.
TEST(StaticPlans, GroupTheHeadsADeviceComputesIntoOneHeadBlock) {
  const Workload workload = make({3000, 700, 40});
  // On 2 x 4 devices: te and loongtrain split 8 q heads over pairs, hybrid over a node of 4.
  for (const auto& [strategy, size] : {std::pair{Strategy::kRing, 8},
                                       {Strategy::kZigzag, 8},
                                       {Strategy::kTe, 4},
                                       {Strategy::kLoongTrain, 4},
                                       {Strategy::kHybrid, 2}}) {
    const StaticPlan plan = static_plan(strategy, workload, {2, 4});
    EXPECT_EQ(plan.workload.heads().head_block_size(), size) << to_string(strategy);
    EXPECT_EQ(plan.workload.heads().count() * size, 8) << to_string(strategy);
    EXPECT_EQ(plan.workload.unmasked_pairs(), workload.unmasked_pairs()) << to_string(strategy);
  }
  // 6 q / 2 kv heads on pairs: each device's 3 q heads read one kv head.
  const Workload six = make({500, 90}, MaskKind::kCausal, 6, 2);
  EXPECT_EQ(static_plan(Strategy::kTe, six, {1, 4}).workload.heads().head_block_size(), 3);
}

// At the workload's own head blocks (StaticOptions::device_head_blocks false, so that the plan
// joins plans of dcp's): the same tiles in more work units, and the same simulated passes.
TEST(StaticPlans, AtTheWorkloadsHeadBlocksSimulateAsAtTheDevicesOwn) {
  const Workload workload = make({3000, 700, 40});
  for (const Strategy strategy : {Strategy::kUlysses, Strategy::kZigzag, Strategy::kTe}) {
    PlanOptions options;
    options.strategy = strategy;
    options.cluster = cluster_preset("a100-p4de");
    options.cluster.shape = {1, 4};
    const BuiltPlan grouped = build_one_plan(workload, options);
    options.statics.device_head_blocks = false;
    const BuiltPlan fine = build_one_plan(workload, options);
    const std::string name(to_string(strategy));
    EXPECT_GT(grouped.workload.heads().head_block_size(), 1) << name;
    EXPECT_EQ(fine.workload.heads().head_block_size(), 1) << name;
    EXPECT_EQ(fine.plan.header.head_block_size, 1) << name;
    EXPECT_EQ(fine.workload.unmasked_pairs(), workload.unmasked_pairs()) << name;
    EXPECT_TRUE(verify(fine.plan).ok) << name;
    const sim::PlanSimulation coarse = sim::simulate(grouped.plan, options.cluster);
    const sim::PlanSimulation split = sim::simulate(fine.plan, options.cluster);
    EXPECT_NEAR(split.forward.seconds, coarse.forward.seconds, 1e-9 * coarse.forward.seconds)
        << name;
    EXPECT_NEAR(split.backward.seconds, coarse.backward.seconds, 1e-9 * coarse.backward.seconds)
        << name;
  }
}

TEST(TePlan, IsHybridWhenItsHeadGroupsAreNodes) {
  const Workload workload = make({3000, 700, 40});
  const StaticPlan te = static_plan(Strategy::kTe, workload, {4, 2});
  const StaticPlan hybrid = static_plan(Strategy::kHybrid, workload, {4, 2});
  EXPECT_EQ(te.placement.token_block_device, hybrid.placement.token_block_device);
  EXPECT_EQ(te.placement.work_unit_device, hybrid.placement.work_unit_device);
  EXPECT_EQ(te.forward.transfers, hybrid.forward.transfers);
  EXPECT_EQ(te.backward.transfers, hybrid.backward.transfers);
}

// On 4 nodes x 8 devices with 8 q / 2 kv heads: head groups of 2, a ring of R = 16 head groups,
// windows of the 4 head groups of a node.
TEST(LoongTrainPlan, KeepsInnerHopsInsideANodeAndSendsOuterHopsAcrossNodes) {
  const ClusterShape cluster{4, 8};
  const Workload workload = make({20480, 8960}, MaskKind::kFull);
  const StaticPlan plan = static_plan(Strategy::kLoongTrain, workload, cluster);
  ASSERT_EQ(plan.ring.window, 4);
  const auto position = [](DeviceId d) { return d / 2; };
  // The kv tokens a head group's blocks hold (by its first device).
  std::vector<TokenCount> held(static_cast<std::size_t>(cluster.devices()), 0);
  for (BlockId b = 0; b < plan.workload.blocks().block_count(); ++b) {
    const DeviceId d = plan.placement.token_block_device[static_cast<std::size_t>(b)];
    held[static_cast<std::size_t>(d / 2 * 2)] += plan.workload.blocks().block(b).tokens;
  }
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    const PassSchedule whole = pass == Pass::kForward ? plan.forward : plan.backward;
    const PassSchedule spread = spread_outer_hops(plan.workload, plan.placement, plan.ring, whole);
    for (const PassSchedule* schedule : {&whole, &spread}) {
      EXPECT_EQ(schedule->stages, 1 + 16);
      // Per device and launch: the kv tokens it sends on the outer ring.
      std::map<std::pair<DeviceId, std::int32_t>, TokenCount> outer_tokens;
      TokenCount largest = 0;
      for (const Transfer& t : schedule->transfers) {
        if (!is_kv_hop(t)) continue;
        ASSERT_EQ(t.src % 2, t.dst % 2);  // the same local index of two head groups
        const std::int32_t from = position(t.src), to = position(t.dst);
        if (cluster.node_of(t.src) == cluster.node_of(t.dst)) {
          EXPECT_EQ(to, from / 4 * 4 + (from % 4 + 1) % 4) << "an inner hop goes one step";
          EXPECT_NE(t.launch % 4, 0) << "no inner hop in a round's last launch";
        } else {
          EXPECT_EQ(to, (from + 4) % 16) << "an outer hop goes to the next window, same position";
          const TokenCount tokens = plan.workload.blocks().block(t.value.block).tokens;
          outer_tokens[{t.src, t.launch}] += tokens;
          largest = std::max(largest, tokens);
        }
      }
      // The outer hop into round o leaves while round o - 1 runs (launches 1-4, 5-8, 9-12): the
      // blocks of the head group (two devices) the kv started at, o windows (8 devices) back.
      // Whole, in the round's first launch; spread, over its four, their tokens within one block
      // of each other.
      for (DeviceId d = 0; d < cluster.devices(); ++d) {
        for (std::int32_t round = 0; round < 3; ++round) {
          TokenCount sent = 0, fewest = 1 << 30, most = 0;
          for (std::int32_t launch = 1 + 4 * round; launch <= 4 + 4 * round; ++launch) {
            const auto found = outer_tokens.find({d, launch});
            const TokenCount n = found == outer_tokens.end() ? 0 : found->second;
            sent += n;
            fewest = std::min(fewest, n);
            most = std::max(most, n);
            if (schedule == &whole && launch != 1 + 4 * round) {
              EXPECT_EQ(n, 0) << "device " << d << " launch " << launch;
            }
          }
          const DeviceId owner = (d / 2 * 2 + 32 - 8 * round) % 32;
          EXPECT_EQ(sent, held[static_cast<std::size_t>(owner)])
              << "device " << d << " round " << round;
          if (schedule == &spread) {
            EXPECT_LE(most - fewest, largest) << "device " << d << " round " << round;
            EXPECT_GT(fewest, 0) << "device " << d << " round " << round;
          }
        }
      }
      EXPECT_EQ(outer_tokens.size(), (schedule == &whole ? 3u : 12u) * 32u)
          << "and in no other launch";
    }
  }
}

// static_layout sends a double ring's outer hops whichever way the estimate finds faster, per
// pass: spread where long sequences give each ring step time to hide its share (LongAlign-like,
// causal, on h100-dgx), whole where a sparse mask leaves the steps short and smaller messages
// would reach less of their link's rate.
TEST(LoongTrainPlan, SendsOuterHopsTheWayTheEstimateFindsFaster) {
  PlanOptions options;
  options.strategy = Strategy::kLoongTrain;
  options.cluster = cluster_preset("h100-dgx");
  std::set<std::int32_t> spreads_kept;
  for (const MaskKind kind : {MaskKind::kCausal, MaskKind::kLambda}) {
    AttentionShape shape;
    shape.q_heads = 8;
    shape.kv_heads = 2;
    shape.head_dim = 128;
    const SequenceBatch batch({29586, 74186});
    MaskSpec spec;
    spec.kind = kind;
    const Workload workload(shape, batch, build_batch_mask(spec, batch), 1024, 1);
    const StaticPlan layout = static_layout(workload, options);
    const StaticPlan whole =
        static_plan(Strategy::kLoongTrain, workload, options.cluster.shape, {});
    ASSERT_GT(whole.ring.window, 1);
    const PlanHeader header = plan_header(layout.workload, options.cluster.shape, "loongtrain", 0,
                                          partial_dtype_of(options, shape.dtype));
    for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
      const PassSchedule spread =
          spread_outer_hops(whole.workload, whole.placement, whole.ring,
                            pass == Pass::kForward ? whole.forward : whole.backward);
      const auto seconds = [&](const PassSchedule& s) {
        return estimate(whole.workload, whole.placement, options.cluster, header, s).seconds;
      };
      const double kept = seconds(pass == Pass::kForward ? layout.forward : layout.backward);
      const double whole_seconds = seconds(pass == Pass::kForward ? whole.forward : whole.backward);
      EXPECT_EQ(kept, std::min(whole_seconds, seconds(spread))) << to_string(kind);
      spreads_kept.insert(kept < whole_seconds ? 4 : 1);
    }
  }
  EXPECT_EQ(spreads_kept, (std::set<std::int32_t>{1, 4})) << "each way kept somewhere";
}

TEST(ScheduleEstimate, MovesNoMessageFasterThanItsLinksStreamBandwidth) {
  // A ring over 2 nodes x 2: each launch's messages cross at most at the stream bandwidth.
  const Workload workload = make({8192, 4096}, MaskKind::kCausal);
  ClusterSpec spec = cluster_preset("a100-p4de");
  spec.shape = {2, 2};
  const StaticPlan plan = static_plan(Strategy::kRing, workload, spec.shape);
  const PlanHeader header = plan_header(plan.workload, spec.shape, "ring", 0);
  for (const double stream : {0.0, 1e9}) {
    spec.inter_node_stream_bandwidth = stream;
    spec.intra_node_stream_bandwidth = stream;
    const ScheduleEstimate e = estimate(plan.workload, plan.placement, spec, header, plan.forward);
    std::map<std::tuple<std::int32_t, DeviceId, DeviceId>, std::int64_t> messages;
    for (const Transfer& t : plan.forward.transfers) {
      messages[{t.launch, t.src, t.dst}] +=
          value_bytes(header, t.value.kind, plan.workload.blocks().block(t.value.block).tokens);
    }
    ASSERT_FALSE(messages.empty());
    for (const auto& [key, bytes] : messages) {
      const bool inter =
          spec.shape.node_of(std::get<1>(key)) != spec.shape.node_of(std::get<2>(key));
      const double alone = spec.link_bytes(bytes, inter, bytes) / spec.stream_bandwidth(inter);
      EXPECT_GE(e.launch_comm[static_cast<std::size_t>(std::get<0>(key))], alone * (1 - 1e-12));
      if (stream > 0) {
        EXPECT_GT(alone, 0);
      }
    }
  }
}

TEST(StaticPlans, SendPartialsInTheDtypeTheirSystemsUse) {
  // TransformerEngine sends dk and dv in kv's dtype; the ring implementations in fp32.
  const Workload workload = make({2048, 1024}, MaskKind::kCausal);
  ASSERT_EQ(workload.shape().dtype, DType::kBf16);
  PlanOptions options;
  options.cluster = cluster_preset("a100-p4de");
  options.cluster.shape = {2, 2};
  for (const auto& [strategy, dtype] :
       {std::pair{Strategy::kTe, workload.shape().dtype}, std::pair{Strategy::kRing, DType::kFp32},
        std::pair{Strategy::kZigzag, DType::kFp32},
        std::pair{Strategy::kLoongTrain, DType::kFp32}}) {
    options.strategy = strategy;
    EXPECT_EQ(build_one_plan(workload, options).plan.header.partial_dtype, dtype)
        << to_string(strategy);
  }
}

TEST(LoongTrainPlan, MovesNoMoreBytesAcrossNodesThanTeInFewerLaunches) {
  const ClusterShape cluster{4, 8};
  const Workload workload = make({20480, 8960}, MaskKind::kFull);
  PlanOptions options;
  options.cluster = cluster_preset("a100-p4de");
  options.cluster.shape = cluster;
  options.partial_dtype = DType::kFp32;  // te's default sends dk and dv in bf16: compare alike
  options.strategy = Strategy::kTe;
  const BuiltPlan te = build_one_plan(workload, options);
  options.strategy = Strategy::kLoongTrain;
  const BuiltPlan loongtrain = build_one_plan(workload, options);
  ASSERT_TRUE(verify(loongtrain.plan).ok);
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    const PassTraffic a = pass_traffic(te.plan.header, te.plan.programs(pass));
    const PassTraffic b = pass_traffic(loongtrain.plan.header, loongtrain.plan.programs(pass));
    const auto kv = static_cast<std::size_t>(SlotKind::kKV);
    // Each kv value crosses between windows 3 times on the double ring; on te's single ring 3 or
    // 4 times (4 unless it starts at a window's first head group).
    EXPECT_LT(b.inter_node_by_kind[kv], a.inter_node_by_kind[kv]);
    EXPECT_EQ(b.inter_node_by_kind[kv] * 15, a.inter_node_by_kind[kv] * 12)
        << "per window: R - w outer hops against R - 1 ring hops out of the window";
    EXPECT_LE(b.inter_node, a.inter_node);
  }
  // te sends across nodes in every ring launch, one head group per node at a time; loongtrain
  // (its outer hops whole) in one launch per round, every head group of a node at once.
  const auto crossings_per_launch = [&](const StaticPlan& plan) {
    std::map<std::int32_t, std::int32_t> count;
    for (const Transfer& t : plan.forward.transfers) {
      if (is_kv_hop(t) && cluster.node_of(t.src) != cluster.node_of(t.dst)) ++count[t.launch];
    }
    return count;
  };
  const auto te_count = crossings_per_launch(static_plan(Strategy::kTe, workload, cluster));
  const auto lt_count = crossings_per_launch(static_plan(Strategy::kLoongTrain, workload, cluster));
  EXPECT_EQ(te_count.size(), 15u);
  EXPECT_EQ(lt_count.size(), 3u);
  EXPECT_GT(lt_count.begin()->second, te_count.begin()->second);
}

TEST(LoongTrainPlan, WithTheWholeRingAsItsWindowIsTe) {
  const Workload workload = make({20000, 9000, 300}, MaskKind::kCausal);
  for (const ClusterShape cluster : {ClusterShape{4, 8}, ClusterShape{2, 4}}) {
    StaticOptions whole;
    whole.loongtrain_window = 64;  // capped at the ring
    const StaticPlan lt = static_plan(Strategy::kLoongTrain, workload, cluster, whole);
    const StaticPlan te = static_plan(Strategy::kTe, workload, cluster);
    EXPECT_EQ(lt.placement.token_block_device, te.placement.token_block_device);
    EXPECT_EQ(lt.placement.work_unit_device, te.placement.work_unit_device);
    for (const auto& [a, b] : {std::pair{&lt.forward, &te.forward}, {&lt.backward, &te.backward}}) {
      EXPECT_EQ(a->stages, b->stages);
      EXPECT_EQ(a->unit_stage, b->unit_stage);
      EXPECT_EQ(a->transfers, b->transfers);
    }
  }
  // The default window differs from te on several nodes, and a window must divide the ring.
  EXPECT_NE(static_plan(Strategy::kLoongTrain, workload, {4, 8}).forward.transfers,
            static_plan(Strategy::kTe, workload, {4, 8}).forward.transfers);
  StaticOptions odd;
  odd.loongtrain_window = 3;
  try {
    static_plan(Strategy::kLoongTrain, workload, {4, 8}, odd);
    FAIL() << "a window of 3 on a ring of 16";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("window 3"), std::string::npos) << e.what();
  }
}

TEST(LoongTrainPlan, WindowsSearchedArePowersOfTwoBelowTheRing) {
  AttentionShape shape;  // 8 q / 2 kv heads: head groups of 2 devices
  const HeadBlocking heads(shape, 1);
  EXPECT_EQ(loongtrain_windows(heads, 32), (std::vector<std::int32_t>{1, 2, 4, 8}));
  EXPECT_EQ(loongtrain_windows(heads, 8), (std::vector<std::int32_t>{1, 2}));
  EXPECT_EQ(loongtrain_windows(heads, 2), (std::vector<std::int32_t>{1}));
  EXPECT_EQ(loongtrain_windows(heads, 24), (std::vector<std::int32_t>{1, 2, 4}));
  // Every window searched plans on that cluster.
  const Workload workload = make({20000, 9000, 300}, MaskKind::kCausal);
  for (const std::int32_t w : loongtrain_windows(workload.heads(), 32)) {
    StaticOptions options;
    options.loongtrain_window = w;
    EXPECT_NO_THROW(static_plan(Strategy::kLoongTrain, workload, {4, 8}, options)) << w;
  }
}

// --- Pricing from the structure -----------------------------------------------------------------

// The bound selection screens with never exceeds the estimate of the plan the strategy builds:
// every static strategy, masks, data parallel degrees, loongtrain windows (on 2 x 8 up to three
// rounds of a double ring inside a node, or across nodes), with and without stream caps, on
// batches of many short sequences and of one long one.
TEST(StaticEstimateBound, NeverExceedsTheEstimateOfThePlanBuilt) {
  const std::vector<std::vector<TokenCount>> batches = {
      {3000, 1500, 700, 200, 90, 33, 7}, {6000}, {2500, 2500, 10}};
  int cases = 0;
  for (const std::string preset : {"a100-p4de", "h100-dgx"}) {
    for (const bool capped : {true, false}) {
      for (const ClusterShape shape : {ClusterShape{2, 4}, ClusterShape{2, 8}}) {
        ClusterSpec cluster = cluster_preset(preset);
        cluster.shape = shape;
        if (!capped) cluster.intra_node_stream_bandwidth = cluster.inter_node_stream_bandwidth = 0;
        for (const MaskKind kind : {MaskKind::kCausal, MaskKind::kLambda}) {
          for (const auto& lengths : batches) {
            const Workload workload = make(lengths, kind);
            for (const Strategy strategy : kStaticStrategies) {
              for (const std::int32_t degree : {1, 2}) {
                for (const std::int32_t window : {0, 1, 2}) {
                  if (window > 0 && strategy != Strategy::kLoongTrain) continue;
                  StaticOptions options = with_degree(degree);
                  options.loongtrain_window = window;
                  if (kind != MaskKind::kCausal) options.masked_tiles = MaskedTiles::kCompute;
                  double bound = 0;
                  try {
                    bound = bound_of(strategy, workload, cluster, options);
                  } catch (const InvalidInput&) {
                    // Refused exactly where static_plan refuses.
                    EXPECT_THROW(static_plan(strategy, workload, cluster.shape, options),
                                 InvalidInput);
                    continue;
                  }
                  EXPECT_GT(bound, 0);
                  EXPECT_LE(bound, estimate_of(strategy, workload, cluster, options) * (1 + 1e-9))
                      << preset << (capped ? " capped " : " uncapped ") << to_string(strategy)
                      << " d=" << degree << " w=" << window << " batch of " << lengths.size()
                      << " on " << shape.nodes << "x" << shape.devices_per_node;
                  ++cases;
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 600);
}

// At the sizes it screens (kv traffic dominating), the bound comes within a factor of three of
// the estimate for ring and zigzag, and of four for te (whose all-to-alls and dk, dv going back
// it leaves out), so that selection skips them without building them.
TEST(StaticEstimateBound, IsTightWhereKvTrafficDominates) {
  AttentionShape shape;  // 8 q / 2 kv heads, head dim 128
  const SequenceBatch batch({9000, 5000, 3000, 2000, 1200, 800, 500, 300, 200, 100});
  MaskSpec causal;
  const Workload workload(shape, batch, build_batch_mask(causal, batch), 1024, 1);
  ClusterSpec cluster = cluster_preset("a100-p4de");
  cluster.shape = {2, 4};
  for (const auto& [strategy, factor] :
       {std::pair{Strategy::kRing, 3.0}, {Strategy::kZigzag, 3.0}, {Strategy::kTe, 4.0}}) {
    const double bound = bound_of(strategy, workload, cluster, {});
    const double estimated = estimate_of(strategy, workload, cluster, {});
    EXPECT_LE(bound, estimated) << to_string(strategy);
    EXPECT_GE(bound, estimated / factor) << to_string(strategy);
  }
}

// --- Data parallelism ---------------------------------------------------------------------------

TEST(StaticDataParallel, KeepsEveryTransferInsideItsGroupAndSplitsSequencesGreedily) {
  // Longest first to the group with the fewest tokens: 500 -> 0, 400 -> 1, 300 -> 1, 200 -> 0,
  // 100 -> 0 (a tie at 700 goes to the lower group).
  const Workload workload = make({300, 500, 100, 400, 200}, MaskKind::kLambda);
  const std::int32_t expected_group[] = {1, 0, 0, 1, 0};
  const ClusterShape cluster{2, 4};
  for (const Strategy strategy : kStaticStrategies) {
    const StaticPlan plan = static_plan(strategy, workload, cluster, with_degree(2));
    EXPECT_EQ(plan.data_parallel, 2);
    for (const TokenBlock& block : plan.workload.blocks().blocks()) {
      const BlockId id = plan.workload.blocks().block_id(block.seq, block.index);
      EXPECT_EQ(plan.placement.token_block_device[static_cast<std::size_t>(id)] / 4,
                expected_group[block.seq])
          << to_string(strategy) << " sequence " << block.seq;
    }
    for (const PassSchedule* pass : {&plan.forward, &plan.backward}) {
      for (const Transfer& t : pass->transfers) {
        EXPECT_EQ(t.src / 4, t.dst / 4) << to_string(strategy) << " crosses groups";
      }
    }
    // Each group cuts its sequences for its own 4 devices.
    const bool two_per_device = strategy != Strategy::kRing && strategy != Strategy::kUlysses;
    EXPECT_EQ(plan.workload.blocks().blocks_in(1), two_per_device ? 8 : 4) << to_string(strategy);
    PlanOptions options;
    options.strategy = strategy;
    options.cluster = cluster_preset("a100-p4de");
    options.cluster.shape = cluster;
    options.statics.data_parallel = 2;
    const BuiltPlan built = build_one_plan(workload, options);
    EXPECT_EQ(built.data_parallel, 2);
    const VerifyReport report = verify(built.plan);
    EXPECT_TRUE(report.ok) << to_string(strategy) << ": " << describe(report);
  }
}

TEST(StaticDataParallel, AutomaticDegreeFollowsThePapersRule) {
  const ClusterShape cluster{4, 8};
  const SequenceBatch eight(std::vector<TokenCount>(8, 16384));
  EXPECT_EQ(automatic_data_parallel(Strategy::kZigzag, eight, cluster), 8);
  EXPECT_EQ(automatic_data_parallel(Strategy::kTe, eight, cluster), 8);
  EXPECT_EQ(automatic_data_parallel(Strategy::kHybrid, eight, cluster), 4);  // whole nodes
  EXPECT_EQ(automatic_data_parallel(Strategy::kDcp, eight, cluster), 1);
  EXPECT_EQ(automatic_data_parallel(Strategy::kRing, SequenceBatch({131072}), cluster), 1);
  // A 98K-token batch whose longest sequence is 12000 tokens: 131072 // 12000 = 10, so 8.
  std::vector<TokenCount> lengths(8, 10000);
  lengths.push_back(12000);
  lengths.push_back(6000);
  EXPECT_EQ(automatic_data_parallel(Strategy::kRing, SequenceBatch(lengths), cluster), 8);
  // 0 asks for it.
  const Workload workload = make({1000, 1000, 1000, 1000}, MaskKind::kCausal);
  EXPECT_EQ(static_plan(Strategy::kZigzag, workload, cluster, with_degree(0)).data_parallel, 4);
}

TEST(StaticDataParallel, RefusesADegreeTheDevicesOrTheStrategyCannotTake) {
  const Workload workload = make({1000, 700, 300});
  const auto refusal = [&](Strategy strategy, std::int32_t d) {
    try {
      static_plan(strategy, workload, {4, 8}, with_degree(d));
    } catch (const InvalidInput& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  for (const std::int32_t d : {3, 64, -1}) {
    const std::string message = refusal(Strategy::kZigzag, d);
    EXPECT_NE(message.find("zigzag: data parallel degree " + std::to_string(d)), std::string::npos)
        << message;
  }
  const std::string hybrid = refusal(Strategy::kHybrid, 8);
  EXPECT_NE(hybrid.find("hybrid with data parallel degree 8"), std::string::npos) << hybrid;
  EXPECT_EQ(refusal(Strategy::kHybrid, 4), "accepted");
  // Ulysses needs a q head block per device of a group: 32 devices do not fit 8 heads, 8 do.
  EXPECT_NE(refusal(Strategy::kUlysses, 1).find("head"), std::string::npos);
  EXPECT_EQ(refusal(Strategy::kUlysses, 4), "accepted");
  EXPECT_EQ(refusal(Strategy::kTe, 32), "accepted");  // groups of one device: a = 1
}

}  // namespace
}  // namespace dcp

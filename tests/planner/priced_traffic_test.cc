// SPDX-License-Identifier: Apache-2.0
// dcp's Programs move what its placement priced: per pass and per link class, on sampled LDC- and
// LongAlign-like batches, every built-in mask kind and a random multi-interval mask, on 2 x 4 and
// 4 x 8 clusters. Partials made on several devices of a node are reduced there and cross once.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/rng.h"

#include "dcp/model/cluster_presets.h"
#include "dcp/model/mask_file.h"
#include "dcp/model/mask_spec.h"

#include "dcp/data/batch_packing.h"

#include "dcp/planner/compile/compiler.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/program/program_stats.h"
#include "dcp/program/verifier/verifier.h"

namespace dcp {
namespace {

constexpr TokenCount kTokens = 8192;
constexpr TokenCount kBlock = 128;

// A mask of up to 3 random key intervals per row, unsorted and overlapping, inside the row's
// causal prefix (as a user's mask file may hold them).
std::vector<SequenceMask> random_interval_mask(const SequenceBatch& batch, std::uint64_t seed) {
  Rng rng(seed);
  constexpr std::int64_t kSlots = 3;
  std::vector<std::int32_t> values;
  for (SeqIndex s = 0; s < batch.size(); ++s) {
    const TokenCount length = batch.length(s);
    for (TokenCount row = 0; row < length; ++row) {
      for (std::int64_t k = 0; k < kSlots; ++k) {
        const std::int64_t a = rng.uniform_int(0, row + 1);
        const std::int64_t b = rng.uniform_int(0, row + 1);
        values.push_back(static_cast<std::int32_t>(std::min(a, b)));
        values.push_back(static_cast<std::int32_t>(k == 0 ? row + 1 : std::max(a, b)));
      }
    }
  }
  NpyArray array;
  array.descr = "<i4";
  array.shape = {batch.total_tokens(), kSlots, 2};
  array.data.resize(values.size() * sizeof(std::int32_t));
  std::memcpy(array.data.data(), values.data(), array.data.size());
  return masks_from_array(array, batch, "random.npy");
}

Workload workload_of(LengthDistributionKind dist, const std::string& mask, std::uint64_t seed) {
  PackingOptions packing;
  packing.tokens_per_batch = kTokens;
  const SequenceBatch batch(sample_batches(dist, 1, packing, seed).front());
  AttentionShape shape;
  shape.q_heads = 4;
  shape.kv_heads = 2;
  shape.head_dim = 16;
  std::vector<SequenceMask> masks = mask == "random"
                                        ? random_interval_mask(batch, seed)
                                        : build_batch_mask(parse_mask_spec(mask), batch);
  return Workload(shape, batch, std::move(masks), kBlock, 1);
}

PlanOptions pure_options(ClusterShape shape, std::int64_t kept_kv_budget = kKeepAllKv,
                         std::optional<DType> partial_dtype = std::nullopt) {
  PlanOptions options;
  options.kept_kv_budget = kept_kv_budget;
  options.partial_dtype = partial_dtype;
  options.strategy = Strategy::kDcpPure;
  options.cluster = cluster_preset("a100-p4de");
  options.cluster.shape = shape;
  options.seed = 3;
  return options;
}

using Case = std::tuple<LengthDistributionKind, std::string, ClusterShape, bool>;

class PricedTraffic : public ::testing::TestWithParam<Case> {};

// As dcp ships a step by default (every received kv value kept for the backward pass, partials
// in the storage dtype, bf16) and as it ships it with neither (kv received again, partials in
// fp32).
TEST_P(PricedTraffic, ProgramsMoveExactlyThePricedBytesPerPassAndLinkClass) {
  const auto& [dist, mask, shape, keep_kv] = GetParam();
  const Workload workload = workload_of(dist, mask, 11);
  const StepPricing pricing{keep_kv, keep_kv ? DType::kBf16 : DType::kFp32};
  const BuiltPlan built = build_one_plan(
      workload, pure_options(shape, keep_kv ? kKeepAllKv : kKeepNoKv, pricing.partial_dtype));
  EXPECT_EQ(built.plan.header.partial_dtype, pricing.partial_dtype);
  const VerifyReport report = verify(built.plan);
  ASSERT_TRUE(report.ok) << describe(report);
  const PlacementMetrics priced = evaluate(workload, built.placement, pricing);
  if (keep_kv) {
    EXPECT_GT(built.kept.max_device_bytes(), 0);
    EXPECT_EQ(pass_traffic(built.plan.header, built.plan.backward)
                  .inter_node_by_kind[static_cast<std::size_t>(SlotKind::kKV)],
              0);
  }
  const PassTraffic forward = pass_traffic(built.plan.header, built.plan.forward);
  const PassTraffic backward = pass_traffic(built.plan.header, built.plan.backward);
  EXPECT_GT(priced.bytes_inter_node + priced.bytes_intra_node, 0);
  EXPECT_EQ(forward.inter_node, priced.bytes_inter_node);
  EXPECT_EQ(forward.intra_node, priced.bytes_intra_node);
  EXPECT_EQ(backward.inter_node, priced.backward_bytes_inter_node);
  EXPECT_EQ(backward.intra_node, priced.backward_bytes_intra_node);
  EXPECT_EQ(priced.km1, priced.bytes_inter_node + priced.bytes_intra_node +
                            priced.backward_bytes_inter_node + priced.backward_bytes_intra_node);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto& [dist, mask, shape, keep_kv] = info.param;
  std::string name = std::string(to_string(dist)) + "_" + mask.substr(0, mask.find(':')) + "_" +
                     std::to_string(shape.nodes) + "x" + std::to_string(shape.devices_per_node) +
                     (keep_kv ? "_kv_kept_bf16_partials" : "_kv_sent_again_fp32_partials");
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(
    Sweep, PricedTraffic,
    ::testing::Combine(::testing::Values(LengthDistributionKind::kLongDataCollections,
                                         LengthDistributionKind::kLongAlign),
                       ::testing::Values("causal", "lambda:sink=16,window=512",
                                         "shared_question:question=0.2,answers=4",
                                         "causal_blockwise:block=64,local=2", "random"),
                       ::testing::Values(ClusterShape{2, 4}, ClusterShape{4, 8}),
                       ::testing::Bool()),
    case_name);

// Within a budget, a (kv value, node) is kept on all of the node's devices that read it or on
// none; each kept group removes exactly its backward transfers from what keeping nothing moves:
// one crossing plus a relay to each other reader of a remote node, or one in-node transfer per
// reader on the owner's node.
TEST(KeptKv, ABudgetRemovesExactlyTheTransfersOfTheValuesKept) {
  const Workload workload = workload_of(LengthDistributionKind::kLongAlign, "causal", 11);
  const ClusterShape shape{2, 4};
  const BuiltPlan none = build_one_plan(workload, pure_options(shape, kKeepNoKv));
  const BuiltPlan all = build_one_plan(workload, pure_options(shape, kKeepAllKv));
  const std::int64_t budget = all.kept.max_device_bytes() / 3;
  const BuiltPlan some = build_one_plan(workload, pure_options(shape, budget));
  ASSERT_TRUE(verify(some.plan).ok) << describe(verify(some.plan));
  EXPECT_LE(some.kept.max_device_bytes(), budget);
  EXPECT_GT(some.kept.max_device_bytes(), 0);
  for (const auto& list : none.kept.per_device) EXPECT_TRUE(list.empty());
  // The placement does not depend on a finite budget (it is priced as keeping none).
  ASSERT_EQ(some.placement.work_unit_device, none.placement.work_unit_device);
  std::map<std::pair<KeptValue, std::int32_t>, std::int64_t> readers;  // (value, node) -> devices
  for (DeviceId d = 0; d < shape.devices(); ++d) {
    for (const KeptValue& value : some.kept.per_device[static_cast<std::size_t>(d)]) {
      ++readers[{value, shape.node_of(d)}];
    }
  }
  std::int64_t saved_inter = 0, saved_intra = 0;
  for (const auto& [key, count] : readers) {
    const std::int64_t bytes = value_bytes(some.plan.header, SlotKind::kKV,
                                           workload.blocks().block(key.first.block).tokens);
    const DeviceId owner =
        some.placement.token_block_device[static_cast<std::size_t>(key.first.block)];
    if (shape.node_of(owner) == key.second) {
      saved_intra += count * bytes;
    } else {
      saved_inter += bytes;
      saved_intra += (count - 1) * bytes;
    }
  }
  const PassTraffic sent = pass_traffic(none.plan.header, none.plan.backward);
  const PassTraffic kept = pass_traffic(some.plan.header, some.plan.backward);
  const auto kv = static_cast<std::size_t>(SlotKind::kKV);
  EXPECT_EQ(kept.inter_node_by_kind[kv], sent.inter_node_by_kind[kv] - saved_inter);
  EXPECT_EQ(kept.intra_node_by_kind[kv], sent.intra_node_by_kind[kv] - saved_intra);
  EXPECT_GT(saved_inter, 0);
}

// Every partial output a device of another node than the owner's makes: per (value, node), how
// many of that node's devices contribute to it.
std::int64_t values_made_on_several_devices_of_a_remote_node(const Workload& workload,
                                                             const Placement& placement,
                                                             Pass pass) {
  std::map<std::tuple<ValueKey, std::int32_t>, std::set<DeviceId>> makers;
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    const DeviceId d = placement.work_unit_device[static_cast<std::size_t>(w)];
    for (const ValueKey& value : output_values(workload, pass, workload.work_unit(w))) {
      const DeviceId owner = placement.token_block_device[static_cast<std::size_t>(value.block)];
      if (placement.cluster.node_of(owner) == placement.cluster.node_of(d)) continue;
      makers[{value, placement.cluster.node_of(d)}].insert(d);
    }
  }
  std::int64_t several = 0;
  for (const auto& [key, devices] : makers) several += devices.size() > 1 ? 1 : 0;
  return several;
}

// The case in-node reduction exists for (docs/scheduling.md), at a test's size: partials of one
// block made on several devices of a remote node. Sending each device's partial straight to the
// owner moves more than the placement priced, and the verifier names the second crossing.
TEST(InNodeReduction, DirectPartialsCrossTwiceAndTheVerifierNamesIt) {
  const Workload workload = workload_of(LengthDistributionKind::kLongDataCollections,
                                        "causal_blockwise:block=64,local=2", 11);
  const BuiltPlan built = build_one_plan(workload, pure_options({4, 8}));
  ASSERT_GT(
      values_made_on_several_devices_of_a_remote_node(workload, built.placement, Pass::kForward), 0)
      << "the batch no longer exercises in-node reduction";
  // The forward schedule of the built plan, its partials re-routed straight to the owner.
  PassSchedule schedule = schedule_pass(workload, built.placement, pure_options({4, 8}).cluster,
                                        built.plan.header, Pass::kForward, ScheduleOptions{})
                              .schedule;
  std::erase_if(schedule.transfers, [](const Transfer& t) { return is_output(t.value.kind); });
  add_partial_transfers(workload, built.placement, schedule, PartialRouting::kDirect);
  Plan direct = built.plan;
  direct.forward =
      compile_pass(workload, built.placement, built.plan.header, schedule, &built.kept);
  ASSERT_EQ(built.plan.header.partial_routing, PartialRouting::kReduceInNode);
  const VerifyReport report = verify_pass(direct, Pass::kForward);
  ASSERT_FALSE(report.ok);
  EXPECT_EQ(report.first->rule, "partial-recrossing") << describe(report);
  // The rule is the header's promise: the same Programs in a plan that routes its partials
  // directly, as a static strategy's does, break no rule.
  direct.header.partial_routing = PartialRouting::kDirect;
  EXPECT_TRUE(verify_pass(direct, Pass::kForward).ok)
      << describe(verify_pass(direct, Pass::kForward));
  const PlacementMetrics priced =
      evaluate(workload, built.placement, {true, built.plan.header.partial_dtype});
  EXPECT_GT(pass_traffic(direct.header, direct.forward).inter_node, priced.bytes_inter_node);
  EXPECT_EQ(pass_traffic(built.plan.header, built.plan.forward).inter_node,
            priced.bytes_inter_node);
}

// A node's partials meet on the device that can send their merge first; when two of its devices
// contribute in the last stage, the merge takes one more launch after it.
TEST(InNodeReduction, ReducerIsTheDeviceThatCanSendFirst) {
  AttentionShape shape;
  shape.q_heads = 1;
  shape.kv_heads = 1;
  shape.head_dim = 8;
  const SequenceBatch batch({4});
  const Workload workload(shape, batch, build_batch_mask(parse_mask_spec("full"), batch), 1, 1);
  // 4 blocks of one token, 16 tiles; block 0 on device 0 (node 0); the tiles of q block 0 on
  // devices 2 and 3 (node 1), the rest on device 0.
  Placement placement;
  placement.cluster = {2, 2};
  placement.token_block_device = {0, 0, 0, 0};
  placement.work_unit_device.assign(static_cast<std::size_t>(workload.work_unit_count()), 0);
  PassSchedule schedule;
  schedule.pass = Pass::kForward;
  schedule.stages = 3;
  schedule.unit_stage.assign(placement.work_unit_device.size(), 0);
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    const WorkUnit unit = workload.work_unit(w);
    if (unit.q_block != 0) continue;
    placement.work_unit_device[static_cast<std::size_t>(w)] = unit.kv_block < 2 ? 2 : 3;
    // Device 2 finishes in stage 0, device 3 in stage 2 (the last): 3 reduces and sends its
    // merge right after the last stage, in launch 3.
    schedule.unit_stage[static_cast<std::size_t>(w)] = unit.kv_block < 2 ? 0 : 2;
  }
  add_partial_transfers(workload, placement, schedule, PartialRouting::kReduceInNode);
  const ValueKey out{SlotKind::kOut, 0, 0};
  EXPECT_EQ(schedule.transfers, (std::vector<Transfer>{{out, 2, 3, 1}, {out, 3, 0, 3}}));
  EXPECT_EQ(launch_count(schedule), 4);

  // Both finish in the last stage: the reducer (the lower id on a tie) sends one launch later.
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    if (workload.work_unit(w).q_block == 0) schedule.unit_stage[static_cast<std::size_t>(w)] = 2;
  }
  schedule.transfers.clear();
  add_partial_transfers(workload, placement, schedule, PartialRouting::kReduceInNode);
  EXPECT_EQ(schedule.transfers, (std::vector<Transfer>{{out, 3, 2, 3}, {out, 2, 0, 4}}));
  EXPECT_EQ(launch_count(schedule), 5);

  // Direct routing: each device sends its own partial after its last stage.
  schedule.transfers.clear();
  add_partial_transfers(workload, placement, schedule, PartialRouting::kDirect);
  EXPECT_EQ(schedule.transfers, (std::vector<Transfer>{{out, 2, 0, 3}, {out, 3, 0, 3}}));
}

}  // namespace
}  // namespace dcp

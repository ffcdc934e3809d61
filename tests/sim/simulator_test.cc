// SPDX-License-Identifier: Apache-2.0
// The event simulator on hand-built Programs with known answers, on the sample plan, and on
// planned batches (monotonicity, errors).
#include "dcp/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"
#include "dcp/core/rng.h"

#include "dcp/model/cluster_presets.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/workload.h"

#include "dcp/selection/plan_search.h"
#include "dcp/sim/chrome_trace.h"
#include "dcp/sim/cost_model.h"
#include "dcp/sim/network.h"

#include "tests/testing/sample_plan.h"

namespace dcp::sim {
namespace {

using D = CommOp::Direction;

// Round numbers: 1 GB/s links, 2 us / 5 us latency, no kernel overhead.
ClusterSpec test_cluster(ClusterShape shape) {
  ClusterSpec spec;
  spec.name = "test";
  spec.shape = shape;
  spec.intra_node_bandwidth = 1e9;
  spec.intra_node_latency = 2e-6;
  spec.inter_node_bandwidth = 1e9;
  spec.inter_node_latency = 5e-6;
  spec.forward_flops = 1e12;
  spec.backward_flops = 1e12;
  spec.kernel_overhead = 0;
  spec.memory_bandwidth = 1e12;
  return spec;
}

// One sequence of `blocks` blocks of `tokens` tokens each, one q head, head dim 128, bf16.
PlanHeader test_header(ClusterShape shape, std::int32_t blocks, std::int32_t tokens) {
  PlanHeader h;
  h.strategy = "test";
  h.cluster = shape;
  h.q_heads = 1;
  h.kv_heads = 1;
  h.head_dim = 128;
  h.dtype = DType::kBf16;
  h.softmax_scale = 1.0 / std::sqrt(128.0);
  h.total_tokens = std::int64_t{blocks} * tokens;
  h.sequences = 1;
  h.token_blocks = blocks;
  return h;
}

BlockInfo block(BlockId id, std::int32_t tokens) { return {id, 0, tokens, id * tokens}; }

Program program(std::int32_t device, std::vector<BlockInfo> blocks, std::vector<Slot> slots,
                std::vector<Instruction> instructions, std::int32_t stages = 1) {
  Program p;
  p.device = device;
  p.pass = Pass::kForward;
  p.stages = stages;
  p.blocks = std::move(blocks);
  p.slots = std::move(slots);
  p.instructions = std::move(instructions);
  p.instruction_stage.assign(p.instructions.size(), 0);
  return p;
}

// Device `src` sends one kv value of `tokens` tokens to `dst`; every other device idles.
std::vector<Program> transfers(const PlanHeader& h, std::vector<std::pair<int, int>> pairs,
                               std::vector<std::int32_t> tokens) {
  std::vector<Program> programs;
  for (std::int32_t d = 0; d < h.cluster.devices(); ++d) {
    std::vector<CommOp> ops;
    std::vector<Slot> slots;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const std::int64_t bytes = value_bytes(h, SlotKind::kKV, tokens[i]);
      if (pairs[i].first == d || pairs[i].second == d) {
        const bool send = pairs[i].first == d;
        ops.push_back({send ? D::kSend : D::kRecv, send ? pairs[i].second : pairs[i].first,
                       static_cast<SlotId>(slots.size()), bytes});
        slots.push_back({SlotKind::kKV, tokens[i]});
      }
    }
    programs.push_back(program(d, {}, slots, {Launch{0, ops}, Wait{0}}));
  }
  return programs;
}

TEST(Simulator, OneTransferTakesLatencyPlusBytesOverBandwidth) {
  const ClusterShape shape{2, 1};
  const PlanHeader h = test_header(shape, 1, 1000);
  const PassSimulation sim = simulate(h, transfers(h, {{0, 1}}, {1000}), test_cluster(shape));
  const double bytes = static_cast<double>(value_bytes(h, SlotKind::kKV, 1000));  // 512000
  ASSERT_EQ(sim.transfers.size(), 1u);
  EXPECT_TRUE(sim.transfers[0].inter_node);
  EXPECT_DOUBLE_EQ(sim.transfers[0].posted, 0);
  EXPECT_DOUBLE_EQ(sim.transfers[0].ready, 5e-6);
  EXPECT_NEAR(sim.transfers[0].end, 5e-6 + bytes / 1e9, 1e-15);
  EXPECT_NEAR(sim.seconds, 5e-6 + bytes / 1e9, 1e-15);
  // Both ends wait for it: the sender's Wait too.
  EXPECT_NEAR(sim.devices[0].wait_seconds, sim.seconds, 1e-15);
  EXPECT_NEAR(sim.devices[1].wait_seconds, sim.seconds, 1e-15);
  ASSERT_FALSE(sim.critical_path.empty());
  EXPECT_NEAR(sim.critical_transfer_seconds, sim.seconds, 1e-15);
  EXPECT_DOUBLE_EQ(sim.critical_compute_seconds, 0);
}

TEST(Simulator, TwoSendersShareTheirNodesNetworkInterface) {
  const ClusterShape shape{2, 2};
  const PlanHeader h = test_header(shape, 1, 1000);
  const double bytes = static_cast<double>(value_bytes(h, SlotKind::kKV, 1000));
  // Devices 0 and 1 (node 0) send to 2 and 3 (node 1): each gets half of the interface.
  const PassSimulation shared =
      simulate(h, transfers(h, {{0, 2}, {1, 3}}, {1000, 1000}), test_cluster(shape));
  for (const TransferEvent& t : shared.transfers) {
    EXPECT_NEAR(t.end, 5e-6 + 2 * bytes / 1e9, 1e-15);
  }
  // Inside a node each device has its own send and receive sides: no sharing.
  const PassSimulation apart =
      simulate(h, transfers(h, {{0, 1}, {2, 3}}, {1000, 1000}), test_cluster(shape));
  for (const TransferEvent& t : apart.transfers) EXPECT_NEAR(t.end, 2e-6 + bytes / 1e9, 1e-15);
  // Unequal sizes: the small one ends at 2 x its bytes; the big one then has the link alone.
  const PassSimulation unequal =
      simulate(h, transfers(h, {{0, 2}, {1, 3}}, {1000, 3000}), test_cluster(shape));
  EXPECT_NEAR(unequal.transfers[0].end, 5e-6 + 2 * bytes / 1e9, 1e-15);
  EXPECT_NEAR(unequal.transfers[1].end, 5e-6 + 4 * bytes / 1e9, 1e-14);
}

// An exchange (a baseline's all-to-all) costs what the simulator charges Launches of the same
// messages: set-up per peer, latency, shared links, stream caps and message-size efficiency.
TEST(Simulator, AnExchangeCostsWhatLaunchesOfItsMessagesDo) {
  const ClusterShape shape{2, 4};
  ClusterSpec spec = cluster_preset("a100-p4de");  // fitted stream rates and efficiency curves
  spec.shape = shape;
  const PlanHeader h = test_header(shape, 1, 1000);
  Rng rng(7);
  for (int round = 0; round < 5; ++round) {
    std::vector<std::pair<int, int>> pairs;
    std::vector<std::int32_t> tokens;
    std::vector<std::int64_t> bytes(64, 0);
    for (int src = 0; src < 8; ++src) {
      for (int dst = 0; dst < 8; ++dst) {
        if (src == dst || rng.uniform_int(0, 2) == 0) continue;
        pairs.emplace_back(src, dst);
        tokens.push_back(static_cast<std::int32_t>(rng.uniform_int(100, 4000)));
        bytes[static_cast<std::size_t>(src * 8 + dst)] =
            value_bytes(h, SlotKind::kKV, tokens.back());
      }
    }
    ASSERT_FALSE(pairs.empty());
    const PassSimulation launched = simulate(h, transfers(h, pairs, tokens), spec);
    EXPECT_NEAR(exchange_seconds(bytes, spec), launched.seconds, 1e-12 * launched.seconds)
        << "round " << round;
  }
  EXPECT_EQ(exchange_seconds(std::vector<std::int64_t>(64, 0), spec), 0.0);
  EXPECT_THROW(exchange_seconds(std::vector<std::int64_t>(63, 0), spec), InvalidInput);
  std::vector<std::int64_t> negative(64, 0);
  negative[1 * 8 + 2] = -5;
  try {
    exchange_seconds(negative, spec);
    ADD_FAILURE() << "a negative count was taken";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("-5 bytes from device 1 to device 2"), std::string::npos)
        << e.what();
  }
}

TEST(Simulator, DevicesOnDifferentInterfacesDoNotShareThem) {
  const ClusterShape shape{2, 4};
  const PlanHeader h = test_header(shape, 1, 1000);
  const double bytes = static_cast<double>(value_bytes(h, SlotKind::kKV, 1000));
  ClusterSpec spec = test_cluster(shape);
  spec.nics_per_node = 2;  // devices 0, 1 on interface 0; 2, 3 on interface 1; each 0.5 GB/s
  // 0 -> 4 and 2 -> 6 use different interfaces on both nodes: each at its interface's rate.
  const PassSimulation apart = simulate(h, transfers(h, {{0, 4}, {2, 6}}, {1000, 1000}), spec);
  for (const TransferEvent& t : apart.transfers) EXPECT_NEAR(t.end, 5e-6 + bytes / 0.5e9, 1e-14);
  // 0 -> 4 and 1 -> 6 share the sender's interface 0: half of it each.
  const PassSimulation shared = simulate(h, transfers(h, {{0, 4}, {1, 6}}, {1000, 1000}), spec);
  for (const TransferEvent& t : shared.transfers) {
    EXPECT_NEAR(t.end, 5e-6 + 2 * bytes / 0.5e9, 1e-14);
  }
  // 0 -> 4 and 2 -> 5 share only the receiver's interface 2 (devices 4 and 5).
  const PassSimulation received = simulate(h, transfers(h, {{0, 4}, {2, 5}}, {1000, 1000}), spec);
  for (const TransferEvent& t : received.transfers) {
    EXPECT_NEAR(t.end, 5e-6 + 2 * bytes / 0.5e9, 1e-14);
  }
}

TEST(Simulator, SmallTransfersReachLessOfTheirLink) {
  const ClusterShape shape{2, 1};
  const PlanHeader h = test_header(shape, 1, 1000);
  const std::int64_t bytes = value_bytes(h, SlotKind::kKV, 1000);
  ClusterSpec spec = test_cluster(shape);
  spec.inter_node_efficiency = {{bytes, 0.25}, {bytes * 16, 1.0}};
  const PassSimulation small = simulate(h, transfers(h, {{0, 1}}, {1000}), spec);
  EXPECT_NEAR(small.seconds, 5e-6 + 4 * static_cast<double>(bytes) / 1e9, 1e-14);
  EXPECT_EQ(small.transfers[0].bytes, bytes);  // what it carries is unchanged
  const PassSimulation big = simulate(h, transfers(h, {{0, 1}}, {16000}), spec);
  EXPECT_NEAR(big.seconds, 5e-6 + 16 * static_cast<double>(bytes) / 1e9, 1e-13);
  // What one launch moves between two devices is one message: 16 values of 1000 tokens from 0 to
  // 1 in one launch reach the 16-value message's efficiency.
  const PassSimulation packed = simulate(h,
                                         transfers(h, std::vector<std::pair<int, int>>(16, {0, 1}),
                                                   std::vector<std::int32_t>(16, 1000)),
                                         spec);
  EXPECT_EQ(packed.transfers[0].message_bytes, 16 * bytes);
  EXPECT_NEAR(packed.seconds, 5e-6 + 16 * static_cast<double>(bytes) / 1e9, 1e-13);
  // Inside a node the intra curve applies (empty here: full rate).
  const ClusterShape one{1, 2};
  const PlanHeader h1 = test_header(one, 1, 1000);
  ClusterSpec intra = test_cluster(one);
  intra.inter_node_efficiency = spec.inter_node_efficiency;
  EXPECT_NEAR(simulate(h1, transfers(h1, {{0, 1}}, {1000}), intra).seconds,
              2e-6 + static_cast<double>(bytes) / 1e9, 1e-14);
}

TEST(Simulator, OneTransferReachesAtMostItsStreamBandwidthAndLeavesTheRestOfItsLink) {
  // 2 nodes x 2 devices, one NIC per node at 1 GB/s; one stream reaches 0.4 GB/s.
  const ClusterShape shape{2, 2};
  const PlanHeader h = test_header(shape, 1, 1000);
  const auto bytes = static_cast<double>(value_bytes(h, SlotKind::kKV, 1000));
  ClusterSpec spec = test_cluster(shape);
  spec.inter_node_stream_bandwidth = 0.4e9;
  const PassSimulation alone = simulate(h, transfers(h, {{0, 2}}, {1000}), spec);
  EXPECT_NEAR(alone.seconds, 5e-6 + bytes / 0.4e9, 1e-13);
  EXPECT_NEAR(spec.transfer_seconds(static_cast<std::int64_t>(bytes), true), alone.seconds, 1e-13);
  // Two streams through the same two NICs fit side by side (0.8 of 1 GB/s): neither slows.
  const PassSimulation two = simulate(h, transfers(h, {{0, 2}, {1, 3}}, {1000, 1000}), spec);
  EXPECT_NEAR(two.seconds, 5e-6 + bytes / 0.4e9, 1e-13);
  // Inside a node no cap is set: the device's link rate.
  EXPECT_NEAR(simulate(h, transfers(h, {{0, 1}}, {1000}), spec).seconds, 2e-6 + bytes / 1e9, 1e-13);
  // Three do not (1.2): the NIC's fair share, 1/3 GB/s each, is below the cap.
  spec.shape = {2, 3};
  const PlanHeader h3 = test_header(spec.shape, 1, 1000);
  const PassSimulation three =
      simulate(h3, transfers(h3, {{0, 3}, {1, 4}, {2, 5}}, {1000, 1000, 1000}), spec);
  EXPECT_NEAR(three.seconds, 5e-6 + 3 * bytes / 1e9, 1e-13);
}

TEST(Simulator, LaunchSetUpGrowsWithItsPeers) {
  const ClusterShape shape{1, 4};
  const PlanHeader h = test_header(shape, 1, 1000);
  const double bytes = static_cast<double>(value_bytes(h, SlotKind::kKV, 1000));
  ClusterSpec spec = test_cluster(shape);
  spec.launch_overhead = 3e-6;
  spec.launch_peer_overhead = 1e-6;
  // Device 0 sends to 1, 2 and 3 in one launch: its set-up is 3 + 3 x 1 us, theirs 3 + 1 us.
  const PassSimulation sim =
      simulate(h, transfers(h, {{0, 1}, {0, 2}, {0, 3}}, {1000, 1000, 1000}), spec);
  for (const TransferEvent& t : sim.transfers) {
    EXPECT_NEAR(t.posted, 6e-6, 1e-15);
    // Device 0's send side is shared three ways.
    EXPECT_NEAR(t.end, 6e-6 + 2e-6 + 3 * bytes / 1e9, 1e-14);
  }
  EXPECT_DOUBLE_EQ(sim.devices[0].compute_seconds, 0);  // set-up is not compute
}

TEST(Simulator, TheReferenceExecutorPaysPerInstructionPacksAndTalksToTheWholeGroup) {
  const ClusterShape shape{1, 4};
  const PlanHeader h = test_header(shape, 1, 1000);
  const double bytes = static_cast<double>(value_bytes(h, SlotKind::kKV, 1000));
  ClusterSpec spec = test_cluster(shape);
  spec.launch_peer_overhead = 1e-6;
  const double plain = simulate(h, transfers(h, {{0, 1}}, {1000}), spec).seconds;
  EXPECT_NEAR(plain, 1e-6 + 2e-6 + bytes / 1e9, 1e-14);  // one peer
  ExecutorModel executor;
  executor.instruction_overhead = 1e-6;
  executor.launches_whole_group = true;
  // 1 us of host time before the launch, whose set-up counts all 3 other devices.
  const PassSimulation group = simulate(h, transfers(h, {{0, 1}}, {1000}), spec, executor);
  EXPECT_NEAR(group.transfers[0].posted, 4e-6, 1e-15);
  EXPECT_NEAR(group.seconds, 4e-6 + 2e-6 + bytes / 1e9, 1e-14);
  executor = {};
  executor.packs_messages = true;  // a copy of the sends before, of the receives after
  spec.launch_peer_overhead = 0;
  const double copy = 2 * bytes / spec.memory_bandwidth;
  const PassSimulation packed = simulate(h, transfers(h, {{0, 1}}, {1000}), spec, executor);
  EXPECT_NEAR(packed.transfers[0].posted, copy, 1e-15);
  EXPECT_NEAR(packed.seconds, copy + 2e-6 + bytes / 1e9 + copy, 1e-14);
  EXPECT_NEAR(packed.devices[1].compute_seconds, copy, 1e-15);
  EXPECT_EQ(reference_executor().launches_whole_group, true);
}

TEST(Simulator, HostTimePerSequenceDelaysEveryDevicesFirstInstructionOnce) {
  const ClusterShape shape{1, 4};
  PlanHeader h = test_header(shape, 1, 1000);
  h.sequences = 5;
  const ClusterSpec spec = test_cluster(shape);
  const auto programs = transfers(h, {{0, 1}, {2, 3}}, {1000, 1000});
  const PassSimulation plain = simulate(h, programs, spec);
  ExecutorModel executor;
  executor.sequence_overhead = 3e-6;
  const PassSimulation delayed = simulate(h, programs, spec, executor);
  // 5 sequences x 3 us before anything is issued, on every device; nothing else changes.
  EXPECT_NEAR(delayed.seconds, plain.seconds + 15e-6, 1e-14);
  for (std::size_t t = 0; t < plain.transfers.size(); ++t) {
    EXPECT_NEAR(delayed.transfers[t].posted, plain.transfers[t].posted + 15e-6, 1e-14);
  }
  for (std::size_t d = 0; d < plain.devices.size(); ++d) {
    EXPECT_DOUBLE_EQ(delayed.devices[d].compute_seconds, plain.devices[d].compute_seconds);
  }
  EXPECT_EQ(ExecutorModel{}.sequence_overhead, 0);
  EXPECT_EQ(reference_executor().sequence_overhead, 0);
  EXPECT_GT(zigzag_baseline_executor().sequence_overhead, 0);
}

TEST(Simulator, ReceiverSideIsSharedToo) {
  const ClusterShape shape{1, 3};
  const PlanHeader h = test_header(shape, 1, 1000);
  const double bytes = static_cast<double>(value_bytes(h, SlotKind::kKV, 1000));
  const PassSimulation sim =
      simulate(h, transfers(h, {{0, 2}, {1, 2}}, {1000, 1000}), test_cluster(shape));
  for (const TransferEvent& t : sim.transfers) EXPECT_NEAR(t.end, 2e-6 + 2 * bytes / 1e9, 1e-15);
}

// Device 1 computes a full tile on its own kv while device 0's kv arrives, then one on the
// received kv. `tokens` sets the transfer's size against the tile's compute.
struct Pipeline {
  PlanHeader header;
  std::vector<Program> programs;
};

Pipeline two_stage_pipeline(std::int32_t kv_tokens) {
  const ClusterShape shape{2, 1};
  Pipeline p{test_header(shape, 2, kv_tokens), {}};
  const PlanHeader& h = p.header;
  const std::int64_t kv_bytes = value_bytes(h, SlotKind::kKV, kv_tokens);
  const auto row = [](SlotId q, SlotId out, bool accumulate, SlotId kv) {
    return AttnRow{q, out, accumulate, {AttnKv{kv, kFullTile, kNoSlot, false}}};
  };
  p.programs.push_back(program(0, {block(0, kv_tokens)}, {{SlotKind::kKV, kv_tokens}},
                               {Launch{0, {{D::kSend, 1, 0, kv_bytes}}}, Wait{0}}));
  Program receiver =
      program(1, {block(0, kv_tokens), block(1, kv_tokens)},
              {{SlotKind::kQ, kv_tokens},
               {SlotKind::kKV, kv_tokens},
               {SlotKind::kKV, kv_tokens},
               {SlotKind::kOut, kv_tokens}},
              {Launch{0, {{D::kRecv, 0, 2, kv_bytes}}}, Load{0, 1, 0}, Load{1, 1, 0},
               AttnForward{{row(0, 3, false, 1)}}, Wait{0}, AttnForward{{row(0, 3, true, 2)}}},
              2);
  receiver.instruction_stage = {0, 0, 0, 0, 1, 1};
  p.programs.push_back(std::move(receiver));
  return p;
}

TEST(Simulator, TwoStagePipelineOverlapsTheTransferFully) {
  // 4096 tokens: a 4096 x 4096 tile takes 4 * 4096^2 * 128 / 1e12 = 8.6 ms; its kv (2 MiB) 2 ms.
  const Pipeline p = two_stage_pipeline(4096);
  const ClusterSpec cluster = test_cluster(p.header.cluster);
  const PassSimulation sim = simulate(p.header, p.programs, cluster);
  const CostModel cost(cluster, p.header);
  const double tile = cost.tile_seconds(Pass::kForward, nullptr, 4096, 4096);
  const double load = cost.memory_seconds(2 * value_bytes(p.header, SlotKind::kQ, 4096)) +
                      cost.memory_seconds(2 * value_bytes(p.header, SlotKind::kKV, 4096));
  const double transfer =
      5e-6 + static_cast<double>(value_bytes(p.header, SlotKind::kKV, 4096)) / 1e9;
  ASSERT_LT(transfer, load + tile);
  EXPECT_NEAR(sim.devices[1].end, load + 2 * tile, 1e-12);
  EXPECT_NEAR(sim.devices[1].wait_seconds, 0, 1e-15);
  EXPECT_NEAR(sim.devices[1].compute_seconds, load + 2 * tile, 1e-12);
  EXPECT_NEAR(sim.seconds, load + 2 * tile, 1e-12);
  EXPECT_NEAR(sim.critical_compute_seconds, sim.seconds, 1e-12);
  ASSERT_EQ(sim.stages.size(), 3u);  // two stages and the (empty) epilogue
  EXPECT_NEAR(sim.stages[0].max_compute, load + tile, 1e-12);
  EXPECT_NEAR(sim.stages[1].max_compute, tile, 1e-12);
}

TEST(Simulator, SlowTransferIsExposedAsWaitAndOnTheCriticalPath) {
  // 512 tokens: the tile takes 0.13 ms, the kv transfer 0.26 ms.
  const Pipeline p = two_stage_pipeline(512);
  const ClusterSpec cluster = test_cluster(p.header.cluster);
  const PassSimulation sim = simulate(p.header, p.programs, cluster);
  const CostModel cost(cluster, p.header);
  const double tile = cost.tile_seconds(Pass::kForward, nullptr, 512, 512);
  const double transfer =
      5e-6 + static_cast<double>(value_bytes(p.header, SlotKind::kKV, 512)) / 1e9;
  EXPECT_NEAR(sim.seconds, transfer + tile, 1e-12);
  EXPECT_NEAR(sim.devices[1].wait_seconds, transfer - sim.devices[1].events[3].end, 1e-12);
  // The critical path: the transfer, then the second tile.
  ASSERT_EQ(sim.critical_path.size(), 2u);
  EXPECT_EQ(sim.critical_path[0].kind, CriticalStep::Kind::kTransfer);
  EXPECT_EQ(sim.critical_path[1].kind, CriticalStep::Kind::kCompute);
  EXPECT_EQ(sim.critical_path[1].device, 1);
  EXPECT_NEAR(sim.critical_transfer_seconds, transfer, 1e-12);
  EXPECT_NEAR(sim.critical_compute_seconds, tile, 1e-12);
}

TEST(Simulator, ConsecutiveMemoryInstructionsShareOneLaunch) {
  const ClusterShape shape{1, 1};
  const PlanHeader h = test_header(shape, 2, 256);
  ClusterSpec cluster = test_cluster(shape);
  cluster.kernel_overhead = 1e-3;  // dwarfs everything else
  const std::vector<Slot> slots = {
      {SlotKind::kQ, 256}, {SlotKind::kKV, 256}, {SlotKind::kOut, 256}, {SlotKind::kKV, 256}};
  const AttnRow row{0, 2, false, {AttnKv{1, kFullTile, kNoSlot, false}}};
  // Two loads (one launch), attention (one), a load and a store (two: different kinds).
  const std::vector<Program> programs = {
      program(0, {block(0, 256), block(1, 256)}, slots,
              {Load{0, 0, 0}, Free{{}}, Load{1, 0, 0}, AttnForward{{row}}, Load{3, 1, 0},
               Store{2, SlotKind::kOut, 0, 0}})};
  const PassSimulation sim = simulate(h, programs, cluster);
  EXPECT_NEAR(sim.seconds, 4e-3, 1e-4);
  EXPECT_NEAR(sim.devices[0].events[2].end - sim.devices[0].events[2].start, 0, 1e-5);
}

// dcp's executor receives a kept value into the kept tensor and reads it there: a Keep or Restore
// takes no time, not even an instruction's host time. The reference's executor copies (a memory
// kernel and its instruction each).
TEST(Simulator, KeepAndRestoreCostNothingInDcpsExecutorAndACopyInTheReferences) {
  const Plan plan = testing::sample_plan_with_kept_kv();
  ClusterSpec cluster = with_shape(cluster_preset("a100-p4de"), plan.header.cluster);
  cluster.kernel_overhead = 1e-3;  // dwarfs everything else
  const auto kept_event = [](const PassSimulation& pass, const Program& program) {
    for (const ComputeEvent& e : pass.devices[1].events) {
      const Instruction& i = program.instructions[static_cast<std::size_t>(e.instruction)];
      if (std::holds_alternative<Keep>(i) || std::holds_alternative<Restore>(i)) return e;
    }
    ADD_FAILURE() << "no Keep or Restore on device 1";
    return ComputeEvent{};
  };
  ExecutorModel host;
  host.instruction_overhead = 1e-4;
  ExecutorModel copying = host;
  copying.copies_kept = true;
  const PlanSimulation free = simulate(plan, cluster, host);
  const PlanSimulation copied = simulate(plan, cluster, copying);
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    SCOPED_TRACE(std::string(to_string(pass)));
    const bool forward = pass == Pass::kForward;
    const Program& program = plan.programs(pass)[1];
    const ComputeEvent none = kept_event(forward ? free.forward : free.backward, program);
    EXPECT_DOUBLE_EQ(none.end, none.start);
    const ComputeEvent copy = kept_event(forward ? copied.forward : copied.backward, program);
    EXPECT_GE(copy.end - copy.start, cluster.kernel_overhead);
    EXPECT_GT((forward ? copied.forward : copied.backward).seconds,
              (forward ? free.forward : free.backward).seconds);
  }
  EXPECT_TRUE(reference_executor().copies_kept);
  EXPECT_FALSE(ExecutorModel{}.copies_kept);
}

TEST(Simulator, EachMaskCostsWhatItsContentDoesOnEveryDevice) {
  // The simulator costs each distinct mask once per pass, whichever device or index holds it.
  const ClusterShape shape{1, 2};
  const PlanHeader h = test_header(shape, 2, 4);
  const ClusterSpec cluster = test_cluster(shape);
  const TileMask causal{4, 4, {0, 1, 2, 3, 4}, {0, 1, 0, 2, 0, 3, 0, 4}};
  const TileMask first_key{4, 4, {0, 1, 2, 3, 4}, {0, 1, 0, 1, 0, 1, 0, 1}};
  const std::vector<Slot> slots = {{SlotKind::kQ, 4}, {SlotKind::kKV, 4}, {SlotKind::kOut, 4}};
  const auto attention = [&](std::int32_t d, std::vector<TileMask> masks,
                             std::vector<MaskId> used) {
    std::vector<AttnKv> kv;
    for (const MaskId m : used) kv.push_back({1, m, kNoSlot, false});
    Program p = program(d, {block(0, 4), block(1, 4)}, slots,
                        {AttnForward{{AttnRow{0, 2, false, std::move(kv)}}}});
    p.masks = std::move(masks);
    return p;
  };
  // Device 0 holds both masks and uses both; device 1 holds them the other way round and uses
  // the causal one only.
  const std::vector<Program> programs = {attention(0, {causal, first_key}, {0, 1}),
                                         attention(1, {first_key, causal}, {1})};
  const PassSimulation sim = simulate(h, programs, cluster);
  const CostModel cost(cluster, h);
  const double t_causal = cost.tile_seconds(Pass::kForward, &causal, 4, 4);
  const double t_first = cost.tile_seconds(Pass::kForward, &first_key, 4, 4);
  ASSERT_GT(t_causal, t_first);  // the two costs differ, so a mix-up shows
  const auto took = [&](std::size_t d) {
    return sim.devices[d].events[0].end - sim.devices[d].events[0].start;
  };
  EXPECT_DOUBLE_EQ(took(0), t_causal + t_first);
  EXPECT_DOUBLE_EQ(took(1), t_causal);
}

TEST(Simulator, SamplePlanRunsBothPassesAndItsTraceNamesEveryDevice) {
  const Plan plan = testing::sample_plan();
  const PlanSimulation sim =
      simulate(plan, with_shape(cluster_preset("a100-p4de"), plan.header.cluster));
  for (const PassSimulation* pass : {&sim.forward, &sim.backward}) {
    EXPECT_GT(pass->seconds, 0);
    EXPECT_EQ(pass->devices.size(), 2u);
    EXPECT_EQ(pass->stages.size(), 3u);
    EXPECT_FALSE(pass->critical_path.empty());
    for (const DeviceTimeline& d : pass->devices) {
      EXPECT_LE(d.compute_seconds + d.wait_seconds, d.end + 1e-15);
    }
  }
  EXPECT_EQ(sim.forward.transfers.size(), 1u);
  EXPECT_EQ(sim.backward.transfers.size(), 2u);
  const std::string trace = chrome_trace(plan, sim);
  EXPECT_EQ(trace.front(), '{');
  EXPECT_NE(trace.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(trace.find("device 1 compute"), std::string::npos);
  EXPECT_NE(trace.find("attn_bwd"), std::string::npos);
  // Every transfer begins and ends once.
  std::size_t begins = 0, ends = 0;
  for (std::size_t at = 0; (at = trace.find("\"ph\": \"b\"", at)) != std::string::npos; ++at) {
    ++begins;
  }
  for (std::size_t at = 0; (at = trace.find("\"ph\": \"e\"", at)) != std::string::npos; ++at) {
    ++ends;
  }
  EXPECT_EQ(begins, 3u);
  EXPECT_EQ(ends, 3u);
}

// Partials in bf16: the sample plan's one partial message (device 1's dk, dv of block 0) is half
// as long, and each end pays one conversion kernel on its stream, reading one form and writing
// the other: the sender before its launch, the receiver after the wait that completes it.
TEST(Simulator, PartialsInBf16ChargeTheirConversionsOnBothEnds) {
  const Plan wide = testing::sample_plan(DType::kFp32);
  const Plan narrow = testing::sample_plan(DType::kBf16);
  const ClusterSpec cluster = with_shape(cluster_preset("a100-p4de"), wide.header.cluster);
  const PassSimulation a = simulate(wide.header, wide.backward, cluster);
  const PassSimulation b = simulate(narrow.header, narrow.backward, cluster);
  const CostModel cost(cluster, narrow.header);
  const double convert =
      cost.kernel_overhead() + cost.memory_seconds(value_bytes(narrow.header, SlotKind::kDKV, 4) +
                                                   slot_bytes(narrow.header, SlotKind::kDKV, 4));
  for (const std::size_t d : {0u, 1u}) {
    EXPECT_NEAR(b.devices[d].compute_seconds - a.devices[d].compute_seconds, convert, 1e-15) << d;
    EXPECT_NEAR(b.devices[d].convert_seconds, convert, 1e-15) << d;
    EXPECT_EQ(a.devices[d].convert_seconds, 0) << d;
  }
  EXPECT_EQ(2 * value_bytes(narrow.header, SlotKind::kDKV, 4),
            value_bytes(wide.header, SlotKind::kDKV, 4));
  // The forward pass moves no partial: nothing changes.
  EXPECT_EQ(simulate(narrow.header, narrow.forward, cluster).seconds,
            simulate(wide.header, wide.forward, cluster).seconds);
}

TEST(Simulator, UnmatchedSendsDeadlocksAndSizeMismatchesAreErrors) {
  const ClusterShape shape{1, 2};
  const PlanHeader h = test_header(shape, 1, 100);
  const std::int64_t bytes = value_bytes(h, SlotKind::kKV, 100);
  const std::vector<Slot> one_slot = {{SlotKind::kKV, 100}};
  const auto error = [&](std::vector<Program> programs) {
    try {
      simulate(h, programs, test_cluster(shape));
    } catch (const InvalidInput& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // A send nobody receives, without a Wait: the pass ends with the send unmatched.
  EXPECT_NE(error({program(0, {}, one_slot, {Launch{0, {{D::kSend, 1, 0, bytes}}}}),
                   program(1, {}, one_slot, {})})
                .find("device 0's send #0 to device 1 has no matching receive"),
            std::string::npos);
  // Waiting on it: device 0 waits forever.
  EXPECT_NE(error({program(0, {}, one_slot, {Launch{0, {{D::kSend, 1, 0, bytes}}}, Wait{0}}),
                   program(1, {}, one_slot, {})})
                .find("device 0 waits forever on launch 0"),
            std::string::npos);
  EXPECT_NE(error({program(0, {}, one_slot, {Launch{0, {{D::kSend, 1, 0, bytes}}}, Wait{0}}),
                   program(1, {}, one_slot, {Launch{0, {{D::kRecv, 0, 0, bytes / 2}}}, Wait{0}})})
                .find("but the receive expects"),
            std::string::npos);
  EXPECT_NE(error({program(0, {}, one_slot, {})}).find("one Program per device"),
            std::string::npos);
  ClusterSpec wrong = test_cluster({2, 1});
  EXPECT_THROW(simulate(h, transfers(h, {{0, 1}}, {100}), wrong), InvalidInput);
}

// Planned batches: more bandwidth, less latency or faster kernels never make a pass slower.
TEST(Simulator, FasterClustersAreNeverSlower) {
  Rng rng(3);
  for (const Strategy strategy :
       {Strategy::kDcp, Strategy::kRing, Strategy::kHybrid, Strategy::kTe, Strategy::kLoongTrain}) {
    for (const MaskKind kind : {MaskKind::kCausal, MaskKind::kSharedQuestion}) {
      std::vector<TokenCount> lengths;
      for (int i = 0; i < 6; ++i) lengths.push_back(rng.uniform_int(50, 1500));
      SequenceBatch batch(lengths);
      AttentionShape shape;
      shape.q_heads = 8;
      shape.kv_heads = 2;
      shape.head_dim = 64;
      MaskSpec spec;
      spec.kind = kind;
      Workload workload(shape, batch, build_batch_mask(spec, batch), 128, 1);
      PlanOptions options;
      options.strategy = strategy;
      options.cluster = with_shape(cluster_preset("a100-p4de"), {2, 4});
      options.seed = 1;
      const Plan plan = build_plan(workload, options).plan;
      double previous[2] = {1e300, 1e300};
      for (const double scale : {0.25, 0.5, 1.0, 2.0, 4.0, 16.0}) {
        ClusterSpec faster = options.cluster;
        faster.intra_node_bandwidth *= scale;
        faster.inter_node_bandwidth *= scale;
        faster.intra_node_latency /= scale;
        faster.inter_node_latency /= scale;
        faster.forward_flops *= std::sqrt(scale);
        faster.backward_flops *= std::sqrt(scale);
        const PlanSimulation sim = simulate(plan, faster);
        const double seconds[2] = {sim.forward.seconds, sim.backward.seconds};
        for (int pass = 0; pass < 2; ++pass) {
          EXPECT_LE(seconds[pass], previous[pass] * (1 + 1e-12))
              << to_string(strategy) << " " << to_string(kind) << " x" << scale;
          previous[pass] = seconds[pass];
        }
      }
    }
  }
}

TEST(CostModel, SubtilesOfACausalTile) {
  // Row r attends to keys [0, r + 1): a 4 x 4 tile in 2 x 2 sub-tiles has two diagonal (cut)
  // sub-tiles and one full one below them; the one above is empty.
  const TileMask causal{4, 4, {0, 1, 2, 3, 4}, {0, 1, 0, 2, 0, 3, 0, 4}};
  const SubtileWork work = subtile_work(&causal, 4, 4, 2, 2);
  EXPECT_EQ(work.subtiles, 3);
  EXPECT_EQ(work.full_area, 4);
  EXPECT_EQ(work.partial_area, 8);
  const SubtileWork full = subtile_work(nullptr, 5, 3, 2, 2);
  EXPECT_EQ(full.subtiles, 6);
  EXPECT_EQ(full.full_area, 15);
  EXPECT_EQ(full.partial_area, 0);
  // A sub-tile's used rectangle: rows 0-1 attend to key 1 only of sub-tile (0, 0).
  const TileMask narrow{2, 4, {0, 1, 2}, {1, 2, 1, 2}};
  const SubtileWork used = subtile_work(&narrow, 2, 4, 2, 4);
  EXPECT_EQ(used.subtiles, 1);
  EXPECT_EQ(used.full_area, 2);
}

TEST(CostModel, WholeSubtilesAndTheirLoops) {
  // A 3 x 5 full tile in 2 x 2 sub-tiles: 2 x 3 sub-tiles; whole, each costs 4 pairs.
  const SubtileWork used = subtile_work(nullptr, 3, 5, 2, 2);
  EXPECT_EQ(used.full_area, 15);
  EXPECT_EQ(used.loop_rows, 3);
  EXPECT_EQ(used.loop_keys, 5);
  const SubtileWork whole = subtile_work(nullptr, 3, 5, 2, 2, true);
  EXPECT_EQ(whole.subtiles, 6);
  EXPECT_EQ(whole.full_area, 24);
  EXPECT_EQ(whole.loop_rows, 4);
  EXPECT_EQ(whole.loop_keys, 6);
  // Causal 4 x 4 in 2 x 2: the empty upper-right sub-tile is skipped; all row and key blocks
  // have work.
  const TileMask causal{4, 4, {0, 1, 2, 3, 4}, {0, 1, 0, 2, 0, 3, 0, 4}};
  const SubtileWork c = subtile_work(&causal, 4, 4, 2, 2, true);
  EXPECT_EQ(c.subtiles, 3);
  EXPECT_EQ(c.full_area, 4);
  EXPECT_EQ(c.partial_area, 8);
  EXPECT_EQ(c.loop_rows, 4);
  EXPECT_EQ(c.loop_keys, 4);
  // A mask that leaves the second row block empty: only the first row block loops.
  const TileMask top{4, 4, {0, 1, 2, 2, 2}, {0, 4, 0, 4}};
  const SubtileWork t = subtile_work(&top, 4, 4, 2, 2, true);
  EXPECT_EQ(t.subtiles, 2);
  EXPECT_EQ(t.loop_rows, 2);
  EXPECT_EQ(t.loop_keys, 4);
}

TEST(CostModel, TileSetUpLowersTheRateOfShortLoops) {
  ClusterSpec spec = test_cluster({1, 1});
  spec.tile_setup_tokens = 256;
  const PlanHeader h = test_header({1, 1}, 1, 1);
  const CostModel cost(spec, h);
  const double pair = cost.pair_seconds(Pass::kForward);
  // Forward: q x (kv + 256) pairs; the rate on 512 keys is 2/3 of the rate on long rows.
  EXPECT_NEAR(cost.tile_seconds(Pass::kForward, nullptr, 512, 512), 512.0 * 768 * pair, 1e-15);
  EXPECT_NEAR(cost.tile_seconds(Pass::kForward, nullptr, 512, 4096) / (512.0 * 4096 * pair),
              (4096.0 + 256) / 4096, 1e-12);
  // Backward loops over keys: (q + 256) x kv.
  const double bwd = cost.pair_seconds(Pass::kBackward);
  EXPECT_NEAR(cost.tile_seconds(Pass::kBackward, nullptr, 1024, 512), 1280.0 * 512 * bwd, 1e-15);
}

TEST(CostModel, PairTimeFollowsHeadDimDtypeAndPass) {
  ClusterSpec spec = test_cluster({1, 1});
  spec.softmax_share = 0.25;
  spec.fp32_kernel_factor = 2;
  PlanHeader h = test_header({1, 1}, 1, 1);
  const double bf16_128 = CostModel(spec, h).pair_seconds(Pass::kForward);
  EXPECT_DOUBLE_EQ(bf16_128, 4 * 128 / 1e12);
  h.head_dim = 64;
  EXPECT_DOUBLE_EQ(CostModel(spec, h).pair_seconds(Pass::kForward), bf16_128 * (0.75 / 2 + 0.25));
  h.head_dim = 128;
  h.dtype = DType::kFp32;
  EXPECT_DOUBLE_EQ(CostModel(spec, h).pair_seconds(Pass::kForward), 2 * bf16_128);
  h.dtype = DType::kBf16;
  EXPECT_DOUBLE_EQ(CostModel(spec, h).pair_seconds(Pass::kBackward), 2.5 * bf16_128);
  spec.partial_subtile_extra = 0.5;
  spec.subtile_overhead = 1e-6;
  const TileMask causal{4, 4, {0, 1, 2, 3, 4}, {0, 1, 0, 2, 0, 3, 0, 4}};
  spec.forward_subtile_q = spec.forward_subtile_kv = 2;
  EXPECT_DOUBLE_EQ(CostModel(spec, h).tile_seconds(Pass::kForward, &causal, 4, 4),
                   (4 + 8 * 1.5) * bf16_128 + 3e-6);
}

}  // namespace
}  // namespace dcp::sim

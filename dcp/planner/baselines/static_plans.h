// SPDX-License-Identifier: Apache-2.0
// Static context parallelism as pass schedules: ring, zigzag ring, Ulysses, hybrid,
// TransformerEngine's a2a+p2p and LoongTrain's double ring, with optional data parallelism.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "dcp/model/workload.h"

#include "dcp/planner/baselines/static_rings.h"
#include "dcp/planner/placement/placement.h"
#include "dcp/planner/schedule/schedule.h"
#include "dcp/planner/strategy.h"

namespace dcp {

// A static strategy's plan before compilation. Static systems cut each sequence their own way, so
// `workload` is the input re-cut into their chunks (same batch, masks, shape and head blocks).
// Every one supports every mask; their communication does not depend on it. By default they skip
// fully masked tiles, as ring-flash-attention and TransformerEngine's causal path do; with
// MaskedTiles::kCompute they compute every tile of every pair of blocks of a sequence, as
// TransformerEngine's path for arbitrary masks does (empty tiles are attention entries with an
// empty mask, costed as whole tiles).
//
// Data parallelism: with degree d the devices form d groups of C = P / d consecutive devices;
// sequences go, longest first, to the group with the fewest tokens so far (the lowest on a tie),
// and each group runs the strategy on its own C devices (C below; with d = 1, C = P). No transfer
// crosses groups.
//   ring:    each sequence cut into C chunks of ceil(L / C) tokens, chunk r on device r; KV
//            travels the device ring r -> r + 1 one step per stage; work runs with its q chunk.
//   zigzag:  each sequence cut into 2C chunks, chunks r and 2C - 1 - r on device r; the same ring.
//   ulysses: tokens as in ring; all-to-all gives device r the r-th of C contiguous ranges of q
//            head blocks (and the kv heads they read) of every token; attention runs there in one
//            stage, and the outputs go back by all-to-all. Needs C <= q head blocks.
//   hybrid:  head parallelism inside each node (as Ulysses) and a zigzag ring across nodes (USP):
//            each sequence cut into 2 x (nodes of the group) node chunks in zigzag order, each
//            split over the node's devices. Needs devices per node <= q head blocks, and C a
//            multiple of the devices per node.
//   te:      TransformerEngine's cp_comm_type "a2a+p2p": as hybrid with head groups of a
//            consecutive devices instead of nodes, a = the largest value <= min(kv head blocks, C)
//            that divides the q head blocks and C (head_degree()); a zigzag ring across the
//            R = C / a head groups.
//   loongtrain: LoongTrain's double-ring attention with head parallelism: head groups and chunks
//            as te, but kv travels a double ring over the R head groups: an inner ring of w
//            consecutive head groups (a window; default the head groups per node, capped at R, so
//            the inner ring stays inside a node) and an outer ring over the R / w windows, whose
//            hop to the next window is sent while the inner ring of the current window runs. With
//            w = R it is te.
// Backward runs the same way; partial dK, dV follow the path their K, V travelled and end at their
// owner, each device adding its contribution on the way, and other partial outputs (O, LSE
// forward; dQ and, for Ulysses, dK, dV) return to their owner by all-to-all after the last stage
// that adds to them. Throws InvalidInput if the strategy cannot run on the cluster with the
// degree, or for kDcp and kDcpPure.
struct StaticPlan {
  Workload workload;
  Placement placement;
  PassSchedule forward;
  PassSchedule backward;
  std::int32_t data_parallel = 1;  // the degree used (the automatic one when 0 was asked for)
  RingLayout ring;  // the passes' geometry, outer hops whole (static_layout may spread them)
};
enum class MaskedTiles : std::uint8_t { kSkip, kCompute };
struct StaticOptions {
  MaskedTiles masked_tiles = MaskedTiles::kSkip;
  // d >= 1 dividing the devices, or 0: automatic_data_parallel's.
  std::int32_t data_parallel = 1;
  // loongtrain: the inner ring's head groups (capped at R; must then divide R). 0: the head
  // groups per node.
  std::int32_t loongtrain_window = 0;
  // One head block of the q heads each device of a head group computes, where they form a valid
  // one (the systems run one kernel over them: fewer work units, the same tiles); false: the
  // workload's own head blocks, so that the plan joins plans of dcp's (join_group_plans).
  bool device_head_blocks = true;
};
StaticPlan static_plan(Strategy strategy, const Workload& workload, const ClusterShape& cluster,
                       const StaticOptions& options = {});

// A lower bound of the schedule estimate (estimate() in schedule.h), forward plus backward, of
// the plan static_plan(strategy, workload, cluster.shape, options) would build (and of
// static_layout's, its outer hops spread or not), from the
// strategy's structure alone: no chunks, work units or transfers are built, in time linear in the
// sequences times the chunks plus the devices times the ring. Each pass takes at least
//   - the busiest device's compute, at least the mean of every unmasked pair's FLOPs, and
//   - each device's chain of ring launches: in every launch that brings it kv, the launch ends no
//     sooner than its set-up for one peer, the latency and the kv's bytes at the lower of the
//     message's stream bandwidth and its link side's bandwidth (at the curve's best efficiency);
//     a round of a double ring no less than its inner hops' launches or its outer hop alone,
//     whichever way static_layout sends the hop (spread_outer_hops).
// `header` gives the value sizes (plan_header of the workload with the strategy's partial dtype).
// Throws InvalidInput as static_plan does.
double static_estimate_lower_bound(Strategy strategy, const Workload& workload,
                                   const ClusterSpec& cluster, const StaticOptions& options,
                                   const PlanHeader& header);

// te's and loongtrain's all-to-all degree a on a group of `group_size` devices: the largest value
// <= min(kv head blocks, group_size) that divides the q head blocks and group_size.
std::int32_t head_degree(const HeadBlocking& heads, std::int32_t group_size);

// The data parallel degree the DCP paper gave frameworks without dynamic context parallelism
// ("the largest power of 2 <= 131072 // max(seqlen)", for its 131072-token batches): the largest
// power of two d dividing the devices with d x (the longest sequence) <= the smallest power of two
// >= the batch's tokens, lowered until the strategy's groups are possible (hybrid: whole nodes).
// 1 for dcp and dcp-pure.
std::int32_t automatic_data_parallel(Strategy strategy, const SequenceBatch& batch,
                                     const ClusterShape& cluster);

// The inner-ring sizes LoongTrain's users search (its sliding window): the powers of two below the
// ring of head groups of a group of `group_size` devices, 1 standing for one ring over every head
// group (the window equal to the ring runs the same schedule). {1} when the ring has one group.
std::vector<std::int32_t> loongtrain_windows(const HeadBlocking& heads, std::int32_t group_size);

// A data parallel degree as users write it: "auto" (0) or a whole number in [1, 65536]. Throws
// InvalidInput naming the text otherwise.
std::int32_t parse_data_parallel(std::string_view text);

}  // namespace dcp

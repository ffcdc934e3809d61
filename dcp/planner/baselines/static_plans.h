// SPDX-License-Identifier: Apache-2.0
// Static context parallelism as pass schedules: ring, zigzag ring, Ulysses and hybrid.
#pragma once

#include <cstdint>
#include <string_view>

#include "dcp/model/workload.h"

#include "dcp/planner/placement/placement.h"
#include "dcp/planner/schedule/schedule.h"

namespace dcp {

// kDcp: dcp's plan, or the best static plan when the simulator finds one faster (see build_plan);
// kDcpPure: dcp's own placement always.
enum class Strategy { kDcp, kDcpPure, kRing, kZigzag, kUlysses, kHybrid };
std::string_view to_string(Strategy strategy);
bool is_dcp(Strategy strategy);
// The static strategies, in the order plans and tables list them.
inline constexpr Strategy kStaticStrategies[] = {Strategy::kRing, Strategy::kZigzag,
                                                 Strategy::kUlysses, Strategy::kHybrid};
// Accepts dcp, dcp-pure, ring, zigzag, ulysses, hybrid. Throws InvalidInput naming the text
// otherwise.
Strategy parse_strategy(std::string_view name);

// A static strategy's plan before compilation. Static systems cut each sequence their own way, so
// `workload` is the input re-cut into their chunks (same batch, masks, shape and head blocks).
// Every one supports every mask; their communication does not depend on it. By default they skip
// fully masked tiles, as ring-flash-attention and TransformerEngine's causal path do; with
// MaskedTiles::kCompute they compute every tile of every pair of blocks of a sequence, as
// TransformerEngine's path for arbitrary masks does (empty tiles are attention entries with an
// empty mask, costed as whole tiles).
//   ring:    each sequence cut into P chunks of ceil(L / P) tokens, chunk r on device r; KV
//            travels the device ring r -> r + 1 one step per stage; work runs with its q chunk.
//   zigzag:  each sequence cut into 2P chunks, chunks r and 2P - 1 - r on device r; the same ring.
//   ulysses: tokens as in ring; all-to-all gives device r the r-th of P contiguous ranges of q
//            head blocks (and the kv heads they read) of every token; attention runs there in one
//            stage, and the outputs go back by all-to-all. Needs P <= q head blocks.
//   hybrid:  all-to-all over heads inside each node (as Ulysses) and a zigzag ring across nodes
//            (TransformerEngine a2a+p2p, USP): each sequence cut into 2 x nodes node chunks in
//            zigzag order, each split over the node's devices. Needs devices per node <= q head
//            blocks.
// Backward runs the same way; partial dK, dV travel the ring back to their owner with each
// device's contribution added on the way, and other partial outputs (O, LSE forward; dQ and, for
// Ulysses, dK, dV) return to their owner by all-to-all after the last stage that adds to them.
// Throws InvalidInput if the strategy cannot run on the cluster, or for kDcp and kDcpPure.
struct StaticPlan {
  Workload workload;
  Placement placement;
  PassSchedule forward;
  PassSchedule backward;
};
enum class MaskedTiles : std::uint8_t { kSkip, kCompute };
StaticPlan static_plan(Strategy strategy, const Workload& workload, const ClusterShape& cluster,
                       MaskedTiles masked_tiles = MaskedTiles::kSkip);

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// Placements that need no partitioner, computed for comparison: zigzag ring CP and greedy LPT.
#pragma once

#include <cstdint>

#include "dcp/planner/placement/placement.h"

namespace dcp {

// The workload with sequence s cut into `chunks` chunks of ceil(L / chunks) tokens (the last
// ones shorter or absent), one token block per chunk: how static context parallelism cuts a packed
// batch. Same batch, masks and shape; head blocks of `head_block_size` q heads (0: the
// workload's).
Workload recut_sequences(const Workload& workload, std::int64_t chunks,
                         TileSelection selection = TileSelection::kUnmasked,
                         std::int32_t head_block_size = 0);

// The device of chunk `chunk` of 2 * parts zigzag chunks: chunks r and 2 * parts - 1 - r go to r.
DeviceId zigzag_chunk_device(std::int64_t chunk, std::int64_t parts);

// Every work unit on the device of its q block.
void place_work_with_q(const Workload& workload, Placement& placement);

// The static placement of zigzag ring context parallelism (ring-flash-attention's zigzag,
// TransformerEngine p2p with DualChunkSwap) as those systems cut a packed batch: every sequence of
// L tokens is cut into 2P chunks of ceil(L / 2P) tokens (the last ones shorter or empty, where
// those systems pad), chunks r and 2P-1-r go to device r, and every work unit runs on the device
// of its q chunk. Short sequences are therefore spread over all P devices too. It is expressed in
// the block model with one token block per chunk, so that evaluate() measures it like any other
// placement; `workload` is the input re-cut that way (same batch, masks, shape, head blocks).
struct ZigzagBaseline {
  Workload workload;
  Placement placement;
};
ZigzagBaseline zigzag_baseline(const Workload& workload, const ClusterShape& cluster);

// Zigzag at the granularity of the workload's own token blocks: a block goes with the zigzag chunk
// holding its first token, a work unit with its q block. Not the baseline (a sequence shorter than
// 2P blocks is not spread over all devices); the placer starts refinement from it.
Placement zigzag_block_placement(const Workload& workload, const ClusterShape& cluster);

// Greedy largest-first: token blocks, largest first, each on the device with the least memory;
// then work units, heaviest first, each on the less loaded of the devices holding its q block and
// its kv block if that stays within (1 + eps_compute) x the mean compute, else on the least loaded
// device.
Placement greedy_placement(const Workload& workload, const ClusterShape& cluster,
                           double eps_compute);

// How packed_placement chooses a whole sequence's device among those it fits: the least work (its
// attention pairs and the rest of the layer for its tokens; then the fewest tokens), which spreads
// the long sequences' quadratic work, or the most tokens (best fit), which leaves room for the
// long ones where the cap is tight.
enum class PackingRule : std::uint8_t { kLeastWork, kBestFit };

// Sequences packed whole: longest first, each on a device where it fits within (1 + eps_memory) x
// the mean device's tokens, chosen by `rule`; a sequence that fits nowhere whole is cut at its
// token blocks, each block on the device of that device's node with the fewest tokens that it
// fits (else the device with the fewest tokens of all). Every work unit on its q block's device.
// Data parallelism at the sequence level: short sequences move nothing, and only the sequences
// too long for a device's share are spread. within_bounds: whether every device holds at most
// that many tokens. token_pairs: the rest of a layer per token, in pairs of one head's attention
// (pairs_per_token_of), that kLeastWork counts with the pairs; 0: attention alone.
struct PackedPlacement {
  Placement placement;
  bool within_bounds = true;
};
PackedPlacement packed_placement(const Workload& workload, const ClusterShape& cluster,
                                 double eps_memory, PackingRule rule = PackingRule::kLeastWork,
                                 double token_pairs = 0);

// `placement` of `workload` with every sequence whose token blocks all lie on one device cut again
// into blocks of `block_size` tokens on that device, the others as they are; work units with
// their q block. A sequence kept whole on a device moves nothing, and fewer, larger tiles run it
// with less per-tile overhead. Throws InvalidInput for a block size below 1.
struct ReblockedPlacement {
  Workload workload;
  Placement placement;
};
ReblockedPlacement whole_sequences_reblocked(const Workload& workload, const Placement& placement,
                                             TokenCount block_size);

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// The simulator's cost model: what each instruction of a Program costs on a device's compute
// stream, and what a link costs. Every constant comes from the ClusterSpec (one table, each
// constant with its source: dcp/model/cluster.cc and docs/cost_model.md).
#pragma once

#include <cstdint>

#include "dcp/model/cluster.h"

#include "dcp/program/program.h"

namespace dcp::sim {

// How a kernel with sub-tiles of q_sub rows x kv_sub keys computes one (q, kv) tile: every
// sub-tile with an unmasked pair costs the rectangle its attended pairs span (rows and keys), or
// with `whole` its whole q_sub x kv_sub shape, at the full rate if no pair inside the rectangle is
// masked, else at the partial rate.
struct SubtileWork {
  std::int64_t subtiles = 0;      // with at least one unmasked pair
  std::int64_t full_area = 0;     // pairs computed in sub-tiles no mask cuts
  std::int64_t partial_area = 0;  // pairs computed (masked or not) in sub-tiles the mask cuts
  // The loops a kernel runs: q rows of the q sub-tiles (row blocks) with a computed sub-tile, and
  // keys of the kv sub-tiles (column blocks) with one; with `whole`, q_sub and kv_sub each.
  std::int64_t loop_rows = 0;
  std::int64_t loop_keys = 0;
};
// mask = nullptr is the full q_tokens x kv_tokens tile. The mask must be well formed
// (tile_mask_problem); cost is linear in its intervals plus the sub-tiles they cross.
SubtileWork subtile_work(const TileMask* mask, std::int32_t q_tokens, std::int32_t kv_tokens,
                         std::int32_t q_sub, std::int32_t kv_sub, bool whole = false);

// What the executor running a Program adds to the kernels and transfers it issues. dcp's own
// executor (the default) adds nothing the cluster's constants do not already price. The DCP
// paper's reference executor (reference_executor()) is a Python loop over instructions that packs
// every launch's sends into one buffer, exchanges them with one all-to-all over the whole group,
// and unpacks what a wait received.
struct ExecutorModel {
  // Host time per instruction (Python dispatch, argument set-up), which the compute stream waits
  // for when the host falls behind: charged to every instruction on the compute stream.
  double instruction_overhead = 0;
  // A launch first copies its sends into one buffer and a wait then copies its receives out (one
  // memory kernel each, on the compute stream).
  bool packs_messages = false;
  // A launch is one all-to-all over every device of the plan: its set-up counts every other
  // device as a peer.
  bool launches_whole_group = false;
  // Keeps and Restores copy their value between its slot and the kept tensor (a memory kernel
  // each, batched like the others, and an instruction). dcp's executor copies nothing: it
  // receives a kept value into the kept tensor and reads it there (runtime/lowering.h).
  bool copies_kept = false;
  // Host time per sequence of the batch, once per pass before the pass's first instruction on
  // every device: an implementation that builds per-sequence indices on the host (Python loops
  // over the batch's sequences) before its first kernel.
  double sequence_overhead = 0;
};
// The DCP paper's reference executor, with its constants and their sources (docs/cost_model.md).
ExecutorModel reference_executor();
// The DCP paper's baselines that cut every sequence into zigzag halves (zigzag, LoongTrain,
// TransformerEngine) as it ran them: host time per sequence per pass, fitted (docs/cost_model.md).
// Its ring baseline keeps every sequence whole on a device and builds no per-sequence index.
ExecutorModel zigzag_baseline_executor();

class CostModel {
 public:
  // Throws InvalidInput if the spec is invalid (validate).
  CostModel(const ClusterSpec& spec, const PlanHeader& header);

  const ClusterSpec& spec() const { return spec_; }

  // One (q, k) pair of one tile, for every q head of a head block, in a full sub-tile: the
  // pass's FLOPs at the sustained rate, with the head-dim-independent share and the fp32 factor.
  double pair_seconds(Pass pass) const;
  // One tile of an attention instruction (no launch overhead): its sub-tiles' pairs, the
  // per-loop set-up (tile_setup_tokens per q row forward, per key backward) and the per-sub-tile
  // overhead.
  double tile_seconds(Pass pass, const TileMask* mask, std::int32_t q_tokens,
                      std::int32_t kv_tokens) const;
  // A memory-bound instruction (load, store, merge, sum) moving `bytes` to and from device
  // memory, without launch overhead: consecutive instructions of one kind run as one batched
  // kernel, which pays kernel_overhead once (the simulator charges it).
  double memory_seconds(std::int64_t bytes) const;
  double kernel_overhead() const { return spec_.kernel_overhead; }

  // Link sides: a device's intra-node send and receive sides, and each network interface's send
  // and receive sides (nics_per_node per node, each serving fixed devices).
  double latency(bool inter_node) const {
    return inter_node ? spec_.inter_node_latency : spec_.intra_node_latency;
  }
  double bandwidth(bool inter_node) const {
    return inter_node ? spec_.nic_bandwidth() : spec_.intra_node_bandwidth;
  }
  // The time from issuing a Launch with `peers` distinct peers to its transfers being posted.
  double launch_seconds(std::int64_t peers) const {
    return spec_.launch_overhead + spec_.launch_peer_overhead * static_cast<double>(peers);
  }

 private:
  ClusterSpec spec_;
  double pair_seconds_[2] = {0, 0};  // forward, backward
  double subtile_seconds_ = 0;       // a sub-tile of every head of a head block
};

}  // namespace dcp::sim

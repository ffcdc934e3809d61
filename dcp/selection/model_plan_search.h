// SPDX-License-Identifier: Apache-2.0
// dcp's search for the plan of a model with several attention kinds, decided by the simulated
// training step (the sum over kinds of layers x forward and backward time).
#pragma once

#include <cstddef>
#include <vector>

#include "dcp/planner/model_plan_builder.h"

namespace dcp {

// One kind: build_plan's plan and search (the same plan bytes as a plan of one mask), under the
// kind's name and layer count. Several kinds, strategy kDcp or kDcpPure, the fastest simulated
// step of:
//   1. the densest kind (densest_kind) planned alone with dcp's own search (block sizes, balances,
//      structured layouts), every other kind on its token placement (build_on_base, balanced: the
//      fastest of following its work, on_q_blocks and balanced_on_tokens);
//   2. the densest kind's fastest partition at each other block size its search tried, every
//      other kind on it (on_q_blocks or balanced_on_tokens);
//   3. every other kind's partition at the finest block size of the sweep
//   (options.search.block_sizes;
//      at the default and the tighter balance, the faster kept), the rest on its token placement
//      as in 2;
//   4. kDcp: every static strategy that can run on the cluster, for every kind (the kept plan's
//      headers then name "dcp/<strategy>"), screened by a lower bound as build_plan screens them.
// So dcp is never slower under the cost model than one mask's plan run for every layer, nor than a
// static strategy. Candidates are named by how they were made, e.g. "dcp (on full's placement)" or
// "dcp (on full's placement, block 4096)". A static strategy: its plan of every kind, its layout
// shared. Throws InvalidInput as build_one_model_plan.
BuiltModelPlan build_model_plan(const std::vector<KindWorkload>& kinds, const PlanOptions& options);

// The kind with the most unmasked pairs (the first on a tie): the full layers of a model with
// sliding-window ones. Its placement is the hardest to balance (a dense mask's work grows with the
// square of a sequence, a window's with its length), so the others follow it.
std::size_t densest_kind(const std::vector<KindWorkload>& kinds);

// Every kind on `base`'s token placement, base being a plan of kinds[base_kind] (of build_plan or
// build_one_plan, its workload cut as it was): a static strategy's plan ("dcp/<strategy>", or the
// strategy itself) runs every kind with that strategy; a plan of dcp's own runs every other kind
// with the same token blocks, each work unit where base computes the same tile (follow_placement)
// or, with `balance`, also on its q block's device (on_q_blocks) or held to its kind's compute
// caps (balanced_on_tokens), whichever simulates fastest. Timings count the other kinds only.
// Throws InvalidInput as the planner does.
BuiltModelPlan build_on_base(const BuiltPlan& base, std::size_t base_kind,
                             const std::vector<KindWorkload>& kinds, const PlanOptions& options,
                             bool balance);

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// What the benchmark suites share: their jobs (run in parallel, one progress line each), the
// batches they sample, the workloads and plans they build of them, and a plan's figures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/cluster.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/workload.h"

#include "dcp/data/length_distribution.h"

#include "dcp/planner/plan_builder.h"

namespace dcp::suites {

// Runs job(i) for every i in [0, count) on `threads` threads; as each ends, one progress line:
// "[done/count seconds s] " and what it returned.
void run_jobs(std::size_t count, int threads, std::ostream& progress,
              const std::function<std::string(std::size_t)>& job);

// One sampled batch of a suite's configuration: indices into its datasets, scales and masks.
struct SampledBatch {
  std::size_t dataset = 0, scale = 0, mask = 0;
  std::int32_t batch = 0;
  std::vector<TokenCount> lengths;
};
// `batches` batches of `tokens` tokens for every (dataset, scale), sampled with `seed`, each once
// per mask (index 0 .. masks - 1), in (dataset, scale, mask, batch) order.
std::vector<SampledBatch> sample_configurations(const std::vector<LengthDistributionKind>& datasets,
                                                const std::vector<double>& scales,
                                                std::size_t masks, std::int32_t batches,
                                                TokenCount tokens, std::uint64_t seed);
// "ldc x0.5 causal batch 2": a sampled batch as progress lines name it.
std::string sampled_name(const SampledBatch& sampled,
                         const std::vector<LengthDistributionKind>& datasets,
                         const std::vector<double>& scales, const std::vector<MaskSpec>& masks);
// The workload a suite plans for one sampled batch: blocks sized for the cluster's devices, the
// mask built per sequence.
Workload suite_workload(const SampledBatch& sampled, const AttentionShape& shape,
                        const MaskSpec& mask, const ClusterSpec& cluster);

// A built plan under the simulator: per pass (forward, backward) its time and the bytes its
// Programs move between and inside nodes, and its placement's compute imbalance.
struct PlanFigures {
  double seconds[2] = {0, 0};
  double inter[2] = {0, 0};
  double intra[2] = {0, 0};
  double imbalance = 1;
};
PlanFigures plan_figures(const BuiltPlan& built, const ClusterSpec& cluster);

// The reference's DCP as the paper and e2e suites stand it in: dcp's planner (dcp-pure, on the
// workload's own blocks) without what the reference's scheduler lacks (the backward schedule
// with own outputs last), its plan run by sim::reference_executor().
PlanOptions reference_stand_in_options(std::uint64_t seed);

}  // namespace dcp::suites

// SPDX-License-Identifier: Apache-2.0
// `dcp bench --suite planning`: how long planning takes, batch by batch, on one thread: dcp's own
// plan (dcp-pure) and the plan with selection among the static strategies (dcp).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/cluster.h"
#include "dcp/model/mask_spec.h"

#include "dcp/data/length_distribution.h"

namespace dcp::suites {

struct PlanningOptions {
  std::vector<ClusterShape> shapes;  // 4 x 8 and 8 x 8 by default
  std::vector<LengthDistributionKind> datasets;
  std::vector<double> scales;  // batches go round-robin over them
  std::vector<MaskSpec> masks;
  std::int32_t batches = 50;  // per (shape, dataset, mask)
  TokenCount tokens = 131072;
  ClusterSpec cluster;  // the cost model; its shape is replaced by each of `shapes`
  AttentionShape shape;
  std::uint64_t seed = 0;
};

// One batch planned by one strategy.
struct PlanningSample {
  ClusterShape shape;
  std::string dataset;
  double scale = 1;
  std::string mask;
  std::string strategy;  // dcp-pure or dcp
  std::int32_t batch = 0;
  std::int32_t sequences = 0;
  double plan_ms = 0;             // build_plan, wall clock, one thread
  std::int32_t static_built = 0;  // dcp: static candidates whose layout was built
  std::string kept;               // dcp: the plan kept
};

// Plans every batch with dcp-pure and then dcp, one at a time on the calling thread.
std::vector<PlanningSample> run_planning_suite(const PlanningOptions& options,
                                               std::ostream& progress);

std::string planning_samples_json(const std::vector<PlanningSample>& samples);
// Median, p90 and max per (shape, dataset, mask, strategy) and per (shape, strategy).
std::string planning_markdown(const PlanningOptions& options,
                              const std::vector<PlanningSample>& samples,
                              const std::string& command);

}  // namespace dcp::suites

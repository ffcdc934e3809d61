// SPDX-License-Identifier: Apache-2.0
// `dcp bench --suite micro`: the DCP paper's attention micro-benchmark under the simulator:
// datasets x length scales x masks x strategies on a described cluster, its records and reports.
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

#include "dcp/planner/baselines/static_plans.h"

namespace dcp::suites {

struct MicroOptions {
  std::vector<LengthDistributionKind> datasets;
  std::vector<double> scales;
  std::vector<MaskSpec> masks;
  std::vector<Strategy> strategies;  // dcp and dcp-pure come first when present
  std::int32_t batches = 3;
  TokenCount tokens = 131072;
  ClusterSpec cluster;
  AttentionShape shape;
  std::uint64_t seed = 0;
  int threads = 1;
  // The static strategies' data parallel degree (PlanOptions::statics), also for
  // dcp's static candidates; 0: automatic per batch. 1 by default, as the DCP paper's measured
  // baselines ran (PaperOptions::static_data_parallel says why).
  std::int32_t static_data_parallel = 1;
};

// One (dataset, scale, mask, pass, strategy): means over the configuration's batches. A strategy
// that cannot run on the cluster has feasible = false and no figures.
struct MicroRecord {
  std::string dataset;
  double scale = 1;
  std::string mask;
  std::string pass;
  std::string strategy;
  bool feasible = true;
  double time_ms = 0;
  double estimate_ms = 0;  // the planner's schedule estimate of the same plans (not simulated)
  double bytes_inter_node = 0;
  double bytes_intra_node = 0;
  double imbalance_compute = 1;
  double plan_ms = 0;
  std::int32_t batches = 0;
  std::string kept;  // dcp: how often each plan was kept, e.g. "dcp 3" or "dcp 2, zigzag 1"
};

// Plans every batch of every configuration with every strategy, simulates each plan, and
// returns the records in (dataset, scale, mask, pass, strategy) order. Progress lines go to
// `progress`. Results do not depend on `threads` (planning times aside).
std::vector<MicroRecord> run_micro_suite(const MicroOptions& options, std::ostream& progress);

std::string micro_records_json(const std::vector<MicroRecord>& records);
// The Markdown report: setup, per-pass tables of simulated times and speedups, bytes and
// imbalance, and the targets. `command` is the line that reproduces it.
std::string micro_markdown(const MicroOptions& options, const std::vector<MicroRecord>& records,
                           const std::string& command);
// A bar chart (SVG) of dcp's and dcp-pure's speedup over the best baseline for one pass.
std::string micro_svg(const MicroOptions& options, const std::vector<MicroRecord>& records,
                      const std::string& pass);

}  // namespace dcp::suites

// SPDX-License-Identifier: Apache-2.0
// The benchmark suites of `dcp bench`: the paper's attention micro-benchmark under the simulator,
// and the simulator's calibration against measured runs on local ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "dcp/dcp.h"

namespace dcp::cli {

// `value` with `decimals` digits after the point, for tables.
std::string format_fixed(double value, int decimals);
// Runs job(i) for every i in [0, count) on `threads` threads; as each ends, one progress line:
// "[done/count seconds s] " and what it returned.
void run_jobs(std::size_t count, int threads, std::ostream& progress,
              const std::function<std::string(std::size_t)>& job);

// A fraction as a percentage with one decimal: "12.5 %".
std::string format_percent(double fraction);
// The median (the mean of the middle two for an even count; 0 for none).
double median_of(std::vector<double> values);
// A length scale as tables and progress show it: "x0.5".
std::string format_scale(double scale);

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

// --- micro --------------------------------------------------------------------------------------

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
  // The static strategies' data parallel degree (PlanOptions::static_data_parallel), also for
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

// --- calibration --------------------------------------------------------------------------------

struct CalibrationSuiteOptions {
  std::vector<MaskSpec> masks;
  std::vector<Strategy> strategies;
  std::int32_t batches = 3;
  TokenCount tokens = 8192;
  LengthDistributionKind dataset = LengthDistributionKind::kLongDataCollections;
  ClusterSpec cluster;  // its shape is the local ranks'
  AttentionShape shape;
  std::uint64_t seed = 0;
};

struct CalibrationSample {
  std::string mask;
  std::string strategy;
  std::int32_t batch = 0;
  std::string pass;
  double measured_ms = 0;
  double simulated_ms = 0;
  double error() const { return (simulated_ms - measured_ms) / measured_ms; }
};

std::vector<CalibrationSample> run_calibration_suite(const CalibrationSuiteOptions& options,
                                                     std::ostream& progress);
std::string calibration_markdown(const CalibrationSuiteOptions& options,
                                 const std::vector<CalibrationSample>& samples,
                                 const std::string& command);

}  // namespace dcp::cli

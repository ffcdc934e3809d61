// SPDX-License-Identifier: Apache-2.0
// `dcp bench --suite calibration`: the simulator against reality, real runs of the CPU runtime on
// local ranks next to the simulator's prediction under a cluster spec measured on this machine.
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

}  // namespace dcp::suites

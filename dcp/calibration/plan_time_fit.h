// SPDX-License-Identifier: Apache-2.0
// The fit of a cluster's cost-model constants to measured times of whole plans: the constants no
// datasheet fixes, moved until the simulator's times of the plans match the measured ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "dcp/model/cluster.h"

#include "dcp/program/program.h"
#include "dcp/sim/cost_model.h"

namespace dcp::calibration {

// One measured time: the mean of the simulated times of `plans` in one pass stands against it.
struct MeasuredPlanTime {
  double measured_ms = 0;
  Pass pass = Pass::kForward;
  std::vector<std::size_t> plans;  // indices into PlanTimeFitInput::plans
};

struct PlanTimeFitInput {
  ClusterSpec cluster;  // the starting constants; the fit moves only the fitted ones
  // The executor model of the plans flagged in `priced_with_executor` (another implementation's
  // executor, e.g. sim::zigzag_baseline_executor()); the fit moves its host time per sequence.
  // The other plans are priced with dcp's own executor (sim::ExecutorModel{}).
  sim::ExecutorModel executor;
  std::vector<Plan> plans;
  std::vector<bool> priced_with_executor;  // one per plan
  std::vector<MeasuredPlanTime> measured;
  // The constants to move, by name (plan_time_fit_constants); empty: all of them.
  std::vector<std::string> parameters;
  int threads = 1;  // plans simulated at once
};

struct PlanTimeFit {
  ClusterSpec cluster;          // the input's, with the fitted values
  sim::ExecutorModel executor;  // the input's, with the fitted host time per sequence
  double rms_log_error_before = 0;
  double rms_log_error_after = 0;
  std::int32_t evaluations = 0;  // objective evaluations, each a simulation of every plan
};

// The names of the constants the fit can move, in the order it moves them: forward_tflops,
// backward_tflops, tile_setup_tokens, kernel_overhead_us, launch_overhead_us,
// launch_peer_overhead_us, intra_half_bytes, inter_half_bytes (the half-bandwidth message sizes
// of the links' efficiency curves, half_rate_curve), intra_stream_gbps, inter_stream_gbps and
// sequence_overhead_us (the executor model's).
std::vector<std::string> plan_time_fit_constants();

// Throws InvalidInput "no fitted constant named 'NAME' (the constants: ...)" for the first name
// that is not one of plan_time_fit_constants().
void check_plan_time_fit_constants(std::span<const std::string> names);

// Minimises the rms over input.measured of log(simulated mean / measured) by coordinate search in
// log space: each moved constant in turn is multiplied and divided by a factor within its bounds,
// and a move is kept where it lowers the error; the factor starts at 2 and is square-rooted while
// above 1.04. Constants not moved keep their exact values. Each kept move is one progress line,
// "fit: NAME OLD -> NEW: rms log error E". Throws InvalidInput for an unknown constant name
// (check_plan_time_fit_constants), no measured time, a measured time that is not positive or has
// no plans or a plan index out of range, or priced_with_executor not one flag per plan.
PlanTimeFit fit_plan_times(const PlanTimeFitInput& input, std::ostream& progress);

}  // namespace dcp::calibration

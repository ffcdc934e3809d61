// SPDX-License-Identifier: Apache-2.0
// The coordinate search of the cost-model constants over simulations of plans built once.
#include "dcp/calibration/plan_time_fit.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "dcp/core/error.h"
#include "dcp/core/thread_pool.h"

#include "dcp/sim/simulator.h"

namespace dcp::calibration {
namespace {

constexpr std::array<const char*, 11> kConstants = {
    "forward_tflops",     "backward_tflops",         "tile_setup_tokens",   "kernel_overhead_us",
    "launch_overhead_us", "launch_peer_overhead_us", "intra_half_bytes",    "inter_half_bytes",
    "intra_stream_gbps",  "inter_stream_gbps",       "sequence_overhead_us"};

// A constant in the fit's unit: a positive value changed multiplicatively, within bounds.
struct Parameter {
  const char* name;
  double value, lo, hi;
};

// The constants of `spec` and `executor` as the fit moves them, in kConstants' order.
std::vector<Parameter> parameters_of(const ClusterSpec& spec, const sim::ExecutorModel& executor) {
  const auto half_of = [](const std::vector<SizeEfficiency>& curve) {
    // Recover the half size from the curve's 1 MiB point (s / (s + h) = e => h = s (1 - e) / e).
    const double e = size_efficiency(curve, 1 << 20);
    return std::max(1.0, (1 << 20) * (1 - e) / e);
  };
  return {
      {kConstants[0], spec.forward_flops / 1e12, 50, 312},
      {kConstants[1], spec.backward_flops / 1e12, 40, 312},
      {kConstants[2], std::max(1.0, spec.tile_setup_tokens), 1, 4096},
      {kConstants[3], std::max(1.0, spec.kernel_overhead * 1e6), 1, 100},
      {kConstants[4], std::max(1.0, spec.launch_overhead * 1e6), 1, 500},
      {kConstants[5], std::max(0.1, spec.launch_peer_overhead * 1e6), 0.1, 100},
      {kConstants[6], half_of(spec.intra_node_efficiency), 1e3, 1e8},
      {kConstants[7], half_of(spec.inter_node_efficiency), 1e3, 1e8},
      {kConstants[8],
       (spec.intra_node_stream_bandwidth > 0 ? spec.intra_node_stream_bandwidth
                                             : spec.intra_node_bandwidth) /
           1e9,
       1, 1000},
      {kConstants[9],
       (spec.inter_node_stream_bandwidth > 0 ? spec.inter_node_stream_bandwidth
                                             : spec.nic_bandwidth()) /
           1e9,
       0.1, 1000},
      {kConstants[10], std::max(0.1, executor.sequence_overhead * 1e6), 0.1, 1000},
  };
}

}  // namespace

std::vector<std::string> plan_time_fit_constants() {
  return std::vector<std::string>(kConstants.begin(), kConstants.end());
}

void check_plan_time_fit_constants(std::span<const std::string> names) {
  for (const std::string& name : names) {
    if (std::find(kConstants.begin(), kConstants.end(), name) == kConstants.end()) {
      std::string all;
      for (const char* constant : kConstants) {
        all += std::string(all.empty() ? "" : ", ") + constant;
      }
      throw InvalidInput("no fitted constant named '" + name + "' (the constants: " + all + ")");
    }
  }
}

PlanTimeFit fit_plan_times(const PlanTimeFitInput& input, std::ostream& progress) {
  check_plan_time_fit_constants(input.parameters);
  if (input.priced_with_executor.size() != input.plans.size()) {
    throw InvalidInput("the fit needs one priced_with_executor flag per plan");
  }
  if (input.measured.empty()) throw InvalidInput("the fit needs at least one measured time");
  for (const MeasuredPlanTime& t : input.measured) {
    if (!(t.measured_ms > 0) || t.plans.empty() ||
        std::any_of(t.plans.begin(), t.plans.end(),
                    [&](std::size_t i) { return i >= input.plans.size(); })) {
      throw InvalidInput("a measured time needs a positive time and plans among the fit's");
    }
  }
  std::vector<Parameter> parameters = parameters_of(input.cluster, input.executor);
  const auto moves = [&](const Parameter& p) {
    return input.parameters.empty() || std::find(input.parameters.begin(), input.parameters.end(),
                                                 p.name) != input.parameters.end();
  };
  // The spec and executor with the parameters' values; constants held keep their exact values.
  const auto apply = [&](const std::vector<Parameter>& p) {
    ClusterSpec c = input.cluster;
    const auto set = [&](std::size_t k, auto& field, auto value_of) {
      if (moves(p[k])) field = value_of(p[k].value);
    };
    set(0, c.forward_flops, [](double v) { return v * 1e12; });
    set(1, c.backward_flops, [](double v) { return v * 1e12; });
    set(2, c.tile_setup_tokens, [](double v) { return v; });
    set(3, c.kernel_overhead, [](double v) { return v * 1e-6; });
    set(4, c.launch_overhead, [](double v) { return v * 1e-6; });
    set(5, c.launch_peer_overhead, [](double v) { return v * 1e-6; });
    set(6, c.intra_node_efficiency, half_rate_curve);
    set(7, c.inter_node_efficiency, half_rate_curve);
    set(8, c.intra_node_stream_bandwidth, [](double v) { return v * 1e9; });
    set(9, c.inter_node_stream_bandwidth, [](double v) { return v * 1e9; });
    return c;
  };
  const auto executor_of = [&](const std::vector<Parameter>& p) {
    sim::ExecutorModel e = input.executor;
    if (moves(p[10])) e.sequence_overhead = p[10].value * 1e-6;
    return e;
  };
  PlanTimeFit fit;
  const auto objective = [&](const std::vector<Parameter>& p) {
    const ClusterSpec c = apply(p);
    const sim::ExecutorModel executor = executor_of(p);
    std::vector<std::array<double, 2>> seconds(input.plans.size());
    ThreadPool pool(input.threads);
    pool.parallel_for(input.plans.size(), [&](std::size_t i, int) {
      const sim::PlanSimulation s = sim::simulate(
          input.plans[i], c, input.priced_with_executor[i] ? executor : sim::ExecutorModel{});
      seconds[i] = {s.forward.seconds, s.backward.seconds};
    });
    double sum = 0;
    for (const MeasuredPlanTime& t : input.measured) {
      const auto pass = static_cast<std::size_t>(t.pass == Pass::kForward ? 0 : 1);
      double ms = 0;
      for (const std::size_t i : t.plans) ms += seconds[i][pass];
      ms = ms / static_cast<double>(t.plans.size()) * 1e3;
      sum += std::pow(std::log(ms / t.measured_ms), 2);
    }
    ++fit.evaluations;
    return std::sqrt(sum / static_cast<double>(input.measured.size()));
  };
  double best = objective(parameters);
  fit.rms_log_error_before = best;
  for (double factor = 2.0; factor > 1.04; factor = std::sqrt(factor)) {
    bool improved = true;
    while (improved) {
      improved = false;
      for (Parameter& parameter : parameters) {
        if (!moves(parameter)) continue;
        for (const double step : {factor, 1 / factor}) {
          const double old = parameter.value;
          parameter.value = std::clamp(old * step, parameter.lo, parameter.hi);
          if (parameter.value == old) continue;
          const double value = objective(parameters);
          if (value < best - 1e-6) {
            best = value;
            improved = true;
            progress << "fit: " << parameter.name << " " << old << " -> " << parameter.value
                     << ": rms log error " << best << "\n"
                     << std::flush;
          } else {
            parameter.value = old;
          }
        }
      }
    }
  }
  fit.rms_log_error_after = best;
  fit.cluster = apply(parameters);
  fit.executor = executor_of(parameters);
  return fit;
}

}  // namespace dcp::calibration

// SPDX-License-Identifier: Apache-2.0
// A model plan simulated: every kind's passes, and the training step they add up to.
#pragma once

#include <string>
#include <vector>

#include "dcp/program/model_plan.h"
#include "dcp/sim/simulator.h"

namespace dcp::sim {

struct KindSimulation {
  std::string name;
  std::int32_t layers = 1;
  PlanSimulation passes;  // one layer's forward and backward
};

struct ModelSimulation {
  std::vector<KindSimulation> kinds;
  // The attention of a training step: each kind's layers run one after another, each layer's
  // forward and backward pass once, so the sum over kinds of layers x (forward + backward).
  double step_seconds = 0;
};

// Throws InvalidInput as simulate(Plan) does (a cluster that does not fit the plan).
ModelSimulation simulate(const ModelPlan& plan, const ClusterSpec& cluster,
                         const ExecutorModel& executor = {});

}  // namespace dcp::sim

// SPDX-License-Identifier: Apache-2.0
#include "dcp/sim/model_simulation.h"

namespace dcp::sim {

ModelSimulation simulate(const ModelPlan& plan, const ClusterSpec& cluster,
                         const ExecutorModel& executor) {
  ModelSimulation result;
  for (const KindPlan& kind : plan.kinds) {
    KindSimulation simulated{kind.name, kind.layers, simulate(kind.plan, cluster, executor)};
    result.step_seconds += kind.layers * simulated.passes.seconds();
    result.kinds.push_back(std::move(simulated));
  }
  return result;
}

}  // namespace dcp::sim

// SPDX-License-Identifier: Apache-2.0
// A structured candidate of dcp's search: the planner's plan on a static layout, its backward
// stages cut or whole, whichever the simulator finds faster.
#include <utility>

#include "dcp/core/timing.h"

#include "dcp/planner/plan_builder.h"
#include "dcp/selection/plan_search.h"
#include "dcp/sim/simulator.h"

namespace dcp {

BuiltPlan build_structured(Strategy layout, const Workload& workload, const PlanOptions& options) {
  StructuredVariants variants = build_structured_variants(layout, workload, options);
  BuiltPlan& built = variants.built;
  if (variants.whole_stages) {
    // The estimate's cut against the whole stages, the whole kept on a tie (on some batches of the
    // H200 calibration the estimate's cut was the slower).
    const auto choice_start = Clock::now();
    BackwardVariant& whole = *variants.whole_stages;
    if (sim::simulate(built.plan.header, whole.programs, options.cluster).seconds <=
        sim::simulate(built.plan.header, built.plan.backward, options.cluster).seconds) {
      built.plan.backward = std::move(whole.programs);
      built.backward_schedule = std::move(whole.schedule);
      built.backward = whole.summary;
    }
    const double choice_ms = ms_since(choice_start);
    built.timings.schedule_backward_ms = whole.compile_ms + choice_ms;
    built.timings.total_ms += choice_ms;
  }
  return std::move(built);
}

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// The compiler: turns a placement and a pass schedule into one Program per device.
#pragma once

#include <vector>

#include "dcp/model/workload.h"

#include "dcp/planner/placement/placement.h"
#include "dcp/planner/schedule/kept_values.h"
#include "dcp/planner/schedule/schedule.h"
#include "dcp/program/program.h"

namespace dcp {

// Per device, in this order:
//   stage 0: load the owned inputs the device uses or sends; issue launch 0; attention over the
//            stage's work units;
//   stage s: wait for launch s - 1; merge (forward) or sum (backward) the partial outputs it
//            brought into this device's accumulators; issue launch s (inputs of stage s + 1,
//            relays, and partial outputs: those complete on this device after stage s - 1, or
//            passed on after adding what came in); attention; free the slots whose values are
//            dead;
//   end:     wait for the last launches and merge what they brought; store every owned output.
// A device accumulates its own contributions to a value in one slot (the attention instruction's
// accumulate flag) and sends it once, after the last stage that contributes. Slots are assigned
// by lifetime: a slot freed at the end of a stage is reused by the next value of its kind that
// fits (best fit), so the buffer table is the peak, not the sum.
// With `kept`, each Program lists its device's kept kv values: the forward Program keeps each one
// right after the wait of the launch that brought it; the backward Program restores each one at
// the start of the first stage that reads it (the backward schedule must not fetch them).
std::vector<Program> compile_pass(const Workload& workload, const Placement& placement,
                                  const PlanHeader& header, const PassSchedule& schedule,
                                  const KeptKv* kept = nullptr);

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// The backward schedule with the work units whose outputs stay on their device moved last.
#include <optional>
#include <utility>
#include <vector>

#include "dcp/planner/schedule/stage_scheduler.h"

namespace dcp {

std::optional<PassSchedule> own_outputs_last(const Workload& workload, const Placement& placement,
                                             const PassSchedule& schedule, std::int32_t from) {
  const auto devices = static_cast<std::size_t>(placement.cluster.devices());
  std::vector<char> sends(devices, 0);
  std::vector<char> own(schedule.unit_stage.size(), 0);
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    const DeviceId d = placement.work_unit_device[static_cast<std::size_t>(w)];
    bool owns_all = true;
    for (const ValueKey& value : output_values(workload, schedule.pass, workload.work_unit(w))) {
      owns_all &= placement.token_block_device[static_cast<std::size_t>(value.block)] == d;
    }
    own[static_cast<std::size_t>(w)] = owns_all ? 1 : 0;
    if (!owns_all) sends[static_cast<std::size_t>(d)] = 1;
  }
  PassSchedule moved = schedule;
  bool any = false;
  for (std::size_t w = 0; w < moved.unit_stage.size(); ++w) {
    if (moved.unit_stage[w] == from && own[w] != 0 &&
        sends[static_cast<std::size_t>(placement.work_unit_device[w])] != 0) {
      moved.unit_stage[w] = schedule.stages;
      any = true;
    }
  }
  if (!any) return std::nullopt;
  ++moved.stages;
  return moved;
}

bool keep_own_outputs_last_if_faster(const Workload& workload, const Placement& placement,
                                     const ClusterSpec& cluster, const PlanHeader& header,
                                     PassSchedule& schedule, ScheduleEstimate& schedule_estimate,
                                     std::int32_t from) {
  std::optional<PassSchedule> moved = own_outputs_last(workload, placement, schedule, from);
  if (!moved) return false;
  ScheduleEstimate moved_estimate = estimate(workload, placement, cluster, header, *moved);
  // Kept only if lower by more than noise in the model.
  if (moved_estimate.seconds >= schedule_estimate.seconds * kEstimateGainShare) return false;
  schedule = std::move(*moved);
  schedule_estimate = std::move(moved_estimate);
  return true;
}

}  // namespace dcp

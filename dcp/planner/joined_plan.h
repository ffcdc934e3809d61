// SPDX-License-Identifier: Apache-2.0
// Plans of disjoint groups of devices joined into one plan of the whole cluster.
#pragma once

#include <cstddef>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/model/workload.h"

#include "dcp/planner/plan_builder.h"

namespace dcp {

// One group's plan inside a joined plan: dcp's own plan of some of the batch's sequences on a
// cluster of the group's devices alone.
struct GroupPlan {
  const BuiltPlan* plan = nullptr;
  DeviceId first_device = 0;           // the group's device d is the joined plan's first_device + d
  std::vector<std::size_t> sequences;  // the group's sequence i is the batch's sequences[i]
};

// The groups' plans joined into one plan of `workload`'s batch over options.cluster: every
// sequence cut at its group's block size; each group's placement, kept kv and both passes'
// schedules as its own plan had them, on its devices; Programs compiled again. So each group keeps
// the stages, compute balance and launches its own search chose, which one schedule of the whole
// cluster cannot. No group sends to another. Devices in no group run empty Programs. Throws
// InvalidInput where the groups do not cover every sequence exactly once, a group's devices fall
// outside the cluster, overlap another's or are neither inside one node nor whole nodes of the
// cluster, or a group's plan is of other lengths, shape, head blocks or partial dtype.
BuiltPlan join_group_plans(const Workload& workload, const std::vector<GroupPlan>& groups,
                           const PlanOptions& options);

}  // namespace dcp

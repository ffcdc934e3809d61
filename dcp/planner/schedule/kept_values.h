// SPDX-License-Identifier: Apache-2.0
// Which kv values a device keeps from the forward pass for the backward pass, within a budget.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "dcp/model/workload.h"

#include "dcp/planner/placement/placement.h"
#include "dcp/planner/plan_header.h"
#include "dcp/program/program.h"

namespace dcp {

// The budget of kept kv bytes per device (for one attention call, i.e. one layer).
inline constexpr std::int64_t kKeepAllKv = -1;  // every kv value a device receives
inline constexpr std::int64_t kKeepNoKv = 0;

// A budget as users write it (--keep-kv, keep_kv): "all" (kKeepAllKv), "none" (kKeepNoKv) or a
// number of MiB per device, as bytes. Throws InvalidInput naming the text otherwise.
std::int64_t parse_kept_kv_budget(std::string_view text);

struct KeptKv {
  std::vector<std::vector<KeptValue>> per_device;  // sorted
  std::vector<std::int64_t> device_bytes;          // the kept tensor's bytes per device
  std::int64_t max_device_bytes() const;
};

// A device reads the same kv values in both passes (the work units stay where they are). A value
// it received in the forward pass and keeps need not be received again in the backward pass.
// Values are kept per (value, node): on every device of a node that reads it, or on none, so a
// node either receives a value again or not at all. With budget kKeepAllKv all are kept; otherwise,
// within `budget_bytes` per device, first the values that would cross nodes again (the largest
// first), then those that would move inside a node, in value order among equals. Deterministic.
// Throws InvalidInput for a budget below -1.
KeptKv choose_kept_kv(const Workload& workload, const Placement& placement,
                      const PlanHeader& header, std::int64_t budget_bytes);

}  // namespace dcp

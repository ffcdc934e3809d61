// SPDX-License-Identifier: Apache-2.0
// The header every Program of a plan of one workload shares: shape, dtypes and counts.
#pragma once

#include <cstdint>
#include <string>

#include "dcp/model/cluster.h"
#include "dcp/model/workload.h"

#include "dcp/program/program.h"

namespace dcp {

// Partials (o and lse, dq, dk and dv) travel and accumulate in fp32.
PlanHeader plan_header(const Workload& workload, const ClusterShape& cluster, std::string strategy,
                       std::uint64_t seed);

}  // namespace dcp

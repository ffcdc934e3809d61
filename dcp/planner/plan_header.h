// SPDX-License-Identifier: Apache-2.0
// The header every Program of a plan of one workload shares: shape, dtypes and counts.
#pragma once

#include <cstdint>
#include <string>

#include "dcp/model/cluster.h"
#include "dcp/model/workload.h"

#include "dcp/program/program.h"

namespace dcp {

// Partials (o, dq, dk and dv) accumulate in fp32 and travel in `partial_dtype`: fp32 or the
// workload's storage dtype (else InvalidInput naming both).
PlanHeader plan_header(const Workload& workload, const ClusterShape& cluster, std::string strategy,
                       std::uint64_t seed, DType partial_dtype = DType::kFp32);

}  // namespace dcp

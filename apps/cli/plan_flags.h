// SPDX-License-Identifier: Apache-2.0
// Flags that choose how a batch is planned (cluster, strategy, schedule), shared by every command
// that plans: plan, run, attention, demo.
#pragma once

#include <optional>
#include <vector>

#include "dcp/model/attention_shape.h"

#include "dcp/planner/plan_builder.h"
#include "dcp/planner_options.h"

#include "apps/cli/args.h"

namespace dcp::cli {

// One flag per option of the planner (planner_options(), dcp/planner_options.h): --cluster,
// --nodes, --devices-per-node, --strategy, --static-dp, --loongtrain-window, --stages,
// --compute-masked-tiles, --eps-compute, --eps-memory, --token-flops, --keep-kv, --partial-dtype.
const std::vector<FlagSpec>& plan_flags();

// The flag of one option of the tables in dcp/planner_options.h: "--" + its name with '-' for
// '_', its help ending in its default, in brackets.
FlagSpec flag_spec(const PlannerOption& option);

// --partial-dtype (also a flag of dcp partition), and the dtype it names (unset: not given).
FlagSpec partial_dtype_flag();
std::optional<DType> partial_dtype_from_flags(const Args& args);

// The options those flags give, read and checked by planner_options_from, with `seed` as the
// planner seed and, for --block-size auto (or none), the automatic block size's sweep. Every error
// is a UsageError naming its flag; dcp-only flags with a static strategy (and the reverse) are
// usage errors.
PlanOptions plan_options_from_flags(const Args& args, std::uint64_t seed);

}  // namespace dcp::cli

// SPDX-License-Identifier: Apache-2.0
// Flags that choose how a batch is planned (cluster, strategy, schedule), shared by every command
// that plans: plan, run, attention, demo.
#include "apps/cli/plan_flags.h"

#include <deque>
#include <string>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

#include "dcp/model/attention_shape.h"

#include "dcp/planner/plan_builder.h"
#include "dcp/planner_options.h"
#include "dcp/selection/plan_search.h"

namespace dcp::cli {

FlagSpec flag_spec(const PlannerOption& option) {
  // Built once and kept: a FlagSpec holds views.
  static std::deque<std::string> texts;
  const std::string& name = texts.emplace_back(flag_of(option.name));
  std::string help(option.help);
  if (!option.default_text.empty()) help.append(" [").append(option.default_text).append("]");
  return {name, option.value_name, texts.emplace_back(std::move(help))};
}

const std::vector<FlagSpec>& plan_flags() {
  static const std::vector<FlagSpec> specs = [] {
    std::vector<FlagSpec> flags;
    for (const PlannerOption& option : planner_options()) flags.push_back(flag_spec(option));
    return flags;
  }();
  return specs;
}

FlagSpec partial_dtype_flag() {
  for (const FlagSpec& flag : plan_flags()) {
    if (flag.name == "--partial-dtype") return flag;
  }
  throw Error("the planner's options have no partial_dtype");
}

std::optional<DType> partial_dtype_from_flags(const Args& args) {
  if (const auto name = args.get("--partial-dtype")) {
    return with_flag("--partial-dtype", [&] { return parse_dtype(*name); });
  }
  return std::nullopt;
}

PlanOptions plan_options_from_flags(const Args& args, std::uint64_t seed) {
  GivenOptions given;
  for (const PlannerOption& option : planner_options()) {
    const std::string flag = flag_of(option.name);
    if (!args.has(flag)) continue;
    if (option.type == OptionType::kFlag) {
      given.emplace(option.name, true);
    } else {
      given.emplace(option.name, *args.get(flag));
    }
  }
  PlanOptions options;
  try {
    options = planner_options_from(given, OptionSpelling::kFlag);
  } catch (const InvalidInput& e) {  // each names its flag
    throw UsageError(e.what());
  } catch (const IoError& e) {
    throw UsageError(e.what());
  }
  sweep_block_sizes_when_automatic(options, args.get_or("--block-size", "auto") == "auto");
  options.seed = seed;
  return options;
}

}  // namespace dcp::cli

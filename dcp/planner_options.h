// SPDX-License-Identifier: Apache-2.0
// The options of a plan request, described once (name, type, default, help) and read with their
// checks in one place: the command line's flags and Python's keywords of dcp.plan are both these
// tables, the batch's (its attention shape and block model) and the planner's.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "dcp/core/ids.h"

#include "dcp/model/attention_shape.h"

#include "dcp/planner/plan_builder.h"

namespace dcp {

// What an option's value is. Its name in to_string is Python's: int, float, str, int|str,
// float|str, bool.
enum class OptionType {
  kInt,
  kNumber,
  kText,
  kIntOrText,     // a whole number or a word ("N|auto")
  kNumberOrText,  // a number or a word ("all|none|MIB")
  kFlag,          // on when given (the command line) or True (Python)
};
std::string_view to_string(OptionType type);

// One option of the planner. The command line's flag is "--" + name with '-' for '_' (flag_of);
// Python's keyword is the name. Its help is the flag's help without the default, which the
// command line shows after it in brackets.
struct PlannerOption {
  std::string_view name;  // "static_dp"
  OptionType type;
  std::string_view value_name;    // the flag's value in the help ("N|auto"); empty for kFlag
  std::string_view default_text;  // "1", or what the default is ("the cluster's"); empty: off
  std::string_view help;
};

// Every option of the planner, in the order the command line's help lists them: cluster, nodes,
// devices_per_node, strategy, static_dp, loongtrain_window, stages, compute_masked_tiles,
// eps_compute, eps_memory, token_flops, keep_kv, partial_dtype. Options of the batch and its
// block model (heads, block size, masks, ...) and the seed are not here.
std::span<const PlannerOption> planner_options();

// The batch's options, in the order the command line's help lists them: heads, kv_heads,
// head_dim, dtype, softmax_scale, block_size, head_block_size. The batch itself (its lengths,
// masks and attention kinds) and the seed are the caller's.
std::span<const PlannerOption> batch_options();

// "--static-dp" for "static_dp".
std::string flag_of(std::string_view name);

// An option's value as given: the command line's text (true for a flag given), or Python's value
// (bool, int, float or str; float|str options get a float as Python prints it).
using OptionValue = std::variant<bool, std::int64_t, double, std::string>;
using GivenOptions = std::map<std::string, OptionValue, std::less<>>;

// How errors name an option: as its flag ("--static-dp") or its keyword ("static_dp").
enum class OptionSpelling { kFlag, kKeyword };

// The planner's options with `given` applied to PlanOptions' defaults (block_sizes and the seed
// are left at theirs: they are the caller's). Every check of an option is here: its type and
// range, the strategies it applies to, the cluster's shape and the balance bounds. Throws
// InvalidInput (IoError for an unreadable cluster file) naming the option, spelled as `spelling`
// says, and its value; an unknown name is an InvalidInput too.
PlanOptions planner_options_from(const GivenOptions& given, OptionSpelling spelling);

// The batch's attention shape and block model as its options give them.
struct BatchOptions {
  AttentionShape shape;
  TokenCount block_size = 0;  // 0: automatic ("auto")
  std::int32_t head_block_size = 1;
};

// The batch's options with `given` applied to their defaults, every check of an option here (its
// type and range; kv heads dividing heads; a positive softmax scale). Whether the head block size
// divides the heads is the workload's check (the shape may come from elsewhere, e.g. arrays).
// Throws InvalidInput naming the option as `spelling` says, and its value; an unknown name is an
// InvalidInput too.
BatchOptions batch_options_from(const GivenOptions& given, OptionSpelling spelling);

}  // namespace dcp

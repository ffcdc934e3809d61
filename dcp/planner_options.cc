// SPDX-License-Identifier: Apache-2.0
// The planner's options, described once and read with their checks in one place.
#include "dcp/planner_options.h"

#include <charconv>
#include <cmath>
#include <optional>
#include <string>
#include <variant>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/cluster_file.h"
#include "dcp/model/cluster_presets.h"
#include "dcp/model/sequence_batch.h"

#include "dcp/planner/baselines/static_plans.h"
#include "dcp/planner/placement/hierarchical_placer.h"
#include "dcp/planner/schedule/kept_values.h"

namespace dcp {

std::string_view to_string(OptionType type) {
  switch (type) {
    case OptionType::kInt:
      return "int";
    case OptionType::kNumber:
      return "float";
    case OptionType::kText:
      return "str";
    case OptionType::kIntOrText:
      return "int|str";
    case OptionType::kNumberOrText:
      return "float|str";
    case OptionType::kFlag:
      return "bool";
  }
  return "?";
}

std::span<const PlannerOption> planner_options() {
  using enum OptionType;
  static constexpr PlannerOption kOptions[] = {
      {"cluster", kText, "PRESET|FILE", kDefaultCluster,
       "a100-p4de | h100-dgx | cpu-local | a cluster file (docs/cost_model.md)"},
      {"nodes", kInt, "N", "the cluster's", "nodes"},
      {"devices_per_node", kInt, "D", "the cluster's", "devices per node"},
      {"strategy", kText, "NAME", "dcp",
       "dcp | dcp-pure | ring | zigzag | ulysses | hybrid | te | loongtrain; dcp keeps the "
       "fastest of its own plan and the static plans under the simulator, dcp-pure always its "
       "own"},
      {"static_dp", kIntOrText, "N|auto", "1",
       "static strategies (and dcp's static candidates): data parallel degree, N groups of "
       "consecutive devices with the sequences spread over them by tokens; auto: the largest "
       "power of two N with N x the longest sequence <= the batch's tokens rounded up to a power "
       "of two, as the DCP paper ran its baselines"},
      {"loongtrain_window", kInt, "W", "0",
       "loongtrain: head groups per inner ring (a power of two dividing the ring; LoongTrain's "
       "sliding window); 0 = the head groups of a node"},
      {"stages", kInt, "S", "0", "dcp: fetch stages; 0 = chosen by the cost model"},
      {"compute_masked_tiles", kFlag, "", "",
       "static strategies: compute fully masked tiles too (TransformerEngine's path for "
       "arbitrary masks) instead of skipping them"},
      {"eps_compute", kNumber, "E", "0.3",
       "dcp: device compute <= (1 + E) x mean; with an automatic block size the two fastest "
       "partitions are also placed at 0.2 where E is larger, and kept if faster"},
      {"eps_memory", kNumber, "E", "0.2", "dcp: device memory <= (1 + E) x mean"},
      {"max_device_tokens", kInt, "N", "0",
       "dcp: the most tokens a device may hold, as a data-parallel pool's per-device limit; "
       "where below (1 + eps_memory) x mean it bounds dcp's own placements, where above it dcp "
       "also deals the sequences to the nodes up to it; 0 = no limit"},
      {"token_flops", kNumber, "F", "0",
       "dcp: FLOPs of the rest of a layer per token, forward and backward (projections, MLP), run "
       "by the device holding the token at the cluster's forward rate; dcp's search compares "
       "candidates by their step, each pass of a layer ending when its slowest device has run its "
       "attention and that; 0: attention alone"},
      {"keep_kv", kNumberOrText, "all|none|MIB", "all",
       "dcp: kv values received in the forward pass that a device keeps for the backward pass, "
       "instead of receiving them again: all, none, or up to MIB MiB per device and layer"},
      {"partial_dtype", kText, "fp32|bf16|fp16", "dcp: the storage dtype; static strategies: fp32",
       "the dtype partial o, dq, dk, dv travel in between devices (accumulated in fp32): fp32 "
       "or the storage dtype"},
  };
  return kOptions;
}

std::span<const PlannerOption> batch_options() {
  using enum OptionType;
  static constexpr PlannerOption kOptions[] = {
      {"heads", kInt, "N", "8", "q heads"},
      {"kv_heads", kInt, "N", "2", "kv heads; must divide the q heads"},
      {"head_dim", kInt, "N", "128", "head dimension"},
      {"dtype", kText, "T", "bf16", "storage dtype: bf16, fp16, fp32"},
      {"softmax_scale", kNumber, "X", "1/sqrt(head dim)", "softmax scale"},
      {"block_size", kIntOrText, "N|auto", "auto",
       "tokens per token block; auto: dcp plans at 1024, 2048 and 4096 (and, where one of at "
       "most 8 sequences holds half the tokens, or there are at most 4 under a dense mask such "
       "as causal, on the hybrid and loongtrain layouts) and keeps the fastest under the "
       "simulator (docs/block_model.md)"},
      {"head_block_size", kInt, "N", "1", "q heads per head block"},
  };
  return kOptions;
}

std::string flag_of(std::string_view name) {
  std::string flag = "--";
  for (const char c : name) flag.push_back(c == '_' ? '-' : c);
  return flag;
}

namespace {

// The shortest text that reads back as `value`.
std::string number_text(double value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

// Runs `body`; an InvalidInput or IoError thrown inside is rethrown, of the same kind, with
// `context` (the option, maybe with its value) before its message.
template <typename F>
auto naming(const std::string& context, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const InvalidInput& e) {
    throw InvalidInput(context + ": " + e.what());
  } catch (const IoError& e) {
    throw IoError(context + ": " + e.what());
  }
}

// The given options, read by name as their type says, every error naming the option as
// `spelling` says.
class Reader {
 public:
  // `table`: the options these are, named `what` in errors ("planner option").
  Reader(const GivenOptions& given, OptionSpelling spelling, std::span<const PlannerOption> table,
         std::string_view what)
      : given_(given), spelling_(spelling), table_(table) {
    for (const auto& [name, value] : given_) {
      if (find(name) == nullptr) {
        throw InvalidInput("unknown " + std::string(what) + " " + spelled(name));
      }
    }
  }

  std::string spelled(std::string_view name) const {
    return spelling_ == OptionSpelling::kFlag ? flag_of(name) : std::string(name);
  }
  bool has(std::string_view name) const { return given_.find(name) != given_.end(); }

  // The value as it was given: a text quoted, a number as it reads.
  std::string shown(std::string_view name) const {
    const OptionValue& value = at(name);
    if (const auto* text = std::get_if<std::string>(&value)) return quoted(*text);
    return plain(name);
  }
  std::string plain(std::string_view name) const {
    const OptionValue& value = at(name);
    if (const auto* text = std::get_if<std::string>(&value)) return *text;
    if (const auto* number = std::get_if<std::int64_t>(&value)) return std::to_string(*number);
    if (const auto* number = std::get_if<double>(&value)) return number_text(*number);
    return std::get<bool>(value) ? "true" : "false";
  }

  std::optional<std::string> text(std::string_view name) const {
    if (!has(name)) return std::nullopt;
    const OptionValue& value = at(name);
    if (std::holds_alternative<std::string>(value)) return std::get<std::string>(value);
    const OptionType type = find(name)->type;
    const bool numeric =
        std::holds_alternative<std::int64_t>(value) ||
        (std::holds_alternative<double>(value) && type == OptionType::kNumberOrText);
    if (!numeric || type == OptionType::kText) wrong_type(name);
    return plain(name);
  }

  std::optional<std::int64_t> integer(std::string_view name, std::int64_t low,
                                      std::int64_t high) const {
    if (!has(name)) return std::nullopt;
    const OptionValue& value = at(name);
    std::int64_t number = 0;
    if (const auto* text = std::get_if<std::string>(&value)) {
      number = parse_int(*text, spelled(name));
    } else if (const auto* given = std::get_if<std::int64_t>(&value)) {
      number = *given;
    } else {
      wrong_type(name);
    }
    if (number < low || number > high) {
      throw InvalidInput(spelled(name) + " " + shown(name) + ": must be in [" +
                         std::to_string(low) + ", " + std::to_string(high) + "]");
    }
    return number;
  }

  std::optional<double> number(std::string_view name) const {
    if (!has(name)) return std::nullopt;
    const OptionValue& value = at(name);
    if (const auto* text = std::get_if<std::string>(&value)) {
      return parse_double(*text, spelled(name));
    }
    double number = 0;
    if (const auto* given = std::get_if<double>(&value)) {
      number = *given;
    } else if (const auto* whole = std::get_if<std::int64_t>(&value)) {
      number = static_cast<double>(*whole);
    } else {
      wrong_type(name);
    }
    if (!std::isfinite(number)) {
      throw InvalidInput(spelled(name) + ": " + shown(name) + " is not a finite number");
    }
    return number;
  }

  bool flag(std::string_view name) const {
    if (!has(name)) return false;
    const auto* on = std::get_if<bool>(&at(name));
    if (on == nullptr) wrong_type(name);
    return *on;
  }

 private:
  const PlannerOption* find(std::string_view name) const {
    for (const PlannerOption& option : table_) {
      if (option.name == name) return &option;
    }
    return nullptr;
  }
  const OptionValue& at(std::string_view name) const { return given_.find(name)->second; }
  [[noreturn]] void wrong_type(std::string_view name) const {
    throw InvalidInput(spelled(name) + " " + shown(name) + ": takes a value of type " +
                       std::string(to_string(find(name)->type)));
  }

  const GivenOptions& given_;
  OptionSpelling spelling_;
  std::span<const PlannerOption> table_;
};

}  // namespace

PlanOptions planner_options_from(const GivenOptions& given, OptionSpelling spelling) {
  const Reader options(given, spelling, planner_options(), "planner option");
  const auto spelled = [&](std::string_view name) { return options.spelled(name); };
  PlanOptions plan;
  const std::string cluster = options.text("cluster").value_or(std::string(kDefaultCluster));
  plan.cluster =
      naming(spelled("cluster") + " " + quoted(cluster), [&] { return resolve_cluster(cluster); });
  ClusterShape& shape = plan.cluster.shape;
  shape.nodes =
      static_cast<std::int32_t>(options.integer("nodes", 1, 1 << 16).value_or(shape.nodes));
  shape.devices_per_node = static_cast<std::int32_t>(
      options.integer("devices_per_node", 1, 1 << 16).value_or(shape.devices_per_node));
  naming(spelled("nodes") + "/" + spelled("devices_per_node"), [&] { validate(shape); });
  if (const auto name = options.text("strategy")) {
    plan.strategy = naming(spelled("strategy"), [&] { return parse_strategy(*name); });
  }
  const std::string strategy(to_string(plan.strategy));
  plan.schedule.fetch_launches = static_cast<std::int32_t>(
      options.integer("stages", 0, 64).value_or(plan.schedule.fetch_launches));
  for (const char* name : {"stages", "eps_compute", "eps_memory", "max_device_tokens", "keep_kv"}) {
    if (options.has(name) && !is_dcp(plan.strategy)) {
      throw InvalidInput(spelled(name) + " applies to " + spelled("strategy") +
                         " dcp or dcp-pure; " + strategy + " has a fixed schedule");
    }
  }
  if (const auto degree = options.text("static_dp")) {
    if (plan.strategy == Strategy::kDcpPure) {
      throw InvalidInput(spelled("static_dp") +
                         " applies to static strategies and dcp's static candidates, not "
                         "dcp-pure");
    }
    plan.statics.data_parallel =
        naming(spelled("static_dp"), [&] { return parse_data_parallel(*degree); });
  }
  if (options.has("loongtrain_window")) {
    if (plan.strategy != Strategy::kLoongTrain) {
      throw InvalidInput(spelled("loongtrain_window") + " applies to " + spelled("strategy") +
                         " loongtrain, not " + strategy);
    }
    plan.statics.loongtrain_window =
        static_cast<std::int32_t>(*options.integer("loongtrain_window", 0, 1 << 16));
  }
  if (options.flag("compute_masked_tiles")) {
    if (is_dcp(plan.strategy)) {
      throw InvalidInput(spelled("compute_masked_tiles") +
                         " applies to static strategies; dcp never computes a fully masked tile");
    }
    plan.statics.masked_tiles = MaskedTiles::kCompute;
  }
  plan.placement.eps_compute = options.number("eps_compute").value_or(plan.placement.eps_compute);
  plan.placement.eps_memory = options.number("eps_memory").value_or(plan.placement.eps_memory);
  plan.placement.max_device_tokens =
      options.integer("max_device_tokens", 0, kMaxBatchTokens).value_or(0);
  plan.token_flops = options.number("token_flops").value_or(plan.token_flops);
  if (plan.token_flops < 0) {
    throw InvalidInput(spelled("token_flops") + " must be a number >= 0, got " +
                       options.plain("token_flops"));
  }
  naming(spelled("eps_compute") + "/" + spelled("eps_memory"), [&] {
    PlacementOptions check = plan.placement;
    check.cluster = shape;
    validate(check);
  });
  if (const auto keep = options.text("keep_kv")) {
    plan.kept_kv_budget = naming(spelled("keep_kv"), [&] { return parse_kept_kv_budget(*keep); });
  }
  if (const auto dtype = options.text("partial_dtype")) {
    plan.partial_dtype = naming(spelled("partial_dtype"), [&] { return parse_dtype(*dtype); });
  }
  return plan;
}

BatchOptions batch_options_from(const GivenOptions& given, OptionSpelling spelling) {
  const Reader options(given, spelling, batch_options(), "batch option");
  const auto spelled = [&](std::string_view name) { return options.spelled(name); };
  BatchOptions batch;
  AttentionShape& shape = batch.shape;
  shape.q_heads =
      static_cast<std::int32_t>(options.integer("heads", 1, kMaxHeads).value_or(shape.q_heads));
  shape.kv_heads =
      static_cast<std::int32_t>(options.integer("kv_heads", 1, kMaxHeads).value_or(shape.kv_heads));
  shape.head_dim = static_cast<std::int32_t>(
      options.integer("head_dim", 1, kMaxHeadDim).value_or(shape.head_dim));
  if (const auto dtype = options.text("dtype")) {
    shape.dtype = naming(spelled("dtype"), [&] { return parse_dtype(*dtype); });
  }
  if (const auto scale = options.number("softmax_scale")) {
    if (!(*scale > 0)) {
      throw InvalidInput(spelled("softmax_scale") + " " + options.shown("softmax_scale") +
                         ": must be > 0");
    }
    shape.softmax_scale = *scale;
  }
  naming(spelled("heads") + " " + std::to_string(shape.q_heads) + " " + spelled("kv_heads") + " " +
             std::to_string(shape.kv_heads),
         [&] { validate(shape); });
  if (const auto block = options.text("block_size"); block && *block != "auto") {
    batch.block_size = *options.integer("block_size", 1, kMaxBatchTokens);
  }
  batch.head_block_size = static_cast<std::int32_t>(
      options.integer("head_block_size", 1, kMaxHeads).value_or(batch.head_block_size));
  return batch;
}

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// Planning from Python: requests (batch, masks, shape, cluster, strategy), plans built here or in
// the background queue, plan files, verification, simulation, masks as interval arrays, packing.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"

#include "dcp/model/attention_kind.h"
#include "dcp/model/attention_shape.h"
#include "dcp/model/cluster_file.h"
#include "dcp/model/cluster_presets.h"
#include "dcp/model/mask_file.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/sequence_batch.h"
#include "dcp/model/sequence_mask.h"
#include "dcp/model/workload.h"

#include "dcp/data/batch_packing.h"

#include "dcp/plan_queue.h"
#include "dcp/plan_request.h"
#include "dcp/planner/model_plan_builder.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/planner_options.h"
#include "dcp/program/model_plan.h"
#include "dcp/program/plan_file/model_plan_file.h"
#include "dcp/program/plan_json.h"
#include "dcp/program/program.h"
#include "dcp/program/verifier/verifier.h"
#include "dcp/runtime/batch_tensors.h"
#include "dcp/runtime/local_layout.h"
#include "dcp/sim/model_simulation.h"
#include "dcp/sim/simulator.h"
#include "dcp/workload_builder.h"

#include "python/src/bindings.h"
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace nb = nanobind;

namespace dcp::python {
namespace {

using MaskArray = nb::ndarray<const std::int32_t, nb::ndim<3>, nb::c_contig, nb::device::cpu>;

NpyArray to_npy(const MaskArray& array) {
  NpyArray npy;
  npy.descr = "<i4";
  npy.shape = {static_cast<std::int64_t>(array.shape(0)), static_cast<std::int64_t>(array.shape(1)),
               static_cast<std::int64_t>(array.shape(2))};
  npy.data.resize(array.nbytes());
  std::memcpy(npy.data.data(), array.data(), array.nbytes());
  return npy;
}

// One sequence's mask from a spec string or an int32 (length, K, 2) interval array.
SequenceMask sequence_mask(nb::handle item, TokenCount length, const std::string& what) {
  if (nb::isinstance<nb::str>(item)) {
    const std::string text = nb::cast<std::string>(item);
    try {
      return build_sequence_mask(parse_mask_spec(text), length);
    } catch (const InvalidInput& error) {
      throw InvalidInput(what + " \"" + text + "\": " + error.what());
    }
  }
  MaskArray array;
  if (!nb::try_cast(item, array, false)) {
    throw InvalidInput(what + " is a " + std::string(nb::inst_name(item).c_str()) +
                       ", not a mask spec string or an int32 array of shape (tokens, K, 2)");
  }
  return masks_from_array(to_npy(array), SequenceBatch({length}), what).front();
}

// masks: one spec string for every sequence, one int32 (total tokens, K, 2) array for the
// batch (the --mask-file model), or a list with one spec or array per sequence.
std::vector<SequenceMask> batch_masks(nb::handle masks, const SequenceBatch& batch) {
  if (nb::isinstance<nb::str>(masks)) {
    const std::string text = nb::cast<std::string>(masks);
    try {
      return build_batch_mask(parse_mask_spec(text), batch);
    } catch (const InvalidInput& error) {
      throw InvalidInput("mask \"" + text + "\": " + error.what());
    }
  }
  if (nb::isinstance<nb::list>(masks) || nb::isinstance<nb::tuple>(masks)) {
    const auto items = nb::cast<nb::sequence>(masks);
    const auto count = static_cast<std::size_t>(nb::len(items));
    if (count != batch.lengths().size()) {
      throw InvalidInput("masks has " + std::to_string(count) + " entries for " +
                         std::to_string(batch.lengths().size()) + " sequences");
    }
    std::vector<SequenceMask> built;
    for (std::size_t i = 0; i < count; ++i) {
      built.push_back(
          sequence_mask(items[i], batch.lengths()[i], "mask of sequence " + std::to_string(i)));
    }
    return built;
  }
  MaskArray array;
  if (!nb::try_cast(masks, array, false)) {
    throw InvalidInput("mask is a " + std::string(nb::inst_name(masks).c_str()) +
                       ", not a mask spec string, an int32 array of shape (tokens, K, 2) or a "
                       "list of one per sequence");
  }
  return masks_from_array(to_npy(array), batch, "mask array");
}

// The attention kinds of a request: a plain mask (batch_masks's forms) is one kind of the default
// name and one layer; a dict {kind name: mask} names the kinds, each mask in batch_masks's forms,
// and `layers` (None or a dict {kind name: layer count}) gives their layer counts (1 each by
// default). The counts' range is validate_kinds's to check.
std::vector<AttentionKind> request_kinds(nb::handle masks, nb::handle layers,
                                         const SequenceBatch& batch) {
  if (!nb::isinstance<nb::dict>(masks)) {
    if (!layers.is_none()) {
      throw InvalidInput(
          "layers counts the layers of named attention kinds: give mask as a dict "
          "{kind name: mask}");
    }
    return {AttentionKind{std::string(kDefaultKindName), 1, batch_masks(masks, batch)}};
  }
  const auto named = nb::borrow<nb::dict>(masks);
  if (named.size() == 0) {
    throw InvalidInput("mask is an empty dict; give at least one attention kind {name: mask}");
  }
  const auto name_of = [](nb::handle key, const char* where) {
    if (!nb::isinstance<nb::str>(key)) {
      throw nb::type_error((std::string(where) + " has a key of type " +
                            nb::inst_name(key).c_str() + "; attention kinds are named by strings")
                               .c_str());
    }
    return nb::cast<std::string>(key);
  };
  std::vector<AttentionKind> kinds;
  for (auto [key, value] : named) {
    std::string name = name_of(key, "mask");
    validate_kind_name(name);
    try {
      kinds.push_back({name, 1, batch_masks(value, batch)});
    } catch (const InvalidInput& error) {
      throw InvalidInput("mask of attention kind '" + name + "': " + error.what());
    }
  }
  if (layers.is_none()) return kinds;
  if (!nb::isinstance<nb::dict>(layers)) {
    throw nb::type_error(("layers is a " + std::string(nb::inst_name(layers).c_str()) +
                          ", not a dict {kind name: layer count}")
                             .c_str());
  }
  for (auto [key, value] : nb::borrow<nb::dict>(layers)) {
    const std::string name = name_of(key, "layers");
    auto kind = std::find_if(kinds.begin(), kinds.end(),
                             [&](const AttentionKind& k) { return k.name == name; });
    if (kind == kinds.end()) {
      std::string listed;
      for (const AttentionKind& k : kinds) listed += (listed.empty() ? "" : ", ") + k.name;
      throw InvalidInput("layers names attention kind '" + name +
                         "', which mask does not give (its kinds are " + listed + ")");
    }
    std::int64_t count = 0;
    if (nb::isinstance<nb::bool_>(value) || !nb::try_cast(value, count)) {
      throw nb::type_error(("layers of attention kind '" + name + "' is a " +
                            std::string(nb::inst_name(value).c_str()) + ", not an int")
                               .c_str());
    }
    if (count < 1 || count > kMaxKindLayers) {
      throw InvalidInput("layers of attention kind '" + name + "': " + std::to_string(count) +
                         "; a kind has 1 to " + std::to_string(kMaxKindLayers) + " layers");
    }
    kind->layers = static_cast<std::int32_t>(count);
  }
  return kinds;
}

// The request's options given by name, as dcp.plan(**options) and DCPDataloader pass them: the
// planner's (planner_options(), read and checked by planner_options_from, as the command line's
// flags are), the attention shape's, the block model's and the seed. An option not given, or
// given as None, keeps PlanRequest's default: the defaults live in the C++ structs alone.
class NamedOptions {
 public:
  explicit NamedOptions(nb::dict options) {
    for (auto [key, value] : options) {
      if (!value.is_none()) given_.emplace(nb::cast<std::string>(key), value);
    }
  }

  template <typename T>
  std::optional<T> get(const std::string& name) {
    asked_.push_back(name);
    const auto it = given_.find(name);
    if (it == given_.end()) return std::nullopt;
    T value;
    if (!nb::try_cast(it->second, value)) {
      throw nb::type_error((name + " is a " + std::string(nb::inst_name(it->second).c_str()) +
                            ", which this option does not take")
                               .c_str());
    }
    given_.erase(it);
    return value;
  }

  // An option of the planner's table, its Python value as the table's type takes it (a float
  // for a float|str option as Python prints it, the command line's text); nullopt when not given.
  // Throws TypeError for a value of another type.
  std::optional<OptionValue> option(const PlannerOption& option) {
    const std::string name(option.name);
    asked_.push_back(name);
    const auto it = given_.find(name);
    if (it == given_.end()) return std::nullopt;
    const nb::handle value = it->second;
    const bool is_bool = nb::isinstance<nb::bool_>(value);
    const bool is_str = nb::isinstance<nb::str>(value);
    std::optional<OptionValue> read;
    std::int64_t whole = 0;
    double number = 0;
    switch (option.type) {
      case OptionType::kFlag:
        if (is_bool) read = nb::cast<bool>(value);
        break;
      case OptionType::kInt:
        if (!is_bool && nb::try_cast(value, whole)) read = whole;
        break;
      case OptionType::kNumber:
        if (!is_bool && nb::try_cast(value, number)) read = number;
        break;
      case OptionType::kText:
        if (is_str) read = nb::cast<std::string>(value);
        break;
      case OptionType::kIntOrText:
        if (is_str) {
          read = nb::cast<std::string>(value);
        } else if (!is_bool && nb::try_cast(value, whole)) {
          read = whole;
        }
        break;
      case OptionType::kNumberOrText:
        if (is_str) {
          read = nb::cast<std::string>(value);
        } else if (!is_bool && nb::try_cast(value, number)) {
          read = std::string(nb::str(value).c_str());
        }
        break;
    }
    if (!read) {
      throw nb::type_error((name + " is a " + std::string(nb::inst_name(value).c_str()) +
                            ", which this option does not take (it takes " +
                            std::string(to_string(option.type)) + ")")
                               .c_str());
    }
    given_.erase(it);
    return read;
  }

  // Refuses the options no get() asked for, naming them and the ones asked for.
  void expect_all_used() const {
    if (given_.empty()) return;
    std::string names, all;
    for (const auto& [name, value] : given_) names += (names.empty() ? "" : ", ") + name;
    for (const std::string& name : asked_) all += (all.empty() ? "" : ", ") + name;
    throw nb::type_error(
        ("unknown planner option(s) " + names + "; the options are " + all).c_str());
  }

 private:
  std::map<std::string, nb::handle> given_;
  std::vector<std::string> asked_;  // every name get() was called with, in order
};

PlanRequest make_request(const std::vector<TokenCount>& seqlens, nb::handle masks,
                         nb::handle layers, nb::dict option_dict) {
  NamedOptions options(option_dict);
  PlanRequest request;
  GivenOptions batch_given;
  for (const PlannerOption& option : batch_options()) {
    if (auto value = options.option(option)) batch_given.emplace(option.name, std::move(*value));
  }
  const BatchOptions batch = batch_options_from(batch_given, OptionSpelling::kKeyword);
  request.shape = batch.shape;
  if (seqlens.empty()) {
    throw InvalidInput("seqlens is empty: a batch needs at least one sequence");
  }
  for (std::size_t i = 0; i < seqlens.size(); ++i) {
    if (seqlens[i] < 1) {
      throw InvalidInput("seqlens[" + std::to_string(i) + "] = " + std::to_string(seqlens[i]) +
                         " is not a positive length");
    }
  }
  request.lengths = seqlens;
  request.kinds = request_kinds(masks, layers, SequenceBatch(seqlens));
  request.block_size = batch.block_size;
  request.head_block_size = batch.head_block_size;
  GivenOptions given;
  for (const PlannerOption& option : planner_options()) {
    if (auto value = options.option(option)) given.emplace(option.name, std::move(*value));
  }
  request.plan = planner_options_from(given, OptionSpelling::kKeyword);
  request.plan.seed = options.get<std::uint64_t>("seed").value_or(request.plan.seed);
  options.expect_all_used();
  return request;
}

nb::dict pass_summary(const PassSummary& summary) {
  nb::dict d;
  d["instructions"] = summary.instructions;
  d["work_units"] = summary.work_units;
  d["pairs"] = summary.pairs;
  d["messages"] = summary.messages;
  d["bytes_sent"] = summary.bytes_sent;
  d["outputs_stored"] = summary.outputs_stored;
  return d;
}

nb::dict pass_simulation(const sim::PassSimulation& pass) {
  nb::dict d;
  d["seconds"] = pass.seconds;
  d["critical_compute_seconds"] = pass.critical_compute_seconds;
  d["critical_transfer_seconds"] = pass.critical_transfer_seconds;
  nb::list compute, wait;
  for (const sim::DeviceTimeline& device : pass.devices) {
    compute.append(device.compute_seconds);
    wait.append(device.wait_seconds);
  }
  d["device_compute_seconds"] = compute;
  d["device_wait_seconds"] = wait;
  return d;
}

nb::ndarray<nb::numpy, std::int64_t> to_numpy(std::vector<std::int64_t> values) {
  auto* owned = new std::vector<std::int64_t>(std::move(values));
  nb::capsule owner(owned,
                    [](void* p) noexcept { delete static_cast<std::vector<std::int64_t>*>(p); });
  return nb::ndarray<nb::numpy, std::int64_t>(owned->data(), {owned->size()}, owner);
}

const Program& rank_program(const Plan& plan, std::int32_t rank) {
  if (rank < 0 || rank >= plan.header.cluster.devices()) {
    throw InvalidInput("rank " + std::to_string(rank) + " is not a device of this plan (0.." +
                       std::to_string(plan.header.cluster.devices() - 1) + ")");
  }
  return plan.forward[static_cast<std::size_t>(rank)];
}

PlanHandle loaded(ModelPlan plan) {
  return PlanHandle{nullptr, std::make_shared<const ModelPlan>(std::move(plan)), std::nullopt};
}

nb::dict verify_entry(const VerifyReport& report) {
  nb::dict d;
  d["ok"] = report.ok;
  d["message"] = describe(report);
  d["forward"] = pass_summary(report.forward);
  d["backward"] = pass_summary(report.backward);
  return d;
}

// The block model's figures of one kind's workload.
void add_work_figures(nb::dict& d, const Workload& w) {
  d["tiles"] = w.tile_count();
  d["work_units"] = w.work_unit_count();
  PairCount pairs = 0;
  for (const Tile& tile : w.tiles()) pairs += tile.pairs;
  d["pairs"] = pairs;
}

// A table of dcp/planner_options.h as Python reads it.
nb::list described(std::span<const PlannerOption> table) {
  nb::list described;
  for (const PlannerOption& option : table) {
    nb::dict d;
    d["name"] = std::string(option.name);
    d["type"] = std::string(to_string(option.type));
    d["default"] = std::string(option.default_text);
    d["help"] = std::string(option.help);
    d["flag"] = flag_of(option.name);
    d["value_name"] = std::string(option.value_name);
    described.append(d);
  }
  return described;
}

// The block model's figures of a request's batch (dcp.workload): its first kind's, and every
// kind's under "kinds" when there are several.
nb::dict workload_summary(const PlanRequest& request) {
  WorkloadOptions options;
  options.block_size = request.block_size;
  options.head_block_size = request.head_block_size;
  options.auto_block.devices = request.plan.cluster.shape.devices();
  const SequenceBatch batch(request.lengths);
  validate(request.shape);
  const BuiltKinds built = make_kind_workloads(request.shape, batch, request.kinds, options);
  const Workload& w = built.kinds.front().workload;
  nb::dict d;
  d["tokens"] = batch.total_tokens();
  d["sequences"] = batch.lengths().size();
  d["block_size"] =
      built.block_size_choice ? built.block_size_choice->block_size : request.block_size;
  d["token_blocks"] = w.blocks().block_count();
  if (built.single()) {
    add_work_figures(d, w);
    return d;
  }
  nb::dict kinds;
  for (const KindWorkload& kind : built.kinds) {
    nb::dict entry;
    entry["layers"] = kind.layers;
    add_work_figures(entry, kind.workload);
    kinds[nb::str(kind.name.c_str())] = entry;
  }
  d["kinds"] = kinds;
  return d;
}

// A mask of one sequence as an int32 (length, K, 2) array of each row's key intervals, K the
// most intervals of a row, rows with fewer padded with empty [0, 0) intervals.
nb::ndarray<nb::numpy, std::int32_t> mask_interval_array(nb::handle mask, TokenCount length) {
  if (length < 1) {
    throw InvalidInput("length " + std::to_string(length) + " is not positive");
  }
  const std::vector<SequenceMask> masks = {sequence_mask(mask, length, "mask")};
  std::vector<Interval> row;
  std::size_t k = 1;
  for (TokenCount i = 0; i < length; ++i) {
    masks[0].row_intervals(i, row);
    k = std::max(k, row.size());
  }
  auto* values = new std::vector<std::int32_t>(static_cast<std::size_t>(length) * k * 2, 0);
  for (TokenCount i = 0; i < length; ++i) {
    masks[0].row_intervals(i, row);
    for (std::size_t j = 0; j < row.size(); ++j) {
      const std::size_t at = (static_cast<std::size_t>(i) * k + j) * 2;
      (*values)[at] = static_cast<std::int32_t>(row[j].begin);
      (*values)[at + 1] = static_cast<std::int32_t>(row[j].end);
    }
  }
  nb::capsule owner(values,
                    [](void* p) noexcept { delete static_cast<std::vector<std::int32_t>*>(p); });
  return nb::ndarray<nb::numpy, std::int32_t>(values->data(),
                                              {static_cast<std::size_t>(length), k, 2}, owner);
}

// dcp's packing of samples of `lengths` into batches of at most tokens_per_batch tokens (their
// indices), refusing a sample longer than that, naming it.
std::vector<std::vector<std::size_t>> packed_indices(const std::vector<TokenCount>& lengths,
                                                     TokenCount tokens_per_batch,
                                                     std::uint64_t seed, bool shuffle) {
  PackingOptions options;
  options.tokens_per_batch = tokens_per_batch;
  options.min_fill = 1.0 / static_cast<double>(std::max<TokenCount>(tokens_per_batch, 1));
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] > tokens_per_batch) {
      throw InvalidInput("sample " + std::to_string(i) + " has " + std::to_string(lengths[i]) +
                         " tokens, more than tokens_per_batch " + std::to_string(tokens_per_batch));
    }
  }
  return pack_batch_indices(lengths, options, seed, shuffle);
}

// Plan.verify(): the model plan's report, its first kind's passes, every kind's under "kinds".
nb::dict verify_handle(const PlanHandle& h) {
  ModelPlan storage;
  const ModelPlan& model = h.held(storage);
  ModelVerifyReport report;
  {
    nb::gil_scoped_release release;
    report = verify(model);
  }
  const VerifyReport& first = report.kinds.front().report;
  nb::dict d;
  d["ok"] = report.ok;
  d["message"] = model.is_single_plan() ? describe(first) : describe(report);
  d["forward"] = pass_summary(first.forward);
  d["backward"] = pass_summary(first.backward);
  nb::dict kinds;
  for (const KindVerifyReport& kind : report.kinds) {
    nb::dict entry = verify_entry(kind.report);
    entry["layers"] = kind.layers;
    kinds[nb::str(kind.name.c_str())] = entry;
  }
  d["kinds"] = kinds;
  return d;
}

// Plan.simulate(cluster): the first kind's passes, the seconds (a plan of one mask: its two
// passes; with kinds, the training step) and every kind's under "kinds".
nb::dict simulate_handle(const PlanHandle& h, const std::string& cluster) {
  ModelPlan storage;
  const ModelPlan& model = h.held(storage);
  sim::ModelSimulation simulation;
  {
    nb::gil_scoped_release release;
    simulation =
        sim::simulate(model, sim::with_shape(resolve_cluster(cluster), h.plan().header.cluster));
  }
  const sim::PlanSimulation& first = simulation.kinds.front().passes;
  nb::dict d;
  d["forward"] = pass_simulation(first.forward);
  d["backward"] = pass_simulation(first.backward);
  d["seconds"] = model.is_single_plan() ? first.seconds() : simulation.step_seconds;
  d["step_seconds"] = simulation.step_seconds;
  nb::dict kinds;
  for (const sim::KindSimulation& kind : simulation.kinds) {
    nb::dict entry;
    entry["layers"] = kind.layers;
    entry["forward"] = pass_simulation(kind.passes.forward);
    entry["backward"] = pass_simulation(kind.passes.backward);
    entry["seconds"] = kind.passes.seconds();
    kinds[nb::str(kind.name.c_str())] = entry;
  }
  d["kinds"] = kinds;
  return d;
}

// Plan.to_json(): a plan of one mask as its plan's JSON; of kinds, each kind's name, layer count
// and plan.
std::string handle_json(const PlanHandle& h) {
  ModelPlan storage;
  const ModelPlan& model = h.held(storage);
  if (model.is_single_plan()) return plan_to_json(model.kinds.front().plan);
  JsonWriter json;
  json.begin_object();
  json.key("kinds").begin_array();
  for (const KindPlan& kind : model.kinds) {
    json.begin_object();
    json.field("name", std::string_view(kind.name));
    json.field("layers", std::int64_t{kind.layers});
    json.key("plan").raw(plan_to_json(kind.plan));
    json.end_object();
  }
  json.end_array();
  json.end_object();
  return json.str();
}

using PlanHandleClass = nb::class_<PlanHandle>;

// Requests: their type, the planner's options, making one from Python's names and planning it.
void bind_requests(nb::module_& m) {
  nb::class_<PlanRequest>(m, "PlanRequest",
                          "A batch with its attention kinds, attention shape, cluster and planner "
                          "options");
  m.attr("DEFAULT_CLUSTER") = std::string(kDefaultCluster);
  m.def(
      "batch_options", [] { return described(batch_options()); },
      "The batch's options (dcp/planner_options.h), described as planner_options() describes "
      "the planner's.");
  m.def(
      "planner_options", [] { return described(planner_options()); },
      "The planner's options (dcp/planner_options.h), each a dict: name (the keyword), type, "
      "default (as text; empty: off), help, flag (the command line's) and value_name.");
  m.def("make_request", &make_request, nb::arg("seqlens"), nb::arg("masks"),
        nb::arg("layers").none(), nb::arg("options"),
        "A plan request: the batch, its masks (a dict: named attention kinds, with `layers` their "
        "layer counts) and the planner options given by name (None or absent: the planner's "
        "default).");
  m.def(
      "plan_request",
      [](const PlanRequest& request) {
        auto built = std::make_shared<const BuiltModelPlan>(plan_request(request));
        return PlanHandle{std::move(built), nullptr, std::nullopt};
      },
      nb::call_guard<nb::gil_scoped_release>());
}

// Batches without a plan: the block model's figures, a mask's intervals, packing.
void bind_batches(nb::module_& m) {
  m.def("workload_summary", &workload_summary);
  m.def("mask_intervals", &mask_interval_array, nb::arg("mask"), nb::arg("length"));
  m.def("pack_batch_indices", &packed_indices, nb::arg("lengths"), nb::arg("tokens_per_batch"),
        nb::arg("seed"), nb::arg("shuffle"));
}

// A plan's header: its strategy, cluster, attention shape, sizes and planning time.
void bind_plan_header(PlanHandleClass& handle) {
  handle.def_prop_ro("strategy", [](const PlanHandle& h) { return h.plan().header.strategy; })
      .def_prop_ro("seed", [](const PlanHandle& h) { return h.plan().header.seed; })
      .def_prop_ro("nodes", [](const PlanHandle& h) { return h.plan().header.cluster.nodes; })
      .def_prop_ro("devices_per_node",
                   [](const PlanHandle& h) { return h.plan().header.cluster.devices_per_node; })
      .def_prop_ro("world_size",
                   [](const PlanHandle& h) { return h.plan().header.cluster.devices(); })
      .def_prop_ro("q_heads", [](const PlanHandle& h) { return h.plan().header.q_heads; })
      .def_prop_ro("kv_heads", [](const PlanHandle& h) { return h.plan().header.kv_heads; })
      .def_prop_ro("head_dim", [](const PlanHandle& h) { return h.plan().header.head_dim; })
      .def_prop_ro("head_block_size",
                   [](const PlanHandle& h) { return h.plan().header.head_block_size; })
      .def_prop_ro("kv_heads_per_block",
                   [](const PlanHandle& h) { return h.plan().header.kv_heads_per_block; })
      .def_prop_ro(
          "dtype",
          [](const PlanHandle& h) { return std::string(to_string(h.plan().header.dtype)); })
      .def_prop_ro(
          "partial_dtype",
          [](const PlanHandle& h) { return std::string(to_string(h.plan().header.partial_dtype)); })
      .def_prop_ro("softmax_scale",
                   [](const PlanHandle& h) { return h.plan().header.softmax_scale; })
      .def_prop_ro("total_tokens", [](const PlanHandle& h) { return h.plan().header.total_tokens; })
      .def_prop_ro("token_blocks", [](const PlanHandle& h) { return h.plan().header.token_blocks; })
      .def_prop_ro("work_units", [](const PlanHandle& h) { return h.plan().header.work_units; })
      .def_prop_ro("seqlens",
                   [](const PlanHandle& h) { return runtime::plan_sequence_lengths(h.plan()); })
      .def_prop_ro("plan_ms",
                   [](const PlanHandle& h) { return h.built ? h.built->timings.total_ms : 0.0; });
}

// A rank's local tokens: how many, and each one's position in the packed batch.
void bind_local_layout(PlanHandleClass& handle) {
  handle
      .def("local_tokens",
           [](const PlanHandle& h, std::int32_t rank) {
             const Plan& plan = h.plan();
             return runtime::local_layout(plan.header, rank_program(plan, rank)).tokens();
           })
      .def("local_token_positions", [](const PlanHandle& h, std::int32_t rank) {
        const Plan& plan = h.plan();
        const runtime::LocalLayout layout =
            runtime::local_layout(plan.header, rank_program(plan, rank));
        const SequenceBatch batch(runtime::plan_sequence_lengths(plan));
        return to_numpy(
            runtime::local_token_positions(layout, batch.offsets(), batch.total_tokens()));
      });
}

// A plan's attention kinds: their names, layer counts, and the handle of one.
void bind_plan_kinds(PlanHandleClass& handle) {
  handle
      .def_prop_ro("kinds",
                   [](const PlanHandle& h) {
                     std::vector<std::string> names;
                     ModelPlan storage;
                     for (const KindPlan& kind : h.held(storage).kinds) names.push_back(kind.name);
                     return names;
                   })
      .def_prop_ro("layers",
                   [](const PlanHandle& h) {
                     nb::dict d;
                     ModelPlan storage;
                     for (const KindPlan& kind : h.held(storage).kinds) {
                       d[nb::str(kind.name.c_str())] = kind.layers;
                     }
                     return d;
                   })
      .def(
          "kind",
          [](const PlanHandle& h, const std::string& name) {
            ModelPlan storage;
            kind_index(h.held(storage).names(), name);  // refuses a kind the handle lacks
            PlanHandle kind = h;
            kind.kind = kind_index(h.model().names(), name);
            return kind;
          },
          nb::arg("name"));
}

// What a plan is checked with: the verifier and the simulator.
void bind_plan_checks(PlanHandleClass& handle) {
  handle.def("verify", &verify_handle).def("simulate", &simulate_handle, nb::arg("cluster"));
}

// A plan as bytes, a file and JSON, its equality, and plans read from files and bytes.
void bind_plan_files(nb::module_& m, PlanHandleClass& handle) {
  handle
      .def("to_bytes",
           [](const PlanHandle& h) {
             ModelPlan storage;
             const std::string bytes = serialize_model_plan(h.held(storage));
             return nb::bytes(bytes.data(), bytes.size());
           })
      .def("save",
           [](const PlanHandle& h, const std::string& path) {
             ModelPlan storage;
             write_model_plan_file(path, h.held(storage));
           })
      .def("to_json", &handle_json)
      .def("__eq__", [](const PlanHandle& a, const PlanHandle& b) {
        ModelPlan a_storage, b_storage;
        return a.held(a_storage) == b.held(b_storage);
      });
  m.def("load_plan", [](const std::string& path) { return loaded(read_model_plan_file(path)); });
  m.def("plan_from_bytes", [](nb::bytes bytes) {
    return loaded(parse_model_plan(std::string_view(bytes.c_str(), bytes.size()), "plan bytes"));
  });
}

// Plans made in the background: the queue of requests, planned on its threads in order.
void bind_plan_queue(nb::module_& m) {
  nb::class_<PlanQueue>(m, "PlanQueue")
      .def(nb::init<std::int32_t>(), nb::arg("threads"))
      .def("submit", [](PlanQueue& q, const PlanRequest& request) { return q.submit(request); })
      .def("take",
           [](PlanQueue& q, PlanQueue::Ticket ticket) {
             std::shared_ptr<const BuiltModelPlan> built;
             {
               nb::gil_scoped_release release;
               built = q.take(ticket);
             }
             return PlanHandle{std::move(built), nullptr, std::nullopt};
           })
      .def("close", &PlanQueue::close, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace

void bind_planning(nb::module_& m) {
  bind_requests(m);
  bind_batches(m);
  PlanHandleClass handle(m, "PlanHandle");
  bind_plan_header(handle);
  bind_local_layout(handle);
  bind_plan_kinds(handle);
  bind_plan_checks(handle);
  bind_plan_files(m, handle);
  bind_plan_queue(m);
}

}  // namespace dcp::python

// SPDX-License-Identifier: Apache-2.0
// Flags that describe one batch's attention workload.
#include "apps/cli/workload_flags.h"

#include <fstream>
#include <sstream>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/parse.h"

#include "dcp/model/attention_kind.h"
#include "dcp/model/attention_shape.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/sequence_batch.h"

#include "dcp/data/batch_packing.h"
#include "dcp/data/length_distribution.h"

#include "dcp/planner_options.h"
#include "dcp/workload_builder.h"

#include "apps/cli/plan_flags.h"

namespace dcp::cli {

namespace {

// The flags that give the batch's lengths.
const std::vector<FlagSpec>& source_flags() {
  static const std::vector<FlagSpec> flags = {
      {"--seqlens", "L1,L2,...", "sequence lengths of the batch"},
      {"--seqlens-file", "FILE", "sequence lengths in a file (comma or whitespace separated)"},
      {"--dist", "NAME", "sample one batch: ldc, longalign, prolong, magi, wlb"},
      {"--tokens", "N", "token budget of a sampled batch [131072]"},
      {"--length-scale", "X", "multiply sampled lengths by X [1]"},
      {"--seed", "S", "seed of the sampled batch [0]"},
  };
  return flags;
}

// The flags of the batch's masks and attention kinds, and the automatic block size's devices.
const std::vector<FlagSpec>& mask_flags() {
  static const std::vector<FlagSpec> flags = {
      {"--devices", "N", "devices the automatic block size plans for [8]"},
      {"--mask",
       "SPEC|KIND=SPEC",
       "causal | full | sliding_window:window=W | lambda:sink=S,window=W | "
       "shared_question:question=F,answers=N | causal_blockwise:block=C,local=K | "
       "chunked:chunk=C [causal]; KIND=SPEC, given once per kind, names an attention kind of a "
       "model whose layers attend differently (e.g. --mask global=causal --mask "
       "local=sliding_window:window=4096)",
       {},
       true},
      {"--layers", "KIND=N,...",
       "layers of each named attention kind [1 each]; the plan balances every kind's compute and "
       "prices its bytes by its layers"},
      {"--mask-file", "FILE", "int32 .npy (total tokens, K, 2) of per-row key intervals"},
  };
  return flags;
}

// The batch's options (batch_options()) among the flags given, read and checked by
// batch_options_from; every error a UsageError naming its flag.
BatchOptions batch_options_of(const Args& args) {
  GivenOptions given;
  for (const PlannerOption& option : batch_options()) {
    if (const auto value = args.get(flag_of(option.name))) given.emplace(option.name, *value);
  }
  try {
    return batch_options_from(given, OptionSpelling::kFlag);
  } catch (const InvalidInput& e) {
    throw UsageError(e.what());
  }
}

}  // namespace

const std::vector<FlagSpec>& workload_flags() {
  static const std::vector<FlagSpec> flags = [] {
    std::vector<FlagSpec> all = source_flags();
    for (const PlannerOption& option : batch_options()) all.push_back(flag_spec(option));
    all.insert(all.end(), mask_flags().begin(), mask_flags().end());
    return all;
  }();
  return flags;
}

std::vector<TokenCount> read_lengths_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError(path + ": cannot open for reading");
  std::stringstream text;
  text << in.rdbuf();
  std::string content = text.str();
  for (char& c : content) {
    if (c == ',' || c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  std::vector<TokenCount> lengths;
  for (const std::string_view item : split(content, ' ')) {
    if (item.empty()) continue;
    lengths.push_back(parse_int(item, path + ": length"));
  }
  if (lengths.empty()) throw InvalidInput(path + ": holds no lengths");
  return lengths;
}

SequenceBatch batch_from_flags(const Args& args) {
  const int sources =
      int{args.has("--seqlens")} + int{args.has("--seqlens-file")} + int{args.has("--dist")};
  if (sources != 1) {
    throw UsageError("give the batch with exactly one of --seqlens, --seqlens-file, --dist");
  }
  if (const auto text = args.get("--seqlens")) {
    return with_flag("--seqlens " + quoted(*text),
                     [&] { return SequenceBatch(parse_int_list(*text, "length")); });
  }
  if (const auto path = args.get("--seqlens-file")) {
    return with_flag("--seqlens-file", [&] { return SequenceBatch(read_lengths_file(*path)); });
  }
  const std::string name = *args.get("--dist");
  const auto kind = with_flag("--dist", [&] { return parse_length_distribution(name); });
  PackingOptions packing;
  packing.tokens_per_batch = args.get_int("--tokens", packing.tokens_per_batch, 1, kMaxBatchTokens);
  packing.scale = args.get_double("--length-scale", 1.0);
  const auto seed = static_cast<std::uint64_t>(args.get_int("--seed", 0, 0));
  with_flag("--length-scale/--tokens", [&] { validate(packing); });
  const auto batches =
      with_flag("--dist " + name, [&] { return sample_batches(kind, 1, packing, seed); });
  return SequenceBatch(batches.front());
}

void dtype_and_scale_from_flags(const Args& args, AttentionShape& shape) {
  const BatchOptions batch = batch_options_of(args);
  if (args.has("--dtype")) shape.dtype = batch.shape.dtype;
  if (args.has("--softmax-scale")) shape.softmax_scale = batch.shape.softmax_scale;
}

AttentionShape shape_from_flags(const Args& args) { return batch_options_of(args).shape; }

namespace {

// One unnamed --mask or --mask-file (neither: the default mask).
MaskSource mask_from_flags(const Args& args) {
  if (args.has("--mask") && args.has("--mask-file")) {
    throw UsageError("give at most one of --mask and --mask-file");
  }
  MaskSource source;
  if (const auto file = args.get("--mask-file")) {
    source.file = *file;
  } else if (const auto spec = args.get("--mask")) {
    source.spec = with_flag("--mask", [&] { return parse_mask_spec(*spec); });
  }
  return source;
}

}  // namespace

std::vector<std::pair<std::string, MaskSource>> kind_masks_from_flags(const Args& args) {
  const std::vector<std::string> given = args.get_all("--mask");
  std::vector<std::pair<std::string, MaskSource>> kinds;
  for (const std::string& text : given) {
    if (!is_kind_assignment(text)) continue;
    if (args.has("--mask-file"))
      throw UsageError("give --mask-file or named --mask kinds, not both");
    // Named, not a structured binding: the lambdas below capture them (C++20 allows capturing
    // bindings; Clang 14 does not).
    auto assignment = with_flag("--mask " + quoted(text),
                                [&] { return split_kind_assignment(text, "a kind's mask"); });
    std::string name = std::move(assignment.first);
    const std::string spec = std::move(assignment.second);
    MaskSource source;
    source.spec = with_flag("--mask " + quoted(text), [&] { return parse_mask_spec(spec); });
    for (const auto& [known, unused] : kinds) {
      if (known == name) throw UsageError("--mask: attention kind '" + name + "' given twice");
    }
    kinds.emplace_back(std::move(name), std::move(source));
  }
  if (!kinds.empty() && kinds.size() != given.size()) {
    throw UsageError("--mask: name every kind (KIND=SPEC) or give one unnamed mask");
  }
  if (kinds.empty()) {
    if (given.size() > 1) {
      throw UsageError("--mask is given " + std::to_string(given.size()) +
                       " times; name each attention kind (KIND=SPEC)");
    }
    if (args.has("--layers")) {
      throw UsageError("--layers counts the layers of named attention kinds (--mask KIND=SPEC)");
    }
    kinds.emplace_back(std::string(kDefaultKindName), mask_from_flags(args));
  }
  return kinds;
}

std::vector<std::int32_t> kind_layers_from_flags(
    const Args& args, const std::vector<std::pair<std::string, MaskSource>>& kinds) {
  std::vector<std::int32_t> layers(kinds.size(), 1);
  std::vector<bool> seen(kinds.size(), false);
  if (!args.has("--layers")) return layers;
  const std::string given = *args.get("--layers");
  for (const std::string_view item : split(given, ',')) {
    const std::string text(trim(item));
    auto assignment = with_flag("--layers " + quoted(text),
                                [&] { return split_kind_assignment(text, "a kind's layers"); });
    const std::string name = std::move(assignment.first);
    const std::string count = std::move(assignment.second);
    std::size_t index = kinds.size();
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      if (kinds[k].first == name) index = k;
    }
    if (index == kinds.size()) {
      std::string listed;
      for (const auto& [known, unused] : kinds) listed += (listed.empty() ? "" : ", ") + known;
      throw UsageError("--layers " + quoted(text) + ": no attention kind '" + name +
                       "' (the kinds are " + listed + ")");
    }
    if (seen[index]) throw UsageError("--layers: kind '" + name + "' given twice");
    seen[index] = true;
    const std::int64_t value = with_flag("--layers " + quoted(text), [&] {
      return parse_int(count, "layers of kind '" + name + "'");
    });
    if (value < 1 || value > kMaxKindLayers) {
      throw UsageError("--layers " + quoted(text) + ": " + std::to_string(value) +
                       " layers; a kind has 1 to " + std::to_string(kMaxKindLayers));
    }
    layers[index] = static_cast<std::int32_t>(value);
  }
  return layers;
}

BuiltKinds kinds_from_flags(const Args& args, std::int32_t devices) {
  return kinds_from_flags(args, shape_from_flags(args), devices);
}

BuiltKinds kinds_from_flags(const Args& args, const AttentionShape& shape, std::int32_t devices) {
  SequenceBatch batch = batch_from_flags(args);
  const auto masks = kind_masks_from_flags(args);
  const std::vector<std::int32_t> layers = kind_layers_from_flags(args, masks);
  const WorkloadOptions options = workload_options_from_flags(args, devices);
  with_flag("--head-block-size " + std::to_string(options.head_block_size),
            [&] { HeadBlocking(shape, options.head_block_size); });
  std::vector<AttentionKind> kinds;
  for (std::size_t k = 0; k < masks.size(); ++k) {
    const MaskSource& mask = masks[k].second;
    kinds.push_back({masks[k].first, layers[k],
                     with_flag(mask.file.empty() ? "--mask" : "--mask-file",
                               [&] { return build_masks(mask, batch); })});
  }
  return with_flag("--block-size " + args.get_or("--block-size", "auto"),
                   [&] { return make_kind_workloads(shape, batch, std::move(kinds), options); });
}

bool is_kind_assignment(std::string_view text) {
  const std::size_t eq = text.find('=');
  return eq != std::string_view::npos && text.substr(0, eq).find(':') == std::string_view::npos;
}

WorkloadOptions workload_options_from_flags(const Args& args, std::int32_t devices) {
  const BatchOptions batch = batch_options_of(args);
  WorkloadOptions options;
  if (batch.block_size > 0) options.block_size = batch.block_size;
  options.head_block_size = batch.head_block_size;
  options.auto_block.devices =
      static_cast<std::int32_t>(args.get_int("--devices", devices, 1, 1 << 16));
  return options;
}

}  // namespace dcp::cli

// SPDX-License-Identifier: Apache-2.0
// Flags that describe one batch's attention workload.
#include "apps/cli/workload_flags.h"

#include <fstream>
#include <sstream>

#include "dcp/core/parse.h"

namespace dcp::cli {

const std::vector<FlagSpec>& workload_flags() {
  static const std::vector<FlagSpec> flags = {
      {"--seqlens", "L1,L2,...", "sequence lengths of the batch"},
      {"--seqlens-file", "FILE", "sequence lengths in a file (comma or whitespace separated)"},
      {"--dist", "NAME", "sample one batch: ldc, longalign, prolong, magi, wlb"},
      {"--tokens", "N", "token budget of a sampled batch [131072]"},
      {"--length-scale", "X", "multiply sampled lengths by X [1]"},
      {"--seed", "S", "seed of the sampled batch [0]"},
      {"--heads", "N", "q heads [8]"},
      {"--kv-heads", "N", "kv heads; must divide --heads [2]"},
      {"--head-dim", "N", "head dimension [128]"},
      {"--dtype", "T", "storage dtype: bf16, fp16, fp32 [bf16]"},
      {"--scale", "X", "softmax scale [1/sqrt(head dim)]"},
      {"--block-size", "N|auto",
       "tokens per token block [auto: dcp plans at 1024, 2048 and 4096 (and, where one of at most "
       "8 sequences holds half the tokens, or there are at most 4 under a dense mask such as "
       "causal, on the hybrid and loongtrain layouts) and keeps the fastest "
       "under the simulator; see docs/block_model.md]"},
      {"--head-block-size", "N", "q heads per head block [1]"},
      {"--devices", "N", "devices the automatic block size plans for [8]"},
      {"--mask", "SPEC",
       "causal | full | sliding_window:window=W | lambda:sink=S,window=W | "
       "shared_question:question=F,answers=N | causal_blockwise:block=C,local=K "
       "[causal]"},
      {"--mask-file", "FILE", "int32 .npy (total tokens, K, 2) of per-row key intervals"},
  };
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
  if (const auto dtype = args.get("--dtype")) {
    shape.dtype = with_flag("--dtype", [&] { return parse_dtype(*dtype); });
  }
  if (args.has("--scale")) {
    shape.softmax_scale = args.get_double("--scale", 0.0);
    if (!(shape.softmax_scale > 0)) {
      throw UsageError("--scale " + quoted(*args.get("--scale")) + ": must be > 0");
    }
  }
}

AttentionShape shape_from_flags(const Args& args) {
  AttentionShape shape;
  shape.q_heads = static_cast<std::int32_t>(args.get_int("--heads", shape.q_heads, 1, kMaxHeads));
  shape.kv_heads =
      static_cast<std::int32_t>(args.get_int("--kv-heads", shape.kv_heads, 1, kMaxHeads));
  shape.head_dim =
      static_cast<std::int32_t>(args.get_int("--head-dim", shape.head_dim, 1, kMaxHeadDim));
  dtype_and_scale_from_flags(args, shape);
  with_flag(
      "--heads " + std::to_string(shape.q_heads) + " --kv-heads " + std::to_string(shape.kv_heads),
      [&] { validate(shape); });
  return shape;
}

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

WorkloadOptions workload_options_from_flags(const Args& args, std::int32_t devices) {
  WorkloadOptions options;
  const std::string block = args.get_or("--block-size", "auto");
  if (block != "auto") options.block_size = args.get_int("--block-size", 0, 1, kMaxBatchTokens);
  options.head_block_size =
      static_cast<std::int32_t>(args.get_int("--head-block-size", 1, 1, kMaxHeads));
  options.auto_block.devices =
      static_cast<std::int32_t>(args.get_int("--devices", devices, 1, 1 << 16));
  return options;
}

BuiltWorkload workload_from_flags(const Args& args, std::int32_t devices) {
  return workload_from_flags(args, shape_from_flags(args), devices);
}

BuiltWorkload workload_from_flags(const Args& args, const AttentionShape& shape,
                                  std::int32_t devices) {
  SequenceBatch batch = batch_from_flags(args);
  const MaskSource mask = mask_from_flags(args);
  const WorkloadOptions options = workload_options_from_flags(args, devices);
  with_flag("--head-block-size " + std::to_string(options.head_block_size),
            [&] { HeadBlocking(shape, options.head_block_size); });
  std::vector<SequenceMask> masks = with_flag(mask.file.empty() ? "--mask" : "--mask-file",
                                              [&] { return build_masks(mask, batch); });
  // What is left to fail is the size of the model the block size gives.
  return with_flag("--block-size " + args.get_or("--block-size", "auto"), [&] {
    return make_workload(shape, std::move(batch), std::move(masks), options);
  });
}

}  // namespace dcp::cli

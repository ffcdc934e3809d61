// SPDX-License-Identifier: Apache-2.0
// Flags that describe one batch's attention workload, shared by every command that plans a batch.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/sequence_batch.h"

#include "dcp/workload_builder.h"

#include "apps/cli/args.h"

namespace dcp::cli {

// --seqlens/--seqlens-file/--dist (+ --tokens, --length-scale, --seed), the batch's options
// (batch_options(), dcp/planner_options.h: --heads, --kv-heads, --head-dim, --dtype,
// --softmax-scale, --block-size, --head-block-size), --devices, --mask/--mask-file, --layers.
const std::vector<FlagSpec>& workload_flags();

// The batch given by exactly one of --seqlens, --seqlens-file, --dist.
SequenceBatch batch_from_flags(const Args& args);
AttentionShape shape_from_flags(const Args& args);
// --dtype and --softmax-scale into `shape`, for commands that take the rest of the shape from
// elsewhere.
void dtype_and_scale_from_flags(const Args& args, AttentionShape& shape);

// Whether a --mask value names a kind: "NAME=SPEC", the text before the first '=' free of ':'
// ("sliding_window:window=8" is an unnamed spec).
bool is_kind_assignment(std::string_view text);
// The attention kinds of --mask KIND=SPEC (each once) and their --layers; one unnamed --mask or
// --mask-file is one kind of the default name and one layer. Every error names the flag.
std::vector<std::pair<std::string, MaskSource>> kind_masks_from_flags(const Args& args);
std::vector<std::int32_t> kind_layers_from_flags(
    const Args& args, const std::vector<std::pair<std::string, MaskSource>>& kinds);
// The batch, shape, kinds and block size of the flags, built by make_kind_workloads; every
// InvalidInput names the flag it came from. `devices` is what the automatic block size plans for
// when --devices is not given.
BuiltKinds kinds_from_flags(const Args& args, std::int32_t devices = 8);
// The same with the attention shape given (e.g. read from arrays) instead of flags.
BuiltKinds kinds_from_flags(const Args& args, const AttentionShape& shape, std::int32_t devices);
WorkloadOptions workload_options_from_flags(const Args& args, std::int32_t devices = 8);

// Sequence lengths in a text file, separated by commas or whitespace.
std::vector<TokenCount> read_lengths_file(const std::string& path);

}  // namespace dcp::cli

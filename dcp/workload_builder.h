// SPDX-License-Identifier: Apache-2.0
// A batch's block model: its masks (built in or from a file), its workload at a given or automatic
// block size, and every attention kind's workload cut into the same blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/model/attention_kind.h"
#include "dcp/model/attention_shape.h"
#include "dcp/model/block_size_heuristic.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/sequence_batch.h"
#include "dcp/model/sequence_mask.h"
#include "dcp/model/workload.h"

#include "dcp/planner/model_plan_builder.h"

namespace dcp {

// Where a batch's mask comes from: a built-in spec, or a user's .npy mask file.
struct MaskSource {
  MaskSpec spec;
  std::string file;  // when not empty, the file is used and spec is ignored

  std::string describe() const { return file.empty() ? to_string(spec) : "file " + file; }
};

std::vector<SequenceMask> build_masks(const MaskSource& source, const SequenceBatch& batch);

struct WorkloadOptions {
  TokenCount block_size = 0;  // 0: chosen by choose_block_size with `auto_block`
  std::int32_t head_block_size = 1;
  BlockSizeOptions auto_block;
};

struct BuiltWorkload {
  Workload workload;
  std::optional<BlockSizeChoice> block_size_choice;  // set when the heuristic chose B
};

// Builds the block model of one batch. Throws InvalidInput for invalid shapes, masks or sizes.
BuiltWorkload make_workload(const AttentionShape& shape, SequenceBatch batch,
                            std::vector<SequenceMask> masks, const WorkloadOptions& options);

struct BuiltKinds {
  std::vector<KindWorkload> kinds;                   // every kind cut into the same blocks
  std::optional<BlockSizeChoice> block_size_choice;  // the first kind's, when automatic
  // A plan of one mask: one kind of the default name and one layer (ModelPlan::is_single_plan).
  bool single() const;
};

// The block model of every attention kind of one batch. Every kind is cut as the first kind's
// block size cuts it (chosen for the first kind's masks when options.block_size is 0): the kinds
// of a plan share their token blocks. Throws InvalidInput as validate_kinds (naming the kind) and
// make_workload do.
BuiltKinds make_kind_workloads(const AttentionShape& shape, const SequenceBatch& batch,
                               std::vector<AttentionKind> kinds, const WorkloadOptions& options);

}  // namespace dcp

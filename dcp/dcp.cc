// SPDX-License-Identifier: Apache-2.0
// The dcp library facade.
#include "dcp/dcp.h"

namespace dcp {

std::vector<SequenceMask> build_masks(const MaskSource& source, const SequenceBatch& batch) {
  if (!source.file.empty()) return load_mask_file(source.file, batch);
  return build_batch_mask(source.spec, batch);
}

BuiltWorkload make_workload(const AttentionShape& shape, SequenceBatch batch,
                            std::vector<SequenceMask> masks, const WorkloadOptions& options) {
  validate(shape);
  std::optional<BlockSizeChoice> choice;
  TokenCount block_size = options.block_size;
  if (block_size == 0) {
    choice = choose_block_size(shape, batch, masks, options.head_block_size, options.auto_block);
    block_size = choice->block_size;
  }
  return {Workload(shape, std::move(batch), std::move(masks), block_size, options.head_block_size),
          choice};
}

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// A batch's block model.
#include "dcp/workload_builder.h"

#include <cstddef>
#include <utility>

#include "dcp/core/error.h"

#include "dcp/model/mask_file.h"

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

bool BuiltKinds::single() const {
  return kinds.size() == 1 && kinds.front().name == kDefaultKindName && kinds.front().layers == 1;
}

BuiltKinds make_kind_workloads(const AttentionShape& shape, const SequenceBatch& batch,
                               std::vector<AttentionKind> kinds, const WorkloadOptions& options) {
  validate_kinds(kinds, batch);
  BuiltKinds result;
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    WorkloadOptions kind_options = options;
    if (k > 0) kind_options.block_size = result.kinds.front().workload.blocks().block_size();
    BuiltWorkload built = [&] {
      try {
        return make_workload(shape, batch, std::move(kinds[k].masks), kind_options);
      } catch (const InvalidInput& error) {
        if (kinds.size() == 1) throw;
        throw InvalidInput("attention kind '" + kinds[k].name + "': " + error.what());
      }
    }();
    if (k == 0) result.block_size_choice = built.block_size_choice;
    result.kinds.push_back({std::move(kinds[k].name), kinds[k].layers, std::move(built.workload)});
  }
  return result;
}

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// User masks as .npy files: int32 (total tokens, K, 2), per query row K key intervals [s, e).
#pragma once

#include <string>
#include <vector>

#include "dcp/core/npy.h"

#include "dcp/model/sequence_batch.h"
#include "dcp/model/sequence_mask.h"

namespace dcp {

// Reads a mask file for `batch`: rows are the batch's tokens in packed order, intervals are in
// sequence-local positions, unused slots are [0, 0) (any empty interval is ignored). Intervals may
// be unsorted and overlapping. Throws InvalidInput naming the file and the offending row, slot and
// values for a wrong dtype (not int32), rank (not 3), last extent (not 2), K < 1, a row count
// other than the batch's token count, start > end, or an interval outside [0, L].
std::vector<SequenceMask> load_mask_file(const std::string& path, const SequenceBatch& batch);

// The same from an array already in memory; `name` is used in error messages.
std::vector<SequenceMask> masks_from_array(const NpyArray& array, const SequenceBatch& batch,
                                           const std::string& name);

// Writes masks as a mask file with K = the largest interval count of any row (at least 1).
void write_mask_file(const std::string& path, const std::vector<SequenceMask>& masks);

}  // namespace dcp

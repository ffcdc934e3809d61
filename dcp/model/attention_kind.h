// SPDX-License-Identifier: Apache-2.0
// Attention kinds: the named masks of a model whose layers attend differently (sliding-window
// and full layers, say), each with the number of layers that use it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dcp/model/sequence_batch.h"
#include "dcp/model/sequence_mask.h"

namespace dcp {

// The kind a plan of one mask holds: its name where nobody named one.
inline constexpr std::string_view kDefaultKindName = "attention";
// The longest kind name, in bytes.
inline constexpr std::size_t kMaxKindNameBytes = 64;
// At most this many kinds per plan: each places its own work units and has its own Programs.
inline constexpr std::size_t kMaxKinds = 16;
// A model has at most this many layers of one kind.
inline constexpr std::int32_t kMaxKindLayers = 4096;

struct AttentionKind {
  std::string name;
  std::int32_t layers = 1;          // layers of the model that use this kind
  std::vector<SequenceMask> masks;  // one per sequence of the batch
};

// Throws InvalidInput naming the value unless `name` is 1..kMaxKindNameBytes characters of
// [A-Za-z0-9_.-].
void validate_kind_name(std::string_view name);

// Throws InvalidInput naming the kind and the value: no kinds or more than kMaxKinds, a name
// invalid or given twice, layers outside [1, kMaxKindLayers], or masks that do not match the batch
// (their count, or a sequence's length).
void validate_kinds(const std::vector<AttentionKind>& kinds, const SequenceBatch& batch);

// The index of the kind called `name`; throws InvalidInput naming it and the kinds there are.
std::size_t kind_index(const std::vector<std::string>& names, std::string_view name);

// "name=value" split at the first '='; throws InvalidInput naming `text` and `what` (e.g. "a mask
// of a kind") when there is no '=' or the name is invalid.
std::pair<std::string, std::string> split_kind_assignment(std::string_view text,
                                                          std::string_view what);

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// Domain index types used across layers, in one place.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dcp {

// Token counts and positions. A batch may hold more than 2^31 tokens across layers of tooling
// (packed files, prefix sums of pair counts), so positions are 64-bit everywhere.
using TokenCount = std::int64_t;
// Unmasked (query, key) pairs; a 1M-token causal sequence has ~5e11.
using PairCount = std::int64_t;

// Index of a sequence in its batch.
using SeqIndex = std::int32_t;
// Index of a token block within its sequence (sequence-local).
using LocalBlockIndex = std::int32_t;
// Index of a token block in the whole batch: blocks of sequence 0 first, then sequence 1, ...
using BlockId = std::int32_t;
// Index of a q head block (a group of consecutive q heads).
using HeadBlockIndex = std::int32_t;
// Index of a (q block, kv block) tile of one sequence in a Workload's tile list.
using TileId = std::int32_t;
// Index of a work unit: a tile times a head block (see model/workload.h for the numbering).
using WorkUnitId = std::int64_t;

// Hypergraph partitioning (planner/partition): vertices, nets, parts and their weights. Vertex and
// part ids are local to one (possibly coarsened or per-node) hypergraph.
using VertexId = std::int32_t;
using NetId = std::int32_t;
using PartId = std::int32_t;
using Weight = std::int64_t;

// A count or index of the signed types above (never negative there) as a container's size_t.
constexpr std::size_t to_size(std::int64_t value) { return static_cast<std::size_t>(value); }

}  // namespace dcp

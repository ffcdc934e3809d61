// SPDX-License-Identifier: Apache-2.0
// The partitioner factory and its names: the one place that maps PartitionerKind to code.
#include <string>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

#include "dcp/planner/partition/greedy_partitioner.h"
#include "dcp/planner/partition/multilevel_partitioner.h"

namespace dcp {

std::string_view to_string(PartitionerKind kind) {
  switch (kind) {
    case PartitionerKind::kMultilevel:
      return "multilevel";
    case PartitionerKind::kGreedy:
      return "greedy";
  }
  return "?";
}

PartitionerKind parse_partitioner(std::string_view name) {
  for (const PartitionerKind kind : {PartitionerKind::kMultilevel, PartitionerKind::kGreedy}) {
    if (to_string(kind) == name) return kind;
  }
  throw InvalidInput("unknown partitioner " + quoted(name) + " (known: multilevel, greedy)");
}

std::unique_ptr<Partitioner> create_partitioner(PartitionerKind kind) {
  switch (kind) {
    case PartitionerKind::kMultilevel:
      return std::make_unique<MultilevelPartitioner>();
    case PartitionerKind::kGreedy:
      return std::make_unique<GreedyPartitioner>();
  }
  return nullptr;
}

}  // namespace dcp

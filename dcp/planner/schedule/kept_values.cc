// SPDX-License-Identifier: Apache-2.0
// The kv values kept from the forward pass for the backward pass.
#include "dcp/planner/schedule/kept_values.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

#include "dcp/planner/schedule/schedule.h"

namespace dcp {

std::int64_t parse_kept_kv_budget(std::string_view text) {
  if (text == "all") return kKeepAllKv;
  if (text == "none") return kKeepNoKv;
  const double mib = parse_double(text, "the kept kv budget");
  if (!(mib >= 0) || mib > 1e9) {
    throw InvalidInput("the kept kv budget must be all, none or a number of MiB in [0, 1e9], got " +
                       std::string(text));
  }
  return static_cast<std::int64_t>(mib * 1024 * 1024);
}

std::int64_t KeptKv::max_device_bytes() const {
  return device_bytes.empty() ? 0 : *std::max_element(device_bytes.begin(), device_bytes.end());
}

KeptKv choose_kept_kv(const Workload& workload, const Placement& placement,
                      const PlanHeader& header, std::int64_t budget_bytes) {
  if (budget_bytes < kKeepAllKv) {
    throw InvalidInput("the kept kv budget must be -1 (all), 0 (none) or a number of bytes, got " +
                       std::to_string(budget_bytes));
  }
  const ClusterShape& shape = placement.cluster;
  const auto devices = static_cast<std::size_t>(shape.devices());
  KeptKv kept;
  kept.per_device.resize(devices);
  kept.device_bytes.assign(devices, 0);
  const bool all = budget_bytes == kKeepAllKv;
  if (budget_bytes == kKeepNoKv) return kept;

  // Every (value, node, device) where a device reads a kv value it does not own.
  struct Reader {
    KeptValue value;
    std::int32_t node;
    DeviceId device;
    auto key() const { return std::tie(value, node, device); }
  };
  std::vector<Reader> readers;
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    const DeviceId d = placement.work_unit_device[static_cast<std::size_t>(w)];
    const ValueKey kv = key_value(workload, workload.work_unit(w));
    if (placement.token_block_device[static_cast<std::size_t>(kv.block)] == d) continue;
    readers.push_back({{SlotKind::kKV, kv.block, kv.head_block}, shape.node_of(d), d});
  }
  std::sort(readers.begin(), readers.end(),
            [](const Reader& a, const Reader& b) { return a.key() < b.key(); });
  readers.erase(std::unique(readers.begin(), readers.end(),
                            [](const Reader& a, const Reader& b) { return a.key() == b.key(); }),
                readers.end());

  // One candidate per (value, node): its readers are a contiguous run.
  struct Candidate {
    std::size_t begin, end;  // into readers
    bool crosses_nodes;      // the node is not the owner's
    std::int64_t bytes;      // per device
  };
  std::vector<Candidate> candidates;
  for (std::size_t i = 0; i < readers.size();) {
    std::size_t j = i;
    while (j < readers.size() && readers[j].value == readers[i].value &&
           readers[j].node == readers[i].node) {
      ++j;
    }
    const BlockId block = readers[i].value.block;
    const DeviceId owner = placement.token_block_device[static_cast<std::size_t>(block)];
    candidates.push_back(
        {i, j, shape.node_of(owner) != readers[i].node,
         value_bytes(header, SlotKind::kKV, workload.blocks().block(block).tokens)});
    i = j;
  }
  if (!all) {
    std::stable_sort(
        candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
          return std::tuple(!a.crosses_nodes, -a.bytes) < std::tuple(!b.crosses_nodes, -b.bytes);
        });
  }
  for (const Candidate& c : candidates) {
    if (!all) {
      bool fits = true;
      for (std::size_t r = c.begin; r < c.end && fits; ++r) {
        fits = kept.device_bytes[static_cast<std::size_t>(readers[r].device)] + c.bytes <=
               budget_bytes;
      }
      if (!fits) continue;
    }
    for (std::size_t r = c.begin; r < c.end; ++r) {
      const auto d = static_cast<std::size_t>(readers[r].device);
      kept.per_device[d].push_back(readers[r].value);
      kept.device_bytes[d] += c.bytes;
    }
  }
  for (auto& list : kept.per_device) std::sort(list.begin(), list.end());
  return kept;
}

}  // namespace dcp

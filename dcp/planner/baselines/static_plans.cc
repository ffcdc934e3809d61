// SPDX-License-Identifier: Apache-2.0
// Ring, zigzag, Ulysses and hybrid plans.
#include "dcp/planner/baselines/static_plans.h"

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_map>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

#include "dcp/planner/placement/static_placements.h"

namespace dcp {

std::string_view to_string(Strategy strategy) {
  switch (strategy) {
    case Strategy::kDcp:
      return "dcp";
    case Strategy::kDcpPure:
      return "dcp-pure";
    case Strategy::kRing:
      return "ring";
    case Strategy::kZigzag:
      return "zigzag";
    case Strategy::kUlysses:
      return "ulysses";
    case Strategy::kHybrid:
      return "hybrid";
  }
  return "?";
}

Strategy parse_strategy(std::string_view name) {
  for (const Strategy s : {Strategy::kDcp, Strategy::kDcpPure, Strategy::kRing, Strategy::kZigzag,
                           Strategy::kUlysses, Strategy::kHybrid}) {
    if (name == to_string(s)) return s;
  }
  throw InvalidInput("unknown strategy " + quoted(name) +
                     " (strategies: dcp, dcp-pure, ring, zigzag, ulysses, hybrid)");
}

bool is_dcp(Strategy strategy) {
  return strategy == Strategy::kDcp || strategy == Strategy::kDcpPure;
}

namespace {

// Head-parallel systems split the q heads into `groups` contiguous ranges (so that, with GQA, a
// device reads as few kv heads as possible); head block h goes to range h * groups / head_blocks.
std::int32_t head_group(HeadBlockIndex h, HeadBlockIndex head_blocks, std::int32_t groups) {
  return static_cast<std::int32_t>(std::int64_t{h} * groups / head_blocks);
}

// Every work unit on device_of(unit).
template <typename DeviceOf>
void place_work(const Workload& workload, Placement& placement, DeviceOf device_of) {
  placement.work_unit_device.reserve(static_cast<std::size_t>(workload.work_unit_count()));
  for (WorkUnitId u = 0; u < workload.work_unit_count(); ++u) {
    placement.work_unit_device.push_back(device_of(workload.work_unit(u)));
  }
}

// The ring over the devices of `ring` (device ids, in ring order): every kv value moves one step
// per launch from its owner around the whole ring; a work unit runs in the stage its kv value
// reaches its device, `first_stage` stages after the value starts moving at launch
// first_stage - 1. `position` maps a device to its index in its ring, `ring_of` to its ring.
struct RingSchedule {
  std::vector<std::vector<DeviceId>> rings;
  std::vector<std::int32_t> position;  // per device
  std::vector<std::int32_t> ring_of;   // per device
};

void add_ring_transfers(const RingSchedule& rings, const ValueKey& value, DeviceId start,
                        std::int32_t first_launch, std::vector<Transfer>& transfers) {
  const auto& ring =
      rings.rings[static_cast<std::size_t>(rings.ring_of[static_cast<std::size_t>(start)])];
  const auto n = static_cast<std::int32_t>(ring.size());
  const std::int32_t p0 = rings.position[static_cast<std::size_t>(start)];
  for (std::int32_t k = 1; k < n; ++k) {
    transfers.push_back({value, ring[static_cast<std::size_t>((p0 + k - 1) % n)],
                         ring[static_cast<std::size_t>((p0 + k) % n)], first_launch + k - 1});
  }
}

std::int32_t ring_distance(const RingSchedule& rings, DeviceId from, DeviceId to) {
  const auto n = static_cast<std::int32_t>(
      rings.rings[static_cast<std::size_t>(rings.ring_of[static_cast<std::size_t>(to)])].size());
  return ((rings.position[static_cast<std::size_t>(to)] -
           rings.position[static_cast<std::size_t>(from)]) %
              n +
          n) %
         n;
}

// Backward: partial kv gradients travel the ring their K, V travelled and end at the owner, as
// ring attention passes dK, dV along with K, V: each device adds its contributions to what it
// received and passes the sum on, in the launch after both its last contribution and the
// arrival. `start` is where the kv value entered the ring.
class RingGradients {
 public:
  RingGradients(const Workload& w, const Placement& p, const PassSchedule& schedule)
      : w_(w), p_(p), devices_(p.cluster.devices()) {
    for (WorkUnitId u = 0; u < w.work_unit_count(); ++u) {
      const WorkUnit unit = w.work_unit(u);
      const ValueKey dkv = output_values(w, Pass::kBackward, unit).back();
      const std::int64_t key = index(dkv, p.work_unit_device[static_cast<std::size_t>(u)]);
      auto [it, inserted] =
          last_stage_.try_emplace(key, schedule.unit_stage[static_cast<std::size_t>(u)]);
      if (!inserted)
        it->second = std::max(it->second, schedule.unit_stage[static_cast<std::size_t>(u)]);
    }
  }

  void add(const RingSchedule& rings, const ValueKey& dkv, DeviceId start,
           std::vector<Transfer>& transfers) const {
    const auto& ring =
        rings.rings[static_cast<std::size_t>(rings.ring_of[static_cast<std::size_t>(start)])];
    const auto n = static_cast<std::int32_t>(ring.size());
    const std::int32_t p0 = rings.position[static_cast<std::size_t>(start)];
    const DeviceId owner = p_.token_block_device[static_cast<std::size_t>(dkv.block)];
    std::int32_t launch = -1;
    bool started = false;
    for (std::int32_t k = 0; k < n; ++k) {
      const DeviceId device = ring[static_cast<std::size_t>((p0 + k) % n)];
      const auto it = last_stage_.find(index(dkv, device));
      if (it == last_stage_.end() && !started) continue;
      started = true;
      const DeviceId next = k + 1 < n ? ring[static_cast<std::size_t>((p0 + k + 1) % n)] : owner;
      launch = std::max(launch + 1, it == last_stage_.end() ? 0 : it->second + 1);
      if (next != device) transfers.push_back({dkv, device, next, launch});
    }
  }

 private:
  std::int64_t index(const ValueKey& dkv, DeviceId device) const {
    return (std::int64_t{dkv.block} * w_.heads().kv_count() + dkv.head_block) * devices_ + device;
  }

  const Workload& w_;
  const Placement& p_;
  std::int64_t devices_;
  std::unordered_map<std::int64_t, std::int32_t> last_stage_;
};

// Ring and zigzag: one ring of all devices, work with its q chunk, no all-to-all.
PassSchedule ring_pass(const Workload& w, const Placement& p, Pass pass) {
  const std::int32_t devices = p.cluster.devices();
  RingSchedule rings;
  rings.rings.emplace_back();
  for (DeviceId d = 0; d < devices; ++d) {
    rings.rings[0].push_back(d);
    rings.position.push_back(d);
    rings.ring_of.push_back(0);
  }
  PassSchedule schedule;
  schedule.pass = pass;
  schedule.stages = devices;
  for (WorkUnitId u = 0; u < w.work_unit_count(); ++u) {
    const WorkUnit unit = w.work_unit(u);
    const BlockId kv = w.blocks().block_id(unit.seq, unit.kv_block);
    schedule.unit_stage.push_back(ring_distance(rings,
                                                p.token_block_device[static_cast<std::size_t>(kv)],
                                                p.work_unit_device[static_cast<std::size_t>(u)]));
  }
  std::optional<RingGradients> gradients;
  if (pass == Pass::kBackward) gradients.emplace(w, p, schedule);
  for (BlockId b = 0; b < w.blocks().block_count(); ++b) {
    const DeviceId owner = p.token_block_device[static_cast<std::size_t>(b)];
    for (std::int32_t g = 0; g < w.heads().kv_count(); ++g) {
      add_ring_transfers(rings, {SlotKind::kKV, b, g}, owner, 0, schedule.transfers);
      if (gradients) gradients->add(rings, {SlotKind::kDKV, b, g}, owner, schedule.transfers);
    }
  }
  add_partial_transfers(w, p, schedule, PartialRouting::kDirect, /*kv_gradients=*/false);
  return schedule;
}

// Ulysses (nodes = 1 group of all devices) and hybrid (one head group per node, rings of equal
// local index across nodes). `group_size` devices share the heads of a group: head block h runs
// on local index head_group(h, head blocks, group_size).
PassSchedule head_parallel_pass(const Workload& w, const Placement& p, Pass pass,
                                std::int32_t group_size) {
  const std::int32_t devices = p.cluster.devices();
  const std::int32_t groups = devices / group_size;
  const HeadBlocking& heads = w.heads();
  const auto local_of_head = [&](HeadBlockIndex h) {
    return head_group(h, heads.count(), group_size);
  };
  const auto group_of = [&](DeviceId d) { return d / group_size; };
  RingSchedule rings;  // ring j joins local index j of every group
  rings.rings.resize(static_cast<std::size_t>(group_size));
  for (DeviceId d = 0; d < devices; ++d) {
    rings.rings[static_cast<std::size_t>(d % group_size)].push_back(d);
    rings.position.push_back(group_of(d));
    rings.ring_of.push_back(d % group_size);
  }
  PassSchedule schedule;
  schedule.pass = pass;
  schedule.stages = groups + 1;  // stage 0 waits for the all-to-all
  for (WorkUnitId u = 0; u < w.work_unit_count(); ++u) {
    const WorkUnit unit = w.work_unit(u);
    const BlockId kv = w.blocks().block_id(unit.seq, unit.kv_block);
    const DeviceId device = p.work_unit_device[static_cast<std::size_t>(u)];
    const DeviceId kv_group_device =
        group_of(p.token_block_device[static_cast<std::size_t>(kv)]) * group_size +
        device % group_size;
    schedule.unit_stage.push_back(1 + ring_distance(rings, kv_group_device, device));
  }
  // The all-to-all is dense: every q value goes to the device of its head block, every kv value
  // to every device of its group whose heads read it; then kv values travel the rings.
  std::vector<std::vector<std::int32_t>> locals_of_kv(static_cast<std::size_t>(heads.kv_count()));
  for (HeadBlockIndex h = 0; h < heads.count(); ++h) {
    auto& locals = locals_of_kv[static_cast<std::size_t>(heads.kv_block_of(h))];
    if (std::find(locals.begin(), locals.end(), local_of_head(h)) == locals.end()) {
      locals.push_back(local_of_head(h));
    }
  }
  std::optional<RingGradients> gradients;
  if (pass == Pass::kBackward) gradients.emplace(w, p, schedule);
  for (BlockId b = 0; b < w.blocks().block_count(); ++b) {
    const DeviceId owner = p.token_block_device[static_cast<std::size_t>(b)];
    const DeviceId base = group_of(owner) * group_size;
    for (HeadBlockIndex h = 0; h < heads.count(); ++h) {
      const DeviceId to = base + local_of_head(h);
      if (to != owner) schedule.transfers.push_back({{query_kind(pass), b, h}, owner, to, 0});
    }
    for (std::int32_t g = 0; g < heads.kv_count(); ++g) {
      for (const std::int32_t local : locals_of_kv[static_cast<std::size_t>(g)]) {
        const DeviceId to = base + local;
        if (to != owner) schedule.transfers.push_back({{SlotKind::kKV, b, g}, owner, to, 0});
        add_ring_transfers(rings, {SlotKind::kKV, b, g}, to, 1, schedule.transfers);
        if (gradients) gradients->add(rings, {SlotKind::kDKV, b, g}, to, schedule.transfers);
      }
    }
  }
  add_partial_transfers(w, p, schedule, PartialRouting::kDirect, /*kv_gradients=*/false);
  return schedule;
}

}  // namespace

StaticPlan static_plan(Strategy strategy, const Workload& workload, const ClusterShape& cluster,
                       MaskedTiles masked_tiles) {
  const TileSelection selection = masked_tiles == MaskedTiles::kCompute
                                      ? TileSelection::kEveryBlockPair
                                      : TileSelection::kUnmasked;
  validate(cluster);
  const std::int64_t devices = cluster.devices();
  const HeadBlockIndex head_blocks = workload.heads().count();
  const auto need_heads = [&](std::int64_t group, const char* what) {
    if (group > head_blocks) {
      throw InvalidInput(std::string(to_string(strategy)) + " splits q heads over " + what + ": " +
                         std::to_string(group) + " devices but only " +
                         std::to_string(head_blocks) + " q head blocks");
    }
  };
  if (is_dcp(strategy)) {
    throw InvalidInput(std::string(to_string(strategy)) + " is not a static strategy");
  }
  if (strategy == Strategy::kUlysses) need_heads(devices, "all devices");
  if (strategy == Strategy::kHybrid) need_heads(cluster.devices_per_node, "the devices of a node");
  // Ring and Ulysses cut each sequence into P chunks, zigzag and hybrid into 2P.
  const bool two_per_device = strategy == Strategy::kZigzag || strategy == Strategy::kHybrid;
  StaticPlan plan{recut_sequences(workload, two_per_device ? 2 * devices : devices, selection),
                  Placement{},
                  {},
                  {}};
  Placement& placement = plan.placement;
  placement.cluster = cluster;
  const std::int32_t per_node = cluster.devices_per_node;
  for (const TokenBlock& block : plan.workload.blocks().blocks()) {
    DeviceId device = static_cast<DeviceId>(block.index);  // one chunk per device
    if (strategy == Strategy::kZigzag) {
      device = zigzag_chunk_device(block.index, devices);
    } else if (strategy == Strategy::kHybrid) {
      device = zigzag_chunk_device(block.index / per_node, cluster.nodes) * per_node +
               block.index % per_node;
    }
    placement.token_block_device.push_back(device);
  }
  switch (strategy) {
    case Strategy::kRing:
    case Strategy::kZigzag:
      place_work_with_q(plan.workload, placement);
      break;
    case Strategy::kUlysses:
      place_work(plan.workload, placement, [&](const WorkUnit& unit) {
        return head_group(unit.head_block, head_blocks, static_cast<std::int32_t>(devices));
      });
      break;
    default: {
      const BlockLayout& blocks = plan.workload.blocks();
      place_work(plan.workload, placement, [&](const WorkUnit& unit) {
        const BlockId q = blocks.block_id(unit.seq, unit.q_block);
        return cluster.node_of(placement.token_block_device[static_cast<std::size_t>(q)]) *
                   per_node +
               head_group(unit.head_block, head_blocks, per_node);
      });
      break;
    }
  }
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    PassSchedule schedule;
    switch (strategy) {
      case Strategy::kRing:
      case Strategy::kZigzag:
        schedule = ring_pass(plan.workload, plan.placement, pass);
        break;
      case Strategy::kUlysses:
        schedule = head_parallel_pass(plan.workload, plan.placement, pass,
                                      static_cast<std::int32_t>(devices));
        break;
      default:
        schedule =
            head_parallel_pass(plan.workload, plan.placement, pass, cluster.devices_per_node);
        break;
    }
    (pass == Pass::kForward ? plan.forward : plan.backward) = std::move(schedule);
  }
  return plan;
}

}  // namespace dcp

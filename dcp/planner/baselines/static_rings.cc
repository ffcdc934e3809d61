// SPDX-License-Identifier: Apache-2.0
// Head all-to-alls, (double) rings of kv and paths of partial kv gradients.
#include "dcp/planner/baselines/static_rings.h"

#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "dcp/planner/schedule/value_map.h"

namespace dcp {

std::int32_t RingLayout::visit(std::int32_t start, std::int32_t t) const {
  const std::int32_t windows = ring_size() / window;
  const std::int32_t o = t / window, k = t % window;
  return (start / window + o) % windows * window + (start % window + k) % window;
}

std::int32_t RingLayout::visit_index(std::int32_t start, std::int32_t position) const {
  const std::int32_t windows = ring_size() / window;
  const std::int32_t o = ((position / window - start / window) % windows + windows) % windows;
  const std::int32_t k = ((position % window - start % window) % window + window) % window;
  return o * window + k;
}

RingLayout::Hop RingLayout::hop(std::int32_t start, std::int32_t t) const {
  const std::int32_t o = t / window, k = t % window;
  if (k == 0) return {visit(start, (o - 1) * window), (o - 1) * window};
  return {visit(start, t - 1), t - 1};
}

namespace {

// Backward: partial kv gradients travel the path their K, V travelled (devices in visit order)
// and end at the owner, as ring attention passes dK, dV along with K, V: from the first device
// that contributes, each device adds its contributions to what it received and passes the sum on,
// in the launch after both its last contribution and the arrival.
class PathGradients {
 public:
  PathGradients(const Workload& w, const Placement& p, const PassSchedule& schedule)
      : p_(p), last_stage_(static_cast<std::size_t>(p.cluster.devices())) {
    for (WorkUnitId u = 0; u < w.work_unit_count(); ++u) {
      const WorkUnit unit = w.work_unit(u);
      const ValueKey dkv = output_values(w, Pass::kBackward, unit).back();
      ValueMap& last =
          last_stage_[static_cast<std::size_t>(p.work_unit_device[static_cast<std::size_t>(u)])];
      const std::int32_t stage = schedule.unit_stage[static_cast<std::size_t>(u)];
      const std::int32_t* found = last.find(dkv);
      last.set(dkv, found == nullptr ? stage : std::max(*found, stage));
    }
  }

  void add(std::span<const DeviceId> path, const ValueKey& dkv,
           std::vector<Transfer>& transfers) const {
    const DeviceId owner = p_.token_block_device[static_cast<std::size_t>(dkv.block)];
    std::int32_t launch = -1;
    bool started = false;
    for (std::size_t k = 0; k < path.size(); ++k) {
      const DeviceId device = path[k];
      const std::int32_t* last = last_stage_[static_cast<std::size_t>(device)].find(dkv);
      if (last == nullptr && !started) continue;
      started = true;
      const DeviceId next = k + 1 < path.size() ? path[k + 1] : owner;
      launch = std::max(launch + 1, last == nullptr ? 0 : *last + 1);
      if (next != device) transfers.push_back({dkv, device, next, launch});
    }
  }

 private:
  const Placement& p_;
  std::vector<ValueMap> last_stage_;  // per device: each dkv value's last contributing stage
};

}  // namespace

PassSchedule static_pass(const Workload& w, const Placement& p, Pass pass,
                         const RingLayout& layout) {
  const HeadBlocking& heads = w.heads();
  const std::int32_t ring = layout.ring_size();
  const std::int32_t first = layout.first_stage();
  PassSchedule schedule;
  schedule.pass = pass;
  schedule.stages = first + ring;  // with an all-to-all, stage 0 waits for it
  // A work unit runs when kv from its owner's head group reaches it, on the same local index.
  schedule.unit_stage.reserve(static_cast<std::size_t>(w.work_unit_count()));
  for (WorkUnitId u = 0; u < w.work_unit_count(); ++u) {
    const WorkUnit unit = w.work_unit(u);
    const BlockId kv = w.blocks().block_id(unit.seq, unit.kv_block);
    const DeviceId device = p.work_unit_device[static_cast<std::size_t>(u)];
    const std::int32_t start = layout.position(p.token_block_device[static_cast<std::size_t>(kv)]);
    schedule.unit_stage.push_back(first + layout.visit_index(start, layout.position(device)));
  }
  // The all-to-all is dense: every q value goes to the device of its head block, every kv value
  // to every device of its head group whose heads read it; then kv values travel the rings.
  std::vector<std::vector<std::int32_t>> locals_of_kv(static_cast<std::size_t>(heads.kv_count()));
  for (HeadBlockIndex h = 0; h < heads.count(); ++h) {
    auto& locals = locals_of_kv[static_cast<std::size_t>(heads.kv_block_of(h))];
    const std::int32_t local = layout.head_local_of(h, heads.count());
    if (std::find(locals.begin(), locals.end(), local) == locals.end()) locals.push_back(local);
  }
  std::optional<PathGradients> gradients;
  if (pass == Pass::kBackward) gradients.emplace(w, p, schedule);
  std::vector<DeviceId> path(static_cast<std::size_t>(ring));
  for (BlockId b = 0; b < w.blocks().block_count(); ++b) {
    const DeviceId owner = p.token_block_device[static_cast<std::size_t>(b)];
    const DeviceId base = layout.group_base(owner);
    const std::int32_t start = layout.position(owner);
    if (layout.all_to_all) {
      for (HeadBlockIndex h = 0; h < heads.count(); ++h) {
        const DeviceId to = layout.device(base, start, layout.head_local_of(h, heads.count()));
        if (to != owner) schedule.transfers.push_back({{query_kind(pass), b, h}, owner, to, 0});
      }
    }
    for (std::int32_t g = 0; g < heads.kv_count(); ++g) {
      const ValueKey kv{SlotKind::kKV, b, g};
      for (const std::int32_t local : locals_of_kv[static_cast<std::size_t>(g)]) {
        const DeviceId to = layout.all_to_all ? layout.device(base, start, local) : owner;
        if (to != owner) schedule.transfers.push_back({kv, owner, to, 0});
        for (std::int32_t t = 0; t < ring; ++t) {
          path[static_cast<std::size_t>(t)] = layout.device(base, layout.visit(start, t), local);
          if (t == 0) continue;
          const RingLayout::Hop hop = layout.hop(start, t);
          schedule.transfers.push_back({kv, layout.device(base, hop.from, local),
                                        path[static_cast<std::size_t>(t)], first + hop.launch});
        }
        if (gradients) gradients->add(path, {SlotKind::kDKV, b, g}, schedule.transfers);
      }
    }
  }
  add_partial_transfers(w, p, schedule, PartialRouting::kDirect, /*kv_gradients=*/false);
  return schedule;
}

PassSchedule spread_outer_hops(const Workload& w, const Placement& p, const RingLayout& layout,
                               PassSchedule schedule) {
  const std::int32_t window = layout.window;
  if (window <= 1 || window >= layout.ring_size()) return schedule;
  // Per block: its launch in the round, balancing each head group's tokens.
  std::vector<std::int32_t> offsets(static_cast<std::size_t>(w.blocks().block_count()), 0);
  std::vector<std::vector<BlockId>> of_group(static_cast<std::size_t>(p.cluster.devices()));
  for (BlockId b = 0; b < w.blocks().block_count(); ++b) {
    const DeviceId owner = p.token_block_device[static_cast<std::size_t>(b)];
    of_group[static_cast<std::size_t>(owner - layout.head_local(owner))].push_back(b);
  }
  std::vector<TokenCount> load(static_cast<std::size_t>(window));
  for (std::vector<BlockId>& blocks : of_group) {
    std::stable_sort(blocks.begin(), blocks.end(), [&](BlockId x, BlockId y) {
      return w.blocks().block(x).tokens > w.blocks().block(y).tokens;
    });
    std::fill(load.begin(), load.end(), 0);
    for (const BlockId b : blocks) {
      const auto least = std::min_element(load.begin(), load.end()) - load.begin();
      load[static_cast<std::size_t>(least)] += w.blocks().block(b).tokens;
      offsets[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(least);
    }
  }
  // An outer hop is the one kv transfer between ring positions of two windows.
  for (Transfer& t : schedule.transfers) {
    if (t.value.kind != SlotKind::kKV || t.launch < layout.first_stage()) continue;
    if (layout.position(t.src) / window == layout.position(t.dst) / window) continue;
    t.launch += offsets[static_cast<std::size_t>(t.value.block)];
  }
  sort_transfers(schedule.transfers.begin(), schedule.transfers.end());
  return schedule;
}

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
#include "dcp/planner/joined_plan.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "dcp/core/error.h"
#include "dcp/core/timing.h"

#include "dcp/model/sequence_batch.h"

#include "dcp/planner/plan_builder_internal.h"

namespace dcp {
namespace {

// Where a group's blocks and work units are in the joined workload.
struct GroupIds {
  std::vector<BlockId> blocks;    // per block of the group's workload
  std::vector<WorkUnitId> units;  // per work unit of the group's workload
};

GroupIds joined_ids(const Workload& joined, const GroupPlan& group) {
  const Workload& own = group.plan->workload;
  GroupIds ids{std::vector<BlockId>(static_cast<std::size_t>(own.blocks().block_count())),
               std::vector<WorkUnitId>(static_cast<std::size_t>(own.work_unit_count()))};
  for (std::size_t i = 0; i < group.sequences.size(); ++i) {
    const auto local = static_cast<SeqIndex>(i);
    const auto seq = static_cast<SeqIndex>(group.sequences[i]);
    const LocalBlockIndex blocks = joined.blocks().blocks_in(seq);
    const auto tiles = static_cast<TileId>(joined.tiles_of(seq).size());
    if (blocks != own.blocks().blocks_in(local) ||
        tiles != static_cast<TileId>(own.tiles_of(local).size())) {
      throw Error("joined plan: sequence " + std::to_string(seq) +
                  " is cut differently in its group's plan");
    }
    for (LocalBlockIndex b = 0; b < blocks; ++b) {
      ids.blocks[static_cast<std::size_t>(own.blocks().block_id(local, b))] =
          joined.blocks().block_id(seq, b);
    }
    for (HeadBlockIndex head_block = 0; head_block < joined.heads().count(); ++head_block) {
      for (TileId t = 0; t < tiles; ++t) {
        ids.units[static_cast<std::size_t>(
            own.work_unit_id(head_block, own.first_tile(local) + t))] =
            joined.work_unit_id(head_block, joined.first_tile(seq) + t);
      }
    }
  }
  return ids;
}

// One pass's schedules of every group on the joined workload: each unit at its group's stage,
// each transfer between its group's devices in its group's launch; as many stages as the group
// with the most (the others idle through the rest).
PassSchedule joined_schedule(const Workload& joined, const std::vector<GroupPlan>& groups,
                             const std::vector<GroupIds>& ids, Pass pass) {
  PassSchedule schedule;
  schedule.pass = pass;
  schedule.stages = 0;
  schedule.unit_stage.assign(static_cast<std::size_t>(joined.work_unit_count()), 0);
  // Inside one group the routings move the same partials (no value has contributions in
  // another node); the plan promises reduction in a node only where every group's does.
  schedule.partial_routing = PartialRouting::kReduceInNode;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const BuiltPlan& plan = *groups[g].plan;
    const PassSchedule& own =
        pass == Pass::kForward ? plan.forward_schedule : plan.backward_schedule;
    if (own.pass != pass || own.unit_stage.size() != ids[g].units.size()) {
      throw InvalidInput("joined plan: group " + std::to_string(g) + " has no " +
                         std::string(to_string(pass)) + " schedule of its workload");
    }
    schedule.stages = std::max(schedule.stages, own.stages);
    if (own.partial_routing != PartialRouting::kReduceInNode) {
      schedule.partial_routing = PartialRouting::kDirect;
    }
    for (std::size_t unit = 0; unit < own.unit_stage.size(); ++unit) {
      schedule.unit_stage[static_cast<std::size_t>(ids[g].units[unit])] = own.unit_stage[unit];
    }
    const DeviceId first = groups[g].first_device;
    for (const Transfer& transfer : own.transfers) {
      Transfer moved = transfer;
      moved.value.block = ids[g].blocks[static_cast<std::size_t>(transfer.value.block)];
      moved.src = first + transfer.src;
      moved.dst = first + transfer.dst;
      schedule.transfers.push_back(moved);
    }
  }
  schedule.stages = std::max(schedule.stages, 1);
  sort_transfers(schedule.transfers.begin(), schedule.transfers.end());
  return schedule;
}

ScheduleSummary joined_summary(const BuiltPlan& built, const std::vector<GroupPlan>& groups,
                               const PassSchedule& schedule, const ClusterSpec& cluster) {
  ScheduleSummary summary;
  summary.stages = schedule.stages;
  for (const GroupPlan& group : groups) {
    const ScheduleSummary& own =
        schedule.pass == Pass::kForward ? group.plan->forward : group.plan->backward;
    summary.fetch_launches = std::max(summary.fetch_launches, own.fetch_launches);
    summary.balanced = summary.balanced || own.balanced;
    summary.own_outputs_last = summary.own_outputs_last || own.own_outputs_last;
  }
  summary.estimate =
      estimate(built.workload, built.placement, cluster, built.plan.header, schedule);
  return summary;
}

}  // namespace

BuiltPlan join_group_plans(const Workload& workload, const std::vector<GroupPlan>& groups,
                           const PlanOptions& options) {
  const auto start = Clock::now();
  validate(options.cluster);
  const ClusterShape& shape = options.cluster.shape;
  const SequenceBatch& batch = workload.batch();
  const auto sequences = static_cast<std::size_t>(batch.size());
  const std::int32_t head_block_size = workload.heads().head_block_size();

  // Every sequence in one group, every device in at most one, each at its group's block size.
  std::vector<TokenCount> block_sizes(sequences, 0);
  std::vector<bool> device_used(static_cast<std::size_t>(shape.devices()), false);
  bool within_bounds = true;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const GroupPlan& group = groups[g];
    const std::string name = "joined plan: group " + std::to_string(g);
    if (group.plan == nullptr) throw InvalidInput(name + " has no plan");
    const Workload& own = group.plan->workload;
    if (own.shape() != workload.shape() || own.heads().head_block_size() != head_block_size) {
      throw InvalidInput(name + " is planned for another attention shape or head blocks");
    }
    if (own.batch().size() != static_cast<SeqIndex>(group.sequences.size())) {
      throw InvalidInput(name + " plans " + std::to_string(own.batch().size()) +
                         " sequences, it is given " + std::to_string(group.sequences.size()));
    }
    const std::int32_t devices = group.plan->placement.cluster.devices();
    if (group.first_device < 0 || group.first_device + devices > shape.devices()) {
      throw InvalidInput(name + "'s devices " + std::to_string(group.first_device) + ".." +
                         std::to_string(group.first_device + devices - 1) +
                         " are not all in the cluster's " + std::to_string(shape.devices()));
    }
    // Its nodes must be the cluster's (or lie inside one of them): the kv it keeps and the
    // partials it reduces are per node.
    const ClusterShape& own_shape = group.plan->placement.cluster;
    const bool inside_one_node =
        own_shape.nodes == 1 &&
        shape.node_of(group.first_device) == shape.node_of(group.first_device + devices - 1);
    const bool on_whole_nodes = own_shape.devices_per_node == shape.devices_per_node &&
                                group.first_device % shape.devices_per_node == 0;
    if (!inside_one_node && !on_whole_nodes) {
      throw InvalidInput(name + "'s " + std::to_string(own_shape.nodes) + " x " +
                         std::to_string(own_shape.devices_per_node) + " devices from device " +
                         std::to_string(group.first_device) + " are not whole nodes of the " +
                         std::to_string(shape.nodes) + " x " +
                         std::to_string(shape.devices_per_node) + " cluster");
    }
    for (std::int32_t d = 0; d < devices; ++d) {
      const auto device = static_cast<std::size_t>(group.first_device + d);
      if (device_used[device]) {
        throw InvalidInput(name + "'s device " + std::to_string(device) + " is in another group");
      }
      device_used[device] = true;
    }
    for (std::size_t i = 0; i < group.sequences.size(); ++i) {
      const std::size_t seq = group.sequences[i];
      if (seq >= sequences || block_sizes[seq] != 0) {
        throw InvalidInput(name + "'s sequence " + std::to_string(seq) +
                           " is not in the batch or is in another group");
      }
      const auto local = static_cast<SeqIndex>(i);
      if (own.batch().length(local) != batch.length(static_cast<SeqIndex>(seq))) {
        throw InvalidInput(name + "'s sequence " + std::to_string(i) + " has " +
                           std::to_string(own.batch().length(local)) + " tokens, sequence " +
                           std::to_string(seq) + " of the batch " +
                           std::to_string(batch.length(static_cast<SeqIndex>(seq))));
      }
      block_sizes[seq] = own.blocks().block_size(local);
    }
    within_bounds = within_bounds && group.plan->placement_within_bounds;
  }
  for (std::size_t seq = 0; seq < sequences; ++seq) {
    if (block_sizes[seq] == 0) {
      throw InvalidInput("joined plan: sequence " + std::to_string(seq) + " is in no group");
    }
  }

  std::vector<SequenceMask> masks;
  for (SeqIndex seq = 0; seq < batch.size(); ++seq) masks.push_back(workload.mask(seq));
  Workload joined(workload.shape(), batch, std::move(masks), block_sizes, head_block_size,
                  workload.tile_selection());
  std::vector<GroupIds> ids;
  for (const GroupPlan& group : groups) ids.push_back(joined_ids(joined, group));

  Placement placement;
  placement.cluster = shape;
  placement.token_block_device.assign(static_cast<std::size_t>(joined.blocks().block_count()), 0);
  placement.work_unit_device.assign(static_cast<std::size_t>(joined.work_unit_count()), 0);
  KeptKv kept;
  kept.per_device.resize(static_cast<std::size_t>(shape.devices()));
  kept.device_bytes.assign(static_cast<std::size_t>(shape.devices()), 0);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const BuiltPlan& plan = *groups[g].plan;
    const DeviceId first = groups[g].first_device;
    for (std::size_t b = 0; b < ids[g].blocks.size(); ++b) {
      placement.token_block_device[static_cast<std::size_t>(ids[g].blocks[b])] =
          first + plan.placement.token_block_device[b];
    }
    for (std::size_t u = 0; u < ids[g].units.size(); ++u) {
      placement.work_unit_device[static_cast<std::size_t>(ids[g].units[u])] =
          first + plan.placement.work_unit_device[u];
    }
    for (std::size_t d = 0; d < plan.kept.per_device.size(); ++d) {
      const auto device = static_cast<std::size_t>(first) + d;
      for (KeptValue value : plan.kept.per_device[d]) {
        value.block = ids[g].blocks[static_cast<std::size_t>(value.block)];
        kept.per_device[device].push_back(value);
      }
      std::sort(kept.per_device[device].begin(), kept.per_device[device].end());
      if (d < plan.kept.device_bytes.size()) kept.device_bytes[device] = plan.kept.device_bytes[d];
    }
  }
  validate(placement, joined);

  ScheduledPlan scheduled{BuiltPlan{Plan{},
                                    std::move(joined),
                                    std::move(placement),
                                    within_bounds,
                                    std::move(kept),
                                    {},
                                    {},
                                    {},
                                    {},
                                    {}},
                          {},
                          {}};
  BuiltPlan& built = scheduled.built;
  built.plan.header = plan_building::strategy_header(built.workload, options);
  for (const GroupPlan& group : groups) {
    if (group.plan->plan.header.partial_dtype != built.plan.header.partial_dtype) {
      throw InvalidInput("joined plan: a group's partials travel in " +
                         std::string(to_string(group.plan->plan.header.partial_dtype)) +
                         ", the plan's in " +
                         std::string(to_string(built.plan.header.partial_dtype)));
    }
  }
  scheduled.forward = joined_schedule(built.workload, groups, ids, Pass::kForward);
  scheduled.backward = joined_schedule(built.workload, groups, ids, Pass::kBackward);
  built.forward = joined_summary(built, groups, scheduled.forward, options.cluster);
  built.backward = joined_summary(built, groups, scheduled.backward, options.cluster);
  const double join_ms = ms_since(start);
  BuiltPlan compiled = compile_scheduled(std::move(scheduled));
  compiled.timings.partition_ms = join_ms;
  compiled.timings.total_ms = join_ms + compiled.timings.compile_ms;
  return compiled;
}

}  // namespace dcp

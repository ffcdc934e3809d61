// SPDX-License-Identifier: Apache-2.0
// Values, partial-output transfers and the time estimate of a pass schedule.
#include "dcp/planner/schedule/schedule.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "dcp/model/tensor.h"

#include "dcp/planner/schedule/value_map.h"

namespace dcp {

SlotKind query_kind(Pass pass) { return pass == Pass::kForward ? SlotKind::kQ : SlotKind::kQGrad; }

ValueKey query_value(const Workload& workload, Pass pass, const WorkUnit& unit) {
  return {query_kind(pass), workload.blocks().block_id(unit.seq, unit.q_block), unit.head_block};
}

ValueKey key_value(const Workload& workload, const WorkUnit& unit) {
  return {SlotKind::kKV, workload.blocks().block_id(unit.seq, unit.kv_block),
          workload.heads().kv_block_of(unit.head_block)};
}

OutputValues output_values(const Workload& workload, Pass pass, const WorkUnit& unit) {
  const BlockId q = workload.blocks().block_id(unit.seq, unit.q_block);
  if (pass == Pass::kForward) return {{{{SlotKind::kOut, q, unit.head_block}, {}}}, 1};
  return {{{{SlotKind::kDQ, q, unit.head_block},
            {SlotKind::kDKV, workload.blocks().block_id(unit.seq, unit.kv_block),
             workload.heads().kv_block_of(unit.head_block)}}},
          2};
}

void add_partial_transfers(const Workload& workload, const Placement& placement,
                           PassSchedule& schedule, PartialRouting routing, bool kv_gradients) {
  schedule.partial_routing = routing;
  // The last stage of every (value, contributing device) away from the value's owner.
  struct Contribution {
    ValueKey value;
    DeviceId device;
    std::int32_t stage;
  };
  const auto owner = [&](const ValueKey& value) {
    return placement.token_block_device[static_cast<std::size_t>(value.block)];
  };
  // One entry per (value, device), with its last stage: found through a table per device.
  std::vector<Contribution> contributions;
  std::vector<ValueMap> entry_of(static_cast<std::size_t>(placement.cluster.devices()));
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    const DeviceId device = placement.work_unit_device[static_cast<std::size_t>(w)];
    const std::int32_t stage = schedule.unit_stage[static_cast<std::size_t>(w)];
    for (const ValueKey& value : output_values(workload, schedule.pass, workload.work_unit(w))) {
      if (owner(value) == device) continue;
      if (!kv_gradients && value.kind == SlotKind::kDKV) continue;
      ValueMap& entries = entry_of[static_cast<std::size_t>(device)];
      if (const std::int32_t* found = entries.find(value)) {
        std::int32_t& last = contributions[static_cast<std::size_t>(*found)].stage;
        last = std::max(last, stage);
      } else {
        entries.set(value, static_cast<std::int32_t>(contributions.size()));
        contributions.push_back({value, device, stage});
      }
    }
  }
  std::sort(contributions.begin(), contributions.end(), [](const auto& a, const auto& b) {
    return std::tie(a.value, a.device) < std::tie(b.value, b.device);
  });

  // Per value, the contributing devices of one node other than the owner's are a run (devices
  // are numbered node by node). A node's partials meet on one of its devices, the reducer, which
  // sends their merge to the owner once it has all of them: a partial that arrives in launch l is
  // merged before launch l + 1 is issued. The reducer is the device that can send first.
  const ClusterShape& shape = placement.cluster;
  const std::size_t earlier = schedule.transfers.size();  // the transfers already scheduled
  const auto send = [&](const ValueKey& value, DeviceId src, DeviceId dst, std::int32_t launch) {
    schedule.transfers.push_back({value, src, dst, launch});
  };
  for (std::size_t i = 0; i < contributions.size();) {
    const ValueKey& value = contributions[i].value;
    const DeviceId home = owner(value);
    const std::int32_t node = shape.node_of(contributions[i].device);
    std::size_t end = i + 1;
    while (end < contributions.size() && contributions[end].value == value &&
           shape.node_of(contributions[end].device) == node) {
      ++end;
    }
    if (routing == PartialRouting::kDirect || node == shape.node_of(home) || end - i == 1) {
      for (std::size_t k = i; k < end; ++k) {
        send(value, contributions[k].device, home, contributions[k].stage + 1);
      }
      i = end;
      continue;
    }
    // Launch in which device k could send the node's merge: after its own last stage, and after
    // the launch following every other device's last stage.
    std::int32_t latest = -1, second = -1;  // the two latest last stages of the run
    for (std::size_t k = i; k < end; ++k) {
      const std::int32_t stage = contributions[k].stage;
      if (stage > latest) {
        second = latest;
        latest = stage;
      } else if (stage > second) {
        second = stage;
      }
    }
    std::size_t reducer = i;
    std::int32_t reducer_launch = std::numeric_limits<std::int32_t>::max();
    for (std::size_t k = i; k < end; ++k) {
      const std::int32_t stage = contributions[k].stage;
      const std::int32_t others = stage == latest ? second : latest;
      const std::int32_t launch = std::max(stage + 1, others + 2);
      if (launch < reducer_launch) {
        reducer = k;
        reducer_launch = launch;
      }
    }
    const DeviceId r = contributions[reducer].device;
    for (std::size_t k = i; k < end; ++k) {
      if (k != reducer) send(value, contributions[k].device, r, contributions[k].stage + 1);
    }
    send(value, r, home, reducer_launch);
    i = end;
  }
  // The earlier transfers are sorted already, unless a caller left them otherwise.
  const auto middle = schedule.transfers.begin() + static_cast<std::ptrdiff_t>(earlier);
  if (std::is_sorted(schedule.transfers.begin(), middle, transfer_order)) {
    sort_transfers(middle, schedule.transfers.end());
    std::inplace_merge(schedule.transfers.begin(), middle, schedule.transfers.end(),
                       transfer_order);
  } else {
    sort_transfers(schedule.transfers.begin(), schedule.transfers.end());
  }
}

bool transfer_order(const Transfer& a, const Transfer& b) {
  return std::tie(a.launch, a.src, a.dst, a.value) < std::tie(b.launch, b.src, b.dst, b.value);
}

void sort_transfers(std::vector<Transfer>::iterator begin, std::vector<Transfer>::iterator end) {
  // A counting sort on (launch, src), then each bucket sorted on its own: static layouts have
  // millions of transfers over a few dozen launches and devices. Every field is in the key, so
  // the order is the one a single sort gives.
  const auto n = static_cast<std::size_t>(end - begin);
  if (n < 2) return;
  std::int32_t launches = 0, devices = 0;
  for (auto it = begin; it != end; ++it) {
    launches = std::max(launches, it->launch + 1);
    devices = std::max(devices, it->src + 1);
  }
  const auto buckets = static_cast<std::size_t>(launches) * static_cast<std::size_t>(devices);
  if (buckets > n) {
    std::sort(begin, end, transfer_order);
    return;
  }
  const auto bucket = [&](const Transfer& t) {
    return static_cast<std::size_t>(t.launch) * static_cast<std::size_t>(devices) +
           static_cast<std::size_t>(t.src);
  };
  std::vector<std::size_t> start(buckets + 1, 0);
  for (auto it = begin; it != end; ++it) ++start[bucket(*it) + 1];
  for (std::size_t b = 0; b < buckets; ++b) start[b + 1] += start[b];
  std::vector<Transfer> sorted(n);
  std::vector<std::size_t> next(start.begin(), start.end() - 1);
  for (auto it = begin; it != end; ++it) sorted[next[bucket(*it)]++] = *it;
  const auto by_destination = [](const Transfer& a, const Transfer& b) {
    return std::tie(a.dst, a.value) < std::tie(b.dst, b.value);
  };
  for (std::size_t b = 0; b < buckets; ++b) {
    const auto first = sorted.begin() + static_cast<std::ptrdiff_t>(start[b]);
    const auto last = sorted.begin() + static_cast<std::ptrdiff_t>(start[b + 1]);
    if (!std::is_sorted(first, last, by_destination)) std::sort(first, last, by_destination);
  }
  std::copy(sorted.begin(), sorted.end(), begin);
}

std::int32_t launch_count(const PassSchedule& schedule) {
  std::int32_t launches = schedule.stages + 1;
  for (const Transfer& t : schedule.transfers) launches = std::max(launches, t.launch + 1);
  return launches;
}

double unit_seconds(const Workload& workload, const ClusterSpec& cluster, Pass pass,
                    const WorkUnit& unit) {
  PairCount pairs = unit.pairs;
  if (workload.tile_selection() == TileSelection::kEveryBlockPair) {
    // Systems that compute masked tiles compute whole tiles and mask elements.
    const BlockLayout& blocks = workload.blocks();
    pairs = blocks.block(blocks.block_id(unit.seq, unit.q_block)).tokens *
            blocks.block(blocks.block_id(unit.seq, unit.kv_block)).tokens;
  }
  return pass == Pass::kForward
             ? forward_flops(pairs, workload.shape(), workload.heads()) / cluster.forward_flops
             : backward_flops(pairs, workload.shape(), workload.heads()) / cluster.backward_flops;
}

ScheduleEstimate estimate(const Workload& workload, const Placement& placement,
                          const ClusterSpec& cluster, const PlanHeader& header,
                          const PassSchedule& schedule) {
  const ClusterShape& shape = placement.cluster;
  const auto devices = static_cast<std::size_t>(shape.devices());
  const auto stages = static_cast<std::size_t>(schedule.stages);
  std::vector<double> compute(stages * devices, 0.0);
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    const auto device =
        static_cast<std::size_t>(placement.work_unit_device[static_cast<std::size_t>(w)]);
    const auto stage = static_cast<std::size_t>(schedule.unit_stage[static_cast<std::size_t>(w)]);
    compute[stage * devices + device] +=
        unit_seconds(workload, cluster, schedule.pass, workload.work_unit(w));
  }
  ScheduleEstimate result;
  result.stage_compute.assign(stages, 0.0);
  std::vector<double> device_compute(devices, 0.0);
  for (std::size_t s = 0; s < stages; ++s) {
    for (std::size_t d = 0; d < devices; ++d) {
      const double c = compute[s * devices + d];
      if (c <= 0) continue;
      result.stage_compute[s] = std::max(result.stage_compute[s], c + cluster.kernel_overhead);
      device_compute[d] += c + cluster.kernel_overhead;
    }
  }
  for (const double c : device_compute)
    result.compute_seconds = std::max(result.compute_seconds, c);
  // Bytes per launch on each link side: device intra-node send/receive, NIC send/receive.
  ClusterSpec spec = cluster;
  spec.shape = shape;
  const auto nics =
      static_cast<std::size_t>(shape.nodes) * static_cast<std::size_t>(spec.nics_per_node);
  const auto nic = [&](DeviceId d) { return static_cast<std::size_t>(spec.nic_of(d)); };
  const auto launches = static_cast<std::size_t>(launch_count(schedule));
  // Link bytes (bytes over the transport's efficiency at the message's size).
  std::vector<double> intra_send(launches * devices, 0), intra_recv(launches * devices, 0);
  std::vector<double> nic_send(launches * nics, 0), nic_recv(launches * nics, 0);
  const auto bytes_of = [&](const Transfer& t) {
    return value_bytes(header, t.value.kind, workload.blocks().block(t.value.block).tokens);
  };
  // What a launch moves between two devices travels as one message: bytes per (launch, src,
  // dst), and whether the pair exchanges anything at all (a message may carry 0 bytes).
  std::vector<std::int64_t> message_bytes(launches * devices * devices, 0);
  std::vector<std::uint8_t> message_sent(launches * devices * devices, 0);
  const auto message_key = [&](const Transfer& t) {
    return (static_cast<std::size_t>(t.launch) * devices + static_cast<std::size_t>(t.src)) *
               devices +
           static_cast<std::size_t>(t.dst);
  };
  for (const Transfer& t : schedule.transfers) {
    message_bytes[message_key(t)] += bytes_of(t);
    message_sent[message_key(t)] = 1;
  }
  MessageLinkBytes link_bytes(spec);  // a message's transfers are consecutive
  for (const Transfer& t : schedule.transfers) {
    const std::int64_t bytes = bytes_of(t);
    const std::int64_t message = message_bytes[message_key(t)];
    const auto l = static_cast<std::size_t>(t.launch);
    if (shape.node_of(t.src) == shape.node_of(t.dst)) {
      const double link = link_bytes(bytes, false, message);
      intra_send[l * devices + static_cast<std::size_t>(t.src)] += link;
      intra_recv[l * devices + static_cast<std::size_t>(t.dst)] += link;
    } else {
      const double link = link_bytes(bytes, true, message);
      nic_send[l * nics + nic(t.src)] += link;
      nic_recv[l * nics + nic(t.dst)] += link;
    }
  }
  // Time of one transfer of launch l: every transfer of a link side shares it, so each ends when
  // the busier of its two sides has moved all its bytes.
  // The stream bandwidth bounds it too: its message moves at most that fast.
  const auto link_seconds = [&](std::size_t l, const Transfer& t) {
    const bool inter = shape.node_of(t.src) != shape.node_of(t.dst);
    const std::int64_t message = message_bytes[message_key(t)];
    const double own = link_bytes(message, inter, message) / spec.stream_bandwidth(inter);
    if (!inter) {
      return spec.intra_node_latency +
             std::max(own, std::max(intra_send[l * devices + static_cast<std::size_t>(t.src)],
                                    intra_recv[l * devices + static_cast<std::size_t>(t.dst)]) /
                               spec.intra_node_bandwidth);
    }
    return spec.inter_node_latency + std::max(own, std::max(nic_send[l * nics + nic(t.src)],
                                                            nic_recv[l * nics + nic(t.dst)]) /
                                                       spec.nic_bandwidth());
  };
  // Each device's launch set-up: per launch and per distinct peer (sent to or received from).
  std::vector<double> launch_setup(launches * devices, 0.0);
  for (std::size_t l = 0; l < launches; ++l) {
    const std::uint8_t* sent = message_sent.data() + l * devices * devices;
    for (std::size_t a = 0; a < devices; ++a) {
      std::int64_t peers = 0;
      for (std::size_t b = 0; b < devices; ++b) {
        peers += (sent[a * devices + b] | sent[b * devices + a]) != 0 ? 1 : 0;
      }
      if (peers == 0) continue;
      launch_setup[l * devices + a] =
          cluster.launch_overhead + cluster.launch_peer_overhead * static_cast<double>(peers);
    }
  }
  result.launch_comm.assign(launches, 0.0);
  std::vector<std::vector<const Transfer*>> by_launch(launches);
  for (const Transfer& t : schedule.transfers) {
    const auto l = static_cast<std::size_t>(t.launch);
    by_launch[l].push_back(&t);
    result.launch_comm[l] = std::max(result.launch_comm[l], link_seconds(l, t));
  }
  // Devices run asynchronously: a device starts stage s + 1 when it has finished stage s and
  // launch s has brought everything it sends to it; a transfer starts once both ends have issued
  // its launch (at the start of the stage).
  std::vector<double> start(devices, 0.0), arrival(devices, 0.0), end(devices, 0.0);
  for (std::size_t s = 0; s < launches; ++s) {
    for (std::size_t d = 0; d < devices; ++d) {
      if (s > 0) start[d] = std::max(end[d], arrival[d]);
      const double c = s < stages ? compute[s * devices + d] : 0.0;
      end[d] = start[d] + (c > 0 ? c + cluster.kernel_overhead : 0.0);
    }
    std::fill(arrival.begin(), arrival.end(), 0.0);
    for (const Transfer* t : by_launch[s]) {
      const auto src = static_cast<std::size_t>(t->src);
      const auto dst = static_cast<std::size_t>(t->dst);
      // A wait completes when the launch's sends have completed too, so the sender waits as well.
      const double done = std::max(start[src] + launch_setup[s * devices + src],
                                   start[dst] + launch_setup[s * devices + dst]) +
                          link_seconds(s, *t);
      arrival[dst] = std::max(arrival[dst], done);
      arrival[src] = std::max(arrival[src], done);
    }
  }
  for (std::size_t d = 0; d < devices; ++d) {
    result.seconds = std::max(result.seconds, std::max(end[d], arrival[d]));
  }
  return result;
}

}  // namespace dcp

// SPDX-License-Identifier: Apache-2.0
// dcp's budgeted greedy stage scheduler.
#include "dcp/planner/schedule/stage_scheduler.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <optional>
#include <string>
#include <unordered_set>

#include "dcp/core/error.h"

namespace dcp {

void validate(const ScheduleOptions& options) {
  if (options.fetch_launches < 0 || options.fetch_launches > 64) {
    throw InvalidInput("stages must be in [0, 64] (0: chosen by the cost model), got " +
                       std::to_string(options.fetch_launches));
  }
  if (options.max_fetch_launches < 1 || options.max_fetch_launches > 64) {
    throw InvalidInput("the most stages to try must be in [1, 64], got " +
                       std::to_string(options.max_fetch_launches));
  }
  if (options.structured_stage_parts < 0 || options.structured_stage_parts > 64) {
    throw InvalidInput(
        "structured stage parts must be in [0, 64] (0: chosen by the cost model), "
        "got " +
        std::to_string(options.structured_stage_parts));
  }
}

namespace {

constexpr std::int32_t kPending = -1;
constexpr std::int32_t kNever = std::numeric_limits<std::int32_t>::max();

// Dense value index: q-side values first (block * head blocks + head block), then kv values.
struct ValueIndex {
  std::int32_t head_blocks = 0;
  std::int32_t kv_head_blocks = 0;
  std::int32_t q_values = 0;

  std::int32_t of(const ValueKey& value) const {
    return value.kind == SlotKind::kKV ? q_values + value.block * kv_head_blocks + value.head_block
                                       : value.block * head_blocks + value.head_block;
  }
};

// What does not change between runs with different S.
struct Problem {
  const Workload* workload = nullptr;
  const Placement* placement = nullptr;
  const ClusterSpec* cluster = nullptr;
  Pass pass = Pass::kForward;
  ValueIndex index;
  std::vector<ValueKey> value_key;            // per dense value
  std::vector<DeviceId> value_owner;          // per dense value
  std::vector<double> value_intra_seconds;    // bytes over the intra-node bandwidth
  std::vector<double> value_inter_seconds;    // bytes over one network interface's bandwidth
  std::vector<std::int32_t> device_nic;       // the network interface each device uses
  std::vector<std::int32_t> unit_q, unit_kv;  // dense values per work unit
  std::vector<double> unit_cost;
  std::vector<std::vector<WorkUnitId>> device_units;  // heaviest first
  std::vector<std::vector<std::int32_t>> kept;        // per device: dense values kept, sorted
  // The greedy's state per (device, value) and per (node, value) is kept for the values that
  // the device's (the node's) work units read only, numbered in one flat table each, so that
  // its look-ups, millions a plan, index arrays rather than hash tables: per work unit, the
  // entries of its q and kv values in its device's and its node's table.
  std::vector<std::int32_t> unit_q_entry, unit_kv_entry;
  std::vector<std::int32_t> unit_q_node_entry, unit_kv_node_entry;
  std::int32_t device_entries = 0, node_entries = 0;
  std::vector<std::int32_t> kept_entries;  // the device table's entries of kept values
  double comm_lower_bound = 0;             // seconds
  bool any_remote = false;
};

// Numbers the values the work units of each group (a device, or a node: consecutive devices)
// read: for every unit, its q and kv values' entries in one flat table where each group's values
// are consecutive. `group_of` maps a device to its group; returns the table's size.
template <typename GroupOf>
std::int32_t number_values(Problem& p, const GroupOf& group_of, std::vector<std::int32_t>& q_entry,
                           std::vector<std::int32_t>& kv_entry,
                           std::vector<std::int32_t>* kept_entries) {
  q_entry.assign(p.unit_q.size(), 0);
  kv_entry.assign(p.unit_kv.size(), 0);
  std::vector<std::int32_t> entry(p.value_key.size(), -1);
  std::vector<std::int32_t> touched;
  std::int32_t next = 0;
  const auto number = [&](std::int32_t v) {
    auto& e = entry[static_cast<std::size_t>(v)];
    if (e < 0) {
      e = next++;
      touched.push_back(v);
    }
    return e;
  };
  for (std::size_t d = 0; d < p.device_units.size(); ++d) {
    if (d > 0 && group_of(static_cast<DeviceId>(d)) != group_of(static_cast<DeviceId>(d - 1))) {
      for (const std::int32_t v : touched) entry[static_cast<std::size_t>(v)] = -1;
      touched.clear();
    }
    for (const WorkUnitId w : p.device_units[d]) {
      const auto i = static_cast<std::size_t>(w);
      q_entry[i] = number(p.unit_q[i]);
      kv_entry[i] = number(p.unit_kv[i]);
    }
    if (kept_entries != nullptr) {
      // Kept values no unit of the device reads are never looked up.
      for (const std::int32_t v : p.kept[d]) {
        if (entry[static_cast<std::size_t>(v)] >= 0) {
          kept_entries->push_back(entry[static_cast<std::size_t>(v)]);
        }
      }
    }
  }
  return next;
}

Problem make_problem(const Workload& workload, const Placement& placement,
                     const ClusterSpec& cluster, const PlanHeader& header, Pass pass,
                     const KeptKv* kept) {
  Problem p;
  p.workload = &workload;
  p.placement = &placement;
  p.cluster = &cluster;
  p.pass = pass;
  const BlockLayout& blocks = workload.blocks();
  p.index.head_blocks = workload.heads().count();
  p.index.kv_head_blocks = workload.heads().kv_count();
  p.index.q_values = blocks.block_count() * p.index.head_blocks;
  const std::int64_t value_count =
      std::int64_t{p.index.q_values} + std::int64_t{blocks.block_count()} * p.index.kv_head_blocks;
  if (value_count > std::numeric_limits<std::int32_t>::max()) {
    throw InvalidInput("too many (token block, head block) values to schedule: " +
                       std::to_string(value_count) + "; use larger blocks");
  }
  const auto values = static_cast<std::int32_t>(value_count);
  p.value_key.resize(static_cast<std::size_t>(values));
  p.value_owner.resize(static_cast<std::size_t>(values));
  p.value_intra_seconds.resize(static_cast<std::size_t>(values));
  p.value_inter_seconds.resize(static_cast<std::size_t>(values));
  for (BlockId b = 0; b < blocks.block_count(); ++b) {
    const auto add = [&](ValueKey key) {
      const auto v = static_cast<std::size_t>(p.index.of(key));
      const auto bytes = static_cast<double>(value_bytes(header, key.kind, blocks.block(b).tokens));
      p.value_key[v] = key;
      p.value_owner[v] = placement.token_block_device[static_cast<std::size_t>(b)];
      p.value_intra_seconds[v] = bytes / cluster.intra_node_bandwidth;
      p.value_inter_seconds[v] = bytes / cluster.nic_bandwidth();
    };
    for (std::int32_t h = 0; h < p.index.head_blocks; ++h) add({query_kind(pass), b, h});
    for (std::int32_t g = 0; g < p.index.kv_head_blocks; ++g) add({SlotKind::kKV, b, g});
  }
  const auto units = static_cast<std::size_t>(workload.work_unit_count());
  p.unit_q.resize(units);
  p.unit_kv.resize(units);
  p.unit_cost.resize(units);
  p.device_units.resize(static_cast<std::size_t>(placement.cluster.devices()));
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    const WorkUnit unit = workload.work_unit(w);
    const auto i = static_cast<std::size_t>(w);
    p.unit_q[i] = p.index.of(query_value(workload, pass, unit));
    p.unit_kv[i] = p.index.of(key_value(workload, unit));
    p.unit_cost[i] = unit_seconds(workload, cluster, pass, unit);
    p.device_units[static_cast<std::size_t>(placement.work_unit_device[i])].push_back(w);
  }
  for (auto& list : p.device_units) {
    std::stable_sort(list.begin(), list.end(), [&](WorkUnitId a, WorkUnitId b) {
      return p.unit_cost[static_cast<std::size_t>(a)] > p.unit_cost[static_cast<std::size_t>(b)];
    });
  }
  p.kept.resize(p.device_units.size());
  if (kept != nullptr && pass == Pass::kBackward) {
    for (std::size_t d = 0; d < p.kept.size(); ++d) {
      for (const KeptValue& value : kept->per_device[d]) {
        p.kept[d].push_back(p.index.of({value.kind, value.block, value.head_block}));
      }
      std::sort(p.kept[d].begin(), p.kept[d].end());
    }
  }
  // The least time communication can take: every remote input reaching its device once, the
  // owner's network interface sending each value once per node that needs it, and each node's
  // interfaces together receiving it once.
  const ClusterShape& shape = placement.cluster;
  ClusterSpec spec = cluster;
  spec.shape = shape;
  p.device_nic.resize(static_cast<std::size_t>(shape.devices()));
  for (DeviceId d = 0; d < shape.devices(); ++d) {
    p.device_nic[static_cast<std::size_t>(d)] = spec.nic_of(d);
  }
  std::vector<double> recv(static_cast<std::size_t>(shape.devices()), 0.0);
  std::vector<double> send(recv.size(), 0.0);
  std::vector<double> nic_recv(static_cast<std::size_t>(shape.nodes), 0.0);
  std::vector<double> nic_send(
      static_cast<std::size_t>(shape.nodes) * static_cast<std::size_t>(cluster.nics_per_node), 0.0);
  std::unordered_set<std::int64_t> seen;
  for (DeviceId d = 0; d < shape.devices(); ++d) {
    for (const WorkUnitId w : p.device_units[static_cast<std::size_t>(d)]) {
      for (const std::int32_t v :
           {p.unit_q[static_cast<std::size_t>(w)], p.unit_kv[static_cast<std::size_t>(w)]}) {
        const auto vi = static_cast<std::size_t>(v);
        const DeviceId owner = p.value_owner[vi];
        if (owner == d) continue;
        const auto& kept_here = p.kept[static_cast<std::size_t>(d)];
        if (std::binary_search(kept_here.begin(), kept_here.end(), v)) continue;
        p.any_remote = true;
        if (shape.node_of(owner) == shape.node_of(d)) {
          if (!seen.insert(std::int64_t{d} * values + v).second) continue;
          recv[static_cast<std::size_t>(d)] += p.value_intra_seconds[vi];
          send[static_cast<std::size_t>(owner)] += p.value_intra_seconds[vi];
        } else {
          const std::int64_t key = -1 - (std::int64_t{shape.node_of(d)} * values + v);
          if (!seen.insert(key).second) continue;
          nic_recv[static_cast<std::size_t>(shape.node_of(d))] +=
              p.value_inter_seconds[vi] / cluster.nics_per_node;
          nic_send[static_cast<std::size_t>(p.device_nic[static_cast<std::size_t>(owner)])] +=
              p.value_inter_seconds[vi];
        }
      }
    }
  }
  for (const auto* list : {&recv, &send, &nic_recv, &nic_send}) {
    for (const double t : *list) p.comm_lower_bound = std::max(p.comm_lower_bound, t);
  }
  p.device_entries = number_values(
      p, [](DeviceId d) { return d; }, p.unit_q_entry, p.unit_kv_entry, &p.kept_entries);
  p.node_entries = number_values(
      p, [&](DeviceId d) { return shape.node_of(d); }, p.unit_q_node_entry, p.unit_kv_node_entry,
      nullptr);
  return p;
}

// One run of the greedy for a given S. Capped: a budgeted stage takes at most a 1/S share of the
// largest device's pending compute on any device (one unit at least), so that every stage ends at
// about the same time on all devices, as a ring's steps do. Where devices exchange inputs, each
// stage waits for the devices that send to it, so a pass takes about the sum over stages of the
// busiest device's stage: a stage that one device fills while others have no inputs yet lengthens
// the pass by what it holds beyond the others.
class Greedy {
 public:
  Greedy(const Problem& problem, std::int32_t fetch_launches, bool capped)
      : p_(problem),
        shape_(problem.placement->cluster),
        s_(fetch_launches),
        nics_(shape_.nodes * problem.cluster->nics_per_node) {
    const auto devices = static_cast<std::size_t>(shape_.devices());
    stage_.assign(problem.unit_cost.size(), kPending);
    usable_.assign(static_cast<std::size_t>(problem.device_entries), kNever);
    node_holder_.assign(static_cast<std::size_t>(problem.node_entries), kNoHolder);
    pending_.resize(devices);
    for (const std::int32_t entry : p_.kept_entries) usable_[static_cast<std::size_t>(entry)] = 0;
    for (std::size_t d = 0; d < devices; ++d) {
      for (const WorkUnitId w : p_.device_units[d]) {
        const auto i = static_cast<std::size_t>(w);
        if (usable(static_cast<DeviceId>(d), p_.unit_q[i], p_.unit_q_entry[i]) == 0 &&
            usable(static_cast<DeviceId>(d), p_.unit_kv[i], p_.unit_kv_entry[i]) == 0) {
          assign(w, static_cast<DeviceId>(d), 0);
        } else {
          pending_[d].push_back(w);
          ++remaining_;
        }
      }
    }
    if (capped) {
      double largest = 0;
      for (const auto& list : pending_) {
        double pending = 0;
        for (const WorkUnitId w : list) pending += p_.unit_cost[static_cast<std::size_t>(w)];
        largest = std::max(largest, pending);
      }
      stage_cap_ = largest / s_ * 1.05;  // a little slack: units do not divide evenly
    }
  }

  PassSchedule run() {
    for (std::int32_t launch = 0; remaining_ > 0; ++launch) {
      const bool budgeted = launch < s_ - 1;
      const std::int64_t before = remaining_;
      fill_launch(launch, budgeted);
      if (!budgeted && remaining_ == before) {
        throw Error("scheduler made no progress at launch " + std::to_string(launch));
      }
    }
    PassSchedule schedule;
    schedule.pass = p_.pass;
    schedule.stages = last_stage_ + 1;
    schedule.unit_stage = stage_;
    schedule.transfers = std::move(transfers_);
    return schedule;
  }

 private:
  // Stage from which value v, at `entry` of device d's table, can be used on d (kNever if it is
  // not coming).
  std::int32_t usable(DeviceId d, std::int32_t v, std::int32_t entry) const {
    if (p_.value_owner[static_cast<std::size_t>(v)] == d) return 0;
    return usable_[static_cast<std::size_t>(entry)];
  }

  void assign(WorkUnitId w, DeviceId d, std::int32_t stage) {
    stage_[static_cast<std::size_t>(w)] = stage;
    last_stage_ = std::max(last_stage_, stage);
    if (stage >= static_cast<std::int32_t>(compute_.size() / shape_devices())) {
      compute_.resize(static_cast<std::size_t>(stage + 1) * shape_devices(), 0.0);
    }
    compute_[static_cast<std::size_t>(stage) * shape_devices() + static_cast<std::size_t>(d)] +=
        p_.unit_cost[static_cast<std::size_t>(w)];
    if (stage > 0) --remaining_;
  }

  // A node's holder of a value from another node, packed: device x kHolderStages + the stage it
  // is usable from there (at most 64 fetch launches plus a relay's).
  static constexpr std::int32_t kHolderStages = 128;
  static std::int32_t holder(DeviceId device, std::int32_t stage) {
    assert(stage < kHolderStages);
    return device * kHolderStages + stage;
  }
  static constexpr std::int32_t kNoHolder = -1;

  std::size_t shape_devices() const { return static_cast<std::size_t>(shape_.devices()); }
  // Whether unit w fits device d's stage under the cap (always true uncapped, in
  // unbudgeted launches, and for a stage's first unit).
  bool under_cap(WorkUnitId w, DeviceId d, std::int32_t stage, bool budgeted) const {
    const double now = compute(stage, d);
    return !budgeted || now == 0 || now + p_.unit_cost[static_cast<std::size_t>(w)] <= stage_cap_;
  }
  std::int32_t nic(DeviceId d) const { return p_.device_nic[static_cast<std::size_t>(d)]; }
  double compute(std::int32_t stage, DeviceId d) const {
    const std::size_t i =
        static_cast<std::size_t>(stage) * shape_devices() + static_cast<std::size_t>(d);
    return i < compute_.size() ? compute_[i] : 0.0;
  }

  struct Fetch {
    std::int32_t value;
    DeviceId src;
    bool inter_node;
    std::int32_t entry;       // in the device table
    std::int32_t node_entry;  // in the node table
  };

  // The transfers unit w on device d needs in `launch`, or false if one of its inputs cannot
  // arrive by stage launch + 1 (it reaches d's node in this very launch and must be relayed).
  bool plan_fetch(WorkUnitId w, DeviceId d, std::int32_t launch, std::vector<Fetch>& out) const {
    out.clear();
    const auto i = static_cast<std::size_t>(w);
    for (const bool q : {true, false}) {
      const std::int32_t v = q ? p_.unit_q[i] : p_.unit_kv[i];
      const std::int32_t entry = q ? p_.unit_q_entry[i] : p_.unit_kv_entry[i];
      const std::int32_t node_entry = q ? p_.unit_q_node_entry[i] : p_.unit_kv_node_entry[i];
      if (usable(d, v, entry) <= launch + 1) continue;
      const DeviceId owner = p_.value_owner[static_cast<std::size_t>(v)];
      if (shape_.node_of(owner) == shape_.node_of(d)) {
        out.push_back({v, owner, false, entry, node_entry});
        continue;
      }
      const std::int32_t held = node_holder_[static_cast<std::size_t>(node_entry)];
      if (held == kNoHolder) {
        out.push_back({v, owner, true, entry, node_entry});
      } else if (held % kHolderStages <= launch) {
        out.push_back({v, held / kHolderStages, false, entry, node_entry});
      } else {
        return false;
      }
    }
    return true;
  }

  // Whether the fetches fit the launch's budget on every link side they use: the sender's and
  // the receiver's intra-node link, or the network interfaces the two devices use.
  bool fits(const std::vector<Fetch>& fetches, DeviceId d, double budget) const {
    struct Use {
      const std::vector<double>* load;
      std::size_t index;
      double seconds;
    };
    Use uses[4];
    std::size_t count = 0;
    const auto add = [&](const std::vector<double>& load, std::int32_t index, double seconds) {
      for (std::size_t u = 0; u < count; ++u) {
        if (uses[u].load == &load && uses[u].index == static_cast<std::size_t>(index)) {
          uses[u].seconds += seconds;
          return;
        }
      }
      assert(count < std::size(uses));  // at most two fetches, two link sides each
      uses[count++] = {&load, static_cast<std::size_t>(index), seconds};
    };
    for (const Fetch& f : fetches) {
      const auto v = static_cast<std::size_t>(f.value);
      if (f.inter_node) {
        add(nic_send_, nic(f.src), p_.value_inter_seconds[v]);
        add(nic_recv_, nic(d), p_.value_inter_seconds[v]);
      } else {
        add(intra_send_, f.src, p_.value_intra_seconds[v]);
        add(intra_recv_, d, p_.value_intra_seconds[v]);
      }
    }
    for (std::size_t u = 0; u < count; ++u) {
      if ((*uses[u].load)[uses[u].index] + uses[u].seconds > budget) return false;
    }
    return true;
  }

  void commit(const std::vector<Fetch>& fetches, DeviceId d, std::int32_t launch) {
    for (const Fetch& f : fetches) {
      const auto v = static_cast<std::size_t>(f.value);
      if (f.inter_node) {
        nic_send_[static_cast<std::size_t>(nic(f.src))] += p_.value_inter_seconds[v];
        nic_recv_[static_cast<std::size_t>(nic(d))] += p_.value_inter_seconds[v];
        node_holder_[static_cast<std::size_t>(f.node_entry)] = holder(d, launch + 1);
      } else {
        intra_send_[static_cast<std::size_t>(f.src)] += p_.value_intra_seconds[v];
        intra_recv_[static_cast<std::size_t>(d)] += p_.value_intra_seconds[v];
      }
      usable_[static_cast<std::size_t>(f.entry)] = launch + 1;
      transfers_.push_back({p_.value_key[v], f.src, d, launch});
    }
  }

  // A device's turn in a launch: the least compute in the stage goes first, then the lower id.
  struct Turn {
    double compute;
    DeviceId device;
  };
  // Whether a goes after b (the heap's order, a min-heap under std's max-heap functions).
  static bool after(const Turn& a, const Turn& b) {
    return a.compute > b.compute || (a.compute == b.compute && a.device > b.device);
  }
  // Restores the heap after its top's compute rose.
  static void sift_down(std::vector<Turn>& heap) {
    std::size_t i = 0;
    for (;;) {
      const std::size_t left = 2 * i + 1;
      if (left >= heap.size()) return;
      std::size_t first = left;
      if (left + 1 < heap.size() && after(heap[left], heap[left + 1])) first = left + 1;
      if (!after(heap[i], heap[first])) return;
      std::swap(heap[i], heap[first]);
      i = first;
    }
  }

  void fill_launch(std::int32_t launch, bool budgeted) {
    const std::size_t devices = shape_devices();
    intra_send_.assign(devices, 0.0);
    intra_recv_.assign(devices, 0.0);
    nic_send_.assign(static_cast<std::size_t>(nics_), 0.0);
    nic_recv_.assign(nic_send_.size(), 0.0);
    double budget = std::numeric_limits<double>::infinity();
    if (budgeted) {
      double stage_compute = 0;
      for (DeviceId d = 0; d < shape_.devices(); ++d) {
        stage_compute = std::max(stage_compute, compute(launch, d));
      }
      budget = std::max(stage_compute, p_.comm_lower_bound / s_);
    }
    const std::int32_t stage = launch + 1;
    // The device with the least compute in the stage takes the next unit (a min-heap of
    // (compute, device)); the one that took it stays at the top with its compute raised and sinks,
    // one sift rather than a pop and a push.
    std::vector<Turn> turn;
    std::vector<std::size_t> cursor(devices, 0);
    for (DeviceId d = 0; d < shape_.devices(); ++d) {
      if (!pending_[static_cast<std::size_t>(d)].empty()) turn.push_back({compute(stage, d), d});
    }
    std::make_heap(turn.begin(), turn.end(), after);
    std::vector<Fetch> fetches;
    while (!turn.empty()) {
      const DeviceId d = turn.front().device;
      const auto& list = pending_[static_cast<std::size_t>(d)];
      std::size_t& c = cursor[static_cast<std::size_t>(d)];
      bool took = false;
      for (; c < list.size(); ++c) {
        // Pending at the launch's start, and only this cursor takes the device's units.
        const WorkUnitId w = list[c];
        assert(stage_[static_cast<std::size_t>(w)] == kPending);
        if (!under_cap(w, d, stage, budgeted)) continue;
        if (!plan_fetch(w, d, launch, fetches) || !fits(fetches, d, budget)) continue;
        commit(fetches, d, launch);
        assign(w, d, stage);
        ++c;
        took = true;
        break;
      }
      if (took) {
        turn.front().compute = compute(stage, d);
        sift_down(turn);
      } else {
        std::pop_heap(turn.begin(), turn.end(), after);
        turn.pop_back();
      }
    }
    // Units whose inputs all arrive by now, fetched for others, join this stage too (within the
    // cap: those left over need no transfer later).
    for (DeviceId d = 0; d < shape_.devices(); ++d) {
      auto& list = pending_[static_cast<std::size_t>(d)];
      std::size_t kept = 0;
      for (const WorkUnitId w : list) {
        const auto i = static_cast<std::size_t>(w);
        if (stage_[i] == kPending && usable(d, p_.unit_q[i], p_.unit_q_entry[i]) <= stage &&
            usable(d, p_.unit_kv[i], p_.unit_kv_entry[i]) <= stage &&
            under_cap(w, d, stage, budgeted)) {
          assign(w, d, stage);
        }
        if (stage_[i] == kPending) list[kept++] = w;
      }
      list.resize(kept);
    }
  }

  const Problem& p_;
  ClusterShape shape_;
  std::int32_t s_;
  std::int32_t nics_;  // network interfaces, all nodes'
  std::vector<std::int32_t> stage_;
  std::vector<std::int32_t> usable_;  // per device table entry: the stage usable from
  // Per node table entry: holder(the device that received the value from another node, the
  // stage it is usable from there), or kNoHolder.
  std::vector<std::int32_t> node_holder_;
  std::vector<std::vector<WorkUnitId>> pending_;
  std::vector<double> compute_;                                        // stage-major, per device
  std::vector<double> intra_send_, intra_recv_, nic_send_, nic_recv_;  // this launch, seconds
  std::vector<Transfer> transfers_;
  std::int64_t remaining_ = 0;
  std::int32_t last_stage_ = 0;
  double stage_cap_ = std::numeric_limits<double>::infinity();  // seconds per device and stage
};

}  // namespace

ScheduledPass schedule_pass(const Workload& workload, const Placement& placement,
                            const ClusterSpec& cluster, const PlanHeader& header, Pass pass,
                            const ScheduleOptions& options, const KeptKv* kept) {
  validate(options);
  validate(placement, workload);
  const Problem problem = make_problem(workload, placement, cluster, header, pass, kept);
  ScheduledPass best;
  bool have = false;
  const bool choose = options.fetch_launches == 0;
  const std::int32_t first = choose ? 1 : options.fetch_launches;
  const std::int32_t last = !problem.any_remote ? first
                            : choose            ? options.max_fetch_launches
                                                : options.fetch_launches;
  for (std::int32_t s = first; s <= last && (!have || s - best.fetch_launches <= kStagesPastKept);
       ++s) {
    for (const bool balanced : {false, true}) {
      // With one launch, every stage after 0 is unbudgeted: the cap changes nothing.
      const bool wanted = balanced ? options.balance != StageBalance::kUncapped &&
                                         (s > 1 || options.balance == StageBalance::kCapped)
                                   : options.balance != StageBalance::kCapped;
      if (!wanted) continue;
      Greedy greedy(problem, s, balanced);
      ScheduledPass candidate;
      candidate.schedule = greedy.run();
      add_partial_transfers(workload, placement, candidate.schedule, PartialRouting::kReduceInNode);
      candidate.estimate = estimate(workload, placement, cluster, header, candidate.schedule);
      candidate.fetch_launches = s;
      candidate.balanced = balanced;
      // A longer pipeline, or a balanced one, must beat the one before by more than noise in the
      // model.
      if (!have || candidate.estimate.seconds < best.estimate.seconds * kEstimateGainShare) {
        best = std::move(candidate);
        have = true;
      }
    }
  }
  if (pass == Pass::kBackward && options.own_outputs_last) {
    // The kept schedule with own outputs last (its transfers, partials included, unchanged).
    best.own_outputs_last = keep_own_outputs_last_if_faster(workload, placement, cluster, header,
                                                            best.schedule, best.estimate, 0);
  }
  return best;
}

}  // namespace dcp

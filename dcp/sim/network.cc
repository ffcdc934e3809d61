// SPDX-License-Identifier: Apache-2.0
// Link classes and their max-min fair rates, event by event.
#include "dcp/sim/network.h"

#include <algorithm>
#include <limits>
#include <string>

#include "dcp/core/error.h"

namespace dcp::sim {
namespace {

constexpr double kNoEvent = std::numeric_limits<double>::infinity();

std::size_t index_of(std::int32_t id) { return static_cast<std::size_t>(id); }

}  // namespace

Network::Network(const CostModel& cost)
    : cost_(cost),
      devices_(static_cast<std::size_t>(cost.spec().shape.devices())),
      nics_(static_cast<std::size_t>(cost.spec().shape.nodes) *
            static_cast<std::size_t>(cost.spec().nics_per_node)),
      link_bytes_(cost.spec()) {
  const std::size_t resources = 2 * devices_ + 2 * nics_;
  capacity_.resize(resources);
  resource_classes_.resize(resources);
  resource_seen_.assign(resources, 0);
  local_resource_.assign(resources, 0);
  class_index_.assign(resources * resources, -1);
  for (std::size_t r = 0; r < resources; ++r) capacity_[r] = cost_.bandwidth(r >= 2 * devices_);
}

bool Network::step(const std::vector<TransferEvent>& transfers, double& now,
                   std::vector<std::int32_t>& ended) {
  double next = pending_.empty() ? kNoEvent : pending_.top().first;
  std::size_t ending = classes_.size();
  for (const std::size_t c : active_) {
    const double rate = rate_[c];
    if (rate <= 0) continue;
    const double t = now + std::max(0.0, next_end_[c] - served_[c]) / rate;
    if (t < next) {
      next = t;
      ending = c;
    }
  }
  if (next == kNoEvent) return false;
  const double elapsed = next - now;
  now = next;
  // Transfers that end now: the class that set `next`, and any within rounding of it (each
  // class brought to `now` first).
  ended.clear();
  for (const std::size_t c : active_) {
    const double served = served_[c] += rate_[c] * elapsed;
    if (c != ending && next_end_[c] - served > 1e-9 * next_end_[c] + 1e-6) continue;
    LinkClass& link = classes_[c];
    while (!link.ends.empty() &&
           (c == ending || link.ends.top().first - served <= 1e-9 * link.ends.top().first + 1e-6)) {
      ended.push_back(link.ends.top().second);
      link.remove_message(message_of(transfers[index_of(link.ends.top().second)]));
      link.ends.pop();
      changed_.push_back(c);
      if (c == ending) ending = classes_.size();  // only its first is forced
    }
    next_end_[c] = link.ends.empty() ? kNoEvent : link.ends.top().first;
  }
  std::erase_if(active_, [&](std::size_t c) {
    if (!classes_[c].ends.empty()) return false;
    for (const std::size_t r : {classes_[c].first, classes_[c].second}) {
      std::vector<std::size_t>& on = resource_classes_[r];
      on.erase(std::find(on.begin(), on.end(), c));
    }
    return true;
  });
  while (!pending_.empty() && pending_.top().first <= now) {
    const std::int32_t id = pending_.top().second;
    pending_.pop();
    const TransferEvent& transfer = transfers[index_of(id)];
    if (transfer.bytes == 0) {
      ended.push_back(id);
      continue;
    }
    const std::size_t c = class_of(transfer);
    LinkClass& link = classes_[c];
    if (link.ends.empty()) {
      active_.insert(std::lower_bound(active_.begin(), active_.end(), c), c);
      resource_classes_[link.first].push_back(c);
      resource_classes_[link.second].push_back(c);
    }
    link.add_message(message_of(transfer));
    changed_.push_back(c);
    link.ends.push(
        {served_[c] + link_bytes_(transfer.bytes, transfer.inter_node, transfer.message_bytes),
         id});
    next_end_[c] = link.ends.top().first;
  }
  allocate();
  std::sort(ended.begin(), ended.end());
  return true;
}

std::int64_t Network::message_of(const TransferEvent& transfer) const {
  const auto devices = static_cast<std::int64_t>(devices_);
  return (std::int64_t{transfer.src_instruction} * devices + transfer.src) * devices + transfer.dst;
}

std::size_t Network::class_of(const TransferEvent& transfer) {
  const std::size_t devices = devices_;
  std::size_t a = 0, b = 0;
  if (transfer.inter_node) {
    a = 2 * devices + index_of(cost_.spec().nic_of(transfer.src));
    b = 2 * devices + nics_ + index_of(cost_.spec().nic_of(transfer.dst));
  } else {
    a = index_of(transfer.src);
    b = devices + index_of(transfer.dst);
  }
  std::int32_t& index = class_index_[a * capacity_.size() + b];
  if (index < 0) {
    index = static_cast<std::int32_t>(classes_.size());
    LinkClass link;
    link.first = a;
    link.second = b;
    link.cap = cost_.spec().stream_bandwidth(transfer.inter_node);
    classes_.push_back(std::move(link));
    served_.push_back(0.0);
    rate_.push_back(0.0);
    next_end_.push_back(kNoEvent);
  }
  return static_cast<std::size_t>(index);
}

void Network::allocate() {
  // A class's rate depends only on the classes it shares link sides with, directly or through
  // others: its component. Only the components of classes that changed are solved again, each on
  // its own, so an event inside one node costs that node's links alone.
  if (++epoch_ == 0) {  // wrapped: no mark may look current
    std::fill(resource_seen_.begin(), resource_seen_.end(), 0);
    std::fill(class_seen_.begin(), class_seen_.end(), 0);
    epoch_ = 1;
  }
  class_seen_.resize(classes_.size(), 0);
  std::vector<std::size_t>& resources = scratch_resources_;
  std::vector<std::size_t>& members = scratch_members_;
  const auto reach = [&](const LinkClass& link) {
    for (const std::size_t r : {link.first, link.second}) {
      if (resource_seen_[r] == epoch_) continue;
      resource_seen_[r] = epoch_;
      resources.push_back(r);
    }
  };
  for (const std::size_t changed : changed_) {
    if (class_seen_[changed] == epoch_) continue;
    resources.clear();
    members.clear();
    reach(classes_[changed]);
    for (std::size_t next = 0; next < resources.size(); ++next) {
      for (const std::size_t c : resource_classes_[resources[next]]) {
        if (class_seen_[c] == epoch_) continue;
        class_seen_[c] = epoch_;
        members.push_back(c);
        reach(classes_[c]);
      }
    }
    class_seen_[changed] = epoch_;  // one that ended its last transfer has no component left
    if (members.empty()) continue;
    // The solver's ties go to the lower resource, and its rounding follows class order: both
    // as over the whole network.
    std::sort(resources.begin(), resources.end());
    std::sort(members.begin(), members.end());
    std::vector<double>& capacity = scratch_capacity_;
    capacity.clear();
    for (std::size_t i = 0; i < resources.size(); ++i) {
      local_resource_[resources[i]] = i;
      capacity.push_back(capacity_[resources[i]]);
    }
    std::vector<FairShareClass>& solved = scratch_classes_;
    solved.clear();
    for (const std::size_t c : members) {
      const LinkClass& link = classes_[c];
      const auto n = static_cast<double>(link.ends.size());
      // Its cap per transfer: its messages' caps shared by their transfers.
      solved.push_back({local_resource_[link.first], local_resource_[link.second], n,
                        link.cap * static_cast<double>(link.messages.size()) / n});
    }
    fair_share_.solve(capacity, solved, scratch_rates_);
    for (std::size_t i = 0; i < members.size(); ++i) rate_[members[i]] = scratch_rates_[i];
  }
  changed_.clear();
}

double exchange_seconds(const std::vector<std::int64_t>& bytes, const ClusterSpec& cluster) {
  // The network's prices need no plan: latency, set-up and links come from the spec alone.
  const CostModel cost(cluster, PlanHeader{});
  const ClusterShape& shape = cluster.shape;
  const auto devices = static_cast<std::size_t>(shape.devices());
  if (bytes.size() != devices * devices) {
    throw InvalidInput("an exchange over " + std::to_string(devices) + " devices needs " +
                       std::to_string(devices * devices) + " byte counts, got " +
                       std::to_string(bytes.size()));
  }
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] < 0) {
      throw InvalidInput("an exchange cannot move " + std::to_string(bytes[i]) +
                         " bytes from device " + std::to_string(i / devices) + " to device " +
                         std::to_string(i % devices));
    }
  }
  // Distinct peers per device, whether it sends to them, receives from them or both.
  std::vector<std::int64_t> peers(devices, 0);
  for (std::size_t a = 0; a < devices; ++a) {
    for (std::size_t b = 0; b < devices; ++b) {
      if (a != b && (bytes[a * devices + b] > 0 || bytes[b * devices + a] > 0)) ++peers[a];
    }
  }
  Network network(cost);
  std::vector<TransferEvent> transfers;
  for (std::size_t src = 0; src < devices; ++src) {
    for (std::size_t dst = 0; dst < devices; ++dst) {
      const std::int64_t moved = bytes[src * devices + dst];
      if (src == dst || moved <= 0) continue;
      TransferEvent transfer;
      transfer.src = static_cast<DeviceId>(src);
      transfer.dst = static_cast<DeviceId>(dst);
      transfer.bytes = moved;
      transfer.message_bytes = moved;
      transfer.inter_node = shape.node_of(transfer.src) != shape.node_of(transfer.dst);
      transfer.posted = std::max(cost.launch_seconds(peers[src]), cost.launch_seconds(peers[dst]));
      transfer.ready = transfer.posted + cost.latency(transfer.inter_node);
      network.add(transfer.ready, static_cast<std::int32_t>(transfers.size()));
      transfers.push_back(transfer);
    }
  }
  double now = 0;
  std::vector<std::int32_t> ended;
  while (network.step(transfers, now, ended)) {
  }
  return now;
}

}  // namespace dcp::sim
